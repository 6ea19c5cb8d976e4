"""A lone run's sampler and storage writes in a process of their own, one trial ahead.

Optuna's samplers work in the evaluating process between trials: at 1,000 trials TPE spends
several milliseconds a trial there, and a storage commit one or two more, time the MILP and the
simulator wait for. A lone run instead hands its sampler (on an in-memory copy of the stored
trials) to a child process that proposes trial k + 1 while trial k is evaluated, as a second
worker would: the constant liar counts the trial under evaluation. The order is fixed (trial
k + 2 is proposed once trial k is told, never earlier or later), so a seed gives the same trials
however fast either side runs.

The child also writes each finished trial to the storage (one transaction, with the sampler's
own attributes: NSGA-II's generation, TPE's relative parameters) as it is told. It ignores Ctrl-C:
the parent stops it by closing the pipe, and it writes every trial it was told before it exits,
also when the parent was killed. The parent's :meth:`Proposer.close` returns once all are stored.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import signal
import traceback
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from dse.study.samplers import make_sampler
from dse.study.spec import StudySpec
from dse.study.storage import open_storage, write_finished
from dse.study.sweep import suggest_point
from dse.study.trial import suggest

AHEAD = 1  # trials proposed beyond the one under evaluation


@dataclass(frozen=True)
class Proposal:
    """A trial to evaluate: its number in the sampler's study, its parameters, and what the
    study's search makes of them (a :class:`dse.study.trial.Choice`, or a grid point)."""

    number: int
    params: dict[str, Any]
    design: Any


class Proposer:
    """Proposals for ``todo`` trials from the study's sampler in a child process, which stores
    them in ``storage`` (a URL) once finished.

    ``history`` are the study's finished trials; the sampler is seeded as
    :func:`dse.study.samplers.make_sampler` seeds it with ``seed``, ``budget`` and ``stream``."""

    def __init__(
        self,
        spec: StudySpec,
        storage: str,
        directions: Sequence[optuna.study.StudyDirection],
        history: list[optuna.trial.FrozenTrial],
        *,
        seed: int,
        budget: int,
        stream: int,
        todo: int,
    ) -> None:
        fork = "fork" in multiprocessing.get_all_start_methods()  # no imports to repeat in the child
        ctx = multiprocessing.get_context("fork" if fork else None)
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=_serve,
            args=(
                child,
                self._conn if fork else None,
                spec,
                storage,
                list(directions),
                history,
                seed,
                budget,
                stream,
            ),
            daemon=True,
            name="dse-sampler",
        )
        self._proc.start()
        child.close()
        self._proposals: deque[Proposal] = deque()
        self._todo, self._asked = todo, 0
        for _ in range(min(todo, 1 + AHEAD)):
            self._ask()

    def next(self) -> Proposal:
        """The next trial to evaluate (waits while the sampler is still proposing it)."""
        while not self._proposals:
            try:
                self._receive()
            except EOFError:
                raise RuntimeError(f"the sampler process ended (exit code {self._proc.exitcode})") from None
        return self._proposals.popleft()

    def finish(self, number: int, values: list[float], violation: float, user_attrs: dict[str, Any]) -> None:
        """Tell the sampler trial ``number``'s objective values and worst constraint violation
        (<= 0: feasible); the child stores it, with ``user_attrs`` added, and asks ahead."""
        self._conn.send(("tell", number, values, violation, user_attrs))
        if self._asked < self._todo:
            self._ask()

    def close(self) -> None:
        """Stop the child once it has stored every finished trial; raise what it failed with."""
        if self._conn.closed:
            return
        try:
            with contextlib.suppress(OSError):  # the child is gone already
                self._conn.send(None)
            with contextlib.suppress(EOFError):  # the child is done
                while True:
                    self._receive()  # proposals nobody needs now; the child's error raises
        finally:
            self._conn.close()
            self._proc.join(timeout=60.0)
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join()

    def _ask(self) -> None:
        self._conn.send(("ask",))
        self._asked += 1

    def _receive(self) -> None:
        got, body = self._conn.recv()
        if got == "error":
            raise body
        self._proposals.append(Proposal(*body))


def _serve(
    conn: multiprocessing.connection.Connection,
    parents: multiprocessing.connection.Connection | None,
    spec: StudySpec,
    storage: str,
    directions: list[optuna.study.StudyDirection],
    history: list[optuna.trial.FrozenTrial],
    seed: int,
    budget: int,
    stream: int,
) -> None:
    """The child: ask and propose; tell and store; until the parent closes the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and closes the pipe
    if parents is not None:  # a forked child holds the parent's end too: close it, or no EOF comes
        parents.close()
    propose = suggest_point if spec.is_grid else suggest
    running: dict[int, optuna.Trial] = {}
    try:
        study = optuna.create_study(directions=directions, sampler=make_sampler(spec, seed, budget, stream))
        study.add_trials(history)
        stored = optuna.load_study(study_name=spec.name, storage=open_storage(storage))
        while (msg := conn.recv()) is not None:
            if msg[0] == "ask":
                trial = study.ask()
                design = propose(trial, spec)
                running[trial.number] = trial
                conn.send(("proposal", (trial.number, dict(trial.params), design)))
            else:
                _, number, values, violation, user_attrs = msg
                trial = running.pop(number)
                trial.set_constraint("violation", violation)
                study.tell(trial, values)
                write_finished(stored, study._storage.get_trial(trial._trial_id), user_attrs)
    except (EOFError, BrokenPipeError):  # the parent went away: everything it told is stored
        return
    except Exception as exc:  # noqa: BLE001 - handed to the parent, which raises it
        try:
            conn.send(("error", exc))
        except Exception:  # noqa: BLE001 - an exception that does not pickle
            conn.send(("error", RuntimeError("sampler process: " + traceback.format_exc())))
        with contextlib.suppress(EOFError, OSError):  # until the parent, which reads it next, closes
            while conn.recv() is not None:
                pass
