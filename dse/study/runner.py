"""Running a study: Optuna asks, :mod:`dse.study.trial` evaluates, Optuna is told.

Storage is an embedded SQLite file in the run folder unless a URL is given (PostgreSQL for many
workers on many machines). A rerun of the same study resumes: finished trials stay, a trial left
running by a killed process is marked failed (and not counted), and only the rest of the budget
runs. Workers sharing a storage stop when the study as a whole reaches its budget.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import optuna

from dse import __version__
from dse.atomic import write_text
from dse.catalog import Catalog, load_catalog
from dse.errors import InputError
from dse.metrics import METRICS
from dse.perf.params import PerfParams, load_params
from dse.plain import plain
from dse.study.faults import (
    STORAGE_ERRORS,
    StudyInterrupted,
    TrialTimeout,
    heartbeat,
    storage_fault,
    storage_unreachable,
    wall_clock,
)
from dse.study.optuna_compat import storage_of
from dse.study.proposer import Proposal, Proposer
from dse.study.samplers import make_sampler
from dse.study.spec import StudySpec, seed_rule
from dse.study.storage import (
    StoredStudy,
    fail_dead,
    fail_stale,
    lone_writer,
    open_storage,
    redact,
    sqlite_path,
    storage_lock,
    wait_for_storage,
)
from dse.study.sweep import PREFIX, choice_of, evaluate_point, point_of, suggest_point
from dse.study.timeouts import STALE_AFTER_S, TRIAL_WALL_S
from dse.study.trial import Choice, TrialRecord, evaluate, objective_values, params_of, suggest
from dse.study.variants import study_catalog
from dse.study.warm_start import warm_start_params
from formulations.solve import PlacementSolver, SolveOptions

MetricFn = Callable[[Mapping[str, float]], float]
TRIAL_SOLVE = SolveOptions(time_limit_s=10.0)  # one hard instance must not stall a study


@dataclass(frozen=True)
class ObjectiveDef:
    """A study objective: a recorded metric, or a Python function of the trial's metrics."""

    name: str
    direction: Literal["minimize", "maximize"]
    fn: MetricFn | None = None

    @classmethod
    def metric(cls, name: str) -> ObjectiveDef:
        m = METRICS[name]
        assert m.direction in ("minimize", "maximize")
        return cls(name, "minimize" if m.direction == "minimize" else "maximize")


def run_folder(out: Path, spec: StudySpec) -> Path:
    return out / spec.name


def default_storage(out: Path, spec: StudySpec) -> str:
    return f"sqlite:///{(run_folder(out, spec) / 'study.db').resolve()}"


def _not_taken(study: optuna.Study, first: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The designs of ``first`` no complete, running or waiting trial has: a warm-start trial whose
    worker died (failed as stale) is run again, as a lone run would."""
    live = (
        optuna.trial.TrialState.COMPLETE,
        optuna.trial.TrialState.RUNNING,
        optuna.trial.TrialState.WAITING,
    )
    taken = [
        t.system_attrs.get("fixed_params", t.params) for t in study.get_trials(deepcopy=False, states=live)
    ]
    return [p for p in first if p not in taken]


def enqueue_first(
    study: optuna.Study,
    first: list[dict[str, Any]],
    budget: int,
    *,
    storage: optuna.storages.BaseStorage | None = None,
) -> None:
    """Put the designs of ``first`` no trial has in the shared study's queue, no more than the
    budget still needs (or they would wait there), under a lock on its database (``storage``, the
    study's own by default): workers that start together would each find them untaken and enqueue
    them twice."""
    storage = storage if storage is not None else storage_of(study)
    with storage_lock(storage, f"dse-enqueue-first:{study.study_name}"):
        for p in _not_taken(study, first)[: max(0, budget - _complete(study))]:
            study.enqueue_trial(p)


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
    with _optuna_quiet():
        return _open(spec, storage, objectives, seed, stream=stream, stale_after_s=stale_after_s).study


def _open(
    spec: StudySpec,
    url: str,
    objectives: list[ObjectiveDef],
    seed: int,
    *,
    stream: int = 0,
    stale_after_s: float | None = None,
) -> StoredStudy:
    """:func:`open_study`, with the storage it opened."""
    sampler = make_sampler(spec, seed, stream=stream)
    store = open_storage(url, stale_after_s)
    names = [o.name for o in objectives]
    try:
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
    stored = study.user_attrs.get("objectives")
    if stored is None:
        study.set_user_attr("objectives", names)
        study.set_user_attr("spec", plain(spec))
        study.set_user_attr("engine_version", __version__)
    elif stored != names:
        raise InputError(
            redact(url),
            "objectives",
            f"the stored study optimises {stored}; use another out= or storage= for other objectives",
            names,
        )
    return StoredStudy.of(study, store, url)


@contextlib.contextmanager
def _optuna_quiet() -> Iterator[None]:
    """Optuna's own info lines (a study created or loaded, each trial finished) are not a run's
    output: at most warnings for the block, the caller's level after it."""
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(max(level, optuna.logging.WARNING))
    try:
        yield
    finally:
        optuna.logging.set_verbosity(level)


def _complete(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


@dataclass(frozen=True)
class RunStats:
    completed_before: int
    ran: int
    stale_failed: int
    seconds: float


def run(
    spec: StudySpec,
    *,
    out: Path = Path("runs"),
    storage: str | None = None,
    trials: int | None = None,
    seed: int | None = None,
    objectives: list[ObjectiveDef] | None = None,
    progress: bool = False,
    shared: bool = False,
    catalog: Catalog | None = None,
    params: PerfParams | None = None,
    trial_wall_s: float | None = TRIAL_WALL_S,
    stale_after_s: float = STALE_AFTER_S,
) -> tuple[optuna.Study, RunStats]:
    """Run (or resume) the study until ``trials`` (default: the spec's budget) are complete.

    ``shared`` is for workers on one storage: a running trial whose worker has sent no heartbeat
    for ``stale_after_s`` is marked failed (and run again by someone), and a storage that goes
    away (a server restart) is waited for. A trial over ``trial_wall_s`` is recorded as
    infeasible with the reason. Ctrl-C raises :class:`StudyInterrupted`."""
    catalog = study_catalog(spec, catalog if catalog is not None else load_catalog())
    params = params if params is not None else load_params()
    objectives = objectives or [ObjectiveDef.metric(n) for n in spec.objectives.names]
    storage = storage or default_storage(out, spec)
    budget = spec.budget(trials)
    if budget < 1:
        raise InputError("trials", "", "must be at least 1", budget)
    if spec.is_grid and budget > spec.sweep.size():
        raise InputError("trials", "", f"must be at most the grid's {spec.sweep.size()} points", budget)
    blocked = next((d for d in (out, *out.parents) if d.exists() and not d.is_dir()), None)
    if blocked is not None:
        raise InputError("out", "", f"must be a folder ({blocked} is a file)", str(out))
    if seed is not None and seed_rule(seed):
        raise InputError("seed", "", str(seed_rule(seed)), seed)
    base = spec.seed if seed is None else seed
    # workers sharing a storage each need their own random stream, or they would propose alike
    stream = os.getpid() if shared else 0
    with _optuna_quiet():
        stored = _open(
            spec, storage, objectives, base, stream=stream, stale_after_s=stale_after_s if shared else None
        )
        study = stored.study
        # one lone run per study at a time; Ctrl-C and storage faults become one line from here on
        with _guarded(study, storage, budget, shared):
            folder = run_folder(out, spec)
            if storage.startswith("sqlite:///") or not shared:
                folder.mkdir(parents=True, exist_ok=True)
                # the resolved spec
                write_text(folder / "spec.json", json.dumps(plain(spec), indent=2) + "\n")
            # a trial some dead process left running: alone on a storage, any; shared, one whose
            # heartbeats stopped (checked again before every trial)
            stale = fail_dead(stored) if shared else fail_stale(stored)
            before = _complete(study)
            solver = PlacementSolver(TRIAL_SOLVE)
            # the search starts from the full placement's designs (dse.study.warm_start), each unless a
            # trial has run it, is running it or waits with it (a resumed run, another worker)
            n_first = max(1, budget // 5) if before < budget else 0
            first = warm_start_params(spec, catalog, params, solver, n_first) if n_first else []
            if shared and first:  # TPE's random start-up beside them (the lone run's sampler gets it below)
                study.sampler = make_sampler(spec, base, stream=stream, warm=len(first))
            defs = [(o.name, o.direction, o.fn) for o in objectives]
            t0 = time.perf_counter()
            ran = 0
            bar = _Progress(budget, before, (defs[0][0], defs[0][1])) if progress else None
            done = before
            if shared:
                enqueue_first(study, first, budget, storage=stored.storage)
            # alone on a storage, the sampler works in its own process on an in-memory copy, one trial
            # ahead (dse.study.proposer), and each finished trial is written to the storage in one
            # transaction as it completes; workers sharing a storage ask it directly so they see each
            # other's trials. A resumed run reseeds with the trials already done, so it does not repeat them.
            proposer = (
                None
                if shared
                else Proposer(
                    spec,
                    stored,
                    study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)),
                    seed=base,
                    budget=budget,
                    stream=1_000_003 * before,
                    todo=budget - before,
                    first=first,
                )
            )
            propose = suggest_point if spec.is_grid else suggest
            evaluate_one = _trial_fn(spec, catalog, params, solver)
            unreachable_since: float | None = None
            # heartbeats outside Study.optimize are ours (faults.heartbeat); Optuna warns at every ask
            interrupted = False
            with warnings.catch_warnings():  # the process's own filters are kept
                warnings.filterwarnings("ignore", "Heartbeat of storage is supposed to be used", UserWarning)
                try:
                    while done < budget:
                        try:
                            if proposer is None:
                                stale += fail_dead(stored)
                                trial = study.ask()
                                design = propose(trial, spec)
                                job = Proposal(trial.number, dict(trial.params), design)
                                beats: contextlib.AbstractContextManager[Any] = heartbeat(
                                    stored.storage, stored.trial_id(trial.number), max(1.0, stale_after_s / 4)
                                )
                            else:
                                job, beats = proposer.next(), contextlib.nullcontext()
                            with beats:
                                record, extra, timed_out = _bounded(evaluate_one, job, trial_wall_s)
                            if timed_out:  # the solver may hold a half-updated model: start clean
                                solver = PlacementSolver(TRIAL_SOLVE)
                                evaluate_one = _trial_fn(spec, catalog, params, solver)
                            # samplers see the worst violation (<= 0: feasible); each constraint is in
                            # the record
                            violation = max(record.constraints.values())
                            values = objective_values(record, defs)
                            attrs = {"record": {**record.attrs(), **extra}}
                            if proposer is not None:  # its process stores the trial
                                proposer.finish(job.number, values, violation, attrs)
                                done += 1
                            else:
                                try:
                                    trial.set_constraint("violation", violation)
                                    trial.set_user_attr("record", attrs["record"])  # one write
                                    study.tell(trial, values)
                                except optuna.exceptions.UpdateFinishedTrialError:  # failed as stale
                                    sys.stderr.write(
                                        f"dse: trial {trial.number} was failed by another worker; dropped\n"
                                    )
                                    continue
                                done = _complete(study)
                            unreachable_since = None
                        except STORAGE_ERRORS as exc:
                            if not shared or not storage_unreachable(exc):
                                raise
                            unreachable_since = wait_for_storage(exc, storage, unreachable_since)
                            with contextlib.suppress(Exception):  # a session a dropped connection broke
                                stored.storage.remove_session()
                            continue
                        ran += 1
                        if bar is not None:
                            bar.update(done, record.feasible, values[0] if values else None)
                except KeyboardInterrupt:
                    interrupted = True
                finally:
                    if proposer is not None:
                        proposer.close()  # the sampler process stores every trial it was told of
                    if bar is not None:
                        bar.close()
            if interrupted:
                # counted on the storage once the sampler process has stored what it was told: a Ctrl-C
                # between telling it of a trial and counting that trial here must not under-count
                with contextlib.suppress(*STORAGE_ERRORS):
                    done = _complete(study)
                raise StudyInterrupted(done, budget, redact(storage)) from None
            return study, RunStats(before, ran, stale, time.perf_counter() - t0)


@contextlib.contextmanager
def _guarded(study: optuna.Study, storage: str, budget: int, shared: bool) -> Iterator[None]:
    """The block holds the study for a lone run (:func:`lone_writer`; workers share it). Ctrl-C
    before the trial loop (the warm start, the sampler process starting) says what is stored, as it
    does in the loop; a storage that refuses (full, read-only, locked) is one line naming it."""
    with contextlib.ExitStack() as held:
        if not shared:
            held.enter_context(lone_writer(study.study_name, storage))
        try:
            yield
        except KeyboardInterrupt:
            done = 0
            with contextlib.suppress(*STORAGE_ERRORS):
                done = _complete(study)
            raise StudyInterrupted(done, budget, redact(storage)) from None
        except STORAGE_ERRORS as exc:
            fault = storage_fault(exc, redact(storage), sqlite_path(storage))
            if fault is None:
                raise
            raise fault from None


def _bounded(
    evaluate_one: TrialFn, job: Proposal, wall_s: float | None
) -> tuple[TrialRecord, dict[str, Any], bool]:
    """The trial's record, or an infeasible record naming the cap when it ran over it (and True)."""
    try:
        with wall_clock(wall_s):
            return (*evaluate_one(job.design), False)
    except TrialTimeout:
        why = f"wall clock: the trial ran over its {wall_s:g} s cap"
        grid = any(k.startswith(PREFIX) for k in job.params)
        extra: dict[str, Any] = {"point": point_of(job.params)} if grid else {"params": job.params}
        return TrialRecord({}, {"wall_clock": 1.0}, why, [], []), extra, True


TrialFn = Callable[[Any], tuple[TrialRecord, dict[str, Any]]]


def _trial_fn(spec: StudySpec, catalog: Catalog, params: PerfParams, solver: PlacementSolver) -> TrialFn:
    return (_grid_trial if spec.is_grid else _search_trial)(spec, catalog, params, solver)


def _search_trial(spec: StudySpec, catalog: Catalog, params: PerfParams, solver: PlacementSolver) -> TrialFn:
    def one(choice: Choice) -> tuple[TrialRecord, dict[str, Any]]:
        return evaluate(spec, choice, catalog, params, solver), {"choice": params_of(choice)}

    return one


def _grid_trial(spec: StudySpec, catalog: Catalog, params: PerfParams, solver: PlacementSolver) -> TrialFn:
    cache: dict[Any, Any] = {}  # placements shared by points that differ only in dynamics

    def one(point: dict[str, Any]) -> tuple[TrialRecord, dict[str, Any]]:
        rec = evaluate_point(spec, point, catalog, params, solver, cache)
        extra: dict[str, Any] = {"point": point}
        if rec.outcome is not None and rec.outcome.feasible and rec.request is not None:
            extra["choice"] = params_of(choice_of(rec.outcome, rec.request))
        return rec, extra

    return one


class _Progress:
    """A one-line progress bar on stderr, with the best feasible value of the first objective."""

    def __init__(self, total: int, done: int, objective: tuple[str, str]) -> None:
        self.total, self.t0, self.start = total, time.perf_counter(), done
        self.name, self.maximize = objective[0], objective[1] == "maximize"
        self.best: float | None = None

    def update(self, done: int, feasible: bool, value: float | None) -> None:
        if feasible and value is not None and math.isfinite(value):
            if self.best is None or (value > self.best if self.maximize else value < self.best):
                self.best = value
        frac = min(done / max(self.total, 1), 1.0)
        bar = "#" * int(30 * frac)
        rate = (done - self.start) / max(time.perf_counter() - self.t0, 1e-9)
        best = f"best {self._shown(self.best)}" if self.best is not None else "no feasible design yet"
        sys.stderr.write(f"\r[{bar:<30s}] {done}/{self.total} trials, {rate:.1f}/s, {best}   ")
        sys.stderr.flush()

    def _shown(self, v: float) -> str:
        if self.name == "usd_per_million_tokens":
            return f"${v:.4f}/M tok"
        unit = METRICS[self.name].unit if self.name in METRICS else ""
        return f"{self.name} {v:,.4g} {unit}".rstrip()

    def close(self) -> None:
        sys.stderr.write("\n")
