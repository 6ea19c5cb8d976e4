"""Where a run's trials come from and where their results go: one small interface,
:class:`TrialSource`, and its two kinds.

* :class:`LoneTrials`: a lone run. Its sampler works in a process of its own on an in-memory copy
  of the study, one trial ahead (:mod:`dse.study.proposer`), and that process writes each finished
  trial to the storage in one transaction.
* :class:`SharedTrials`: a worker among others on one storage. It asks the storage for each trial
  and tells it the result, so workers see each other's trials; a running trial carries heartbeats,
  the trials of dead workers are failed before each ask, and a storage that goes away (a server
  restart) is waited for.
"""

from __future__ import annotations

import abc
import contextlib
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import optuna

from dse.study.choice import suggest
from dse.study.faults import STORAGE_ERRORS, heartbeat, storage_unreachable
from dse.study.grid import suggest_point
from dse.study.proposer import Proposal, Proposer
from dse.study.spec import StudySpec
from dse.study.storage import StoredStudy, fail_dead, wait_for_storage

T = TypeVar("T")


class TrialSource(abc.ABC):
    """The trials of one run, one at a time, as the runner (:func:`dse.study.runner._trials`)
    asks for them: :meth:`next`, the evaluation inside :meth:`evaluating`, :meth:`finish`; then
    the next trial, while :attr:`done` (the study's complete trials, as last counted) is below the
    run's budget. A storage error in any of the three goes to :meth:`recover`; :meth:`close` comes
    once, at the end. :attr:`stale` counts the trials of dead processes this source marked failed."""

    def __init__(self, done: int) -> None:
        self.done = done
        self.stale = 0

    @abc.abstractmethod
    def next(self) -> Proposal:
        """The next trial to evaluate: its number, parameters and design. Called at the start of
        each trial, while :attr:`done` is below the budget."""

    def evaluating(self, job: Proposal) -> contextlib.AbstractContextManager[Any]:
        """Entered, in the runner's thread, just before ``job`` is evaluated and left once the
        evaluation ends (within its wall-clock cap), however it ends. Nothing by default."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    def finish(self, job: Proposal, values: list[float], violation: float, record: dict[str, Any]) -> bool:
        """Called once ``job``'s evaluation has ended: store it as complete with its objective
        ``values``, its worst constraint ``violation`` (<= 0: feasible; the sampler sees it) and
        its ``record`` (the trial's user attribute ``record``), and update :attr:`done`. False
        when the trial was dropped instead (the runner does not count it as run)."""

    def recover(self, exc: Exception) -> bool:
        """Called when :meth:`next`, :meth:`evaluating` or :meth:`finish` raised the storage error
        ``exc``: True once the source has waited it out (the trial in hand is dropped and the run
        goes on), False to end the run with it. False by default."""
        return False

    def close(self) -> None:  # noqa: B027 - a hook with nothing to do by default, as BaseSampler's
        """Called once when the run ends, however it ends (its budget reached, Ctrl-C, an error),
        after the last :meth:`finish`. Nothing by default."""


class LoneTrials(TrialSource):
    """A lone run's trials, from ``proposer`` (the sampler's own process), which stores each once
    told of it; ``done``: the complete trials before the run."""

    def __init__(self, proposer: Proposer, done: int) -> None:
        super().__init__(done)
        self._proposer = proposer

    def next(self) -> Proposal:
        return self._proposer.next()

    def finish(self, job: Proposal, values: list[float], violation: float, record: dict[str, Any]) -> bool:
        self._proposer.finish(job.number, values, violation, {"record": record})
        self.done += 1
        return True

    def close(self) -> None:
        """Returns once the sampler's process has stored every trial it was told of; raises what
        that process failed with."""
        self._proposer.close()


class SharedTrials(TrialSource):
    """A worker's trials of the ``stored`` study (opened with heartbeats): a trial silent for
    ``stale_after_s`` is a dead worker's. ``done``: the complete trials when the worker starts."""

    def __init__(self, spec: StudySpec, stored: StoredStudy, stale_after_s: float, done: int) -> None:
        super().__init__(done)
        self._spec, self._stored = spec, stored
        self._propose = suggest_point if spec.is_grid else suggest
        self._beat_s = max(1.0, stale_after_s / 4)
        self._trial: optuna.Trial | None = None
        self._away_since: float | None = None  # when the storage went away, while it is away

    def next(self) -> Proposal:
        self.stale += fail_dead(self._stored)  # their heartbeats stopped: someone runs another
        trial = self._trial = self._stored.study.ask()
        design = self._propose(trial, self._spec)
        return Proposal(trial.number, dict(trial.params), design)

    def evaluating(self, job: Proposal) -> contextlib.AbstractContextManager[Any]:
        """The trial's heartbeats, from the first moment, so a long trial never looks dead."""
        return heartbeat(self._stored.storage, self._stored.trial_id(job.number), self._beat_s)

    def finish(self, job: Proposal, values: list[float], violation: float, record: dict[str, Any]) -> bool:
        trial = self._trial
        assert trial is not None and trial.number == job.number
        try:
            trial.set_constraint("violation", violation)
            trial.set_user_attr("record", record)  # one write
            self._stored.study.tell(trial, values)
        except optuna.exceptions.UpdateFinishedTrialError:  # failed meanwhile as stale
            sys.stderr.write(f"dse: trial {trial.number} was failed by another worker; dropped\n")
            return False
        self.done = complete(self._stored.study)
        self._away_since = None
        return True

    def recover(self, exc: Exception) -> bool:
        """A storage that is away is waited for (one line each second, up to
        :data:`dse.study.timeouts.STORAGE_RETRY_S`); any other error ends the run."""
        if not storage_unreachable(exc):
            return False
        self._away_since = wait_for_storage(exc, self._stored.url, self._away_since)
        with contextlib.suppress(Exception):  # a session a dropped connection broke
            self._stored.storage.remove_session()
        return True


def waited_out(stored: StoredStudy, step: Callable[[], T]) -> T:
    """``step()``, run again while the storage is away (one line each second, up to
    :data:`dse.study.timeouts.STORAGE_RETRY_S`, as :meth:`SharedTrials.recover` waits): a worker's
    start-up steps, which a database restart may meet as well as its trials. ``step`` must be
    safe to repeat."""
    since: float | None = None
    while True:
        try:
            return step()
        except STORAGE_ERRORS as exc:
            if not storage_unreachable(exc):
                raise
            since = wait_for_storage(exc, stored.url, since)
            with contextlib.suppress(Exception):  # a session a dropped connection broke
                stored.storage.remove_session()


def complete(study: optuna.Study) -> int:
    """The study's complete trials: what its budget counts."""
    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
