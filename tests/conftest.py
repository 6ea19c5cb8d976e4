"""Shared fixtures: the shipped catalog, the InferenceX reference rows, the command line in this
process (``run_dse``) and as a subprocess (``dse_cmd``), and the PostgreSQL server."""

from __future__ import annotations

import contextlib
import csv
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pytest

from dse.catalog import Catalog, load_catalog
from dse.paths import MEASURED_RUNS

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "data" / "tiny-study.toml"


@pytest.fixture(scope="session", autouse=True)
def _cache_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The session's own cache folder (the empty Optuna database new study files start from,
    ``dse/study/sqlite_seed.py``), for this process and the commands it starts: the tests leave
    the user's ``~/.cache/dse`` alone."""
    before = os.environ.get("DSE_CACHE_DIR")
    os.environ["DSE_CACHE_DIR"] = str(tmp_path_factory.mktemp("dse-cache"))
    yield
    if before is None:
        del os.environ["DSE_CACHE_DIR"]
    else:
        os.environ["DSE_CACHE_DIR"] = before


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog(use_env=False)


@pytest.fixture(scope="session")
def reference() -> list[dict[str, str]]:
    """The rows of ``reference/inferencex_calibration.csv``, the measured runs the model is calibrated on."""
    with open(MEASURED_RUNS, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture
def two_gpu_runs(tmp_path: Path, reference: list[dict[str, str]]) -> Path:
    """The measured runs of H200 and MI355X alone, as a CSV for `dse calibrate --data`: a fit of
    seconds, and two GPUs to leave out in turn."""
    rows = [r for r in reference if r["hardware"] in ("h200", "mi355x")]
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


class Result(NamedTuple):
    """What `dse` gave back: exit code, stdout, stderr."""

    code: int
    out: str
    err: str


def run_dse(*args: str | Path) -> Result:
    """`dse ARGS` in this process, as the shell would see it: the exit code (argparse's and
    ``--help``'s SystemExit included), stdout and stderr. Saves the 2-3 s of imports a fresh
    interpreter pays; tests where the process itself is the point (signals, a terminal, concurrent
    workers, start-up) use ``dse_cmd``. The environment is the test's: use the ``cli`` fixture, or
    monkeypatch, for ``DSE_CATALOG_DIR``."""
    from dse.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse errors (2), --help and --version (0)
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:  # sys.exit("message"): the interpreter prints it and exits 1
                print(exc.code, file=sys.stderr)
                code = 1
    return Result(code, out.getvalue(), err.getvalue())


Cli = Callable[..., Result]  # the type of the ``cli`` fixture


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Cli:
    """``run_dse`` with no ``DSE_CATALOG_DIR`` in the environment (the in-process ``clean_env``)."""
    monkeypatch.delenv("DSE_CATALOG_DIR", raising=False)
    monkeypatch.delenv("DSE_CALIBRATION", raising=False)
    return run_dse


@pytest.fixture(scope="session")
def _tiny_cli_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("DSE_CATALOG_DIR", raising=False)
        out = tmp_path_factory.mktemp("tiny-cli-run")
        return run_dse("study", "run", TINY, "--out", out, "--trials", "8"), out


@pytest.fixture
def tiny_cli_run(_tiny_cli_run: tuple[Result, Path], tmp_path: Path) -> Result:
    """`dse study run tests/data/tiny-study.toml --out TMP_PATH --trials 8`, exports and report
    included: what it printed, and its run folder in the test's ``tmp_path`` to change as it likes
    (one run for the session, copied)."""
    ran, out = _tiny_cli_run
    if ran.code == 0:
        shutil.copytree(out, tmp_path, dirs_exist_ok=True)
    return ran


def dse_cmd(*args: str) -> list[str]:
    """The CLI as a subprocess, through the interpreter running the tests: only where the process
    is the point (signals, a terminal, concurrent workers); elsewhere ``run_dse``."""
    return [sys.executable, "-m", "dse.cli.main", *args]


@pytest.fixture
def clean_env() -> dict[str, str]:
    """The environment for a ``dse_cmd`` subprocess, without ``DSE_CATALOG_DIR`` or ``DSE_CALIBRATION``."""
    env = dict(os.environ)
    env.pop("DSE_CATALOG_DIR", None)
    env.pop("DSE_CALIBRATION", None)
    return env


CALIBRATION_TEST = "test_calibration_is_reproducible"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The calibration's test runs last: its `dse calibrate` (about 90 s of CPU, its folds in
    processes of their own) runs meanwhile, beside the other tests (``calibration`` below)."""
    items.sort(key=lambda item: item.originalname == CALIBRATION_TEST)  # stable: the rest keep their order


@dataclass
class Calibration:
    """A `dse calibrate --out FILE` process started when the session starts."""

    proc: subprocess.Popen[bytes]
    folder: Path
    file: Path

    def result(self, timeout: float = 600) -> Result:
        """Wait for it: its exit code, stdout and stderr."""
        self.proc.wait(timeout=timeout)
        out = (self.folder / "stdout").read_text()
        return Result(self.proc.returncode, out, (self.folder / "stderr").read_text())


@pytest.fixture(scope="session", autouse=True)
def calibration(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Calibration | None]:
    """`dse calibrate` as a process of its own, started with the session when the calibration's
    test is among those selected, so that its fit overlaps the other tests; that test (last, see
    above) waits for it and checks what it wrote."""
    if not any(item.originalname == CALIBRATION_TEST for item in request.session.items):
        yield None
        return
    folder = tmp_path_factory.mktemp("calibrate")
    env = dict(os.environ)
    env.pop("DSE_CATALOG_DIR", None)
    env.pop("DSE_CALIBRATION", None)
    file = folder / "calibration.json"
    with open(folder / "stdout", "wb") as out, open(folder / "stderr", "wb") as err:
        proc = subprocess.Popen(dse_cmd("calibrate", "--out", str(file)), env=env, stdout=out, stderr=err)
    try:
        yield Calibration(proc, folder, file)
    finally:
        if proc.poll() is None:  # the session ended first (a failure with -x, Ctrl-C)
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[object]:
    """A throwaway PostgreSQL server on 127.0.0.1 for the session (``tests/pg_server.py``), database
    `dse`; its ``url`` is what SQLAlchemy and Optuna take, ``restart()`` bounces it.

    Skipped where the server binaries are missing, except in CI (CI=true), where that fails: .ci/run
    installs them, so CI always runs these tests.
    """
    import pg_server

    if pg_server.find_pg_bin_dir() is None:
        reason = "PostgreSQL server binaries not found (initdb/pg_ctl); .ci/run installs them"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    server = pg_server.PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_url(postgres_server: object) -> str:
    """The session server's URL (tests that need only the URL)."""
    return str(postgres_server.url)  # type: ignore[attr-defined]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB tmpfs, unmounted after the test."""
    where = tmp_path / "disk"
    where.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)]
    mounted = subprocess.run(mount, capture_output=True)
    if mounted.returncode != 0:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"cannot mount a tmpfs: {mounted.stderr!r}")
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
