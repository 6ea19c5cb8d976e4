"""A new SQLite study file started from an empty Optuna database, made once per Optuna version.

Optuna creates a new database's tables and then stamps them with its schema's revision, reading
its migration scripts through alembic; opening a file checks that stamp against the same scripts.
For one Optuna version the empty database is the same file every time. So the first fresh run
keeps a copy in the user's cache folder (``$DSE_CACHE_DIR``, else ``$XDG_CACHE_HOME/dse``, else
``~/.cache/dse``), and later fresh runs start from it and skip the check: the file is this
Optuna's own schema.
``python benchmarks/startup.py`` measures a process opening a new study file both ways.
Nothing here is needed: when the cache cannot be written or read, or holds a file that is not
such a database, Optuna creates the study file as before.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import uuid
from pathlib import Path

import optuna
import sqlalchemy
from optuna import __version__ as optuna_version


def seed_sqlite(url: str) -> bool:
    """Put an empty database of this Optuna version at the file of the SQLite ``url`` unless a
    file is there; whether it did. Not for a URL with options (``?...``): the file is SQLAlchemy's
    reading of the URL. A process that puts its own file there first (workers starting together)
    keeps it: the seed is linked in, never moved over a file."""
    parsed = sqlalchemy.engine.make_url(url)
    if parsed.query or not parsed.database or parsed.database == ":memory:":
        return False
    path = Path(parsed.database)
    if path.exists():
        return False
    template = template_file()
    if template is None:
        return False
    part: Path | None = None
    try:
        part = _unique(path, ".seed")
        shutil.copyfile(template, part)  # a new file: the umask's mode, as SQLite would give it
        if not _stamped(part):  # a damaged cache: drop it, Optuna creates the file
            template.unlink(missing_ok=True)
            return False
        os.link(part, path)  # fails if the file appeared meanwhile; replace() would overwrite it
    except OSError:
        return False  # Optuna creates it, or another process did
    finally:
        if part is not None:
            with contextlib.suppress(OSError):
                part.unlink(missing_ok=True)
    return True


def template_file() -> Path | None:
    """The cached empty database of this Optuna version, made now if missing; None if the cache
    cannot hold it."""
    part: Path | None = None
    try:
        folder = Path(os.environ.get("DSE_CACHE_DIR") or _user_cache() / "dse")
        path = folder / f"optuna-{optuna_version}-empty.db"
        if path.is_file():
            return path
        folder.mkdir(parents=True, exist_ok=True)
        part = _unique(path, "")
        storage = optuna.storages.RDBStorage(f"sqlite:///{part}")  # rollback journal: all in the file
        storage.engine.dispose()
        os.replace(part, path)  # whole or not at all, whoever writes it last
    except (OSError, RuntimeError, sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.OptunaError):
        if part is not None:
            with contextlib.suppress(OSError):
                part.unlink(missing_ok=True)
        return None
    return path


def _unique(path: Path, suffix: str) -> Path:
    """A name beside ``path`` no other process or thread picks."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}{suffix}")


def _user_cache() -> Path:
    """The user's cache folder; RuntimeError when there is no home to find it in."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def _stamped(path: Path) -> bool:
    """Whether ``path`` is a SQLite database with Optuna's tables and one schema stamp."""
    try:
        with contextlib.closing(sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)) as db:
            stamps = db.execute("SELECT version_num FROM alembic_version").fetchall()
            db.execute("SELECT 1 FROM studies LIMIT 1").fetchall()
    except sqlite3.Error:
        return False
    return len(stamps) == 1
