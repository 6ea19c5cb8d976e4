"""A fresh SQLite study file starts from the cached empty Optuna database (``dse/study/sqlite_seed.py``)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import optuna
import pytest
from optuna import __version__ as optuna_version

from dse.study import sqlite_seed
from dse.study.sqlite_seed import seed_sqlite, template_file
from dse.study.storage import open_storage


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("DSE_CACHE_DIR", str(folder))
    return folder / f"optuna-{optuna_version}-empty.db"


def _no_alembic_scripts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading Optuna's migration scripts (stamping a new database, checking a stamp) fails from here on."""

    def refuse(self: object) -> str:
        raise AssertionError("the migration scripts were read")

    monkeypatch.setattr(optuna.storages._rdb.storage._VersionManager, "get_head_version", refuse)


def test_a_fresh_file_is_seeded_and_serves_a_study(tmp_path: Path, cache: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    open_storage(f"sqlite:///{tmp_path / 'first' / 'study.db'}")  # makes the template
    assert cache.is_file()
    url = f"sqlite:///{tmp_path / 'second' / 'study.db'}"
    with monkeypatch.context() as m:
        _no_alembic_scripts(m)
        storage = open_storage(url)
    study = optuna.create_study(storage=storage, study_name="s")
    study.optimize(lambda t: t.suggest_float("a", 0.0, 1.0), n_trials=3)
    assert len(optuna.load_study(study_name="s", storage=open_storage(url)).trials) == 3  # reopened: checked
    assert optuna.get_all_study_names(open_storage(f"sqlite:///{tmp_path / 'first' / 'study.db'}")) == []
    assert not list((tmp_path / "second").glob(".*.seed")), "no copy left beside it"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "second" / "study.db").stat().st_mode) == 0o666 & ~umask  # as SQLite


def test_an_existing_file_is_never_replaced(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "study.db"
    path.write_bytes(b"someone else's database")
    assert seed_sqlite(f"sqlite:///{path}") is False
    assert path.read_bytes() == b"someone else's database"


def test_a_file_that_appears_while_the_seed_is_copied_is_kept(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process creates the study file between the check and the link: its file stays."""
    template_file()
    path = tmp_path / "study.db"
    real = shutil.copyfile

    def copy_then_race(src: Path, dst: Path) -> Path:
        out = real(src, dst)
        path.write_bytes(b"the other process's database")
        return out

    monkeypatch.setattr(sqlite_seed.shutil, "copyfile", copy_then_race)
    assert seed_sqlite(f"sqlite:///{path}") is False
    assert path.read_bytes() == b"the other process's database"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "study.db"]


def test_a_url_with_options_is_left_to_optuna(tmp_path: Path, cache: Path) -> None:
    """SQLAlchemy reads ``?timeout=5`` as an option, not as part of the file name."""
    assert seed_sqlite(f"sqlite:///{tmp_path / 'study.db'}?timeout=5") is False
    assert list(tmp_path.glob("study.db*")) == []


def test_a_damaged_cache_is_dropped_and_optuna_creates_the_file(tmp_path: Path, cache: Path) -> None:
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"not a database" * 100)
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    optuna.create_study(storage=storage, study_name="s")
    assert optuna.get_all_study_names(storage) == ["s"]
    assert not cache.exists() or cache.read_bytes()[:15] == b"SQLite format 3"


def test_without_a_cache_optuna_creates_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv("DSE_CACHE_DIR", str(blocked / "dse"))
    assert template_file() is None
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    optuna.create_study(storage=storage, study_name="s")
    assert optuna.get_all_study_names(storage) == ["s"]
