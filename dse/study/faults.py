"""What a study run does when something goes wrong: a trial that runs too long, a storage that
goes away for a while, a Ctrl-C.

* :func:`wall_clock` bounds one trial's wall time (SIGALRM in the main thread): a trial over its
  cap is recorded as infeasible with the reason, so one bad trial cannot stall a study.
* :data:`STORAGE_ERRORS` are the database errors a worker on a shared storage waits out (a
  server restart): it retries for :data:`STORAGE_RETRY_S` before giving up with one line.
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

TRIAL_WALL_S = 60.0  # default cap on one trial's wall time
STORAGE_RETRY_S = 120.0  # how long a worker waits for an unreachable shared storage
STORAGE_ERRORS = (
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    sqlalchemy.exc.DBAPIError,
    optuna.exceptions.StorageInternalError,  # Optuna's wrapper of a failed commit
)


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
