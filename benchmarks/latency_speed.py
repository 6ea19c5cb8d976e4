"""Latency-distribution predictions per second on one core: one deployment simulated request by
request (``dse.perf.latency``) over a 2,000-request window, with and without building its tables;
and what the calibration's latency fit spends most of its time on: one replay of every measured
run as its benchmark ran it, and the grid search of the two offsets over those replays.

Prints figures, not verdicts. Run: ``python benchmarks/latency_speed.py [N]``.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from record import figure

from dse.calibration.fit import read_measured
from dse.calibration.latency import fit_offsets, measured_latency
from dse.catalog import load_catalog
from dse.paths import MEASURED_RUNS
from dse.perf.benchmark_rows import deployment_of, latency_of, parse_row
from dse.perf.latency import simulate_latency
from dse.perf.latency_inputs import Lengths, Load
from dse.perf.latency_tables import tables_of
from dse.perf.params import load_params

ROW = {
    "hardware": "b200", "framework": "sglang", "model": "deepseek-v3", "precision": "fp8",
    "spec_method": "mtp", "disagg": "False", "isl": "1024", "osl": "1024", "conc": "64",
    "prefill_tp": "8", "prefill_ep": "8", "prefill_dp_attention": "False", "prefill_num_workers": "1",
    "num_prefill_gpu": "8", "decode_tp": "8", "decode_ep": "8", "decode_dp_attention": "False",
    "decode_num_workers": "1", "num_decode_gpu": "8",
}  # fmt: skip


def main(n: int = 300) -> None:
    catalog, params = load_catalog(), load_params()
    row = parse_row(ROW, catalog)
    lengths = Lengths(1024, 1024)
    dep = deployment_of([row], catalog, params)
    tables = tables_of(dep, params, ["sglang"], [lengths])[0]
    for name, load in (
        ("closed 64", Load("closed", concurrency=64)),
        ("poisson 4/s", Load("poisson", rate=4.0)),
    ):
        simulate_latency(tables, load, lengths, requests=2000)  # compiled (or loaded from the cache)
        t0 = time.perf_counter()
        for seed in range(n):
            simulate_latency(tables, load, lengths, requests=2000, seed=seed)
        sim_only = n / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for seed in range(n):
            t = tables_of(dep, params, ["sglang"], [lengths])[0]
            simulate_latency(t, load, lengths, requests=2000, seed=seed)
        with_tables = n / (time.perf_counter() - t0)
        print(
            f"{name}: {sim_only:,.0f} distributions/s (2,000 requests each), "
            f"{with_tables:,.0f}/s with the tables built"
        )
        figure(f"{name.split()[0]}_distributions_per_s", sim_only, "1/s", "2,000-request window")
        figure(f"{name.split()[0]}_with_tables_per_s", with_tables, "1/s", "2,000-request window")


def calibration_replays(rounds: int = 5) -> None:
    """One replay of every measured run (``latency_of``, as ``dse calibrate`` replays each under
    every set of step costs), and the offset fit over their TTFT medians and p99s."""
    catalog = load_catalog(use_env=False)
    params = load_params()
    data, _ = read_measured(MEASURED_RUNS, catalog)
    latency_of(data[0].row, catalog, params)  # compiled (or loaded from the cache)
    t0 = time.perf_counter()
    summaries = [latency_of(m.row, catalog, params).summary() for m in data]
    replay_s = time.perf_counter() - t0
    ttft = np.array([[s["ttft_p50_s"], s["ttft_p99_s"]] for s in summaries])
    meas = measured_latency(data)
    disagg = np.array([m.row.disagg for m in data])
    t0 = time.perf_counter()
    for _ in range(rounds):
        fit_offsets(ttft, meas, disagg)
    fit_ms = (time.perf_counter() - t0) / rounds * 1e3
    print(f"one replay of the {len(data)} measured runs: {replay_s:.2f} s; the offset fit: {fit_ms:.1f} ms")
    figure("one replay of the measured runs", replay_s, "s", f"{len(data)} runs")
    figure("the latency fit's offset grid search", fit_ms, "ms", "121 x 121 pairs")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
    calibration_replays()
