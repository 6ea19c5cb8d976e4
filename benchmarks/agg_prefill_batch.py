"""Does the MILP price an aggregated instance's prompts as the engine-level simulation runs them?

An aggregated instance prefills, at each iteration's end, the prompts that arrived during it: at
moderate loads one or two, not a full chunk. The MILP prices each prompt's busy time at that batch
(:func:`dse.placement.candidates.forward_batch`, :meth:`dse.placement.shapes.Shapes.busy_at`);
before 2026-12-05 it priced a full chunk's. For one 8-GPU B200 instance (DeepSeek-V3, attention
DP) under Poisson arrivals at several rates, this prints the share of its time the simulation
spends in prefill, ``1 - step(n) / TPOT`` (``n`` the mean sequences decoding, ``step`` the decode
step the simulation's tables give them; a rate at which requests queue for slots is skipped),
beside the MILP's share at the batch it expects and at a full chunk. Three workloads: the
headline study's (TensorRT-LLM, 40% returning turns on 12,000-token prefixes), and 2,000-token
prompts under SGLang and TensorRT-LLM.
Run: ``python benchmarks/agg_prefill_batch.py``.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import numpy as np
from record import figure

from dse.catalog import load_catalog
from dse.evaluation import design_of
from dse.perf.latency import simulate_latency
from dse.perf.latency_inputs import Lengths, Load
from dse.perf.latency_tables import ENGINE_RULES, tables_of
from dse.perf.params import load_params
from dse.placement import PlacementRequest, Topology, place
from dse.placement.candidates import forward_batch
from dse.placement.request import UnitOptions
from dse.placement.shapes import Shapes
from dse.sim import engine_latency as el
from dse.study import Study
from dse.workload import Slo, Workload

SHAPE = "8gpu-dpa-ep8"
RATES = (4.0, 8.0, 12.0, 14.0)  # requests/s on the one instance


def requests() -> list[tuple[str, PlacementRequest]]:
    headline = Study.load("deepseek-v3-blackwell").spec
    short, slo = Workload(20.0, 2000.0, 800.0), Slo(0.5, 0.1, 90.0)
    opts = UnitOptions(decode_shapes=(SHAPE,), tighter_paces=False)
    agg = Topology.AGGREGATED
    return [
        ("headline, trt", PlacementRequest("deepseek-v3", ("b200",), headline.workload, headline.slo, agg,
                                           engine="trt", options=opts)),
        ("2k prompts, sglang", PlacementRequest("deepseek-v3", ("b200",), short, slo, agg, engine="sglang",
                                                options=opts)),
        ("2k prompts, trt", PlacementRequest("deepseek-v3", ("b200",), short, slo, agg, engine="trt",
                                             options=opts)),
    ]  # fmt: skip


def main() -> None:
    catalog, params = load_catalog(), load_params()
    scale = params.latency.agg_prefill_factor
    errors, before = [], []
    for name, req in requests():
        best = place(req, catalog=catalog, params=params, with_shadow_prices=False).best
        assert best is not None
        design = design_of(req, best)
        dep, _, batch = el._deployments(design, catalog, params, 1.0 + 800.0 * req.slo.tpot_s)[0]
        w = req.workload
        mean = (1.0 + el.LOW_OF_NOMINAL) / 2.0
        lengths = Lengths(w.input_tokens / mean, w.output_tokens / mean, returning_share=w.returning_share,
                          prefix=w.cached_prefix_tokens, suffix=w.suffix_tokens / mean)  # fmt: skip
        tables = tables_of(replace(dep, decode_instances=np.array([1.0])), params, [req.engine], [lengths])[0]
        tables = el.placed_chunk(tables, batch * w.input_tokens) if batch > 0 else tables
        s = Shapes(req, catalog.model(req.model), [catalog.hardware("b200")], params)
        i = [p.label() for p in s.par].index(SHAPE)
        ctx = w.mean_prompt_tokens() + 0.5 * w.output_tokens
        rs, mixed = w.returning_share, ENGINE_RULES[req.engine].mixed
        full = scale * ((1 - rs) * s.fresh.busy_s[i] + rs * s.midfill.busy_s[i])
        for lam in RATES:
            lat = simulate_latency(
                tables, Load("poisson", rate=lam), lengths, requests=3000, seed=0, windows=el.WINDOWS
            )
            if float(np.median(lat.ttft_s[1000:])) > 1.0:  # its slots are full: requests queue
                print(
                    f"{name:20s} {lam:5.1f} req/s: saturated (TTFT p50 {np.median(lat.ttft_s[1000:]):.1f} s)"
                )
                continue
            tpot = float(np.mean(lat.tpot_s[1000:]))
            n = lam * w.output_tokens * tpot
            step = float(
                np.interp(n, tables.dec_n, tables.dec_a) + np.interp(n, tables.dec_n, tables.dec_b) * n * ctx
            )
            prompts, forward = 1.0, 0.0
            for _ in range(4):  # the builder's fixed point at this rate
                prompts = forward_batch(lam, step, forward, mixed)
                forward = scale * float(s.busy_at(i, prompts)[0]) * prompts
            busy = s.busy_at(i, prompts)
            q_sim, q_model = 1.0 - step / tpot, lam * scale * ((1 - rs) * busy[0] + rs * busy[1])
            errors.append(q_model / q_sim - 1.0)
            before.append(lam * full / q_sim - 1.0)
            print(f"{name:20s} {lam:5.1f} req/s: TPOT {1e3 * tpot:5.1f} ms at {n:4.0f} sequences, "
                  f"prefill share simulated {q_sim:.3f}, MILP {q_model:.3f} ({prompts:.2f} prompts a "
                  f"forward), MILP at a full chunk {lam * full:.3f}")  # fmt: skip
    print(f"MILP's prefill share against the simulation's: median {100 * statistics.median(errors):+.0f}% "
          f"({100 * min(errors):+.0f}% to {100 * max(errors):+.0f}%); priced at a full chunk, median "
          f"{100 * statistics.median(before):+.0f}%")  # fmt: skip
    figure("aggregated prefill share, MILP against simulation (median)", 100 * statistics.median(errors), "%")


if __name__ == "__main__":
    main()
