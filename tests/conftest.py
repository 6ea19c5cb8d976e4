"""Shared fixtures: the shipped catalog, and a helper that writes broken catalog files."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from dse.catalog import Catalog, load_catalog

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog(use_env=False)


def dse_cmd(*args: str) -> list[str]:
    """The CLI as a subprocess, through the interpreter running the tests."""
    return [sys.executable, "-m", "dse.cli.main", *args]


@pytest.fixture
def clean_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("DSE_CATALOG_DIR", None)
    return env
