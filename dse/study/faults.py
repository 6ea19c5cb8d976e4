"""What a study run does when something goes wrong: a trial that runs too long, a storage that
goes away for a while, a Ctrl-C.

* :func:`wall_clock` bounds one trial's wall time (SIGALRM in the main thread): a trial over its
  cap is recorded as infeasible with the reason, so one bad trial cannot stall a study.
* :func:`storage_unreachable` sorts the database errors a worker on a shared storage waits out (a
  server restart) from the rest: it retries for :data:`dse.study.timeouts.STORAGE_RETRY_S` before
  giving up with one line; :func:`heartbeat` keeps a running trial's heartbeats coming.
* :class:`StudyInterrupted` is what Ctrl-C becomes: where the run stopped and how to resume.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

import optuna
import sqlalchemy.exc

from dse.errors import DseError

STORAGE_ERRORS = (sqlalchemy.exc.DBAPIError, optuna.exceptions.StorageInternalError)  # caught, then sorted


def storage_unreachable(exc: BaseException) -> bool:
    """Whether a storage error means the database is away (worth waiting for), not a bug."""
    if isinstance(exc, optuna.exceptions.StorageInternalError):  # Optuna's wrapper of a failed commit
        return exc.__cause__ is not None and storage_unreachable(exc.__cause__)
    if isinstance(exc, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError):
        return True
    if isinstance(exc, sqlalchemy.exc.PendingRollbackError):  # a session whose connection dropped
        return True
    return isinstance(exc, sqlalchemy.exc.DBAPIError) and bool(exc.connection_invalidated)


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


class StudyInterrupted(DseError):
    """Ctrl-C during a run: every finished trial is stored; the same command resumes."""

    exit_code = 130

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
    Python; the solver has its own time limit."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(_signum: int, _frame: Any) -> None:
        raise TrialTimeout

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, old)
