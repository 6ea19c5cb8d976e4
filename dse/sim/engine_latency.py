"""The engine-level latency of a placed design: its pools as engine instances, every request
through their schedulers (:mod:`dse.perf.latency`) under Poisson arrivals at the design's traffic.

Aggregated pools serve independent shares of the traffic (each its own ``requests_per_s``), so
each is simulated alone and their requests pooled; a disaggregated design with one prefill pool
and one decode pool (or one attention and one expert pool) is one deployment. Prefill pools of
several shapes or hardware, and a four-stage design's midfill pool, are simulated as one of the
busiest one's shape with the same capacity (:func:`_one_prefill_pool`). Decode pools of several
shapes or hardware are one deployment with the prefill pool: any prefill instance hands a
prompt's KV to any decode instance, the one whose requests fill the smallest share of its slots
(each instance its own pool's steps, cap, cache and transfer:
:func:`~dse.perf.latency_tables.with_decode_pools`), and a target is met by each decode pool's
requests (:meth:`DesignLatency.worst`). Until 2026-12-06 each decode pool was simulated apart
with a whole share of the prefill instances, and a design whose shares did not come out whole
within a fifth was not simulated: 42 of the 192 cheapest designs of
``benchmarks/engine_agreement.py``, all with two to four decode pools.

An attention-FFN design's attention pools are its decode pools so, each stepping at its own
table, paced by the slowest of the expert pools it reaches, each at its share of the attention
instance's tokens and over the link the placement put it on
(:func:`~dse.sim.from_placement.expert_routes`, as the fluid model steps them).
Until 2026-12-06 a design of several attention or expert pools (after those of one shape and
batch are counted as one, :func:`~dse.sim.from_placement.one_per_shape`) was not simulated: 96
of the 152 attention-FFN designs that ``benchmarks/engine_agreement.py`` places.

* Returning turns wait for their prefix to come back (the placement's mean reload seconds, a
  pure delay), then prefill only their suffix and hold the prefix in the KV cache, which their
  decode steps read. Those whose KV the placement dropped (its pools' ``recompute_per_s``)
  prefill prefix and suffix whole, as one long prompt through the chunks; until 2026-12-07 they
  prefilled only their suffix after a delay of the recompute's time, which took no forward from
  the prompts queued behind it.
* A prefill forward takes the placement's chunk (the fresh prompts it batches,
  ``prefill_batch_requests``, times their length) of new tokens; each decode instance runs at
  most the batch the placement sized it for, as the fluid model does.
* A fleet is simulated whole, every request routed to the least loaded instance, so that its
  instances share their slots and queues as they do behind a router; one whose window would need
  more than ``MAX_REQUESTS`` is simulated as a slice of about the share it needs, each instance at
  the traffic it has in the whole (Poisson arrivals split evenly stay Poisson; :func:`_slice`). Slicing
  further would treat instances as if no router balanced them with the rest: 35 four-GPU GLM-4.6
  instances (H200, 20 requests/s), each simulated alone, queued for decode slots to 4.1 s at p99
  where the whole fleet holds 0.26 s.
* The window holds three end-to-end latencies at the targets (2,000 to 10,000 requests, or up
  to ``LONGEST`` where no slice brings it within 10,000); its first third, while the batches
  fill from empty, is left out of the percentiles.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, fields, replace

import numpy as np

from dse.catalog import Catalog
from dse.perf.afd import attention_side, ffn_side
from dse.perf.latency import percentile_of, simulate_latency
from dse.perf.latency_inputs import LOW_OF_NOMINAL, Lengths, Load
from dse.perf.latency_tables import EngineTables, slowest_step, tables_of, with_decode_pools
from dse.perf.memo import Memo
from dse.perf.params import PerfParams
from dse.perf.pool import Pool, build_pool
from dse.perf.serving import Deployment, dealt_over_pools
from dse.sim.from_placement import SimDesign, SimPool, expert_routes, one_per_shape, shape_of
from dse.units import Precision
from dse.workload import Workload

MIN_REQUESTS, MAX_REQUESTS = 2000, 10_000  # a design's window: about 3-17 ms of simulation
# a window no slice brings within MAX_REQUESTS (instance counts with no common divisor) grows to
# what it needs up to this many; until 2026-12-06 it was cut at MAX_REQUESTS, and 108 of the 536
# designs ``benchmarks/engine_agreement.py`` simulates then measured batches still filling
LONGEST = 50_000
# a design's window holds three times the requests its targets allow in flight: the first third
# fills the batches, the rest is measured
WINDOWS = 3.0
SEED = 0


@dataclass(frozen=True)
class Deployed:
    """One deployment the simulation runs as one (:func:`_tables`): per decode pool (an
    attention-FFN design's attention pool), its deployment with the prefill pool and each expert
    pool it reaches (:func:`~dse.sim.from_placement.expert_routes`; one where there are none), and all its
    GPUs."""

    pools: tuple[tuple[Deployment, ...], ...]
    gpus: float


@dataclass(frozen=True)
class DesignLatency:
    """Per-request latency of a design's simulated window, all pools' requests together."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2el_s: np.ndarray
    warning: str | None
    groups: tuple[int, ...] = ()  # each simulated share's requests, in the arrays' order

    def percentile(self, metric: str, q: float) -> float:
        """Over every request of the design, its pools' together."""
        values = {"ttft": self.ttft_s, "tpot": self.tpot_s, "e2el": self.e2el_s}[metric]
        return percentile_of(metric, values, q)

    def worst(self, metric: str, q: float) -> float:
        """The percentile of the share that fares worst: what every pool's requests meet. A target
        is met by every pool, not by their mix: an aggregated H200 pool given a tenth of the
        traffic queued without bound (TTFT p50 about 6 s) beside B200 pools that kept the whole
        design's p50 at 0.18 s."""
        return max(percentile_of(metric, v, q) for v in self._shares(metric))

    def worst_mean(self, metric: str) -> float:
        """The mean of the share that fares worst (:meth:`worst`): a TPOT target is the pace a
        design's decode steps at, held on the mean (a study's TPOT constraint reads the fluid
        model's mean over all the pools)."""
        return max(float(np.nanmean(v)) for v in self._shares(metric))

    def _shares(self, metric: str) -> list[np.ndarray]:
        """``metric``'s values of each simulated share (all of them where there is one)."""
        values = {"ttft": self.ttft_s, "tpot": self.tpot_s, "e2el": self.e2el_s}[metric]
        if len(self.groups) <= 1:
            return [values]
        ends = np.cumsum((0, *self.groups))
        return [values[a:b] for a, b in zip(ends[:-1], ends[1:], strict=True)]


def placed_chunk(tables: EngineTables, tokens: float) -> EngineTables:
    """``tables`` with the placement's prefill budget (``tokens``: the fresh prompts its forward
    batches); under attention data parallelism a prompt keeps its rank's share of it
    (:attr:`~dse.perf.latency_tables.EngineTables.pf_lane`)."""
    chunk = max(tokens, 1.0)
    return replace(tables, chunk=chunk, pf_chunk=chunk)


def design_latency(
    design: SimDesign,
    catalog: Catalog,
    params: PerfParams,
    seed: int = SEED,
    *,
    output_mix: tuple[tuple[float, float], ...] = (),
) -> DesignLatency | None:
    """The design's requests simulated at its mean traffic, or None where it cannot be (above);
    with ``output_mix`` (``((share, mean tokens), ...)``: ``dse simulate --lengths``) their
    output lengths are that mixture of exponentials rather than the workload's. A design met
    before (half the headline study's checks) is answered from :data:`_DESIGNS`."""
    # everything it reads but the resting KV classes (a returning turn's reload is its pools')
    key = (replace(design, resting=()), id(catalog), id(params), seed, output_mix)
    return _DESIGNS.get(
        key, (catalog, params), lambda: _design_latency(design, catalog, params, seed, output_mix)
    )


def _design_latency(
    design: SimDesign,
    catalog: Catalog,
    params: PerfParams,
    seed: int,
    output_mix: tuple[tuple[float, float], ...],
) -> DesignLatency | None:
    w, slo = design.workload, design.slo
    mean_output = sum(a * b for a, b in output_mix) if output_mix else w.output_tokens
    e2e_s = slo.ttft_s + mean_output * slo.tpot_s
    groups = _deployments(design, catalog, params, e2e_s)
    if not groups:
        return None
    mean = (1.0 + LOW_OF_NOMINAL) / 2.0
    lengths = Lengths(
        w.input_tokens / mean,
        w.output_tokens / mean,
        returning_share=w.returning_share,
        prefix=w.cached_prefix_tokens,
        suffix=w.suffix_tokens / mean,
        reload_s=_reload_s(design),
        output_mix=output_mix,
        recompute_share=_recompute_share(design),
    )
    runs: list[_Steady] = []
    for d, rate, batch_requests in groups:
        tables = _tables(d, params, design.engine, lengths)
        if batch_requests > 0:
            tables = placed_chunk(tables, batch_requests * w.input_tokens)
        n = _window(rate, e2e_s)
        load = Load("poisson", rate=rate)
        runs.append(
            _RUNS.get(_run_key(tables, load, lengths, n, seed), None, _steady(tables, load, lengths, n, seed))
        )
    # a share of the traffic simulated alone (a pool's, or a slice of its instances) says its own
    # rates: named as the design's, 30.2 of 86 requests/s had read "30.2 requests/s arrive and the
    # deployment serves 23.8"
    total = w.requests_per_s
    warnings = [
        r.warning
        if math.isclose(rate, total, rel_tol=1e-6)
        else f"a share of the design simulated alone ({rate:.3g} of its {total:.3g} requests/s, on "
        f"its instances for them): {r.warning}"
        for r, (_, rate, _) in zip(runs, groups, strict=True)
        if r.warning
    ]
    return DesignLatency(
        ttft_s=np.concatenate([r.ttft_s for r in runs]),
        tpot_s=np.concatenate([r.tpot_s for r in runs]),
        e2el_s=np.concatenate([r.e2el_s for r in runs]),
        warning=warnings[0] if warnings else None,
        groups=tuple(n for r in runs for n in r.groups),
    )


def _tables(d: Deployed, params: PerfParams, engine: str, lengths: Lengths) -> EngineTables:
    """The simulation's tables of a deployment: each decode pool's with its slowest expert pool's
    step (:func:`~dse.perf.latency_tables.slowest_step`), several decode pools joined
    (:func:`~dse.perf.latency_tables.with_decode_pools`)."""
    context = lengths.mean_context + 0.5 * lengths.mean_osl  # where the tables' steps are read
    parts = [
        slowest_step([tables_of(x, params, [engine], [lengths])[0] for x in s], context) for s in d.pools
    ]
    return with_decode_pools(parts, d.gpus)


@dataclass(frozen=True)
class _Steady:
    """One simulation's requests after the first third, which arrives while the batches fill: a
    queue that is still growing shows in the last (its requests finish as the batches drain,
    which hardly moves their TTFT)."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2el_s: np.ndarray
    warning: str | None
    groups: tuple[int, ...]  # each decode pool's requests, in the arrays' order (one pool: all)


# A study's trials run the same simulation again and again (a decode cap past what the KV cache
# holds changes nothing; a third of the headline study's checks repeat one exactly): a pure
# function of its inputs, each kept once (about 80 kB a simulation of 5,000 requests).
_RUNS = Memo(256)
# A study's trials place the same design again and again (489 distinct of 975 checks in 1,000
# trials of the headline study): the deployments, tables and run keys it builds around a memoised
# run are kept per design as well. Its arrays are its runs' (read-only) joined once.
_DESIGNS = Memo(256)


def _steady(tables: EngineTables, load: Load, lengths: Lengths, n: int, seed: int) -> Callable[[], _Steady]:
    def run() -> _Steady:
        lat = simulate_latency(tables, load, lengths, requests=n, seed=seed, windows=WINDOWS)
        k = np.arange(len(lat.ttft_s) // 3, len(lat.ttft_s))
        groups: tuple[int, ...] = (len(k),)
        if lat.pool is not None:  # each decode pool's requests together, for the worst pool's figure
            k = k[np.argsort(lat.pool[k], kind="stable")]
            groups = tuple(int(c) for c in np.bincount(lat.pool[k]) if c > 0)
        return _Steady(lat.ttft_s[k], lat.tpot_s[k], lat.e2el_s[k], lat.warning, groups)

    return run


def _run_key(tables: EngineTables, load: Load, lengths: Lengths, n: int, seed: int) -> Hashable:
    """Everything one simulation reads, exactly: every table field (arrays as their bytes, a
    further decode pool's tables as their fields), the load, the lengths, the window and the seed."""
    return _table_key(tables), load, lengths, n, seed, WINDOWS


def _table_key(tables: EngineTables) -> Hashable:
    def key(v: object) -> Hashable:
        if isinstance(v, np.ndarray):
            return v.dtype.str, v.shape, v.tobytes()
        if isinstance(v, tuple):
            return tuple(_table_key(t) for t in v)
        return v  # type: ignore[return-value]

    return tuple(key(getattr(tables, f.name)) for f in fields(tables))


def _reload_s(design: SimDesign) -> float:
    """Seconds a returning turn's prefix takes to come back, the placement's mean over the pools
    that prefill returning turns (weighted by how many each reloads)."""
    pools = [p for p in design.pools if p.returning_per_s > 0 and p.reload_s is not None]
    weight = [max(p.returning_per_s - p.recompute_per_s, 0.0) for p in pools]
    total = sum(weight)
    return (
        sum(w * float(p.reload_s or 0.0) for w, p in zip(weight, pools, strict=True)) / total
        if total > 0
        else 0.0
    )


def _recompute_share(design: SimDesign) -> float:
    """The share of the returning turns whose KV the placement dropped, over its pools."""
    back = sum(p.returning_per_s for p in design.pools)
    return min(sum(p.recompute_per_s for p in design.pools) / back, 1.0) if back > 0 else 0.0


def new_tokens(w: Workload) -> float:
    """Prompt tokens a request prefills, on average: a fresh prompt, or a returning turn's suffix."""
    return (1.0 - w.returning_share) * w.input_tokens + w.returning_share * w.suffix_tokens


def _window(rate: float, e2e_s: float) -> int:
    """Requests in a window at ``rate`` (a slice's, :func:`_slice`): three end-to-end latencies'
    worth, at least ``MIN_REQUESTS``, at most ``LONGEST`` where no slice could bring it within
    ``MAX_REQUESTS``."""
    return int(np.clip(WINDOWS * rate * e2e_s, MIN_REQUESTS, LONGEST))


def _deployments(
    design: SimDesign, catalog: Catalog, params: PerfParams, e2e_s: float
) -> list[tuple[Deployed, float, float]]:
    """(deployment, requests/s, prompts per prefill forward) per independently served share of
    the traffic, sliced where it must be (above); [] if unsupported."""
    by_role: dict[str, list[SimPool]] = {}
    for p in design.pools:
        by_role.setdefault(p.role, []).append(p)
    if set(by_role) == {"mixed"}:
        out: list[tuple[Deployed, float, float]] = []
        for p in by_role["mixed"]:
            if p.requests_per_s > 0:
                (one,), g = _slice((p,), p.requests_per_s, e2e_s)
                deployed = Deployed(((_deployment(design, catalog, params, None, one),),), _gpus(one))
                out.append((deployed, p.requests_per_s / g, p.prefill_batch_requests))
        return out
    pre, dec = by_role.get("prefill", []) + by_role.get("midfill", []), by_role.get("decode", [])
    att, ffn = one_per_shape(by_role.get("attention", [])), one_per_shape(by_role.get("ffn", []))
    if len(pre) > 1:
        pre = [_one_prefill_pool(pre)]
    rate = design.workload.requests_per_s
    if len(pre) == 1 and dec and not att and not ffn:  # every prefill instance hands off to any decode one
        (p, *ds), g = _slice((pre[0], *dec), rate, e2e_s)
        each = tuple((_deployment(design, catalog, params, p, x),) for x in ds)
        return [(Deployed(each, _gpus(p, *ds)), rate / g, p.prefill_batch_requests)]
    if len(pre) == 1 and att and ffn and not dec:  # each attention pool as a decode pool, above
        (p, *rest), g = _slice((pre[0], *att, *ffn), rate, e2e_s)
        attention, reached = sum(q.instances for q in att), expert_routes(design)

        def with_experts(whole: SimPool, a: SimPool) -> tuple[Deployment, ...]:  # each pool it reaches
            routes = reached[shape_of(whole)]
            # each expert pool as many instances as this slice of the attention pool counts beside
            beside = [replace(r.pool, instances=a.instances * r.instances / attention) for r in routes]
            each = [
                replace(_deployment(design, catalog, params, p, a, f), ffn_in_domain=np.array([r.near]))
                for f, r in zip(beside, routes, strict=True)
            ]
            return tuple(dealt_over_pools(each, [r.share for r in routes]))

        pools = tuple(with_experts(w, a) for w, a in zip(att, rest[: len(att)], strict=True))
        return [(Deployed(pools, _gpus(p, *rest)), rate / g, p.prefill_batch_requests)]
    return []


def _gpus(*pools: SimPool) -> float:
    return float(sum(p.instances * p.gpus for p in pools))


def unsimulated(design: SimDesign) -> str:
    """Why :func:`design_latency` cannot run ``design`` request by request (it returns None), in
    words: a layout of pools :func:`_deployments` does not know."""
    return "a layout of pools it does not run: " + ", ".join(sorted({p.role for p in design.pools}))


def _one_prefill_pool(pools: list[SimPool]) -> SimPool:
    """Prefill pools of several shapes as one: the busiest one's shape, each pool's instances
    counted as that shape's by their speed (:func:`_as_top`), their traffic summed."""
    top = max(pools, key=lambda p: p.requests_per_s)
    worth = sum(p.instances * _as_top(p, top) for p in pools if p.prefill_busy_s)
    if not top.prefill_busy_s or worth <= 0:
        return top
    return replace(
        top,
        instances=max(1.0, math.ceil(worth - 1e-9)),
        requests_per_s=sum(p.requests_per_s for p in pools),
        returning_per_s=sum(p.returning_per_s for p in pools),
        recompute_per_s=sum(p.recompute_per_s for p in pools),
    )


def _as_top(p: SimPool, top: SimPool) -> float:
    """How many of ``top``'s instances one of ``p``'s is worth: one where they are the same
    shape, else by their busy seconds per fresh prompt (per prompt of their own mixes where
    either takes none). Until 2026-12-07 every pool was counted by its own mix's busy seconds:
    a pool recomputing dropped 12,000-token prefixes (11 H200 TP8 instances) counted as 1.6 of
    the fresh-prompt pool of its shape beside it, and the check queued its prompts to 102 s."""
    same = ("hardware", "gpus", "attn_tp", "ep")
    if all(getattr(p, k) == getattr(top, k) for k in same):
        return 1.0
    if p.fresh_busy_s and top.fresh_busy_s:
        return top.fresh_busy_s / p.fresh_busy_s
    return (top.prefill_busy_s or 0.0) / (p.prefill_busy_s or math.inf)


def _slice(pools: tuple[SimPool, ...], rate: float, e2e_s: float) -> tuple[tuple[SimPool, ...], float]:
    """The pools cut to a slice whose window (:func:`_window`) stays within ``MAX_REQUESTS``, and
    what the traffic divides by for it: whole where that fits; one pool, about its instances over
    the cut needed, at their share of the traffic; several, their counts divided by the smallest
    common divisor at or above the cut needed, else by the greatest (its window then longer, up to
    ``LONGEST``), so that each instance sees the traffic it does in the whole."""
    counts = [max(int(round(p.instances)), 1) for p in pools]
    need = WINDOWS * rate * e2e_s / MAX_REQUESTS  # the cut that brings the window within
    if need <= 1.0:
        kept, cut = counts, 1.0
    elif len(counts) == 1:
        kept = [max(1, round(counts[0] / need))]
        cut = counts[0] / kept[0]
    else:
        top = math.gcd(*counts)
        d = next((d for d in range(1, top + 1) if top % d == 0 and d >= need), top)
        kept, cut = [c // d for c in counts], float(d)
    return tuple(replace(p, instances=float(k)) for p, k in zip(pools, kept, strict=True)), cut


def _pool(design: SimDesign, catalog: Catalog, params: PerfParams, p: SimPool) -> Pool:
    return build_pool(
        catalog.model(design.model),
        [catalog.hardware(p.hardware)],
        gpus=[p.gpus],
        attn_tp=[p.attn_tp],
        ep=[p.ep],
        weight_precision=[Precision(design.weight_precision)],
        kv_precision=[params.engine(design.engine).kv_precision],
        engines=params.kernel_engines([design.engine]),
    )


def _deployment(
    design: SimDesign,
    catalog: Catalog,
    params: PerfParams,
    prefill: SimPool | None,
    decode: SimPool,
    ffn: SimPool | None = None,
) -> Deployment:
    engine = design.engine_of(params)
    drafts = float(engine.mtp_draft_tokens) if design.mtp else 0.0
    w = design.workload

    def one(x: float) -> np.ndarray:
        return np.array([float(x)])

    dec_pool = _pool(design, catalog, params, decode)
    return Deployment(
        prefill=None if prefill is None else _pool(design, catalog, params, prefill),
        decode=attention_side(dec_pool) if ffn is not None else dec_pool,
        prefill_instances=one(prefill.instances if prefill is not None else 1.0),
        decode_instances=one(decode.instances),
        isl=one(new_tokens(w)),
        osl=one(w.output_tokens),
        speed=one(engine.speed),
        draft_tokens=one(drafts),
        accept_tokens=one(engine.accept_tokens(drafts)),
        chunk_per_instance=np.array([engine.prefill_chunk_per_instance]),
        ffn=None if ffn is None else ffn_side(_pool(design, catalog, params, ffn)),
        ffn_instances=None if ffn is None else one(ffn.instances),
        ffn_same_hardware=None if ffn is None else np.array([ffn.hardware == decode.hardware]),
        max_batch=one(max(np.ceil(decode.decode_batch), 1.0)),
    )
