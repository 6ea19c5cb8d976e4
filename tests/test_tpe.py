"""dse's TPE must propose exactly what Optuna's TPE proposes with the same seed: on a space with
conditional parameters, constraints (feasible and infeasible trials) and pruned trials, single-
and multi-objective, in one process and resumed from a storage."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import optuna
import pytest

from dse.study.optuna_compat import scipy_log_ndtr
from dse.study.tpe import CachedTPESampler


@pytest.fixture(autouse=True)
def _same_log_phi() -> Iterator[None]:
    """Optuna's TPE samples here with the log Phi dse's samples with (scipy's, in C; Optuna's own
    differs in the last digits, which can tip a proposal; tests/test_optuna_compat.py compares
    the two functions)."""
    with scipy_log_ndtr():
        yield


def _objective(
    trial: optuna.Trial, objectives: int, log2_cap: float = 9.0, prune: bool = True
) -> float | tuple[float, float]:
    topo = trial.suggest_categorical("topology", ["aggregated", "disaggregated"])
    batch = trial.suggest_int("batch", 1, 4096, log=True)
    if topo == "aggregated":
        share = trial.suggest_float("share", 0.05, 0.5)
        cost = 1.0 / batch + (share - 0.2) ** 2
    else:
        shape = trial.suggest_categorical("shape", ["8gpu", "16gpu", "32gpu"])
        chunk = trial.suggest_int("chunk", 1024, 16384, step=1024)
        cost = 0.5 / batch + {"8gpu": 0.3, "16gpu": 0.1, "32gpu": 0.2}[shape] + chunk / 1e5
    if prune and trial.number % 11 == 5:
        raise optuna.TrialPruned()
    trial.set_constraint("violation", np.log2(batch) - log2_cap)  # batches over 2**cap are infeasible
    return cost if objectives == 1 else (cost, float(batch))


def _proposals(sampler: optuna.samplers.BaseSampler, objectives: int, n: int, cap: float) -> list[dict]:
    directions = ["minimize"] if objectives == 1 else ["minimize", "maximize"]
    study = optuna.create_study(sampler=sampler, directions=directions)
    study.optimize(lambda t: _objective(t, objectives, cap), n_trials=n)
    return [t.params for t in study.trials]


@pytest.mark.parametrize("objectives", [1, 2])
@pytest.mark.parametrize("multivariate", [True, False])
@pytest.mark.parametrize("cap", [9.0, 0.5])  # half the designs feasible; almost none (batch 1 only)
def test_same_proposals_as_optunas_tpe(objectives: int, multivariate: bool, cap: float) -> None:
    kw = dict(seed=3, n_startup_trials=8, multivariate=multivariate)
    theirs = _proposals(optuna.samplers.TPESampler(**kw), objectives, 90, cap)
    ours = _proposals(CachedTPESampler(**kw), objectives, 90, cap)
    assert len({t["topology"] for t in ours}) == 2 and any("shape" in t for t in ours)
    assert any(np.log2(t["batch"]) > cap for t in ours[8:])  # infeasible trials among the proposals
    assert ours == theirs


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
@pytest.mark.parametrize("cap", [9.0, 0.5])
def test_same_proposals_without_pruned_trials(direction: str, cap: float) -> None:
    """One objective and no pruned trial: the split runs over arrays."""
    runs, samplers = [], []
    for cls in (optuna.samplers.TPESampler, CachedTPESampler):
        sampler = cls(seed=6, n_startup_trials=6, multivariate=True)
        study = optuna.create_study(sampler=sampler, direction=direction)
        study.optimize(lambda t: _objective(t, 1, cap, prune=False), n_trials=70)
        runs.append([t.params for t in study.trials])
        samplers.append(sampler)
    assert runs[0] == runs[1]
    assert isinstance(samplers[1], CachedTPESampler) and not samplers[1]._pruned and samplers[1]._rows


def test_same_proposals_after_resuming_from_a_storage(tmp_path) -> None:
    """A resumed run hands the sampler a study that already holds trials it never split."""
    kw = dict(seed=5, n_startup_trials=5, multivariate=True)
    url = f"sqlite:///{tmp_path / 's.db'}"
    first = optuna.create_study(storage=url, study_name="s", sampler=optuna.samplers.RandomSampler(seed=1))
    first.optimize(lambda t: _objective(t, 1), n_trials=20)
    runs = []
    for cls in (optuna.samplers.TPESampler, CachedTPESampler):
        mem = optuna.create_study(sampler=cls(**kw))
        mem.add_trials(first.get_trials())
        mem.optimize(lambda t: _objective(t, 1), n_trials=30)
        runs.append([t.params for t in mem.trials])
    assert runs[0] == runs[1]


def test_same_proposals_while_another_trial_runs() -> None:
    """A worker sharing a storage sees the others' running trials; the constant liar counts them
    as bad trials with the parameters they have so far."""
    runs = []
    for cls in (optuna.samplers.TPESampler, CachedTPESampler):
        study = optuna.create_study(sampler=cls(seed=9, n_startup_trials=5, multivariate=True))
        study.optimize(lambda t: _objective(t, 1), n_trials=15)
        left = study.ask()  # another worker's trial, still running
        left.suggest_int("batch", 1, 4096, log=True)
        study.optimize(lambda t: _objective(t, 1), n_trials=15)
        runs.append([t.params for t in study.trials])
    assert runs[0] == runs[1]
    assert isinstance(study.sampler, CachedTPESampler)
    assert [p["batch"] for p in study.sampler._running] == [left.params["batch"]]  # counted as running


@pytest.mark.parametrize("objectives", [1, 2])
def test_same_proposals_one_trial_ahead(objectives: int) -> None:
    """A lone run's sampler proposes trial k + 2 (all its parameters) once trial k is told, with
    k + 1 running: dse.study.proposer's order."""
    runs = []
    for cls in (optuna.samplers.TPESampler, CachedTPESampler):
        directions = ["minimize"] * objectives
        study = optuna.create_study(sampler=cls(seed=4, n_startup_trials=6), directions=directions)

        def propose(study: optuna.Study) -> tuple[optuna.Trial, float | tuple[float, float] | None]:
            t = study.ask()
            try:
                return t, _objective(t, objectives)  # samples every parameter now
            except optuna.TrialPruned:
                return t, None

        ahead = [propose(study), propose(study)]
        for _ in range(60):
            t, value = ahead.pop(0)
            if value is None:
                study.tell(t, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(t, value)
            ahead.append(propose(study))
        runs.append([t.params for t in study.trials])
    assert runs[0] == runs[1]


def test_same_proposals_when_one_sampler_serves_two_studies() -> None:
    runs = []
    for cls in (optuna.samplers.TPESampler, CachedTPESampler):
        sampler = cls(seed=1, n_startup_trials=5, multivariate=True)
        first = optuna.create_study(sampler=sampler)
        first.optimize(lambda t: (t.suggest_float("x", 0, 10) - 2) ** 2, n_trials=20)
        second = optuna.create_study(sampler=sampler)
        second.optimize(lambda t: (t.suggest_float("x", 0, 10) - 8) ** 2, n_trials=20)
        runs.append([t.params for t in second.trials])
    assert runs[0] == runs[1]


def test_a_split_turns_each_column_into_an_array_once_for_both_its_parts() -> None:
    """The good and the bad part of a split read one array per parameter, made at the first read
    (it was made for each part), with the same values Optuna's own reading gives; a running trial
    (another worker's) has its row after the finished ones."""
    sampler = CachedTPESampler(seed=2, n_startup_trials=5, multivariate=True, constant_liar=True)
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: _objective(t, 1, prune=False), n_trials=25)
    other = study.ask()
    other.suggest_int("batch", 1, 4096, log=True)  # running: the constant liar counts it
    mine = study.ask()
    frozen = study._storage.get_trial(mine._trial_id)
    below, above = sampler.split(study, frozen)
    reads: list[str] = []
    column = sampler._column

    def counted(name: str, dist: optuna.distributions.BaseDistribution) -> list[float]:
        reads.append(name)
        return column(name, dist)

    sampler._column = counted  # type: ignore[method-assign]
    space = {"batch": optuna.distributions.IntDistribution(1, 4096, log=True)}
    for part in (below, above):
        ours = sampler.observations(part, space, study)
        theirs = optuna.samplers.TPESampler()._get_internal_repr(part, space, study)
        np.testing.assert_array_equal(ours["batch"], theirs["batch"])
    assert reads == ["batch"] and any(t.number == other.number for t in above)
