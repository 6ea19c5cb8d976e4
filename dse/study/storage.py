"""Optuna storages for studies: opening one (SQLite in the run folder, or a database server for
many workers), writing a finished trial in one transaction, keeping secrets out of what it prints,
and the trials a dead process left running.

SQLite runs in write-ahead-log mode (a commit is one append; a killed process loses nothing
committed). On a shared storage, trials carry heartbeats (:func:`dse.study.faults.heartbeat`) and
:func:`fail_dead` fails those whose worker stopped beating; a server that goes away is waited for
(:func:`wait_for_storage`).
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import json
import os
import socket
import sys
import time
import warnings
import weakref
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any, cast

import optuna
import sqlalchemy
import sqlalchemy.orm
from optuna.distributions import distribution_to_json
from optuna.storages._heartbeat import is_heartbeat_enabled
from optuna.storages._rdb import models as rdb_models

from dse.errors import InputError
from dse.study.faults import storage_fault
from dse.study.timeouts import STORAGE_RETRY_S

SCHEMA_VERSION = "v3.2.0.a"  # Optuna's RDB schema that write_finished writes; others go through Optuna


def _sqlite_pragmas_if_sqlite(dbapi_connection: Any, record: Any) -> None:
    if type(dbapi_connection).__module__.startswith("sqlite3"):
        _sqlite_pragmas(dbapi_connection, record)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # write-ahead log: a commit is one append, and readers never block the writer; a crash keeps
    # every committed trial (synchronous=NORMAL loses nothing committed on a process kill)
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def open_storage(url: str, stale_after_s: float | None = None) -> optuna.storages.BaseStorage:
    """Optuna's storage for ``url``. With ``stale_after_s`` (workers sharing a storage), trials
    carry heartbeats and a trial silent for that long is stale: its worker died."""
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite:///"):
        folder = Path(url.removeprefix("sqlite:///")).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(
                "storage", "url", f"cannot be created ({exc.strerror}: {folder})", url
            ) from None
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}
        if not sqlalchemy.event.contains(sqlalchemy.engine.Engine, "connect", _sqlite_pragmas_if_sqlite):
            sqlalchemy.event.listen(sqlalchemy.engine.Engine, "connect", _sqlite_pragmas_if_sqlite)
    else:  # a server may restart under a long study: test each pooled connection before use
        kwargs["engine_kwargs"] = {"pool_pre_ping": True}
    if stale_after_s is not None:
        kwargs["heartbeat_interval"] = max(1, int(stale_after_s // 4))
        kwargs["grace_period"] = max(1, int(stale_after_s))
    try:
        return _open_rdb(driver_url(url), kwargs)
    except Exception as exc:  # noqa: BLE001 - the driver's own error types differ per database
        fault = storage_fault(exc, redact(url), sqlite_path(url))
        if fault is not None:
            raise fault from None
        raise InputError(
            "storage",
            "url",
            f"cannot be opened ({type(exc).__name__}: {_scrub(str(exc), url)})",
            redact(url),
        ) from None


def _open_rdb(url: str, kwargs: dict[str, Any]) -> optuna.storages.RDBStorage:
    """Open (and on first use create) the tables; workers starting together on a fresh database
    race to create them, and the loser retries once the winner is done."""
    for attempt in range(5):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeats
                return optuna.storages.RDBStorage(url, **kwargs)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
            if attempt == 4:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def write_finished(
    study: optuna.Study, trial: optuna.trial.FrozenTrial, user_attrs: dict[str, Any] | None = None
) -> None:
    """Store a finished trial (from the in-memory copy a lone run samples on) in one transaction,
    with ``user_attrs`` added to its own.

    ``Study.add_trial`` does the same in 20-30 ORM statements (a lookup and a flush per
    parameter, each checked against every earlier trial's distribution): 13-26 ms a trial on
    SQLite. Here it is one insert per table, in Optuna's schema
    (:data:`SCHEMA_VERSION`; a storage of another version goes through ``Study.add_trial``). The
    study's parameters never change distribution (the spec fixes them), so the check is not
    needed; ``tests/test_study_storage.py`` reads the trials back through Optuna. As in Optuna,
    the number is the count of the study's earlier trials, taken while this transaction holds the
    write lock (PostgreSQL: a lock on the study's row first; SQLite: the insert that counts), so
    runs that share a storage never number two trials alike."""
    if trial.intermediate_values:
        raise ValueError("study trials report no intermediate values")
    storage = cast(Any, study._storage)
    rdb = getattr(storage, "_backend", storage)
    if _schema_version(rdb) != SCHEMA_VERSION:
        done = copy.copy(trial)
        done.user_attrs = {**trial.user_attrs, **(user_attrs or {})}
        study.add_trial(done)
        return
    m = rdb_models
    with rdb.engine.begin() as conn:  # commits at the end, rolls back on any error
        trials = m.TrialModel.__table__
        if conn.dialect.name != "sqlite":  # SQLite's first write takes the database's lock
            studies = m.StudyModel.__table__
            conn.execute(
                sqlalchemy.select(studies.c.study_id)
                .where(studies.c.study_id == study._study_id)
                .with_for_update()
            )
        earlier = (
            sqlalchemy.select(sqlalchemy.func.count())
            .select_from(trials)
            .where(trials.c.study_id == study._study_id)
            .scalar_subquery()
        )
        trial_id = conn.execute(
            trials.insert().values(
                number=earlier,  # counted inside the insert, under the write lock
                study_id=study._study_id,
                state=trial.state,
                datetime_start=_naive_utc(trial.datetime_start),
                datetime_complete=_naive_utc(trial.datetime_complete),
            )
        ).inserted_primary_key[0]
        rows: dict[Any, list[dict[str, Any]]] = {
            m.TrialParamModel: [
                {
                    "param_name": name,
                    "param_value": dist.to_internal_repr(trial.params[name]),
                    "distribution_json": distribution_to_json(dist),
                }
                for name, dist in trial.distributions.items()
            ],
            m.TrialValueModel: [_value_row(i, v) for i, v in enumerate(trial.values or [])],
            m.TrialUserAttributeModel: [
                {"key": k, "value_json": json.dumps(v)}
                for k, v in {**trial.user_attrs, **(user_attrs or {})}.items()
            ],
            m.TrialSystemAttributeModel: [
                {"key": k, "value_json": json.dumps(v)} for k, v in trial.system_attrs.items()
            ],
        }
        for model, batch in rows.items():
            if batch:
                conn.execute(model.__table__.insert(), [{"trial_id": trial_id, **r} for r in batch])


def _schema_version(rdb: Any) -> str:
    """The storage's schema version, read once per storage object: a schema changes only by an
    ``optuna storage upgrade``, which no one runs under a study."""
    version = _SCHEMA_OF.get(rdb)
    if version is None:
        version = _SCHEMA_OF[rdb] = rdb.get_current_version()
    return version


_SCHEMA_OF: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _value_row(objective: int, value: float) -> dict[str, Any]:
    """Optuna's stored form of an objective value: +-inf kept as a type, not a number."""
    stored, kind = rdb_models.TrialValueModel.value_to_stored_repr(value)
    return {"objective": objective, "value": stored, "value_type": kind}


def _naive_utc(t: datetime | None) -> datetime | None:
    """Optuna's RDB stores datetimes as naive UTC and reads them back as naive local time."""
    return None if t is None else t.astimezone(UTC).replace(tzinfo=None)


def redact(url: str) -> str:
    """The URL without its password (whatever the scheme separator looks like)."""
    if "@" not in url:
        return url
    head, host = url.rsplit("@", 1)
    scheme, sep, cred = head.rpartition("//")
    if not sep:
        scheme, cred = "", head
    user = cred.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}" if ":" in cred else url


def _scrub(text: str, url: str) -> str:
    """``text`` (a driver's error) without any piece of the URL's password: a driver that parses
    an unescaped '@' in a password quotes the rest of it as the host."""
    if "@" not in url or "//" not in url:
        return text
    cred = url.split("//", 1)[1].rsplit("@", 1)[0]
    secret = cred.split(":", 1)[1] if ":" in cred else ""
    for piece in sorted({secret, *secret.split("@")}, key=len, reverse=True):
        if len(piece) >= 2:
            text = text.replace(piece, "***")
    return text


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///`` URL (``None`` for a server or an in-memory one)."""
    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else ""
    return Path(path) if path and path != ":memory:" else None


@contextlib.contextmanager
def lone_writer(study: optuna.Study, url: str) -> Iterator[None]:
    """Hold the study for one lone run (not a worker) for the block; refuse, naming the holder, when
    another lone run holds it. Two lone runs of one study would each run the full budget and each
    mark the other's running trials failed. SQLite: an exclusive lock on ``<file>.run-lock``,
    which holds the holder's process id; PostgreSQL: an advisory lock on a connection kept for the
    block, named after the holder (``application_name``)."""
    rdb = getattr(study._storage, "_backend", study._storage)
    engine = getattr(rdb, "engine", None)
    name = f"dse-lone-run:{study.study_name}"
    holder = f"dse study run (pid {os.getpid()} on {socket.gethostname()})"
    if engine is not None and engine.dialect.name == "postgresql":
        key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
        with engine.connect() as con:
            con.execute(sqlalchemy.text("select set_config('application_name', :n, false)"), {"n": holder})
            if not con.execute(sqlalchemy.text("select pg_try_advisory_lock(:k)"), {"k": key}).scalar():
                other = con.execute(
                    sqlalchemy.text(
                        "select a.application_name from pg_locks l join pg_stat_activity a on a.pid = l.pid"
                        " where l.locktype = 'advisory' and l.granted"
                        " and l.classid::bigint = ((:k >> 32) & 4294967295)"
                        " and l.objid::bigint = (:k & 4294967295)"
                    ),
                    {"k": key},
                ).scalar()
                raise _busy(redact(url), other or "another dse study run")
            try:
                yield
            finally:
                con.execute(sqlalchemy.text("select pg_advisory_unlock(:k)"), {"k": key})
                con.commit()
        return
    path = sqlite_path(url)
    if path is None:  # an in-memory storage is this process's own
        yield
        return
    lock = Path(f"{path}.run-lock")
    with open(lock, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _busy(str(path), _holder(fh)) from None
        fh.seek(0)
        fh.truncate()
        fh.write(holder + "\n")
        fh.flush()
        try:
            yield
        finally:
            fh.seek(0)
            fh.truncate()
            fcntl.flock(fh, fcntl.LOCK_UN)


def _holder(fh: IO[str]) -> str:
    """Who holds a run lock, as it wrote in the file (it writes just after taking the lock)."""
    for _ in range(20):
        fh.seek(0)
        if text := fh.read().strip():
            return text
        time.sleep(0.05)
    return "another dse study run"


def _busy(where: str, holder: str) -> InputError:
    return InputError(
        where,
        "",
        f"this study is being run by {holder}; wait for it to end, or join it as a worker "
        "(dse study worker) on a PostgreSQL storage",
    )


def driver_url(url: str) -> str:
    """SQLAlchemy's default PostgreSQL driver is psycopg 3; the project ships psycopg2."""
    if url.startswith("postgresql://"):
        return "postgresql+psycopg2://" + url.removeprefix("postgresql://")
    return url


@contextlib.contextmanager
def storage_lock(study: optuna.Study, name: str) -> Iterator[None]:
    """Hold a lock named ``name`` on the study's database for the block, so processes sharing it
    (workers on many machines) run the block one at a time: a PostgreSQL advisory lock; on a
    SQLite file, an exclusive lock on ``<file>.lock`` beside it (one machine shares a file). An
    in-memory or other storage is not shared across processes and takes no lock."""
    rdb = getattr(study._storage, "_backend", study._storage)
    engine = getattr(rdb, "engine", None)
    if engine is None:
        yield
        return
    if engine.dialect.name == "postgresql":
        key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
        with engine.connect() as con:
            con.execute(sqlalchemy.text("select pg_advisory_lock(:k)"), {"k": key})
            try:
                yield
            finally:
                con.execute(sqlalchemy.text("select pg_advisory_unlock(:k)"), {"k": key})
                con.commit()
        return
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    if not database or database == ":memory:":
        yield
        return
    with open(f"{database}.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def fail_stale(study: optuna.Study) -> int:
    """Trials a killed process left RUNNING in a single-process storage: mark them failed."""
    n = 0
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
        n += 1
    return n


def fail_dead(study: optuna.Study) -> int:
    """Shared storage: mark failed the running trials whose worker died (their heartbeats stopped,
    or, for a trial whose worker died before its first beat, it started longer ago than the grace
    period); the budget counts complete trials, so someone runs another. The number failed here."""
    storage = cast(Any, study._storage)
    if not is_heartbeat_enabled(storage):
        return 0
    n = 0
    for trial_id in _dead_trial_ids(getattr(storage, "_backend", storage), study._study_id):
        try:
            n += bool(storage.set_trial_state_values(trial_id, state=optuna.trial.TrialState.FAIL))
        except optuna.exceptions.UpdateFinishedTrialError:  # another worker got there first
            pass
    return n


def _dead_trial_ids(storage: Any, study_id: int) -> list[int]:
    """Optuna's stale trials, plus running trials that never beat and started before the grace
    (``storage``: the RDB storage itself, under Optuna's cache)."""
    grace = timedelta(seconds=storage.grace_period or 2 * storage.heartbeat_interval)
    with storage.scoped_session() as session:
        now = session.execute(sqlalchemy.func.now()).scalar().replace(tzinfo=None)
        running = (
            session.query(rdb_models.TrialModel)
            .options(sqlalchemy.orm.selectinload(rdb_models.TrialModel.heartbeats))
            .filter(rdb_models.TrialModel.state == optuna.trial.TrialState.RUNNING)
            .filter(rdb_models.TrialModel.study_id == study_id)
            .all()
        )
        return [
            t.trial_id
            for t in running
            if (t.heartbeats and now - t.heartbeats[0].heartbeat > grace)
            or (
                not t.heartbeats
                and t.datetime_start is not None
                and datetime.now() - t.datetime_start > grace
            )
        ]


def wait_for_storage(exc: Exception, storage: str, since: float | None) -> float:
    """Log and wait a little; give up with one line once the storage has been away too long."""
    now = time.monotonic()
    since = now if since is None else since
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if now - since > STORAGE_RETRY_S:
        raise InputError(
            redact(storage), "storage", f"unreachable for {STORAGE_RETRY_S:g} s ({first[:120]})"
        ) from None
    sys.stderr.write(f"dse: storage unreachable ({first[:120]}); retrying\n")
    time.sleep(1.0)
    return since
