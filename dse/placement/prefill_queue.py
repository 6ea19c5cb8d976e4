"""A dedicated prefill server's TTFT against its load, as the engines batch prompts.

A prefill server (disaggregated, attention-FFN and four-stage designs) forms each forward from the
prompts queued when the one before ends, and, idle, starts on the first to arrive (SGLang's
prefill event loop, TensorRT-LLM's context-only executor; the engine-level simulation's
``_prefill_batch``). With Poisson arrivals at ``lam`` a second and forwards of ``T`` seconds, a
forward finds ``x = lam * T`` prompts on average, so it batches ``x + e^-x`` (at least one, the
one it waited for), is busy a share ``x / (x + e^-x)`` of the time and prices each prompt at
``T / (x + e^-x)``: a forward of a few prompts reads the weights all the same.

A prompt's TTFT, at the percentile ``q``: the fitted front end and hand-off
(:class:`~dse.perf.params.LatencyParams`, added by the caller), the KV's transfer, then

* a wait only where every instance of the pool is busy (Erlang C over the instances the traffic
  needs at that load: the router sends a prompt to an idle one where there is one), for the rest
  of the forward in progress, and one whole forward more where the engine hand-shakes first
  (SGLang's bootstrap queue: a prompt arriving during a forward misses the next one when another
  prompt fills it);
* its own forwards, of a batch at the arrivals' ``q`` quantile. Under attention data
  parallelism a forward takes at most its rank's share of the budget of one prompt (SGLang
  divides ``--chunked-prefill-size`` by the DP size), so a longer prompt takes ``m`` forwards,
  and SGLang's such servers run the fitted
  :attr:`~dse.perf.params.LatencyParams.dp_prefill_slowdown` slower up to the budget it was fitted
  at, as the simulation runs them (:func:`~dse.perf.latency_tables.slowed_forward`);
* near the most an instance can take, an M/D/1 wait at the full batch's price per prompt.

Where the arrivals' ``q`` quantile passes one forward, the prompts past it wait for forwards of
their own (a prompt as long as the budget: every forward takes one). The curve is one kind of
prompt's (a fresh prompt, or a returning turn's suffix); the other kinds are priced at a forward of
as many tokens. ``benchmarks/prefill_queue.py`` sets it against the engine-level simulation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from dse.perf.latency_tables import ENGINE_RULES, SLOWED_UP_TO_TOKENS, slowed_forward
from dse.perf.params import PerfParams
from dse.perf.pool import Array
from dse.placement.shapes import Shapes

POINTS = 48  # loads tabulated, from none to a full forward's prompts arriving during one
SERVERS_MAX = 32.0  # instances a prompt's chance of waiting is priced over, at most (more: as 32)


@dataclass(frozen=True)
class PrefillCurve:
    """One shape's prefill server over rising load: per point, the TTFT a prompt of the curve's
    kind gains over one alone at the unit's price (``extra_s``, seconds), the share of its time
    it is busy, each case's busy seconds per prompt (fresh, midfill, recompute) over a full
    batch's (``more``, ``(3, points)``) and the prompts' worth of tokens a forward takes;
    busy time and a lone prompt are over ``scale`` times their price."""

    extra_s: Array
    share: Array
    more: Array
    batch: Array  # prompts of the curve's kind, in tokens' worth, a forward takes
    scale: float  # a lone prompt's forward over its price (the slowdown, where one applies)
    forwards: int  # forwards one prompt takes (attention-DP lanes)


def prefill_curve(
    s: Shapes, i: int, engine: str, p: PerfParams, percentile: float, rate: float, case: int = 0
) -> PrefillCurve:
    """The curve of shape ``i`` for a pool that takes ``rate`` prompts a second: fresh prompts
    (``case`` 0), or returning turns' suffixes against their reloaded prefix (1, a midfill pool).
    A pipelined shape (``pp`` stages) runs each forward through its stages, the activations'
    hops added, with ``pp`` forwards in flight: ``pp`` servers an instance."""
    rules = ENGINE_RULES[engine]
    ranks = max(float(s.pool.attn_dp[i]), 1.0)
    slowdown = p.latency.dp_prefill_slowdown if rules.dp_prefill_slowed and ranks > 1 else 1.0
    pp = float(s.pp[i])
    cost = (s.fresh, s.midfill)[case]
    most = s.most_prompts(i, case)
    up_to = SLOWED_UP_TO_TOKENS / s.budget_tokens(i)  # of a full forward, the slowdown's budget
    slowed = _Slowed(slowdown, up_to)
    scale = float(slowed.factor(s, i, np.array([1.0]), case)[0])  # a lone prompt's
    m = max(math.ceil(ranks / most - 1e-9), 1)  # the prompt over its rank's share of the budget
    q = percentile / 100.0
    z = NormalDist().inv_cdf(q)
    x = most * np.linspace(0.0, 1.0, POINTS) ** 2  # prompts arriving during a forward
    batch = x + np.exp(-x) / m  # prompts' worth of tokens a forward takes
    high = np.minimum(batch + z * np.sqrt(x), most)  # at the arrivals' q quantile
    lag = max(float(cost.one_s[i] - s.busy_at(i, 1.0)[case]), 0.0) if pp > 1 else 0.0  # the hops
    forward = _forward_s(s, i, slowed, np.r_[batch, high, most], case) + lag
    t, t_high, t_full = forward[:POINTS], forward[POINTS:-1], float(forward[-1])
    busy = x / batch
    lam = pp * x / t  # prompts a second an instance takes
    servers = pp * np.where(lam > 0, np.floor(rate / np.maximum(lam, 1e-12)), SERVERS_MAX)
    wait = erlang_c(np.clip(servers, 1.0, SERVERS_MAX), busy)
    tail = np.clip((q - (1.0 - wait)) / np.maximum(wait, 1e-12), 0.0, 1.0)  # of a forward, if it waits
    missed = -np.expm1(-x) if rules.bootstrap else 0.0  # another prompt fills the next forward
    ahead = np.where(wait > 1.0 - q, t * (tail + missed), 0.0)
    service = t_full / (most * pp)  # an instance's seconds per prompt at full batches
    near = np.minimum(lam * service, 0.99)  # the load against the most it can take
    queue = max(1.0, -math.log(1.0 - q)) * near / (2.0 * (1.0 - near)) * service  # M/D/1
    # past the load where the arrivals' quantile fits one forward, the prompts over it wait for
    # forwards of their own first (long prompts: a forward takes one, whatever the percentile): a
    # second measure of the queue the M/D/1 term prices, so the larger of the two
    spill = np.maximum(batch + z * np.sqrt(x) - most, 0.0) / most * t_full
    extra = ahead + m * t_high + np.maximum(spill, queue) - scale * float(cost.one_s[i])
    # each case's busy time per prompt in a forward of as many tokens (its prompts' worth of them)
    most_of = np.array([s.most_prompts(i, c) for c in range(3)])
    same_tokens = np.maximum(batch[None, :] * (most_of / most)[:, None], 1.0)  # (3, points)
    more = np.stack(
        [s.busy_at(i, same_tokens[c])[c] * slowed.factor(s, i, same_tokens[c], c) for c in range(3)]
    )
    more = more / (scale * pp) / _full(s, i)
    more[case] = (t / (batch * pp)) / (scale * float(cost.busy_s[i]))
    held = near < 0.98
    return PrefillCurve(extra[held], busy[held], more[:, held], batch[held], scale, m)


def erlang_c(servers: Array, busy: Array) -> Array:
    """The chance that a prompt finds every one of ``servers`` instances busy, each busy a share
    ``busy`` of the time (Erlang C): the pool's router sends it to an idle one where there is one
    (SGLang's and Dynamo's routers by load; the simulation's, by the fewest queued tokens)."""
    n = np.asarray(servers, dtype=float)
    load = n * np.minimum(busy, 1.0 - 1e-9)
    b = np.ones_like(load)
    for k in range(1, int(n.max()) + 1):  # Erlang B, up to each pool's own count
        b = np.where(k <= n, load * b / (k + load * b), b)
    return n * b / np.maximum(n - load * (1.0 - b), 1e-12)


def _full(s: Shapes, i: int) -> Array:
    """Busy seconds per prompt at a full batch, as the shapes price it: fresh, midfill, recompute."""
    return np.array([[s.fresh.busy_s[i]], [s.midfill.busy_s[i]], [s.recompute.busy_s[i]]])


@dataclass(frozen=True)
class _Slowed:
    """An attention-DP prefill server's fitted slowdown, up to a forward of ``up_to`` of a full
    one's tokens (:func:`~dse.perf.latency_tables.slowed_forward`); 1: none."""

    slowdown: float
    up_to: float

    def factor(self, s: Shapes, i: int, prompts: Array, case: int) -> Array:
        """A forward of ``prompts`` prompts' worth of ``case`` over its price."""
        if self.slowdown == 1.0:
            return np.ones_like(prompts, dtype=float)
        priced = s.busy_at(i, np.maximum(prompts, 1.0))[case] * np.maximum(prompts, 1.0)
        budget = self.up_to * s.most_prompts(i, case)
        at_budget = float(s.busy_at(i, max(budget, 1.0))[case]) * max(budget, 1.0)
        return np.asarray(slowed_forward(priced, at_budget, self.slowdown) / priced)


def _forward_s(s: Shapes, i: int, slowed: _Slowed, prompts: Array, case: int) -> Array:
    """Seconds of a forward of ``prompts`` prompts' worth of tokens of ``case``; below one prompt
    (an attention-DP lane's share of one), along the line through one and two prompts."""
    one, two = (
        float((slowed.factor(s, i, np.array([b]), case) * s.busy_at(i, b)[case])[0]) * b for b in (1.0, 2.0)
    )
    top = np.maximum(prompts, 1.0)
    at = slowed.factor(s, i, top, case) * s.busy_at(i, top)[case] * top
    return np.where(prompts >= 1.0, at, one - (1.0 - prompts) * (two - one))
