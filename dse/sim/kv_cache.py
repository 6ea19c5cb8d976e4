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

from dataclasses import dataclass

import numpy as np

from dse.jit import njit
from dse.sim.kv_tiers import TIER_NAMES, RestingClass

EVICTIONS = ("lru", "think")
MAX_SESSIONS = 200_000  # sessions a run simulates at most (about 0.04 s); more traffic runs scaled down
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
    scaled = {t: v / scale for t, v in cap.items()}
    tiers = np.array([OUTCOMES.index(t) for t in TIER_NAMES if scaled.get(t, 0.0) > 0], dtype=np.int64)
    room = np.array([scaled[OUTCOMES[t]] + 1e-9 for t in tiers])  # full past it, to rounding
    order_ = np.array(order, dtype=np.int64)
    found = _replay(events, tiers, room, gb, np.asarray(group, dtype=np.int64), order_, len(OUTCOMES) - 1)
    counted = np.zeros(n, dtype=bool)  # each session's return, when after the warm-up
    back = events[events >= n]
    counted[back - n] = times[back] >= warmup
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


@njit(cache=True)
def _replay(events, tiers, room, gb, group, order, drop):  # type: ignore[no-untyped-def]
    """Every event in order (``e < n``: session ``e``'s rest begins; else session ``e - n``
    returns) through the tiers (``tiers``: their places in OUTCOMES, top first; ``room``: their
    GB), each with a queue by arrival per group (one, or one per class), the one evicted from
    first the first of ``order`` that holds a live entry, its head the longest-resting. A rest
    enters the top tier; a full tier moves its oldest live entry down a tier, off the bottom one
    to be dropped. An entry that returns leaves its tier's count at once and its queue when it
    reaches the head. Returns each session's outcome on return (an index of OUTCOMES, ``drop``
    when it was in no tier).

    A tier's evictions are taken in its own order, tier by tier: each tier sees the entries put
    into it and taken from it in the same order as when each eviction goes down at once (a tier
    changes no other tier above it), so the same outcomes to the bit as that event-by-event cache
    (``tests/test_kv_cache.py``'s reference), in compiled code (100,000 sessions: 0.15 s in
    Python before)."""
    n = len(gb)
    levels = len(tiers)
    groups = group.max() + 1 if n else 1
    start = np.zeros(groups + 1, np.int64)  # each group's slice of a tier's queue buffer
    for i in range(n):
        start[group[i] + 1] += 1
    for g in range(groups):
        start[g + 1] += start[g]
    queue = np.empty((max(levels, 1), max(n, 1)), np.int64)  # a session enters a tier once
    head = np.zeros((max(levels, 1), groups), np.int64)
    tail = np.zeros((max(levels, 1), groups), np.int64)
    for t in range(levels):
        for g in range(groups):
            head[t, g] = start[g]
            tail[t, g] = start[g]
    used = np.zeros(max(levels, 1))
    level = np.full(n, -1, np.int64)
    found = np.full(n, drop, np.int64)
    moving = np.empty(max(n, 1), np.int64)  # entries going down into the next tier, in order
    moved = np.empty(max(n, 1), np.int64)
    for e in events:
        if e >= n:  # a return: where its KV was; it leaves the cache
            sid = e - n
            lv = level[sid]
            if lv >= 0:
                level[sid] = -1
                used[lv] -= gb[sid]
                found[sid] = tiers[lv]
            continue
        moving[0] = e
        count = 1
        for t in range(levels):
            out = 0
            for k in range(count):
                sid = moving[k]
                g = group[sid]
                queue[t, tail[t, g]] = sid
                tail[t, g] += 1
                level[sid] = t
                used[t] += gb[sid]
                while used[t] > room[t]:
                    old = -1
                    for g2 in order:
                        while head[t, g2] < tail[t, g2] and level[queue[t, head[t, g2]]] != t:
                            head[t, g2] += 1  # returned already: its count left the tier then
                        if head[t, g2] < tail[t, g2]:
                            old = queue[t, head[t, g2]]
                            head[t, g2] += 1
                            break
                    if old < 0:
                        break
                    used[t] -= gb[old]
                    moved[out] = old
                    out += 1
            for k in range(out):
                moving[k] = moved[k]
            count = out
            if count == 0:
                break
        for k in range(count):  # off the bottom tier: dropped
            level[moving[k]] = -1
    return found


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
