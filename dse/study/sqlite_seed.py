"""A new SQLite study file started from an empty Optuna database, made once per Optuna version.

Optuna creates a new database's tables and then stamps them with its schema's revision through
alembic, which means importing alembic and reading Optuna's thirty migration scripts: about 0.45 s
of every fresh run's start, and again for every study a test suite creates. For one Optuna version
the result is the same empty file every time. So the first fresh run keeps a copy in the user's
cache folder (``$XDG_CACHE_HOME/dse``, else ``~/.cache/dse``), and later fresh runs start from
it. Such a file is this Optuna version's own schema, so Optuna's check of the schema's revision
(which reads the same scripts) is skipped for it too (``benchmarks/startup.py`` measures both).
Nothing here is needed: when the cache cannot be written or read, Optuna creates the file as
before.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import optuna
import sqlalchemy
from optuna import __version__ as optuna_version


def seed_sqlite(path: Path) -> bool:
    """Put an empty database of this Optuna version at ``path`` unless a file is there; whether it
    did. A process that puts its own file there first (workers starting together) keeps it: the
    seed is linked in, never moved over a file."""
    if path.exists():
        return False
    template = template_file()
    if template is None:
        return False
    part = path.with_name(f".{path.name}.{os.getpid()}.seed")
    try:
        shutil.copyfile(template, part)
        os.link(part, path)  # fails if the file appeared meanwhile; replace() would overwrite it
    except OSError:
        return False  # Optuna creates it, or another process did
    finally:
        with contextlib.suppress(OSError):
            part.unlink(missing_ok=True)
    return True


def template_file() -> Path | None:
    """The cached empty database of this Optuna version, made now if missing; None if the cache
    cannot hold it."""
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dse"
    path = folder / f"optuna-{optuna_version}-empty.db"
    part = folder / f".{path.name}.{os.getpid()}"
    try:
        if path.is_file() and path.stat().st_size > 0:
            return path
        folder.mkdir(parents=True, exist_ok=True)
        part.unlink(missing_ok=True)
        storage = optuna.storages.RDBStorage(f"sqlite:///{part}")  # rollback journal: all in the file
        storage.engine.dispose()
        os.replace(part, path)  # whole or not at all, whoever writes it last
    except (OSError, sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.OptunaError):
        with contextlib.suppress(OSError):
            part.unlink(missing_ok=True)
        return None
    return path
