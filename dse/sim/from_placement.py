"""A simulator pipeline from a placement (``dse place --json`` or a :class:`PlacementReport`).

Prefill pools become one pool of servers: an instance that batches ``m`` prompts per forward is
``m`` servers, each taking the batch time, so one request's prefill lasts a batch (as it does on
the GPU) and the pool's throughput is the mix of fresh prompts and midfills the MILP routed to it.
Returning turns first pass a reload stage (one session at a time per prefill instance, at the mean
reload time of the tiers the MILP chose); every request passes a KV handoff stage. Decode pools
become instances of the pool with the most instances, counted by capacity (a pool of another
shape counts as the instances of equal tokens/s). The step table is the stage performance model's
time per output token of that decode unit at every batch up to its operating point, which the
engine uses as its batch cap. Aggregated units give a prefill
server at their prefill time share and a decode instance whose steps stretch by ``1 / (1 - phi)``;
attention-FFN units give decode instances paced by twice the attention half's step (each side
has half the TPOT).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dse.catalog import Catalog
from dse.errors import InputError
from dse.perf.afd import attention_side
from dse.perf.params import PerfParams
from dse.perf.pool import build_pool
from dse.perf.serving import decode_tpot
from dse.sim.kv_tiers import RestingClass
from dse.sim.scenario import Pipeline
from dse.typed_data import build
from dse.units import GB, Precision
from dse.workload import Slo, Workload

SOURCE = "placement"


def _need(d: dict[str, Any], key: str, where: str, source: str = SOURCE) -> Any:
    if not isinstance(d, dict) or key not in d or d[key] is None:
        raise InputError(source, f"{where}{key}", "is required (write it with `dse place --json`)")
    return d[key]


def _number(value: Any, key: str, source: str, *, positive: bool) -> float:
    """A finite number (> 0 when ``positive``, else >= 0), or bad input naming ``key``."""
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(source, key, "must be a number", value) from None
    if not np.isfinite(x) or x < 0 or (positive and x == 0):
        raise InputError(
            source, key, "must be a finite number > 0" if positive else "must be finite and >= 0", value
        )
    return x


def _check_pool(p: Any, i: int, source: str) -> None:
    """The numbers of ``best.pools[i]`` the pipeline divides by or multiplies with."""
    where = f"best.pools[{i}]"
    if not isinstance(p, dict) or not isinstance(p.get("unit"), dict):
        raise InputError(source, where, "must be a pool with a unit (write it with `dse place --json`)")
    unit = _need(p, "unit", f"{where}.", source)
    par = _need(unit, "parallel", f"{where}.unit.", source)
    _number(_need(p, "instances", f"{where}.", source), f"{where}.instances", source, positive=True)
    for k in ("gpus", "attn_tp", "ep"):
        _number(
            _need(par, k, f"{where}.unit.parallel.", source),
            f"{where}.unit.parallel.{k}",
            source,
            positive=True,
        )
    role = _need(unit, "role", f"{where}.unit.", source)
    if role in ("decode", "mixed", "attention"):
        _number(_need(p, "output_tokens_per_s", f"{where}.", source), f"{where}.output_tokens_per_s", source,
                positive=True)  # fmt: skip
    for k in (
        "prefill_busy_s",
        "fresh_busy_s",
        "midfill_busy_s",
        "reload_s",
        "requests_per_s",
        "returning_per_s",
    ):
        if p.get(k) is not None and not (isinstance(p[k], float) and np.isnan(p[k])):
            _number(p[k], f"{where}.{k}", source, positive=False)
    if unit.get("prefill_share") is not None:
        share = _number(unit["prefill_share"], f"{where}.unit.prefill_share", source, positive=False)
        if share > 1:
            raise InputError(source, f"{where}.unit.prefill_share", "must be between 0 and 1", share)


def resting_classes(doc: dict[str, Any]) -> tuple[RestingClass, ...]:
    """The tier plan of the best design in ``doc`` as resting-KV classes."""
    best = doc.get("best") or {}
    total = float(doc["request"]["workload"]["requests_per_s"])
    return tuple(
        RestingClass(
            share_of_arrivals=float(t["returning_per_s"]) / total,
            dwell_s=float(t["dwell_s"]),
            gb=float(t["gb_per_session"]),
            tiers={k: float(v) for k, v in t["share"].items()},
        )
        for t in best.get("tiers", [])
    )


def pipeline_from_placement(
    doc: dict[str, Any],
    catalog: Catalog,
    params: PerfParams,
    *,
    buffer_max: float = np.inf,
    source: str = SOURCE,
) -> tuple[Pipeline, Workload, Slo, float]:
    """(pipeline, workload, targets, KV GB per decoding sequence) of the best design in ``doc``."""
    try:
        return _build(doc, catalog, params, buffer_max, source)
    except KeyError as exc:
        raise InputError(
            source, f"best.pools: {exc.args[0]}", "is required (write it with `dse place --json`)"
        ) from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise InputError(
            source, "best", f"is not a placement written by `dse place --json` ({exc})"
        ) from None


def _build(
    doc: dict[str, Any], catalog: Catalog, params: PerfParams, buffer_max: float, source: str
) -> tuple[Pipeline, Workload, Slo, float]:
    req = _need(doc, "request", "", source)
    best = doc.get("best")
    if not best:
        raise InputError(source, "best", "holds no feasible design to simulate")
    workload = build(
        Workload, _need(req, "workload", "request.", source), source=source, prefix="request.workload."
    )
    slo = build(Slo, _need(req, "slo", "request.", source), source=source, prefix="request.slo.")
    model = catalog.model(_need(req, "model", "request.", source))
    engine = params.engine(req.get("engine", "trt"))
    wp = Precision(req.get("weight_precision", "fp8"))
    mtp = bool(req.get("mtp", False))
    draft = float(engine.mtp_draft_tokens if mtp else 0)
    accept = engine.mtp_accept_tokens if mtp else 1.0
    pools = _need(best, "pools", "best.", source)
    ctx = workload.mean_prompt_tokens() + 0.5 * workload.output_tokens

    servers = rate = instances = 0.0
    fresh_w = mid_w = reload_w = fresh_n = mid_n = 0.0
    decoders: list[tuple[dict[str, Any], float]] = []
    for i, p in enumerate(pools):
        _check_pool(p, i, source)
        unit = p["unit"]
        role, x = unit["role"], float(p["instances"])
        phi = float(unit.get("prefill_share") or 0.0)
        busy = p.get("prefill_busy_s")
        if role in ("prefill", "mixed") and busy:
            stretch = 1.0 / phi if role == "mixed" else 1.0  # an aggregated unit prefills phi of the time
            m = max(1.0, round(float(unit.get("prefill_batch_requests") or 1.0)))
            servers += x * m
            instances += x
            rate += x / (float(busy) * stretch)
            # weights: the requests/s this pool serves of each kind
            ret = float(p.get("returning_per_s") or 0.0)
            fresh = float(p.get("requests_per_s") or 0.0) - ret
            if fresh > 0 and p.get("fresh_busy_s"):
                fresh_w += fresh * float(p["fresh_busy_s"]) * stretch * m
                fresh_n += fresh
            if ret > 0 and p.get("midfill_busy_s"):
                mid_w += ret * float(p["midfill_busy_s"]) * stretch * m
                reload_w += ret * float(p.get("reload_s") or 0.0)
                mid_n += ret
        if role in ("decode", "mixed", "attention"):
            if not unit.get("decode_batch"):
                raise InputError(
                    source, f"best.pools[{i}].unit.decode_batch", "must be positive for a decode pool"
                )
            decoders.append((p, phi))
    if servers <= 0 or not decoders:
        raise InputError(source, "best.pools", "needs a prefill-capable and a decode-capable pool")
    main, phi = max(decoders, key=lambda d: d[0]["instances"])
    unit = main["unit"]
    hw = catalog.hardware(unit["hardware"])
    par = unit["parallel"]
    slots = int(max(1, np.floor(unit["decode_batch"])))
    # the step time at up to 257 batches, interpolated to every batch up to the cap
    n = np.unique(np.round(np.linspace(0.0, slots, min(slots + 1, 257))))
    k = len(n)
    pool = build_pool(
        model,
        [hw] * k,
        gpus=[par["gpus"]] * k,
        attn_tp=[par["attn_tp"]] * k,
        ep=[par["ep"]] * k,
        weight_precision=[wp] * k,
        kv_precision=[engine.kv_precision] * k,
    )
    afd = unit["role"] == "attention"
    step_pool = attention_side(pool) if afd else pool
    tpot = decode_tpot(
        step_pool,
        params,
        batch=np.maximum(n, 1e-9),
        context=np.full_like(n, ctx),
        speed=np.full_like(n, engine.speed),
        draft_tokens=np.full_like(n, draft),
        accept_tokens=np.full_like(n, accept),
    )
    tpot = np.interp(np.arange(slots + 1, dtype=float), n, tpot)
    if afd:
        tpot = 2.0 * tpot
    if unit["role"] == "mixed":
        tpot = tpot / (1.0 - phi)
    # other decode pools count as instances of the main one with the same tokens/s
    per_main = float(main["output_tokens_per_s"]) / float(main["instances"])
    decode_x = sum(float(p["output_tokens_per_s"]) for p, _ in decoders) / per_main
    handoff = (
        0.0
        if unit["role"] == "mixed"
        else _handoff_s(workload, prefill_pool(pools, catalog, model, wp, engine), params)
    )
    kv_gb = (ctx * float(pool.kv_bytes_per_token[0]) + float(pool.state_bytes[0])) / GB
    # one request's prefill lasts a batch on a server; the servers' mix reproduces the pool's rate
    mean_busy = servers / rate
    fresh_s = fresh_w / fresh_n if fresh_n > 0 else mean_busy
    midfill_s = mid_w / mid_n if mid_n > 0 else mean_busy
    share = workload.returning_share
    mix = (1 - share) * fresh_s + share * midfill_s
    fresh_s, midfill_s = fresh_s * mean_busy / mix, midfill_s * mean_busy / mix  # same total work
    pipe = Pipeline(
        prefill_instances=np.array([servers]),
        prefill_s=np.array([fresh_s]),
        handoff_s=np.array([handoff]),
        # whole instances, never fewer than the placement's capacity
        decode_instances=np.array([max(1.0, float(np.ceil(decode_x - 1e-9)))]),
        slots=np.array([float(slots)]),
        step_table=tpot[None, :],
        buffer_max=np.array([buffer_max]),
        label=(f"{best.get('topology', '')}: {unit['name']}",),
        midfill_share=np.array([share]),
        midfill_s=np.array([midfill_s]),
        reload_s=np.array([reload_w / mid_n if mid_n > 0 else 0.0]),
        # each prefill instance brings back one session's KV at a time over all its links, and
        # hands one request's KV to decode at a time over the NICs that hold its shards
        reload_servers=np.array([instances]),
        handoff_servers=np.array([instances if handoff > 0 else np.inf]),
    )
    return pipe, workload, slo, kv_gb


def prefill_pool(
    pools: list[dict[str, Any]], catalog: Catalog, model: Any, wp: Precision, engine: Any
) -> Any:
    """The performance-model pool of the prefill unit with the most instances."""
    pre = max((p for p in pools if p["unit"]["role"] == "prefill"), key=lambda p: p["instances"])
    par = pre["unit"]["parallel"]
    return build_pool(
        model,
        [catalog.hardware(pre["unit"]["hardware"])],
        gpus=[par["gpus"]],
        attn_tp=[par["attn_tp"]],
        ep=[par["ep"]],
        weight_precision=[wp],
        kv_precision=[engine.kv_precision],
    )


def _handoff_s(w: Workload, pool: Any, p: PerfParams) -> float:
    """Seconds to hand one fresh prompt's KV (and fixed state) to decode over the NICs of the
    prefill GPUs that hold its shards."""
    nics = float(pool.nic_bytes_per_s[0]) * p.nic_eff * float(min(pool.gpus[0], pool.kv_shard[0]))
    return float((w.input_tokens * float(pool.kv_bytes_per_token[0]) + float(pool.state_bytes[0])) / nics)
