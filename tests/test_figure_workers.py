"""The report's figure workers (dse.study.figure_workers): forked only where that is safe, the
same figures to the byte as drawn in-process, and a worker that dies, hangs or fails costs no
figure and hides no error.

The forked path runs in fresh interpreters (a test process has numpy and threads, where the
workers are not forked: that is one of the rules under test)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import TINY, Cli, Result, dse_cmd

from dse.study.figure_workers import FigureWorkers, fork_is_safe

FIGURES = ("pareto.png", "stage_breakdown.png", "hbm_residency.png", "sim_trajectory.png")


def _python(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``script`` in a fresh interpreter (workers first, as the commands start them)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_process_with_numpy_and_threads_draws_in_process(tmp_path: Path) -> None:
    """This test process has numpy (and polars) imported: no worker is forked, and a figure is
    drawn here at once."""
    import numpy as np

    from dse.study.report_figures import hbm_figure

    assert not fork_is_safe()
    with FigureWorkers() as workers:
        assert workers.forked == 0
        workers.draw(tmp_path / "hbm.png", hbm_figure, (np.array([70.0, 80.0, 90.0]),))
        assert (tmp_path / "hbm.png").read_bytes()[:4] == b"\x89PNG"  # before finish: drawn here
        workers.finish()


WORKERS_DRAW = """
    import sys
    from pathlib import Path
    from dse.study.figure_workers import FigureWorkers
    workers = FigureWorkers(NWORKERS)  # first: one thread, no numpy
    assert workers.forked == NWORKERS, workers.forked
    import numpy as np
    import polars as pl
    from dse.study.report_figures import HERE, hbm_figure, stage_figure
    from dse.study.report_grid import grid_figure, whatif_figure
    line = pl.DataFrame({"x_rate": [1.0, 2.0, 4.0], "objective_usd": [0.5, 0.4, 0.45]})
    wf = pl.DataFrame({"x_rate": [1.0, 2.0], "variant": ["b300", "b300"], "change_pct": [-4.0, 3.5]})
    jobs = [
        ("hbm.png", hbm_figure, (np.linspace(60.0, 140.0, 50),)),
        ("stage.png", stage_figure, ({"prefill": {"gemm": 3.0, "attention": 1.0}}, 7)),
        ("hbm2.png", hbm_figure, (np.full(9, 76.8),)),
        ("grid.png", grid_figure, ("rate", [], [()], [line], [1.0, 2.0, 4.0], "objective_usd", "usd")),
        ("whatif.png", whatif_figure, (wf, ["x_rate"], "objective_usd")),
    ]
    BEFORE
    for k, (name, build, args) in enumerate(jobs):
        workers.draw(Path("w") / name, build, args)
        HERE.draw(Path("here") / name, build, args)
        if k == 1:
            MIDDLE
    workers.finish()
    AFTER
    procs = list(workers._procs)
    workers.close()
    assert not any(p.is_alive() for p in procs)
"""


def _draw_script(before: str, after: str, middle: str = "pass", workers: int = 2) -> str:
    script = WORKERS_DRAW.replace("BEFORE", before).replace("AFTER", after).replace("MIDDLE", middle)
    return script.replace("NWORKERS", str(workers))


def test_workers_draw_the_same_figures_to_the_byte(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "here").mkdir()
    ran = _python(_draw_script("", "assert workers.forked == 2"), tmp_path)
    assert ran.returncode == 0, ran.stderr
    for name in ("hbm.png", "stage.png", "hbm2.png", "grid.png", "whatif.png"):
        drawn = (tmp_path / "w" / name).read_bytes()
        assert drawn[:4] == b"\x89PNG" and drawn == (tmp_path / "here" / name).read_bytes(), name


def test_a_dead_worker_s_figures_are_drawn_in_process(tmp_path: Path) -> None:
    """A worker killed before it draws: its figures are drawn by the command, the other worker
    draws its own, and the dead one is given no more."""
    (tmp_path / "w").mkdir()
    (tmp_path / "here").mkdir()
    kill = "import os, signal; os.kill(workers._procs[0].pid, signal.SIGKILL); workers._procs[0].join()"
    ran = _python(_draw_script(kill, "assert workers.forked == 1"), tmp_path)
    assert ran.returncode == 0, ran.stderr
    for name in ("hbm.png", "stage.png", "hbm2.png", "grid.png", "whatif.png"):
        assert (tmp_path / "w" / name).read_bytes() == (tmp_path / "here" / name).read_bytes(), name


def test_a_worker_that_dies_holding_a_figure_gives_it_back(tmp_path: Path) -> None:
    """Each worker handed one figure, the first stopped before it can draw its own, then killed:
    the next figure meant for it and the one it held are both drawn by the command."""
    (tmp_path / "w").mkdir()
    (tmp_path / "here").mkdir()
    stop = "import os, signal; os.kill(workers._procs[0].pid, signal.SIGSTOP)"
    kill = "os.kill(workers._procs[0].pid, signal.SIGKILL); workers._procs[0].join()"
    ran = _python(_draw_script(stop, "assert workers.forked == 1", middle=kill), tmp_path)
    assert ran.returncode == 0, ran.stderr
    for name in ("hbm.png", "stage.png", "hbm2.png", "grid.png", "whatif.png"):
        assert (tmp_path / "w" / name).read_bytes() == (tmp_path / "here" / name).read_bytes(), name


def test_a_hung_worker_s_figures_are_drawn_by_the_command(tmp_path: Path) -> None:
    """A worker that never answers (stopped) is given up after ``ANSWER_S`` (1 s here), killed,
    and its figures drawn by the command. (One worker: a second one, at the lowest priority on a
    busy machine, could take that long too.)"""
    (tmp_path / "w").mkdir()
    (tmp_path / "here").mkdir()
    stop = (
        "import os, signal, dse.study.figure_workers as fw; fw.ANSWER_S = 1.0; "
        "os.kill(workers._procs[0].pid, signal.SIGSTOP)"
    )
    ran = _python(_draw_script(stop, "assert workers.forked == 0", workers=1), tmp_path)
    assert ran.returncode == 0, ran.stderr
    for name in ("hbm.png", "stage.png", "hbm2.png", "grid.png", "whatif.png"):
        assert (tmp_path / "w" / name).read_bytes() == (tmp_path / "here" / name).read_bytes(), name


def test_a_figure_that_fails_in_a_worker_raises_its_error_and_no_report_is_left(tmp_path: Path) -> None:
    """A figure whose drawing fails raises its own error from the report, as in-process; the
    report folder is not put in place, and no temporary folder is left."""
    script = f"""
        from pathlib import Path
        from dse.study.figure_workers import FigureWorkers
        workers = FigureWorkers(2)
        assert workers.forked == 2
        import dse.study.report as report
        import dse.study.report_figures as rf
        def broken(path, feasible, drawer=rf.HERE):  # a figure whose data the drawing cannot take
            return rf._draw(drawer, path, "c", "", int, "not a number")
        report.hbm_png = broken
        from dse.study import Study
        spec = Study.load({str(TINY)!r}).spec
        try:
            objectives = [("usd_per_million_tokens", "minimize")]
            report.write_report(Path("report"), spec=spec, objectives=objectives, tables={{}}, best=None,
                                drawer=workers)
        except ValueError as exc:
            print("raised", exc)
        workers.close()
    """
    ran = _python(script, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "raised invalid literal for int()" in ran.stdout, ran.stdout
    assert not (tmp_path / "report").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".report")]


@pytest.mark.e2e
def test_the_report_command_s_workers_draw_what_the_run_drew(
    tmp_path: Path, tiny_cli_run: Result, clean_env: dict[str, str]
) -> None:
    """`dse study report` as its own process (workers forked) redraws the figures the in-process
    run drew, to the byte."""
    assert tiny_cli_run.code == 0, tiny_cli_run.err
    folder = tmp_path / "tiny-study" / "report"
    before = {name: (folder / name).read_bytes() for name in FIGURES}
    ran = subprocess.run(
        dse_cmd("study", "report", str(TINY), "--out", str(tmp_path)),
        env=clean_env,
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 0, ran.stderr
    assert {name: (folder / name).read_bytes() for name in FIGURES} == before


SIMULATE = ["simulate", "--hardware", "b200", "--rate", "4", "--isl", "1000", "--osl", "200",
            "--ttft", "2", "--tpot", "0.05", "--horizon", "900"]  # fmt: skip


def test_dse_simulate_s_worker_draws_what_the_process_draws(
    tmp_path: Path, cli: Cli, clean_env: dict[str, str]
) -> None:
    """`dse simulate --out` as its own process (its figure worker forked) writes the same
    trajectories.png, to the byte, as the command run in this process (drawn here)."""
    here = cli(*SIMULATE, "--out", tmp_path / "here")
    assert here.code == 0, here.err
    ran = subprocess.run(
        dse_cmd(*SIMULATE, "--out", str(tmp_path / "forked")), env=clean_env, capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[0] == here.out.splitlines()[0]
    png = (tmp_path / "forked" / "trajectories.png").read_bytes()
    assert png[:4] == b"\x89PNG" and png == (tmp_path / "here" / "trajectories.png").read_bytes()
