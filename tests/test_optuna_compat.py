"""What dse.study.optuna_compat relies on in the installed Optuna, pinned: an Optuna that changes
one of these fails here, naming it. Real SQLite storages; the schema's rows are also checked
against Optuna's own writes in tests/test_study_storage.py."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import optuna
import pytest
import scipy.special
from optuna.samplers._tpe import _truncnorm
from optuna.samplers._tpe import sampler as tpe_sampler
from optuna.trial import TrialState, create_trial

from dse.errors import InputError
from dse.study import optuna_compat as compat
from dse.study.storage import StoredStudy, open_storage


def _objective(trial: optuna.Trial) -> tuple[float, float]:
    topo = trial.suggest_categorical("topology", ["a", "b"])
    x = trial.suggest_float("x", 0.0, 1.0)
    y = trial.suggest_int("y", 1, 64, log=True) if topo == "b" else 1
    if trial.number % 7 == 3:
        raise optuna.TrialPruned()
    trial.set_constraint("violation", x - 0.8)
    return (x - 0.3) ** 2 + 1.0 / y, float(y)


class _Counting(compat.TPEHooks):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.splits = self.reads = 0

    def split(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> compat.Split:
        self.splits += 1
        return super().split(study, trial)

    def observations(self, trials, search_space, study):  # type: ignore[no-untyped-def]
        self.reads += 1
        return super().observations(trials, search_space, study)


@pytest.mark.parametrize("objectives", [1, 2])
def test_tpe_hooks_as_they_stand_propose_what_optunas_tpe_proposes(objectives: int) -> None:
    """Optuna still samples through ``_sample`` and reads parameters through ``_get_internal_repr``
    (the hooks are called), and the copies of ``_sample``, ``sample_independent`` (``y`` is sampled
    outside the relative space) and ``_sample_relative`` are Optuna's (the same proposals)."""
    runs = []
    with compat.scipy_log_ndtr():  # the same log Phi on both sides
        for cls in (optuna.samplers.TPESampler, _Counting):
            sampler = cls(seed=2, n_startup_trials=5, multivariate=True)
            study = optuna.create_study(sampler=sampler, directions=["minimize", "maximize"][:objectives])
            study.optimize(lambda t: _objective(t)[:objectives], n_trials=40)
            runs.append([t.params for t in study.trials])
    assert runs[0] == runs[1]
    assert isinstance(sampler, _Counting) and sampler.splits >= 30 and sampler.reads >= 2 * sampler.splits


def test_tpe_settings_read_through_the_hooks() -> None:
    one, two = optuna.create_study(), optuna.create_study(directions=["minimize", "minimize"])
    assert compat.TPEHooks().gamma(one) is tpe_sampler.default_gamma
    assert compat.TPEHooks().gamma(two) is tpe_sampler.default_gamma_multiobjective
    assert compat.TPEHooks().constant_liar is True  # Optuna 5's default; dse's samplers rely on it
    assert compat.TPEHooks(constant_liar=False).constant_liar is False
    sampler = compat.TPEHooks(seed=1, n_startup_trials=2, multivariate=True)
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: t.suggest_float("x", 0, 1) + t.suggest_float("z", 0, 1), n_trials=4)
    running = study.ask()
    running.suggest_float("x", 0, 1)  # both relative parameters are proposed; z not yet asked for
    frozen = study.get_trials(deepcopy=False)[-1]
    assert set(frozen.params) == {"x"} and set(sampler.params_so_far(frozen, study)) == {"x", "z"}
    assert running.suggest_float("z", 0, 1) == sampler.params_so_far(frozen, study)["z"]


def test_the_infeasible_score_dse_computes_is_optunas() -> None:
    """dse.study.tpe scores a trial's infeasibility from its public constraints as Optuna does."""
    for constraints in ([0.5, -1.0], [-0.5], [0.0, 2.0, 0.25]):
        t = create_trial(value=1.0, system_attrs={"constraints": constraints})
        assert sum(v for v in t.constraints.values() if v > 0) == tpe_sampler._get_infeasible_trial_score(t)


def test_optunas_split_of_complete_and_pruned_trials_is_reached() -> None:
    study = optuna.create_study(directions=["minimize", "maximize"])
    trials = [create_trial(values=[float(i % 5), float(i % 3)]) for i in range(12)]
    below, above = compat.split_complete(trials, study, 4)
    assert len(below) == 4 and len(above) == 8
    pruned = [create_trial(state=TrialState.PRUNED, intermediate_values={1: float(i)}) for i in range(5)]
    below, above = compat.split_pruned(pruned, optuna.create_study(), 2)
    assert [t.intermediate_values[1] for t in below] == [0.0, 1.0] and len(above) == 3


def test_scipy_log_ndtr_is_swapped_in_only_for_the_block_and_agrees_with_optunas() -> None:
    own = _truncnorm._log_ndtr
    assert own is not scipy.special.log_ndtr  # nothing of Optuna's changed outside a block
    with compat.scipy_log_ndtr():
        assert _truncnorm._log_ndtr is scipy.special.log_ndtr
        with compat.scipy_log_ndtr():  # nested: a sampler sampling inside a test's block
            assert _truncnorm._log_ndtr is scipy.special.log_ndtr
        assert _truncnorm._log_ndtr is scipy.special.log_ndtr
    assert _truncnorm._log_ndtr is own
    with pytest.raises(RuntimeError), compat.scipy_log_ndtr():
        raise RuntimeError
    assert _truncnorm._log_ndtr is own
    x = np.concatenate([np.linspace(-40.0, 40.0, 4001), [-1e3, -20.0001, -19.999, 5.999, 6.001, 1e3]])
    theirs = np.frompyfunc(_truncnorm._log_ndtr_single, 1, 1)(x).astype(float)
    # Optuna's form loses relative precision near x = 6, where log Phi is about -1e-9
    assert np.allclose(scipy.special.log_ndtr(x), theirs, rtol=1e-7, atol=1e-15)


def test_the_grid_is_optunas_shuffled_grid_and_its_point_reaches_the_trial() -> None:
    space = {"b": [1, 2, 3], "a": ["x", "y"]}
    sampler = optuna.samplers.GridSampler(space, seed=7)
    grid = compat.grid_of(sampler)
    assert grid.names == ["a", "b"] and grid.search_space == {"a": ["x", "y"], "b": [1, 2, 3]}
    assert sorted(grid.points) == sorted(itertools.product(["x", "y"], [1, 2, 3]))
    assert grid.rng is compat.grid_of(sampler).rng  # one stream, drawn from across trials
    study = optuna.create_study(sampler=sampler)
    for _ in range(5):  # Optuna's own sampler gives trial n the shuffled grid's point n (not the last:
        # telling it would stop the study)
        t = study.ask()
        point = (t.suggest_categorical("a", ["x", "y"]), t.suggest_categorical("b", [1, 2, 3]))
        study.tell(t, 0.0)
        assert point == grid.points[t.number] and study.trials[-1].system_attrs["grid_id"] == t.number


def test_a_system_attribute_set_for_a_trial_is_stored(tmp_path: Path) -> None:
    for storage in (None, open_storage(f"sqlite:///{tmp_path / 's.db'}")):
        study = optuna.create_study(storage=storage)
        trial = study.ask()
        frozen = study.get_trials(deepcopy=False)[0]
        compat.set_trial_system_attr(study, frozen, "grid_id", 3)
        assert study.get_trials()[0].system_attrs["grid_id"] == 3 and trial.number == 0


def test_storage_of_a_study_is_the_rdb_storage_it_was_opened_on(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    assert compat.storage_of(optuna.create_study(storage=storage)) is storage
    memory = optuna.create_study()
    assert isinstance(compat.storage_of(memory), optuna.storages.InMemoryStorage)


def test_a_new_storage_has_the_schema_dse_writes(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    assert storage.get_current_version() == compat.SCHEMA_VERSION
    assert compat.knows_schema(storage)


def test_the_schema_dse_knows_is_this_optunas_head(tmp_path: Path) -> None:
    """stamp_read passes a database stamped with SCHEMA_VERSION without Optuna's check: it must be
    the revision this Optuna's migrations end at."""
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 's.db'}")
    assert storage.get_head_version() == compat.SCHEMA_VERSION
    assert compat.alembic_stamps(storage.engine) == [compat.SCHEMA_VERSION]


def test_a_stamped_storage_opens_without_alembic(tmp_path: Path) -> None:
    """A new study file, the same file opened again (a resumed run, the sampler's process) and its
    trials read: alembic is never imported (it imports every SQL dialect's DDL, 0.3-0.6 s). (The
    template new files are seeded from is made once per cache folder and Optuna version, through
    Optuna: made here first.)"""
    open_storage(f"sqlite:///{tmp_path / 'first.db'}")
    code = (
        "import sys, optuna\n"
        "from dse.study.storage import open_storage\n"
        f"url = 'sqlite:///{tmp_path / 'r.db'}'\n"
        "s = optuna.create_study(storage=open_storage(url), study_name='x')\n"
        "s.add_trial(optuna.trial.create_trial(value=1.0))\n"
        "t = optuna.load_study(study_name='x', storage=open_storage(url)).trials\n"
        "print(len(t), sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))\n"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    assert got.stdout.split("\n")[0] == "1 []"


def test_a_storage_without_a_stamp_or_of_another_schema_goes_through_optunas_own_code(tmp_path: Path) -> None:
    """Without the stamp, Optuna stamps it as before; stamped with another revision, Optuna's
    check refuses it as before."""
    import sqlalchemy

    url = f"sqlite:///{tmp_path / 's.db'}"
    storage = open_storage(url)
    with storage.engine.begin() as conn:
        conn.execute(sqlalchemy.text("DELETE FROM alembic_version"))
    assert compat.alembic_stamps(storage.engine) == []
    assert compat.alembic_stamps(open_storage(url).engine) == [compat.SCHEMA_VERSION]  # stamped again
    with storage.engine.begin() as conn:
        conn.execute(sqlalchemy.text("UPDATE alembic_version SET version_num = 'v3.0.0.d'"))
    with pytest.raises(InputError, match="holds an Optuna storage of schema v3.0.0.d.*upgrade it"):
        open_storage(url)
    assert optuna.storages._rdb.storage._VersionManager.__name__ == "_VersionManager"  # put back


def test_storages_opened_at_once_in_threads_leave_optunas_version_manager_as_it_was() -> None:
    """stamp_read swaps Optuna's _VersionManager for its subclass under the swaps' lock. A thread
    that entered while another held the swap read the subclass as "Optuna's own", waited for the
    lock, and put that subclass back when it was done: Optuna's class stayed swapped for good."""
    import threading

    from optuna.storages._rdb import storage as rdb

    own = rdb._VersionManager
    with compat.stamp_read():

        def enter_and_leave() -> None:
            with compat.stamp_read():
                pass

        other = threading.Thread(target=enter_and_leave)
        other.start()
        time.sleep(0.3)  # it is waiting for the lock this thread holds
        assert other.is_alive()
    other.join(timeout=10.0)
    assert rdb._VersionManager is own, rdb._VersionManager


def test_dead_trials_are_those_optuna_finds_stale_and_those_that_never_beat(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # heartbeats outside Study.optimize
        storage = open_storage(url, stale_after_s=1.0)  # beat every second, stale after one
        stored = StoredStudy.of(optuna.create_study(storage=storage, study_name="s"), storage, url)
        stopped, never, alive = (stored.study.ask() for _ in range(3))
    storage.record_heartbeat(stored.trial_id(stopped.number))
    time.sleep(2.2)
    storage.record_heartbeat(stored.trial_id(alive.number))
    dead = compat.dead_trial_ids(storage, stored.study_id)
    assert dead == [stored.trial_id(stopped.number), stored.trial_id(never.number)]
    assert storage._get_stale_trial_ids(stored.study_id) == dead[:1]  # Optuna's rule for those that beat


def test_optuna_warns_of_heartbeats_outside_optimize_in_the_words_the_runner_filters(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 's.db'}", stale_after_s=4.0))
    with pytest.warns(UserWarning, match="^Heartbeat of storage is supposed to be used"):
        study.ask()


def _every_kind_of_trial(storage: optuna.storages.RDBStorage, name: str) -> optuna.Study:
    """A two-objective study whose trials have every state, stored values of every type,
    intermediate values, attributes and parameters of each distribution."""
    study = optuna.create_study(storage=storage, study_name=name, directions=["minimize", "maximize"])
    for i in range(9):
        t = study.ask()
        t.suggest_categorical("topology", ["aggregated", "disaggregated", None])
        t.suggest_float("share", 0.0, 1.0)
        t.suggest_int("batch", 1, 512, log=True)
        t.suggest_float("chunk", 256.0, 8192.0, step=256.0)
        t.set_user_attr("record", {"metrics": {"gpus": 8.0 * i}, "note": "x" * i})
        t.set_user_attr("plain", i)
        for step, v in enumerate([0.5, float("inf"), float("-inf"), float("nan")][: i % 5]):
            storage.set_trial_intermediate_value(t._trial_id, step, v)  # report() is single-objective
        if i % 4 == 1:
            study.tell(t, state=TrialState.PRUNED)
        elif i % 4 == 2:
            study.tell(t, state=TrialState.FAIL)
        elif i % 4 == 3 and i < 8:
            study.tell(t, [float("inf"), float("-inf")] if i == 3 else [1.0 * i, -2.5])
        elif i != 8:
            t.set_user_attr("later", [1, 2])
            study.tell(t, [0.25 * i, 3.0])
    study.enqueue_trial({"share": 0.5})  # a waiting trial, with its fixed parameters as an attribute
    return study


def _same_trials(a: list[optuna.trial.FrozenTrial], b: list[optuna.trial.FrozenTrial]) -> bool:
    """Trial lists equal field by field, NaN equal to NaN (an intermediate value may be one)."""

    def fields(t: optuna.trial.FrozenTrial) -> dict[str, object]:
        d = dict(vars(t))
        d["intermediate_values"] = {k: repr(v) for k, v in t.intermediate_values.items()}
        return d

    return len(a) == len(b) and all(fields(x) == fields(y) for x, y in zip(a, b, strict=True))


def test_trials_read_with_one_select_per_table_are_optunas(tmp_path: Path) -> None:
    """read_trials against Optuna's own ORM read of the same storage: every field of every trial,
    for every state filter and the incremental reads Optuna's cache makes; an unknown study is a
    KeyError, as in Optuna."""
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    assert isinstance(storage, compat.FastReadRDBStorage)
    study = _every_kind_of_trial(storage, "kinds")
    sid = storage.get_study_id_from_name("kinds")
    theirs = optuna.storages.RDBStorage._get_trials
    everything = theirs(storage, sid, None, set(), -1)
    states = {t.state for t in everything}
    assert states == {TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING,
                      TrialState.WAITING}  # fmt: skip
    assert any(v == float("inf") for t in everything for v in t.values or [])
    assert any(len(t.intermediate_values) == 4 for t in everything)
    ids = [t._trial_id for t in everything]
    for args in [
        (None, set(), -1),
        ((TrialState.COMPLETE,), set(), -1),
        ((TrialState.COMPLETE, TrialState.RUNNING, TrialState.PRUNED), set(), -1),
        (None, {ids[1], ids[4]}, ids[5]),  # the cache: the unfinished it holds, and the newer
        (None, set(), ids[6]),
        ((TrialState.FAIL,), {ids[2]}, ids[3]),
    ]:
        ours = compat.read_trials(storage, sid, *args)
        assert ours and _same_trials(ours, theirs(storage, sid, *args)), args
    assert _same_trials(study.get_trials(deepcopy=False), everything)  # through Optuna's cache too
    with pytest.raises(KeyError):
        compat.read_trials(storage, sid + 1)


@pytest.fixture
def tokyo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process in a time zone nine hours east of UTC, as a user's machine may be."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    assert time.localtime().tm_gmtoff == 9 * 3600  # the zone is known here
    yield
    monkeypatch.undo()
    time.tzset()


def test_trials_read_outside_utc_carry_optunas_local_times(tmp_path: Path, tokyo: None) -> None:
    """Optuna stores naive UTC and gives back naive local time; so does read_trials."""
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    _every_kind_of_trial(storage, "tz")
    sid = storage.get_study_id_from_name("tz")
    theirs = optuna.storages.RDBStorage._get_trials(storage, sid, None, set(), -1)
    ours = compat.read_trials(storage, sid)
    assert _same_trials(ours, theirs)
    started = theirs[0].datetime_start
    assert started is not None and abs((started - datetime.now()).total_seconds()) < 60  # local, not UTC


def test_a_trial_that_just_started_is_not_dead_outside_utc(tmp_path: Path, tokyo: None) -> None:
    """Its start is stored as naive UTC; the rule compares it with now in UTC, not local time."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # heartbeats outside Study.optimize
        storage = open_storage(url, stale_after_s=60.0)
        stored = StoredStudy.of(optuna.create_study(storage=storage, study_name="s"), storage, url)
        stored.study.ask()
    assert compat.dead_trial_ids(storage, stored.study_id) == []


def test_the_trials_table_times_are_utc_outside_utc(tmp_path: Path, tokyo: None) -> None:
    """The Parquet trials table's started_utc / finished_utc are UTC whatever the local zone."""
    from dse.study.results import TrialsRead, trials_frame

    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 's.db'}"), study_name="s")
    study.optimize(lambda t: t.suggest_float("x", 0.0, 1.0), n_trials=2)
    frame = trials_frame(TrialsRead(study), ["value"])
    started = frame["started_utc"][0]
    assert abs((started - datetime.now(UTC)).total_seconds()) < 60


def test_tpe_hooks_filter_the_trials_once_per_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    """Optuna's TPE filters its cached trial list once for the relative parameters and once for
    each parameter outside them; the hooks' copies filter it once a trial."""
    real = optuna.Study._get_trials
    filtered = [0]

    def counting(self, deepcopy=True, states=None, use_cache=False):  # type: ignore[no-untyped-def]
        filtered[0] += states is not None
        return real(self, deepcopy, states, use_cache)

    monkeypatch.setattr(optuna.Study, "_get_trials", counting)
    reads = []
    for cls in (optuna.samplers.TPESampler, compat.TPEHooks):
        filtered[0] = 0
        study = optuna.create_study(sampler=cls(seed=2, n_startup_trials=5, multivariate=True))
        study.optimize(lambda t: _objective(t)[0], n_trials=40)
        reads.append(filtered[0])
    assert reads[1] <= reads[0] - 40, reads


def test_a_trial_across_the_daylight_saving_switch_keeps_its_instants(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """New York's clocks go back at 06:00 UTC on 2026-11-01: a trial from 05:59:30 to 06:00:30 UTC
    had been exported as finishing at 05:00:30, 3,540 s before it started."""
    import time
    from datetime import UTC, datetime

    from dse.study.optuna_compat import _naive_local
    from dse.study.results import _utc

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        start, end = datetime(2026, 11, 1, 5, 59, 30), datetime(2026, 11, 1, 6, 0, 30)
        a, b = _naive_local(start), _naive_local(end)
        assert (a.hour, b.hour) == (1, 1)  # both in the repeated hour, local time
        assert (_utc(a), _utc(b)) == (start.replace(tzinfo=UTC), end.replace(tzinfo=UTC))
        assert (_utc(b) - _utc(a)).total_seconds() == 60.0
        summer = datetime(2026, 7, 1, 12, 0)
        assert _utc(_naive_local(summer)) == summer.replace(tzinfo=UTC)
    finally:
        monkeypatch.undo()
        time.tzset()
