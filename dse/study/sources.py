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
import time
from collections.abc import Callable
from typing import Any, TypeVar

import optuna

from dse import interrupt
from dse.study.choice import suggest
from dse.study.faults import heartbeat, storage_unreachable
from dse.study.grid import grid_points, grid_space, suggest_point
from dse.study.optuna_compat import STALE_AFTER_ATTR, knows_schema, read_trials, state_counts
from dse.study.proposer import Proposal, Proposer
from dse.study.spec import StudySpec
from dse.study.storage import StoredStudy, fail_dead, running_note, storage_lock, wait_for_storage, waited

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
    def next(self) -> Proposal | None:
        """The next trial to evaluate: its number, parameters and design; None when the study
        holds its budget after all (other workers finished it). Called at the start of each
        trial, while :attr:`done` is below the budget."""

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
    ``stale_after_s`` is a dead worker's. ``done``: the complete trials (a grid's: its points with
    a complete trial) when the worker starts; ``budget``: the study's.

    A trial is asked for under a lock on the storage (:func:`dse.study.storage.storage_lock`),
    and only while the complete and running trials (a grid's points, complete or claimed) are
    fewer than the budget: workers never run a grid point twice nor a search past its budget.
    When the rest of the budget is running in other workers, this one waits for them (a dead
    one's trial is failed after ``stale_after_s``, and run here). A trial this worker drops (the
    storage went away under it) or holds when it stops (Ctrl-C, SIGTERM, an error) is failed,
    best effort, so nothing it ran is left running."""

    def __init__(
        self, spec: StudySpec, stored: StoredStudy, stale_after_s: float, done: int, budget: int
    ) -> None:
        super().__init__(done)
        self._spec, self._stored, self._budget = spec, stored, budget
        self._propose = suggest_point if spec.is_grid else suggest
        self._beat_s = max(1.0, stale_after_s / 4)
        self._stale_after_s = stale_after_s
        self._trial: optuna.Trial | None = None  # asked, not yet told
        self._away_since: float | None = None  # when the storage went away, while it is away
        self._waiting = False  # said once that it waits for other workers' trials

    def next(self) -> Proposal | None:
        self._drop()  # a trial recover() gave up on: its point (its share of the budget) is free again
        while True:
            interrupt.check()
            self.stale += fail_dead(self._stored)  # their heartbeats stopped: someone runs another
            with storage_lock(self._stored.storage, f"dse-ask:{self._stored.study.study_name}"):
                self.done, held = tally(self._stored, self._spec)
                if self.done >= self._budget:
                    return None
                if held < self._budget:
                    # a signal while the trial is created would leave it running and unknown here
                    with interrupt.deferred():
                        trial = self._trial = self._stored.study.ask()  # a grid claims its point here
                        self._own_stale_after(trial)
                    break
            self._wait()
        design = self._propose(trial, self._spec)
        return Proposal(trial.number, dict(trial.params), design)

    def _wait(self) -> None:
        """The rest of the budget runs in other workers: wait for it to finish or fail."""
        if not self._waiting:
            sys.stderr.write(
                f"dse: the rest of the study is running in other workers ({running_note(self._stored)}); "
                f"waiting for them (a trial silent for {self._stale_after_s:g} s is a dead (killed or "
                "frozen) worker's: it is failed then and run again)\n"
            )
            self._waiting = True
        time.sleep(WAIT_S)

    def _own_stale_after(self, trial: optuna.Trial) -> None:
        """The trial stores this worker's stale-after as it is asked for, which other workers, whose
        own may differ, judge its silence by (:data:`dse.study.optuna_compat.STALE_AFTER_ATTR`):
        stored only once its proposal was made, a worker killed while proposing had left a trial
        judged by the others' (120 s for a worker of 6 s), and a live one's proposal could be
        judged by a shorter one."""
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):  # failed already: dropped later
            trial_id = self._stored.trial_id(trial.number)
            self._stored.storage.set_trial_system_attr(trial_id, STALE_AFTER_ATTR, self._stale_after_s)

    def evaluating(self, job: Proposal) -> contextlib.AbstractContextManager[Any]:
        """The trial's heartbeats, from the first moment of its evaluation, so a long trial never
        looks dead (its stale-after it stored as it was asked for: :meth:`_own_stale_after`)."""
        return heartbeat(self._stored.storage, self._stored.trial_id(job.number), self._beat_s)

    def finish(self, job: Proposal, values: list[float], violation: float, record: dict[str, Any]) -> bool:
        trial = self._trial
        assert trial is not None and trial.number == job.number
        try:
            trial.set_constraint("violation", violation)
            trial.set_user_attr("record", record)  # one write
            self._stored.study.tell(trial, values)
        except (optuna.exceptions.UpdateFinishedTrialError, ValueError) as exc:
            # failed meanwhile as stale: before the record (the storage refuses the write) or
            # between it and the values (Optuna's tell refuses a FAIL trial with a ValueError)
            if isinstance(exc, ValueError) and self._running(trial.number):
                raise
            self._trial = None
            sys.stderr.write(f"dse: trial {trial.number} was failed by another worker; dropped\n")
            return False
        self._trial = None
        self.done = tally(self._stored, self._spec)[0]
        self._away_since = None
        return True

    def _running(self, number: int) -> bool:
        """Whether trial ``number`` is still running in the storage."""
        state = self._stored.storage.get_trial(self._stored.trial_id(number)).state
        return bool(state == optuna.trial.TrialState.RUNNING)

    def recover(self, exc: Exception) -> bool:
        """A storage that is away is waited for (one line each second, up to
        :data:`dse.study.timeouts.STORAGE_RETRY_S`); any other error ends the run. The trial in
        hand is failed once the storage is back (:meth:`next`)."""
        if not storage_unreachable(exc):
            return False
        self._away_since = wait_for_storage(exc, self._stored.url, self._away_since)
        with contextlib.suppress(Exception):  # a session a dropped connection broke
            self._stored.storage.remove_session()
        return True

    def close(self) -> None:
        """The trial in hand, if any (Ctrl-C, SIGTERM, an error stopped the worker), is failed:
        best effort, the storage may be what failed."""
        with contextlib.suppress(Exception):
            self._drop()
        self._trial = None

    def _drop(self) -> None:
        """Fail the trial in hand (asked, never told); one another worker failed or a commit that
        went through before its connection dropped is left as it is."""
        trial = self._trial
        if trial is None:
            return
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            self._stored.storage.set_trial_state_values(
                self._stored.trial_id(trial.number), state=optuna.trial.TrialState.FAIL
            )
        self._trial = None


WAIT_S = 1.0
"""How often a worker waiting for other workers' trials looks again."""


def tally(stored: StoredStudy, spec: StudySpec) -> tuple[int, int]:
    """What the shared study holds, read from its storage: (complete, complete or running)
    trials; for a grid, its points with a complete trial, and complete or claimed."""
    live = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING)
    storage = stored.storage
    known = knows_schema(storage)  # counted and read by the database, without the records
    if spec.is_grid:
        trials = (
            read_trials(storage, stored.study_id, live, user_attrs=False)
            if known
            else storage.get_all_trials(stored.study_id, deepcopy=False, states=live)
        )
        done, held = grid_points(trials, sorted(grid_space(spec)))
        return len(done), len(held)
    if known:
        counts = state_counts(storage, stored.study_id)
        n = counts.get(optuna.trial.TrialState.COMPLETE, 0)
        return n, n + counts.get(optuna.trial.TrialState.RUNNING, 0)
    trials = storage.get_all_trials(stored.study_id, deepcopy=False, states=live)
    n = sum(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    return n, len(trials)


def waited_out(stored: StoredStudy, step: Callable[[], T]) -> T:
    """``step()``, run again while the storage is away (one line each second, up to
    :data:`dse.study.timeouts.STORAGE_RETRY_S`, as :meth:`SharedTrials.recover` waits): a worker's
    start-up steps, which a database restart may meet as well as its trials
    (:func:`dse.study.storage.waited`, which opening the study waits with too). ``step`` must be
    safe to repeat."""
    return waited(stored.storage, stored.url, step)


def complete(study: optuna.Study) -> int:
    """The study's complete trials."""
    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


def counted(study: optuna.Study, spec: StudySpec) -> int:
    """What the study's budget counts: its complete trials; a grid's, its points with a complete
    trial (a point run twice by an older dse counts once, and a point whose only trial failed
    does not)."""
    if not spec.is_grid:
        return complete(study)
    trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return len(grid_points(trials, sorted(grid_space(spec)))[0])
