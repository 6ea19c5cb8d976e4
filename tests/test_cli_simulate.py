"""`dse simulate` as a user runs it: from `dse place --json`, with the reference, writing files."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from conftest import Cli

PLACE = [
    "place",
    "--hardware",
    "b200",
    "--rate",
    "10",
    "--isl",
    "2000",
    "--osl",
    "500",
    "--ttft",
    "2",
    "--tpot",
    "0.05",
    "--topology",
    "disaggregated",
    "--json",
    "--no-shadow-prices",
]


def test_simulate_a_placement_with_the_reference(tmp_path: Path, cli: Cli) -> None:
    placed = cli(*PLACE)
    assert placed.code == 0, placed.err
    plan = tmp_path / "place.json"
    plan.write_text(placed.out)
    out = tmp_path / "sim"
    run = cli(
        "simulate",
        "--placement",
        plan,
        "--des",
        "--horizon",
        "600",
        "--warmup",
        "120",
        "--lengths",
        "0.9:300,0.1:2300",
        "--out",
        out,
    )
    assert run.code == 0, run.err
    assert "discrete-event" in run.out and "stable: yes" in run.out
    df = pl.read_parquet(out / "trajectories.parquet")
    assert set(df["simulator"].unique()) == {"fluid", "des"}
    assert df.filter(pl.col("simulator") == "fluid")["t_s"].max() >= 599.0
    summary = json.loads((out / "summary.json").read_text())
    fluid, des = summary["fluid"], summary["des"]
    assert abs(fluid["requests_per_s"] - des["requests_per_s"]) / des["requests_per_s"] < 0.05
    assert fluid["stable"] is True
    assert (out / "trajectories.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_bad_input_exits_2_and_writes_nothing(tmp_path: Path, cli: Cli) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"request": {}, "best": None}))
    cases = {
        ("--placement", str(tmp_path / "missing.json")): "cannot be read",
        ("--placement", str(empty)): "best: holds no feasible design to simulate",
        ("--hardware", "b200", "--rate", "5"): "--ttft: is required without --placement",
    }
    for flags, message in cases.items():
        out = tmp_path / "never"
        run = cli("simulate", *flags, "--out", out)
        assert run.code == 2, (flags, run.err)
        assert message in run.err and run.err.count("\n") == 1
        assert not out.exists()


def test_simulate_refuses_a_step_longer_than_the_horizon(tmp_path: Path, cli: Cli) -> None:
    trace = tmp_path / "empty.csv"
    trace.write_text("t_s,rate_per_s\n")
    base = [
        "simulate",
        "--hardware",
        "b200",
        "--rate",
        "5",
        "--ttft",
        "2",
        "--tpot",
        "0.05",
        "--topology",
        "disaggregated",
    ]
    cases = {
        ("--dt", "5000", "--horizon", "600"): "--dt = 5000.0: must not exceed --horizon",
        ("--arrivals", "trace", "--trace", str(trace)): "t_s: needs at least one row",
        ("--buffer", "-1"): "--buffer = -1.0: must be positive",
    }
    for flags, message in cases.items():
        run = cli(*base, *flags)
        assert run.code == 2 and message in run.err, (flags, run.err)
