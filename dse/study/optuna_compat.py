"""Every use dse makes of Optuna beyond its public interface, in one place, each with its reason.

Nothing here runs at import; nothing of Optuna's is changed for longer than a call of dse's own
sampler or the opening of a storage. ``tests/test_optuna_compat.py`` pins each behaviour relied
on against the installed Optuna, so an upgrade that breaks one fails there, naming it, not
somewhere inside a study.

* :func:`storage_of`: the storage under a :class:`optuna.Study`.
* :class:`TPEHooks`: TPE's two passes over the history as methods (``dse.study.tpe``), and
  :func:`scipy_log_ndtr` while it samples.
* :func:`grid_of`, :func:`set_trial_system_attr`: what ``dse.study.sweep.GridSampler`` shares
  with Optuna's grid sampler.
* :func:`insert_finished`, :func:`dead_trial_ids`, :func:`read_trials`, :func:`state_counts`: SQL
  on Optuna's database schema (:data:`SCHEMA_VERSION`): a finished trial in one transaction,
  trials that never beat, a study's trials read back with one select per table
  (:class:`FastReadRDBStorage`), and its trials counted by state.
* :func:`stamp_read`: a storage opened without alembic where its database is stamped.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import weakref
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, cast

import numpy as np
import optuna
import sqlalchemy
from optuna.distributions import BaseDistribution, distribution_to_json, json_to_distribution
from optuna.samplers._base import _INDEPENDENT_SAMPLING_WARNING_TEMPLATE
from optuna.samplers._tpe import sampler as tpe_sampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

try:  # Optuna's log Phi; an Optuna without it keeps its own (scipy_log_ndtr does nothing)
    from optuna.samplers._tpe import _truncnorm
except ImportError:  # pragma: no cover - another Optuna
    _truncnorm = None  # type: ignore[assignment]

Split = tuple[list[FrozenTrial], list[FrozenTrial]]


def storage_of(study: Study) -> optuna.storages.BaseStorage:
    """The storage a study was opened on (the RDB storage itself, not Optuna's cache over it).

    Why private: a Study keeps its storage in ``_storage`` (an ``RDBStorage`` under a
    ``_CachedStorage``, ``_backend``) with no accessor. dse's runner holds the storage it opened and
    passes it; this serves callers that hold only the Study (``dse.study.runner.enqueue_first``
    from the Python API and tests)."""
    storage = study._storage
    return cast(optuna.storages.BaseStorage, getattr(storage, "_backend", storage))


# ---------------------------------------------------------------------------------------------
# TPE


class TPEHooks(optuna.samplers.TPESampler):
    """Optuna's :class:`~optuna.samplers.TPESampler` with its two passes over the history as
    methods a subclass replaces: :meth:`split` (the good and the bad trials for a trial) and
    :meth:`observations` (a split part's parameters as columns). As it stands it proposes what
    Optuna's TPE proposes.

    Why private: TPESampler takes neither as an argument. ``_sample`` below is Optuna 5.0's, with
    :meth:`split` in place of its read and split of the trials, sampling under
    :func:`scipy_log_ndtr`; ``_get_internal_repr`` is where Optuna reads a part's parameters. The
    accessors read settings TPESampler keeps private. ``sample_independent`` and
    ``_sample_relative`` are Optuna 5.0's as well, with the finished trials read once per trial
    (:meth:`finished`)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Optuna's cached trial list, the trial, and the list's complete and pruned trials
        self._finished: tuple[list[FrozenTrial], int, list[FrozenTrial]] | None = None

    def split(self, study: Study, trial: FrozenTrial) -> Split:
        """The good and the bad trials for ``trial``, as Optuna splits them (called once for each
        time TPE samples: for the relative parameters, and for each parameter outside them)."""
        running = (TrialState.RUNNING,) if self.constant_liar else ()
        states = (TrialState.COMPLETE, TrialState.PRUNED, *running)
        trials = [t for t in study.get_trials(deepcopy=False, states=states) if t.number != trial.number]
        n = sum(t.state != TrialState.RUNNING for t in trials)
        return tpe_sampler._split_trials(study, trials, self.gamma(study)(n))

    def observations(
        self, trials: list[FrozenTrial], search_space: dict[str, BaseDistribution], study: Study
    ) -> dict[str, np.ndarray]:
        """The internal values of ``search_space``'s parameters of the ``trials`` (a part of a
        split) that have them all, one array per parameter."""
        return super()._get_internal_repr(trials, search_space, study)

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        """Optuna 5.0's, with the finished trials read once per trial (:meth:`finished`)."""
        trials = self.finished(study, trial)
        if len(trials) < self._n_startup_trials:
            return self._random_sampler.sample_independent(study, trial, param_name, param_distribution)
        if self._warn_independent_sampling and self._is_multivariate(study):
            if any(param_name in t.params for t in trials):
                tpe_sampler._logger.warning(
                    _INDEPENDENT_SAMPLING_WARNING_TEMPLATE.format(
                        param_name=param_name,
                        trial_number=trial.number,
                        independent_sampler_name=self._random_sampler.__class__.__name__,
                        sampler_name=self.__class__.__name__,
                        fallback_reason=(
                            "`multivariate=True,group=False` does not support dynamic search space"
                            " (but `multivariate=True,group=True` works)"
                        ),
                    )
                )
        return self._sample(study, trial, {param_name: param_distribution})[param_name]

    def _sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if search_space == {} or len(self.finished(study, trial)) < self._n_startup_trials:
            return {}
        return self._sample(study, trial, search_space)

    def finished(self, study: Study, trial: FrozenTrial) -> list[FrozenTrial]:
        """The complete and pruned trials as Optuna's TPE reads them while it samples ``trial``.
        Optuna filters its cached list of the study's trials (made anew at each ask and tell)
        once for the relative parameters and once for each parameter outside them: five passes
        over every trial for each trial of the headline study. This filters that same list
        once, and again whenever Optuna has made a new one (the list is held, so its identity
        is not reused)."""
        every = study._get_trials(deepcopy=False, use_cache=True)  # no states: the cached list itself
        kept = self._finished
        if kept is None or kept[0] is not every or kept[1] != trial.number:
            states = (TrialState.COMPLETE, TrialState.PRUNED)
            kept = (every, trial.number, [t for t in every if t.state in states])
            self._finished = kept
        return kept[2]

    @property
    def constant_liar(self) -> bool:
        """Whether running trials count as bad ones (TPESampler's ``constant_liar``)."""
        return bool(self._constant_liar)

    def gamma(self, study: Study) -> Callable[[int], int]:
        """How many of n finished trials are good: the one given, or Optuna's default for the
        study's number of objectives (chosen once, at first use, as Optuna does)."""
        if self._gamma is None:
            one = len(study.directions) <= 1
            self._gamma = tpe_sampler.default_gamma if one else tpe_sampler.default_gamma_multiobjective
        return cast(Callable[[int], int], self._gamma)

    def params_so_far(self, trial: FrozenTrial, study: Study) -> dict[str, Any]:
        """A trial's parameters as TPE reads them: a running one's include the relative parameters
        its worker was proposed and has not asked for yet (the constant liar's view)."""
        return cast(dict[str, Any], self._get_params(trial, study))

    def _sample(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        below, above = self.split(study, trial)
        with scipy_log_ndtr():
            mpe_below = self._build_parzen_estimator(study, search_space, below, handle_below=True)
            mpe_above = self._build_parzen_estimator(study, search_space, above, handle_below=False)
            samples_below = mpe_below.sample(self._rng.rng, self._n_ei_candidates)
            acq = self._compute_acquisition_func(samples_below, mpe_below, mpe_above)
        ret = optuna.samplers.TPESampler._compare(samples_below, acq)
        for name, dist in search_space.items():
            ret[name] = dist.to_external_repr(ret[name])
        return ret

    def _get_internal_repr(
        self, trials: list[FrozenTrial], search_space: dict[str, BaseDistribution], study: Study
    ) -> dict[str, np.ndarray]:
        return self.observations(trials, search_space, study)


def split_complete(trials: list[FrozenTrial], study: Study, n_below: int) -> Split:
    """Optuna's split of feasible complete trials: the best ``n_below`` by value, or for several
    objectives by non-domination rank with its hypervolume tie-break (which is why dse calls it)."""
    below, above = tpe_sampler._split_complete_trials(trials, study, n_below)
    return list(below), list(above)


def split_pruned(trials: list[FrozenTrial], study: Study, n_below: int) -> Split:
    """Optuna's split of feasible pruned trials, by their last step and intermediate value."""
    below, above = tpe_sampler._split_pruned_trials(trials, study, n_below)
    return list(below), list(above)


_SWAP = threading.RLock()


@contextlib.contextmanager
def scipy_log_ndtr() -> Iterator[None]:
    """Optuna's truncated normal with :func:`scipy.special.log_ndtr` for log Phi(x) during the
    block, its own after it.

    Why private: Optuna 5 computes log Phi one element at a time in Python (``np.frompyfunc``
    behind a cache): in 300 trials of the headline study 2.6 million calls, 60% of TPE's time.
    scipy's is the same function in C and more exact in the tails (the tests check they agree).
    Optuna takes no other, so the module's function is swapped while dse's TPE samples, under a
    lock (threads that sample at once wait for each other), and put back."""
    if _truncnorm is None or not hasattr(_truncnorm, "_log_ndtr"):
        yield
        return
    import scipy.special  # here: only a process that samples with TPE needs scipy

    with _SWAP:
        own = _truncnorm._log_ndtr
        setattr(_truncnorm, "_log_ndtr", scipy.special.log_ndtr)  # noqa: B010 - a private name mypy does not know
        try:
            yield
        finally:
            setattr(_truncnorm, "_log_ndtr", own)  # noqa: B010


# ---------------------------------------------------------------------------------------------
# the grid sampler


class Grid(NamedTuple):
    """What Optuna's grid sampler holds: its parameters (sorted), its points in the order its
    seed shuffled them, the search space it records on each trial, and its random state."""

    names: list[str]
    points: list[tuple[Any, ...]]
    search_space: dict[str, list[Any]]
    rng: np.random.RandomState


def grid_of(sampler: optuna.samplers.GridSampler) -> Grid:
    """Why private: :class:`optuna.samplers.GridSampler` keeps its shuffled grid and random state
    to itself; dse's grid sampler chooses each trial's point among those no trial holds, from the
    same shuffled grid and stream as Optuna's, so a seed gives the points it always gave."""
    return Grid(sampler._param_names, sampler._all_grids, sampler._search_space, sampler._rng.rng)


def set_trial_system_attr(study: Study, trial: FrozenTrial, key: str, value: Any) -> None:
    """Why private: a grid sampler's ``before_trial`` tells its ``sample_independent`` which point
    the trial has through the trial's system attributes, as Optuna's own GridSampler does; neither
    Study nor FrozenTrial sets one, and the storage's setter needs the trial's id."""
    study._storage.set_trial_system_attr(trial._trial_id, key, value)


# ---------------------------------------------------------------------------------------------
# Optuna's database schema

SCHEMA_VERSION = "v3.2.0.a"
"""The schema (``RDBStorage.get_current_version()``) :func:`insert_finished`,
:func:`dead_trial_ids` and :func:`read_trials` know; a storage of another goes through Optuna's
own methods."""

_TABLES = (
    "studies",
    "study_user_attributes",
    "trials",
    "trial_params",
    "trial_values",
    "trial_user_attributes",
    "trial_system_attributes",
    "trial_intermediate_values",
    "trial_heartbeats",
)
_REFLECTED: weakref.WeakKeyDictionary[Any, dict[str, sqlalchemy.Table]] = weakref.WeakKeyDictionary()
_VERSION: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def knows_schema(storage: optuna.storages.RDBStorage) -> bool:
    """Whether the storage's schema is :data:`SCHEMA_VERSION` (read once per storage object: a
    schema changes only by an ``optuna storage upgrade``, which no one runs under a study)."""
    version = _VERSION.get(storage)
    if version is None:
        stamps = alembic_stamps(storage.engine)  # Optuna's own read imports alembic (stamp_read)
        version = stamps[0] if len(stamps) == 1 else storage.get_current_version()
        _VERSION[storage] = version
    return version == SCHEMA_VERSION


def _tables(engine: sqlalchemy.engine.Engine) -> dict[str, sqlalchemy.Table]:
    """Optuna's tables as the database describes them (read once per engine)."""
    tables = _REFLECTED.get(engine)
    if tables is None:
        meta = sqlalchemy.MetaData()
        meta.reflect(engine, only=_TABLES)
        tables = _REFLECTED[engine] = {name: meta.tables[name] for name in _TABLES}
    return tables


def claim_study_attr(study: Study, key: str, value: Any) -> tuple[Any, bool]:
    """The study's user attribute ``key`` and whether this call stored it: ``value`` where the
    study holds none, else the one it holds.

    Why not Optuna's ``set_user_attr``: it reads, then inserts or updates, and ignores the
    conflict of an insert another writer made first, so of two runs opening a new study at once
    each may believe its own value pinned (the later update wins, or the earlier insert does,
    unseen). One insert here either stores ``value`` or fails on the table's unique key (study,
    key), and then the stored value is read: the first writer's. A storage of another schema (or
    not a database) takes the read and the set, as before."""
    storage = study._storage
    rdb = getattr(storage, "_backend", storage)  # (Optuna wraps an RDBStorage in its cache)
    if not isinstance(rdb, optuna.storages.RDBStorage) or not knows_schema(rdb):
        held = study.user_attrs
        if key in held:
            return held[key], False
        study.set_user_attr(key, value)
        return value, True
    table = _tables(rdb.engine)["study_user_attributes"]
    study_id = study._study_id
    stored = sqlalchemy.select(table.c.value_json).where(table.c.study_id == study_id, table.c.key == key)
    with rdb.engine.connect() as conn:  # held already: no write (a reader may not write)
        held_json = conn.execute(stored).scalar_one_or_none()
    if held_json is not None:
        return json.loads(held_json), False
    try:
        with rdb.engine.begin() as conn:
            conn.execute(table.insert().values(study_id=study_id, key=key, value_json=json.dumps(value)))
        return value, True
    except sqlalchemy.exc.IntegrityError:
        pass  # another run stored it since the read: its value is the study's
    with rdb.engine.connect() as conn:
        return json.loads(conn.execute(stored).scalar_one()), False


def insert_finished(
    storage: optuna.storages.RDBStorage, study_id: int, trial: FrozenTrial, user_attrs: dict[str, Any]
) -> None:
    """Store a finished trial in one transaction, ``user_attrs`` added to its own.

    Why not Optuna's: ``Study.add_trial`` takes 20-30 ORM statements (a lookup and a flush per
    parameter, each checked against an earlier trial's distribution): 11-22 ms a trial on SQLite,
    against 1 ms for one insert per table here, in the process that also samples. The study's
    parameters never change distribution (the spec fixes them), so the check is not needed. As in
    Optuna, the number is the count of the study's earlier trials, taken while this transaction
    holds the write lock (PostgreSQL: a lock on the study's row first; SQLite: the insert that
    counts), so writers sharing a storage never number two trials alike."""
    t = _tables(storage.engine)
    with storage.engine.begin() as conn:  # commits at the end, rolls back on any error
        trials = t["trials"]
        if conn.dialect.name != "sqlite":  # SQLite's first write takes the database's lock
            studies = t["studies"]
            conn.execute(
                sqlalchemy.select(studies.c.study_id).where(studies.c.study_id == study_id).with_for_update()
            )
        earlier = (
            sqlalchemy.select(sqlalchemy.func.count())
            .select_from(trials)
            .where(trials.c.study_id == study_id)
            .scalar_subquery()
        )
        inserted = conn.execute(
            trials.insert().values(
                number=earlier,  # counted inside the insert, under the write lock
                study_id=study_id,
                state=trial.state.name,
                datetime_start=_naive_utc(trial.datetime_start),
                datetime_complete=_naive_utc(trial.datetime_complete),
            )
        )
        trial_id = cast(Any, inserted.inserted_primary_key)[0]
        for table, rows in _rows(trial, user_attrs).items():
            if rows:
                conn.execute(t[table].insert(), [{"trial_id": trial_id, **r} for r in rows])


def _rows(trial: FrozenTrial, user_attrs: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """A trial's rows in Optuna's tables, by table (the trial's own row aside)."""
    return {
        "trial_params": [
            {
                "param_name": name,
                "param_value": dist.to_internal_repr(trial.params[name]),
                "distribution_json": distribution_to_json(dist),
            }
            for name, dist in trial.distributions.items()
        ],
        "trial_values": [_value_row(i, v) for i, v in enumerate(trial.values or [])],
        "trial_user_attributes": [
            {"key": k, "value_json": json.dumps(v)} for k, v in {**trial.user_attrs, **user_attrs}.items()
        ],
        "trial_system_attributes": [
            {"key": k, "value_json": json.dumps(v)} for k, v in trial.system_attrs.items()
        ],
    }


def _value_row(objective: int, value: float) -> dict[str, Any]:
    """Optuna's stored form of an objective value: +-inf kept as a type, not a number."""
    if value == float("inf"):
        return {"objective": objective, "value": None, "value_type": "INF_POS"}
    if value == float("-inf"):
        return {"objective": objective, "value": None, "value_type": "INF_NEG"}
    return {"objective": objective, "value": value, "value_type": "FINITE"}


def _naive_utc(t: datetime | None) -> datetime | None:
    """Optuna's RDB stores datetimes as naive UTC and reads them back as naive local time."""
    return None if t is None else t.astimezone(UTC).replace(tzinfo=None)


STALE_AFTER_ATTR = "dse:stale_after_s"
"""The trial system attribute a worker stores on each trial it runs: its own ``--stale-after``,
the silence after which that trial is its dead worker's (its beats come every quarter of it)."""


def dead_trial_ids(storage: optuna.storages.RDBStorage, study_id: int) -> list[int]:
    """The study's running trials whose worker died: its heartbeats stopped for the grace period
    (Optuna's stale trials), or it never beat and started longer ago than that. The grace period
    is the trial's own worker's (:data:`STALE_AFTER_ATTR`) where it stored one, else this
    storage's: a worker run with ``--stale-after 4`` had failed, as dead, the trials of a live
    worker of the default 120 s (a beat every 30 s) once they ran 4 s.

    Why not Optuna's: :func:`optuna.storages.fail_stale_trials` counts only trials that have beaten
    once; a worker killed between asking for a trial and its first beat would leave the trial
    running for ever (its grid point or warm-start design never run again). No public method
    tells whether a trial has beaten."""
    ours = storage.grace_period or 2 * (storage.heartbeat_interval or 0)
    now, rows = _running_beats(storage, study_id)
    dead = []
    for trial_id, _, started, beat, own in rows:
        grace = timedelta(seconds=_seconds(own, ours))
        if (beat is not None and now - beat > grace) or (
            beat is None and started is not None and datetime.now(UTC).replace(tzinfo=None) - started > grace
        ):
            dead.append(trial_id)
    return dead


def _seconds(stored_json: str | None, default: float) -> float:
    """A trial's stored stale-after (its attribute's JSON), or ``default`` where it has none that
    is a positive number."""
    with contextlib.suppress(TypeError, ValueError):
        value = json.loads(stored_json) if stored_json is not None else None
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return float(value)
    return default


def live_beats(
    storage: optuna.storages.RDBStorage, study_id: int, within_s: float
) -> list[tuple[int, float]]:
    """(trial number, seconds since its last heartbeat) of the study's running trials that beat
    within the last ``within_s`` seconds: trials a worker is running now (a lone run sends no
    heartbeats), the most recent first."""
    now, rows = _running_beats(storage, study_id)
    beating = [(int(n), (now - beat).total_seconds()) for _, n, _, beat, _ in rows if beat is not None]
    ages = sorted(beating, key=lambda r: r[1])
    return [(n, age) for n, age in ages if age <= within_s]


def _running_beats(storage: optuna.storages.RDBStorage, study_id: int) -> tuple[datetime, list[Any]]:
    """The database's clock (naive UTC, as heartbeats are stored) and, for each of the study's
    running trials, its id, number, start, last heartbeat (None: it never beat) and its worker's
    stale-after (:data:`STALE_AFTER_ATTR`, as stored JSON; None: not stored)."""
    t = _tables(storage.engine)
    trials, beats, attrs = t["trials"], t["trial_heartbeats"], t["trial_system_attributes"]
    own = sqlalchemy.and_(attrs.c.trial_id == trials.c.trial_id, attrs.c.key == STALE_AFTER_ATTR)
    query = (
        sqlalchemy.select(
            trials.c.trial_id, trials.c.number, trials.c.datetime_start, beats.c.heartbeat, attrs.c.value_json
        )
        .select_from(trials.outerjoin(beats, beats.c.trial_id == trials.c.trial_id).outerjoin(attrs, own))
        .where(trials.c.study_id == study_id, trials.c.state == TrialState.RUNNING.name)
    )
    with storage.engine.connect() as conn:
        now = conn.execute(sqlalchemy.select(sqlalchemy.func.now())).scalar_one().replace(tzinfo=None)
        rows = list(conn.execute(query).all())
    return now, rows


class FastReadRDBStorage(optuna.storages.RDBStorage):
    """Optuna's RDB storage, reading a study's trials with :func:`read_trials` where it knows the
    schema, and opened without importing alembic where the database is stamped already
    (:func:`stamp_read`).

    Why private: Optuna's cache over an RDB storage (``_CachedStorage``, which every Study opened
    on one puts in front of it) reads the trials it does not hold through ``_get_trials``; this
    overrides that one method, with its arguments, so the cache works as before."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        with stamp_read():
            super().__init__(*args, **kwargs)

    def _get_trials(
        self,
        study_id: int,
        states: Container[TrialState] | None,
        included_trial_ids: set[int],
        trial_id_greater_than: int,
    ) -> list[FrozenTrial]:
        if not knows_schema(self):
            return super()._get_trials(study_id, states, included_trial_ids, trial_id_greater_than)
        return read_trials(self, study_id, states, included_trial_ids, trial_id_greater_than)


def alembic_stamps(engine: sqlalchemy.engine.Engine) -> list[str]:
    """The revisions the database's ``alembic_version`` table holds, read with one select, as
    alembic reads them (none where the table is missing). Alembic itself is not imported."""
    try:
        with engine.connect() as conn:
            rows = conn.execute(sqlalchemy.text("SELECT version_num FROM alembic_version"))
            return [str(r[0]) for r in rows]
    except sqlalchemy.exc.DBAPIError:
        return []


@contextlib.contextmanager
def stamp_read() -> Iterator[None]:
    """Optuna's storage opened during the block asks the database whether it is stamped with one
    select, and goes to alembic only where it is not.

    Why private: every ``RDBStorage`` makes a ``_VersionManager``, whose ``_init_alembic`` reads
    the ``alembic_version`` table through alembic's ``MigrationContext`` to learn whether to stamp
    it: importing alembic imports every SQL dialect's DDL module, PostgreSQL's catalog included,
    0.3-0.6 s of a study run's start for one row of a table. A database that has the row needs
    nothing of alembic (a new study file is seeded stamped, :mod:`dse.study.sqlite_seed`); one
    without it goes through Optuna's own code. Likewise the schema check of a storage opened
    with it (every existing file: a resumed run, the sampler's process, a report): a database
    stamped with :data:`SCHEMA_VERSION`, this Optuna's own, passes it; any other goes to
    Optuna's check, which reads alembic's scripts. The module's class is swapped for a subclass
    during the block, under the lock the other swaps take, and put back."""
    from optuna.storages._rdb import storage as rdb

    with _SWAP:  # Optuna's class read under the lock: outside it, another thread's swap may be on
        own = rdb._VersionManager

        class StampRead(own):  # type: ignore[misc,valid-type]
            def _init_alembic(self) -> None:
                if not alembic_stamps(self.engine):
                    super()._init_alembic()

            def check_table_schema_compatibility(self) -> None:
                # stamped with the schema this Optuna writes (its head: tests/test_optuna_compat.py)
                if alembic_stamps(self.engine) != [SCHEMA_VERSION]:
                    super().check_table_schema_compatibility()

        rdb._VersionManager = StampRead  # type: ignore[misc]
        try:
            yield
        finally:
            rdb._VersionManager = own  # type: ignore[misc]


_SPECIAL = {"INF_POS": float("inf"), "INF_NEG": float("-inf"), "NAN": float("nan")}
"""Optuna's stored types of values that are not finite numbers (the value column is then empty)."""


def state_counts(storage: optuna.storages.RDBStorage, study_id: int) -> dict[TrialState, int]:
    """How many of the study's trials are in each state, counted by the database.

    Why not Optuna's: its count (``get_n_trials``) reads every trial whole, records included; a
    worker counts after each trial, so a worker joining a study of 3,000 trials spent 1.15 s a
    trial reading them (a lone run: 0.02 s)."""
    trials = _tables(storage.engine)["trials"]
    query = (
        sqlalchemy.select(trials.c.state, sqlalchemy.func.count())
        .where(trials.c.study_id == study_id)
        .group_by(trials.c.state)
    )
    with storage.engine.connect() as conn:
        return {TrialState[str(state)]: int(n) for state, n in conn.execute(query).all()}


def read_trials(
    storage: optuna.storages.RDBStorage,
    study_id: int,
    states: Container[TrialState] | None = None,
    included_trial_ids: Iterable[int] = (),
    trial_id_greater_than: int = -1,
    *,
    user_attrs: bool = True,
) -> list[FrozenTrial]:
    """The study's trials in ``states`` (all when None), as Optuna's ``RDBStorage._get_trials``
    returns them: by trial id, and, when ``trial_id_greater_than`` is not -1, only those above it
    and those of ``included_trial_ids`` at or below it. Raises KeyError for a study not stored.

    Why not Optuna's: it loads the trials through its ORM, an object per row: 0.45-0.9 s for a
    1,000-trial study on SQLite, every time a run ends (its results) and a report or an export
    opens one; one select per table and the rows turned into trials here take 0.12-0.2 s. As
    with Optuna's (its ORM loads each table's rows with a select of its own), a trial that
    finishes between the selects may come back in its earlier state with its later rows.
    ``user_attrs=False`` leaves the user attributes (a trial's record) out."""
    t = _tables(storage.engine)
    trials, studies = t["trials"], t["studies"]
    where = [trials.c.study_id == study_id]
    if trial_id_greater_than > -1:
        newer = trials.c.trial_id > trial_id_greater_than
        included = [i for i in included_trial_ids if i <= trial_id_greater_than]
        where.append(sqlalchemy.or_(trials.c.trial_id.in_(included), newer) if included else newer)
    # the other tables' rows by study and id alone: a trial whose state changed since its own row
    # was read still gets its rows (those of trials not read are left unused)
    ids = sqlalchemy.select(trials.c.trial_id).where(*where).scalar_subquery()
    if states is not None:
        where.append(trials.c.state.in_([s.name for s in cast(Iterable[TrialState], states)]))
    with storage.engine.connect() as conn:
        found = conn.execute(sqlalchemy.select(studies.c.study_id).where(studies.c.study_id == study_id))
        if found.first() is None:
            raise KeyError(f"No study with study_id {study_id} exists.")
        heads = conn.execute(
            sqlalchemy.select(
                trials.c.trial_id,
                trials.c.number,
                trials.c.state,
                trials.c.datetime_start,
                trials.c.datetime_complete,
            )
            .where(*where)
            .order_by(trials.c.trial_id)
        ).all()

        def rows(table: str, *columns: str) -> dict[int, list[Any]]:
            """Each trial's rows of ``table`` (``columns``), in the order they were written."""
            tab = t[table]
            query = (
                sqlalchemy.select(tab.c.trial_id, *(tab.c[c] for c in columns))
                .where(tab.c.trial_id.in_(ids))
                .order_by(tab.primary_key.columns.values()[0])
            )
            out: dict[int, list[Any]] = {}
            for row in conn.execute(query):
                out.setdefault(row[0], []).append(row[1:])
            return out

        params = rows("trial_params", "param_name", "param_value", "distribution_json")
        values = rows("trial_values", "objective", "value", "value_type")
        # (without them: what a worker's count of a grid's points reads, not every trial's record)
        user = rows("trial_user_attributes", "key", "value_json") if user_attrs else {}
        system = rows("trial_system_attributes", "key", "value_json")
        steps = rows("trial_intermediate_values", "step", "intermediate_value", "intermediate_value_type")
    return _frozen_trials(heads, params, values, user, system, steps)


def _frozen_trials(
    heads: Sequence[Any],
    params: dict[int, list[Any]],
    values: dict[int, list[Any]],
    user: dict[int, list[Any]],
    system: dict[int, list[Any]],
    steps: dict[int, list[Any]],
) -> list[FrozenTrial]:
    """The trials from their rows (``heads``: the trials table's; the others by trial id), as
    Optuna's ``_build_frozen_trial_from_trial_model`` makes them."""
    distribution = functools.lru_cache(maxsize=None)(json_to_distribution)  # a few distinct per study
    out = []
    for head in heads:
        try:
            out.append(_frozen_trial(head, params, values, user, system, steps, distribution))
        except (ValueError, KeyError) as exc:  # a row a damaged file garbled (not JSON, no such state)
            why = ValueError(f"database disk image is malformed: trial {head[1]}'s rows do not read ({exc})")
            raise sqlalchemy.exc.DatabaseError("reading the trials", None, why) from exc
    return out


def _frozen_trial(
    head: Any,
    params: dict[int, list[Any]],
    values: dict[int, list[Any]],
    user: dict[int, list[Any]],
    system: dict[int, list[Any]],
    steps: dict[int, list[Any]],
    distribution: Callable[[str], BaseDistribution],
) -> FrozenTrial:
    """One trial from its rows."""
    trial_id, number, state, start, complete = head
    stored = values.get(trial_id)
    objective_values: list[float] | None = None
    if stored:
        objective_values = [0.0] * len(stored)
        for objective, v, kind in stored:
            objective_values[objective] = _stored_value(v, kind)
    ps = params.get(trial_id, [])
    dists = {name: distribution(j) for name, _, j in ps}
    return FrozenTrial(
        number=number,
        state=TrialState[state],
        value=None,
        values=objective_values,
        datetime_start=_naive_local(start),
        datetime_complete=_naive_local(complete),
        params={name: dists[name].to_external_repr(v) for name, v, _ in ps},
        distributions=dists,
        user_attrs={k: json.loads(j) for k, j in user.get(trial_id, [])},
        system_attrs={k: json.loads(j) for k, j in system.get(trial_id, [])},
        intermediate_values={s: _stored_value(v, kind) for s, v, kind in steps.get(trial_id, [])},
        trial_id=trial_id,
    )


def _naive_local(t: datetime | None) -> datetime | None:
    """A stored time (naive UTC) as Optuna's models give it back: naive local time, its ``fold``
    set in the hour a daylight-saving switch repeats, so that it reads back as the same instant
    (a trial run across the switch had finished an hour before it started)."""
    if t is None:
        return None
    local = t.replace(tzinfo=UTC).astimezone().replace(tzinfo=None)
    if local.astimezone(UTC).replace(tzinfo=None) != t:  # the second of a repeated hour
        local = local.replace(fold=1)
    return local


def _stored_value(value: float | None, kind: Any) -> float:
    """A value as Optuna stores it (a number and a type) back as a float."""
    name = getattr(kind, "name", kind)  # a string, or an enum where the database has the type
    if name != "FINITE":
        return _SPECIAL[name]
    assert value is not None  # Optuna stores a finite value's number
    return float(value)
