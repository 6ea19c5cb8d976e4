"""Decode slots kept free for the traffic's fluctuation: square-root staffing as a linear row.

A decode instance runs at most its batch of sequences (its slots); a request that finds every slot
of its pool taken waits for one before its first token. Arrivals are Poisson, so a pool whose
slots only just hold the mean number of sequences in flight makes requests wait about half the
time, for seconds: a sequence holds its slot for its whole output. Halfin and Whitt's heavy-traffic
limit of the M/M/N queue ("Heavy-traffic limits for queues with many exponential servers",
Operations Research 29(3), 1981) puts the chance of a wait at ``1 / (1 + beta Phi(beta) /
phi(beta))`` for ``N = a + beta sqrt(a)`` slots at ``a`` sequences in flight. Choosing ``beta`` so
that this chance is ``1 - q`` (``q`` the TTFT target's percentile) gives the sequences ``N`` slots
carry: ``h(N) = ((sqrt(beta^2 + 4 N) - beta) / 2)^2``. Slots in one pool share their
fluctuation, so ``h`` is convex: a large pool keeps a smaller share of its slots free than a
small one.

A convex ``h`` lies above each of its tangents, so ``a <= h(N0) + h'(N0) (N - N0)`` is a linear
row that never admits more than ``h`` does, and it is exact at ``N0``. Each unit's row takes its
tangent at the slots it would need to carry the whole traffic alone (``N0 = a + beta sqrt(a)``):
exact for the usual design, one pool per role, and stricter for a pool that carries a share of
it, the more so the smaller the pool (where the wait is worst). The tangent's intercept,
``h(N0) - h'(N0) N0``, is negative: a pool pays it once, where it is used at all (a binary in the
formulation). ``beta = 0`` gives ``h(N) = N``: the row without headroom.
"""

from __future__ import annotations

import math

import numpy as np

from formulations.placement_data import Objective, PlacementData, Role

USED_TOL = 1e-6  # HiGHS's mip_feasibility_tolerance: a binary this close to 0 counts as 0
SERVE_ROOM = 4.0  # under goodput, a mixed unit may serve up to this many times the sized traffic


def wait_beta(percentile: float) -> float:
    """``beta`` at which a request waits for a slot with chance ``1 - percentile / 100``
    (Halfin-Whitt): 0.51 at p50, 1.42 at p90, 2.37 at p99."""
    target = percentile / max(100.0 - percentile, 1e-9)  # beta Phi(beta) / phi(beta) at that chance

    def ratio(b: float) -> float:
        cdf = 0.5 * (1.0 + math.erf(b / math.sqrt(2.0)))
        pdf = math.exp(-0.5 * b * b) / math.sqrt(2.0 * math.pi)
        return b * cdf / pdf

    lo, hi = 0.0, 10.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ratio(mid) < target else (lo, mid)
    return 0.5 * (lo + hi)


def carried(slots: np.ndarray | float, beta: float) -> np.ndarray:
    """Sequences in flight ``slots`` carry with ``beta sqrt(a)`` of them free: ``h(N)``."""
    n = np.asarray(slots, dtype=float)
    return ((np.sqrt(beta * beta + 4.0 * n) - beta) / 2.0) ** 2


def tangent(in_flight: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """``(slope, intercept)`` of ``h``'s tangent at the slots that carry ``in_flight`` sequences
    with the headroom, ``N0 = a + beta sqrt(a)``: ``a <= slope N - intercept`` (intercept >= 0)."""
    a = np.maximum(np.asarray(in_flight, dtype=float), 0.0)
    n0 = a + beta * np.sqrt(a)
    slope = 1.0 - beta / np.sqrt(beta * beta + 4.0 * n0) if beta > 0 else np.ones_like(n0)
    return slope, slope * n0 - a


def slot_rows(data: PlacementData) -> dict[str, np.ndarray]:
    """The slot rows' coefficients in decode tokens/s: a mixed unit's ``served x osl <= mix_s x -
    mix_k used`` with ``served <= serve_cap used`` (``used`` 1 where it serves at all), the decode
    pool's ``osl x handed <= pool_s x sum(dec x) - pool_k``. The traffic they are sized for is the
    demand times ``slot_scale`` (a goodput placement's reach). The pool counts its slots at the
    most output tokens/s per sequence among its units: its units may run different batches (a
    batch bound by HBM steps faster than the TPOT target), and counting every slot at the fastest
    rate only undercounts the slots the traffic holds, so the row never admits more than ``h``
    does. No slots or no headroom: ``dec x``."""
    n = data.n_units
    dec = np.asarray(data.decode_tok_s, dtype=float)
    slots = np.zeros(n) if data.decode_slots is None else np.asarray(data.decode_slots, dtype=float)
    beta = float(data.slot_beta)
    traffic = data.total_per_s * max(float(data.slot_scale), 0.0)
    out = {
        "mix_s": dec.copy(),
        "mix_k": np.zeros(n),
        "pool_s": np.array(1.0),
        "pool_k": np.array(0.0),
        "serve_cap": np.array(serve_cap(data)),
    }
    has = (slots > 0) & (dec > 0)
    if beta <= 0.0 or not has.any():
        return out
    per_seq = np.divide(dec, slots, out=np.ones(n), where=has)  # output tokens/s of one sequence
    flight = traffic * data.output_tokens / per_seq  # sequences if the unit took it all
    slope, k = tangent(flight, beta)
    out["mix_s"] = np.where(has, slope * dec, dec)
    out["mix_k"] = np.where(has, per_seq * k, 0.0)
    role = np.asarray(data.unit_role)
    decoders = has & ((role == Role.DECODE) | (role == Role.ATTENTION))
    # the pool carries all the traffic unless mixed units take some (no topology builds both; its
    # intercept would then be owed with nothing handed to it, so such a pool keeps no headroom)
    if decoders.any() and not (role == Role.MIXED).any():
        ref = int(np.flatnonzero(decoders)[np.argmax(per_seq[decoders])])
        out["pool_s"], out["pool_k"] = np.array(slope[ref]), np.array(per_seq[ref] * k[ref])
    return out


def serve_cap(data: PlacementData) -> float:
    """Requests/s a mixed unit may serve once used: the traffic the rows are sized for, with room
    to grow beyond it under goodput (whose scale is a variable)."""
    traffic = data.total_per_s * max(float(data.slot_scale), 0.0)
    return traffic * (SERVE_ROOM if data.objective is Objective.GOODPUT else 1.0)


def used_by(data: PlacementData, served: np.ndarray) -> np.ndarray:
    """Which units a solution uses, read from the requests/s each serves: more than the solver's
    integrality tolerance lets through the ``served <= serve_cap used`` row with ``used`` at 0."""
    return (np.asarray(served) > USED_TOL * max(serve_cap(data), 1.0)).astype(float)
