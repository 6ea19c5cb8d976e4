"""Latency-distribution predictions per second on one core: one deployment simulated request by
request (``dse.perf.latency``) over a 2,000-request window, with and without building its tables;
and the engine-level check a study trial runs on a placed design.

Prints figures, not verdicts. Run: ``python benchmarks/latency_speed.py [N]``.
"""

from __future__ import annotations

import sys
import time

from record import figure

from dse.catalog import load_catalog
from dse.perf.benchmark_rows import deployment_of, parse_row
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


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
