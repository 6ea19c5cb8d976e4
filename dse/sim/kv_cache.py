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

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

from dse.sim.kv_tiers import TIER_NAMES, RestingClass

EVICTIONS = ("lru", "think")
MAX_SESSIONS = 200_000  # sessions a run simulates at most (about 3 s); more traffic runs scaled down
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
    names = [f"class{i}" for i in range(len(classes))]
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
    counts = {n: dict.fromkeys(OUTCOMES, 0) for n in names}
    events: list[tuple[float, int, int]] = []  # (time, kind 0 = rest begins / 1 = returns, session)
    session_class: list[int] = []
    for i, c in enumerate(classes):
        rate = requests_per_s * c.share_of_arrivals / scale
        if rate <= 0 or c.dwell_s <= 0:
            continue
        starts = np.cumsum(rng.exponential(1.0 / rate, size=int(rate * horizon * 1.2) + 10))
        for s in starts[starts < horizon]:
            session_class.append(i)
            events.append((float(s), 0, len(session_class) - 1))
    heapq.heapify(events)
    by_think = sorted(range(len(classes)), key=lambda i: -classes[i].dwell_s)
    order = by_think if eviction == "think" else [0]  # the queues a full tier evicts from, in turn
    cache = _Cache({t: v / scale for t, v in cap.items()}, order)
    while events:
        t, kind, sid = heapq.heappop(events)
        c = classes[session_class[sid]]
        if kind == 0:
            cache.put(sid, c.gb, session_class[sid] if eviction == "think" else 0)
            heapq.heappush(events, (t + float(rng.exponential(c.dwell_s)), 1, sid))
        else:
            found = cache.take(sid)
            if t >= warmup:
                counts[names[session_class[sid]]][found] += 1
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


class _Cache:
    """Tiers top to bottom, each with queues by arrival (one, or one per class), the one evicted
    from first the first of ``order`` that holds a live entry, its head the longest-resting. An
    entry that returns leaves its tier's count at once and its queue when it reaches the head."""

    def __init__(self, capacity_gb: dict[str, float], order: list[int]) -> None:
        self.tiers = [t for t in TIER_NAMES if capacity_gb.get(t, 0.0) > 0]
        self.cap = {t: capacity_gb[t] for t in self.tiers}
        self.used = dict.fromkeys(self.tiers, 0.0)
        self.order = order
        self.queue: dict[tuple[str, int], deque[int]] = {(t, g): deque() for t in self.tiers for g in order}
        self.where: dict[int, str] = {}
        self.gb: dict[int, float] = {}
        self.group: dict[int, int] = {}

    def put(self, sid: int, gb: float, group: int) -> None:
        self.gb[sid], self.group[sid] = gb, group
        self._insert(0, sid)

    def _insert(self, level: int, sid: int) -> None:
        if level >= len(self.tiers):
            self.where[sid] = "drop"
            return
        tier = self.tiers[level]
        self.queue[tier, self.group[sid]].append(sid)
        self.where[sid] = tier
        self.used[tier] += self.gb[sid]
        while self.used[tier] > self.cap[tier] + 1e-9:
            old = self._oldest(tier)
            if old is None:
                break
            self.used[tier] -= self.gb[old]
            self._insert(level + 1, old)

    def _oldest(self, tier: str) -> int | None:
        """The live entry to move down: the head of the first queue in ``order`` that has one."""
        for g in self.order:
            q = self.queue[tier, g]
            while q and self.where.get(q[0]) != tier:
                q.popleft()  # returned already: its count left the tier then
            if q:
                return q.popleft()
        return None

    def take(self, sid: int) -> str:
        """Where the session's KV was; it leaves the cache (its turn runs)."""
        tier = self.where.pop(sid, "drop")
        gb = self.gb.pop(sid, 0.0)
        self.group.pop(sid, None)
        if tier != "drop":
            self.used[tier] -= gb
        return tier


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
