"""Aggregated or disaggregated: each point placed both ways, with the margin between them.

A grid of 48 points: DeepSeek-V3 and Kimi K2, on H200, B200 and GB200 NVL72, prompts of 2,000 and
16,000 tokens with 800-token answers at 200 requests/s, TPOT 25, 50, 100 and 200 ms, TTFT 5 s
(p90). Each point is placed aggregated (`--topology aggregated`: prefill chunks interleaved with
decode on every instance) and disaggregated; the cheaper wins, and a margin below the model's
median error (14%) is a tie. Prints every point and the counts FINDINGS.md quotes.
Run: ``python benchmarks/agg_vs_disagg.py``.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter

import numpy as np
from record import figure

from dse.catalog import load_catalog
from dse.perf.params import load_params
from dse.placement import PlacementRequest, Topology, place
from dse.workload import Slo, Workload

MODELS = ("deepseek-v3", "kimi-k2")
HARDWARE = ("h200-sxm", "b200", "gb200-nvl72")
PROMPTS = (2000.0, 16000.0)
TPOTS = (0.025, 0.05, 0.1, 0.2)
TIE = 0.14  # the model's median error on throughput


def verdict(agg: float, dis: float) -> str:
    if not np.isfinite(agg) and not np.isfinite(dis):
        return "neither"
    if not np.isfinite(agg):
        return "disaggregated"
    if not np.isfinite(dis):
        return "aggregated"
    margin = abs(agg - dis) / min(agg, dis)
    if margin < TIE:
        return "tie"
    return "aggregated" if agg < dis else "disaggregated"


def cost(req: PlacementRequest, topo: Topology, catalog: object, params: object) -> float:
    from dataclasses import replace

    best = place(replace(req, topology=topo), catalog=catalog, params=params, with_shadow_prices=False).best
    return best.usd_per_hour if best is not None else float("nan")


def main() -> None:
    catalog, params = load_catalog(), load_params()
    t0 = time.perf_counter()
    rows = []
    head = f"{'model':12s} {'hardware':12s} {'prompt':>6s} {'TPOT':>5s}  {'agg $/h':>9s} {'disagg $/h':>10s}"
    print(head + "  verdict")
    for model, hw, isl, tpot in itertools.product(MODELS, HARDWARE, PROMPTS, TPOTS):
        w = Workload(requests_per_s=200.0, input_tokens=isl, output_tokens=800.0)
        req = PlacementRequest(model=model, hardware=(hw,), workload=w, slo=Slo(5.0, tpot, percentile=90.0))
        agg = cost(req, Topology.AGGREGATED, catalog, params)
        dis = cost(req, Topology.DISAGGREGATED, catalog, params)
        v = verdict(agg, dis)
        rows.append((model, hw, isl, tpot, v))
        print(f"{model:12s} {hw:12s} {isl / 1e3:5.0f}k {tpot * 1e3:4.0f}ms  {agg:9,.1f} {dis:10,.1f}  {v}")
    print(f"\n{len(rows)} points ({time.perf_counter() - t0:.0f} s): {dict(Counter(r[4] for r in rows))}")
    for label, idx, values in (("hardware", 1, HARDWARE), ("prompt", 2, PROMPTS), ("TPOT", 3, TPOTS)):
        for v in values:
            c = Counter(r[4] for r in rows if r[idx] == v)
            print(f"  {label} {v:g}: {dict(c)}" if isinstance(v, float) else f"  {label} {v}: {dict(c)}")
    counts = Counter(r[4] for r in rows)
    for k in ("aggregated", "disaggregated", "tie", "neither"):
        figure(f"points won by {k}", counts.get(k, 0), "of", f"{len(rows)} points")


if __name__ == "__main__":
    main()
