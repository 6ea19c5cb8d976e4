"""Latency distributions: per-request TTFT, TPOT and end-to-end latency from an engine-level
serving simulation, and their percentiles.

The step costs are the performance model's (:mod:`dse.perf.serving`, :mod:`dse.perf.stages`),
tabulated once per deployment (:func:`tables_of`); the simulation (:mod:`dse.perf.engine_kernel`)
runs every request through the engines' schedulers. What it follows, and from where:

* continuous batching with chunked prefill under a token budget per forward, a cap on running
  requests and KV-capacity admission: SGLang ``scheduler.py`` (``get_next_batch_to_run`` runs a
  prefill batch whenever one can be formed, else a decode step; ``PrefillAdder`` admits while
  the chunk budget and the KV cache last; ``--max-running-requests``), vLLM v1
  ``core/sched/scheduler.py`` (one token budget per step shared by the running requests' decode
  tokens and new prefill chunks) and TensorRT-LLM's inflight batching (``max_num_tokens``,
  context chunking beside generation);
* KV admission reserves the prompt plus a share of the output (:data:`ENGINE_RULES`): SGLang's
  ``new_token_ratio`` (from 0.7, decaying toward about 0.1 while nothing is retracted), vLLM's
  blocks allocated as tokens come (nothing reserved), TensorRT-LLM's ``GUARANTEED_NO_EVICT``
  (the whole output); an overflow preempts the newest running request, which recomputes
  (vLLM ``_preempt``, SGLang ``retract_decode``);
* MTP: each verification step emits the accepted prefix of its drafts plus one token, drawn per
  request (its step count is the sum of its steps' draws, by the central limit theorem);
* load as benchmark_serving applies it (``--max-concurrency C --request-rate inf``: C requests
  at once, each finishing request releasing the next; InferenceX sends ``10 C`` prompts with
  lengths uniform on 80-100% of nominal, ``--random-range-ratio 0.8``), or open loop: Poisson,
  bursty (gamma inter-arrivals, as benchmark_serving's ``--burstiness``), or a trace.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from dse.errors import InputError
from dse.perf.engine_kernel import simulate
from dse.perf.params import PerfParams
from dse.perf.pool import Array
from dse.perf.serving import (
    PREFILL_TOKENS_PER_RANK,
    Deployment,
    decode_step_seconds,
    prefill_forward_seconds,
)
from dse.perf.stages import kv_capacity_sequences

PERCENTILES = (50.0, 90.0, 99.0)
MAX_REQUESTS = 200_000  # a simulated window's cap (about 0.3 s and 30 MB)
BENCHMARK_PROMPTS_PER_CLIENT = 10  # InferenceX: --num-prompts $(( CONC * 10 ))
LOW_OF_NOMINAL = 0.8  # InferenceX: --random-range-ratio 0.8, lengths uniform on [0.8, 1] x nominal


@dataclass(frozen=True)
class EngineRules:
    """How an engine's scheduler batches: ``mixed``, whether decode steps ride in the prefill
    forward; ``reserve``, the share of a request's output its admission reserves in the KV cache."""

    mixed: bool
    reserve: float


ENGINE_RULES = {
    "sglang": EngineRules(mixed=False, reserve=0.1),
    "trt": EngineRules(mixed=True, reserve=1.0),
    "atom": EngineRules(mixed=True, reserve=0.0),
}


@dataclass(frozen=True)
class Trace:
    """Requests to replay: arrival times (seconds from the start) and lengths (tokens)."""

    arrival_s: Array
    isl: Array
    osl: Array


@dataclass(frozen=True)
class Load:
    """How requests arrive: ``closed`` (``concurrency`` clients, each sending its next request
    when its last one completes), ``poisson`` (``rate`` per second), ``bursty`` (gamma
    inter-arrivals of mean ``1/rate`` and shape ``burstiness``: below 1 burstier than Poisson)
    or ``trace`` (replayed)."""

    kind: str
    concurrency: float = 0.0
    rate: float = 0.0
    burstiness: float = 1.0
    trace: Trace | None = None

    def describe(self) -> str:
        if self.kind == "closed":
            return f"closed loop, {self.concurrency:g} requests in flight"
        if self.kind == "trace":
            assert self.trace is not None
            return f"trace replay, {len(self.trace.arrival_s)} requests"
        shape = "" if self.kind == "poisson" else f", burstiness {self.burstiness:g}"
        return f"{self.kind} arrivals at {self.rate:g} requests/s{shape}"


@dataclass(frozen=True)
class Lengths:
    """Request lengths: uniform on ``[low, 1] x`` nominal (benchmark_serving's random dataset), or
    with ``tail_sigma > 0`` log-normal with the same mean (a long tail), capped at ``limit``. A
    share ``returning_share`` of the requests are returning turns: ``prefix`` tokens of context
    already cached, and a new ``suffix`` (nominal, drawn as the prompts are) to prefill."""

    isl: float
    osl: float
    low: float = LOW_OF_NOMINAL
    tail_sigma: float = 0.0
    limit: float = math.inf
    returning_share: float = 0.0
    prefix: float = 0.0
    suffix: float = 0.0

    @property
    def mean_isl(self) -> float:
        """New tokens a request prefills, on average."""
        r = self.returning_share
        return ((1.0 - r) * self.isl + r * self.suffix) * (1.0 + self.low) / 2.0

    @property
    def mean_context(self) -> float:
        """Tokens of context a request holds once prefilled, on average (cached prefix included)."""
        return self.mean_isl + self.returning_share * self.prefix

    @property
    def mean_osl(self) -> float:
        return self.osl * (1.0 + self.low) / 2.0


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

    def percentile(self, metric: str, q: float) -> float:
        values = {"ttft": self.ttft_s, "tpot": self.tpot_s, "e2el": self.e2el_s}[metric]
        values = values[np.isfinite(values)]
        return float(np.percentile(values, q)) if len(values) else math.nan

    def summary(self, percentiles: tuple[float, ...] = PERCENTILES) -> dict[str, float]:
        """``ttft_p50_s``, ``tpot_p99_ms``, ``e2el_p90_s``, ... for each percentile."""
        out: dict[str, float] = {}
        for metric, unit, scale in (("ttft", "s", 1.0), ("tpot", "ms", 1e3), ("e2el", "s", 1.0)):
            for q in percentiles:
                out[f"{metric}_p{q:g}_{unit}"] = self.percentile(metric, q) * scale
        return out


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
    tok = np.unique(np.r_[np.geomspace(16.0, top, 28), isl])
    pf = prefill_forward_seconds(d, p, tok) * p.latency.prefill_scale
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
        frontend_s=p.latency.frontend_s, handoff_s=p.latency.handoff_s,
    )  # fmt: skip


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


def draw_requests(
    load: Load, lengths: Lengths, requests: int, rng: np.random.Generator
) -> tuple[Array, Array, Array, Array]:
    """(arrival times, or empty for a closed loop; new prompt tokens; output tokens; cached
    context tokens)."""
    if load.kind == "trace":
        assert load.trace is not None
        tr = load.trace
        return tr.arrival_s, tr.isl.astype(float), tr.osl.astype(float), np.zeros(len(tr.isl))
    isl = _lengths(lengths.isl, lengths, requests, rng)
    osl = _lengths(lengths.osl, lengths, requests, rng)
    cached = np.zeros(requests)
    if lengths.returning_share > 0:
        back = rng.random(requests) < lengths.returning_share
        isl = np.where(back, _lengths(lengths.suffix, lengths, requests, rng), isl)
        cached = np.where(back, lengths.prefix, 0.0)
    if load.kind == "closed":
        return np.zeros(0), isl, osl, cached
    if load.kind == "poisson":
        gaps = rng.exponential(1.0 / load.rate, requests)
    else:  # gamma with mean 1/rate and shape k: squared coefficient of variation 1/k
        k = load.burstiness
        gaps = rng.gamma(k, 1.0 / (load.rate * k), requests)
    return np.cumsum(gaps), isl, osl, cached


def _lengths(nominal: float, lengths: Lengths, n: int, rng: np.random.Generator) -> Array:
    if lengths.tail_sigma > 0:
        mean = nominal * (1.0 + lengths.low) / 2.0
        s = lengths.tail_sigma
        x = rng.lognormal(math.log(mean) - 0.5 * s * s, s, n)
    else:
        x = rng.integers(int(nominal * lengths.low), int(nominal) + 1, n).astype(float)
    return np.clip(np.round(x), 1.0, lengths.limit)


def simulate_latency(
    t: EngineTables, load: Load, lengths: Lengths, requests: int = 0, seed: int = 0
) -> Latency:
    """Simulate ``requests`` requests (0: ten per client in a closed loop, as InferenceX; 2,000
    open loop; a trace's own count) and return each one's latency."""
    if requests <= 0:
        requests = (
            int(min(max(BENCHMARK_PROMPTS_PER_CLIENT * load.concurrency, 1), MAX_REQUESTS))
            if load.kind == "closed"
            else 2000
        )
    requests = min(requests, MAX_REQUESTS)
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
    arrive, first, done = np.empty(n), np.empty(n), np.empty(n)
    clients = int(min(load.concurrency, n)) if load.kind == "closed" else 0
    preempted = simulate(
        t.agg, t.mixed, t.n_prefill, t.n_decode, clients, arrivals, isl, osl, steps, t.accept_mean,
        t.dec_n, t.dec_a, t.dec_b, t.pf_tokens, t.pf_cost, t.chunk, t.pf_chunk, t.kv_cap, t.run_cap,
        t.reserve, t.xfer_fixed, t.xfer_per_token, arrive, first, done, cached,
    )  # fmt: skip
    extra = t.frontend_s + (0.0 if t.agg else t.handoff_s)  # after the engine, before the client
    return _latency(t, arrive, first + extra, done + extra, osl, int(preempted), load)


def _latency(
    t: EngineTables, arrive: Array, first: Array, done: Array, osl: Array, preempted: int, load: Load
) -> Latency:
    ttft = first - arrive
    e2el = done - arrive
    tpot = np.where(osl > 1, (done - first) / np.maximum(osl - 1.0, 1.0), np.nan)
    ok = np.isfinite(done)
    span = float(np.nanmax(done) - np.nanmin(arrive)) if ok.any() else math.nan
    rps = ok.sum() / span if span > 0 else math.nan
    out_tps = float(osl[ok].sum()) / span / t.gpus if span > 0 else math.nan
    return Latency(
        ttft_s=ttft, tpot_s=tpot, e2el_s=e2el, output_tokens=osl, requests_per_s=float(rps),
        output_tokens_per_s_per_gpu=out_tps, preempted=preempted, warning=_steady_warning(ttft, ok, load),
    )  # fmt: skip


def _steady_warning(ttft: Array, ok: Array, load: Load) -> str | None:
    """A warning when the window cannot show a steady state: requests never served, or (open
    loop) a queue still growing, the TTFT median of the last quarter of arrivals over twice the
    first quarter's."""
    if not ok.all():
        return f"{int((~ok).sum())} of {len(ok)} requests were never served: the deployment cannot serve them"
    if load.kind == "closed":
        return None
    q = max(len(ttft) // 4, 1)
    first, last = float(np.median(ttft[:q])), float(np.median(ttft[-q:]))
    if last > 2.0 * first and last - first > 0.05:
        return (
            f"not steady: the TTFT median grew from {first:.3g} s (first quarter of arrivals) to "
            f"{last:.3g} s (last quarter); the load exceeds what the deployment serves, "
            "or the window is too short"
        )
    return None


def read_trace(path: Path) -> Trace:
    """A trace file: CSV with columns ``arrival_s``, ``input_tokens``, ``output_tokens``, one row
    per request, arrival times non-decreasing; a bad row is named."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = list(reader.fieldnames or [])
            rows = list(reader)
    except OSError as exc:
        raise InputError(str(path), "--trace", f"cannot be read ({exc.strerror})") from None
    for col in ("arrival_s", "input_tokens", "output_tokens"):
        if col not in header:
            raise InputError(str(path), col, "is a required column")
    if not rows:
        raise InputError(str(path), "--trace", "has no requests")
    values = np.empty((len(rows), 3))
    last = 0.0
    for i, row in enumerate(rows):
        for c, (col, least) in enumerate((("arrival_s", 0.0), ("input_tokens", 1.0), ("output_tokens", 1.0))):
            try:
                x = float(row[col] or "")
            except ValueError:
                x = math.nan
            if not math.isfinite(x) or x < least:
                raise InputError(f"{path} row {i + 1}", col, f"must be a number >= {least:g}", row[col])
            values[i, c] = x
        if values[i, 0] < last:
            raise InputError(
                f"{path} row {i + 1}",
                "arrival_s",
                "must not be earlier than the row before",
                row["arrival_s"],
            )
        last = values[i, 0]
    return Trace(arrival_s=values[:, 0], isl=values[:, 1], osl=values[:, 2])
