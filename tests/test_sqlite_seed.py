"""A fresh SQLite study file starts from the cached empty Optuna database (``dse/study/sqlite_seed.py``)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna import __version__ as optuna_version

from dse.study.sqlite_seed import seed_sqlite, template_file
from dse.study.storage import open_storage


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
    return folder / "dse"


def _no_alembic_scripts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading Optuna's migration scripts (what stamping a new database takes) fails from here on."""

    def refuse(self: object) -> str:
        raise AssertionError("the migration scripts were read")

    monkeypatch.setattr(optuna.storages._rdb.storage._VersionManager, "get_head_version", refuse)


def test_a_fresh_file_is_seeded_and_serves_a_study(tmp_path: Path, cache: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    open_storage(f"sqlite:///{tmp_path / 'first' / 'study.db'}")  # makes the template
    template = cache / f"optuna-{optuna_version}-empty.db"
    assert template.is_file()
    with monkeypatch.context() as m:
        _no_alembic_scripts(m)
        storage = open_storage(f"sqlite:///{tmp_path / 'second' / 'study.db'}")
    study = optuna.create_study(storage=storage, study_name="s")
    study.optimize(lambda t: t.suggest_float("a", 0.0, 1.0), n_trials=3)
    again = optuna.load_study(
        study_name="s", storage=open_storage(f"sqlite:///{tmp_path / 'second' / 'study.db'}")
    )
    assert len(again.trials) == 3
    assert optuna.get_all_study_names(open_storage(f"sqlite:///{tmp_path / 'first' / 'study.db'}")) == []
    assert not list((tmp_path / "second").glob(".*.seed")), "the copy it linked from is gone"


def test_an_existing_file_is_never_replaced(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "study.db"
    path.write_bytes(b"someone else's database")
    seed_sqlite(path)
    assert path.read_bytes() == b"someone else's database"


def test_without_a_cache_optuna_creates_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert template_file() is None
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    optuna.create_study(storage=storage, study_name="s")
    assert optuna.get_all_study_names(storage) == ["s"]
