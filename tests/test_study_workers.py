"""Two `dse worker` processes share one study on a real PostgreSQL server."""

from __future__ import annotations

import subprocess
from pathlib import Path

import optuna
import pytest
from conftest import dse_cmd

pytestmark = pytest.mark.e2e  # worker processes

TINY = Path(__file__).resolve().parent / "data" / "tiny-study.toml"


def test_two_workers_on_postgresql_lose_and_repeat_nothing(
    postgres_url: str, tmp_path: Path, clean_env: dict[str, str]
) -> None:
    budget = 16
    cmd = dse_cmd(
        "worker", str(TINY), "--storage", postgres_url, "--trials", str(budget), "--out", str(tmp_path)
    )
    workers = [
        subprocess.Popen(cmd, env=clean_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [w.communicate(timeout=600) for w in workers]
    for w, (_, err) in zip(workers, outs, strict=True):
        assert w.returncode == 0, err
    ran = [int(out.split("worker: ")[1].split(" trials")[0]) for out, _ in outs]
    assert all(r > 0 for r in ran), ran  # both workers took part
    study = optuna.load_study(study_name="tiny-study", storage=postgres_url)
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state is optuna.trial.TrialState.COMPLETE]
    assert not [t for t in trials if t.state is optuna.trial.TrialState.RUNNING]
    # workers ask for a trial under the storage's lock, only while complete and running ones are
    # fewer than the budget: exactly the budget (docs/reliability.md)
    assert len(complete) == budget
    assert sum(ran) == len(complete)
    numbers = [t.number for t in trials]
    assert sorted(numbers) == list(range(len(trials)))  # none lost, none repeated
    assert all("record" in t.user_attrs for t in complete)
