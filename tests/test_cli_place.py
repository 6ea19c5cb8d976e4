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


def test_shapes_restrict_or_widen_the_instances_tried(cli: Cli) -> None:
    """--shapes: only the listed instance shapes, default or not (expert TP inside a TP group:
    8gpu-tp8-ep4 splits each expert 2-way in 4 expert groups), each checked against every
    candidate hardware."""
    flags = ("place", "--model", "deepseek-r1", "--hardware", "h200", "--rate", "2", "--isl", "4000",
             "--osl", "1000", "--ttft", "2", "--tpot", "0.05", "--no-shadow-prices", "--json")  # fmt: skip
    proc = cli(*flags, "--shapes", "8gpu-tp8-ep4")
    assert proc.code == 0, proc.err
    doc = json.loads(proc.out)
    labels = {p["unit"]["name"].split("/")[2] for o in doc["outcomes"] for p in o["pools"]}
    assert labels == {"8gpu-tp8-ep4"}  # the name's third part; an aggregated unit's fourth is its share
    bad = cli(*flags, "--shapes", "8gpu-tp8-ep4,eight-gpus")
    assert bad.code == 2 and "--shapes = 'eight-gpus': must look like 8gpu-tp8-ep8" in bad.err
    wide = cli(*flags, "--shapes", "16gpu-tp16-ep16")
    assert (
        wide.code == 2 and "no candidate hardware can run it: attention TP 16 leaves h200-sxm's" in wide.err
    )
    odd = cli(*flags, "--shapes", "12gpu-tp3-ep12")
    assert odd.code == 2 and "must divide the 12 GPUs and 128 heads" in odd.err


GLM = ["place", "--model", "glm-4.6", "--hardware", "h200", "--rate", "400", "--isl", "2000", "--osl", "800",
       "--tpot", "0.2", "--percentile", "90", "--engine", "trt", "--shapes",
       "8gpu-dpa-ep8,16gpu-dpa-ep16,32gpu-dpa-ep32", "--no-shadow-prices"]  # fmt: skip


def test_confirm_answers_with_the_cheapest_design_the_engine_simulation_holds(cli: Cli) -> None:
    """GLM-4.6 on H200 at 400 requests/s, TTFT 10 s at p90: the MILP's cheapest design is
    aggregated, and its requests queue for decode slots once each goes through the scheduler
    (about 13 s at p90); `--confirm` answers with the disaggregated design, which holds, and says
    why. A TTFT no design holds exits 3 with each one's figure."""
    plain = cli(*GLM, "--ttft", "10", "--json")
    assert plain.code == 0, plain.err
    assert json.loads(plain.out)["best_topology"] == "aggregated"
    text = cli(*GLM, "--ttft", "10", "--confirm")
    assert text.code == 0, text.err
    assert "aggregated: TTFT p90 " in text.out and "against 10 s (misses)" in text.out
    assert "disaggregated: TTFT p90 " in text.out and "best: disaggregated" in text.out
    doc = json.loads(cli(*GLM, "--ttft", "10", "--confirm", "--json").out)
    checks = {c["topology"]: c for c in doc["engine_check"]}
    assert doc["best_topology"] == "disaggregated"
    assert not checks["aggregated"]["holds"] and checks["aggregated"]["ttft_pct_s"] > 10.0
    assert checks["disaggregated"]["holds"] and checks["disaggregated"]["ttft_pct_s"] <= 10.0
    # a target no design holds is an answer: exit 3, each topology's figure on one line
    none = cli(*GLM, "--ttft", "0.2", "--topology", "aggregated", "--confirm")
    assert none.code == 3 and none.err.strip().count("\n") == 0, none.err
    assert none.err.startswith("dse: error: no feasible design: engine-level TTFT: aggregated: TTFT p90 ")
