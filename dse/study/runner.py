"""Running a study: Optuna asks, :mod:`dse.study.trial` evaluates, Optuna is told.

Storage is an embedded SQLite file in the run folder unless a URL is given (PostgreSQL for many
workers on many machines). A rerun of the same study resumes: finished trials stay, a trial left
running by a killed process is marked failed (and not counted), and only the rest of the budget
runs. Workers sharing a storage stop when the study as a whole reaches its budget.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal, cast

import optuna
import sqlalchemy
import sqlalchemy.orm
from optuna.storages._heartbeat import is_heartbeat_enabled
from optuna.storages._rdb import models as rdb_models

from dse import __version__
from dse.atomic import write_text
from dse.catalog import Catalog, load_catalog
from dse.errors import InputError
from dse.perf.params import PerfParams, load_params
from dse.placement.serialize import plain
from dse.study.faults import (
    STORAGE_ERRORS,
    STORAGE_RETRY_S,
    TRIAL_WALL_S,
    StudyInterrupted,
    TrialTimeout,
    heartbeat,
    storage_unreachable,
    wall_clock,
)
from dse.study.metrics import METRICS
from dse.study.samplers import make_sampler
from dse.study.spec import StudySpec, seed_rule
from dse.study.sweep import PREFIX, choice_of, evaluate_point, point_of, suggest_point
from dse.study.trial import TrialRecord, evaluate, objective_values, params_of, suggest
from dse.study.variants import study_catalog
from formulations.solve import PlacementSolver, SolveOptions

optuna.logging.set_verbosity(optuna.logging.WARNING)

MetricFn = Callable[[Mapping[str, float]], float]
TRIAL_SOLVE = SolveOptions(time_limit_s=10.0)  # one hard instance must not stall a study
STALE_AFTER_S = 120.0  # shared storage: a trial silent this long lost its worker


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


def _sqlite_pragmas_if_sqlite(dbapi_connection: Any, record: Any) -> None:
    if type(dbapi_connection).__module__.startswith("sqlite3"):
        _sqlite_pragmas(dbapi_connection, record)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # write-ahead log: a commit is one append, and readers never block the writer; a crash keeps
    # every committed trial (synchronous=NORMAL loses nothing committed on a process kill)
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def _storage(url: str, stale_after_s: float | None = None) -> optuna.storages.BaseStorage:
    """Optuna's storage for ``url``. With ``stale_after_s`` (workers sharing a storage), trials
    carry heartbeats and a trial silent for that long is stale: its worker died."""
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite:///"):
        folder = Path(url.removeprefix("sqlite:///")).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(
                "--storage", "url", f"cannot be created ({exc.strerror}: {folder})", url
            ) from None
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}
        if not sqlalchemy.event.contains(sqlalchemy.engine.Engine, "connect", _sqlite_pragmas_if_sqlite):
            sqlalchemy.event.listen(sqlalchemy.engine.Engine, "connect", _sqlite_pragmas_if_sqlite)
    else:  # a server may restart under a long study: test each pooled connection before use
        kwargs["engine_kwargs"] = {"pool_pre_ping": True}
    if stale_after_s is not None:
        kwargs["heartbeat_interval"] = max(1, int(stale_after_s // 4))
        kwargs["grace_period"] = max(1, int(stale_after_s))
    try:
        return _open_rdb(_driver_url(url), kwargs)
    except Exception as exc:  # noqa: BLE001 - the driver's own error types differ per database
        raise InputError(
            "--storage",
            "url",
            f"cannot be opened ({type(exc).__name__}: {_scrub(str(exc), url)})",
            _redact(url),
        ) from None


def _open_rdb(url: str, kwargs: dict[str, Any]) -> optuna.storages.RDBStorage:
    """Open (and on first use create) the tables; workers starting together on a fresh database
    race to create them, and the loser retries once the winner is done."""
    for attempt in range(5):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeats
                return optuna.storages.RDBStorage(url, **kwargs)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
            if attempt == 4:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def _redact(url: str) -> str:
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
    an unescaped '@' in a password quotes the rest of it as the host."""
    if "@" not in url or "//" not in url:
        return text
    cred = url.split("//", 1)[1].rsplit("@", 1)[0]
    secret = cred.split(":", 1)[1] if ":" in cred else ""
    for piece in sorted({secret, *secret.split("@")}, key=len, reverse=True):
        if len(piece) >= 2:
            text = text.replace(piece, "***")
    return text


def _driver_url(url: str) -> str:
    """SQLAlchemy's default PostgreSQL driver is psycopg 3; the project ships psycopg2."""
    if url.startswith("postgresql://"):
        return "postgresql+psycopg2://" + url.removeprefix("postgresql://")
    return url


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
    sampler = make_sampler(spec, seed, stream=stream)
    store = _storage(storage, stale_after_s)
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
        raise InputError(
            _redact(storage), "objectives", f"differ from the stored study's ({exc})", names
        ) from None
    stored = study.user_attrs.get("objectives")
    if stored is None:
        study.set_user_attr("objectives", names)
        study.set_user_attr("spec", plain(spec))
        study.set_user_attr("engine_version", __version__)
    elif stored != names:
        raise InputError(
            _redact(storage),
            "objectives",
            f"the stored study optimises {stored}; use another --out or --storage for other objectives",
            names,
        )
    return study


def _fail_stale(study: optuna.Study) -> int:
    """Trials a killed process left RUNNING in a single-process storage: mark them failed."""
    n = 0
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
        n += 1
    return n


def _fail_dead(study: optuna.Study) -> int:
    """Shared storage: mark failed the running trials whose worker died (their heartbeats stopped,
    or, for a trial whose worker died before its first beat, it started longer ago than the grace
    period); the budget counts complete trials, so someone runs another. The number failed here."""
    storage = cast(Any, study._storage)
    if not is_heartbeat_enabled(storage):
        return 0
    n = 0
    for trial_id in _dead_trial_ids(getattr(storage, "_backend", storage), study._study_id):
        try:
            n += bool(storage.set_trial_state_values(trial_id, state=optuna.trial.TrialState.FAIL))
        except optuna.exceptions.UpdateFinishedTrialError:  # another worker got there first
            pass
    return n


def _dead_trial_ids(storage: Any, study_id: int) -> list[int]:
    """Optuna's stale trials, plus running trials that never beat and started before the grace
    (``storage``: the RDB storage itself, under Optuna's cache)."""
    grace = timedelta(seconds=storage.grace_period or 2 * storage.heartbeat_interval)
    with storage.scoped_session() as session:
        now = session.execute(sqlalchemy.func.now()).scalar().replace(tzinfo=None)
        running = (
            session.query(rdb_models.TrialModel)
            .options(sqlalchemy.orm.selectinload(rdb_models.TrialModel.heartbeats))
            .filter(rdb_models.TrialModel.state == optuna.trial.TrialState.RUNNING)
            .filter(rdb_models.TrialModel.study_id == study_id)
            .all()
        )
        return [
            t.trial_id
            for t in running
            if (t.heartbeats and now - t.heartbeats[0].heartbeat > grace)
            or (
                not t.heartbeats
                and t.datetime_start is not None
                and datetime.now() - t.datetime_start > grace
            )
        ]


def _memory_copy(study: optuna.Study, spec: StudySpec, seed: int, budget: int, stream: int) -> optuna.Study:
    """An in-memory study with the stored one's finished trials and a fresh seeded sampler."""
    mem = optuna.create_study(directions=study.directions, sampler=make_sampler(spec, seed, budget, stream))
    mem.add_trials(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
    return mem


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
        raise InputError("--trials", "", "must be at least 1", budget)
    if spec.is_grid and budget > spec.sweep.size():
        raise InputError("--trials", "", f"must be at most the grid's {spec.sweep.size()} points", budget)
    blocked = next((d for d in (out, *out.parents) if d.exists() and not d.is_dir()), None)
    if blocked is not None:
        raise InputError("--out", "", f"must be a folder ({blocked} is a file)", str(out))
    if seed is not None and seed_rule(seed):
        raise InputError("--seed", "", str(seed_rule(seed)), seed)
    base = spec.seed if seed is None else seed
    # workers sharing a storage each need their own random stream, or they would propose alike
    study = open_study(
        spec,
        storage,
        objectives,
        base,
        stream=os.getpid() if shared else 0,
        stale_after_s=stale_after_s if shared else None,
    )
    folder = run_folder(out, spec)
    if storage.startswith("sqlite:///") or not shared:
        folder.mkdir(parents=True, exist_ok=True)
        write_text(folder / "spec.json", json.dumps(plain(spec), indent=2) + "\n")  # the resolved spec
    # a trial some dead process left running: alone on a storage, any; shared, one whose
    # heartbeats stopped (checked again before every trial)
    stale = _fail_dead(study) if shared else _fail_stale(study)
    before = _complete(study)
    solver = PlacementSolver(TRIAL_SOLVE)
    defs = [(o.name, o.direction, o.fn) for o in objectives]
    t0 = time.perf_counter()
    ran = 0
    bar = _Progress(budget, before) if progress else None
    done = before
    # alone on a storage, the sampler works on an in-memory copy and each finished trial is
    # written to the storage in one transaction as it completes; workers sharing a storage must
    # ask it directly so they see each other's trials
    # a resumed run reseeds with the number of trials already done, so it does not repeat them
    asker = study if shared else _memory_copy(study, spec, base, budget, 1_000_003 * before)
    evaluate_one = _trial_fn(spec, catalog, params, solver)
    unreachable_since: float | None = None
    # heartbeats outside Study.optimize are ours (faults.heartbeat); Optuna warns at every ask
    warnings.filterwarnings("ignore", "Heartbeat of storage is supposed to be used", UserWarning)
    try:
        while done < budget:
            try:
                if shared:
                    stale += _fail_dead(study)
                trial = asker.ask()
                beats = (
                    heartbeat(study._storage, trial._trial_id, max(1.0, stale_after_s / 4))
                    if shared
                    else contextlib.nullcontext()
                )
                with beats:
                    record, extra, timed_out = _bounded(evaluate_one, trial, trial_wall_s)
                if timed_out:  # the solver may hold a half-updated model: start clean
                    solver = PlacementSolver(TRIAL_SOLVE)
                    evaluate_one = _trial_fn(spec, catalog, params, solver)
                try:
                    # samplers see the worst violation (<= 0: feasible); each constraint is in the record
                    trial.set_constraint("violation", max(record.constraints.values()))
                    trial.set_user_attr("record", {**record.attrs(), **extra})  # one write
                    asker.tell(trial, objective_values(record, defs))
                except optuna.exceptions.UpdateFinishedTrialError:  # failed meanwhile as stale
                    sys.stderr.write(f"dse: trial {trial.number} was failed by another worker; dropped\n")
                    continue
                if asker is not study:
                    study.add_trial(asker.get_trials(deepcopy=False)[-1])  # .trials would deep-copy them all
                done = _complete(study) if shared else done + 1
                unreachable_since = None
            except STORAGE_ERRORS as exc:
                if not shared or not storage_unreachable(exc):
                    raise
                unreachable_since = _wait_for_storage(exc, storage, unreachable_since)
                with contextlib.suppress(Exception):  # a session a dropped connection broke
                    cast(Any, getattr(study._storage, "_backend", study._storage)).scoped_session.remove()
                continue
            ran += 1
            if bar is not None:
                bar.update(done, record)
    except KeyboardInterrupt:
        raise StudyInterrupted(done, budget, _redact(storage)) from None
    finally:
        if bar is not None:
            bar.close()
    return study, RunStats(before, ran, stale, time.perf_counter() - t0)


def _bounded(
    evaluate_one: TrialFn, trial: optuna.Trial, wall_s: float | None
) -> tuple[TrialRecord, dict[str, Any], bool]:
    """The trial's record, or an infeasible record naming the cap when it ran over it (and True)."""
    try:
        with wall_clock(wall_s):
            return (*evaluate_one(trial), False)
    except TrialTimeout:
        why = f"wall clock: the trial ran over its {wall_s:g} s cap"
        extra: dict[str, Any] = (
            {"point": point_of(trial.params)}
            if any(k.startswith(PREFIX) for k in trial.params)
            else {"params": dict(trial.params)}
        )
        return TrialRecord({}, {"wall_clock": 1.0}, why, [], []), extra, True


def _wait_for_storage(exc: Exception, storage: str, since: float | None) -> float:
    """Log and wait a little; give up with one line once the storage has been away too long."""
    now = time.monotonic()
    since = now if since is None else since
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if now - since > STORAGE_RETRY_S:
        raise InputError(
            _redact(storage), "storage", f"unreachable for {STORAGE_RETRY_S:g} s ({first[:120]})"
        ) from None
    sys.stderr.write(f"dse: storage unreachable ({first[:120]}); retrying\n")
    time.sleep(1.0)
    return since


TrialFn = Callable[[optuna.Trial], tuple[TrialRecord, dict[str, Any]]]


def _trial_fn(spec: StudySpec, catalog: Catalog, params: PerfParams, solver: PlacementSolver) -> TrialFn:
    return (_grid_trial if spec.is_grid else _search_trial)(spec, catalog, params, solver)


def _search_trial(spec: StudySpec, catalog: Catalog, params: PerfParams, solver: PlacementSolver) -> TrialFn:
    def one(trial: optuna.Trial) -> tuple[TrialRecord, dict[str, Any]]:
        choice = suggest(trial, spec)
        return evaluate(spec, choice, catalog, params, solver), {"choice": params_of(choice)}

    return one


def _grid_trial(spec: StudySpec, catalog: Catalog, params: PerfParams, solver: PlacementSolver) -> TrialFn:
    cache: dict[Any, Any] = {}  # placements shared by points that differ only in dynamics

    def one(trial: optuna.Trial) -> tuple[TrialRecord, dict[str, Any]]:
        point = suggest_point(trial, spec)
        rec = evaluate_point(spec, point, catalog, params, solver, cache)
        extra: dict[str, Any] = {"point": point}
        if rec.outcome is not None and rec.outcome.feasible and rec.request is not None:
            extra["choice"] = params_of(choice_of(rec.outcome, rec.request))
        return rec, extra

    return one


class _Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, total: int, done: int) -> None:
        self.total, self.t0, self.start = total, time.perf_counter(), done
        self.best: float | None = None

    def update(self, done: int, record: Any) -> None:
        v = record.metrics.get("usd_per_million_tokens") if record.feasible else None
        if v is not None and (self.best is None or v < self.best):
            self.best = v
        frac = min(done / max(self.total, 1), 1.0)
        bar = "#" * int(30 * frac)
        rate = (done - self.start) / max(time.perf_counter() - self.t0, 1e-9)
        best = f"best ${self.best:.4f}/M tok" if self.best is not None else "no feasible design yet"
        sys.stderr.write(f"\r[{bar:<30s}] {done}/{self.total} trials, {rate:.1f}/s, {best}   ")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")
