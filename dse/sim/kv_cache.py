"""KV as a live cache: the placement's plan for resting KV, checked session by session.

The placement (and :mod:`dse.sim.kv_tiers`) treats each class of returning turns as a flow that
it can split among tiers at will, by Little's law. A serving system's cache does not choose per
class: a session's KV enters the top tier when its turn ends, and when a tier is full the entry
that has rested longest moves down to the next tier (least recently used, as SGLang's HiCache
and LMCache demote), and off the bottom one it is dropped, to be recomputed. This module runs
that cache with the capacity the plan gives each tier, on sessions whose think times are
exponential about each class's mean, and reports where returning turns found their KV (hits per
tier, or a recompute) beside the plan's shares.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from dse.sim.kv_tiers import TIER_NAMES, RestingClass

EVICTIONS = ("lru", "think")
MAX_SESSIONS = 200_000  # sessions a run simulates at most (about 0.3 s); more traffic runs scaled down
MIN_ENTRIES = 200  # sessions' KV the smallest tier still holds when traffic is scaled down
OUTCOMES = (*TIER_NAMES, "drop")
"""Where a returning turn finds its KV: in a tier (reloaded from there) or dropped (recomputed)."""


@dataclass(frozen=True)
class KvCacheReport:
    """Per class and over all returning turns: the share found in each tier or recomputed,
    simulated and planned, with the tiers' capacities (GB) the simulation used."""

    capacity_gb: dict[str, float]
    simulated: dict[str, dict[str, float]]  # class (or "all") -> outcome -> share of its returns
    planned: dict[str, dict[str, float]]
    returns: int  # returning turns counted (after the warm-up)
    eviction: str = "lru"

    def difference(self, of: str = "all") -> dict[str, float]:
        """Simulated minus planned share of each outcome, for one class or all."""
        return {o: self.simulated[of][o] - self.planned[of].get(o, 0.0) for o in OUTCOMES}


def class_names(classes: tuple[RestingClass, ...]) -> list[str]:
    """``think<dwell>s``, as a placement names its KV classes (``think600s``); where two classes
    share a dwell, each with its place after it (``think600s#1``)."""
    names = [f"think{c.dwell_s:g}s" for c in classes]
    if len(set(names)) < len(names):
        names = [f"{n}#{i}" for i, n in enumerate(names)]
    return names


def planned_capacity_gb(classes: tuple[RestingClass, ...], requests_per_s: float) -> dict[str, float]:
    """GB the plan rests in each tier (Little's law): the cache the simulation gets."""
    out = dict.fromkeys(TIER_NAMES, 0.0)
    for c in classes:
        stock = requests_per_s * c.share_of_arrivals * c.dwell_s * c.gb
        for t in TIER_NAMES:
            out[t] += stock * c.tiers.get(t, 0.0)
    return out


def simulate_kv_cache(
    classes: tuple[RestingClass, ...],
    requests_per_s: float,
    *,
    capacity_gb: dict[str, float] | None = None,
    horizon_dwells: float = 6.0,
    eviction: str = "lru",
    seed: int = 0,
    max_sessions: int = MAX_SESSIONS,
) -> KvCacheReport:
    """Run the cache for ``horizon_dwells`` times the longest mean think time (the first third a
    warm-up, not counted); ``capacity_gb`` per tier defaults to the plan's
    (:func:`planned_capacity_gb`). ``eviction``: ``lru`` moves the longest-resting entry down;
    ``think`` moves an entry of the class with the longest mean think time first (its oldest),
    which knows what the plan knows: whose turn comes back last.

    Traffic that would start more than ``max_sessions`` sessions in the window runs with the
    arrival rate and every tier's capacity divided by the same factor: with Poisson arrivals and
    exponential think times the shares depend on capacity / (rate x GB), not on either alone, as
    long as each tier still holds many sessions' KV (at least :data:`MIN_ENTRIES`, which bounds
    the factor). The report gives the plan's capacities and the returns the run counted."""
    if eviction not in EVICTIONS:
        raise ValueError(f"eviction must be one of {', '.join(EVICTIONS)}, not {eviction!r}")
    cap = capacity_gb if capacity_gb is not None else planned_capacity_gb(classes, requests_per_s)
    active = [c for c in classes if c.share_of_arrivals > 0 and c.dwell_s > 0]
    names = class_names(classes)
    planned = {names[i]: _planned(c) for i, c in enumerate(classes)}
    total_rate = sum(requests_per_s * c.share_of_arrivals for c in classes)
    planned["all"] = _weighted(
        [planned[names[i]] for i in range(len(classes))],
        [requests_per_s * c.share_of_arrivals / total_rate if total_rate > 0 else 0.0 for c in classes],
    )
    if not active:
        empty = dict.fromkeys(OUTCOMES, 0.0)
        return KvCacheReport(
            cap, {**{n: dict(empty) for n in names}, "all": dict(empty)}, planned, 0, eviction
        )
    rng = np.random.default_rng(seed)
    horizon = horizon_dwells * max(c.dwell_s for c in active)
    warmup = horizon / 3.0
    scale = _scale_down(active, requests_per_s * horizon, cap, max_sessions)
    start, cls = _sessions(classes, requests_per_s, scale, horizon, rng)
    # each session's think time, drawn in the order its rest begins (by time, then session), as a
    # run that draws it when the rest begins does; then every event in time order (a rest's
    # begin before a return at the same instant, then by session), the order a heap gives
    n = len(start)
    by_time = np.lexsort((np.arange(n), start))
    dwell = np.empty(n)
    dwell[by_time] = rng.exponential(np.array([c.dwell_s for c in classes])[cls[by_time]])
    times = np.concatenate([start, start + dwell])
    kinds = np.repeat(np.array([0, 1], dtype=np.int8), n)
    events = np.lexsort((np.tile(np.arange(n), 2), kinds, times))
    by_think = sorted(range(len(classes)), key=lambda i: -classes[i].dwell_s)
    order = by_think if eviction == "think" else [0]  # the queues a full tier evicts from, in turn
    gb = np.array([c.gb for c in classes])[cls]
    group = cls if eviction == "think" else np.zeros(n, dtype=np.int64)
    cache = _Cache({t: v / scale for t, v in cap.items()}, order, gb.tolist(), group.tolist())
    found = np.empty(n, dtype=np.int64)  # each session's outcome (index in OUTCOMES) on return
    counted = np.zeros(n, dtype=bool)
    for e in events.tolist():
        if e < n:
            cache.put(e)
        else:
            sid = e - n
            found[sid] = cache.take(sid)
            counted[sid] = times[e] >= warmup
    tally = np.zeros((len(classes), len(OUTCOMES)), dtype=np.int64)
    np.add.at(tally, (cls[counted], found[counted]), 1)
    counts = {name: {o: int(tally[i, k]) for k, o in enumerate(OUTCOMES)} for i, name in enumerate(names)}
    simulated = {n: _shares(k) for n, k in counts.items()}
    all_counts = {o: sum(counts[n][o] for n in names) for o in OUTCOMES}
    simulated["all"] = _shares(all_counts)
    return KvCacheReport(cap, simulated, planned, sum(all_counts.values()), eviction)


def _scale_down(
    active: list[RestingClass], requests: float, cap: dict[str, float], max_sessions: int
) -> float:
    """The factor that brings ``requests`` sessions down to ``max_sessions``, at most the one that
    leaves the smallest tier :data:`MIN_ENTRIES` sessions of the largest KV; 1 when not needed."""
    sessions = requests * sum(c.share_of_arrivals for c in active)
    if sessions <= max_sessions:
        return 1.0
    smallest = min((v for v in cap.values() if v > 0), default=float("inf"))
    gb = max(c.gb for c in active)
    room = smallest / (MIN_ENTRIES * gb) if gb > 0 else float("inf")  # no KV to hold: any factor
    return float(max(1.0, min(sessions / max_sessions, room)))


def _sessions(
    classes: tuple[RestingClass, ...],
    requests_per_s: float,
    scale: float,
    horizon: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Each session's start (Poisson per class at its rate over ``scale``, in class order) and
    class."""
    starts, cls = [], []
    for i, c in enumerate(classes):
        r = requests_per_s * c.share_of_arrivals / scale
        if r <= 0 or c.dwell_s <= 0:
            continue
        t = np.cumsum(rng.exponential(1.0 / r, size=int(r * horizon * 1.2) + 10))
        t = t[t < horizon]
        starts.append(t)
        cls.append(np.full(len(t), i, dtype=np.int64))
    if not starts:  # no traffic
        return np.empty(0), np.empty(0, dtype=np.int64)
    return np.concatenate(starts), np.concatenate(cls)


class _Cache:
    """Tiers top to bottom, each with queues by arrival (one, or one per class), the one evicted
    from first the first of ``order`` that holds a live entry, its head the longest-resting. An
    entry that returns leaves its tier's count at once and its queue when it reaches the head.
    Sessions are numbered from 0, with their KV's GB and queue group given up front; where a
    session rests is an index of :data:`OUTCOMES` (the last, drop, when in no tier)."""

    def __init__(
        self, capacity_gb: dict[str, float], order: list[int], gb: list[float], group: list[int]
    ) -> None:
        self.tiers = [OUTCOMES.index(t) for t in TIER_NAMES if capacity_gb.get(t, 0.0) > 0]
        self.cap = [capacity_gb[OUTCOMES[t]] + 1e-9 for t in self.tiers]  # full past it, to rounding
        self.used = [0.0] * len(self.tiers)
        self.order = order
        self.queue: list[dict[int, deque[int]]] = [{g: deque() for g in order} for _ in self.tiers]
        self.level = [-1] * len(gb)  # the tier (position in self.tiers) a session rests in, -1 none
        self.gb, self.group = gb, group

    def put(self, sid: int) -> None:
        self._insert(0, sid)

    def _insert(self, level: int, sid: int) -> None:
        if level >= len(self.tiers):
            self.level[sid] = -1
            return
        self.queue[level][self.group[sid]].append(sid)
        self.level[sid] = level
        self.used[level] += self.gb[sid]
        while self.used[level] > self.cap[level]:
            old = self._oldest(level)
            if old is None:
                break
            self.used[level] -= self.gb[old]
            self._insert(level + 1, old)

    def _oldest(self, level: int) -> int | None:
        """The live entry to move down: the head of the first queue in ``order`` that has one."""
        for g in self.order:
            q = self.queue[level][g]
            while q and self.level[q[0]] != level:
                q.popleft()  # returned already: its count left the tier then
            if q:
                return q.popleft()
        return None

    def take(self, sid: int) -> int:
        """Where the session's KV was (an index of OUTCOMES); it leaves the cache (its turn runs)."""
        level = self.level[sid]
        if level < 0:
            return len(OUTCOMES) - 1
        self.level[sid] = -1
        self.used[level] -= self.gb[sid]
        return self.tiers[level]


def _planned(c: RestingClass) -> dict[str, float]:
    shares = {o: float(c.tiers.get(o, 0.0)) for o in OUTCOMES}
    if "drop" not in c.tiers:  # what the tiers do not hold is dropped
        shares["drop"] = max(1.0 - sum(shares[t] for t in TIER_NAMES), 0.0)
    return shares


def _weighted(parts: list[dict[str, float]], weights: list[float]) -> dict[str, float]:
    return {o: sum(w * p.get(o, 0.0) for p, w in zip(parts, weights, strict=True)) for o in OUTCOMES}


def _shares(counts: dict[str, int]) -> dict[str, float]:
    n = sum(counts.values())
    return {o: (counts[o] / n if n else 0.0) for o in OUTCOMES}
