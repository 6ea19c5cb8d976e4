"""Shared fixtures: the shipped catalog, the InferenceX reference rows, the command line in this
process (``run_dse``) and as a subprocess (``dse_cmd``), and the PostgreSQL server."""

from __future__ import annotations

import contextlib
import csv
import io
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from dse.catalog import Catalog, load_catalog
from dse.paths import MEASURED_RUNS

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog(use_env=False)


@pytest.fixture(scope="session")
def reference() -> list[dict[str, str]]:
    """The rows of ``reference/inferencex_calibration.csv``, the measured runs the model is calibrated on."""
    with open(MEASURED_RUNS, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


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
    return run_dse


def dse_cmd(*args: str) -> list[str]:
    """The CLI as a subprocess, through the interpreter running the tests: only where the process
    is the point (signals, a terminal, concurrent workers); elsewhere ``run_dse``."""
    return [sys.executable, "-m", "dse.cli.main", *args]


@pytest.fixture
def clean_env() -> dict[str, str]:
    """The environment for a ``dse_cmd`` subprocess, without ``DSE_CATALOG_DIR``."""
    env = dict(os.environ)
    env.pop("DSE_CATALOG_DIR", None)
    return env


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
