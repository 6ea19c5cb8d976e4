"""The study engine changes nothing of the process it runs in, nor of Optuna's or SQLAlchemy's:
not at import, not by running a study (log levels, warning filters, engine-wide listeners)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import optuna
import sqlalchemy

from dse.study import Study
from dse.study.storage import open_storage

TINY = Path(__file__).resolve().parent / "data" / "tiny-study.toml"

IMPORTS = """
import warnings
import numba, numpy, optuna, polars, pyomo.environ, scipy.sparse, scipy.special  # their own filters
from optuna.samplers._tpe import _truncnorm

log_ndtr, level, filters = _truncnorm._log_ndtr, optuna.logging.get_verbosity(), list(warnings.filters)
import dse.study.api, dse.study.runner, dse.study.tpe, dse.study.samplers, dse.study.storage
assert _truncnorm._log_ndtr is log_ndtr, "Optuna's log Phi replaced at import"
assert optuna.logging.get_verbosity() == level, "Optuna's log level set at import"
assert warnings.filters == filters, "warning filters changed at import"
"""


def test_importing_the_study_engine_changes_nothing_of_optuna_or_the_process() -> None:
    done = subprocess.run([sys.executable, "-c", IMPORTS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_run_keeps_the_warning_filters_and_optunas_log_level(tmp_path: Path) -> None:
    # what a run imports first: importing scipy's packages (pyomo does) adds a filter of scipy's
    import dse.study.runner  # noqa: F401

    optuna.logging.set_verbosity(optuna.logging.INFO)
    try:
        filters = list(warnings.filters)
        Study.load(TINY).run(out=tmp_path, trials=2)
        assert warnings.filters == filters
        assert optuna.logging.get_verbosity() == optuna.logging.INFO
    finally:
        optuna.logging.set_verbosity(optuna.logging.INFO)


def test_a_study_database_is_in_wal_mode_and_other_databases_are_left_alone(tmp_path: Path) -> None:
    ours = open_storage(f"sqlite:///{tmp_path / 'ours.db'}")
    with ours.engine.connect() as con:
        assert con.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert con.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    other = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'other.db'}")
    with other.connect() as con:
        assert con.exec_driver_sql("PRAGMA journal_mode").scalar() == "delete"
    other.dispose()
    with sqlite3.connect(tmp_path / "ours.db") as con:  # the mode is the file's: any reader sees it
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
