"""A head start for a placement MILP from its LP relaxation: bounds on the counts and a first design.

HiGHS spends most of a study-sized solve at the root, and much of that on integer columns with no
upper bound: its reduced-cost fixing walks up to 1,024 candidate bounds for each of them. No
count in the placement model has a bound of its own, but an optimal design cannot buy what it does
not need. So, before the MILP:

1. Solve the LP relaxation (about half a millisecond on a study-sized model).
2. Round it up into a design that is feasible by construction: every instance count up to the
   next whole instance, then enough nodes or racks to hold them. Rounding up only adds capacity
   to rows of the form load <= capacity x count, so the relaxation's flows still fit; the caps
   on power, budget and inventory are checked, and any row the rounding breaks means no start.
3. Bound every count by what a design no dearer than that one can hold:
   - reduced costs: a count the relaxation leaves at zero with reduced cost ``d`` raises the
     objective by at least ``d`` per unit, so it stays within ``(C - L) / d`` of zero, where
     ``C`` is the rounded design's objective and ``L`` the relaxation's (the classic root
     reduced-cost fixing, done once here instead of inside HiGHS's root loop);
   - cost: with every other objective term non-negative, a hardware whose node costs ``c`` in
     the objective is bought at most ``C / c`` times, and each unit on it fits in what those
     nodes hold.

Under goodput the relaxation spends the whole budget, so its rounding breaks the budget row and the
MILP starts as before; so does any cap (power, budget, inventory) that binds the relaxation. No
design that is at least as good as the rounded one is cut off, so the MILP's optimum is the same
with or without the bounds. The rounded design sets the bounds and is not handed to HiGHS as a
first incumbent (:func:`formulations.solve.run_highs` says why).
``benchmarks/milp_speed.py`` measures the effect; ``tests/test_root_start.py`` checks that the
bounds keep the optimum and that the rounded design is feasible.
"""

from __future__ import annotations

from dataclasses import dataclass

import highspy
import numpy as np

from formulations.direct import Columns
from formulations.fan_out import fan_set
from formulations.placement import afd_domain_rows
from formulations.placement_data import PlacementData
from formulations.slots import slot_rows

_ROUND = 1e-9  # a count this close to a whole number is that number
_SLACK = 1e-6  # added to every bound before it is floored: numerical noise never cuts the optimum
_MARGIN = 1e-6  # the bounds keep every design up to this much (relative) dearer than the rounded one
_ROW_TOL = 1e-7  # a row of the rounded design may exceed its bound by this much, relative
# With this many counts or fewer (one hardware: its nodes and a unit or two), HiGHS closes the MILP at
# its root in about a millisecond, less than the start's LP and rounding add. `python
# benchmarks/milp_speed.py` (its last section) forces the start on 59 study-sized trials each:
# one hardware 2.2 ms with it against 1.4 ms without; two 6.6 against 8.1 ms; three 11.4 against
# 19.6 ms (medians, 2026-12-03).
FEW_COUNTS = 4


@dataclass(frozen=True)
class Start:
    """Column upper bounds for the MILP and the feasible design they come from."""

    upper: np.ndarray  # every column's upper bound, counts tightened
    design: np.ndarray  # every column's value in the rounded design
    objective: float  # the rounded design's objective, offset included
    relaxation: float  # the LP relaxation's objective, offset included


def root_start(h: highspy.Highs, lp: highspy.HighsLp, cols: Columns, data: PlacementData) -> Start | None:
    """The start for ``lp`` (a placement MILP as HiGHS arrays), or None when it has too few counts
    to need one (:data:`FEW_COUNTS`), the relaxation has no optimum or its rounding breaks a row.
    May leave the relaxation loaded in ``h``."""
    integer = np.array([int(t) for t in lp.integrality_]) == int(highspy.HighsVarType.kInteger)
    counts = np.concatenate([cols.n[cols.n >= 0], cols.x[cols.x >= 0]])
    switches = np.concatenate([cols.used[cols.used >= 0], cols.fan[cols.fan >= 0]])
    whole = set(counts.tolist()) | set(switches.tolist())
    if integer.sum() <= FEW_COUNTS or set(np.flatnonzero(integer).tolist()) != whole:
        return None  # an LP, a MILP too small to need it, or integers this rounding cannot round
    kept = lp.integrality_
    lp.integrality_ = []
    try:
        h.passModel(lp)
        h.run()
    finally:
        lp.integrality_ = kept
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    solution = h.getSolution()
    value, reduced = np.array(solution.col_value), np.array(solution.col_dual)
    lower, upper = np.array(lp.col_lower_), np.array(lp.col_upper_)
    design = _rounded(np.clip(value, lower, upper), cols, data)  # the LP's values within its bounds
    if not _feasible(lp, design, lower, upper):
        return None
    cost = np.array(lp.col_cost_)
    best = float(cost @ design)  # the objective without its constant offset
    relaxation = h.getInfo().objective_function_value - lp.offset_
    above = best + _MARGIN * max(1.0, abs(best))  # what the bounds keep every design at or below
    bounded = upper.copy()
    _reduced_cost_bounds(bounded, counts, value, reduced, lower, above - relaxation)
    _cost_bounds(bounded, cost, lower, lower == upper, cols, data, above)
    return Start(bounded, design, best + lp.offset_, relaxation + lp.offset_)


def _rounded(value: np.ndarray, cols: Columns, data: PlacementData) -> np.ndarray:
    """The relaxation with every instance count rounded up, every mixed unit it uses at all
    marked used and given the instances that carry its decode with the slots' fixed headroom
    (:mod:`formulations.slots`), and the nodes or racks to hold them."""
    design = value.copy()
    on = cols.used >= 0
    used = np.zeros(data.n_units)
    used[on] = np.ceil(value[cols.used[on]] - _ROUND)
    design[cols.used[on]] = used[on]
    seen = cols.x >= 0
    x = np.zeros(data.n_units)
    x[seen] = np.ceil(value[cols.x[seen]] - _ROUND)
    if on.any():
        rows = slot_rows(data)
        sol = cols.solution(value)
        served = sol.fresh + sol.returning.sum(axis=(1, 2))
        need = (served * data.output_tokens + rows["mix_k"] * used) / np.maximum(rows["mix_s"], 1e-300)
        x = np.where(on & (used > 0), np.maximum(x, np.ceil(need - _ROUND)), x)
    design[cols.x[seen]] = x[seen]
    fans = cols.fan >= 0  # a fan-out level is set where its wide expert units carry any decode
    design[cols.fan[fans]] = fan_set(data, x)[fans]
    gpus = np.bincount(data.unit_hw, weights=data.unit_gpus * x, minlength=data.n_hw)
    need = gpus / data.sale_gpus
    if data.afd_partner is not None:  # attention-FFN units that keep to domains of their own
        share = afd_domain_rows(data)["afd_domain_share"]
        need = np.maximum(need, np.bincount(data.unit_hw, weights=share * x, minlength=data.n_hw))
    bought = cols.n >= 0
    design[cols.n[bought]] = np.ceil(need - _ROUND)[bought]
    return design


def _feasible(lp: highspy.HighsLp, design: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> bool:
    a = lp.a_matrix_
    start, index, value = np.asarray(a.start_), np.asarray(a.index_), np.asarray(a.value_)
    owner = np.repeat(np.arange(len(start) - 1), np.diff(start))  # the column or row of each entry
    if a.format_ == highspy.MatrixFormat.kRowwise:  # pyomo's persistent interface builds rows
        activity = np.bincount(owner, weights=value * design[index], minlength=lp.num_row_)
    else:
        activity = np.bincount(index, weights=value * design[owner], minlength=lp.num_row_)
    tol = _ROW_TOL * np.maximum(1.0, np.abs(activity))
    rows_ok = (activity >= np.asarray(lp.row_lower_) - tol) & (activity <= np.asarray(lp.row_upper_) + tol)
    return bool(rows_ok.all() and (design >= lower - _ROUND).all() and (design <= upper + _ROUND).all())


def _reduced_cost_bounds(
    upper: np.ndarray,
    counts: np.ndarray,
    value: np.ndarray,
    reduced: np.ndarray,
    lower: np.ndarray,
    gap: float,
) -> None:
    """Counts the relaxation leaves at their lower bound stay within ``gap / reduced cost`` of it."""
    gap = max(gap, 0.0)
    j = counts[(reduced[counts] > 1e-9) & (value[counts] <= lower[counts] + _ROUND)]
    upper[j] = np.minimum(upper[j], np.floor(lower[j] + gap / reduced[j] + _SLACK))


def _cost_bounds(
    upper: np.ndarray,
    cost: np.ndarray,
    lower: np.ndarray,
    fixed: np.ndarray,
    cols: Columns,
    data: PlacementData,
    best: float,
) -> None:
    """Nodes or racks no dearer in all than the rounded design, and the units they can hold.
    Only when every other term of the objective is non-negative (not so under goodput, whose
    demand scale is rewarded)."""
    if (cost[~fixed] < 0).any() or (lower[~fixed] < 0).any():
        return
    room = best - float(cost[fixed] @ lower[fixed])
    bought = cols.n >= 0
    per_node = np.where(bought, cost[cols.n], 0.0)
    priced = bought & (per_node > 0)
    nodes = np.full(data.n_hw, np.inf)
    nodes[priced] = np.floor(room / per_node[priced] * (1 + 1e-9) + _SLACK)
    n_cols = cols.n[priced]
    upper[n_cols] = np.minimum(upper[n_cols], nodes[priced])
    held = np.floor(data.sale_gpus[data.unit_hw] * nodes[data.unit_hw] / data.unit_gpus + _SLACK)
    seen = cols.x >= 0
    upper[cols.x[seen]] = np.minimum(upper[cols.x[seen]], held[seen])
