"""Optuna storages for studies: opening one (SQLite in the run folder, or a database server for
many workers), writing a finished trial in one transaction, keeping secrets out of what it prints,
and the trials a dead process left running.

SQLite runs in write-ahead-log mode (a commit is one append; a killed process loses nothing
committed). On a shared storage, trials carry heartbeats (:func:`dse.study.faults.heartbeat`) and
:func:`fail_dead` fails those whose worker stopped beating; a server that goes away is waited for
(:func:`wait_for_storage`). What goes past Optuna's public interface is in
:mod:`dse.study.optuna_compat`.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import functools
import hashlib
import os
import re
import socket
import sqlite3
import sys
import time
import urllib.parse
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import optuna
import sqlalchemy
from optuna import __version__ as optuna_version

from dse import __version__
from dse.errors import InputError, StorageFault
from dse.metrics import METRICS
from dse.plain import plain
from dse.study.faults import STORAGE_ERRORS, driver_line, storage_fault, storage_unreachable
from dse.study.objectives import ObjectiveDef, ObjectiveWarning, code_digest
from dse.study.optuna_compat import (
    SCHEMA_VERSION,
    FastReadRDBStorage,
    alembic_stamps,
    claim_study_attr,
    dead_trial_ids,
    insert_finished,
    knows_schema,
    live_beats,
)
from dse.study.samplers import make_sampler
from dse.study.server_answer import connect_args as answered_connect_args
from dse.study.server_answer import install as answered_within
from dse.study.spec import StudySpec
from dse.study.sqlite_seed import seed_sqlite
from dse.study.timeouts import db_answer_s, storage_retry_s

T = TypeVar("T")


class _WalConnection(sqlite3.Connection):
    """A SQLite connection in write-ahead-log mode: a commit is one append, and readers never
    block the writer; a crash keeps every committed trial (synchronous=NORMAL loses nothing
    committed on a process kill). Given to the one engine of a storage (``connect_args``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cur = self.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()


def open_storage(url: str, stale_after_s: float | None = None) -> optuna.storages.RDBStorage:
    """Optuna's storage for ``url``. With ``stale_after_s`` (workers sharing a storage), trials
    carry heartbeats and a trial silent for that long is stale: its worker died."""
    # the waits the environment sets are refused here, as themselves, before anything is made: the
    # storage's retry had been read only when a storage first went away (a restart then ended a
    # worker with exit 2), and the answer bound's refusal was wrapped as the URL's
    storage_retry_s()
    db_answer_s()
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite:") and sqlite_path(url) is None:
        raise InputError(
            "storage", "url", "must name a database file or server: an in-memory one is a single "
            "process's, and a run samples in a process of its own", redact(url),
        )  # fmt: skip
    if url.startswith("sqlite:///") and _sqlite_query(url):  # the driver ignores most, with a warning
        query = url.partition("?")[2]
        rule = f"must name the database file alone, without a query string (?{query}): dse opens and locks it"
        raise InputError("storage", "url", rule, redact(url))
    if url.startswith("sqlite:///"):
        folder = Path(str(sqlite_path(url))).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # read-only: the storage refused (exit 1); a file in the way: bad input
            fault = storage_fault(exc, redact(url), sqlite_path(url))
            if fault is not None:
                raise fault from None
            rule = f"must be a folder that can be created ({exc.strerror})"
            raise InputError(str(folder), "", rule) from None
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60, "factory": _WalConnection}}
        if seed_sqlite(url):  # this Optuna's own schema: no check needed
            kwargs["skip_compatibility_check"] = True
    else:  # a server may restart under a long study: test each pooled connection before use
        kwargs["engine_kwargs"] = {"pool_pre_ping": True, **_server_args(url)}
    if stale_after_s is not None:
        kwargs["heartbeat_interval"] = max(1, int(stale_after_s // 4))
        kwargs["grace_period"] = max(1, int(stale_after_s))
    since: float | None = None
    while True:
        try:
            _refuse_foreign(url)
            return _open_rdb(driver_url(url), kwargs)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - the driver's own error types differ per database
            if stale_after_s is not None and storage_unreachable(exc):  # a worker waits a restart out
                since = wait_for_storage(exc, url, since)
                continue
            raise _unopened(exc, url) from None


OPTUNA_TABLES = frozenset(
    {
        "studies",
        "study_directions",
        "study_user_attributes",
        "study_system_attributes",
        "trials",
        "trial_user_attributes",
        "trial_system_attributes",
        "trial_params",
        "trial_values",
        "trial_intermediate_values",
        "trial_heartbeats",
        "version_info",
        "alembic_version",
    }
)
"""The tables of an Optuna storage (``optuna/storages/_rdb/models.py``, and alembic's stamp)."""


def _refuse_foreign(url: str) -> None:
    """Refuse, as bad input (exit 2), a storage that is no study's to open: a SQLite "file" that is
    a folder (SQLite's "unable to open database file", a storage fault, exit 1), or a database
    whose tables are another program's under Optuna's names (a ``studies`` table, or alembic's
    stamp of its own migrations) without Optuna's ``version_info``. Optuna creates the tables it
    misses beside them before it fails: a SQLite file kept Optuna's eleven new tables, a traceback
    said why. An empty or new database, or an Optuna one, passes (its schema version is checked
    when it is opened: :func:`_unopened`). A database that cannot be read here is left to the
    opening, which says why."""
    path = sqlite_path(url)
    if path is not None and path.is_dir():
        rule = f"must name a SQLite file: {path} is a folder (a file in it: sqlite:///{path}/study.db)"
        raise InputError("storage", "url", rule, redact(url))
    names = table_names(url)
    taken = sorted((names or set()) & OPTUNA_TABLES)
    if taken and "version_info" not in (names or set()):
        rule = (
            f"holds tables of another program under Optuna's names ({', '.join(taken)}) and no Optuna "
            "version_info: name a database of its own (empty, or one dse or Optuna made)"
        )
        raise InputError("storage", "url", rule, redact(url))


def table_names(url: str) -> set[str] | None:
    """The tables of the database ``url`` names, read without writing (an absent or empty SQLite
    file has none); None where it cannot be read here (a server away, another database kind),
    which the opening then says."""
    path = sqlite_path(url)
    if path is not None:
        try:
            if not path.is_file() or path.stat().st_size == 0:
                return set()
            with contextlib.closing(sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)) as con:
                return {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
        except (OSError, sqlite3.Error):
            return None
    try:
        if sqlalchemy.engine.make_url(driver_url(url)).get_backend_name() != "postgresql":
            return None
        engine = sqlalchemy.create_engine(
            driver_url(url), poolclass=sqlalchemy.pool.NullPool, **_server_args(url)
        )
        try:
            with engine.connect() as con:
                query = "select tablename from pg_tables where schemaname = current_schema()"
                return {str(r[0]) for r in con.execute(sqlalchemy.text(query))}
        finally:
            engine.dispose()
    except Exception:  # noqa: BLE001 - unreadable here: the opening says why, in its own words
        return None


def _other_schema(exc: Exception, url: str) -> InputError | None:
    """Optuna's refusal of a storage of another schema version, as bad input naming both versions
    and what to do (Optuna's own words named the runtime's version twice: "optuna 5.0.0 is no
    longer compatible with the table schema (set up by optuna 5.0.0)"); None for another error."""
    if not (isinstance(exc, RuntimeError) and "compatible with the table schema" in str(exc)):
        return None
    engine = sqlalchemy.create_engine(
        driver_url(url), poolclass=sqlalchemy.pool.NullPool, **_server_args(url)
    )
    try:
        stamps = alembic_stamps(engine)
    finally:
        engine.dispose()
    upgrade = "optuna storage upgrade --storage URL" in str(exc).replace("$STORAGE_URL", "URL")
    fix = (
        "an older Optuna's: upgrade it (optuna storage upgrade --storage URL) or use another database"
        if upgrade
        else "a newer Optuna's: use that Optuna, or another database"
    )
    rule = (
        f"holds an Optuna storage of schema {', '.join(stamps) or 'unknown'}, and this Optuna "
        f"({optuna_version}) reads {SCHEMA_VERSION}: {fix}"
    )
    return InputError("storage", "url", rule, redact(url))


def _unopened(exc: Exception, url: str) -> Exception:
    """Why ``url`` could not be opened: the storage refused or did not answer (a storage fault,
    exit 1), or the URL names nothing that can be opened (bad input, exit 2)."""
    fault = storage_fault(exc, redact(url), sqlite_path(url))
    if fault is not None:
        fault.args = (_scrub(str(fault), url),)  # the driver's words may quote a password's pieces
        return fault
    with contextlib.suppress(Exception):  # reading the stamp failed: the error as it is, below
        other = _other_schema(exc, url)
        if other is not None:
            return other
    return InputError(
        "storage", "url", f"cannot be opened ({type(exc).__name__}: {_scrub(str(exc), url)})", redact(url)
    )


def _open_rdb(url: str, kwargs: dict[str, Any]) -> optuna.storages.RDBStorage:
    """Open (and on first use create) the tables; processes starting together on a fresh database
    race to create them, and the loser retries once the winner is done."""
    for attempt in range(5):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeats
                return FastReadRDBStorage(url, **kwargs)  # Optuna's, reading trials faster
        except sqlalchemy.exc.DBAPIError as exc:
            if attempt == 4 or not _lost_creation_race(exc):
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def _lost_creation_race(exc: sqlalchemy.exc.DBAPIError) -> bool:
    """Another process created the tables first, or is creating them: PostgreSQL says so with an
    integrity or a programming error, SQLite with "table ... already exists", or with "database
    is locked" when its first connection turns the new file to write-ahead logging, which takes
    the file whole and does not wait out SQLite's busy timeout."""
    if isinstance(exc, sqlalchemy.exc.IntegrityError | sqlalchemy.exc.ProgrammingError):
        return True
    text = str(exc.orig)
    return isinstance(exc, sqlalchemy.exc.OperationalError) and (
        "already exists" in text or "database is locked" in text
    )


@dataclass(frozen=True)
class StoredStudy:
    """A study, the storage it was opened on (``url``), and its id there: what the storage's own
    methods (heartbeats, trial states, the fast write) take, which a Study keeps to itself."""

    study: optuna.Study
    storage: optuna.storages.RDBStorage
    url: str
    study_id: int

    @classmethod
    def of(cls, study: optuna.Study, storage: optuna.storages.RDBStorage, url: str) -> StoredStudy:
        return cls(study, storage, url, storage.get_study_id_from_name(study.study_name))

    @classmethod
    def load(cls, url: str, name: str) -> StoredStudy:
        """The study ``name`` stored at ``url``."""
        storage = open_storage(url)
        return cls.of(optuna.load_study(study_name=name, storage=storage), storage, url)

    def trial_id(self, number: int) -> int:
        """The storage's id of the study's trial ``number``."""
        return self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)


def write_finished(
    stored: StoredStudy, trial: optuna.trial.FrozenTrial, user_attrs: dict[str, Any] | None = None
) -> None:
    """Store a finished trial (from the in-memory copy a lone run samples on) in one transaction,
    with ``user_attrs`` added to its own: :func:`dse.study.optuna_compat.insert_finished`, 1 ms
    against Optuna's 11-22 ms. A storage of another schema goes through ``Study.add_trial``;
    ``tests/test_study_storage.py`` reads the trials back through Optuna and compares them."""
    if trial.intermediate_values:
        raise ValueError("study trials report no intermediate values")
    if not knows_schema(stored.storage):
        done = copy.copy(trial)
        done.user_attrs = {**trial.user_attrs, **(user_attrs or {})}
        stored.study.add_trial(done)
        return
    insert_finished(stored.storage, stored.study_id, trial, user_attrs or {})


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
    an unescaped '@' in a password quotes the rest of it as the host, or, past a ':' after it, as
    the port ("invalid literal for int(): 'Ef12@127.0.0.1'" of the password "Ab@Cd:Ef12")."""
    if "@" not in url or "//" not in url:
        return text
    cred = url.split("//", 1)[1].rsplit("@", 1)[0]
    secret = cred.split(":", 1)[1] if ":" in cred else ""
    pieces = {secret, *secret.split("@"), *(re.split("[@:]", secret) if "@" in secret else ())}
    for piece in sorted(pieces, key=len, reverse=True):
        if len(piece) >= 2:
            text = text.replace(piece, "***")
    return text


def fold_log(url: str) -> None:
    """Fold a SQLite storage's write-ahead log back into its file, so that ``study.db`` alone holds
    every trial: SQLite does so when its last connection closes, which a process that ends without
    tearing its objects down (the CLI's) never does, and a copied ``study.db`` had held none of a
    run's trials (all in ``study.db-wal``). A storage another process is writing keeps what it
    cannot fold yet in the log, as SQLite does; nothing is lost either way."""
    db = sqlite_path(url)
    if db is None or not Path(f"{db}-wal").exists():
        return
    with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(db, timeout=5)) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///`` URL as SQLAlchemy opens it, its escapes decoded
    (``a%20b.db`` is ``a b.db``: the locks, the folder and ``spec.json`` had gone beside a file
    of the escaped name); ``None`` for a server or an in-memory one."""
    if not url.startswith("sqlite:///"):
        return None
    try:
        path = sqlalchemy.engine.make_url(url).database or ""
    except sqlalchemy.exc.ArgumentError:
        path = url.removeprefix("sqlite:///")
    return Path(path) if path and path != ":memory:" else None


def _sqlite_query(url: str) -> bool:
    """Whether a ``sqlite:///`` URL carries a query string (``?mode=ro``)."""
    try:
        return bool(sqlalchemy.engine.make_url(url).query)
    except sqlalchemy.exc.ArgumentError:
        return False


@contextlib.contextmanager
def lone_writer(study_name: str, url: str, *, worker: bool = False) -> Iterator[None]:
    """Hold the study ``study_name`` stored at ``url`` for the block: a lone run alone, workers
    together (a shared hold); refuse, naming the holder, a lone run beside any other process and a
    worker beside a lone run. Two lone runs of one study would each run the full budget and each
    mark the other's running trials failed; a lone run counts only the trials it ran, so a worker
    beside it would push the study past its budget. SQLite: a lock on ``<file>.run-lock``, which
    holds a lone run's process id; PostgreSQL: an advisory lock on a connection of its own kept
    for the block, named after the holder (``application_name``)."""
    holder = f"dse study {'worker' if worker else 'run'} (pid {os.getpid()} on {socket.gethostname()})"
    if sqlalchemy.engine.make_url(driver_url(url)).get_backend_name() == "postgresql":
        with _advisory_try_lock(url, f"dse-lone-run:{study_name}", holder, shared=worker):
            yield
        return
    path = sqlite_path(url)
    if path is None:  # an in-memory storage is this process's own
        yield
        return
    with _run_lock_file(path, url) as fh:
        try:
            fcntl.flock(fh, (fcntl.LOCK_SH if worker else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _busy(str(path), _holder(fh), worker) from None
        # a lone run names itself; workers, who share the lock, name none, and clear what a lone
        # run killed before it could clear it left (a refusal would name a process long gone)
        fh.seek(0)
        fh.truncate()
        if not worker:
            fh.write(holder + "\n")
        fh.flush()
        try:
            yield
        finally:
            if not worker:
                fh.seek(0)
                fh.truncate()
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run_lock_file(path: Path, url: str) -> IO[str]:
    """The lock file beside the SQLite file ``path`` (the file's, by any link to it), opened for
    the lock; a disk that refuses it (read-only, full) is a storage fault naming ``url``, as the
    database's own writes are: on read-only media it had been a traceback once the study was
    loaded without a write."""
    try:
        return open(Path(f"{Path(path).resolve()}.run-lock"), "a+")
    except OSError as exc:
        fault = storage_fault(exc, redact(url), path)
        if fault is not None:
            raise fault from None
        raise


@contextlib.contextmanager
def _advisory_try_lock(url: str, name: str, holder: str, *, shared: bool = False) -> Iterator[None]:
    """A PostgreSQL advisory lock named ``name`` (``shared``: one of many holders) for the block,
    on a connection that names ``holder``; refused, naming whoever holds it, when taken. A worker
    (``shared``) waits out a server away while it takes it (:func:`waited`), as it does when it
    opens the study; a lone run's is one line (the caller's)."""
    key = _lock_key(name)
    kind = "_shared" if shared else ""
    pool = sqlalchemy.pool.NullPool
    engine = sqlalchemy.create_engine(driver_url(url), poolclass=pool, **_server_args(url))
    try:
        take = functools.partial(_try_lock, engine, key, kind, holder)
        con, taken = waited(None, url, take) if shared else take()
        with con:
            if not taken:
                other = con.execute(
                    sqlalchemy.text(
                        "select a.application_name from pg_locks l join pg_stat_activity a on a.pid = l.pid"
                        " where l.locktype = 'advisory' and l.granted"
                        " and l.classid::bigint = ((:k >> 32) & 4294967295)"
                        " and l.objid::bigint = (:k & 4294967295)"
                    ),
                    {"k": key},
                ).scalar()
                raise _busy(redact(url), other or "another dse study run", shared)
            try:
                yield
            finally:  # a server restarted meanwhile (workers wait it out) took the lock with the connection
                with contextlib.suppress(sqlalchemy.exc.DBAPIError):
                    con.execute(sqlalchemy.text(f"select pg_advisory_unlock{kind}(:k)"), {"k": key})
                    con.commit()
    finally:
        engine.dispose()


def _try_lock(
    engine: sqlalchemy.engine.Engine, key: int, kind: str, holder: str
) -> tuple[sqlalchemy.engine.Connection, bool]:
    """A connection that names ``holder``, and whether it took the advisory lock ``key`` (of
    ``kind``: exclusive or shared); on an error the connection is closed (safe to repeat)."""
    con = engine.connect()
    try:
        con.execute(sqlalchemy.text("select set_config('application_name', :n, false)"), {"n": holder})
        taken = con.execute(sqlalchemy.text(f"select pg_try_advisory_lock{kind}(:k)"), {"k": key}).scalar()
        con.commit()  # the lock is the session's: no transaction left open ("idle in transaction")
    except BaseException:
        with contextlib.suppress(Exception):
            con.close()
        raise
    return con, bool(taken)


def _lock_key(name: str) -> int:
    """A PostgreSQL advisory lock's 64-bit key for ``name``."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def _holder(fh: IO[str]) -> str:
    """Who holds a run lock, as a lone run wrote in the file (just after taking the lock); workers,
    who share it, write nothing."""
    for _ in range(20):
        fh.seek(0)
        if text := fh.read().strip():
            return text
        time.sleep(0.05)
    return "dse study worker processes"


def _busy(where: str, holder: str, worker: bool) -> InputError:
    """The refusal of a run (or a ``worker``) that found the study held by ``holder``."""
    if not holder.startswith("dse study worker"):  # a lone run holds it: nothing may join
        joins = "a worker joins" if worker else "running it again"
        rule = (
            f"this study is being run by {holder}, which counts only its own trials; wait for it to "
            f"end before {joins}"
        )
    else:
        rule = (
            f"this study is being run by {holder}; wait for them to end, or add processes to it with "
            "dse study worker on the same storage (a SQLite file on this machine, or PostgreSQL)"
        )
    return InputError(where, "", rule)


def driver_url(url: str) -> str:
    """SQLAlchemy's default PostgreSQL driver is psycopg 3; the project ships psycopg2. libpq's
    other scheme, ``postgres://`` (what many hosts hand out), names the same server; SQLAlchemy
    knows no dialect of that name (it was refused as "Can't load plugin")."""
    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            url = "postgresql+psycopg2://" + url.removeprefix(scheme)
    if url.startswith("postgresql+psycopg2://"):  # every server connection of dse is made from here
        answered_within()  # a server that stops answering is an error after a bound, not a hang
    return url


def _server_args(url: str) -> dict[str, Any]:
    """The engine's arguments for a PostgreSQL server's connections: waits within the bound
    (:mod:`dse.study.server_answer`); none for another database."""
    if driver_url(url).startswith("postgresql+psycopg2://"):
        return {"connect_args": answered_connect_args()}
    return {}


@contextlib.contextmanager
def storage_lock(storage: optuna.storages.BaseStorage, name: str) -> Iterator[None]:
    """Hold a lock named ``name`` on the storage's database for the block, so processes sharing
    it (workers on many machines) run the block one at a time: a PostgreSQL advisory lock; on a
    SQLite file, an exclusive lock on ``<file>.lock`` beside it (one machine shares a file). An
    in-memory or other storage is not shared across processes and takes no lock."""
    engine = getattr(storage, "engine", None)  # an RDBStorage's
    if engine is None:
        yield
        return
    if engine.dialect.name == "postgresql":
        key = _lock_key(name)
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


def fail_stale(stored: StoredStudy, workers_stale_s: float) -> int:
    """Trials a killed process left RUNNING in a single-process storage, and those waiting in the
    queue of workers no longer there (the warm-start designs they enqueued and never ran; a lone
    run runs its own from its sampler's process): mark them failed. Left waiting, they stayed
    unfinished for good, and a later worker ran those designs again. A storage a worker is
    running trials of (one beat within ``workers_stale_s``) is not a lone run's: refused, so its
    trials are not failed under it (and the run's budget not overshot)."""
    beats = live_beats(stored.storage, stored.study_id, workers_stale_s)
    if beats:
        raise InputError(
            redact(stored.url), "storage", f"is in use by a worker ({running_note(stored)}): join it with "
            f"dse worker, or run once the workers are done; a trial silent for {workers_stale_s:g} s is a "
            f"dead (killed or frozen) worker's, which a run fails: in {workers_stale_s - beats[0][1]:.0f} s, "
            "if they died",
        )  # fmt: skip
    unfinished = (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)
    running = stored.study.get_trials(deepcopy=False, states=unfinished)
    for t in running:
        stored.storage.set_trial_state_values(stored.trial_id(t.number), optuna.trial.TrialState.FAIL)
    return len(running)


def running_note(stored: StoredStudy) -> str:
    """The study's running trials, as the lines that wait for them or refuse to run beside them say
    them: how many, and how long since the latest heartbeat of one."""
    n = len(stored.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)))
    said = f"{n} running trial{'' if n == 1 else 's'}"
    beats = live_beats(stored.storage, stored.study_id, float("inf"))
    return said + (f", the latest heartbeat trial {beats[0][0]}'s, {beats[0][1]:.0f} s ago" if beats else "")


def fail_dead(stored: StoredStudy) -> int:
    """Shared storage: mark failed the running trials whose worker died (their heartbeats stopped,
    or, for a trial whose worker died before its first beat, it started longer ago than the grace
    period); the budget counts complete trials, so someone runs another. The number failed here."""
    if stored.storage.get_heartbeat_interval() is None:
        return 0
    n = 0
    for trial_id in dead_trial_ids(stored.storage, stored.study_id):
        try:
            n += bool(stored.storage.set_trial_state_values(trial_id, state=optuna.trial.TrialState.FAIL))
        except optuna.exceptions.UpdateFinishedTrialError:  # another worker got there first
            pass
    return n


def wait_for_storage(exc: Exception, storage: str, since: float | None) -> float:
    """Log and wait a little; give up with one line once the storage has been away too long (a
    storage fault, exit 1: the URL named a storage, which did not answer). Each line quotes the
    driver's own first line, not its wrappers' (Optuna's names no cause)."""
    now = time.monotonic()
    since = now if since is None else since
    said = _scrub(driver_line(exc), storage)[:160]
    retry_s = storage_retry_s()
    if now - since > retry_s:
        raise StorageFault(
            redact(storage), f"unreachable for {retry_s:g} s ({said}); the stored trials are kept: "
            "run the same command again once it answers",
        ) from None  # fmt: skip
    sys.stderr.write(f"dse: storage unreachable ({said}); retrying\n")
    time.sleep(1.0)
    return since


def waited(storage: optuna.storages.RDBStorage | None, url: str, step: Callable[[], T]) -> T:
    """``step()``, run again while the storage at ``url`` is away (one line each second, up to
    :data:`dse.study.timeouts.STORAGE_RETRY_S`, then one line and exit 1: :func:`wait_for_storage`):
    a worker's steps a database restart may meet, from opening the study on; ``storage``'s session,
    if any, is dropped before each retry. Any other error is raised as it is. ``step`` must be
    safe to repeat."""
    since: float | None = None
    while True:
        try:
            return step()
        except STORAGE_ERRORS as exc:
            if not storage_unreachable(exc):
                raise
            since = wait_for_storage(exc, url, since)
            if storage is not None:
                with contextlib.suppress(Exception):  # a session a dropped connection broke
                    storage.remove_session()


def run_folder(out: Path, spec: StudySpec) -> Path:
    return out / spec.name


def default_storage(out: Path, spec: StudySpec) -> str:
    """The run folder's SQLite file as a URL, escaped (SQLAlchemy reads ``%20`` as a space and a
    ``?`` as the start of a query: ``--out 'r?x'`` had opened the file ``r``)."""
    return f"sqlite:///{urllib.parse.quote(str((run_folder(out, spec) / 'study.db').resolve()))}"


def _function_note(stored: object) -> str:
    """Where the stored objectives include a function's (a name no metric has): that only a run
    from Python, given the function again, resumes the study (the command line reads it)."""
    functions = [n for n in stored if n not in METRICS] if isinstance(stored, list) else []
    if not functions:
        return ""
    return (
        f" (or resume it from Python: {functions[0]!r} is an objective function of its own, "
        f"Study.with_objective({functions[0]!r}, fn))"
    )


def open_study(
    spec: StudySpec,
    storage: str,
    objectives: list[ObjectiveDef],
    seed: int,
    *,
    stream: int = 0,
    stale_after_s: float | None = None,
) -> optuna.Study:
    """Create the study or load it; its objectives must not have changed."""
    with optuna_quiet():
        return open_stored(spec, storage, objectives, seed, stream=stream, stale_after_s=stale_after_s).study


def open_stored(
    spec: StudySpec,
    url: str,
    objectives: list[ObjectiveDef],
    seed: int,
    *,
    stream: int = 0,
    stale_after_s: float | None = None,
    catalog: dict[str, Any] | None = None,
    calibration: dict[str, Any] | None = None,
) -> StoredStudy:
    """:func:`open_study`, with the storage it opened; with ``catalog`` (the numbers of the
    entries the trials use, :func:`dse.study.variants.catalog_entries`) and ``calibration`` (the
    performance model's, :func:`dse.perf.params.params_to_dict`) each refused when it differs
    from the stored one, and stored where the study holds none. A worker (``stale_after_s``)
    waits out a server that goes away while the study is created or loaded, as it waits when the
    storage is opened (:func:`waited`); for a lone run that is one line (the caller's)."""
    sampler = make_sampler(spec, seed, stream=stream)
    store = open_storage(url, stale_after_s)
    pinned: list[bool] = []  # an attempt stored the objectives: the study is new, a retry pins its version
    held = (catalog, calibration)
    attempt = functools.partial(_loaded, spec, url, store, sampler, objectives, held, pinned)
    return attempt() if stale_after_s is None else waited(store, url, attempt)


def _loaded(
    spec: StudySpec,
    url: str,
    store: optuna.storages.RDBStorage,
    sampler: optuna.samplers.BaseSampler,
    objectives: list[ObjectiveDef],
    held_numbers: tuple[dict[str, Any] | None, dict[str, Any] | None],
    pinned: list[bool],
) -> StoredStudy:
    """The study created or loaded on ``store`` and checked (:func:`open_stored`); safe to repeat
    after a dropped connection (each setting is claimed once, then compared)."""
    names = [o.name for o in objectives]
    try:  # a stored study is loaded, not created again (an insert a read-only file had refused)
        if spec.name in optuna.study.get_all_study_names(storage=store):
            study = optuna.load_study(study_name=spec.name, storage=store, sampler=sampler)
        else:
            study = optuna.create_study(
                study_name=spec.name,
                storage=store,
                sampler=sampler,
                load_if_exists=True,
                directions=[o.direction for o in objectives],
            )
    except ValueError as exc:
        why = f"differ from the stored study's ({exc})"
        raise InputError(redact(url), "objectives", why, names) from None
    # each setting pinned by the first run that stores it (two runs opening a new study at once
    # cannot both pin their own), then compared with this run's
    stored, new = claim_study_attr(study, "objectives", names)
    if new:
        pinned.append(True)
    if pinned:
        claim_study_attr(study, "engine_version", __version__)
    if stored != names:
        raise InputError(
            redact(url),
            "objectives",
            f"the stored study optimises {stored}; use another out= or storage= for other "
            f"objectives{_empty_note(study)}{_function_note(stored)}",
            names,
        )
    _same_functions(study, objectives)
    wanted = [o.direction for o in objectives]
    held = [d.name.lower() for d in study.directions]
    if held != wanted:  # Optuna loads a stored study whatever directions it is asked for
        rule = (
            f"the stored study {'/'.join(held)}s them; use another out= or storage= to "
            f"{'/'.join(wanted)} them{_empty_note(study)}"
        )
        raise InputError(redact(url), "objectives", rule, names)
    now = plain(spec)
    held = _named_by_id(claim_study_attr(study, "spec", now)[0], now, study.user_attrs.get("catalog"))
    changed = spec_change(held, now)
    if changed is not None:
        key, was, now = changed
        raise InputError(
            redact(url),
            f"spec.{key}",
            f"the stored study's trials ran with {was!r}, so they are another study's: use another "
            "out= or storage= for the changed study, or put the file back as it was",
            now,
        )
    catalog, calibration = held_numbers
    if catalog is not None:
        _same_catalog(study, catalog, url)
    if calibration is not None:
        _same_calibration(study, calibration, url)
    return StoredStudy.of(study, store, url)


def _same_functions(study: optuna.Study, objectives: list[ObjectiveDef]) -> None:
    """Warn where an objective function is not the code the stored trials were valued by (one of
    the same name had resumed in silence, its values ranked beside the others'): a warning, not a
    refusal, since the same function under another Python may digest otherwise."""
    codes = {o.name: code_digest(o.fn) for o in objectives if o.fn is not None}
    if not codes:
        return
    held, _ = claim_study_attr(study, "objective_code", codes)
    for name, code in codes.items():
        was = held.get(name) if isinstance(held, dict) else None
        if was is not None and code is not None and was != code:
            warnings.warn(
                ObjectiveWarning(
                    f"objective {name}: its function's code is not the one the stored trials were valued "
                    "by; their values and this run's may not compare (another out= keeps them apart)"
                ),
                stacklevel=2,
            )


def _named_by_id(held: Any, now: dict[str, Any], entries: Any) -> Any:
    """The stored spec with its model and its variants' bases named by id where it named an alias
    of those ``now`` names: a run stores them by catalog id, one before 2026-12-07 stored them as
    written (``qwen3-235b``, ``base = "h200"``), and read or resumed as ids it had been another
    study's. The stored catalog entries (keyed by id) say which model and which variant hardware
    the trials ran with (a variant's numbers are its base's, scaled: the catalog check compares
    them); a study stored without them is compared as it is."""
    models = entries.get("models") if isinstance(entries, dict) else None
    hardware = entries.get("hardware") if isinstance(entries, dict) else None
    if not isinstance(held, dict) or not isinstance(models, dict):
        return held
    out = dict(held)
    if out.get("model") != now.get("model") and now.get("model") in models:
        out["model"] = now["model"]
    was, new = out.get("variants"), now.get("variants")
    if (
        isinstance(was, list)
        and isinstance(new, list)
        and len(was) == len(new)
        and isinstance(hardware, dict)
    ):

        def same(v: Any, n: Any) -> bool:  # the same variant, whose numbers the catalog check compares
            return (
                isinstance(v, dict)
                and isinstance(n, dict)
                and v.get("id") == n.get("id")
                and n["id"] in hardware
            )

        out["variants"] = [
            {**v, "base": n["base"]} if same(v, n) else v for v, n in zip(was, new, strict=True)
        ]
    return out


def _same_catalog(study: optuna.Study, catalog: dict[str, Any], url: str) -> None:
    """Refuse other numbers than the stored ones (the stored trials were priced with those); a
    study that holds none (a new one, or one stored by a dse before this check) gets these,
    unless another run stored its own first."""
    changed = catalog_difference(claim_study_attr(study, "catalog", catalog)[0], catalog)
    if changed is None:
        return
    key, was, now = changed
    raise InputError(
        redact(url),
        key,
        f"the stored study's trials ran with {was!r}, so they are another study's: use another "
        "out= or storage= for the changed catalog, or put the entry back as it was",
        now,
    )


def _same_calibration(study: optuna.Study, calibration: dict[str, Any], url: str) -> None:
    """Refuse another calibration's numbers than the stored one's (the stored trials were priced
    with those: a resume after a recalibration, or under another ``DSE_CALIBRATION``, had mixed
    trials priced two ways); a study that holds none gets this one, unless another run stored
    its own first."""
    changed = calibration_change(claim_study_attr(study, "calibration", calibration)[0], calibration)
    if changed is None:
        return
    key, was, now = changed
    rule = (
        f"the stored study's trials ran with {was!r}, so they are another study's: use another out= "
        "or storage= for the changed calibration, or run with the one they ran with (DSE_CALIBRATION, "
        "or params= from Python)"
    )
    raise InputError(redact(url), key, rule, now)


def calibration_change(held: Any, calibration: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """The first number (its dotted key ``calibration....``, the ``held`` value, this one's) in
    which two calibrations (:func:`dse.perf.params.params_to_dict`) differ, their provenance
    (how each was fitted) aside; None if none does or nothing (no dict) is held."""
    if not isinstance(held, dict):
        return None
    numbers = {k: v for k, v in held.items() if k != "provenance"}
    return _first_difference(
        numbers, {k: v for k, v in calibration.items() if k != "provenance"}, "calibration"
    )


def catalog_change(study: optuna.Study, catalog: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """The first number (its dotted key, the stored value, this catalog's) in which ``catalog``
    differs from the entries the study's trials ran with; None if none does or none was stored."""
    return catalog_difference(study.user_attrs.get("catalog"), catalog)


def catalog_difference(held: Any, catalog: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """The first number in which ``catalog`` differs from the ``held`` ones; None if none does or
    nothing (no dict) is held."""
    return _first_difference(held, catalog, "catalog") if isinstance(held, dict) else None


def _empty_note(study: optuna.Study) -> str:
    """What a refusal adds for a stored study that holds no trial yet (its first run failed on
    bad input): it is still the other objectives' study, not deleted behind a reader or another
    run that may be opening it, but deleting it loses nothing."""
    return "" if study.get_trials(deepcopy=False) else "; it holds no trial, so deleting it starts over"


# what a resumed run may change: its budget, its sampler's seed, its description
RESUMABLE = frozenset({"trials", "seed", "description"})


def spec_change(stored: Any, now: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """The first setting (a dotted key, the stored value, the new one) in which the study stored
    and the one to run differ, outside :data:`RESUMABLE`; None if none does, or if nothing was
    stored. Only keys both hold are compared: a setting a later dse added, or one an older run
    did not store, is no change."""
    if not isinstance(stored, dict):
        return None
    return _first_difference({k: v for k, v in stored.items() if k not in RESUMABLE}, now, "")


def _first_difference(stored: Any, now: Any, key: str) -> tuple[str, Any, Any] | None:
    if isinstance(stored, dict) and isinstance(now, dict):
        for k in sorted(stored.keys() & now.keys()):
            found = _first_difference(stored[k], now[k], f"{key}.{k}" if key else str(k))
            if found is not None:
                return found
        return None
    return None if stored == now else (key, stored, now)


@contextlib.contextmanager
def optuna_quiet() -> Iterator[None]:
    """Optuna's own info lines (a study created or loaded, each trial finished) are not a run's
    output: at most warnings for the block, the caller's level after it."""
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(max(level, optuna.logging.WARNING))
    try:
        yield
    finally:
        optuna.logging.set_verbosity(level)
