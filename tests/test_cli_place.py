"""`dse place` as a user runs it: table, JSON, an infeasible answer, bad flags."""

from __future__ import annotations

import json

from conftest import Cli, Result

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


def run(cli: Cli, *extra: str) -> Result:
    return cli(*BASE, *extra)


def test_place_prints_pools_tiers_and_shadow_prices(cli: Cli) -> None:
    out = run(
        cli,
        "--returning-share",
        "0.5",
        "--prefix",
        "20000",
        "--suffix",
        "500",
        "--think",
        "0.6:30,0.4:600",
    )
    assert out.code == 0, out.err
    text = out.out
    for needle in ("best: ", "role", "KV class", "think30s", "shadow prices", "hbm_bandwidth", "rows hold"):
        assert needle in text, needle


def test_place_json_round_trips(cli: Cli) -> None:
    out = run(cli, "--topology", "disaggregated", "--json", "--no-shadow-prices")
    assert out.code == 0, out.err
    doc = json.loads(out.out)
    assert doc["schema_version"] == 1 and doc["best_topology"] == "disaggregated"
    best = doc["best"]
    assert best["check"]["violations"] == []
    roles = {p["unit"]["role"] for p in best["pools"]}
    assert roles == {"prefill", "decode"}
    assert best["usd_per_hour"] > 0 and best["result"]["termination"] == "optimal"


def test_infeasible_placement_is_an_answer_with_exit_3(cli: Cli) -> None:
    out = run(cli, "--topology", "disaggregated", "--power-kw", "10")
    assert out.code == 3
    assert out.err.strip().count("\n") == 0
    assert out.err.startswith("dse: error: no feasible design: power: serving the demand needs ")
    assert "infeasible" in out.out


def test_bad_flags_exit_2_with_one_line(cli: Cli) -> None:
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
        out = run(cli, *flags)
        assert out.code == 2, (flags, out.err)
        assert message in out.err, (flags, out.err)
        assert out.err.strip().count("\n") == 0
    out = cli("place", "--hardware", "b201", "--rate", "1", "--ttft", "1", "--tpot", "0.1")
    assert out.code == 2 and "unknown hardware id" in out.err
