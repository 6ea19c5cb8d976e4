"""A lone run's sampler and storage writes in a process of their own, one trial ahead.

Optuna's samplers work in the evaluating process between trials: at 1,000 trials TPE spends
several milliseconds a trial there, and a storage commit one or two more, time the MILP and the
simulator wait for. A lone run instead hands its sampler (on an in-memory copy of the stored
trials) to a child process that proposes trial k + 1 while trial k is evaluated, as a second
worker would: the constant liar counts the trial under evaluation. The order is fixed (trial
k + 2 is proposed once trial k is told, never earlier or later), so a seed gives the same trials
however fast either side runs, and a run that may not start processes (inside a daemon process,
such as a ``multiprocessing.Pool`` worker) keeps the same order in its own process.

The child also writes each finished trial to the storage (one transaction, with the sampler's
own attributes: NSGA-II's generation, TPE's relative parameters) as it is told, once it has sent
the proposal the parent asked for with it (the parent evaluates meanwhile, rather than wait out
the write). It ignores Ctrl-C: the parent stops it by closing the pipe, and it writes every
trial it was told before it exits, also when the parent was killed. The parent's
:meth:`Proposer.close` returns once all are stored.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import time
import traceback
from collections import deque
from dataclasses import dataclass
from typing import Any

import optuna

from dse import interrupt
from dse.study.choice import suggest
from dse.study.grid import suggest_point
from dse.study.samplers import make_sampler
from dse.study.spec import StudySpec
from dse.study.storage import StoredStudy, open_storage, write_finished

AHEAD = 1  # trials proposed beyond the one under evaluation
CLOSE_WAIT_S = 60.0  # how long closing waits for the child's last writes
UNSTORED_MAX = 8  # told trials the child may leave unwritten while the parent's next message waits


@dataclass(frozen=True)
class Proposal:
    """A trial to evaluate: its number in the sampler's study, its parameters, and what the
    study's search makes of them (a :class:`dse.study.trial.Choice`, or a grid point)."""

    number: int
    params: dict[str, Any]
    design: Any


@dataclass(frozen=True)
class _Setup:
    """What the sampler's side needs: the spec, the stored study's directions and finished
    trials, and the seeding of :func:`dse.study.samplers.make_sampler`."""

    spec: StudySpec
    directions: list[optuna.study.StudyDirection]
    history: list[optuna.trial.FrozenTrial]
    seed: int
    budget: int
    stream: int
    first: list[dict[str, Any]]  # parameters of trials to run first, unless already run


class _Sampling:
    """The sampler on an in-memory copy of the study; finished trials go to ``stored``."""

    def __init__(self, setup: _Setup, stored: StoredStudy) -> None:
        sampler = make_sampler(setup.spec, setup.seed, setup.budget, setup.stream, len(setup.first))
        self.study = optuna.create_study(directions=setup.directions, sampler=sampler)
        self.study.add_trials(setup.history)
        for p in setup.first:
            self.study.enqueue_trial(p, skip_if_exists=True)
        self.stored, self.spec = stored, setup.spec
        self.running: dict[int, optuna.Trial] = {}
        self.unstored: list[tuple[optuna.trial.FrozenTrial, dict[str, Any]]] = []  # told, to write
        self.write_failed = False

    def ask(self) -> Proposal:
        trial = self.study.ask()
        design = (suggest_point if self.spec.is_grid else suggest)(trial, self.spec)
        self.running[trial.number] = trial
        return Proposal(trial.number, dict(trial.params), design)

    def tell(self, number: int, values: list[float], violation: float, user_attrs: dict[str, Any]) -> None:
        """Tell the sampler; the trial waits in :attr:`unstored` until :meth:`store` writes it."""
        trial = self.running.pop(number)
        trial.set_constraint("violation", violation)
        self.unstored.append((self.study.tell(trial, values), user_attrs))

    def store(self) -> None:
        """Write the told trials to the storage, oldest first. A write that fails stops them:
        :attr:`write_failed` says so, and nothing writes them again (a commit whose answer was
        lost may have been made)."""
        while self.unstored and not self.write_failed:
            try:
                write_finished(self.stored, *self.unstored[0])
            except BaseException:
                self.write_failed = True
                raise
            self.unstored.pop(0)


class Proposer:
    """Proposals for ``todo`` trials of the ``stored`` study from its sampler in a child
    process, which stores them once finished; in this process when it may not start one.
    ``history`` are the study's finished trials; the sampler is seeded as
    :func:`dse.study.samplers.make_sampler` seeds it with ``seed``, ``budget`` and ``stream``;
    ``first`` are parameters to propose before it samples, each unless a finished trial has them."""

    def __init__(
        self,
        spec: StudySpec,
        stored: StoredStudy,
        history: list[optuna.trial.FrozenTrial],
        *,
        seed: int,
        budget: int,
        stream: int,
        todo: int,
        first: list[dict[str, Any]] | None = None,
    ) -> None:
        setup = _Setup(spec, list(stored.study.directions), history, seed, budget, stream, first or [])
        self._proposals: deque[Proposal] = deque()
        self._todo, self._asked = todo, 0
        self._local: _Sampling | None = None
        self._conn: multiprocessing.connection.Connection | None = None
        if multiprocessing.current_process().daemon:  # a daemon may not have children
            self._local = _Sampling(setup, stored)
        else:
            fork = "fork" in multiprocessing.get_all_start_methods()  # no imports to repeat
            ctx = multiprocessing.get_context("fork" if fork else None)
            self._conn, child = ctx.Pipe()
            parents = self._conn if fork else None
            self._proc = ctx.Process(
                target=_serve, args=(child, parents, setup, stored.url), daemon=True, name="dse-sampler"
            )
            self._proc.start()
            child.close()
        for _ in range(min(todo, 1 + AHEAD)):
            self._ask()

    def next(self) -> Proposal:
        """The next trial to evaluate (waits while the sampler is still proposing it)."""
        while not self._proposals:
            try:
                self._receive()
            except (EOFError, ConnectionError):
                raise self._ended() from None
        return self._proposals.popleft()

    def finish(self, number: int, values: list[float], violation: float, user_attrs: dict[str, Any]) -> None:
        """Tell the sampler trial ``number``'s objective values and worst constraint violation
        (<= 0: feasible); it stores the trial, with ``user_attrs`` added, and proposes ahead."""
        more = self._asked < self._todo
        if self._local is not None:
            self._local.tell(number, values, violation, user_attrs)
            self._local.store()
            if more:
                self._ask()
        else:  # one message: the child proposes the next trial, then writes this one
            self._asked += more
            self._send(("tell", number, values, violation, user_attrs, more))

    def close(self) -> None:
        """Stop the child once it has stored every finished trial; raise what it failed with."""
        if self._conn is None or self._conn.closed:
            return
        deadline = time.monotonic() + CLOSE_WAIT_S
        try:
            with contextlib.suppress(OSError):  # the child is gone already
                self._conn.send(None)
            with contextlib.suppress(EOFError, ConnectionError):  # the child is done
                while self._conn.poll(max(0.0, deadline - time.monotonic())):
                    self._receive()  # proposals nobody needs now; the child's error raises
        finally:
            self._conn.close()
            self._proc.join(timeout=max(0.1, deadline - time.monotonic()))
        if self._proc.is_alive():
            self._proc.kill()  # (it leaves SIGTERM to this process)
            self._proc.join()
            raise RuntimeError(
                f"the sampler process had not stored every finished trial after {CLOSE_WAIT_S:g} s "
                "and was stopped; a rerun finds what was stored and runs the rest"
            )

    def _pipe(self) -> multiprocessing.connection.Connection:
        assert self._conn is not None
        return self._conn

    def _send(self, msg: tuple[Any, ...]) -> None:
        try:
            self._pipe().send(msg)
        except (BrokenPipeError, ConnectionError):
            raise self._ended() from None

    def _ended(self) -> RuntimeError:
        """The child died (killed, out of memory) before it was told to stop; the error it may
        have sent first is the better message."""
        with contextlib.suppress(EOFError, ConnectionError):
            while self._pipe().poll(1.0):
                self._receive()
        self._proc.join(timeout=5.0)
        return RuntimeError(f"the sampler process ended (exit code {self._proc.exitcode})")

    def _ask(self) -> None:
        self._asked += 1
        if self._local is not None:
            self._proposals.append(self._local.ask())
        else:
            self._send(("ask",))

    def _receive(self) -> None:
        try:
            got, body = self._pipe().recv()
        except (EOFError, ConnectionError):
            raise
        except Exception as exc:  # noqa: BLE001 - a reply that does not load: the child's odd error
            raise RuntimeError(f"the sampler process sent a reply that does not load: {exc!r}") from None
        if got == "error":
            raise body
        self._proposals.append(body)


def _serve(
    conn: multiprocessing.connection.Connection,
    parents: multiprocessing.connection.Connection | None,
    setup: _Setup,
    storage: str,
) -> None:
    """The child: ask and propose; tell and store; until the parent closes the pipe. A parent
    that died leaves its last messages in the pipe: the child stores the trials they tell."""
    interrupt.leave_to_parent()  # the parent handles Ctrl-C and SIGTERM and closes the pipe
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # this process's own: no line per trial
    if parents is not None:  # a forked child holds the parent's end too: close it, or no EOF comes
        parents.close()
    gone = False  # the parent went away: store what it told, propose nothing
    sampling: _Sampling | None = None
    try:
        store = open_storage(storage)
        stored = StoredStudy.of(optuna.load_study(study_name=setup.spec.name, storage=store), store, storage)
        sampling = _Sampling(setup, stored)
        while (msg := conn.recv()) is not None:
            if msg[0] == "tell":
                sampling.tell(*msg[1:5])
            if (msg[0] == "ask" or msg[5]) and not gone:  # a tell may ask for the next proposal
                proposal = sampling.ask()
                try:
                    conn.send(("proposal", proposal))
                except (BrokenPipeError, ConnectionResetError):
                    gone = True
            # the told trial is written after the proposal is sent, while the parent evaluates;
            # a message already waiting (the parent's trial was quick) is answered first, while
            # fewer than UNSTORED_MAX trials wait to be written
            if len(sampling.unstored) >= UNSTORED_MAX or not conn.poll():
                sampling.store()
        sampling.store()
    except (EOFError, ConnectionError):  # the parent went away and every message it sent is read
        if sampling is not None:
            sampling.store()
        return
    except Exception as exc:  # noqa: BLE001 - handed to the parent, which raises it
        if sampling is not None:  # what was told before a failure that was not a write's
            with contextlib.suppress(Exception):
                sampling.store()
        with contextlib.suppress(OSError):
            try:
                conn.send(("error", exc))
            except Exception:  # noqa: BLE001 - an exception that does not pickle
                conn.send(("error", RuntimeError("sampler process: " + traceback.format_exc())))
        with contextlib.suppress(EOFError, OSError):  # until the parent, which reads it next, closes
            while conn.recv() is not None:
                pass
