"""Latency distributions: per-request TTFT, TPOT and end-to-end latency from an engine-level
serving simulation, and their percentiles.

The step costs are the performance model's (:mod:`dse.perf.serving`, :mod:`dse.perf.stages`),
tabulated once per deployment (:func:`~dse.perf.latency_tables.tables_of`); the simulation
(:mod:`dse.perf.engine_kernel`) runs every request through the engines' schedulers. What it
follows, and from where:

* continuous batching with chunked prefill under a token budget per forward, a cap on running
  requests and KV-capacity admission: SGLang ``scheduler.py`` (``get_next_batch_to_run`` runs a
  prefill batch whenever one can be formed, else a decode step; ``PrefillAdder`` admits while
  the chunk budget and the KV cache last; ``--max-running-requests``), vLLM v1
  ``core/sched/scheduler.py`` (one token budget per step shared by the running requests' decode
  tokens and new prefill chunks) and TensorRT-LLM's inflight batching (``max_num_tokens``,
  context chunking beside generation);
* KV admission reserves the prompt plus a share of the output
  (:data:`~dse.perf.latency_tables.ENGINE_RULES`); an overflow preempts the newest running
  request, which recomputes (vLLM ``_preempt``, SGLang ``retract_decode``);
* MTP: each verification step emits the accepted prefix of its drafts plus one token, drawn per
  request (its step count is the sum of its steps' draws, by the central limit theorem);
* SGLang's ``--scheduler-recv-interval N`` (``scheduler_recv_skipper.py``): the scheduler looks
  for new requests after a prefill forward, when idle, and otherwise only every ``N`` decode
  steps, so a request arriving during a decode stretch waits for the next look (InferenceX's
  B200 SGLang DeepSeek-R1 scripts set 30 from 16 clients up: half of 30 steps of 25-35 ms);
* TensorRT-LLM's attention-DP balance (``attention_dp_config``, ``enable_balance``;
  ``py_executor.py``: ``_balance_adp_requests``) holds an aggregated instance's context requests
  until every rank has one, some rank has none decoding, or ``timeout_iters`` iterations passed
  since it last let them in (InferenceX's scripts set 60 with attention DP);
* load and lengths: :mod:`dse.perf.latency_inputs`;
* SGLang's disaggregated prefill server hand-shakes each request with the decode server before
  batching it (``disaggregation/prefill.py``: ``PrefillBootstrapQueue.pop_bootstrapped``, polled
  once per loop iteration, after the requests are received): a prompt arriving during a forward
  misses the next one when others fill it;
* attention data parallelism pins a prompt to one rank, whose share of the forward's token budget
  is the instance's over the ranks (SGLang ``server_args.py``: ``chunked_prefill_size //
  dp_size``): a prefill pool's forward takes at most that much of any one prompt;
* SGLang's disaggregated decode server admits a request while its KV cache holds the prompt plus
  ``SGLANG_NUM_RESERVED_DECODE_TOKENS`` (512) for each request it holds
  (``disaggregation/decode.py``: ``DecodePreallocQueue._allocatable_tokens``);
* SGLang's attention-DP prefill servers take a fitted multiple of the step costs' forward
  (:attr:`~dse.perf.params.LatencyParams.dp_prefill_slowdown`; not read from its source: its runs
  measured it, :mod:`dse.calibration.latency`);
* an aggregated instance's prefill forwards take a fitted share of the step costs' forward
  (:attr:`~dse.perf.params.LatencyParams.agg_prefill_factor`: the step costs price a
  tensor-parallel prefill's all-reduces at decode's small-message bandwidth;
  :mod:`dse.calibration.latency`);
* closed loop, a fresh server's first burst: the first wave waits ``cold_start_s`` (fitted per
  engine and GPU vendor) before the engine serves it (:func:`simulate_latency`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace

import numpy as np

from dse.errors import InputError
from dse.perf.engine_kernel import simulate
from dse.perf.latency_inputs import Lengths, Load, draw_requests
from dse.perf.latency_tables import EngineTables
from dse.perf.pool import Array
from dse.quantiles import percentile
from dse.units import counted, percentile_label, share_of

PERCENTILES = (50.0, 90.0, 99.0)
MAX_REQUESTS = 200_000  # a simulated window's cap (about 0.3 s and 30 MB)
# an open loop's window must hold this many times the requests in flight, so that its filling and
# draining ends (one population each) are at most a fifth of it
STEADY_WINDOWS = 10
# an open loop whose queue grows while it serves this share less than arrives is overloaded (a
# window that is merely short serves what arrives, within a few percent, as its batches fill)
OVERLOAD_SHORTFALL = 0.05
# an open loop whose KV held at once on average (Little's law) reaches this share of the cache is
# not steady: its longest requests' swings fill the cache (:func:`_kv_checked`)
KV_NEAR = 0.8
LONG_TAIL_SPREAD = 2.0  # E[output^2] / E[output]^2 of a long tail (exponential lengths': 2)
OPEN_REQUESTS = 2000  # an open loop's first window when the caller names no count
# a closed loop whose served rate times its mean end-to-end latency (Little's law) falls this share
# short of its clients is not steady: steady windows reach 0.97-0.99 of them (the first wave's
# wait and the clients' loop offsets are the rest), a long tail of sigma 1 0.75 (B200, 64 clients)
LITTLE_SHORTFALL = 0.1
GROW_ROUNDS = 4  # times an open loop's default window may grow to hold its requests in flight
BENCHMARK_PROMPTS_PER_CLIENT = 10  # InferenceX: --num-prompts $(( CONC * 10 ))


def percentile_of(metric: str, values: Array, q: float) -> float:
    """The ``q``-th percentile of per-request ``values`` of ``metric``. A request never served has
    no TTFT or end-to-end latency (nan): it counts as infinitely late, so a window that could not
    serve everyone cannot report a good tail; a TPOT is nan only where there is none (one output
    token), and is left out. ``q`` outside (0, 100) is refused: p0 and p100 are the window's
    extremes, which a larger window moves without bound, not a figure to set a target on."""
    if isinstance(q, bool) or not isinstance(q, (int, float, np.integer, np.floating)) or not 0 < q < 100:
        raise InputError("percentile", metric, "must be a number in (0, 100)", q)
    if metric == "tpot":
        values = values[np.isfinite(values)]
    else:
        values = np.where(np.isnan(values), np.inf, values)
    return percentile(values, q)


@dataclass(frozen=True)
class Latency:
    """Per-request figures of one simulated run (seconds), and what the run served."""

    ttft_s: Array
    tpot_s: Array  # (end-to-end - TTFT) / (output tokens - 1), benchmark_serving's definition
    e2el_s: Array
    output_tokens: Array
    requests_per_s: float
    output_tokens_per_s_per_gpu: float
    preempted: int
    warning: str | None
    cold_start_s: float = 0.0  # the first wave's wait on a fresh server (closed loop), 0 if none
    first_wave: int = 0  # requests 0..first_wave-1 were sent at once at the start (closed loop)
    # an open loop's arrivals per second over the middle half of its arrivals, the interval whose
    # completions ``requests_per_s`` counts; nan for a closed loop (its clients wait for answers)
    offered_requests_per_s: float = math.nan
    # an open loop whose queue grows through the window while the deployment serves
    # :data:`OVERLOAD_SHORTFALL` less than arrives: its percentiles grow with the window
    overloaded: bool = False
    # an open loop's KV held at once on average over its decode instances' caches (Little's law:
    # :func:`_kv_checked`); nan for a closed loop
    kv_held_share: float = math.nan
    # the decode pool each request decoded on (0: the tables' own, k: their ``decode_more[k - 1]``),
    # where the tables have several; None otherwise
    pool: Array | None = None

    def percentile(self, metric: str, q: float) -> float:
        values = {"ttft": self.ttft_s, "tpot": self.tpot_s, "e2el": self.e2el_s}[metric]
        return percentile_of(metric, values, q)

    def summary(self, percentiles: tuple[float, ...] = PERCENTILES) -> dict[str, float]:
        """``ttft_p50_s``, ``tpot_p99_ms``, ``e2el_p99.9_s``, ... for each percentile, named with
        the digits it was given (:func:`~dse.units.percentile_label`)."""
        out: dict[str, float] = {}
        for metric, unit, scale in (("ttft", "s", 1.0), ("tpot", "ms", 1e3), ("e2el", "s", 1.0)):
            for q in percentiles:
                out[f"{metric}_{percentile_label(q)}_{unit}"] = self.percentile(metric, q) * scale
        return out


def simulate_latency(
    t: EngineTables,
    load: Load,
    lengths: Lengths,
    requests: int = 0,
    seed: int = 0,
    cold_start_s: float = 0.0,
    windows: float = STEADY_WINDOWS,
    loop_s: float | None = None,
) -> Latency:
    """Simulate ``requests`` requests (0: ten per client in a closed loop, as InferenceX; a trace's
    own count; for Poisson or bursty arrivals 2,000, or as many more as make the window hold
    ``windows`` times the requests in flight, by Little's law the arrival rate times the mean
    end-to-end latency, grown up to :data:`GROW_ROUNDS` times, an overloaded one once) and
    return each one's latency.

    Closed loop, the engine starts ``cold_start_s`` after the clients (a fresh server tuning its
    kernels for the first burst, :attr:`~dse.perf.params.LatencyParams.cold_start_s`): the whole
    run is the simulated one shifted that much later, so the first wave's TTFT and end-to-end
    latency grow by it, and every later request, sent when one finishes, is as simulated. A
    client sends its next request when the last token reaches it, so that request reaches the
    engine the tables' offsets (:attr:`EngineTables.frontend_s`, and the hand-off disaggregated)
    after the engine finished the last, or ``loop_s`` after where given (the calibration replays
    runs without the offsets, which it fits afterwards, and with the clients' loop at given ones).

    An open loop's window shorter than ``windows`` times the requests in flight warns
    (:func:`_steady_warning`): a caller that reads only its steady middle asks for fewer."""
    for key, value in (("requests", requests), ("seed", seed)):  # (-5 requests had run the default,
        # a seed of -1 raised numpy's own ValueError)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            rule = "must be a whole number >= 0" + (" (0: the load's own count)" if key == "requests" else "")
            raise InputError("simulate_latency", key, rule, value)
    grow = requests <= 0 and load.kind in ("poisson", "bursty")
    if requests <= 0:
        requests = (
            # ten per client, as many clients as the loop runs
            int(min(BENCHMARK_PROMPTS_PER_CLIENT * max(1, round(load.concurrency)), MAX_REQUESTS))
            if load.kind == "closed"
            else OPEN_REQUESTS
        )
    requests = min(requests, MAX_REQUESTS)
    lat = _window(t, load, lengths, requests, seed, cold_start_s, windows, loop_s)
    # Little's law on the window: the requests in flight at once. A first window's are fewer than
    # a steady load's (its ends fill and drain), so a grown one may need more again. An overloaded
    # window grows once, to span many requests' time and so measure what the deployment serves;
    # then no more, as its requests in flight grow with it and its percentiles only rise
    for rounds in range(GROW_ROUNDS if grow else 0):
        served = lat.e2el_s[np.isfinite(lat.e2el_s)]
        if (lat.overloaded and rounds) or not served.size or requests >= MAX_REQUESTS:
            break
        steady = int(np.ceil(1.5 * windows * load.rate * float(np.mean(served))))
        if steady <= requests:
            break
        requests = min(steady, MAX_REQUESTS)
        lat = _window(t, load, lengths, requests, seed, cold_start_s, windows, loop_s)
    return _kv_checked(t, load, lengths, lat)


def _kv_checked(t: EngineTables, load: Load, lengths: Lengths, lat: Latency) -> Latency:
    """``lat`` with what an open loop's KV cache says of its steady state (``kv_held_share``): the
    KV the load holds at once on average (Little's law: arrivals per second x
    :attr:`Lengths.mean_kv_steps` x seconds per output token) at or past the decode instances'
    caches is overloaded, and from :data:`KV_NEAR` of them not steady under a long tail of output
    lengths, however calm the window. A long tail's few longest requests, rarer than a window
    holds and decoding for longer than it lasts, hold most of that KV: the window had looked
    steady where a longer one queues without bound."""
    per_token = lat.tpot_s[np.isfinite(lat.tpot_s)]
    cache = sum(c.kv_cap * c.n_decode for c in (t, *t.decode_more))  # tokens
    if load.kind == "closed" or not per_token.size or not cache > 0:
        return lat
    if load.kind == "trace":  # its own requests, at the rate they arrive
        assert load.trace is not None
        isl, osl = load.trace.isl, load.trace.osl
        steps, rate = float(np.mean((isl + 0.5 * osl) * osl)), lat.offered_requests_per_s
        spread = float(np.mean(osl * osl) / np.mean(osl) ** 2)
    else:
        steps, rate = lengths.mean_kv_steps, load.rate
        spread = lengths.mean_square_osl / lengths.mean_osl**2
    held = rate * steps * float(np.mean(per_token))
    if load.kind == "trace":  # a replay holds at most every request of its own at once (three
        # 8,000-token prompts 10 ms apart had been "150 requests/s: 825% of the cache", overloaded)
        assert load.trace is not None
        held = min(held, float(np.sum(load.trace.isl + load.trace.osl)))
    lat = replace(lat, kv_held_share=held / cache)
    # near the cache, only a long tail's swings fill it (uniform lengths at 88% of it hold steady
    # over 120,000 requests): output lengths whose coefficient of variation is 1 or more
    near = held >= KV_NEAR * cache and spread >= LONG_TAIL_SPREAD
    if lat.overloaded or not np.isfinite(lat.e2el_s).all() or not (held >= cache or near):
        return lat  # (the window's own verdict first)
    n = counted(len(lat.e2el_s), "request")
    figures = (
        f"at {rate:.3g} requests/s these lengths hold {held:.3g} tokens of KV at once on average "
        f"(Little's law: {steps:.3g} token-steps a request x {float(np.mean(per_token)) * 1e3:.3g} ms "
        f"an output token), {share_of(held / cache)} the {cache:.3g} the deployment's KV cache holds"
    )
    if held >= cache:
        words = (
            f"overloaded: {figures}; the longest requests crowd the cache and the queue grows "
            f"without bound, which this window of {n} is too short to show: its percentiles describe "
            "no steady state"
        )
        return replace(lat, warning=words, overloaded=True)
    if lat.warning is not None:
        return lat
    more = "a longer trace" if load.kind == "trace" else "more requests"
    words = (
        f"not steady: {figures}; the longest requests' swings above it preempt and queue, which this "
        f"window of {n} may be too short to show; simulate {more}"
    )
    return replace(lat, warning=words)


def _window(
    t: EngineTables,
    load: Load,
    lengths: Lengths,
    requests: int,
    seed: int,
    cold_start_s: float,
    windows: float,
    loop_s: float | None = None,
) -> Latency:
    """One simulated window of ``requests`` requests (:func:`simulate_latency`)."""
    rng = np.random.default_rng(seed)
    arrivals, isl, osl, cached = draw_requests(load, lengths, requests, rng)
    n = len(isl)
    later = np.maximum(osl - 1.0, 0.0)
    z = rng.standard_normal(n)
    steps = np.where(
        later > 0,
        np.maximum(
            np.round(later / t.accept_mean + z * np.sqrt(later * t.accept_var / t.accept_mean**3)), 1.0
        ),
        0.0,
    ).astype(np.int64)
    clients = max(1, int(round(min(load.concurrency, n)))) if load.kind == "closed" else 0
    # a returning turn reaches the engine once its prefix is back (open loop): run in that order
    order = np.arange(n)
    at_engine = arrivals  # empty in a closed loop
    if clients == 0:
        at_engine = arrivals + np.where(cached > 0, lengths.reload_s, 0.0)
        order = np.argsort(at_engine, kind="stable")
        at_engine = at_engine[order]
    arrive, first, done = np.empty(n), np.empty(n), np.empty(n)
    extra = t.frontend_s + (0.0 if t.agg else t.handoff_s)  # after the engine, before the client
    think = (extra if loop_s is None else loop_s) if clients > 0 else 0.0
    f64 = np.float64
    dec = _decode_instances(t)
    served = np.zeros(n, np.int64)
    # one type per argument, so the compiled kernel is one signature (each other costs a compile)
    preempted = simulate(
        bool(t.agg), bool(t.mixed), int(t.n_prefill), len(dec.pool), int(clients),
        np.asarray(at_engine, f64), np.asarray(isl[order], f64), np.asarray(osl[order], f64),
        np.asarray(steps[order], np.int64), float(t.accept_mean), dec.n, dec.a, dec.b,
        np.asarray(t.pf_tokens, f64), np.asarray(t.pf_cost, f64), float(t.chunk), float(t.pf_chunk),
        dec.kv_cap, dec.run_cap, int(t.recv_every), float(t.reserve), dec.xfer_fixed,
        dec.xfer_per_token, arrive, first, done, np.asarray(cached[order], f64), bool(t.bootstrap),
        float(t.pf_lane), float(t.dec_reserve), float(t.balance_ranks), float(think), dec.start,
        dec.end, dec.weight, served,
    )  # fmt: skip
    back = np.empty(n, dtype=np.int64)
    back[order] = np.arange(n)  # request k ran as index back[k]
    pool = dec.pool[served[back]] if t.decode_more else None
    if clients == 0:
        arrive = arrivals
    else:
        arrive = arrive[back]
    first, done = first[back] + extra, done[back] + extra
    cold = cold_start_s if clients > 0 else 0.0
    # the whole run shifted: every time but the first wave's sending (requests 0..clients-1, at 0)
    first, done = first + cold, done + cold
    arrive = np.r_[arrive[:clients], arrive[clients:] + cold]
    lat = _latency(t, arrive, first, done, osl, int(preempted), load, windows)
    return replace(lat, cold_start_s=cold, first_wave=clients, pool=pool)


@dataclass(frozen=True)
class _Instances:
    """The decode (or engine) instances as the kernel reads them, one element each: its pool,
    cap, cache, transfer, routing weight and the slice of the step tables ``n``, ``a``, ``b``
    (every pool's joined) it reads."""

    pool: Array
    run_cap: Array
    kv_cap: Array
    xfer_fixed: Array
    xfer_per_token: Array
    weight: Array
    start: Array
    end: Array
    n: Array
    a: Array
    b: Array


def _decode_instances(t: EngineTables) -> _Instances:
    """``t``'s decode instances, its further decode pools' after its own. The router weighs an
    instance's requests by the largest cap over its own, so that instances of every pool fill
    their slots alike (1 for one pool's)."""
    pools = (t, *t.decode_more)
    count = np.array([int(c.n_decode) for c in pools])
    ends = np.cumsum([len(c.dec_n) for c in pools])
    caps = np.array([int(c.run_cap) for c in pools], np.int64)
    f64 = np.float64

    def each(values: list[float] | Array, dtype: type = f64) -> Array:
        return np.repeat(np.asarray(values, dtype), count)

    return _Instances(
        pool=each(np.arange(len(pools)), np.int64),
        run_cap=each(caps, np.int64),
        kv_cap=each([c.kv_cap for c in pools]),
        xfer_fixed=each([c.xfer_fixed for c in pools]),
        xfer_per_token=each([c.xfer_per_token for c in pools]),
        weight=each(caps.max() / caps),
        start=each(ends - [len(c.dec_n) for c in pools], np.int64),
        end=each(ends, np.int64),
        n=np.concatenate([np.asarray(c.dec_n, f64) for c in pools]),
        a=np.concatenate([np.asarray(c.dec_a, f64) for c in pools]),
        b=np.concatenate([np.asarray(c.dec_b, f64) for c in pools]),
    )


FEW_TO_COUNT = 20
"""Completions in the middle half of an open loop's arrivals below which its served rate is
counted over the whole window instead (one completion in a quarter-second had made a rate); and
the requests below which a window is too short to call overloaded."""


def _latency(
    t: EngineTables,
    arrive: Array,
    first: Array,
    done: Array,
    osl: Array,
    preempted: int,
    load: Load,
    windows: float = STEADY_WINDOWS,
) -> Latency:
    ttft = first - arrive
    e2el = done - arrive
    tpot = np.where(osl > 1, (done - first) / np.maximum(osl - 1.0, 1.0), np.nan)
    ok = np.isfinite(done)
    span = float(np.nanmax(done) - np.nanmin(arrive)) if ok.any() else math.nan
    counted = ok
    offered = math.nan
    if load.kind != "closed" and ok.any():
        # what the deployment serves while the load lasts: completions in the middle half of the
        # arrivals (the first quarter fills the batches; after the last arrival they drain); a
        # window too short to have a few (the steady-state warning says so) counts them all (a
        # two-request trace had served "4 requests/s": one completion in its middle 0.25 s)
        lo, hi = (float(x) for x in np.quantile(arrive, [0.25, 0.75]))
        middle = ok & (done >= lo) & (done < hi)
        if hi > lo:  # half the arrivals lie between the quartiles
            offered = 0.5 * len(arrive) / (hi - lo)
        if hi > lo and middle.sum() >= FEW_TO_COUNT:
            counted, span = middle, hi - lo
    rps = float(counted.sum() / span) if span > 0 else math.nan
    out_tps = float(osl[counted].sum()) / span / t.gpus if span > 0 else math.nan
    grew = _queue_growth(ttft) if load.kind != "closed" and ok.all() else None
    # (a few requests are a burst, not a load: three 8,000-token prompts 10 ms apart had been
    # "150 requests/s arriving, overloaded"; the steady-state warning says the window is short)
    overloaded = (
        grew is not None and len(arrive) >= FEW_TO_COUNT and rps < (1.0 - OVERLOAD_SHORTFALL) * offered
    )
    if overloaded:
        assert grew is not None
        rps, out_tps = _capacity(arrive, done, osl, t.gpus)
        warning: str | None = (
            f"overloaded: {offered:.3g} requests/s arrive and the deployment serves {rps:.3g}; "
            f"{_grew_text(grew)}, so every percentile here grows with a longer window and describes "
            "no steady state"
        )
    else:
        warning = _steady_warning(ttft, ok, load, arrive, e2el, windows) or _little_warning(load, e2el, rps)
    return Latency(
        ttft_s=ttft, tpot_s=tpot, e2el_s=e2el, output_tokens=osl, requests_per_s=rps,
        output_tokens_per_s_per_gpu=out_tps, preempted=preempted, warning=warning,
        offered_requests_per_s=offered, overloaded=overloaded,
    )  # fmt: skip


def _capacity(arrive: Array, done: Array, osl: Array, gpus: float) -> tuple[float, float]:
    """An overloaded window's requests/s and output tokens/s per GPU: every request over the span
    from its first arrival to its last completion, through which its queue keeps the deployment
    busy. Counted within the middle half of its arrivals, as a window that keeps up is, it had said
    a B200 deployment that serves about 25.7 requests/s served 23.6 at 100 arriving and 1.68 at
    1,000: ten thousand arrivals there span 10 s, and a request takes over 50 s. Its middle half
    of completions is no better where a batch's requests end together (a few waves of them)."""
    span = float(np.max(done) - np.min(arrive))
    if not span > 0:
        return math.nan, math.nan
    return len(done) / span, float(osl.sum()) / span / gpus


def _queue_growth(ttft: Array) -> tuple[float, float] | None:
    """The TTFT medians of the first and the last quarter of an open loop's arrivals where its
    queue is still growing (the last over twice the first, and 50 ms more); None where it is not."""
    q = max(len(ttft) // 4, 1)
    first, last = float(np.median(ttft[:q])), float(np.median(ttft[-q:]))
    return (first, last) if last > 2.0 * first and last - first > 0.05 else None


def _grew_text(grew: tuple[float, float]) -> str:
    first, last = grew
    return (
        f"the TTFT median grew from {first:.3g} s (first quarter of arrivals) to {last:.3g} s (last quarter)"
    )


def _little_warning(load: Load, e2el: Array, served_per_s: float) -> str | None:
    """A closed loop's window whose rate and mean end-to-end latency hold fewer requests in flight
    than it has clients (Little's law, below :data:`LITTLE_SHORTFALL`): its clients' last requests
    end far apart, the slowest running on alone (a long tail of lengths), and the rate it served
    counts that drain. Under a tail of sigma 2 a B200 window had "served 1.15 requests/s" where
    64 clients at its 17 s mean hold 3.7 (64,000 requests: 1.67 and 37 s), and said nothing."""
    if load.kind != "closed" or not np.isfinite(e2el).all() or not served_per_s > 0:
        return None
    held = served_per_s * float(np.mean(e2el))
    if held >= (1.0 - LITTLE_SHORTFALL) * load.concurrency:
        return None
    return (
        f"not steady: {counted(load.concurrency, 'client')}, but the window serves {served_per_s:.3g} "
        f"requests/s at {float(np.mean(e2el)):.3g} s end to end on average, {held:.3g} in flight by "
        "Little's law: its clients' last requests end far apart, the slowest running on alone, so its "
        f"rate and percentiles are not a steady load's; simulate more requests ({len(e2el)} now)"
    )


def _steady_warning(
    ttft: Array, ok: Array, load: Load, arrive: Array, e2el: Array, windows: float = STEADY_WINDOWS
) -> str | None:
    """A warning when the window cannot show a steady state: requests never served; a closed
    loop of fewer than two requests per client (mostly its first wave, sent at once); an open
    loop whose queue is still growing (the TTFT median of the last quarter of arrivals over twice
    the first quarter's) while it serves what arrives (else it is overloaded, which
    :func:`_latency` says), whose arrivals end before a request is through (its batches never
    fill), or whose window holds fewer than ``windows`` times the requests in flight
    (its filling and draining ends weigh too much)."""
    if not ok.all():
        return f"{int((~ok).sum())} of {len(ok)} requests were never served: the deployment cannot serve them"
    n = len(ttft)
    if load.kind == "closed":
        if n < 2.0 * load.concurrency:
            return (
                f"not steady: {counted(n, 'request')} for {counted(load.concurrency, 'client')}, fewer "
                "than two each, so the window is mostly the first wave sent at once; simulate more "
                "requests (InferenceX sends ten per client)"
            )
        return None
    if (grew := _queue_growth(ttft)) is not None:  # serving what arrives: not overloaded (yet)
        return (
            f"not steady: {_grew_text(grew)}; the load is at or near what the deployment serves, "
            "or the window is too short"
        )
    span = float(np.max(arrive) - np.min(arrive))
    through = float(np.median(e2el))
    more = "a longer trace" if load.kind == "trace" else "more requests"  # a trace fixes its count
    if span < through:
        return (
            f"not steady: the {counted(n, 'arrival')} span{'s' if n == 1 else ''} {span:.3g} s, less "
            "than a request takes end to end "
            f"(median {through:.3g} s), so the batches never fill as the load would fill them; "
            f"simulate {more}"
        )
    # Little's law: the requests in flight at once, the arrival rate times the mean time in the
    # system (the median had been taken, a third of the mean under a long tail of lengths). The
    # window's first that many arrive while the batches fill, its last that many finish while they
    # drain (no arrivals behind them), and both see less load than the steady state
    in_flight = n / span * float(np.mean(e2el)) if span > 0 else 0.0
    if n < windows * in_flight:
        about = f"{in_flight:,.0f}" if in_flight >= 10 else f"{in_flight:.2g}"  # (0.33 had said "0")
        return (
            f"not steady: about {about} requests are in flight at once and the window has {n}, "
            f"so {min(1.0, 2.0 * in_flight / n):.0%} of it arrives while the batches fill or finishes "
            f"while they drain (lower TTFT and TPOT than a steady load); simulate {more}, at least "
            f"{math.ceil(windows * in_flight)}"
        )
    return None
