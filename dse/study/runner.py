"""Running a study: a trial source proposes, :mod:`dse.study.trial` evaluates, the source stores.

Storage is an embedded SQLite file in the run folder unless a URL is given (PostgreSQL for many
workers on many machines). A rerun of the same study resumes: finished trials stay, a trial left
running by a killed process is marked failed (and not counted), and only the rest of the budget
runs. Workers sharing a storage stop when the study as a whole reaches its budget.

:func:`run` opens the study and picks its trial source (:mod:`dse.study.sources`): a lone run's,
whose sampler works in a process of its own, or a worker's on a shared storage. :func:`_trials`
is the loop: ask the source, evaluate within the wall-clock cap, tell the source, show progress.
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy

from dse import interrupt
from dse.atomic import write_text
from dse.catalog import Catalog, load_catalog
from dse.errors import InputError
from dse.metrics import METRICS
from dse.perf.params import PerfParams, load_params, params_to_dict
from dse.study.choice import Choice, choice_record
from dse.study.faults import (
    NO_FILES_RULE,
    STORAGE_ERRORS,
    StudyInterrupted,
    TrialTimeout,
    file_in_the_way,
    holds_no_files,
    storage_fault,
    wall_clock,
    writing,
)
from dse.study.grid import PREFIX, point_of
from dse.study.objectives import NO_VALUE_KEY, ObjectiveDef, ObjectiveError
from dse.study.optuna_compat import storage_of
from dse.study.proposer import Proposal, Proposer
from dse.study.samplers import make_sampler
from dse.study.sources import LoneTrials, SharedTrials, TrialSource, complete, counted, waited_out
from dse.study.spec import StudySpec, seed_rule, spec_record
from dse.study.storage import (
    StoredStudy,
    default_storage,
    fail_dead,
    fail_stale,
    fold_log,
    lone_writer,
    open_stored,
    optuna_quiet,
    redact,
    run_folder,
    sqlite_path,
    storage_lock,
)
from dse.study.sweep import choice_of, evaluate_point
from dse.study.timeouts import STALE_AFTER_S, TRIAL_WALL_S
from dse.study.trial import TrialRecord, evaluate, objective_values
from dse.study.variants import (
    catalog_entries,
    runnable_shapes,
    runnable_topologies,
    study_catalog,
    unused_variant,
    with_catalog_ids,
)
from dse.study.warm_start import warm_start_params
from formulations.solve import PlacementSolver, SolveOptions

TRIAL_SOLVE = SolveOptions(time_limit_s=10.0)  # one hard instance must not stall a study


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
        for p in _not_taken(study, first)[: max(0, budget - complete(study))]:
            study.enqueue_trial(p)


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
    then: Callable[[optuna.Study, RunStats, StudySpec], None] | None = None,
    study_file: str | None = None,
) -> tuple[optuna.Study, RunStats]:
    """Run (or resume) the study until ``trials`` (default: the spec's budget) are complete.

    ``shared`` is for workers on one storage: a running trial whose worker has sent no heartbeat
    for ``stale_after_s`` is marked failed (and run again by someone), and a storage that goes
    away (a server restart) is waited for. A trial over ``trial_wall_s`` is recorded as
    infeasible with the reason. Ctrl-C raises :class:`StudyInterrupted`. ``study_file`` (its
    path) is what bad ids and shapes are named by. ``then`` (given the spec as stored: ids for
    aliases) runs once the trials are done, while the run still holds the study (a lone run's
    exports and report: another run of the study waits for them, or its trials and this run's
    report would disagree)."""
    catalog = study_catalog(spec, catalog if catalog is not None else load_catalog(), study_file)
    if (unused := unused_variant(spec, catalog, study_file)) is not None:
        raise unused
    runnable_shapes(spec, catalog, study_file)
    runnable_topologies(spec, catalog, study_file)
    spec = with_catalog_ids(spec, catalog)
    params = params if params is not None else load_params()
    objectives = objectives or [ObjectiveDef.metric(n) for n in spec.objectives.names]
    url = storage or default_storage(out, spec)
    budget = _budget(spec, trials, out, seed)
    seed = spec.seed if seed is None else int(seed)
    # workers sharing a storage each need their own random stream, or they would propose alike
    stream, stale_s = (os.getpid(), stale_after_s) if shared else (0, None)
    with optuna_quiet():
        entries = catalog_entries(spec, catalog)  # the numbers its trials run with, checked on resume
        new = [] if shared else _not_there(out, spec, url)  # what a lone run's first failure removes
        stored = _opened(new, budget, url, lambda: open_stored(
            spec, url, objectives, seed, stream=stream, stale_after_s=stale_s, catalog=entries,
            calibration=params_to_dict(params),
        ))  # fmt: skip
        # one lone run per study at a time; Ctrl-C and storage faults become one line from here on
        with _guarded(stored, budget, shared), _undone_if_empty(stored, new, shared):
            _still_there(stored)
            # a trial some dead process left running: alone on a storage, any; shared, one whose
            # heartbeats stopped (checked again before every trial)
            if shared:  # a worker waits out a database away at start-up as in its trials
                stale = waited_out(stored, partial(fail_dead, stored))
                before = waited_out(stored, partial(counted, stored.study, spec))
            else:  # a lone run: a storage fault is one line; one workers hold is refused, writing nothing
                stale, before = fail_stale(stored, stale_after_s), counted(stored.study, spec)
            _write_spec(out, spec, url, shared)
            solver = PlacementSolver(TRIAL_SOLVE)
            # the search starts from the full placement's designs (dse.study.warm_start), each unless a
            # trial has run it, is running it or waits with it (a resumed run, another worker)
            n_first = max(1, budget // 5) if before < budget else 0
            # the trials' placements sized for the run's first objective, which Python may set
            sized = spec.led_by([o.name for o in objectives])
            first = warm_start_params(sized, catalog, params, solver, n_first) if n_first else []
            t0 = time.perf_counter()
            shown = (objectives[0].name, objectives[0].direction)  # the bar's objective
            bar = _Progress(budget, before, shown) if progress else None
            source = (
                _shared(spec, stored, first, budget, before, seed, stale_after_s)
                if shared
                else _lone(spec, stored, first, budget, before, seed)
            )
            evaluation = _Evaluation(sized, catalog, params, solver, trial_wall_s)
            with _closing(source, bar, stored, budget), _ours_heartbeats():
                ran = _trials(source, evaluation, objectives, budget, bar)
            stats = RunStats(before, ran, stale + source.stale, time.perf_counter() - t0)
            if then is not None:
                then(stored.study, stats, spec)
        return stored.study, stats


def _budget(spec: StudySpec, trials: int | None, out: Path, seed: int | None) -> int:
    """The run's budget of complete trials; the arguments checked (named as the Python API names them)."""
    for arg, value in (("trials", trials), ("seed", seed)):  # 2.5 trials had run 3, "5" a TypeError
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            raise InputError(arg, "", "must be a whole number (an int)", value)
    budget = spec.budget(None if trials is None else int(trials))
    if budget < 1:
        raise InputError("trials", "", "must be at least 1", budget)
    if spec.is_grid and budget > spec.sweep.size():
        raise InputError("trials", "", f"must be at most the grid's {spec.sweep.size()} points", budget)
    blocked = file_in_the_way(out)
    if blocked is not None:
        raise InputError("out", "", f"must be a folder ({blocked} is a file)", str(out))
    virtual = holds_no_files(out)
    if virtual is not None:  # its free room is 0 too: it had read as a full disk (exit 1)
        raise InputError("out", "", NO_FILES_RULE.format(virtual), str(out))
    if seed is not None and seed_rule(seed):
        raise InputError("seed", "", str(seed_rule(seed)), seed)
    return budget


def _write_spec(out: Path, spec: StudySpec, url: str, shared: bool) -> None:
    """The resolved spec, beside the results: in the run folder; a worker's beside its SQLite
    file (it writes no results; one on a database server writes none), as :func:`spec_path`
    names it. A folder that cannot be written (read-only, not permitted) is one line naming it
    (exit 1); a file where a folder goes, or a folder named spec.json, is bad input (exit 2)."""
    db = sqlite_path(url) if shared else None
    if shared and db is None:
        return
    path = spec_path(db.parent, spec.name) if db is not None else run_folder(out, spec) / "spec.json"
    folder = path.parent
    if path.is_dir():
        raise InputError(str(path), "", "must be a file: a folder has its name")
    with writing(folder):
        folder.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(spec_record(spec), indent=2) + "\n")


def spec_path(folder: Path, name: str) -> Path:
    """Where a worker stores study ``name``'s spec beside the SQLite file in ``folder``: one file
    may hold many studies, each keeps its own. ``spec.json`` in the study's own run folder (the
    folder is named after it, as a run lays it out: ``runs/NAME/study.db``), else ``NAME.spec.json``
    (two studies' workers on one file had overwritten one ``spec.json``, the last one's kept)."""
    return folder / ("spec.json" if folder.name == name else f"{name}.spec.json")


def _lone(
    spec: StudySpec, stored: StoredStudy, first: list[dict[str, Any]], budget: int, before: int, seed: int
) -> LoneTrials:
    """A lone run's trials: its sampler works in its own process on an in-memory copy, one trial
    ahead (dse.study.proposer), and each finished trial is written to the storage in one
    transaction as it completes. A resumed run reseeds with the trials already done, so it does
    not repeat them."""
    history = stored.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    todo = budget - before
    proposer = Proposer(
        spec, stored, history, seed=seed, budget=budget, stream=1_000_003 * before, todo=todo, first=first
    )
    return LoneTrials(proposer, before)


def _shared(
    spec: StudySpec,
    stored: StoredStudy,
    first: list[dict[str, Any]],
    budget: int,
    before: int,
    seed: int,
    stale_after_s: float,
) -> SharedTrials:
    """A worker's trials: it asks the shared storage itself, so workers see each other's trials.
    The warm start's designs wait in the study's queue for whichever worker comes first; TPE keeps
    its random start-up beside them (a lone run's sampler gets it in :class:`Proposer`)."""
    if first:
        stored.study.sampler = make_sampler(spec, seed, stream=os.getpid(), warm=len(first))
    waited_out(stored, partial(enqueue_first, stored.study, first, budget, storage=stored.storage))
    return SharedTrials(spec, stored, stale_after_s, before, budget)


def _trials(
    source: TrialSource,
    evaluate_one: Callable[[Proposal], tuple[TrialRecord, dict[str, Any]]],
    objectives: list[ObjectiveDef],
    budget: int,
    bar: _Progress | None,
) -> int:
    """Evaluate the source's trials until the study holds ``budget`` complete ones; the number
    evaluated and stored here."""
    defs = [(o.name, o.direction, o.fn) for o in objectives]
    warned: set[str] = set()  # objectives that gave nan or an infinity: warned of once per run
    ran = 0
    while source.done < budget:
        interrupt.check()  # a Ctrl-C Python swallowed (in a finalizer) still stops the run
        try:
            job = source.next()
            if job is None:  # other workers finished the study
                break
            with source.evaluating(job):
                record, extra = evaluate_one(job)
            none: list[str] = []  # objectives without a value: null in the exports, whatever was told
            values = objective_values(record, defs, job.number, warned, none)
            # samplers see the worst violation (<= 0: feasible); each constraint is in the record
            attrs = {**record.attrs(), **extra, NO_VALUE_KEY: none}
            told = source.finish(job, values, max(record.constraints.values()), attrs)
        except STORAGE_ERRORS as exc:
            if not source.recover(exc):
                raise
            continue
        if told:
            ran += 1
            if bar is not None:
                valued = values and objectives[0].name not in none  # (its worst, told for none, is none)
                bar.update(source.done, record.feasible, values[0] if valued else None)
    return ran


@contextlib.contextmanager
def _closing(source: TrialSource, bar: _Progress | None, stored: StoredStudy, budget: int) -> Iterator[None]:
    """Close the source and the bar however the block ends; Ctrl-C in it says what is stored,
    counted once the source is closed (the sampler's process has stored what it was told: a
    Ctrl-C between telling it of a trial and counting that trial here must not under-count).
    Closing after a Ctrl-C may fail because of it (one that landed mid-message leaves the
    sampler's pipe out of step, and its next reply does not load): the Ctrl-C is what is said. So
    is an error the block raised once one came (it landed where a library turned it into its own
    failure: SIGTERM to a run's process group, once in a clean-clone suite)."""
    interrupted = False
    try:
        yield
    except KeyboardInterrupt:
        interrupted = True
    except Exception:
        if not interrupt.pressed():
            raise
        interrupted = True
    finally:
        try:
            source.close()
        except Exception:
            if not interrupted:
                raise
        finally:
            if bar is not None:
                bar.close()
    if interrupted:
        done = source.done
        with contextlib.suppress(*STORAGE_ERRORS):
            done = complete(stored.study)
        raise StudyInterrupted(done, budget, redact(stored.url)) from None


@contextlib.contextmanager
def _ours_heartbeats() -> Iterator[None]:
    """Heartbeats outside ``Study.optimize`` are ours (:func:`dse.study.faults.heartbeat`);
    Optuna warns of them at every ask. Not shown in the block; the process's filters are kept."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Heartbeat of storage is supposed to be used", UserWarning)
        yield


def _not_there(out: Path, spec: StudySpec, url: str) -> list[Path]:
    """The files and folders a lone run may create that are not there yet: the SQLite file of
    ``url`` with its log, index and locks, the spec beside it, and the folders they go in."""
    folder = run_folder(out, spec).absolute()
    paths = [folder / "spec.json", folder, *folder.parents]
    db = _db_file(url)
    if db is not None:  # the run lock is named as lone_writer names it (a URL's options and all)
        paths += [db, *(Path(f"{db}{tail}") for tail in ("-wal", "-shm", "-journal", ".lock")), *db.parents]
        paths.append(Path(f"{Path(str(sqlite_path(url))).resolve()}.run-lock"))
    return [p for p in dict.fromkeys(paths) if not p.exists()]


def _opened(new: list[Path], budget: int, url: str, open_it: Callable[[], StoredStudy]) -> StoredStudy:
    """The storage ``open_it`` opens; Ctrl-C while it does (creating a SQLite file's tables takes
    a second or two) says what is stored, as it does later, and removes what the run had created
    (``new``): it had said "dse: interrupted" alone and left a study.db without its spec.json."""
    try:
        return open_it()
    except KeyboardInterrupt:
        _remove(new)
        raise StudyInterrupted(0, budget, redact(url)) from None


def _db_file(url: str) -> Path | None:
    """The SQLite file of ``url`` as SQLite opens it (without the URL's options); None for a
    server or an in-memory database."""
    if sqlite_path(url) is None:
        return None
    database = sqlalchemy.engine.make_url(url).database
    return Path(database).resolve() if database else None


@contextlib.contextmanager
def _undone_if_empty(stored: StoredStudy, new: list[Path], shared: bool) -> Iterator[None]:
    """A lone run stopped by its objective (:class:`ObjectiveError`: it raised, read a metric
    trials lack, returned no number) before the study held any trial leaves nothing behind: the
    study is deleted from its storage, and what the run created (``new``: the SQLite file and its
    companions, the spec, their folders) is removed; a rerun with the function mended, or with
    another objective, starts afresh. (Held for the run alone, as :func:`lone_writer` holds it,
    and holding no trial, the study loses nothing; workers share theirs and keep it.) The error
    says so."""
    try:
        yield
    except ObjectiveError as exc:
        if shared or not _empty(stored):
            raise
        if not _discard(stored, new):
            raise
        raise exc.noted("nothing was stored") from exc.__cause__


def _still_there(stored: StoredStudy) -> None:
    """Refuse a SQLite file removed between opening it and holding the study: a run that had it
    then failed before storing a trial (:func:`_undone_if_empty`), and trials written now would
    go to a file no one can open again."""
    db = _db_file(stored.url)
    if db is not None and not db.exists():
        rule = "was removed while this run opened it (a first run that stored nothing): run again"
        raise InputError(redact(stored.url), "storage", rule)


def _empty(stored: StoredStudy) -> bool:
    """Whether the study holds no trial at all (False when the storage cannot say)."""
    try:
        return not stored.study.get_trials(deepcopy=False)
    except STORAGE_ERRORS:
        return False


def _discard(stored: StoredStudy, new: list[Path]) -> bool:
    """Delete the study and the files and folders of ``new`` that are there now; whether the
    study is gone."""
    db = _db_file(stored.url)
    created = db is not None and db in new  # the whole file is the run's
    if not created:
        try:
            optuna.delete_study(study_name=stored.study.study_name, storage=stored.storage)
        except (*STORAGE_ERRORS, KeyError):
            return False
    with contextlib.suppress(Exception):
        stored.storage.remove_session()
    with contextlib.suppress(Exception):
        stored.storage.engine.dispose()  # its connections closed: SQLite folds the log back in
    _remove(new)
    return db is None or not created or not db.exists()


def _remove(new: list[Path]) -> None:
    """The files and empty folders of ``new`` that are there now, removed (files, then folders)."""
    for p in sorted(new, key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            if p.is_dir():
                p.rmdir()  # only if empty: anything else in it is not the run's
            else:
                p.unlink(missing_ok=True)


@contextlib.contextmanager
def _guarded(stored: StoredStudy, budget: int, shared: bool) -> Iterator[None]:
    """The block holds the study for a lone run (:func:`lone_writer`; workers share it). Ctrl-C
    before the trial loop (the warm start, the sampler process starting) says what is stored, as it
    does in the loop; a storage that refuses (full, read-only, locked) is one line naming it."""
    url = stored.url
    with contextlib.ExitStack() as held:
        held.enter_context(lone_writer(stored.study.study_name, url, worker=shared))
        try:
            yield
        except StudyInterrupted:
            raise  # said already, by what it stopped (the exports, the shadow prices)
        except KeyboardInterrupt:
            done = 0
            with contextlib.suppress(*STORAGE_ERRORS):
                done = complete(stored.study)
            raise StudyInterrupted(done, budget, redact(url)) from None
        except STORAGE_ERRORS as exc:
            fault = storage_fault(exc, redact(url), sqlite_path(url))
            if fault is None:
                raise
            raise fault from None
        finally:  # stopped or done, study.db alone is the study, to copy or share
            fold_log(url)


class _Evaluation:
    """A trial's evaluation within its wall-clock cap (:func:`_bounded`). A trial that ran over
    may leave the solver holding a half-updated model: the next starts with a fresh one."""

    def __init__(
        self,
        spec: StudySpec,
        catalog: Catalog,
        params: PerfParams,
        solver: PlacementSolver,
        wall_s: float | None,
    ) -> None:
        self._setting, self._wall_s = (spec, catalog, params), wall_s
        self._fn = _trial_fn(spec, catalog, params, solver)

    def __call__(self, job: Proposal) -> tuple[TrialRecord, dict[str, Any]]:
        record, extra, timed_out = _bounded(self._fn, job, self._wall_s)
        if timed_out:
            self._fn = _trial_fn(*self._setting, PlacementSolver(TRIAL_SOLVE))
        return record, extra


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
        # the design it was given, as a finished trial records it: the exports had shown every
        # capped trial's choice empty, and counted them all as one design
        extra: dict[str, Any] = (
            {"point": point_of(job.params)} if grid else {"choice": choice_record(job.design)}
        )
        return TrialRecord({}, {"wall_clock": 1.0}, why, [], []), extra, True


TrialFn = Callable[[Any], tuple[TrialRecord, dict[str, Any]]]


def _trial_fn(spec: StudySpec, catalog: Catalog, params: PerfParams, solver: PlacementSolver) -> TrialFn:
    """What evaluates a trial's design: the seam between the runner and the evaluation."""
    return (_grid_trial if spec.is_grid else _search_trial)(spec, catalog, params, solver)


def _search_trial(spec: StudySpec, catalog: Catalog, params: PerfParams, solver: PlacementSolver) -> TrialFn:
    def one(choice: Choice) -> tuple[TrialRecord, dict[str, Any]]:
        return evaluate(spec, choice, catalog, params, solver), {"choice": choice_record(choice)}

    return one


def _grid_trial(spec: StudySpec, catalog: Catalog, params: PerfParams, solver: PlacementSolver) -> TrialFn:
    cache: dict[Any, Any] = {}  # placements shared by points that differ only in dynamics

    def one(point: dict[str, Any]) -> tuple[TrialRecord, dict[str, Any]]:
        rec = evaluate_point(spec, point, catalog, params, solver, cache)
        extra: dict[str, Any] = {"point": point}
        if rec.outcome is not None and rec.outcome.feasible and rec.request is not None:
            extra["choice"] = choice_record(choice_of(rec.outcome, rec.request))
        return rec, extra

    return one


class _Progress:
    """A one-line progress bar on stderr, with the best feasible value of the first objective."""

    def __init__(self, total: int, done: int, objective: tuple[str, str]) -> None:
        self.total, self.t0, self.start = total, time.perf_counter(), done
        self.name, self.maximize = objective[0], objective[1] == "maximize"
        self.best: float | None = None
        self.feasible = False  # a feasible trial seen (one without a value shows no best)

    def update(self, done: int, feasible: bool, value: float | None) -> None:
        if feasible and value is not None and math.isfinite(value):
            if self.best is None or (value > self.best if self.maximize else value < self.best):
                self.best = value
        frac = min(done / max(self.total, 1), 1.0)
        bar = "#" * int(30 * frac)
        rate = (done - self.start) / max(time.perf_counter() - self.t0, 1e-9)
        self.feasible = self.feasible or feasible
        best = (
            f"best {self._shown(self.best)}"
            if self.best is not None
            else "no value yet"
            if self.feasible
            else "no feasible design yet"
        )
        sys.stderr.write(f"\r[{bar:<30s}] {done}/{self.total} trials, {rate:.1f}/s, {best}   ")
        sys.stderr.flush()

    def _shown(self, v: float) -> str:
        if self.name == "usd_per_million_tokens":
            return f"${v:.4f}/M tok"
        unit = METRICS[self.name].unit if self.name in METRICS else ""
        return f"{self.name} {v:,.4g} {unit}".rstrip()

    def close(self) -> None:
        sys.stderr.write("\n")
