"""What a latency simulation is given: how requests arrive (:class:`Load`, a :class:`Trace`) and
how long they are (:class:`Lengths`), and the draw of one window of requests from them.

Load as benchmark_serving applies it (``--max-concurrency C --request-rate inf``: C requests at
once, each finishing request releasing the next; InferenceX sends ``10 C`` prompts with lengths
uniform on 80-100% of nominal, ``--random-range-ratio 0.8``), or open loop: Poisson, bursty
(gamma inter-arrivals, as benchmark_serving's ``--burstiness``), or a trace.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dse.errors import InputError, Written
from dse.perf.pool import Array
from dse.typed_data import MAX_MAGNITUDE, MIN_MAGNITUDE, plausible, read_csv, row_shape_problem
from dse.units import counted

LOW_OF_NOMINAL = 0.8  # InferenceX: --random-range-ratio 0.8, lengths uniform on [0.8, 1] x nominal
LOAD_KINDS = ("closed", "poisson", "bursty", "trace")


def _bad(source: str, key: str, value: object, rule: str, ok: bool) -> None:
    """Refuse ``value`` (one line naming ``source``, ``key`` and ``rule``) unless it is a real
    number (not a bool) and ``ok``: NaN fails every comparison, so ``ok`` is False for it."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not ok:
        raise InputError(source, key, rule, value)


@dataclass(frozen=True)
class Trace:
    """Requests to replay: arrival times (seconds from the start) and lengths (tokens)."""

    arrival_s: Array
    isl: Array
    osl: Array

    def __post_init__(self) -> None:
        """A trace no replay can run is refused as :func:`read_trace` refuses a file's rows, each
        bad request named by its index: unsorted, negative or NaN arrivals had run as given, a
        request of no output tokens had been simulated, and arrays of two lengths had raised
        numpy's own broadcast error."""
        cols = {"arrival_s": self.arrival_s, "isl": self.isl, "osl": self.osl}
        for key, col in cols.items():
            if np.ndim(col) != 1:
                raise InputError("Trace", key, "must be a one-dimensional array")
            if not isinstance(col, np.ndarray):  # a list had passed, then failed in the replay
                try:
                    col = np.asarray(col, dtype=float)
                except (TypeError, ValueError):
                    raise InputError("Trace", key, "must be numbers", col) from None
                object.__setattr__(self, key, col)
                cols[key] = col
        n = {len(col) for col in cols.values()}
        if len(n) > 1:
            raise InputError("Trace", "arrival_s, isl, osl", "must have the same length", sorted(n))
        if n == {0}:
            raise InputError("Trace", "arrival_s", "has no requests")
        rules = {"arrival_s": (0.0, "must be a finite number >= 0 (seconds)"),
                 "isl": (1.0, "must be a whole number >= 1 (tokens)"),
                 "osl": (1.0, "must be a whole number >= 1 (tokens)")}  # fmt: skip
        for key, (least, rule) in rules.items():
            col = np.asarray(cols[key], dtype=float)
            bad = ~(np.isfinite(col) & (col >= least) & ((col == np.round(col)) | (key == "arrival_s")))
            if bad.any():
                i = int(np.argmax(bad))
                raise InputError("Trace", f"{key}[{i}]", rule, float(col[i]))
        later = np.flatnonzero(np.diff(np.asarray(self.arrival_s, dtype=float)) < 0)
        if len(later):
            i = int(later[0]) + 1
            rule = "must not be earlier than the request before"
            raise InputError("Trace", f"arrival_s[{i}]", rule, float(self.arrival_s[i]))


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

    def __post_init__(self) -> None:
        """A load no simulation can run is refused here, at the edge of the API, as the CLI
        refuses its flags: a closed loop of no clients, or of NaN, had run as one client."""
        if self.kind not in LOAD_KINDS:
            raise InputError("Load", "kind", f"must be one of {', '.join(LOAD_KINDS)}", self.kind)
        if self.kind == "closed":
            c = self.concurrency
            _bad("Load", "concurrency", c, "must be a finite number > 0", 0 < c < math.inf)
            _bad("Load", "concurrency", c, "must be a whole number of clients", float(c).is_integer())
        elif self.kind == "trace":
            if self.trace is None:
                raise InputError("Load", "trace", "is required for a trace replay")
        else:
            rate = self.rate
            _bad("Load", "rate", rate, "must be a finite number > 0 (requests/s)", 0 < rate < math.inf)
            k = self.burstiness
            _bad("Load", "burstiness", k, "must be a finite number > 0", 0 < k < math.inf)

    def describe(self) -> str:
        if self.kind == "closed":
            return f"closed loop, {counted(self.concurrency, 'request')} in flight"
        if self.kind == "trace":
            assert self.trace is not None
            return f"trace replay, {counted(len(self.trace.arrival_s), 'request')}"
        shape = "" if self.kind == "poisson" else f", burstiness {self.burstiness:g}"
        return f"{self.kind} arrivals at {self.rate:g} requests/s{shape}"


@dataclass(frozen=True)
class Lengths:
    """Request lengths: uniform on ``[low, 1] x`` nominal (benchmark_serving's random dataset), or
    with ``tail_sigma > 0`` log-normal with the same mean (a long tail); a request's context (its
    cached prefix, prompt and output) is capped at ``limit``, the model's. A
    share ``returning_share`` of the requests are returning turns: ``prefix`` tokens of context
    already cached, and a new ``suffix`` (nominal, drawn as the prompts are) to prefill, once the
    prefix has come back from where it rested (``reload_s``: open loop only); a share
    ``recompute_share`` of the returning turns had their KV dropped and prefill their prefix and
    suffix whole, reloading nothing. With ``output_mix``,
    ``((share, mean tokens), ...)``, output lengths are instead a mixture of exponentials, as
    ``dse simulate --lengths`` gives its fluid model and reference (at least one token each), and
    ``osl`` is not read."""

    isl: float
    osl: float
    low: float = LOW_OF_NOMINAL
    tail_sigma: float = 0.0
    limit: float = math.inf
    returning_share: float = 0.0
    prefix: float = 0.0
    suffix: float = 0.0
    reload_s: float = 0.0
    output_mix: tuple[tuple[float, float], ...] = ()
    recompute_share: float = 0.0

    def __post_init__(self) -> None:
        """Lengths no draw can take are refused here (a NaN prompt had raised numpy's own error,
        a zero output drawn one-token answers)."""
        for key in ("isl", "osl"):
            value = getattr(self, key)
            _bad("Lengths", key, value, "must be a finite number > 0 (tokens)", 0 < value < math.inf)
        _bad("Lengths", "low", self.low, "must be in (0, 1] (of nominal)", 0 < self.low <= 1)
        s = self.tail_sigma
        _bad("Lengths", "tail_sigma", s, "must be a finite number >= 0", 0 <= s < math.inf)
        _bad("Lengths", "limit", self.limit, "must be > 0 (tokens; inf: no limit)", self.limit > 0)
        r = self.returning_share
        _bad("Lengths", "returning_share", r, "must be between 0 and 1", 0 <= r <= 1)
        d = self.recompute_share
        _bad("Lengths", "recompute_share", d, "must be between 0 and 1 (of the returning turns)", 0 <= d <= 1)
        for key in ("prefix", "suffix", "reload_s"):
            value = getattr(self, key)
            _bad("Lengths", key, value, "must be a finite number >= 0", 0 <= value < math.inf)
        for i, (share, mean) in enumerate(self.output_mix):
            key = f"output_mix[{i}]"
            _bad("Lengths", key, share, "share must be a finite number > 0", 0 < share < math.inf)
            _bad("Lengths", key, mean, "mean must be a finite number > 0", 0 < mean < math.inf)

    @property
    def mean_isl(self) -> float:
        """New tokens a request prefills, on average (a recomputed turn's prefix among them)."""
        r = self.returning_share
        drawn = ((1.0 - r) * self.isl + r * self.suffix) * (1.0 + self.low) / 2.0
        return drawn + r * self.recompute_share * self.prefix

    @property
    def mean_context(self) -> float:
        """Tokens of context a request holds once prefilled, on average (cached prefix included)."""
        return self.mean_isl + self.returning_share * (1.0 - self.recompute_share) * self.prefix

    @property
    def mean_osl(self) -> float:
        if self.output_mix:
            return sum(share * mean for share, mean in self.output_mix)
        return self.osl * (1.0 + self.low) / 2.0

    @property
    def mean_kv_steps(self) -> float:
        """Tokens of KV a request holds, summed over its output tokens, on average:
        ``E[(context before its output + output / 2) x output]`` (its context grows by a token a
        step). Times the seconds per output token and the arrivals per second, the KV a steady
        load holds at once (Little's law). From the distributions, not a draw: a long tail's mean
        square lives in requests too rare for a window to hold (log-normal sigma 2: a 2,000-request
        window's is about a quarter of it). Output lengths are capped at the context left after
        an average prompt, drawn apart from it: exact within 3% where the context seldom caps a
        request, an overestimate where it often does (both lengths long-tailed in a short
        context: sigma 3 in 20,000 tokens, by a third)."""
        # prompt and cached prefix, drawn apart from the output
        return self.mean_context * self.mean_osl + 0.5 * self.mean_square_osl

    @property
    def mean_square_osl(self) -> float:
        """``E[output^2]`` of the drawn output lengths, each capped at the context left after an
        average prompt (a long tail's reaches past it)."""
        cap = max(self.limit - self.mean_context, 1.0)
        if self.output_mix:  # exponentials of mean m: 2 m^2 - 2 m (m + cap) e^(-cap / m)
            total = sum(share for share, _ in self.output_mix)
            return sum(
                share / total * (2.0 * m * m - 2.0 * m * (m + cap) * math.exp(-cap / m))
                for share, m in self.output_mix
            )
        if self.tail_sigma > 0:  # log-normal of the same mean once capped, as drawn
            s = self.tail_sigma
            mu = tail_mu(self.mean_osl, s, cap)
            if not math.isfinite(cap):
                return math.exp(2.0 * mu + 2.0 * s * s)
            z = (math.log(cap) - mu) / s
            below = math.exp(2.0 * mu + 2.0 * s * s) * _normal_cdf(z - 2.0 * s)
            return below + cap * cap * (1.0 - _normal_cdf(z))
        lo, hi = int(self.osl * self.low), int(self.osl)  # whole tokens, uniform, as drawn
        mean = 0.5 * (lo + hi)
        return mean * mean + ((hi - lo + 1) ** 2 - 1) / 12.0


def _normal_cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def tail_mu(mean: float, sigma: float, cap: float) -> float:
    """The log-normal's ``mu`` whose lengths, each capped at ``cap`` (the model's context), keep
    ``mean``: ``E[min(X, cap)] = mean``. The uncapped ``ln(mean) - sigma^2 / 2`` puts much of a wide
    tail's mean in lengths past any context (sigma 3: the median is 1/90 of the mean), which the
    cap cuts: 8,000-token prompts at sigma 3 in 163,840 tokens had drawn 3,232 on average. A mean
    at or past the cap: every length at the cap."""
    mu = math.log(mean) - 0.5 * sigma * sigma
    if not math.isfinite(cap):
        return mu
    log_cap = math.log(cap)
    if mean >= cap:
        return log_cap + 8.0 * sigma

    def capped_mean(m: float) -> float:  # rises with m, from 0 to the cap
        z = (log_cap - m) / sigma
        return math.exp(m + 0.5 * sigma * sigma) * _normal_cdf(z - sigma) + cap * (1.0 - _normal_cdf(z))

    lo, hi = mu, log_cap + 8.0 * sigma  # capped_mean(lo) <= mean < capped_mean(hi)
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if capped_mean(mid) < mean else (lo, mid)
        if hi - lo < 1e-12:
            break
    return 0.5 * (lo + hi)


def draw_requests(
    load: Load, lengths: Lengths, requests: int, rng: np.random.Generator
) -> tuple[Array, Array, Array, Array]:
    """(arrival times, or empty for a closed loop; new prompt tokens; output tokens; cached
    context tokens)."""
    if load.kind == "trace":
        assert load.trace is not None
        tr = load.trace
        return tr.arrival_s, tr.isl.astype(float), tr.osl.astype(float), np.zeros(len(tr.isl))
    isl = _lengths(lengths.isl, lengths, requests, rng, lengths.limit - 1.0)
    osl = _output_lengths(lengths, requests, rng)
    cached = np.zeros(requests)
    if lengths.returning_share > 0:
        back = rng.random(requests) < lengths.returning_share
        suffix = _lengths(lengths.suffix, lengths, requests, rng, lengths.limit - lengths.prefix - 1.0)
        isl = np.where(back, suffix, isl)
        cached = np.where(back, lengths.prefix, 0.0)
        if lengths.recompute_share > 0:  # a dropped prefix is prefilled again, with the suffix
            again = back & (rng.random(requests) < lengths.recompute_share)
            isl, cached = np.where(again, isl + lengths.prefix, isl), np.where(again, 0.0, cached)
    if math.isfinite(lengths.limit):  # a request's whole context within the model's (a long tail's)
        isl = np.minimum(isl, np.maximum(lengths.limit - cached - 1.0, 1.0))
        osl = np.minimum(osl, np.maximum(lengths.limit - cached - isl, 1.0))
    if load.kind == "closed":
        return np.zeros(0), isl, osl, cached
    if load.kind == "poisson":
        gaps = rng.exponential(1.0 / load.rate, requests)
    else:  # gamma with mean 1/rate and shape k: squared coefficient of variation 1/k
        k = load.burstiness
        gaps = rng.gamma(k, 1.0 / (load.rate * k), requests)
    return np.cumsum(gaps), isl, osl, cached


def _lengths(nominal: float, lengths: Lengths, n: int, rng: np.random.Generator, cap: float) -> Array:
    """``n`` lengths of ``nominal``: uniform, or log-normal of the same mean once capped at
    ``cap``, the context they meet."""
    if lengths.tail_sigma > 0:
        mean = nominal * (1.0 + lengths.low) / 2.0
        s = lengths.tail_sigma
        x = rng.lognormal(tail_mu(mean, s, max(cap, 1.0)), s, n)
    else:
        x = rng.integers(int(nominal * lengths.low), int(nominal) + 1, n).astype(float)
    return np.clip(np.round(x), 1.0, lengths.limit)


def _output_lengths(lengths: Lengths, n: int, rng: np.random.Generator) -> Array:
    if not lengths.output_mix:  # capped at the context left after an average prompt
        return _lengths(lengths.osl, lengths, n, rng, max(lengths.limit - lengths.mean_context, 1.0))
    shares = np.array([share for share, _ in lengths.output_mix])
    means = np.array([mean for _, mean in lengths.output_mix])
    k = rng.choice(len(shares), size=n, p=shares / shares.sum())
    return np.clip(np.rint(rng.exponential(means[k])), 1.0, lengths.limit)


def read_trace(path: Path, context: float = math.inf) -> Trace:
    """A trace file: CSV with columns ``arrival_s``, ``input_tokens``, ``output_tokens``, one row
    per request, arrival times non-decreasing, each request within the model's ``context`` (its
    prompt and output together); a bad row is named by its line in the file."""
    header, rows, lines = read_csv(path, "--trace")
    for col in ("arrival_s", "input_tokens", "output_tokens"):
        if col not in header:
            raise InputError(str(path), col, "is a required column")
    if not rows:
        raise InputError(str(path), "--trace", "has no requests")
    values = np.empty((len(rows), 3))
    last = 0.0
    for i, row in enumerate(rows):
        where = f"{path} line {lines[i]}"
        shape = row_shape_problem(row)
        if shape:
            raise InputError(where, "", shape)
        for c, (col, least) in enumerate((("arrival_s", 0.0), ("input_tokens", 1.0), ("output_tokens", 1.0))):
            try:
                x = float(row[col] or "")
            except ValueError:
                x = math.nan
            if not math.isfinite(x) or x < least or x > MAX_MAGNITUDE:
                rule = f"must be a number >= {least:g} and <= {MAX_MAGNITUDE:g}"
                raise InputError(where, col, rule, Written(row[col]))
            if plausible(x):  # an arrival of 1e-20 s: within the range above, below the files' least
                raise InputError(where, col, f"must be 0 or at least {MIN_MAGNITUDE:g}", Written(row[col]))
            if c > 0 and not x.is_integer():  # a request's tokens are whole
                raise InputError(where, col, "must be a whole number of tokens", Written(row[col]))
            values[i, c] = x
        if values[i, 1] + values[i, 2] > context:
            rule = f"with output_tokens must fit the model's context of {context:,.0f} tokens"
            raise InputError(where, "input_tokens", rule, f"{row['input_tokens']} + {row['output_tokens']}")
        if values[i, 0] < last:
            raise InputError(
                where, "arrival_s", "must not be earlier than the row before", Written(row["arrival_s"])
            )
        last = values[i, 0]
    return Trace(arrival_s=values[:, 0], isl=values[:, 1], osl=values[:, 2])


def trace_lengths(trace: Trace) -> Lengths:
    """The lengths a trace replay is priced at (the step-cost tables' prompt and context): its
    requests' own means, drawn from nowhere."""
    return Lengths(float(trace.isl.mean()), float(trace.osl.mean()), low=1.0)
