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

REPO = Path(__file__).resolve().parents[1]
# the measured runs the performance model is calibrated against (beside the checkout)
INFERENCEX = REPO.parent / "shared" / "reference" / "inferencex_calibration.csv"


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog(use_env=False)


@pytest.fixture(scope="session")
def reference() -> list[dict[str, str]]:
    """The rows of ``inferencex_calibration.csv``; skipped where the reference folder is missing."""
    if not INFERENCEX.exists():
        pytest.skip(f"{INFERENCEX} is not here")
    with open(INFERENCEX, newline="", encoding="utf-8") as fh:
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
