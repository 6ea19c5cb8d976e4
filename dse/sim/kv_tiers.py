"""KV resting between turns, per tier, over time: Little's law as a first-order flow.

A class of returning turns (think-time bin) arrives at ``rate(t) * share`` requests/s; each turn's
session rested ``dwell_s`` before it, holding ``gb`` of KV in the tier the placement chose. The
resting stock follows ``dI/dt = rate * share * gb - I / dwell``, which settles at Little's
``rate * dwell * gb``: the stock follows traffic with a lag of one dwell time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.jit import njit
from dse.sim.scenario import Array as Arrays
from dse.sim.scenario import Arrivals

TIER_NAMES = ("hbm", "dram", "nvme", "network")


@dataclass(frozen=True)
class RestingClass:
    share_of_arrivals: float  # returning turns of this class per request
    dwell_s: float
    gb: float  # KV of one resting session
    tiers: dict[str, float]  # tier -> share of the class resting there


def resting_kv_gb(classes: tuple[RestingClass, ...], arrivals: Arrivals, t: Arrays) -> dict[str, Arrays]:
    """GB resting in each tier at the times ``t`` (starting empty at 0, or at ``t[0]`` where that
    is earlier), each step toward the level of the arrivals at its start."""
    t = np.asarray(t, dtype=float)
    out = {tier: np.zeros_like(t) for tier in TIER_NAMES}
    if not len(t):
        return out
    starts = np.concatenate(([min(0.0, float(t[0]))], t[:-1]))
    rate = np.asarray(arrivals.rate(starts), dtype=float)
    dt = t - starts
    for c in classes:
        series = _relax(rate * (c.share_of_arrivals * c.dwell_s * c.gb), dt, float(c.dwell_s))
        for tier in TIER_NAMES:
            out[tier] += series * c.tiers.get(tier, 0.0)
    return out


@njit(cache=True)
def _relax(level: Arrays, dt: Arrays, tau: float) -> Arrays:  # pragma: no cover - compiled
    """The stock that relaxes toward ``level`` with time constant ``tau``, starting empty: exact
    for a level held over each step (Little's law reached after a few dwell times)."""
    out = np.empty_like(level)
    stock = 0.0
    for i in range(level.size):
        stock = level[i] + (stock - level[i]) * np.exp(-dt[i] / tau)
        out[i] = stock
    return out
