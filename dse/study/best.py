"""The best design of a study, in full: re-evaluated placement, shadow prices, simulator verdicts
and the time split of each pool's step (for the report)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dse.perf.afd import attention_side, ffn_side
from dse.perf.params import load_params
from dse.perf.pool import build_pool
from dse.perf.serving import prefill_batch_tokens
from dse.perf.stages import forward_cost
from dse.placement.candidates import build_candidates
from dse.placement.explain import shadow_prices
from dse.placement.request import PlacementRequest
from dse.placement.shapes import parse_shape
from dse.study.api import StudyResults
from dse.study.replay import replay
from dse.study.report import BestDesign
from dse.study.runner import TRIAL_SOLVE
from formulations.solve import PlacementSolver


def best_design(res: StudyResults) -> BestDesign | None:
    number = res.best_trial()
    if number is None:
        return None
    catalog, params = res._cat(), load_params()
    trial = next(t for t in res.study.get_trials(deepcopy=False) if t.number == number)
    solver = PlacementSolver(TRIAL_SOLVE)
    rec = replay(res.spec, trial.params, catalog, params, solver)
    req = rec.request
    if rec.outcome is None or rec.outcome.result.solution is None or rec.simulation is None or req is None:
        return None
    cands = build_candidates(req, rec.outcome.topology, catalog, params)
    prices = shadow_prices(req, cands, rec.outcome.result.solution, solver, catalog, params)
    f = rec.simulation.fluid
    sim = {
        "stable": bool(f.stable[0]),
        "oscillating": bool(f.oscillating[0]),
        "oscillation_period_s": float(f.oscillation_period_s[0]),
        "ttft_mean_s": float(f.ttft_mean_s[0]),
        "ttft_p99_s": float(f.ttft_p99_s[0]),
        "tpot_mean_s": float(f.tpot_mean_s[0]),
        "e2e_mean_s": float(f.e2e_mean_s[0]),
        "near_capacity": bool(f.near_capacity[0]),
    }
    return BestDesign(
        trial=number,
        pools=rec.pools,
        metrics=dict(rec.metrics),
        shadow_prices=[
            {
                "hardware": p.hardware,
                "resource": p.resource,
                "unit": p.unit,
                "usd_per_hour": p.usd_per_hour,
                "usd_per_gpu_hour": p.usd_per_gpu_hour,
            }
            for p in prices
        ],
        sim=sim,
        stage_ms=_stage_ms(req, rec.pools, catalog, params),
    )


def _stage_ms(
    req: PlacementRequest, pools: list[dict[str, Any]], catalog: Any, params: Any
) -> dict[str, dict[str, float]]:
    """One step of each pool at its operating point: decode pools at their batch, prefill pools
    on one full forward (:func:`~dse.perf.serving.prefill_batch_tokens`), split into GEMMs,
    attention, communication and fixed overhead. Attention and FFN pools run their half of the
    model; an aggregated pool's step is shown without the prefill chunks interleaved with it. The
    model and traffic are the request's (a grid point's)."""
    model = catalog.model(req.model)
    engine = params.engine(req.engine)
    w = req.workload
    chunk_tokens = req.options.prefill_chunk_tokens
    out: dict[str, dict[str, float]] = {}
    for p in pools:
        par = parse_shape(p["shape"])
        pool = build_pool(
            model,
            [catalog.hardware(p["hardware"])],
            gpus=[par.gpus],
            attn_tp=[par.attn_tp],
            ep=[par.ep],
            weight_precision=[req.weight_precision],
            kv_precision=[engine.kv_precision],
        )
        if p["role"] == "prefill":
            tokens = prefill_batch_tokens(
                pool, w.input_tokens, chunk_tokens, engine.prefill_chunk_per_instance
            )
            cost = forward_cost(
                pool,
                params,
                tokens=tokens,
                sequences=tokens / w.input_tokens,
                context=np.array([w.input_tokens]),
                prefill=True,
                speed=np.array([engine.speed]),
            )
        else:
            b = np.array([max(float(p["decode_batch"]), 1.0)])
            half = {"attention": attention_side, "ffn": ffn_side}.get(p["role"])
            cost = forward_cost(
                half(pool) if half is not None else pool,
                params,
                tokens=b,
                sequences=b,
                context=np.array([w.mean_prompt_tokens() + 0.5 * w.output_tokens]),
                prefill=False,
                speed=np.array([engine.speed]),
            )
        out[f"{p['role']} {p['hardware']} {p['shape']}"] = {
            "gemm": 1e3 * float(cost.gemm_s[0]),
            "attention": 1e3 * float(cost.attention_s[0]),
            "communication": 1e3 * float(cost.comm_s[0]),
            "overhead": 1e3 * float(cost.overhead_s[0]),
        }
    return out
