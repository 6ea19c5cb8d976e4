"""A deployment as the latency simulation reads it: its step costs tabulated once
(:func:`tables_of`), with the scheduler rules of its engine (:data:`ENGINE_RULES`).

KV admission reserves the prompt plus a share of the output: SGLang's ``new_token_ratio`` (it
starts at 0.7 and decays by 0.001 a step to about 0.1 while nothing is retracted, and a run spends
most of its time at that floor, so the simulation starts there; a retraction sets it to 1),
vLLM's blocks allocated as tokens come (nothing reserved), TensorRT-LLM's ``GUARANTEED_NO_EVICT``
(the whole output). vLLM and
TensorRT-LLM carry the running requests' decode step in a prefill forward; SGLang runs the
prefill batch as its own forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any

import numpy as np

from dse.perf.latency_inputs import Lengths
from dse.perf.params import PerfParams
from dse.perf.pool import Array
from dse.perf.serving import (
    PREFILL_TOKENS_PER_RANK,
    Deployment,
    decode_step_seconds,
    prefill_forward_seconds,
)
from dse.perf.stages import kv_capacity_sequences


@dataclass(frozen=True)
class EngineRules:
    """How an engine's scheduler batches: ``mixed``, whether decode steps ride in the prefill
    forward; ``reserve``, the share of a request's output its admission reserves in the KV cache;
    ``bootstrap``, whether a disaggregated prefill server hand-shakes with the decode server before
    it batches a prompt (SGLang's ``PrefillBootstrapQueue``, polled once per loop iteration, so a
    prompt arriving during a forward misses the next one); ``decode_reserve_tokens``, what a
    disaggregated decode server reserves past each request's prompt in place of the share of its
    output (SGLang's ``DecodePreallocQueue`` keeps ``SGLANG_NUM_RESERVED_DECODE_TOKENS``, 512 by
    default, for every request it holds; 0: the share); ``dp_prefill_slowed``, whether an
    attention-DP prefill server's forwards take the fitted
    :attr:`~dse.perf.params.LatencyParams.dp_prefill_slowdown` times what the step costs price
    (SGLang: its runs with such a pool measured 1.7x the simulated median TTFT at 1-64 clients and
    2.4x above, those with a tensor-parallel one 0.9x and 1.4x, TensorRT-LLM's alike; the step
    costs price a pool whose ranks share every forward evenly, where SGLang forms each rank's
    batch from that rank's own queue and synchronises the ranks' batch shapes before every
    forward, ``prepare_mlp_sync_batch``). Every run that fitted it ran SGLang's default budget
    of :data:`SLOWED_UP_TO_TOKENS` a forward; a forward of more tokens is slowed by what one of
    that many is (:func:`slowed_forward`). ``host_mirror``: whether its host tier of resting KV
    holds a copy of the GPU's whole KV pool besides (SGLang's hierarchical cache writes the GPU's
    KV through to a host pool that "should be larger than the device memory with the current
    protocol": ``HostKVCache.__init__``, python/sglang/srt/mem_cache/memory_pool_host.py), so that
    a GPU's host DRAM rests only what is left (``PlacementData.unit_host_mirror_gb``); vLLM's CPU
    offloading and TensorRT-LLM's host cache take the blocks the GPU evicts, no copy."""

    mixed: bool
    reserve: float
    bootstrap: bool = False
    decode_reserve_tokens: float = 0.0
    dp_prefill_slowed: bool = False
    host_mirror: bool = False


# Tokens up to which an attention-DP prefill forward of a slowed engine takes the fitted
# slowdown times its price: the budget of every run it was fitted on (SGLang's default
# ``--chunked-prefill-size`` of 8,192 for an instance). Beyond it the forward is slowed by what
# one of that many tokens is, no more: a fixed overhead per forward, as saturated pools of far
# larger forwards measure. SGLang's own large-EP prefill (published_points B1a-c: 32 H100 with
# attention DP at 16,384 tokens a GPU) and DeepSeek's profile (A4, H800, the same budget) measure
# 1.02-1.10 and 1.55 times the throughput the step costs price without any slowdown; with the
# fitted factor of 1.45 on the whole forward, 1.5-1.6 and 2.2 times.
SLOWED_UP_TO_TOKENS = float(PREFILL_TOKENS_PER_RANK)


def slowed_forward(base_s: Array, base_at_budget_s: float | Array, slowdown: float) -> Array:
    """Seconds of a slowed attention-DP prefill forward that the step costs price at ``base_s``:
    ``slowdown`` times that up to the fitted budget's forward (``base_at_budget_s``, the price of
    :data:`SLOWED_UP_TO_TOKENS` tokens), and what that one adds beyond it."""
    return np.asarray(base_s) + (slowdown - 1.0) * np.minimum(base_s, base_at_budget_s)


SGLANG_HOST_RESERVE_GB = 10 * 2**30 / 1e9
"""Host memory SGLang leaves free beside a rank's host KV pool: it refuses a pool of more than
the memory available less 10 GiB (``HostKVCache.__init__``, HICACHE_HOST_MEMORY_RESERVE_BYTES,
python/sglang/srt/mem_cache/memory_pool_host.py). Taken for each GPU: each rank's scheduler process
holds host memory of its own besides, and the ranks of a host allocate one after another."""

ENGINE_RULES = {
    "sglang": EngineRules(
        mixed=False,
        reserve=0.1,
        bootstrap=True,
        decode_reserve_tokens=512.0,
        dp_prefill_slowed=True,
        host_mirror=True,
    ),
    "trt": EngineRules(mixed=True, reserve=1.0),
    "atom": EngineRules(mixed=True, reserve=0.0),  # ATOM schedules as vLLM v1 does
    "vllm": EngineRules(mixed=True, reserve=0.0),
}


@dataclass(frozen=True)
class EngineTables:
    """One deployment as the simulation reads it (see :func:`tables_of`)."""

    agg: bool
    mixed: bool
    n_prefill: int
    n_decode: int
    dec_n: Array
    dec_a: Array
    dec_b: Array
    pf_tokens: Array
    pf_cost: Array
    chunk: float
    pf_chunk: float
    kv_cap: float
    run_cap: int
    reserve: float
    xfer_fixed: float
    xfer_per_token: float
    accept_mean: float
    accept_var: float
    gpus: float
    frontend_s: float = 0.0
    handoff_s: float = 0.0
    recv_every: int = 1  # decode steps between two looks for new requests (aggregated instances)
    bootstrap: bool = False  # a disaggregated prefill server admits a prompt an iteration late
    pf_ranks: float = 1.0  # a prefill pool's attention-DP ranks: a prompt runs on one of them
    dec_reserve: float = 0.0  # a disaggregated decode admission's tokens past a prompt (0: reserve x output)
    dp_prefill_slowed: bool = False  # its prefill pool's forwards carry the fitted attention-DP slowdown
    # an aggregated instance's attention-DP ranks whose context requests wait for each other, at
    # most ``recv_every`` steps (TensorRT-LLM's ``enable_balance``); 0: none
    balance_ranks: float = 0.0
    # a disaggregated design's further decode pools beside this one's (:func:`with_decode_pools`):
    # their instances, step tables, caps, caches and transfers; the prefill side and the engine's
    # rules are this one's
    decode_more: tuple[EngineTables, ...] = ()

    @property
    def pf_lane(self) -> float:
        """Tokens of one prompt a prefill pool's forward takes: its rank's share of the budget
        (no such pool, aggregated: no limit)."""
        return math.inf if self.agg else self.pf_chunk / self.pf_ranks


def with_decode_pools(tables: list[EngineTables], gpus: float) -> EngineTables:
    """One disaggregated deployment of one prefill pool and several decode pools: the first
    ``tables``' prefill side and rules, every one's decode instances (each its own pool's steps,
    caps, cache and transfer), on ``gpus`` GPUs in all. Each of ``tables`` is the prefill pool
    paired with one decode pool (:func:`tables_of`)."""
    first, *more = tables
    return replace(first, decode_more=tuple(more), gpus=gpus)


def slowest_step(tables: list[EngineTables], context: float) -> EngineTables:
    """One decode pool's tables with every batch's step the slowest of ``tables``' at ``context``
    tokens a sequence: an attention-FFN design's attention pool with each of its expert pools
    it reaches (:func:`~dse.sim.from_placement.expert_routes`), the slowest of which paces its step. Each of
    ``tables`` is the same attention pool paired with one expert pool (one batch grid)."""
    first = tables[0]
    if len(tables) == 1:
        return first
    assert all(np.array_equal(t.dec_n, first.dec_n) for t in tables)
    a, b = np.array([t.dec_a for t in tables]), np.array([t.dec_b for t in tables])
    k = np.argmax(a + b * first.dec_n * context, axis=0)
    cols = np.arange(len(first.dec_n))
    return replace(first, dec_a=a[k, cols], dec_b=b[k, cols])


def element(obj: Any, k: int) -> Any:
    """Element ``k`` of a per-element dataclass (a :class:`Deployment`, a pool), as length-1 arrays."""
    if not is_dataclass(obj) or isinstance(obj, type):
        return obj
    changes = {}
    for f in fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[0] > 1:
            changes[f.name] = v[k : k + 1]
        elif is_dataclass(v):
            changes[f.name] = element(v, k)
    return replace(obj, **changes)


def tables_of(d: Deployment, p: PerfParams, engines: list[str], lengths: list[Lengths]) -> list[EngineTables]:
    """Each element of ``d`` as the simulation reads it, with the engine profile named for it."""
    n = len(np.atleast_1d(d.isl))
    if n == 1:  # already one element
        return [_tables(d, p, ENGINE_RULES[engines[0]], lengths[0])]
    return [_tables(element(d, k), p, ENGINE_RULES[engines[k]], lengths[k]) for k in range(n)]


def _tables(d: Deployment, p: PerfParams, rules: EngineRules, lengths: Lengths) -> EngineTables:
    isl, osl, ctx = lengths.mean_isl, lengths.mean_osl, lengths.mean_context
    d = replace(d, isl=np.array([isl]), osl=np.array([osl]))
    cap_seqs = float(kv_capacity_sequences(d.decode, p, np.array([ctx + osl]))[0])
    kv_cap = max(cap_seqs, 0.0) * (ctx + osl)
    run_cap = math.inf if d.max_batch is None else float(np.asarray(d.max_batch).ravel()[0])
    run_cap = int(min(run_cap, max(cap_seqs * 4.0, 1.0), 1 << 20))
    recv_every = 1 if d.recv_interval is None else int(np.asarray(d.recv_interval).ravel()[0])
    balance = 0 if d.adp_balance is None else int(np.asarray(d.adp_balance).ravel()[0])
    ranks = float(np.asarray(d.decode.attn_dp).ravel()[0])
    balance_ranks = ranks if balance > 0 and d.prefill is None and ranks > 1 else 0.0
    if balance_ranks:  # its timer counts iterations as SGLang's looks count decode steps
        recv_every = balance
    n = np.unique(np.round(np.r_[np.arange(1.0, 17.0), np.geomspace(16.0, max(run_cap, 17), 40)]))
    c0 = ctx + 0.5 * osl
    both = decode_step_seconds(d, p, np.r_[n, n], np.r_[np.full_like(n, c0), np.full_like(n, 2.0 * c0)])
    t0, t1 = both[: len(n)], both[len(n) :]
    b = np.maximum((t1 - t0) / (n * c0), 0.0)
    a = t0 - b * n * c0
    per_instance = (
        bool(np.asarray(d.chunk_per_instance).ravel()[0]) if d.chunk_per_instance is not None else False
    )
    dec_chunk = _chunk(d.decode, per_instance)
    pf_chunk = dec_chunk if d.prefill is None else _chunk(d.prefill, per_instance)
    top = max(dec_chunk, pf_chunk, isl) * 1.5
    slowed = rules.dp_prefill_slowed and d.prefill is not None and _ranks(d) > 1.0
    tok = np.unique(np.r_[np.geomspace(16.0, top, 28), isl])
    factor = p.latency.dp_prefill_slowdown if slowed else 1.0
    if d.prefill is None:  # an aggregated instance's prefill: the fitted share of its priced forward
        factor = p.latency.agg_prefill_factor
    pf = prefill_forward_seconds(d, p, tok)
    if slowed:  # slowed up to the fitted budget's forward (the engine check may place larger ones)
        tok, pf, at_budget = _with_budget(tok, pf)
        pf = slowed_forward(pf, at_budget, factor)
    else:
        pf = pf * factor
    mean, var = _accept_moments(float(d.accept_tokens[0]), float(d.draft_tokens[0]))
    xfer_fixed = xfer_tok = 0.0
    if d.prefill is not None:
        nic = float(np.minimum(d.prefill.nic_bytes_per_s, d.decode.nic_bytes_per_s)[0]) * p.nic_eff
        xfer_tok = float(d.decode.kv_bytes_per_token[0]) / nic
        xfer_fixed = float(d.decode.state_bytes[0]) / nic
    gpus = float((d.decode.gpus * d.decode_instances)[0])
    if d.prefill is not None:
        gpus += float((d.prefill.gpus * d.prefill_instances)[0])
    if d.ffn is not None and d.ffn_instances is not None:
        gpus += float((d.ffn.gpus * d.ffn_instances)[0])
    return EngineTables(
        agg=d.prefill is None, mixed=rules.mixed, n_prefill=int(d.prefill_instances[0]),
        n_decode=int(d.decode_instances[0]), dec_n=n, dec_a=a, dec_b=b, pf_tokens=tok, pf_cost=pf,
        chunk=dec_chunk, pf_chunk=pf_chunk, kv_cap=kv_cap, run_cap=run_cap, reserve=rules.reserve,
        xfer_fixed=xfer_fixed, xfer_per_token=xfer_tok, accept_mean=mean, accept_var=var, gpus=gpus,
        frontend_s=p.latency.frontend_s, handoff_s=p.latency.handoff_s, recv_every=recv_every,
        bootstrap=rules.bootstrap, pf_ranks=_ranks(d),
        dec_reserve=rules.decode_reserve_tokens if d.prefill is not None else 0.0,
        dp_prefill_slowed=slowed, balance_ranks=balance_ranks,
    )  # fmt: skip


def _with_budget(tok: Array, pf: Array) -> tuple[Array, Array, float]:
    """The table ``(tok, pf)`` with a point at :data:`SLOWED_UP_TO_TOKENS` on its line there (the
    same prices below it, to rounding) and the price it reads there."""
    at = float(np.interp(SLOWED_UP_TO_TOKENS, tok, pf))
    if SLOWED_UP_TO_TOKENS in tok or SLOWED_UP_TO_TOKENS > tok[-1]:
        return tok, pf, at
    k = int(np.searchsorted(tok, SLOWED_UP_TO_TOKENS))
    return np.insert(tok, k, SLOWED_UP_TO_TOKENS), np.insert(pf, k, at), at


def _ranks(d: Deployment) -> float:
    """A prefill pool's attention-DP ranks (1: tensor-parallel attention, or no prefill pool)."""
    return 1.0 if d.prefill is None else max(float(np.asarray(d.prefill.attn_dp).ravel()[0]), 1.0)


def _chunk(pool: Any, per_instance: bool) -> float:
    """Prompt tokens one forward takes: the engine's chunk on every attention-DP rank, or once
    per instance (:func:`~dse.perf.serving.prefill_batch_tokens`)."""
    return float(
        PREFILL_TOKENS_PER_RANK * (1.0 if per_instance else float(np.asarray(pool.attn_dp).ravel()[0]))
    )


def _accept_moments(mean: float, drafts: float) -> tuple[float, float]:
    """Mean and variance of the tokens one verification step emits: ``1 + K`` where ``K``, the
    accepted drafts, has ``P(K >= k) = a^k`` up to ``drafts``; ``a`` is the rate that gives ``mean``."""
    n = int(round(drafts))
    if n <= 0 or mean <= 1.0:
        return 1.0, 0.0
    lo, hi = 0.0, 1.0 - 1e-9
    for _ in range(60):  # mean rises with a
        a = 0.5 * (lo + hi)
        lo, hi = (a, hi) if sum(a**k for k in range(n + 1)) < mean else (lo, a)
    a = 0.5 * (lo + hi)
    t = np.arange(1, n + 2, dtype=float)
    prob = np.array([a ** (k - 1) * (1.0 - a) for k in range(1, n + 1)] + [a**n])
    m = float((t * prob).sum())
    return m, float((t * t * prob).sum() - m * m)
