"""One step of each pool of a placed design, split by kind, and the power and energy it draws.

What `dse place` prints on its power line and a study records per trial, apart from the
simulators (:mod:`dse.evaluation`), so that a placement reads it without importing them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from dse.context import Context
from dse.perf.afd import attention_side, ffn_side
from dse.perf.params import with_mtp
from dse.perf.pool import build_pool
from dse.perf.power import gpu_power_w, kwh_per_million_tokens, step_busy
from dse.perf.serving import draft_passes, prefill_batch_tokens
from dse.perf.stages import forward_cost
from dse.placement.plan import PoolPlan, TopologyOutcome
from dse.placement.request import PlacementRequest
from formulations.placement_data import Role


def power_metrics(
    req: PlacementRequest,
    outcome: TopologyOutcome,
    stages: dict[str, dict[str, float]],
    ctx: Context,
    served_per_s: float | None = None,
) -> dict[str, float | None]:
    """Power at load and energy per token (:mod:`dse.perf.power`): each pool's GPUs draw by the
    share of the time their kernels run: a decode or aggregated instance steps all the time, its
    kernels the step's share of it (``stages``); a prefill instance's kernels run its busy share
    of each second (none where its pool serves nothing: it idles), and GPUs bought that no pool
    runs on idle (a rack's leftover GPUs had drawn nothing). Where the request prices
    energy, its cost is added to the cost per token. ``served_per_s``: the traffic the design
    serves where its pools were sized for more (a grid's headroom; default the request's): the
    prefill pools' busy shares, the energy and the cost per token are at that traffic."""
    share = 1.0 if served_per_s is None else served_per_s / req.workload.requests_per_s
    tokens_per_s = outcome.tokens_per_s * share
    watts = 0.0
    for p in outcome.pools:
        st = stages[stage_label(p)]
        busy = step_busy(st["gemm"], st["attention"], st["communication"], st["overhead"])
        if p.unit.role.hands_off:  # nan where the pool serves nothing: it idles
            known = p.prefill_busy_s == p.prefill_busy_s
            busy *= min(share * p.requests_per_s * p.prefill_busy_s / p.instances, 1.0) if known else 0.0
        tdp = ctx.catalog.hardware(p.unit.hardware).tdp_w
        watts += p.gpus * float(gpu_power_w(tdp, busy, ctx.params.power))
    for idle in outcome.idle:  # bought with a node or rack, no pool on them: they idle, and draw
        tdp = ctx.catalog.hardware(idle.hardware).tdp_w
        watts += idle.gpus * float(gpu_power_w(tdp, 0.0, ctx.params.power))
    kw = watts * req.energy.pue / 1e3
    energy_usd_hour = kw * req.energy.usd_per_kwh
    out: dict[str, float | None] = {
        "power_kw": kw,
        "kwh_per_million_tokens": _or_none(kwh_per_million_tokens(kw, tokens_per_s)),
        "energy_usd_per_hour": energy_usd_hour,
    }
    if energy_usd_hour > 0 and tokens_per_s > 0:
        total = outcome.usd_per_hour + energy_usd_hour
        out["usd_per_million_tokens"] = total / (3600.0 * tokens_per_s) * 1e6
    return out


def stage_label(p: PoolPlan) -> str:
    """The key of a pool in :func:`stage_split`."""
    return f"{p.unit.role.name.lower()} {p.unit.hardware} {p.unit.parallel.label()}"


def stage_split(
    req: PlacementRequest, pools: Iterable[PoolPlan], ctx: Context
) -> dict[str, dict[str, float]]:
    """One step of each pool at its operating point, in ms: decode pools at their batch, prefill
    pools on one full forward (:func:`~dse.perf.serving.prefill_batch_tokens`), split into GEMMs,
    attention, communication and fixed overhead. Attention and FFN pools run their half of the
    model; an aggregated pool's step is shown without the prefill chunks interleaved with it."""
    model, engine, w = ctx.catalog.model(req.model), ctx.params.engine(req.engine), req.workload
    engine = with_mtp(engine, req.mtp_draft_tokens, req.mtp_accept_rate)
    drafts = float(engine.mtp_draft_tokens if req.mtp else 0)  # a decode step verifies them too
    out: dict[str, dict[str, float]] = {}
    for p in pools:
        par = p.unit.parallel
        pool = build_pool(
            model,
            [ctx.catalog.hardware(p.unit.hardware)],
            gpus=[par.gpus],
            attn_tp=[par.attn_tp],
            ep=[par.ep],
            weight_precision=[req.weight_precision],
            kv_precision=[engine.kv_precision],
            engines=ctx.params.kernel_engines([req.engine]),
        )
        cached = 0.0
        if p.unit.role.hands_off:  # prefill: fresh prompts; midfill: suffixes against their prefix
            midfill = p.unit.role is Role.MIDFILL
            new = max(w.suffix_tokens, 1.0) if midfill else w.input_tokens
            cached = w.cached_prefix_tokens if midfill else 0.0
            tokens = prefill_batch_tokens(
                pool, new, req.options.prefill_chunk_tokens, engine.prefill_chunk_per_instance
            )
            tokens_, seqs, ctx_len, prefill = tokens, tokens / new, np.array([new]), True
            step_pool = pool
        else:
            seqs = np.array([max(float(p.unit.decode_batch), 1.0)])
            tokens_, prefill = seqs * (1.0 + drafts), False
            ctx_len = np.array([w.mean_prompt_tokens() + 0.5 * w.output_tokens])
            half = {Role.ATTENTION: attention_side, Role.FFN: ffn_side}.get(p.unit.role)
            step_pool = half(pool) if half is not None else pool
        cost = forward_cost(
            step_pool, ctx.params, tokens=tokens_, sequences=seqs, context=ctx_len, prefill=prefill,
            speed=np.array([engine.speed]), cached=cached,
        )  # fmt: skip
        if not prefill:  # MTP's draft layers run once per draft token beside the model's (it had
            # left them out, and priced the step's tokens as the batch alone)
            cost = cost.times(draft_passes(pool.model, np.array([drafts])))
        out[stage_label(p)] = {
            "gemm": 1e3 * float(cost.gemm_s[0]),
            "attention": 1e3 * float(cost.attention_s[0]),
            "communication": 1e3 * float(cost.comm_s[0]),
            "overhead": 1e3 * float(cost.overhead_s[0]),
        }
    return out


def _or_none(x: float) -> float | None:
    return None if x is None or math.isnan(x) else float(x)
