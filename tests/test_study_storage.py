"""The fast paths a study takes around Optuna: finished trials written in one transaction, and
TPE's log Phi(x) computed by scipy. Each must give what Optuna's own code gives."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import optuna
import pytest
import scipy.special
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers._tpe import _truncnorm
from optuna.trial import TrialState, create_trial

import dse.study.samplers  # noqa: F401 - installs scipy's log_ndtr into Optuna's TPE
from dse.study.storage import open_storage, write_finished

DISTS = {
    "topology": CategoricalDistribution(("aggregated", "disaggregated")),
    "batch": IntDistribution(1, 4096, log=True),
    "share": FloatDistribution(0.1, 0.5),
}


def _trials() -> list[optuna.trial.FrozenTrial]:
    start = datetime(2026, 11, 30, 1, 2, 3, 456789)
    made = [
        create_trial(
            state=TrialState.COMPLETE,
            values=[0.125, 3e5],
            params={"topology": "disaggregated", "batch": 405, "share": 0.3},
            distributions=DISTS,
            user_attrs={"record": {"metrics": {"gpus": 16.0, "ttft_s": None}, "pools": [{"role": "decode"}]}},
            system_attrs={"constraints": [0.0, -1.5]},
        ),
        create_trial(  # a trial without a design: the worst values, infinite
            state=TrialState.COMPLETE,
            values=[math.inf, -math.inf],
            params={"topology": "aggregated", "batch": 1, "share": 0.1},
            distributions=DISTS,
            user_attrs={"record": {"binding": "placement: no unit fits"}},
        ),
        create_trial(
            state=TrialState.FAIL,
            params={"topology": "aggregated"},
            distributions={"topology": DISTS["topology"]},
        ),
    ]
    for i, t in enumerate(made):
        t.datetime_start = start + timedelta(seconds=i)
        t.datetime_complete = start + timedelta(seconds=i, milliseconds=20)
    return made


def _stored(url: str, write) -> list[optuna.trial.FrozenTrial]:  # type: ignore[no-untyped-def]
    study = optuna.create_study(
        storage=open_storage(url), study_name="s", directions=["minimize", "maximize"]
    )
    for t in _trials():
        write(study, t)
    return optuna.load_study(study_name="s", storage=url).get_trials(deepcopy=False)


def test_a_trial_written_in_one_transaction_reads_back_as_optuna_writes_it(tmp_path: Path) -> None:
    ours = _stored(f"sqlite:///{tmp_path / 'ours.db'}", write_finished)
    theirs = _stored(f"sqlite:///{tmp_path / 'theirs.db'}", lambda s, t: s.add_trial(t))
    assert [t.number for t in ours] == [0, 1, 2]
    fields = (
        "number state values params distributions user_attrs system_attrs "
        "intermediate_values datetime_start datetime_complete"
    ).split()
    for a, b in zip(ours, theirs, strict=True):
        for f in fields:
            assert getattr(a, f) == getattr(b, f), f
    assert ours[1].values == [math.inf, -math.inf]


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    study = optuna.create_study(storage=open_storage(url), study_name="s")
    bad = create_trial(value=1.0, params={"batch": 4}, distributions={"batch": DISTS["batch"]})
    bad.user_attrs["record"] = {"not json": object()}
    with pytest.raises(TypeError):
        write_finished(study, bad)
    assert optuna.load_study(study_name="s", storage=url).get_trials() == []


def test_tpe_log_ndtr_is_scipys_and_agrees_with_optunas_own() -> None:
    assert _truncnorm._log_ndtr is scipy.special.log_ndtr
    x = np.concatenate([np.linspace(-40.0, 40.0, 4001), [-1e3, -20.0001, -19.999, 5.999, 6.001, 1e3]])
    theirs = np.frompyfunc(_truncnorm._log_ndtr_single, 1, 1)(x).astype(float)
    ours = _truncnorm._log_ndtr(x)
    # Optuna's form loses relative precision near x = 6, where log Phi is about -1e-9
    assert np.allclose(ours, theirs, rtol=1e-7, atol=1e-15)
