"""What a study run does when something goes wrong: a trial that runs too long, a storage that
goes away for a while, a Ctrl-C.

* :func:`wall_clock` bounds one trial's wall time (SIGALRM in the main thread): a trial over its
  cap is recorded as infeasible with the reason, so one bad trial cannot stall a study.
* :func:`storage_unreachable` sorts the database errors a worker on a shared storage waits out (a
  server restart) from the rest: it retries for :data:`dse.study.timeouts.STORAGE_RETRY_S` before
  giving up with one line (a SQLite file's errors are none of these: it has no server to come
  back); :func:`storage_fault` turns the rest a user can act on (a full disk, a server that does
  not answer) into one line; :func:`heartbeat` keeps a running trial's heartbeats coming.
* :class:`StudyInterrupted` is what Ctrl-C becomes: where the run stopped and how to resume.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy.exc

from dse.errors import InputError, Interrupted, StorageFault

STORAGE_ERRORS = (sqlalchemy.exc.DBAPIError, optuna.exceptions.StorageInternalError)  # caught, then sorted


def storage_unreachable(exc: BaseException) -> bool:
    """Whether a storage error means the database is away (worth waiting for), not a bug nor a
    refusal. A SQLite file has no server to come back: its errors (a full disk, a read-only
    folder, a damaged file) are storage faults at once, but for another process's lock, which
    ends. A server's refusal the user must act on (its disk full, a wrong URL) is no outage."""
    if isinstance(exc, optuna.exceptions.StorageInternalError):  # Optuna's wrapper of a failed commit
        return exc.__cause__ is not None and storage_unreachable(exc.__cause__)
    if _sqlite(exc):
        return any("database is locked" in str(e).lower() for e in _chain(exc))
    if _named_cause(exc) is not None or _wrong_url(exc):
        return False
    if isinstance(exc, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError):
        return True
    if isinstance(exc, sqlalchemy.exc.PendingRollbackError):  # a session whose connection dropped
        return True
    return isinstance(exc, sqlalchemy.exc.DBAPIError) and bool(exc.connection_invalidated)


def server_away(exc: BaseException) -> str | None:
    """The driver's own first line when ``exc`` is a database server that does not answer (down,
    restarting, shutting down, refusing connections, a dropped connection); else ``None`` (SQLite,
    whose file has no server; a wrong URL; any other error)."""
    if isinstance(exc, optuna.exceptions.StorageInternalError):
        return None if exc.__cause__ is None else server_away(exc.__cause__)
    if _sqlite(exc) or _named_cause(exc) is not None or _wrong_url(exc):
        return None
    connection = isinstance(exc, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError) or (
        isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.connection_invalidated
    )
    return driver_line(exc) if connection else None


def driver_line(exc: BaseException) -> str:
    """The first line of the innermost error ``exc`` wraps (the driver's own words, not Optuna's
    or SQLAlchemy's wrapper text), or of ``exc`` itself; its type's name if it says nothing."""
    chain = _chain(exc)
    if not _first_line(str(chain[-1])):  # the driver's says nothing: its name, not a wrapper's "... ()"
        return type(chain[-1]).__name__
    for e in reversed(chain):
        if line := _first_line(str(e)):
            return line
    return type(exc).__name__


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc``, the error it wraps (a driver's, through SQLAlchemy's ``orig``), and so on."""
    chain, seen = [exc], exc
    for _ in range(4):
        nxt = getattr(seen, "orig", None) or seen.__cause__ or seen.__context__
        if nxt is None or nxt in chain:
            break
        chain.append(nxt)
        seen = nxt
    return chain


def _sqlite(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's (a file: no server that may come back)."""
    return any(isinstance(e, sqlite3.Error) for e in _chain(exc))


WRONG_URL = (
    "could not translate host name",
    "name or service not known",
    "does not exist",  # the database or the role
    "authentication failed",
    "no password supplied",
    "invalid dsn",
    "invalid connection option",
    "invalid integer value",
    "invalid port",
    "invalid sslmode value",  # libpq's options: a value it does not know
    "invalid value",
)
"""Words of a server's driver for a URL that names no database it may open: bad input."""


def _wrong_url(exc: BaseException) -> bool:
    return any(n in str(e).lower() for e in _chain(exc) for n in WRONG_URL)


def _named_cause(exc: BaseException) -> str | None:
    """The cause of :data:`CAUSES` the drivers' words in ``exc`` name, if any."""
    text = " ".join(str(e) for e in _chain(exc)).lower()
    return next((cause for needles, cause in CAUSES if any(n in text for n in needles)), None)


CAUSES = (
    (("disk is full", "no space left", "disk quota"), "the disk is full"),
    (("readonly database", "read-only file system", "read only file system"), "it is read-only"),
    (("database is locked",), "the database is locked by another process"),
    (("permission denied",), "permission denied"),
    (
        ("database disk image is malformed", "file is not a database", "could not decode to utf-8"),
        "the database file is damaged (restore it from a copy, or run into another folder)",
    ),
)
"""Words of the drivers (SQLite, PostgreSQL, the OS) and what they mean to the user."""


def storage_fault(exc: BaseException, where: str, path: Path | None = None) -> StorageFault | None:
    """``exc`` (a database or file error) as one line naming the cause and ``where``, or ``None``
    when it is none of the causes a user can act on (a bug keeps its traceback).

    The drivers' words name most causes. Where they do not (SQLite's "unable to open database
    file" or "disk I/O error", polars' "transport error" on a full disk), ``path``, a file the
    write went to, lets the folder tell: missing, read-only, or a disk with no room left."""
    messages, seen = [], exc
    for _ in range(5):  # the error, the driver's error it wraps, and so on
        messages.append(str(seen))
        if isinstance(seen, OSError) and seen.strerror:
            messages.append(seen.strerror)
        nxt = getattr(seen, "orig", None) or seen.__cause__ or seen.__context__
        if nxt is None or nxt is seen:
            break
        seen = nxt
    text = " ".join(messages).lower()
    for needles, cause in CAUSES:
        said = next((m for m in reversed(messages) if any(n in m.lower() for n in needles)), None)
        if said is not None:  # the driver's own words (the innermost error's), not a wrapper's
            return StorageFault(where, cause, _first_line(said))
    away = server_away(exc)
    if away is not None:  # a server down, restarting or refusing: the stored trials are kept
        return StorageFault(
            where, f"the database server does not answer ({away}); the stored trials are kept: run the "
            "same command again once it answers",
        )  # fmt: skip
    if path is None:
        return None
    folder = next(d for d in (path.parent, *path.parents) if d.is_dir())  # the root always is
    if not os.access(folder, os.W_OK):
        return StorageFault(where, "it is read-only")
    if holds_no_files(folder) is None and shutil.disk_usage(folder).free < FULL_BELOW_BYTES:
        return StorageFault(where, "the disk is full", _first_line(messages[-1]))
    if "unable to open database file" in text or "disk i/o error" in text:
        return StorageFault(where, "the database file cannot be opened", _first_line(messages[-1]))
    return None


def file_in_the_way(path: Path) -> Path | None:
    """The first of ``path`` and its parents that is a file, where a folder must go; None if none is."""
    return next((d for d in (path, *path.parents) if d.exists() and not d.is_dir()), None)


@contextlib.contextmanager
def writing(folder: Path) -> Iterator[None]:
    """Files written in the block that the disk refuses (full, read-only) end the command with one
    line naming ``folder`` and the cause; any other error keeps its traceback."""
    try:
        yield
    except (NotADirectoryError, FileExistsError) as exc:  # a file where a folder must go: bad input
        at = Path(exc.filename or folder)
        blocked = file_in_the_way(at) or at
        raise InputError(str(blocked), "", "must be a folder: a file has its name") from None
    except Exception as exc:  # noqa: BLE001 - re-raised unless a storage cause explains it
        fault = storage_fault(exc, str(folder), folder / "_")
        if fault is not None:
            raise fault from None
        if (virtual := holds_no_files(folder)) is not None:
            raise InputError(str(folder), "", NO_FILES_RULE.format(virtual)) from None
        raise


NO_FILES_RULE = "must be a folder files can be written in: {} is a virtual file system (no blocks, no inodes)"
"""The rule a folder on a file system that holds no files breaks (:func:`holds_no_files`)."""


def holds_no_files(path: Path) -> Path | None:
    """The nearest existing folder at or above ``path`` when it lies on a file system of no size,
    no blocks and no inodes (``/proc``, ``/sys``), where no file can be made: its free room is 0
    too, which had read as a full disk (``--out /proc/x``: "the disk is full", exit 1); else None."""
    folder = next((d for d in (path, *path.parents) if d.is_dir()), None)
    if folder is None:
        return None
    try:
        st = os.statvfs(folder)
    except OSError:  # not there any more, or no statvfs: nothing to tell
        return None
    return folder if st.f_blocks == 0 and st.f_files == 0 else None


FULL_BELOW_BYTES = 1 << 20
"""A disk with less free room than this counts as full (SQLite needs room for its journal)."""


def _first_line(text: str) -> str:
    """The first line of ``text``; "" where it says nothing (no letter or digit: a driver's error
    whose words are "()" had been quoted as "storage unreachable (())")."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:160] if any(c.isalnum() for c in line) else ""


@contextlib.contextmanager
def heartbeat(storage: Any, trial_id: int, every_s: float) -> Iterator[None]:
    """Record the trial's heartbeat every ``every_s`` while the block runs (a thread), so a long
    trial never looks like one whose worker died; a beat lost to an unreachable storage is skipped."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            with contextlib.suppress(*STORAGE_ERRORS):
                storage.record_heartbeat(trial_id)

    storage.record_heartbeat(trial_id)  # at once: a trial without any beat is never seen as stale
    thread = threading.Thread(target=beat, name=f"heartbeat-{trial_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class TrialTimeout(Exception):
    """A trial ran over its wall-clock cap."""


class StudyInterrupted(Interrupted):
    """Ctrl-C during a run: every finished trial is stored; the same command resumes. A
    ``KeyboardInterrupt`` (:class:`dse.errors.Interrupted`): ``except Exception`` does not stop it."""

    def __init__(self, done: int, budget: int, where: str, during: str = "trials") -> None:
        self.done, self.budget = done, budget
        what = (
            f"interrupted after {done} of {budget} trials; all {done} are stored in {where}"
            if during == "trials"
            else f"interrupted while writing the {during}; the {done} trials are stored in {where}"
        )
        super().__init__(f"{what}. Run the same command again to resume.")


@contextlib.contextmanager
def wall_clock(seconds: float | None) -> Iterator[None]:
    """Raise :class:`TrialTimeout` in the block after ``seconds`` (main thread only; elsewhere,
    or with ``None``, no cap). Native code (the MILP solver) is interrupted when it returns to
    Python; the solver has its own time limit. Time the block spends compiling numba kernels
    (:func:`compiling_s`: a fresh process's first trial, 21 s alone on two cores, 98 s each for
    five workers starting together) is added to the cap: it is the process's, not the trial's,
    and a kernel the cap stopped mid-compile had to be compiled again by the next trial."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    granted = compiling_s()  # compiling before the block is not the block's

    def expire(_signum: int, _frame: Any) -> None:
        nonlocal granted
        spent = compiling_s()
        if spent > granted:  # the block compiled (or is compiling): that much more time
            signal.setitimer(signal.ITIMER_REAL, max(spent - granted, 0.01))
            granted = spent
            return
        raise TrialTimeout

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, old)


_compiling: Any = None  # the listener of compiling_s, registered with numba once per process


def compiling_s() -> float:
    """Seconds this process has spent compiling numba kernels (numba's ``numba:compile`` events,
    outermost ones only, the one under way included); counted from the first call on."""
    global _compiling
    if _compiling is None:
        import numba.core.event

        import dse.jit  # noqa: F401 - numba is loaded after pyomo's scipy hook is dropped

        class Compiling(numba.core.event.Listener):  # type: ignore[misc]
            depth, total, since = 0, 0.0, 0.0

            def on_start(self, event: Any) -> None:
                if self.depth == 0:
                    self.since = time.perf_counter()
                self.depth += 1

            def on_end(self, event: Any) -> None:
                self.depth -= 1
                if self.depth == 0:
                    self.total += time.perf_counter() - self.since

            def spent(self) -> float:
                return self.total + (time.perf_counter() - self.since if self.depth else 0.0)

        _compiling = Compiling()
        numba.core.event.register("numba:compile", _compiling)
    return float(_compiling.spent())
