"""Start-up stays cheap: the command line imports the engine only inside the command that runs.

Each check runs in a fresh interpreter (the process is the point: what one test imported would hide
what another imports). The times themselves are measured by ``benchmarks/startup.py``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Result

HEAVY = ("pyomo", "optuna", "polars", "numba", "scipy", "matplotlib", "highspy", "sqlalchemy", "numpy")

PROBE = """
import contextlib, io, json, sys
from dse.cli.main import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        code = main({argv!r})
    except SystemExit as exc:
        code = exc.code
heavy = [m for m in {heavy!r} if m in sys.modules]
print(json.dumps({{"code": code, "out": out.getvalue(), "heavy": heavy}}))
"""


def _probe(argv: list[str], heavy: tuple[str, ...] = HEAVY, first: str = "") -> dict[str, object]:
    """`dse ARGV` in a fresh interpreter (after the statement ``first``): its exit code, output and
    which of the ``heavy`` modules it imported."""
    proc = subprocess.run(
        [sys.executable, "-c", first + "\n" + PROBE.format(argv=argv, heavy=heavy)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def test_importing_the_command_line_imports_no_heavy_library() -> None:
    code = (
        f"import sys, dse.cli.main as m; m.build_parser(); print([h for h in {HEAVY!r} if h in sys.modules])"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("argv", "shows"),
    [
        (["--help"], "study"),
        (["--version"], "dse "),
        (["catalog", "list"], "gb200-nvl72"),
        (["catalog", "show", "b200", "--json"], '"hbm"'),
        (["study", "--help"], "worker"),
        (["place", "--help"], "--topology"),
        (["predict", "--help"], "--framework"),
        (["simulate", "--help"], "--planner"),
    ],
)
def test_light_commands_import_no_heavy_library(argv: list[str], shows: str) -> None:
    res = _probe(argv)
    assert res["code"] == 0
    assert shows in str(res["out"])
    assert res["heavy"] == []


def test_a_command_that_solves_still_imports_its_engine() -> None:
    """The probe itself can see heavy imports: `dse predict` needs numpy and loads it."""
    res = _probe(["predict", "--hardware", "b200", "--json"])
    assert res["code"] == 0
    assert "numpy" in res["heavy"]  # type: ignore[operator]


def test_place_imports_neither_the_simulators_nor_their_compiler() -> None:
    """`dse place` solves and prints its power line; numba and scipy (the simulators') would add
    about 1.3 s to every answer, the largest part of a whole `dse place` process."""
    res = _probe(["place", "--hardware", "h200", "--rate", "4", "--ttft", "1", "--tpot", "0.03",
                  "--no-shadow-prices"])  # fmt: skip
    assert res["code"] == 0 and "power at load" in str(res["out"])
    assert {"pyomo", "highspy"} <= set(res["heavy"])  # type: ignore[arg-type]
    assert not {"numba", "scipy"} & set(res["heavy"])  # type: ignore[arg-type]


SCIPY_PACKAGES = ("scipy.stats", "scipy.integrate", "scipy.sparse", "scipy.spatial")


TINY = str(Path(__file__).resolve().parent / "data" / "tiny-study.toml")
PYLAB = ("matplotlib.pyplot", "matplotlib.pylab")


@pytest.fixture(scope="module")
def tiny_run_probe(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, object], Path]:
    """`dse study run` of the tiny study (two trials, its exports and report) in a fresh interpreter:
    what it answered and imported, and its --out folder. The run's trials import what a run with
    --no-export does, in the same order; the exports and the report come after and only add."""
    out = tmp_path_factory.mktemp("tiny-probe")
    argv = ["study", "run", TINY, "--trials", "2", "--out", str(out)]
    return _probe(argv, heavy=(*HEAVY, *SCIPY_PACKAGES, *PYLAB)), out


def test_commands_with_the_solver_and_the_simulators_leave_pyomos_scipy_packages_out(
    tiny_run_probe: tuple[dict[str, object], Path],
) -> None:
    """numba imports scipy to check its version, and pyomo's import hook then loaded scipy.stats,
    .integrate, .sparse and .spatial (0.5-0.8 s a process) for solvers dse never uses
    (``dse/scipy_hook.py``); each command imports its modules in its own order: `dse study run`
    here, `dse simulate` below."""
    simulate = ["simulate", "--hardware", "b200", "--rate", "4", "--isl", "1000", "--osl", "200",
                "--ttft", "2", "--tpot", "0.05", "--horizon", "900"]  # fmt: skip
    for res in (tiny_run_probe[0], _probe(simulate, heavy=HEAVY + SCIPY_PACKAGES)):
        assert res["code"] == 0
        assert {"pyomo", "numba", "scipy"} <= set(res["heavy"])  # type: ignore[arg-type]
        assert not set(SCIPY_PACKAGES) & set(res["heavy"])  # type: ignore[arg-type]


def test_a_study_runs_report_draws_without_pyomos_matplotlib_packages(
    tiny_run_probe: tuple[dict[str, object], Path],
) -> None:
    """pyomo's import hook for matplotlib imported matplotlib.pylab and its backends beside the
    pyplot the report draws with (``dse/scipy_hook.py``). A run's figures are drawn by workers
    forked before pyomo is imported (``dse.study.figure_workers``), so the run itself imports no
    matplotlib; a report drawn in a process that cannot fork them (numpy already imported, as
    the Python API's callers have it) imports pyplot beside pyomo, and still no pylab."""
    res, out = tiny_run_probe
    report = out / "tiny-study" / "report"
    assert res["code"] == 0 and (report / "report.md").is_file() and (report / "pareto.png").is_file()
    assert "pyomo" in res["heavy"] and "matplotlib.pyplot" not in res["heavy"]  # type: ignore[operator]
    argv = ["study", "report", TINY, "--out", str(out)]
    here = _probe(argv, heavy=(*HEAVY, *PYLAB), first="import numpy, pyomo.environ  # no workers")
    assert here["code"] == 0
    assert {"pyomo", "matplotlib.pyplot"} <= set(here["heavy"])  # type: ignore[arg-type]
    assert "matplotlib.pylab" not in here["heavy"]  # type: ignore[operator]


@pytest.mark.e2e
def test_export_and_report_of_a_finished_study_import_no_solver(tmp_path: Path, tiny_cli_run: Result) -> None:
    """Exports and the report read what the trials stored: no MILP is built or solved, so pyomo's
    modelling layer and HiGHS are never imported (a fresh interpreter for each command). Loading
    the simulators loads pyomo's table of deferred imports, to drop its scipy hook
    (``dse/scipy_hook.py``), and no more of pyomo. The finished study is the session's tiny run
    (conftest), its exports and report removed for these commands to write again."""
    assert tiny_cli_run.code == 0, tiny_cli_run.err
    for written in ("exports", "report"):
        shutil.rmtree(tmp_path / "tiny-study" / written)
    for command in ("export", "report"):
        res = _probe(["study", command, TINY, "--out", str(tmp_path)], heavy=(*HEAVY, "pyomo.core"))
        assert res["code"] == 0
        solver = [m for m in res["heavy"] if m in ("pyomo.core", "highspy")]  # type: ignore[union-attr]
        assert solver == [], f"dse study {command} imported {solver}"
    assert (tmp_path / "tiny-study" / "exports" / "trials" / "study=tiny-study" / "part-0.parquet").is_file()
    assert (tmp_path / "tiny-study" / "report" / "report.md").is_file()


def test_dse_simulate_draws_its_figure_in_a_worker(tmp_path: Path) -> None:
    """`dse simulate --out` hands trajectories.png to a figure worker forked at its start
    (``dse.study.figure_workers``): the command itself imports no pyplot, and the PNG is there."""
    argv = ["simulate", "--hardware", "b200", "--rate", "4", "--isl", "1000", "--osl", "200", "--ttft", "2",
            "--tpot", "0.05", "--horizon", "900", "--out", str(tmp_path / "sim")]  # fmt: skip
    res = _probe(argv, heavy=(*HEAVY, *PYLAB))
    assert res["code"] == 0
    assert "numba" in res["heavy"] and "matplotlib.pyplot" not in res["heavy"]  # type: ignore[operator]
    assert (tmp_path / "sim" / "trajectories.png").read_bytes()[:4] == b"\x89PNG"


def test_the_process_ends_with_the_command_s_code_and_all_its_output(tmp_path: Path) -> None:
    """The process's own entry ends without the interpreter's teardown (``dse.cli.main._end_at_exit``,
    after every other exit handler): the exit code is the command's, and what it printed reaches a
    file whole, as in-process; an exception that escapes ends the process as the interpreter does."""
    from conftest import run_dse

    for argv, code in ((["catalog", "list", "--json"], 0), (["catalog", "show", "no-such-id"], 2)):
        with (tmp_path / "out").open("w") as out:
            proc = subprocess.run(
                [sys.executable, "-m", "dse", *argv], stdout=out, stderr=subprocess.PIPE, text=True
            )
        here = run_dse(*argv)
        assert proc.returncode == here.code == code
        assert (tmp_path / "out").read_text() == here.out
        assert proc.stderr == here.err
    escaped = "import dse.cli.main as m, sys; m._command = lambda argv: 1 / 0; sys.exit(m.main())"
    proc = subprocess.run([sys.executable, "-c", escaped], capture_output=True, text=True)
    assert proc.returncode == 1 and "ZeroDivisionError" in proc.stderr
