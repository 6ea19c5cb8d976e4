"""What a simulation runs: the pipeline configurations and the traffic they face.

A :class:`Pipeline` holds arrays with one element per configuration (the simulators are vectorised
over configurations): a prefill pool of ``prefill_instances`` servers that each take
``prefill_s`` seconds per request, a KV handoff of ``handoff_s``, a buffer of at most
``buffer_max`` prefilled requests waiting for a decode slot, and a decode pool of
``decode_instances`` instances with ``slots`` sequences each whose time per output token at batch
``n`` is ``step_table[n]`` (taken from the stage performance model, so both simulators see the
same physics). Decode pools of several sizes or speeds (:func:`pooled_decode`) keep each pool's
instances, slots and table for the discrete-event reference, which steps them apart, and give
the fluid model one kind of instance of the same capacity and mean time per output token. Output
lengths are a mixture of exponentials (:class:`OutputLengths`): a long-tailed mixture is the
multi-class fluid's classes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from dse.sim.kinds import ArrivalKind, PlannerKind

Array = np.ndarray


@dataclass(frozen=True)
class Arrivals:
    """A Poisson process with a time-varying rate (requests/s)."""

    kind: ArrivalKind
    rate_per_s: float
    burst_factor: float = 2.0
    burst_start_s: float = 0.0
    burst_s: float = 0.0
    amplitude: float = 0.5
    period_s: float = 86_400.0
    trace_times_s: tuple[float, ...] = ()  # interval starts, ascending
    trace_rates: tuple[float, ...] = ()

    def rate(self, t: Array | float) -> Array:
        t = np.asarray(t, dtype=float)
        base = np.full(t.shape, self.rate_per_s)
        if self.kind is ArrivalKind.BURST:
            on = (t >= self.burst_start_s) & (t < self.burst_start_s + self.burst_s)
            return np.where(on, base * self.burst_factor, base)
        if self.kind is ArrivalKind.DIURNAL:
            return base * (1.0 + self.amplitude * np.sin(2.0 * math.pi * t / self.period_s))
        if self.kind is ArrivalKind.TRACE:
            idx = np.searchsorted(np.asarray(self.trace_times_s), t, side="right") - 1
            rates = np.asarray(self.trace_rates)
            return np.where(idx >= 0, rates[np.clip(idx, 0, len(rates) - 1)], 0.0)
        return base

    def max_rate(self, horizon_s: float) -> float:
        return float(self.rate(np.linspace(0.0, horizon_s, 4097)).max())

    def mean_rate(self, horizon_s: float) -> float:
        """Requests/s on average over ``[0, horizon_s]`` (a burst's, a swing's, a trace's)."""
        return float(self.rate(np.linspace(0.0, horizon_s, 4097)).mean())


@dataclass(frozen=True)
class OutputLengths:
    """Output tokens per request: class ``k`` with probability ``shares[k]`` has an exponential
    length of mean ``means[k]`` (at least one token)."""

    shares: tuple[float, ...]
    means: tuple[float, ...]

    @property
    def mean(self) -> float:
        return float(np.dot(self.shares, self.means))

    def quantile(self, q: float) -> float:
        """The ``q`` quantile of the mixture (bisection on its CDF; kept per mixture and ``q``:
        a study's trials ask the same one of every fluid run)."""
        return _mixture_quantile(tuple(map(float, self.shares)), tuple(map(float, self.means)), float(q))


@functools.lru_cache(maxsize=256)
def _mixture_quantile(shares: tuple[float, ...], means: tuple[float, ...], q: float) -> float:
    lo, hi = 0.0, 50.0 * max(means)
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        cdf = sum(s * (1.0 - math.exp(-mid / m)) for s, m in zip(shares, means, strict=True))
        lo, hi = (mid, hi) if cdf < q else (lo, mid)
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Planner:
    """The slow loop that moves instances between prefill and decode (same GPUs, same shape).

    Every ``period_s`` it reads measurements that are ``delay_s`` old and may move instances;
    a moved instance serves nothing for ``switch_s`` while it reloads."""

    kind: PlannerKind = PlannerKind.NONE
    period_s: float = 60.0
    delay_s: float = 60.0
    switch_s: float = 30.0
    threshold_s: float = 2.0  # backlog, in seconds of work, that triggers a move
    max_move: int = 4
    target_utilisation: float = 0.8  # predictive planner


@dataclass(frozen=True)
class Pipeline:
    """Configurations, one element per array entry. Stages in order: a returning turn first
    reloads its KV (``reload_servers`` links of ``reload_s`` each; ``inf`` servers is a pure
    delay); prefill servers take fresh prompts (``prefill_s``) and midfills (``midfill_s``) first
    come first served; the KV handoff to decode (``handoff_servers`` of ``handoff_s`` a fresh prompt,
    ``midfill_handoff_s`` a returning turn); the buffer; decode."""

    prefill_instances: Array  # prefill servers
    prefill_s: Array  # busy seconds of one server per fresh prompt
    handoff_s: Array
    decode_instances: Array
    slots: Array  # sequences per decode instance
    step_table: Array  # (configs, max_slots + 1) seconds per output token at batch n
    buffer_max: Array  # requests; inf for an unbounded buffer
    label: tuple[str, ...] = field(default=())
    midfill_share: Array | None = None  # fraction of arrivals that are returning turns (default 0)
    midfill_s: Array | None = None  # busy seconds of one server per midfill (default prefill_s)
    reload_s: Array | None = None  # seconds one reload takes (default 0)
    reload_servers: Array | None = None  # reloads in flight at once (default inf: no queue)
    handoff_servers: Array | None = None  # handoffs in flight at once (default inf: no queue)
    # seconds to hand a returning turn's KV to decode: its whole context, the cached prefix and the
    # suffix, where a fresh prompt hands its prompt's (default handoff_s)
    midfill_handoff_s: Array | None = None
    # decode instances that prefill too (aggregated): the share of their time the step table
    # leaves to prefill (default 0: separate pools). A step then takes the table's time times
    # (1 - share) / (1 - the share of time the prefill servers are busy), so prefill that takes
    # more time than planned slows decode, and less speeds it up: one instance's time, counted once
    prefill_time_share: Array | None = None
    # the decode pools apart, as the discrete-event reference steps them: (configs, pools)
    # instances and slots, and (configs, pools, width) tables, each read at the pool's own batch
    # with the share above (default: one pool, the fields above; :func:`pooled_decode`)
    decode_pool_instances: Array | None = None
    decode_pool_slots: Array | None = None
    decode_pool_tables: Array | None = None
    # what one planner move takes from one role and gives the other: prefill servers and decode
    # instances of the same GPUs (default 1 and 1: a pipeline of interchangeable instances). A
    # placed design's prefill instance batching m prompts is m servers, and its GPUs need not be a
    # decode instance's: moved one for one, 8 servers of an 8-GPU instance had become 8 decode
    # instances, 64 GPUs (:func:`dse.sim.from_placement.planner_steps`)
    planner_prefill_step: Array | None = None
    planner_decode_step: Array | None = None

    def __post_init__(self) -> None:
        n = len(self.prefill_instances)
        defaults = {
            "midfill_share": np.zeros(n),
            "midfill_s": self.prefill_s,
            "reload_s": np.zeros(n),
            "reload_servers": np.full(n, np.inf),
            "handoff_servers": np.full(n, np.inf),
            "midfill_handoff_s": self.handoff_s,
            "prefill_time_share": np.zeros(n),
            "decode_pool_instances": np.reshape(self.decode_instances, (n, 1)),
            "decode_pool_slots": np.reshape(self.slots, (n, 1)),
            "decode_pool_tables": np.asarray(self.step_table)[:, None, :],
            "planner_prefill_step": np.ones(n),
            "planner_decode_step": np.ones(n),
        }
        for name, value in defaults.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, np.asarray(value, dtype=float))

    @property
    def n(self) -> int:
        return len(self.prefill_instances)

    def one(self, i: int) -> Pipeline:
        """Configuration ``i`` alone."""
        parts = {f.name: getattr(self, f.name)[i : i + 1] for f in fields(self) if f.name != "label"}
        return Pipeline(**parts, label=self.label[i : i + 1] if self.label else ())

    def tiled(self, copies: int) -> Pipeline:
        """Every configuration repeated ``copies`` times in a row (batched timing runs)."""
        parts = {
            f.name: np.repeat(getattr(self, f.name), copies, axis=0)
            for f in fields(self)
            if f.name != "label"
        }
        return Pipeline(**parts, label=tuple(x for x in self.label for _ in range(copies)))

    def arrays(self, name: str) -> Array:
        """A stage array, never None (for type checkers)."""
        value = getattr(self, name)
        assert value is not None
        return np.asarray(value, dtype=float)

    def tpot(self, batch: Array) -> Array:
        """Seconds per output token at per-instance ``batch`` (linear between table entries)."""
        width = self.step_table.shape[1]
        b = np.clip(np.asarray(batch, dtype=float), 0.0, width - 1.0)
        lo = np.floor(b).astype(int)
        hi = np.minimum(lo + 1, width - 1)
        rows = np.arange(self.n) if b.ndim else 0
        w = b - lo
        return self.step_table[rows, lo] * (1 - w) + self.step_table[rows, hi] * w

    def decode_capacity(self, lengths: OutputLengths) -> Array:
        """Requests/s the decode pool completes with every slot full."""
        full = self.tpot(self.slots)
        return self.decode_instances * self.slots / (full * lengths.mean)

    def prefill_capacity(self) -> Array:
        """Requests/s the prefill servers finish at the pipeline's mix of fresh and returning."""
        m = self.arrays("midfill_share")
        return self.prefill_instances / ((1.0 - m) * self.prefill_s + m * self.arrays("midfill_s"))


def pooled_decode(
    instances: Sequence[float], slots: Sequence[float], tables: Sequence[Array], shares: Sequence[float]
) -> dict[str, Array]:
    """The decode fields of a one-configuration :class:`Pipeline` for decode pools of their own
    ``instances``, whole ``slots`` per instance and ``tables`` (seconds per output token at every
    batch 0..slots, leaving prefill the pool's own time share ``shares``: 0 for a decode pool).

    The discrete-event reference steps each pool's instances at their own slots and table. The
    fluid model steps one kind of instance, to stay one compiled loop over configurations: as many
    as the pools have in all, each holding their mean slots, whose batch ``b`` steps at the time
    that fills every pool to the same ``u = b / mean slots``: ``N`` sequences over the tokens per
    second of every pool at ``u x`` its slots. Its capacity is then the pools' summed, every slot
    full (no pool counted as instances of another, none rounded up), and its time per output token
    the mean over the pools' requests (their completions weigh each pool's time by its tokens per
    second, which the sum is): exact for a router that keeps the pools equally full, and at full
    load for one that gives each its capacity's share of the traffic (the engine-level
    simulation's split). The spread of TPOT between the pools is the reference's, and the
    engine-level simulation's, to show.

    Pools that prefill too step at (1 - share) / (1 - the prefill servers' busy share) of their
    table in both simulators, over one pool of prefill servers: each table is read back to no
    prefill, pooled, and left again at one share for all, the pools' own weighted by their
    capacity, so that the table's capacity is the sum of theirs at their own shares (the step the
    simulators take does not depend on that share, only the capacity a table shows). One pool
    keeps its own table.
    """
    x, s, phi = (np.asarray(v, dtype=float) for v in (instances, slots, shares))
    if len(x) == 1:
        share, mean_slots, table = float(phi[0]), float(s[0]), np.asarray(tables[0], dtype=float)
        apart = table[None, :]
    else:
        raw = [np.asarray(t, dtype=float) * (1.0 - f) for t, f in zip(tables, phi, strict=True)]
        cap = x * s / np.array([r[int(k)] for r, k in zip(raw, s, strict=True)])  # tokens/s, no prefill
        share = float(np.dot(cap, phi) / cap.sum())
        mean_slots = float(np.dot(x, s) / x.sum())
        table = _pooled_table(x, s, raw, mean_slots) / (1.0 - share)
        width = int(s.max()) + 1
        apart = np.stack([np.pad(r, (0, width - len(r)), mode="edge") for r in raw]) / (1.0 - share)
    return {
        "decode_instances": np.array([x.sum()]),
        "slots": np.array([mean_slots]),
        "step_table": table[None, :],
        "prefill_time_share": np.array([share]),
        "decode_pool_instances": x[None, :],
        "decode_pool_slots": s[None, :],
        "decode_pool_tables": apart[None],
    }


def _pooled_table(x: Array, s: Array, raw: list[Array], mean_slots: float) -> Array:
    """Seconds per output token of the pooled instance (:func:`pooled_decode`) at every batch
    ``b`` up to its mean slots rounded up: ``sum(x s) / sum(x s / raw(u s))`` with every pool at
    the same fill ``u = b / mean slots``. Past fractional mean slots, the last entry is the one the
    table's linear reading needs to give every slot full exactly at the mean slots."""
    total = float(np.dot(x, s))

    def at(u: Array) -> Array:  # N / (tokens per second), both over u
        return total / sum(
            xj * sj / np.interp(u * sj, np.arange(len(r), dtype=float), r)
            for xj, sj, r in zip(x, s, raw, strict=True)
        )

    top = int(np.ceil(mean_slots - 1e-9))
    table = at(np.minimum(np.arange(top + 1, dtype=float) / mean_slots, 1.0))
    w = mean_slots - (top - 1)  # where the mean slots fall between the last two entries
    if w < 1.0 - 1e-9:
        table[top] = (float(at(np.ones(1))[0]) - table[top - 1] * (1.0 - w)) / w
    return table


@dataclass(frozen=True)
class Scenario:
    """Traffic, lengths, planner and horizon; shared by every configuration of a run."""

    arrivals: Arrivals
    lengths: OutputLengths
    planner: Planner = Planner()
    horizon_s: float = 1800.0
    warmup_s: float = 300.0  # left out of the summary statistics


def scenario_from_record(data: dict[str, Any]) -> Scenario:
    """A :class:`Scenario` from its plain values (as a study trial stores it)."""
    a, lengths, planner = data["arrivals"], data["lengths"], data["planner"]
    return Scenario(
        arrivals=Arrivals(
            **{
                **a,
                "kind": ArrivalKind(a["kind"]),
                "trace_times_s": tuple(a["trace_times_s"]),
                "trace_rates": tuple(a["trace_rates"]),
            }  # fmt: skip
        ),
        lengths=OutputLengths(tuple(lengths["shares"]), tuple(lengths["means"])),
        planner=Planner(**{**planner, "kind": PlannerKind(planner["kind"])}),
        horizon_s=float(data["horizon_s"]),
        warmup_s=float(data["warmup_s"]),
    )
