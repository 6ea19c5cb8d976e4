"""Serving figures of a whole deployment: aggregated or disaggregated pools under a load.

Two load models share the stage costs of :mod:`dse.perf.stages`:

* closed loop at a fixed concurrency (how InferenceX and most benchmarks measure): solved for the
  decode batch that makes Little's law hold, ``C = X (TTFT + osl TPOT)``;
* open loop at an arrival rate (how production traffic arrives), used by the placement model.

Aggregated instances interleave chunked prefill with decode steps, so prefill time stretches the
time per output token. Disaggregated prefill queues in front of its pool (an M/D/1-style wait
``q t rho / (1 - rho)``) and hands its KV to the decode pool over the NIC. Attention-FFN
disaggregated decode splits each step between an attention pool and an expert pool
(:mod:`dse.perf.afd`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dse.perf.afd import SIDE_SHARE, afd_bytes_per_token, afd_in_domain, afd_transfer_s
from dse.perf.params import PerfParams
from dse.perf.pool import Array, ModelTerms, Pool
from dse.perf.stages import (
    AfdSplit,
    PoolTerms,
    StepCost,
    forward_cost,
    kv_capacity_sequences,
    pool_terms,
    weight_bytes_per_gpu,
)

PREFILL_TOKENS_PER_RANK = 8192
"""Tokens one attention-DP rank batches into a prefill forward (SGLang's and TRT-LLM's default
chunk); the instance batches ``attn_dp`` times that."""

RHO_MAX = 0.995


def prefill_batch_tokens(
    pool: Pool, new_tokens: Array | float, chunk_tokens: Array | float, per_instance: Array | bool
) -> Array:
    """Tokens one prefill forward batches: ``chunk_tokens`` on every attention-DP rank, or once
    for the whole instance where the engine's chunk is one budget (``per_instance``: SGLang divides
    ``chunked_prefill_size`` by the DP size), and never less than one prompt."""
    return np.maximum(new_tokens, np.asarray(chunk_tokens) * np.where(per_instance, 1.0, pool.attn_dp))


@dataclass(frozen=True)
class Deployment:
    """Arrays describing one deployment per element."""

    prefill: Pool | None  # None when aggregated
    decode: Pool
    prefill_instances: Array
    decode_instances: Array
    isl: Array  # mean input tokens
    osl: Array  # mean output tokens
    speed: Array  # engine kernel-time multiplier
    draft_tokens: Array  # speculative tokens per step (0 without MTP)
    accept_tokens: Array  # tokens accepted per step (1 without MTP)
    # True where the engine's prefill chunk is one budget for the whole instance (SGLang under
    # DP attention) rather than one per attention-DP rank; None: per rank everywhere
    chunk_per_instance: Array | None = None
    # attention-FFN disaggregated decode: ``decode`` is the attention side
    # (:func:`~dse.perf.afd.attention_side`) and ``ffn`` the expert side
    ffn: Pool | None = None
    ffn_instances: Array | None = None
    # where both pools run on the same hardware, so that a unit of them may share a scale-up
    # domain (:func:`~dse.perf.afd.afd_in_domain`); None: they do (one benchmark row, one
    # ``dse predict``: one hardware)
    ffn_same_hardware: Array | None = None
    # what an attention instance sends over this expert pool's link a step, in its batch's hidden
    # states to this pool, where its tokens are dealt over several (:func:`dealt_over_pools`);
    # None: 1, every token to this one pool
    ffn_sent: Array | None = None
    # where the placement put the unit: in one scale-up domain, over NVLink (True), or across the
    # NICs (False); None: found from the counts (:func:`~dse.perf.afd.afd_in_domain`)
    ffn_in_domain: Array | None = None
    # the engine's cap on sequences one decode instance runs at once (SGLang's
    # ``--max-running-requests``); None: only the KV cache caps it
    max_batch: Array | None = None
    # SGLang's ``--scheduler-recv-interval``: an aggregated instance looks for new requests only
    # every this many decode steps (and after each prefill forward); None: every step
    recv_interval: Array | None = None
    # TensorRT-LLM's ``attention_dp_config`` with ``enable_balance``: an aggregated attention-DP
    # instance holds context requests until every rank has one, at most this many iterations
    # (``timeout_iters``); None or 0: no balancing (its default)
    adp_balance: Array | None = None


@dataclass(frozen=True)
class ServingResult:
    """Figures per element; throughputs in tokens/s, times in seconds, memory in bytes."""

    requests_per_s: Array
    tput_per_gpu: Array
    input_tput_per_prefill_gpu: Array
    output_tput_per_decode_gpu: Array
    intvty_tok_s_user: Array
    tpot_s: Array
    ttft_s: Array
    decode_batch: Array  # sequences per decode instance
    hbm_peak_bytes_per_gpu: Array
    prefill_hbm_bytes_per_gpu: Array
    decode_step_s: Array
    decode_gemm_s: Array
    decode_attention_s: Array
    decode_comm_s: Array
    decode_overhead_s: Array
    prefill_s: Array  # one prompt alone
    prefill_utilization: Array
    regime: Array  # str
    afd: AfdSplit | None = None  # attention-FFN disaggregated: the step by pool (decode_* pace it)


def _prefill_terms(d: Deployment, p: PerfParams, terms: PoolTerms) -> tuple[Array, Array, Array]:
    """(time of one prompt alone, time of a full prefill batch, tokens of that batch);
    ``terms``: the prefill pool's :func:`~dse.perf.stages.pool_terms` under ``p``."""
    pool = terms.pool
    one = forward_cost(
        terms, p, tokens=d.isl, sequences=np.ones_like(d.isl), context=d.isl, prefill=True, speed=d.speed
    ).total_s
    per_instance = False if d.chunk_per_instance is None else d.chunk_per_instance
    batch_tokens = prefill_batch_tokens(pool, d.isl, PREFILL_TOKENS_PER_RANK, per_instance)
    full = forward_cost(
        terms,
        p,
        tokens=batch_tokens,
        sequences=batch_tokens / d.isl,
        context=d.isl,
        prefill=True,
        speed=d.speed,
    ).total_s
    return one, full, batch_tokens


def _decode_step(
    d: Deployment,
    p: PerfParams,
    batch: Array,
    terms: tuple[PoolTerms, PoolTerms | None] | None = None,
    context: Array | None = None,
) -> tuple[StepCost, Array]:
    """The decode step at ``batch`` sequences per instance, and its time per verification pass;
    ``terms``: the decode (and expert) pools' :func:`~dse.perf.stages.pool_terms` under ``p``;
    ``context``: tokens each sequence attends to (default: the mean over a request's life)."""
    decode, ffn = terms if terms is not None else (d.decode, d.ffn)
    ctx = d.isl + 0.5 * d.osl if context is None else context
    cost = forward_cost(
        decode,
        p,
        tokens=batch * (1.0 + d.draft_tokens),
        sequences=batch,
        context=ctx,
        prefill=False,
        speed=d.speed,
    )
    if d.ffn is not None:
        assert ffn is not None
        cost = _afd_step(d, p, batch, cost, ffn)
    return cost, cost.total_s * draft_passes(d.decode.model, d.draft_tokens)


def draft_passes(m: ModelTerms, draft_tokens: Array) -> Array:
    """A verification step's forwards over the model's own: one MTP module (a layer) runs per
    draft token beside the model's layers (1 without MTP), however many modules the checkpoint
    ships: each draft runs the next module, cycling through them (vLLM's ``spec_step_idx %
    num_mtp_layers``; SGLang and TensorRT-LLM run one NextN module a draft). The modules had been
    counted for every draft: a checkpoint of 10 ran 12% slower at one draft."""
    return 1.0 + draft_tokens / m.layers


def _afd_step(
    d: Deployment, p: PerfParams, batch: Array, att: StepCost, ffn_pool: Pool | PoolTerms
) -> StepCost:
    """A decode step split between the attention pool (``att``, ``batch`` sequences per instance)
    and the expert pool (the attention pool's tokens shared among its instances). As for the
    placement's attention and FFN units, each side's whole step must fit in
    :data:`~dse.perf.afd.SIDE_SHARE` of it (two micro-batches in ping-pong), and so must the hidden
    states crossing between them (sent by the attention instance, ``ffn_sent`` times them where it
    deals its tokens over several expert pools, received by the expert instance that takes
    ``decode_instances / ffn_instances`` times as many); the slowest of the three paces
    the step, and the breakdown is that one's, scaled to the step. The transfer fans each token out
    to its experts' GPUs (:func:`~dse.perf.afd.afd_bytes_per_token`) over the NICs, waiting on RDMA
    completions once per direction and layer, or over NVLink where an expert instance and the
    attention instances it talks to share one scale-up domain (:func:`~dse.perf.afd.afd_in_domain`,
    :func:`~dse.perf.afd.afd_transfer_s`); the expert pool runs no all-to-all of its own."""
    assert d.ffn is not None and d.ffn_instances is not None
    seqs = batch * d.decode_instances / d.ffn_instances
    ffn = forward_cost(
        ffn_pool,
        p,
        tokens=seqs * (1.0 + d.draft_tokens),
        sequences=seqs,
        context=np.zeros_like(seqs),
        prefill=False,
        speed=d.speed,
    )
    sent = afd_bytes_per_token(d.ffn) * batch * (1.0 + d.draft_tokens)  # per attention instance
    fan_in = d.decode_instances / d.ffn_instances
    near = ffn_link(d)
    over = 1.0 if d.ffn_sent is None else d.ffn_sent  # what the attention instance's link carries
    xfer = afd_transfer_s(
        d.decode, d.ffn, p, sent * over, sent * d.decode_instances / d.ffn_instances, fan_in, near
    )
    use_att = att.total_s >= ffn.total_s
    moved = xfer > np.maximum(att.total_s, ffn.total_s)
    k = 1.0 / SIDE_SHARE

    def side(a: Array, f: Array) -> Array:
        return np.where(moved, 0.0, np.where(use_att, a, f) * k)

    def scaled(c: StepCost) -> StepCost:
        return replace(c, gemm_s=c.gemm_s * k, attention_s=c.attention_s * k, comm_s=c.comm_s * k,
                       overhead_s=c.overhead_s * k)  # fmt: skip

    return StepCost(
        gemm_s=side(att.gemm_s, ffn.gemm_s),
        attention_s=side(att.attention_s, ffn.attention_s),
        comm_s=np.where(moved, xfer * k, side(att.comm_s, ffn.comm_s)),
        overhead_s=side(att.overhead_s, ffn.overhead_s),
        gemm_compute_bound=np.where(use_att, att.gemm_compute_bound, ffn.gemm_compute_bound),
        attention_compute_bound=att.attention_compute_bound,
        afd=AfdSplit(scaled(att), scaled(ffn), xfer * k, near),
    )


def ffn_link(d: Deployment) -> Array:
    """Whether an attention-FFN deployment's hidden states cross NVLink (True) or the NICs: where
    the placement put its unit (``ffn_in_domain``), else found from the counts
    (:func:`~dse.perf.afd.afd_in_domain`)."""
    assert d.ffn is not None and d.ffn_instances is not None
    if d.ffn_in_domain is not None:
        return np.asarray(d.ffn_in_domain, dtype=bool)
    same = True if d.ffn_same_hardware is None else d.ffn_same_hardware
    return afd_in_domain(d.decode, d.ffn, d.decode_instances / d.ffn_instances, same)


def dealt_over_pools(sides: list[Deployment], shares: list[float]) -> list[Deployment]:
    """An attention pool's deployments with each of the expert pools it deals its tokens over
    (``shares`` of them, each pool's instances counted as its share takes them: ``ffn_instances``),
    each with what its attention instance sends over that pool's link (``ffn_sent``): the hidden
    states of every pool it reaches over the same link, NVLink inside one scale-up domain
    (:func:`~dse.perf.afd.afd_in_domain`) or the NICs, which carry them in the same step. One
    pool that takes every token: as it is."""
    if len(sides) == 1 and shares[0] == 1.0:
        return list(sides)
    links, loads = [], []
    for d, share in zip(sides, shares, strict=True):
        assert d.ffn is not None
        links.append(ffn_link(d))
        loads.append(share * afd_bytes_per_token(d.ffn))
    out = []
    for d, link in zip(sides, links, strict=True):
        assert d.ffn is not None
        carried = sum(np.where(other == link, load, 0.0) for other, load in zip(links, loads, strict=True))
        out.append(replace(d, ffn_sent=carried / afd_bytes_per_token(d.ffn)))
    return out


class _Load:
    """Everything that follows from a decode batch ``b`` per decode instance."""

    def __init__(self, d: Deployment, p: PerfParams) -> None:
        self.d, self.p = d, p
        # what a pass costs whatever the batch, once per pool for the solve (an aggregated
        # instance prefills on its decode pool)
        decode = pool_terms(d.decode, p)
        prefill = decode if d.prefill is None else pool_terms(d.prefill, p)
        self.terms = (decode, None if d.ffn is None else pool_terms(d.ffn, p))
        self.one, self.full, self.batch_tokens = _prefill_terms(d, p, prefill)
        self.prefill_rate = self.batch_tokens / self.full  # tokens/s per prefill instance

    def at(self, b: Array) -> dict[str, Any]:
        d, p = self.d, self.p
        cost, step = _decode_step(d, p, b, self.terms)
        if d.prefill is None:
            per_request = d.isl / self.prefill_rate
            tpot = step / d.accept_tokens + b * per_request / d.osl
            x = d.decode_instances * b / (d.osl * tpot)
            rho = b * per_request / (d.osl * tpot)
            transfer = 0.5 * tpot
        else:
            tpot = step / d.accept_tokens
            x = d.decode_instances * b / (d.osl * tpot)
            rho = x * d.isl / (d.prefill_instances * self.prefill_rate)
            nic = np.minimum(d.prefill.nic_bytes_per_s, d.decode.nic_bytes_per_s) * p.nic_eff
            transfer = (d.isl * d.decode.kv_bytes_per_token + d.decode.state_bytes) / nic + step
        rho_c = np.minimum(rho, RHO_MAX)
        wait = p.prefill_queue_factor * self.full * rho_c / (1.0 - rho_c)
        ttft = self.one + wait + transfer
        conc = x * (ttft + d.osl * tpot)
        conc = np.where(rho >= RHO_MAX, np.inf, conc)
        return {"cost": cost, "step": step, "tpot": tpot, "x": x, "rho": rho, "ttft": ttft, "conc": conc}


def decode_step_seconds(d: Deployment, p: PerfParams, batch: Array, context: Array) -> Array:
    """Seconds of one decode step (a verification pass with MTP) at ``batch`` sequences per
    instance attending to ``context`` tokens each, without any prefill beside it."""
    return np.asarray(_decode_step(d, p, np.asarray(batch, dtype=float), context=np.asarray(context))[1])


def prefill_forward_seconds(d: Deployment, p: PerfParams, tokens: Array) -> Array:
    """Seconds of one prefill forward of ``tokens`` prompt tokens (prompts of ``d.isl`` tokens)
    on a prefill instance (aggregated: on the instance itself)."""
    pool = d.decode if d.prefill is None else d.prefill
    tokens = np.asarray(tokens, dtype=float)
    return np.asarray(
        forward_cost(
            pool, p, tokens=tokens, sequences=np.maximum(tokens / d.isl, 1.0), context=d.isl,
            prefill=True, speed=d.speed,
        ).total_s
    )  # fmt: skip


def tpot_at_batch(d: Deployment, p: PerfParams, batch: Array) -> Array:
    """Seconds per output token with ``batch`` sequences per decode instance, whatever load
    formed that batch (aggregated: with the chunked prefill of the requests it turns over)."""
    return np.asarray(_Load(d, p).at(np.asarray(batch, dtype=float))["tpot"])


def closed_loop(d: Deployment, p: PerfParams, concurrency: Array, iterations: int = 40) -> ServingResult:
    """Serving figures at a fixed number of requests in flight (benchmark-style load)."""
    load = _Load(d, p)
    cap = kv_capacity_sequences(d.decode, p, d.isl + d.osl)
    limit = np.inf if d.max_batch is None else d.max_batch
    slots = np.minimum(np.maximum(cap, 1e-6), limit)  # sequences an instance may hold
    hi = np.minimum(slots, np.maximum(concurrency / d.decode_instances, 1e-3))
    lo = np.full_like(hi, 1e-4)
    for _ in range(iterations):
        mid = np.sqrt(lo * hi)
        too_many = load.at(mid)["conc"] > concurrency
        hi = np.where(too_many, mid, hi)
        lo = np.where(too_many, lo, mid)
    b = lo
    s = load.at(b)
    # requests the decode pool cannot hold (KV cache or the engine's cap) wait for a slot:
    # Little's law gives their TTFT
    ttft = np.maximum(s["ttft"], concurrency / np.maximum(s["x"], 1e-12) - d.osl * s["tpot"])
    capacity_bound = (cap > 0) & (b >= 0.98 * cap)
    cap_bound = (limit < cap) & (b >= 0.98 * limit)
    return _result(d, p, load, s, b, ttft, capacity_bound, cap, cap_bound)


def _result(
    d: Deployment,
    p: PerfParams,
    load: _Load,
    s: dict[str, Any],
    b: Array,
    ttft: Array,
    capacity_bound: Array,
    cap: Array,
    cap_bound: Array,
) -> ServingResult:
    dec = d.decode
    g_dec = dec.gpus * d.decode_instances
    ffn_hbm = np.zeros_like(b)
    if d.ffn is not None and d.ffn_instances is not None:  # decode GPUs: both halves
        g_dec = g_dec + d.ffn.gpus * d.ffn_instances
        ffn_hbm = weight_bytes_per_gpu(d.ffn)
    if d.prefill is None:
        g_pf = g_dec
        g_total = g_dec
        pf_hbm = np.zeros_like(b)
    else:
        g_pf = d.prefill.gpus * d.prefill_instances
        g_total = g_dec + g_pf
        pf_act = load.batch_tokens * d.prefill.model.hidden * 2.0 * 8.0 / d.prefill.attn_dp
        pf_hbm = (
            weight_bytes_per_gpu(d.prefill)
            + pf_act
            + (load.batch_tokens * d.prefill.kv_bytes_per_token / d.prefill.kv_shard)
        )
    x = s["x"]
    per_seq = (d.isl + d.osl) * dec.kv_bytes_per_token + dec.state_in_kv_shards  # one sequence's
    act = b * (1.0 + d.draft_tokens) * dec.model.hidden * 2.0 * 8.0 / dec.attn_dp
    hbm = weight_bytes_per_gpu(dec) + b * per_seq / dec.kv_shard + act
    cost = s["cost"]
    parts = np.stack([cost.gemm_s, cost.attention_s, cost.comm_s, cost.overhead_s])
    top = np.argmax(parts, axis=0)
    mem_bound = np.where(top == 0, ~cost.gemm_compute_bound, ~cost.attention_compute_bound)
    regime = np.where(
        top == 2,
        "communication",
        np.where(top == 3, "overhead", np.where(mem_bound, "hbm-bandwidth", "compute")),
    )
    regime = np.where(s["rho"] >= 0.9, "prefill-compute", regime)
    regime = np.where(capacity_bound, "hbm-capacity", regime)
    regime = np.where(cap_bound, "running-request-cap", regime)
    regime = np.where(cap <= 0, "weights-do-not-fit", regime)
    unfit = np.zeros(b.shape, dtype=bool)
    if d.prefill is not None:
        unfit = pf_hbm > d.prefill.hbm_bytes * (1.0 - p.hbm_reserve_fraction)
        regime = np.where(unfit, "prefill-weights-do-not-fit", regime)
    if d.ffn is not None:
        ffn_over = ffn_hbm > d.ffn.hbm_bytes * (1.0 - p.hbm_reserve_fraction)
        regime = np.where(ffn_over, "ffn-weights-do-not-fit", regime)
        unfit = unfit | ffn_over
    nan = np.where((cap <= 0) | unfit, np.nan, 1.0)
    parts = cost.times(
        draft_passes(d.decode.model, d.draft_tokens)
    )  # MTP's draft passes: they add up to the step
    return ServingResult(
        requests_per_s=x * nan,
        tput_per_gpu=x * (d.isl + d.osl) / g_total * nan,
        input_tput_per_prefill_gpu=x * d.isl / g_pf * nan,
        output_tput_per_decode_gpu=x * d.osl / g_dec * nan,
        intvty_tok_s_user=1.0 / s["tpot"] * nan,
        tpot_s=s["tpot"] * nan,
        ttft_s=ttft * nan,
        decode_batch=b * nan,
        hbm_peak_bytes_per_gpu=np.maximum(np.maximum(hbm, pf_hbm), ffn_hbm),
        prefill_hbm_bytes_per_gpu=pf_hbm,
        decode_step_s=s["step"],
        decode_gemm_s=parts.gemm_s,
        decode_attention_s=parts.attention_s,
        decode_comm_s=parts.comm_s,
        decode_overhead_s=parts.overhead_s,
        prefill_s=load.one,
        prefill_utilization=s["rho"],
        regime=regime,
        afd=parts.afd,
    )


def prefill_capacity(pool: Pool, p: PerfParams, *, isl: Array, batch_tokens: Array, speed: Array) -> Array:
    """New (uncached) prompt tokens/s one instance prefills when kept busy with batches of
    ``batch_tokens`` tokens."""
    t = forward_cost(
        pool, p, tokens=batch_tokens, sequences=batch_tokens / isl, context=isl, prefill=True, speed=speed
    ).total_s
    return batch_tokens / t


def decode_tpot(
    pool: Pool | PoolTerms,
    p: PerfParams,
    *,
    batch: Array,
    context: Array,
    speed: Array,
    draft_tokens: Array,
    accept_tokens: Array,
) -> Array:
    """Seconds per output token of one decode instance running ``batch`` sequences (``pool``
    may be its :func:`~dse.perf.stages.pool_terms` under ``p``)."""
    draft = draft_passes((pool.pool if isinstance(pool, PoolTerms) else pool).model, draft_tokens)
    b = np.maximum(batch, 1e-9)
    cost = forward_cost(
        pool, p, tokens=b * (1.0 + draft_tokens), sequences=b, context=context, prefill=False, speed=speed
    )
    return cost.total_s * draft / accept_tokens


# sequences: how close decode_capacity_at_tpot searches the batch. Under one sequence, the
# bracket holds at most one whole batch above its lower end, which the search then tries: the
# answer is whole, so a finer bracket buys nothing (1e-3 took one to three more rounds)
BATCH_TOLERANCE = 0.5
SEARCH_POINTS = 2048  # batches tried per round of that search, shared among the candidates


def decode_capacity_at_tpot(
    pool: Pool,
    p: PerfParams,
    *,
    context: Array,
    tpot_s: Array,
    speed: Array,
    draft_tokens: Array,
    accept_tokens: Array,
    iterations: int = 40,
    max_batch: Array | float = np.inf,
    kv_context: Array | None = None,
) -> tuple[Array, Array]:
    """(output tokens/s, sequences) of one decode instance at the largest whole batch, at most
    ``max_batch``, whose time per output token stays within ``tpot_s`` and whose KV fits in HBM
    (each sequence holding ``kv_context`` tokens, where its engine reserves more than the mean
    ``context`` its steps read). Zero where even one sequence misses the target or the weights do
    not fit.

    TPOT grows with the batch, so the search keeps a bracket ``[lo, hi]`` (lo meets the target,
    hi does not) and shrinks it ``k + 1``-fold a round by trying ``k`` batches inside it in one
    vectorised step-time evaluation, ``k`` being ``SEARCH_POINTS`` shared among the candidates
    (at most 128 each; 1 is bisection), to under one sequence (``BATCH_TOLERANCE``); the whole
    batch above the bracket's lower end, if it lies inside, is then tried once. The few candidates
    of a study trial take two rounds from 4,096, where halving took 13 evaluations; a batch of
    100,000 candidates bisects."""
    held = context if kv_context is None else kv_context
    cap = np.minimum(np.maximum(kv_capacity_sequences(pool, p, held), 0.0), max_batch)
    terms = pool_terms(pool, p)  # what every step costs whatever the batch, once for the search

    def tpot(b: Array) -> Array:
        return decode_tpot(
            terms,
            p,
            batch=b,
            context=context,
            speed=speed,
            draft_tokens=draft_tokens,
            accept_tokens=accept_tokens,
        )

    shape = np.broadcast_shapes(cap.shape, np.shape(tpot_s), np.shape(context))
    lo = np.zeros(shape)
    hi = np.broadcast_to(np.maximum(cap, 0.0), shape)
    ok_hi = tpot(np.maximum(hi, 1e-9)) <= tpot_s
    widest = float(np.max(hi[np.isfinite(hi)], initial=1.0))
    size = int(np.prod(shape))
    k = int(np.clip(SEARCH_POINTS // max(size, 1), 1, 128))
    rounds = int(np.ceil(np.log(max(widest, 1.0) / BATCH_TOLERANCE) / np.log(k + 1)))
    frac = np.arange(1, k + 1).reshape((k,) + (1,) * len(shape)) / (k + 1)  # (points, 1, ...)
    # where every candidate meets the target at its cap, the answer is the cap: nothing to search
    # (a study trial whose decode cap binds; each candidate's bracket is its own, so skipping the
    # rounds changes no other answer)
    for _ in range(0 if ok_hi.all() else min(iterations, rounds)):
        width = np.where(np.isfinite(hi), hi - lo, 0.0)
        trial = lo + frac * width  # (points, candidates)
        ok = tpot(np.maximum(trial, 1e-9)) <= tpot_s
        passed = np.where(ok.all(axis=0), k, np.argmin(ok, axis=0))  # points before the first miss
        lo = np.where(passed > 0, np.take_along_axis(trial, np.maximum(passed - 1, 0)[None], 0)[0], lo)
        nxt = np.take_along_axis(trial, np.minimum(passed, k - 1)[None], 0)[0]
        hi = np.where(passed < k, nxt, hi)
    # whole sequences: an engine's batch cap is a count, and the simulators run it as one (the
    # fluid model and the discrete-event reference at its floor, the engine-level simulation at its
    # ceiling). A fractional batch credited the MILP with a part of a sequence no instance runs:
    # 40.14 sequences of a long-context H200 pool were 0.18% more decode than the fluid model's 40
    # slots carried, and the engine's 41 ran 1.3% more, over the TPOT target
    b = np.where(ok_hi, np.floor(cap + 1e-9), np.floor(lo))
    if not ok_hi.all():  # the boundary lies in [lo, hi): the whole batch above lo may still meet it
        up = np.floor(lo) + 1.0
        above = ~ok_hi & (up < hi)
        if above.any():
            b = np.where(above & (tpot(up) <= tpot_s), up, b)
    b = np.where(b >= 1.0, b, 0.0)
    rate = np.where(b > 0, b / tpot(np.maximum(b, 1e-9)), 0.0)
    return rate, b
