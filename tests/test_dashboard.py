"""optuna-dashboard serves a study's storage as written by dse: the embedded SQLite file of a run
folder, and a PostgreSQL server shared by workers."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dse.study import Study

pytestmark = pytest.mark.e2e  # a study run and a dashboard server each

TINY = Path(__file__).resolve().parent / "data" / "tiny-study.toml"

SERVE = (
    "import sys; from optuna_dashboard import run_server; "
    "run_server(sys.argv[1], host='127.0.0.1', port=int(sys.argv[2]))"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.load(r)


def _serve(url: str) -> tuple[subprocess.Popen[str], int]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, url, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"optuna-dashboard exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            _get(port, "/api/studies")
            return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    pytest.fail("optuna-dashboard did not answer within 60 s")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_optuna_dashboard_serves_the_study(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    study = Study.load(TINY)
    name = f"dashboard-{backend}"
    study = replace(study, spec=replace(study.spec, name=name))
    if backend == "postgresql":
        url = str(request.getfixturevalue("postgres_url"))
        res = study.run(trials=6, out=tmp_path, storage=url)
    else:
        res = study.run(trials=6, out=tmp_path)
        url = f"sqlite:///{tmp_path / name / 'study.db'}"
    proc, port = _serve(url)
    try:
        summaries = {s["study_name"]: s for s in _get(port, "/api/studies")["study_summaries"]}
        assert name in summaries
        detail = _get(port, f"/api/studies/{summaries[name]['study_id']}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    trials = sorted(detail["trials"], key=lambda t: t["number"])
    assert [t["number"] for t in trials] == res.trials["trial"].to_list()
    assert all(t["state"] == "Complete" for t in trials)
    assert [t["values"][0] for t in trials] == pytest.approx(
        res.trials["objective_usd_per_million_tokens"].to_list()
    )
    topologies = [next(p for p in t["params"] if p["name"] == "topology") for t in trials]
    assert [p["param_external_value"] for p in topologies] == res.trials["p_topology"].to_list()
    feasible = res.trials.filter(res.trials["feasible"])
    best = feasible.sort("usd_per_million_tokens")["trial"][0]
    assert [t["number"] for t in detail["best_trials"]] == [best]
