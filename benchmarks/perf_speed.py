"""Deployment predictions per second on one core, evaluated in one vectorised call.

Prints figures, not verdicts, for both kernel tiers (datasheet roofline, and measured kernel tables
where they cover the GPU: their curves are built once per distinct GPU, engine and shape, inside
"build arrays"). Run: ``python benchmarks/perf_speed.py [N]``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

import numpy as np
from record import figure

from dse.catalog import load_catalog
from dse.perf.params import load_params
from dse.perf.pool import build_pool
from dse.perf.serving import Deployment, closed_loop, decode_capacity_at_tpot
from dse.units import Precision


def main(n: int = 100_000) -> None:
    """Both kernel tiers in one run (the machine is noisy: compare their ratio)."""
    for kernels in ("datasheet", "measured"):
        print(f"--- {kernels} kernels")
        run(n, kernels)


def run(n: int, kernels: str) -> None:
    catalog = load_catalog()
    params = replace(load_params(), kernels=kernels)
    rng = np.random.default_rng(0)
    names = ["h100", "h200", "b200", "b300", "gb200", "gb300", "mi355x"]
    hws = [catalog.hardware(names[i]) for i in rng.integers(0, len(names), n)]
    gpus = rng.choice([8.0, 16.0, 32.0, 72.0], n)
    attn_tp = np.where(rng.random(n) < 0.5, 1.0, np.minimum(8.0, gpus))
    prec = [Precision.FP8] * n
    t0 = time.perf_counter()
    pool = build_pool(
        catalog.model("deepseek-v3"),
        hws,
        gpus=gpus,
        attn_tp=attn_tp,
        ep=gpus,
        weight_precision=prec,
        kv_precision=prec,
        engines=params.kernel_engines(list(rng.choice(["trt", "sglang"], n))),
    )
    build_s = time.perf_counter() - t0
    dep = Deployment(
        prefill=None,
        decode=pool,
        prefill_instances=np.ones(n),
        decode_instances=np.ones(n),
        isl=rng.choice([1024.0, 8192.0], n),
        osl=np.full(n, 1024.0),
        speed=np.ones(n),
        draft_tokens=np.zeros(n),
        accept_tokens=np.ones(n),
    )
    conc = rng.choice([1.0, 16.0, 256.0, 2048.0], n)
    t0 = time.perf_counter()
    res = closed_loop(dep, params, conc)
    solve_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    decode_capacity_at_tpot(
        pool,
        params,
        context=dep.isl + 512.0,
        tpot_s=np.full(n, 0.03),
        speed=np.ones(n),
        draft_tokens=np.zeros(n),
        accept_tokens=np.ones(n),
    )
    cap_s = time.perf_counter() - t0
    ok = np.isfinite(res.tput_per_gpu).mean()
    print(f"candidates: {n:,} ({ok:.0%} fit in memory)")
    print(f"build arrays from catalog entries: {build_s:.2f} s ({n / build_s:,.0f} per s)")
    print(f"closed-loop predictions (40-step solve): {solve_s:.2f} s ({n / solve_s:,.0f} per s)")
    print(f"decode capacity at a TPOT target: {cap_s:.2f} s ({n / cap_s:,.0f} per s)")
    tier = "" if kernels == "datasheet" else f", {kernels} kernels"
    figure(f"closed-loop predictions per second{tier}", n / solve_s, "1/s", f"{n:,} deployments in one call")
    figure(f"decode capacity at a TPOT target per second{tier}", n / cap_s, "1/s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
