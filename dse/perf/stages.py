"""Cost of one forward pass of a serving instance, per stage. Pure functions over arrays.

Each cost is a roofline (FLOPs against peak, bytes against HBM bandwidth) for the GEMMs and for
attention, plus communication (tensor-parallel all-reduce, expert-parallel dispatch/combine) and
fixed overheads, each with a fitted efficiency from :class:`~dse.perf.params.PerfParams`.

Expert-load imbalance: tokens are routed to ``ep`` GPUs; with ``n`` routed tokens per GPU on
average, the busiest GPU gets about ``n + sqrt(2 n ln ep)`` (the maximum of ``ep`` Poisson counts),
so the imbalance factor ``1 + sqrt(2 ln(ep) / n)`` shrinks as the batch grows, and is 1 at ep = 1.
Decode attention under data parallelism waits for its busiest rank the same way
(:func:`attention_rank_imbalance`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from dse.perf.kernels import MeasuredCurves, lookup_1d, lookup_2d
from dse.perf.memo import Memo
from dse.perf.params import PerfParams
from dse.perf.pool import Array, ModelTerms, Pool, memoised


@dataclass(frozen=True)
class StepCost:
    """Seconds of one forward pass, split by what it spends them on."""

    gemm_s: Array
    attention_s: Array
    comm_s: Array
    overhead_s: Array
    gemm_compute_bound: Array  # bool
    attention_compute_bound: Array
    # attention-FFN disaggregated decode: each pool's own share of the step (the fields above are
    # the share of whichever paces it)
    afd: AfdSplit | None = None

    @property
    def total_s(self) -> Array:
        return self.gemm_s + self.attention_s + self.comm_s + self.overhead_s

    def times(self, f: Array) -> StepCost:
        """Every part, and each pool's of an attention-FFN split, ``f`` times as long."""
        afd = self.afd
        if afd is not None:
            afd = AfdSplit(afd.attention.times(f), afd.experts.times(f), afd.transfer_s * f, afd.in_domain)
        return replace(self, gemm_s=self.gemm_s * f, attention_s=self.attention_s * f,
                       comm_s=self.comm_s * f, overhead_s=self.overhead_s * f, afd=afd)  # fmt: skip


@dataclass(frozen=True)
class AfdSplit:
    """An attention-FFN disaggregated decode step by pool, in seconds of the step: the attention
    pool's pass, the expert pool's pass and the hidden states' transfer run side by side (two
    micro-batches in ping-pong), and the slowest of the three paces the step."""

    attention: StepCost
    experts: StepCost
    transfer_s: Array
    # bool: the transfer stays on NVLink, the unit in one scale-up domain (dse.perf.afd.afd_in_domain)
    in_domain: Array

    def paced_by(self) -> Array:
        """Which of the three is slowest: ``attention pool``, ``expert pool`` or ``transfer``."""
        a, e, x = self.attention.total_s, self.experts.total_s, self.transfer_s
        return np.where((x > a) & (x > e), "transfer", np.where(a >= e, "attention pool", "expert pool"))


def expert_imbalance(routed_tokens: Array, ep: Array) -> Array:
    per_gpu = np.maximum(routed_tokens / ep, 1e-9)
    return 1.0 + np.sqrt(2.0 * np.log(np.maximum(ep, 1.0)) / per_gpu).clip(max=ep - 1.0)


def attention_rank_imbalance(sequences: Array, attn_dp: Array) -> Array:
    """How much longer the busiest data-parallel attention rank takes than the average one in a
    decode step. Each rank attends over the KV of its own requests, and requests land on ranks as
    they arrive and leave when they finish (SGLang and TRT-LLM assign new requests round-robin or
    to the shortest queue, but completions are random), so with ``n`` sequences per rank on
    average the busiest of ``attn_dp`` ranks holds about ``n + sqrt(2 n ln attn_dp)``, as for the
    expert load (:func:`expert_imbalance`). The step's collectives wait for it. 1 without data
    parallelism; shrinks as the batch grows."""
    return expert_imbalance(sequences, attn_dp)


def active_expert_fraction(tokens: Array, pool: Pool) -> Array:
    """Share of experts that at least one of ``tokens`` is routed to (uniform routing)."""
    m = pool.model
    if m.experts_per_token == 0:
        return np.zeros(np.shape(tokens))
    return 1.0 - np.power(1.0 - m.experts_per_token / m.experts, tokens)


def _group_bandwidth(group: Array, pool: Pool, p: PerfParams) -> Array:
    """Bytes/s per GPU for a collective over ``group`` GPUs: NVLink inside the scale-up domain,
    the NIC for the share of peers outside it."""
    outside = np.clip(1.0 - pool.domain_gpus / np.maximum(group, 1.0), 0.0, 1.0)
    inv = (1.0 - outside) / (pool.scaleup_bytes_per_s * p.link_eff) + outside / (
        pool.nic_bytes_per_s * p.nic_eff
    )
    return 1.0 / inv


def nvlink_a2a_latency_us(ep: Array, p: PerfParams) -> Array:
    """Latency of one expert-parallel dispatch or combine inside the scale-up domain: the
    NVLink collective latency once per peer. Each rank writes its tokens (or an empty
    count) to every other rank and then waits on a completion flag from each of them, so
    the fixed cost grows with the group, not once per call as for an all-reduce: DeepEP's
    README measures its low-latency dispatch over RDMA at 77 us on 8 ranks and 194 us on 256. Fitted
    per peer (about 1 us), an EP8 call costs about 7 us and an EP48 one on GB200 NVL72 about
    48 us, where a flat latency (fitted at its 0.5 us floor) had charged both the same."""
    return p.collective_latency_us * np.maximum(np.asarray(ep, dtype=float) - 1.0, 1.0)


@dataclass(frozen=True, eq=False)
class PoolTerms:
    """The parts of a forward pass's cost that do not depend on the batch, for one pool under one
    set of parameters: computed once by :func:`pool_terms` and reused by every
    :func:`forward_cost` call of a solve that varies only the batch."""

    pool: Pool
    params: PerfParams
    hbm: Array  # achieved HBM bytes/s
    dense_w: Array  # non-expert weight bytes read per GPU per pass
    expert_w: Array  # routed-expert weight bytes per GPU (all experts; their average share)
    attn_dp: Array
    kv_shard: Array
    state_in_kv_shards: Array  # Pool.state_in_kv_shards
    ar_bandwidth: Array  # bytes/s per GPU of the tensor-parallel all-reduce
    link: Array  # NVLink bytes/s per GPU achieved
    nic: Array  # NIC bytes/s per GPU achieved
    local_share: Array
    remote_domains: Array
    peers_share: Array  # remote GPUs a routed token goes to: 1 - 1/ep, (gpus - 1)/ep with split experts
    dispatch: Array  # bool: the MoE layer dispatches and combines over an all-to-all
    latency_s: Array  # fixed collective latency of one pass
    overhead_s: Array  # fixed per-pass overhead


def pool_terms(pool: Pool, p: PerfParams) -> PoolTerms:
    """The batch-independent terms of ``pool`` under ``p``, computed once per (pool, parameter
    set) object pair while the memo holds it (:mod:`dse.perf.memo`; a study's trials meet the
    same pools of :func:`~dse.perf.pool.build_pool`'s memo again and again); another pool's
    (the measured tier's, a pool changed by ``replace``), each time."""
    if not memoised(pool):
        return _pool_terms(pool, p)
    return _TERMS.get((id(pool), id(p)), (pool, p), lambda: _pool_terms(pool, p))


_TERMS = Memo()


def _pool_terms(pool: Pool, p: PerfParams) -> PoolTerms:
    m = pool.model
    g = pool.gpus
    tp = pool.attn_tp
    k = m.experts_per_token
    # the GPUs the experts span: an instance of more GPUs than expert ranks splits each expert
    # over gpus / ep of them, so an instance wider than its scale-up domain crosses the network
    # whatever its ep (16 H200s at ep 8 span two nodes as ep 16 does)
    spread = np.maximum(g, pool.ep)
    domains = np.maximum(spread / pool.domain_gpus, 1.0)
    dispatch = (pool.ep > 1) & ((pool.attn_dp > 1) | (pool.ep > g))
    n_ar = np.where(tp > 1, m.tp_allreduces_per_layer * m.layers, 0.0)
    n_a2a = np.where(dispatch, 2.0 * m.moe_layers, 0.0)
    # a collective whose group spans scale-up domains waits on RDMA round trips, not NVLink
    # ones: PerfParams.nic_allreduce_latency_us / nic_a2a_latency_us (fitted 59 / 180 us)
    # instead of the NVLink collective_latency_us (was a fixed 3x the latter)
    ar_lat = np.where(tp > pool.domain_gpus, p.nic_allreduce_latency_us, p.collective_latency_us)
    local_share = np.minimum(pool.domain_gpus, spread) / np.maximum(spread, 1.0)
    remote_domains = domains * (1.0 - np.power(1.0 - 1.0 / domains, k)) * (1.0 - 1.0 / domains)
    if m.a2a_over_nic:
        a2a_lat = np.where(spread > pool.domain_gpus, p.nic_a2a_latency_us, nvlink_a2a_latency_us(spread, p))
    else:  # an attention-FFN expert pool: the transfer brought each token to every domain its
        # experts are in (dse.perf.afd), which forwards every copy over NVLink, none over the NICs
        a2a_lat = nvlink_a2a_latency_us(np.minimum(spread, pool.domain_gpus), p)
        local_share, remote_domains = np.ones_like(local_share), np.zeros_like(remote_domains)
    return PoolTerms(
        pool=pool,
        params=p,
        hbm=pool.hbm_bytes_per_s * p.hbm_eff,
        dense_w=pool.attn_weight_bytes / pool.attn_tp + pool.dense_weight_bytes / g,
        expert_w=pool.expert_weight_bytes / g,
        attn_dp=pool.attn_dp,
        kv_shard=pool.kv_shard,
        state_in_kv_shards=pool.state_in_kv_shards,
        ar_bandwidth=_group_bandwidth(tp, pool, p),
        link=pool.scaleup_bytes_per_s * p.link_eff,
        nic=pool.nic_bytes_per_s * p.nic_eff,
        local_share=local_share,
        remote_domains=remote_domains,
        # an expert split over gpus / ep GPUs takes each token on every one of them: of the gpus / ep
        # shards of a routed expert, (gpus - 1) / ep on other GPUs (1 - 1/ep when ep covers them all)
        peers_share=np.where(pool.ep >= g, 1.0 - 1.0 / pool.ep, (g - 1.0) / pool.ep),
        dispatch=dispatch,
        latency_s=(n_ar * ar_lat + n_a2a * a2a_lat) * 1e-6,
        overhead_s=np.full(np.shape(g), p.step_overhead_ms * 1e-3) + m.layers * p.layer_overhead_us * 1e-6,
    )


def forward_cost(
    pool: Pool | PoolTerms,
    p: PerfParams,
    *,
    tokens: Array,
    sequences: Array,
    context: Array,
    prefill: bool,
    speed: Array,
    cached: Array | float = 0.0,
) -> StepCost:
    """One forward pass of an instance over ``tokens`` new tokens from ``sequences`` requests
    whose attention reads ``context`` tokens each (for prefill: the new prompt tokens; causal, so
    half of them on average). ``cached`` (prefill only) is the midfill case: tokens of each
    sequence whose KV was reloaded rather than recomputed, which every new token also attends to.
    ``pool`` may be its :func:`pool_terms` under ``p``, which a solve over the batch computes once."""
    f = pool if isinstance(pool, PoolTerms) else pool_terms(pool, p)
    if f.params is not p:
        raise ValueError("forward_cost: pool terms computed under other parameters than p")
    pool = f.pool
    tokens = np.asarray(tokens, dtype=float)
    sequences = np.asarray(sequences, dtype=float)
    context = np.asarray(context, dtype=float)
    m = pool.model
    g = pool.gpus
    gemm_eff = p.prefill_gemm_eff if prefill else p.gemm_eff
    hbm = f.hbm

    # GEMMs: dense part split evenly over the instance; routed experts carry the imbalance
    routed = tokens * m.experts_per_token
    imb = expert_imbalance(routed, pool.ep)
    dense_flops = 2.0 * tokens * m.params_dense_active / g
    routed_per_token = m.params_routed_total / max(m.experts, 1.0)
    expert_flops = 2.0 * routed * routed_per_token * imb / g
    gemm_compute = (dense_flops / pool.dense_tflops + expert_flops / pool.expert_tflops) / gemm_eff
    expert_w = f.expert_w * active_expert_fraction(tokens, pool)
    gemm_memory = (f.dense_w + expert_w) / hbm
    gemm_s = np.maximum(gemm_compute, gemm_memory)
    kern = pool.kernels if p.kernels == "measured" else None
    if kern is not None:
        exp_roof = np.maximum(expert_flops / pool.expert_tflops, expert_w / pool.hbm_bytes_per_s)
        measured = _measured_gemm_s(kern, pool, p, tokens / f.attn_dp, tokens, exp_roof)
        gemm_s = np.where(kern.has["gemm"] & (kern.has["moe"] | (m.experts_per_token == 0)), measured, gemm_s)

    # attention (:func:`_attended`); a sparse attention's indexer, replicated on every
    # tensor-parallel rank, scores every token in fp8
    dims, mean_ctx, read_ctx = _attended(m, context, cached, prefill)
    attn_flops = 2.0 * tokens * m.full_layers * m.q_heads * read_ctx * dims / g
    ix_flops = 2.0 * tokens * m.full_layers * m.index_dim * mean_ctx / f.attn_dp
    ix_s = ix_flops / (pool.dense_tflops * p.attn_eff)
    attn_compute = attn_flops / (pool.attn_tflops * p.attn_eff) + ix_s
    state = f.state_in_kv_shards * (2.0 if not prefill else 0.0)  # read and write per token step
    own_kv = pool.kv_bytes_per_token - m.index_bytes_per_token  # the indexer's keys aside
    read = 0.0 if prefill else read_ctx * own_kv + context * m.index_bytes_per_token
    kv_bytes = sequences * (read + state) / f.kv_shard
    kv_bytes = kv_bytes + tokens * pool.kv_bytes_per_token / f.kv_shard  # writing new KV
    if prefill:  # a midfill reads the reloaded prefix once per forward
        kv_bytes = kv_bytes + sequences * cached * pool.kv_bytes_per_token / f.kv_shard
    attention_s = np.maximum(attn_compute, kv_bytes / hbm)
    if kern is not None:
        op = "prefill_attention" if prefill else "decode_attention"
        roof = np.maximum(attn_flops / pool.attn_tflops, kv_bytes / pool.hbm_bytes_per_s)
        ratio = lookup_2d(getattr(kern, op), kern.row_of, sequences / f.attn_dp, context)
        timed = _in_engine(roof * ratio, m.full_layers, roof, p) + ix_s  # (no table times the indexer)
        attention_s = np.where(kern.has[op], timed, attention_s)
    if not prefill:  # decode: the busiest data-parallel attention rank paces the step
        attention_s = attention_s * attention_rank_imbalance(sequences, f.attn_dp)

    # GEMMs and attention stay inline: as helpers, the large temporaries they free on return
    # made glibc trim and re-fault the heap (a quarter more page faults, about 5% fewer
    # closed-loop predictions/s in benchmarks/perf_speed.py); communication alone costs nothing
    comm_s = _comm_seconds(f, tokens)
    return StepCost(
        gemm_s=gemm_s * speed,
        attention_s=attention_s * speed,
        comm_s=comm_s,
        overhead_s=f.overhead_s * np.ones_like(tokens),
        gemm_compute_bound=gemm_compute >= gemm_memory,
        attention_compute_bound=attn_compute >= kv_bytes / hbm,
    )


def _measured_gemm_s(
    kern: MeasuredCurves, pool: Pool, p: PerfParams, rows: Array, tokens: Array, expert_roof: Array
) -> Array:
    """The GEMMs of a pass from the measured tables: the dense ones at their measured seconds for
    ``rows`` per attention rank (scaled to ``pool``'s datasheet where it is a what-if variant),
    the routed experts at their measured share of ``expert_roof`` for the instance's ``tokens``."""
    r = kern.row_of
    flops = kern.gemm_flops_per_row[r] * rows
    weights = kern.gemm_weight_bytes[r]
    dense_roof = np.maximum(flops / pool.dense_tflops, weights / pool.hbm_bytes_per_s)
    dense = lookup_1d(kern.gemm, r, rows)
    if kern.variants:  # measured on the GPU itself, scaled by the ratio of the rooflines on a variant
        dense *= dense_roof / np.maximum(flops / kern.basis_dense_peak[r], weights / kern.basis_hbm[r])
    experts = expert_roof * lookup_1d(kern.moe, r, tokens)
    return _in_engine(dense, kern.gemm_calls[r], dense_roof, p) + _in_engine(
        experts, pool.model.moe_layers, expert_roof, p
    )


def _in_engine(measured: Array, calls: Array | float, roof: Array, p: PerfParams) -> Array:
    """Measured kernel seconds as a serving engine's forward spends them: less the launch cost of
    each of ``calls`` kernels that its CUDA graph replays without (PerfParams.launch_saving_us),
    never below the roofline, and scaled by what fusion and overlap save
    (PerfParams.measured_scale). Both are fitted by ``dse calibrate --kernels measured``."""
    return np.maximum(measured - calls * p.launch_saving_us * 1e-6, roof) * p.measured_scale


def _comm_seconds(f: PoolTerms, tokens: Array) -> Array:
    """Seconds of communication not hidden behind compute, with the fixed collective latency.

    TP all-reduce twice per layer (``ModelTerms.tp_allreduces_per_layer``: once on an
    attention-FFN deployment's attention pool); EP dispatch (fp8) + combine (bf16). Across
    scale-up domains a token crosses the NIC once per remote domain it is routed to (forwarded
    inside the domain, as DeepEP does), not once per expert (none on an attention-FFN expert
    pool, ``ModelTerms.a2a_over_nic``). Only data-parallel attention spreads the tokens over the
    ranks and needs the all-to-all: under tensor-parallel attention every rank holds every token
    after the attention all-reduce, computes its own experts' share of each, and the all-reduce
    that ends the MoE layer (the second one counted here) sums them, as SGLang's and TRT-LLM's
    expert-parallel MoE without DP attention do; unless the expert group is wider than the
    instance, whose tokens must then reach experts on GPUs that do not hold them.
    """
    pool, p = f.pool, f.params
    m = pool.model
    tp = pool.attn_tp
    ar_bytes = np.where(
        tp > 1,
        m.tp_allreduces_per_layer * m.layers * 2.0 * (tp - 1) / tp * tokens / f.attn_dp * m.hidden * 2.0,
        0.0,
    )
    ar_s = ar_bytes / f.ar_bandwidth
    k = m.experts_per_token
    token_bytes = m.moe_layers * tokens / pool.gpus * m.hidden * (pool.act_bytes + 2.0)
    a2a_s = np.where(
        f.dispatch,
        token_bytes * k * f.local_share * f.peers_share / f.link + token_bytes * f.remote_domains / f.nic,
        0.0,
    )
    return (ar_s + a2a_s) * (1.0 - p.comm_overlap) + f.latency_s


def _attended(
    m: ModelTerms, context: Array, cached: Array | float, prefill: bool
) -> tuple[float, Array, Array]:
    """A head's q.k plus v dims (absorbed MLA in decode, full heads in prefill; sparse attention
    reads in the absorbed form in prefill too, as FlashMLA's sparse kernels do), the tokens a new
    token's attention covers on average (prefill: causal over the prompt, on top of a reloaded
    prefix), and of those the ones it reads: under sparse attention at most the top-k its indexer
    picks, the indexer scoring all of them."""
    k = m.sparse_top_k
    covered = context * 0.5 + cached if prefill else context
    if math.isinf(k):
        dims = m.prefill_qk_dim + m.prefill_v_dim if prefill else m.decode_qk_dim + m.decode_v_dim
        return dims, covered, covered
    read = _mean_top_k(cached, cached + context, k) if prefill else np.minimum(context, k)
    return m.decode_qk_dim + m.decode_v_dim, covered, read


def _mean_top_k(first: Array | float, last: Array | float, k: float) -> Array:
    """The tokens a query at a position spread evenly over ``first``-``last`` attends to when it
    reads at most ``k``: the mean of min(position, k) (all of them below k: causal, the mean)."""
    a, b = np.asarray(first, dtype=float), np.asarray(last, dtype=float)
    lo, hi = np.minimum(a, k), np.minimum(b, k)
    area = (hi * hi - lo * lo) * 0.5 + k * np.maximum(b - np.maximum(a, k), 0.0)
    width = b - a
    return np.where(width > 0, area / np.where(width > 0, width, 1.0), lo)


def kv_capacity_sequences(pool: Pool, p: PerfParams, context: Array) -> Array:
    """Sequences of ``context`` tokens whose KV fits in the HBM left after weights and reserve
    (per instance); negative when the weights alone do not fit."""
    per_gpu_free = pool.hbm_bytes * (1.0 - p.hbm_reserve_fraction) - weight_bytes_per_gpu(pool)
    return per_gpu_free / pool.seq_bytes_per_gpu(context)


def weight_bytes_per_gpu(pool: Pool) -> Array:
    """Weight bytes a GPU of each instance holds: attention over its tensor-parallel ranks, the
    other dense weights over the instance, and the routed experts of its fullest GPU
    (:attr:`~dse.perf.pool.Pool.expert_bytes_per_gpu`)."""
    return (
        pool.attn_weight_bytes / pool.attn_tp
        + pool.dense_weight_bytes / pool.gpus
        + pool.expert_bytes_per_gpu
    )
