"""Several Optuna worker processes share one study on a real PostgreSQL server."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

pytestmark = pytest.mark.e2e  # worker processes

# One worker: load the study, wait for the go signal so the workers overlap, run n trials.
WORKER = """
import sys, time
from pathlib import Path
import optuna

url, name, go = sys.argv[1], sys.argv[2], Path(sys.argv[5])
n_trials, seed = int(sys.argv[3]), int(sys.argv[4])
optuna.logging.set_verbosity(optuna.logging.WARNING)
storage = optuna.storages.RDBStorage(url)
study = optuna.load_study(
    study_name=name, storage=storage, sampler=optuna.samplers.RandomSampler(seed=seed)
)
deadline = time.monotonic() + 30
while not go.exists():
    if time.monotonic() > deadline:
        sys.exit("no go signal within 30 s")
    time.sleep(0.01)

def objective(trial):
    trial.set_user_attr("worker", seed)
    x = trial.suggest_float("x", -10.0, 10.0)
    y = trial.suggest_int("y", 0, 5)
    return (x - 2.0) ** 2 + y

study.optimize(objective, n_trials=n_trials)
"""

TRIALS_PER_WORKER = (12, 9)


def test_two_worker_processes_share_one_study(postgres_url: str, tmp_path: Path) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    name = f"shared-{uuid.uuid4().hex[:8]}"
    storage = optuna.storages.RDBStorage(postgres_url)
    optuna.create_study(study_name=name, storage=storage, direction="minimize")  # schema made here, once

    go = tmp_path / "go"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, postgres_url, name, str(n), str(seed), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed, n in enumerate(TRIALS_PER_WORKER)
    ]
    time.sleep(0.2)
    go.touch()
    for w in workers:
        out, err = w.communicate(timeout=60)
        assert w.returncode == 0, f"worker failed (exit {w.returncode}):\n{out}\n{err}"

    trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
    total = sum(TRIALS_PER_WORKER)
    assert len(trials) == total
    assert sum(t.state == TrialState.COMPLETE for t in trials) == total
    assert not [t.number for t in trials if t.state == TrialState.RUNNING]
    assert sorted(t.number for t in trials) == list(range(total))
    for seed, n in enumerate(TRIALS_PER_WORKER):
        assert sum(t.user_attrs["worker"] == seed for t in trials) == n
    assert all(t.value == (t.params["x"] - 2.0) ** 2 + t.params["y"] for t in trials)


def test_trials_read_with_one_select_per_table_are_optunas_on_postgresql(postgres_url: str) -> None:
    """The fast read against Optuna's ORM read on PostgreSQL, whose enum columns come back typed."""
    from test_optuna_compat import _every_kind_of_trial, _same_trials

    from dse.study import optuna_compat as compat
    from dse.study.storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(postgres_url)
    assert isinstance(storage, compat.FastReadRDBStorage) and compat.knows_schema(storage)
    name = f"kinds-{uuid.uuid4().hex[:8]}"
    study = _every_kind_of_trial(storage, name)
    sid = storage.get_study_id_from_name(name)
    theirs = optuna.storages.RDBStorage._get_trials(storage, sid, None, set(), -1)
    assert len(theirs) == 10 and _same_trials(compat.read_trials(storage, sid), theirs)
    done = (TrialState.COMPLETE,)
    assert _same_trials(compat.read_trials(storage, sid, done), optuna.storages.RDBStorage._get_trials(
        storage, sid, done, set(), -1))  # fmt: skip
    assert _same_trials(study.get_trials(deepcopy=False), theirs)
