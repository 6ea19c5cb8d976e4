"""Shared fixtures: the shipped catalog, the InferenceX reference rows, and a helper that writes
broken catalog files."""

from __future__ import annotations

import csv
import os
import sys
from collections.abc import Iterator
from pathlib import Path

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


def dse_cmd(*args: str) -> list[str]:
    """The CLI as a subprocess, through the interpreter running the tests."""
    return [sys.executable, "-m", "dse.cli.main", *args]


@pytest.fixture
def clean_env() -> dict[str, str]:
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
