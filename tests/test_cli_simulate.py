"""`dse simulate` as a user runs it: from `dse place --json`, with the reference, writing files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import polars as pl
from conftest import dse_cmd

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


def test_simulate_a_placement_with_the_reference(tmp_path: Path, clean_env: dict[str, str]) -> None:
    placed = subprocess.run(dse_cmd(*PLACE), capture_output=True, text=True, env=clean_env, timeout=300)
    assert placed.returncode == 0, placed.stderr
    plan = tmp_path / "place.json"
    plan.write_text(placed.stdout)
    out = tmp_path / "sim"
    run = subprocess.run(
        dse_cmd(
            "simulate",
            "--placement",
            str(plan),
            "--des",
            "--horizon",
            "600",
            "--warmup",
            "120",
            "--lengths",
            "0.9:300,0.1:2300",
            "--out",
            str(out),
        ),
        capture_output=True,
        text=True,
        env=clean_env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "discrete-event" in run.stdout and "stable: yes" in run.stdout
    df = pl.read_parquet(out / "trajectories.parquet")
    assert set(df["simulator"].unique()) == {"fluid", "des"}
    assert df.filter(pl.col("simulator") == "fluid")["t_s"].max() >= 599.0
    summary = json.loads((out / "summary.json").read_text())
    fluid, des = summary["fluid"], summary["des"]
    assert abs(fluid["requests_per_s"] - des["requests_per_s"]) / des["requests_per_s"] < 0.05
    assert fluid["stable"] is True
    assert (out / "trajectories.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_bad_input_exits_2_and_writes_nothing(tmp_path: Path, clean_env: dict[str, str]) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"request": {}, "best": None}))
    cases = {
        ("--placement", str(tmp_path / "missing.json")): "cannot be read",
        ("--placement", str(empty)): "best: holds no feasible design to simulate",
        ("--hardware", "b200", "--rate", "5"): "--ttft: is required without --placement",
    }
    for flags, message in cases.items():
        out = tmp_path / "never"
        run = subprocess.run(
            dse_cmd("simulate", *flags, "--out", str(out)),
            capture_output=True,
            text=True,
            env=clean_env,
            timeout=120,
        )
        assert run.returncode == 2, (flags, run.stderr)
        assert message in run.stderr and run.stderr.count("\n") == 1
        assert not out.exists()


def test_simulate_refuses_a_step_longer_than_the_horizon(tmp_path: Path, clean_env: dict[str, str]) -> None:
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
        run = subprocess.run(
            dse_cmd(*base, *flags), capture_output=True, text=True, env=clean_env, timeout=300
        )
        assert run.returncode == 2 and message in run.stderr, (flags, run.stderr)
