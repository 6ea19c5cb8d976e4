"""When a separate midfill pool pays: four-stage against attention-FFN placements, same request.

A four-stage placement has every unit of the attention-FFN one plus midfill units (returning turns
only), so it can only cost the same or less; the question is how much less, and where, and against
the best of aggregated, disaggregated and attention-FFN (``--topology auto``). The grid:
DeepSeek-V3 at 100 requests/s of 2,000-token prompts and 800-token answers, TPOT 50 ms, with
returning turns of 2,000 new tokens on a cached prefix; returning share 0.4 / 0.8, prefix 20k /
100k tokens, think times of 5 and 30 minutes (half each), TTFT 1 s / 2 s, on B200, GB200 NVL72 and
H200 alone and on B200 with GB200. Prints each point and the summary; the FINDINGS section on
midfill is read from it. Run: ``python benchmarks/midfill.py``.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import replace

import numpy as np
from record import figure

from dse.catalog import load_catalog
from dse.perf.params import load_params
from dse.placement import PlacementRequest, Topology, place
from dse.workload import Slo, ThinkBin, Workload
from formulations.placement_data import Role

HARDWARE = (("b200",), ("gb200-nvl72",), ("h200-sxm",), ("b200", "gb200-nvl72"))
SHARES = (0.4, 0.8)
PREFIXES = (20_000.0, 100_000.0)
TTFTS = (1.0, 2.0)
TIE = 0.14  # the model's median error on throughput: a smaller difference is a tie


def point(hw: tuple[str, ...], share: float, prefix: float, ttft: float) -> PlacementRequest:
    w = Workload(
        requests_per_s=100.0,
        input_tokens=2000.0,
        output_tokens=800.0,
        returning_share=share,
        cached_prefix_tokens=prefix,
        suffix_tokens=2000.0,
        think=(ThinkBin(0.5, 300.0), ThinkBin(0.5, 1800.0)),
    )
    return PlacementRequest(model="deepseek-v3", hardware=hw, workload=w, slo=Slo(ttft_s=ttft, tpot_s=0.05))


def main() -> None:
    catalog, params = load_catalog(), load_params()
    t0 = time.perf_counter()
    rows = []
    print(f"{'hardware':22s} {'share':>5s} {'prefix':>7s} {'TTFT':>4s}  {'afd $/h':>9s} {'4-stage $/h':>11s}"
          f" {'saving':>7s}  {'auto $/h':>9s} {'vs auto':>8s}  midfill pool")  # fmt: skip
    for hw, share, prefix, ttft in itertools.product(HARDWARE, SHARES, PREFIXES, TTFTS):
        costs, mid = {}, "infeasible"
        for topo in (Topology.AUTO, Topology.AFD, Topology.FOUR_STAGE):
            req = replace(point(hw, share, prefix, ttft), topology=topo)
            best = place(req, catalog=catalog, params=params, with_shadow_prices=False).best
            costs[topo] = best.usd_per_hour if best is not None else np.nan
            if topo is Topology.FOUR_STAGE and best is not None:
                pools = [p for p in best.pools if p.unit.role is Role.MIDFILL]
                gpus = sum(p.gpus for p in pools)
                where = ", ".join(sorted({p.unit.hardware for p in pools}))
                mid = f"{where} ({gpus:.0f} of {best.gpus} GPUs)"
                mid = mid if pools else "none"
        saving = 1.0 - costs[Topology.FOUR_STAGE] / costs[Topology.AFD]
        vs_best = 1.0 - costs[Topology.FOUR_STAGE] / costs[Topology.AUTO]
        rows.append((hw, share, prefix, ttft, saving, mid not in ("none", "infeasible"), vs_best))
        print(f"{'+'.join(hw):22s} {share:5.1f} {prefix / 1e3:6.0f}k {ttft:4.0f}  {costs[Topology.AFD]:9,.1f}"
              f" {costs[Topology.FOUR_STAGE]:11,.1f} {saving:7.1%}  {costs[Topology.AUTO]:9,.1f}"
              f" {vs_best:8.1%}  {mid}")  # fmt: skip
    savings = np.array([r[4] for r in rows])
    vs_auto = np.array([r[6] for r in rows])
    used = sum(r[5] for r in rows)
    feasible = int(np.isfinite(savings).sum())
    print(
        f"\n{len(rows)} points, {feasible} with a feasible four-stage design: a midfill pool opened at "
        f"{used}; saving median {np.nanmedian(savings):.1%}, "
        f"largest {np.nanmax(savings):.1%}; beyond the model's {TIE:.0%} error at "
        f"{int((savings > TIE).sum())} points; against the best of aggregated, disaggregated and afd "
        f"(auto) median {np.nanmedian(vs_auto):.1%}, beyond the error at {int((vs_auto > TIE).sum())} "
        f"({time.perf_counter() - t0:.0f} s)"
    )
    for label, keep in (
        ("returning share 0.8", [r[1] == 0.8 for r in rows]),
        ("returning share 0.4", [r[1] == 0.4 for r in rows]),
        ("prefix 100k", [r[2] == 100_000.0 for r in rows]),
        ("prefix 20k", [r[2] == 20_000.0 for r in rows]),
        ("TTFT 1 s", [r[3] == 1.0 for r in rows]),
        ("TTFT 2 s", [r[3] == 2.0 for r in rows]),
    ):
        k = np.array(keep)
        opened = sum(r[5] for r, y in zip(rows, keep, strict=True) if y)
        print(f"  {label:20s} opened at {opened} of {k.sum()}, median saving {np.nanmedian(savings[k]):.1%}, "
              f"against auto {np.nanmedian(vs_auto[k]):.1%}")  # fmt: skip
    figure("midfill pool opened (points)", used, "of", f"{len(rows)} points")
    figure("midfill saving over afd, median", 100 * float(np.nanmedian(savings)), "%")
    figure("midfill saving over afd, largest", 100 * float(np.nanmax(savings)), "%")


if __name__ == "__main__":
    main()
