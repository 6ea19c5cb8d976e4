"""`dse place` as a user runs it: table, JSON, an infeasible answer, bad flags."""

from __future__ import annotations

import json
import subprocess

from conftest import dse_cmd

BASE = [
    "place",
    "--hardware",
    "b200,h200,gb200",
    "--rate",
    "20",
    "--isl",
    "4000",
    "--osl",
    "1000",
    "--ttft",
    "2",
    "--tpot",
    "0.05",
]


def run(env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(dse_cmd(*BASE, *extra), capture_output=True, text=True, env=env, timeout=300)


def test_place_prints_pools_tiers_and_shadow_prices(clean_env: dict[str, str]) -> None:
    out = run(
        clean_env,
        "--returning-share",
        "0.5",
        "--prefix",
        "20000",
        "--suffix",
        "500",
        "--think",
        "0.6:30,0.4:600",
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for needle in ("best: ", "role", "KV class", "think30s", "shadow prices", "hbm_bandwidth", "rows hold"):
        assert needle in text, needle


def test_place_json_round_trips(clean_env: dict[str, str]) -> None:
    out = run(clean_env, "--topology", "disaggregated", "--json", "--no-shadow-prices")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema_version"] == 1 and doc["best_topology"] == "disaggregated"
    best = doc["best"]
    assert best["check"]["violations"] == []
    roles = {p["unit"]["role"] for p in best["pools"]}
    assert roles == {"prefill", "decode"}
    assert best["usd_per_hour"] > 0 and best["result"]["termination"] == "optimal"


def test_infeasible_placement_is_an_answer_with_exit_3(clean_env: dict[str, str]) -> None:
    out = run(clean_env, "--topology", "disaggregated", "--power-kw", "10")
    assert out.returncode == 3
    assert out.stderr.strip().count("\n") == 0
    assert out.stderr.startswith("dse: error: no feasible design: power: serving the demand needs ")
    assert "infeasible" in out.stdout


def test_bad_flags_exit_2_with_one_line(clean_env: dict[str, str]) -> None:
    cases = {
        (
            "--think",
            "0.5",
            "--returning-share",
            "0.5",
            "--prefix",
            "100",
        ): "--think = '0.5': must be SHARE:SECONDS",
        (
            "--returning-share",
            "0.5",
            "--prefix",
            "100",
            "--think",
            "0.5:10",
        ): "think = 0.5: shares must sum to 1",
        ("--objective", "goodput"): "--budget: is required by --objective goodput",
        ("--inventory", "b200=many"): "--inventory = 'b200=many': must be HW=GPUS",
    }
    for flags, message in cases.items():
        out = run(clean_env, *flags)
        assert out.returncode == 2, (flags, out.stderr)
        assert message in out.stderr, (flags, out.stderr)
        assert out.stderr.strip().count("\n") == 0
    out = subprocess.run(
        dse_cmd("place", "--hardware", "b201", "--rate", "1", "--ttft", "1", "--tpot", "0.1"),
        capture_output=True,
        text=True,
        env=clean_env,
        timeout=60,
    )
    assert out.returncode == 2 and "unknown hardware id" in out.stderr
