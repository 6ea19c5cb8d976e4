"""Solving placement models: one persistent HiGHS instance per model structure, one result type.

:class:`PlacementSolver` builds the pyomo model the first time it sees a structure, and pyomo's
persistent interface turns it into HiGHS's arrays. Afterwards it only loads new parameter values
into the model and reads the arrays straight from them (:mod:`formulations.direct`), so search
trials pay neither the rebuild nor pyomo's per-solve sync (``benchmarks/milp_speed.py`` measures
all three paths). Either way the arrays are solved the same way, in a HiGHS instance of the
structure's own, from the root start (:func:`run_highs`), so a re-solve returns what solving the
data alone returns. Elastic solves and duals go through pyomo's solver. Callers get a frozen
:class:`SolveResult` and never see pyomo or HiGHS objects.
"""

from __future__ import annotations

import enum
import hashlib
import math
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from typing import Any

import highspy
import numpy as np
from pyomo.contrib.solver.common.results import SolutionStatus as PyoSolution
from pyomo.contrib.solver.common.results import TerminationCondition as PyoTermination
from pyomo.contrib.solver.solvers.highs import Highs

from formulations import placement
from formulations.direct import Columns, DirectModel, columns_of
from formulations.fan_out import fan_set
from formulations.placement_data import (
    CAPACITY_TIERS,
    LINK_TIERS,
    TIERS,
    PlacementData,
    PlacementSolution,
    Role,
)
from formulations.pyomo_layer import pyo
from formulations.root_start import Start, root_start
from formulations.slots import used_by


class Termination(enum.Enum):
    """Why the solver stopped."""

    OPTIMAL = "optimal"
    TIME_LIMIT = "time_limit"
    WORK_LIMIT = "work_limit"  # node or iteration limit: deterministic, unlike time
    INFEASIBLE = "infeasible"
    UNBOUNDED = "unbounded"
    ERROR = "error"
    UNKNOWN = "unknown"


class SolutionStatus(enum.Enum):
    """What came back, apart from why the solver stopped."""

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    NONE = "none"


_TERMINATION = {
    PyoTermination.convergenceCriteriaSatisfied: Termination.OPTIMAL,
    PyoTermination.maxTimeLimit: Termination.TIME_LIMIT,
    PyoTermination.iterationLimit: Termination.WORK_LIMIT,
    PyoTermination.provenInfeasible: Termination.INFEASIBLE,
    PyoTermination.locallyInfeasible: Termination.INFEASIBLE,
    PyoTermination.infeasibleOrUnbounded: Termination.INFEASIBLE,
    PyoTermination.unbounded: Termination.UNBOUNDED,
    PyoTermination.error: Termination.ERROR,
}
_SOLUTION = {PyoSolution.optimal: SolutionStatus.OPTIMAL, PyoSolution.feasible: SolutionStatus.FEASIBLE}
_START_TOL = 1e-9  # relative: HiGHS's design is kept unless the rounded start's is cheaper by more
_CUTOFF = 1e-6  # relative: HiGHS's MIP looks only for designs at most this much dearer than the start's
# what HiGHS says when its cutoff leaves no design to find
_NOTHING_BELOW_CUTOFF = (highspy.HighsModelStatus.kInfeasible, highspy.HighsModelStatus.kObjectiveBound)
_HIGHS_TERMINATION = {  # the same reading of HiGHS's status as pyomo's (its highs.py _postsolve)
    highspy.HighsModelStatus.kOptimal: Termination.OPTIMAL,
    highspy.HighsModelStatus.kTimeLimit: Termination.TIME_LIMIT,
    highspy.HighsModelStatus.kIterationLimit: Termination.WORK_LIMIT,
    highspy.HighsModelStatus.kSolutionLimit: Termination.WORK_LIMIT,
    highspy.HighsModelStatus.kInfeasible: Termination.INFEASIBLE,
    highspy.HighsModelStatus.kUnboundedOrInfeasible: Termination.INFEASIBLE,
    highspy.HighsModelStatus.kUnbounded: Termination.UNBOUNDED,
    highspy.HighsModelStatus.kLoadError: Termination.ERROR,
    highspy.HighsModelStatus.kModelError: Termination.ERROR,
    highspy.HighsModelStatus.kPresolveError: Termination.ERROR,
    highspy.HighsModelStatus.kSolveError: Termination.ERROR,
    highspy.HighsModelStatus.kPostsolveError: Termination.ERROR,
}


@dataclass(frozen=True)
class SolveResult:
    """One solve: why it stopped, what came back, objective and bound side by side.

    ``objective`` and ``bound`` are the solver's, so they include the small tie-break terms (see
    :mod:`formulations.placement`); read costs and GPU counts from the solution.
    """

    termination: Termination
    solution_status: SolutionStatus
    objective: float  # nan without a solution
    bound: float  # best proven bound; nan when the solver gave none
    gap: float  # relative, |objective - bound| / max(|objective|, 1e-9); nan when unknown
    build_s: float  # 0 when the structure was already built
    solve_s: float
    solution: PlacementSolution | None = field(repr=False, default=None)

    @property
    def has_solution(self) -> bool:
        return self.solution_status is not SolutionStatus.NONE


@dataclass(frozen=True)
class SolveOptions:
    time_limit_s: float | None = None
    mip_rel_gap: float = 1e-4
    threads: int = 1
    node_limit: int | None = None  # branch-and-bound nodes; a deterministic stand-in for time
    polish: bool = True  # re-solve the continuous part exactly with the counts fixed
    direct: bool = True  # read a structure seen before straight from its parameters (False: pyomo's sync)
    root_start: bool = True  # bound the counts by the rounded LP relaxation (formulations/root_start.py)
    cutoff: bool = True  # and hand HiGHS the rounded design's objective as its MIP cutoff (run_highs)

    def highs_options(self) -> dict[str, bool | float | int]:
        """HiGHS's options for one solve, whichever path hands it the model."""
        return {
            "output_flag": False,
            "random_seed": 0,
            "threads": self.threads,
            "mip_rel_gap": self.mip_rel_gap,
            # Placement MILPs are small (tens of rows after presolve) and HiGHS closes them at the
            # root, so its time goes to root machinery rather than search. The feasibility-jump
            # heuristic, and a cut pool of up to 10,000 cuts kept in the LP for 10 rounds unused
            # (HiGHS's defaults), cost more than they save here: without the heuristic, with one
            # cut kept and cuts dropped after one round, HiGHS's run on a study-sized instance
            # takes half the time for the same optima (docs/benchmarks.md, "The placement MILP").
            # With the counts bounded by the root start (formulations/root_start.py), its
            # sub-MIP heuristics (RINS, RENS, the root reduced-cost one), cut separation below the
            # root and strong branching cost more than they find: without them a further sixth
            # off for the same optima there (with the three heuristics back on, 15.1 against
            # 13.7 ms at the median, the same optima: 2026-12-03, once the start's design was
            # no longer handed over).
            "mip_heuristic_run_feasibility_jump": False,
            "mip_pool_soft_limit": 1,
            "mip_lp_age_limit": 1,
            "mip_heuristic_run_rins": False,
            "mip_heuristic_run_rens": False,
            "mip_heuristic_run_root_reduced_cost": False,
            "mip_allow_cut_separation_at_nodes": False,
            "mip_pscost_minreliable": 0,
            # Presolve at the root only, not again at each node: the presolved MILP is a few rows
            # and columns, and a node's presolve costs more than it removes (with the root start's
            # cutoff, study-sized re-solves take a fifth less, the same optima: docs/benchmarks.md).
            "mip_root_presolve_only": True,
            **({"time_limit": self.time_limit_s} if self.time_limit_s is not None else {}),
            **({"mip_max_nodes": self.node_limit} if self.node_limit is not None else {}),
        }


@dataclass
class _Built:
    """One structure's pyomo model, pyomo's persistent solver for it, where its variables sit among
    HiGHS's columns, the HiGHS instance that solves it and, from its first re-solve, the direct
    path's compiled model."""

    m: pyo.ConcreteModel
    solver: Highs
    direct: DirectModel | None = None
    columns: Columns | None = None
    highs: highspy.Highs | None = None


# A study's trials hand the solver the same numbers again and again (a decode cap past what the
# KV cache holds, a prefill chunk past the prompt, change no unit): 298 of the 976 MILPs of
# 1,000 headline-study trials. An answer proven optimal or infeasible (its polish too) depends on
# the numbers and the solver's options alone (every solve starts from the root start in the
# structure's own HiGHS instance), so it is kept and given again, with no solve time; a
# time-limited one is not, since it depends on how fast the machine was.
SOLVED_MAX = 512
_SETTLED = (Termination.OPTIMAL, Termination.INFEASIBLE)


def digest(data: PlacementData) -> bytes:
    """A digest of every number and name in ``data``: equal digests, equal data."""
    h = hashlib.blake2b(digest_size=16)
    for f in fields(data):
        v = getattr(data, f.name)
        if isinstance(v, np.ndarray):
            h.update(f"{f.name}:{v.dtype.str}{v.shape}".encode())
            h.update(np.ascontiguousarray(v).tobytes())
        else:
            h.update(f"{f.name}={v!r};".encode())
    return h.digest()


def _read_only(result: SolveResult) -> SolveResult:
    """``result`` with its solution's arrays read-only: a kept answer is shared by every caller."""
    if result.solution is not None:
        for f in fields(result.solution):
            v = getattr(result.solution, f.name)
            if isinstance(v, np.ndarray):
                v.flags.writeable = False
    return result


class PlacementSolver:
    """Re-solves placement data in place whenever its structure was seen before."""

    def __init__(self, options: SolveOptions | None = None) -> None:
        self.options = options or SolveOptions()
        self._built: dict[tuple[object, ...], _Built] = {}
        self._solved: dict[tuple[bytes, float, SolveOptions], SolveResult] = {}  # a settled answer

    def _instance(self, data: PlacementData) -> tuple[_Built, float]:
        """The structure's built model with ``data`` loaded, and the seconds a build took (0
        when it was built before)."""
        key = data.structure()
        b = self._built.get(key)
        if b is not None:
            placement.update(b.m, data)
            return b, 0.0
        t0 = time.perf_counter()
        b = self._built[key] = _Built(placement.build(data), Highs())
        return b, time.perf_counter() - t0

    def _loaded(self, data: PlacementData) -> tuple[_Built, float, highspy.HighsLp]:
        """The structure's built model, the seconds a build took and the model with ``data`` as
        HiGHS arrays. A structure already read straight from its parameters
        (:class:`formulations.direct.DirectModel`) gets ``data``'s values without pyomo: its
        parameters keep what they held, and whatever reads them next loads ``data`` first
        (:meth:`_instance`)."""
        b = self._built.get(data.structure())
        if b is not None and b.direct is not None and self.options.direct:
            return b, 0.0, b.direct.lp_from(placement.param_values(data), placement.var_bounds(data))
        b, build = self._instance(data)
        return b, build, self._arrays(b, fresh=build > 0)

    def solve(self, data: PlacementData, beat: float = math.inf) -> SolveResult:
        """Solve; then, unless the MILP closed its gap, re-solve the LP left with the counts of the
        incumbent fixed, so the continuous choices (tiers, routing) are exactly optimal rather
        than within the gap. ``beat``: an objective the caller already has from another MILP,
        below which alone a design is wanted (HiGHS cuts off there, :func:`run_highs`); where
        none lies below it, the answer is no solution or the root start's design, neither below
        it (HiGHS may also return one at the cutoff itself)."""
        key = (digest(data), beat, self.options)
        known = self._solved.get(key)
        if known is not None:  # the same numbers solved before: the same answer, no time spent
            return replace(known, build_s=0.0, solve_s=0.0)
        result, settled = self._solve(data, beat)
        if settled:
            if len(self._solved) >= SOLVED_MAX:
                self._solved.clear()
            self._solved[key] = _read_only(result)
        return result

    def _solve(self, data: PlacementData, beat: float) -> tuple[SolveResult, bool]:
        """The answer, and whether it is settled: proven optimal or infeasible, its polish (where
        it needs one) too, so that it depends on the numbers alone, not on how far a limit let
        the search go."""
        b, build, lp = self._loaded(data)
        result = self._run_highs(b, data, lp, beat)
        settled = result.termination in _SETTLED
        sol = result.solution
        # a MILP proven optimal already has the optimal continuous part; within a gap it may not
        if self.options.polish and sol is not None and not result.gap <= 1e-9:
            assert b.columns is not None
            polished = self._run_highs(b, data, _counts_fixed(lp, b.columns, sol, data))
            settled = settled and polished.termination is Termination.OPTIMAL
            if polished.solution is not None:
                total = result.solve_s + polished.solve_s
                result = replace(result, solution=polished.solution, solve_s=total)
        return _with_build(result, build), settled

    def _arrays(self, b: _Built, *, fresh: bool) -> highspy.HighsLp:
        """The model as HiGHS arrays. A structure built for this solve, or a solver told not to go
        direct, has pyomo's persistent interface sync the model into its own HiGHS instance and
        reads that; a structure seen before is read straight from the parameters
        (:class:`formulations.direct.DirectModel`, the same arrays without pyomo's sync)."""
        if fresh or not self.options.direct:
            if getattr(b.solver, "_model", None) is not b.m:
                b.solver.set_instance(b.m)
                b.solver._solver_model.setOptionValue("output_flag", False)  # we only read it
            else:
                b.solver.update()
            lp = b.solver._solver_model.getLp()
            # pyomo's columns as they stand: a solve through it may have re-added some (_keep_order)
            columns = columns_of(b.m, dict(b.solver._pyomo_var_to_solver_var_map))
            if b.direct is None or not self.options.direct:
                b.columns = columns
        else:
            if b.direct is None:
                b.direct = DirectModel.of_persistent(b.m, b.solver)
            lp = b.direct.lp()
        if b.columns is None:
            b.columns = columns_of(b.m, dict(b.solver._pyomo_var_to_solver_var_map))
        return lp

    def _run(self, b: _Built, data: PlacementData) -> SolveResult:
        return self._run_pyomo(b, data)[0]

    def _run_pyomo(
        self, b: _Built, data: PlacementData, *, duals: bool = False
    ) -> tuple[SolveResult, dict[Any, float]]:
        o = self.options
        t0 = time.perf_counter()
        opts = o.highs_options()
        with _ctrl_c_after():
            res = b.solver.solve(
                b.m,
                load_solutions=False,
                raise_exception_on_nonoptimal_result=False,
                time_limit=opts.pop("time_limit", None),
                rel_gap=opts.pop("mip_rel_gap"),
                threads=opts.pop("threads"),
                solver_options=opts,
            )
        solve_s = time.perf_counter() - t0
        status = _SOLUTION.get(res.solution_status, SolutionStatus.NONE)
        term = _TERMINATION.get(res.termination_condition, Termination.UNKNOWN)
        sol = None
        dual_values: dict[Any, float] = {}
        if status is not SolutionStatus.NONE:
            res.solution_loader.load_vars()
            sol = _read_back(b.m, data)
            if duals:
                dual_values = dict(res.solution_loader.get_duals())
        obj = float(res.incumbent_objective) if res.incumbent_objective is not None else float("nan")
        bound = float(res.objective_bound) if res.objective_bound is not None else float("nan")
        return _result(term, status, obj, bound, solve_s, sol), dual_values

    def _run_highs(
        self, b: _Built, data: PlacementData, lp: highspy.HighsLp, beat: float = math.inf
    ) -> SolveResult:
        """Solve ``lp`` in this structure's own HiGHS instance, from the root start."""
        t0 = time.perf_counter()
        if b.highs is None:
            b.highs = highspy.Highs()
            for k, v in self.options.highs_options().items():
                b.highs.setOptionValue(k, v)
        h, cols = b.highs, b.columns
        assert cols is not None
        with _ctrl_c_after():
            first = run_highs(
                h, lp, cols, data, start=self.options.root_start, cutoff=self.options.cutoff, beat=beat
            )
        solve_s = time.perf_counter() - t0
        term, status, obj, bound, values = _answer(h, lp, first)
        sol = cols.solution(values) if values is not None else None
        return _result(term, status, obj, bound, solve_s, sol)

    def relaxed_duals(
        self, data: PlacementData, chosen: PlacementSolution
    ) -> tuple[SolveResult, dict[str, np.ndarray]]:
        """The LP over the units and hardware a solution uses, counts continuous, and the
        multiplier (>= 0) of every constraint, keyed and ordered like
        :func:`formulations.placement_check.residuals`.

        Fixing the counts themselves would make every price zero under a cost objective (cost
        depends on counts alone); fixing which units are used and relaxing how many gives the
        marginal cost of capacity around the chosen design."""
        b, _ = self._instance(data)
        self._keep_order(b)
        unbounded = np.full(data.n_units, np.inf)
        x_ub = np.where(chosen.instances > 0.5, unbounded, 0.0)
        n_ub = np.where(chosen.sale_units > 0.5, np.inf, 0.0)
        used = used_by(data, chosen.fresh + chosen.returning.sum(axis=(1, 2)))  # as the checker reads it
        fans = fan_set(data, chosen.instances)
        with _counts_relaxed(b.m, np.zeros(data.n_units), x_ub, np.zeros(data.n_hw), n_ub, used, fans):
            result, raw = self._run_pyomo(b, data, duals=True)
        return result, _family_duals(b.m, data, raw)

    def _keep_order(self, b: _Built) -> None:
        """Read the structure's rows and columns for the direct path (:meth:`_arrays`) before a
        solve through pyomo changes its model: pyomo's persistent interface re-adds a variable
        whose domain changes (the relaxed counts of :meth:`relaxed_duals`) at the end, so a
        direct model read after it had the columns in another order, and a MILP with tied
        designs (72 GPUs in one rack, whichever shapes) answered another of them than it did on a
        fresh solver: the same request's answer depended on what was solved before it."""
        if self.options.direct and b.direct is None:
            b.direct = DirectModel.of_persistent(b.m, b.solver)
            if b.columns is None:
                b.columns = columns_of(b.m, dict(b.solver._pyomo_var_to_solver_var_map))

    def elastic(self, data: PlacementData, scale: dict[str, float]) -> ElasticResult:
        """Solve with the elastic slacks open (see :func:`formulations.placement.set_objective`)."""
        b, _ = self._instance(data)
        self._keep_order(b)
        placement.set_objective(b.m, data.objective, elastic=scale)
        try:
            result = self._run(b, data)
            slacks = (
                {k: float(pyo.value(b.m.slack[k])) for k in placement.ELASTIC} if result.has_solution else {}
            )
        finally:
            placement.set_objective(b.m, data.objective)
        return ElasticResult(result, slacks)


def _answer(
    h: highspy.Highs, lp: highspy.HighsLp, first: Start | None
) -> tuple[Termination, SolutionStatus, float, float, np.ndarray | None]:
    """What HiGHS's run in ``h`` answers: why it stopped, the solution's status, objective and
    bound, and its column values (None without a solution). When HiGHS stops at a limit with no
    design as good as the root start's rounded one (``first``, feasible by construction), the
    rounded design is the answer: HiGHS is not handed it (:func:`run_highs`), and at a node limit
    it can return a design twice as dear (``tests/test_root_start.py``)."""
    info = h.getInfo()
    has = info.primal_solution_status == 2  # kSolutionStatusFeasible
    model_status = h.getModelStatus()
    term = _HIGHS_TERMINATION.get(model_status, Termination.UNKNOWN)
    if not has:
        status = SolutionStatus.NONE
    else:
        optimal = model_status == highspy.HighsModelStatus.kOptimal
        status = SolutionStatus.OPTIMAL if optimal else SolutionStatus.FEASIBLE
    values = np.asarray(h.getSolution().col_value) if has else None
    obj = _objective_of(lp, values) if values is not None else float("nan")
    if info.mip_node_count == -1:  # an LP: no separate bound
        return term, status, obj, obj if status is SolutionStatus.OPTIMAL else float("nan"), values
    # HiGHS reports the bound in the same space as its objective; move both together
    bound = float(info.mip_dual_bound) + (obj - float(info.objective_function_value) if has else 0.0)
    if first is not None and not obj <= first.objective + _START_TOL * max(1.0, abs(first.objective)):
        values, obj, status = first.design, first.objective, SolutionStatus.FEASIBLE
        bound = max(bound, first.relaxation) if np.isfinite(bound) else first.relaxation
    return term, status, obj, bound, values


def _objective_of(lp: highspy.HighsLp, values: np.ndarray) -> float:
    """The objective of a solution, from the model's own costs rather than HiGHS's report of it.
    HiGHS 1.16 dropped the offset its presolve took out when it accepted a start design handed to
    it as the optimum: its log read "MIP start solution is feasible: objective value is 8" and,
    next line, "... in the reduced space: objective value is 4", and it reported 4 for a solution
    that cost 8 (:func:`run_highs` no longer hands it one;
    ``tests/test_placement_milp.py::test_a_start_design_taken_as_optimal_reports_its_own_cost``)."""
    return float(np.dot(np.asarray(lp.col_cost_), values) + lp.offset_)


def run_highs(
    h: highspy.Highs,
    lp: highspy.HighsLp,
    cols: Columns,
    data: PlacementData,
    *,
    start: bool = True,
    cutoff: bool = True,
    beat: float = math.inf,
) -> Start | None:
    """Solve ``lp`` in ``h``: a MILP with its counts bounded by its root start
    (:mod:`formulations.root_start`) unless ``start`` is False, and cut off at the start's
    objective unless ``cutoff`` is False; an LP as it is.

    The rounded design itself is not handed to HiGHS as a first incumbent. HiGHS 1.16 values a
    user's start in its presolved model without the objective offset presolve took out, and then
    prunes with that value: on one instance the start cost $20, HiGHS took it for $8 and proved it
    "optimal" against a $16 design its bounds kept
    (``tests/test_placement_milp.py::test_a_start_design_is_not_taken_for_cheaper_than_it_is``).
    Its objective is handed over instead, a hair above, as the MIP's cutoff (HiGHS's
    ``objective_bound``): HiGHS prunes every node that cannot beat it, as an incumbent of that cost
    would let it. A cutoff can only lose designs dearer than itself, so if HiGHS proves that no
    design lies below it (which the rounded design, below it, rules out unless HiGHS values the
    cutoff otherwise, as it does a start), the MILP runs again without one. When HiGHS stops at a
    limit with nothing as good as the rounded design, that design is the answer (:func:`_answer`).

    ``beat``, an objective the caller has from elsewhere, cuts off there when it is the lower: a
    MILP with nothing below it is not run again, as only a design below it is wanted.
    Returns the start, if any."""
    first = root_start(h, lp, cols, data) if start else None
    if first is not None:
        lp.col_upper_ = first.upper
    h.passModel(lp)
    bound = cutoff_of(first) if first is not None and cutoff else math.inf
    ours = bound < beat  # the cutoff is the start's, which a design lies below
    bound = min(bound, beat)
    t0 = time.perf_counter()
    try:
        h.setOptionValue("objective_bound", bound)
        h.run()
    finally:  # the next run in this instance (a polish LP, another trial's relaxation) has none
        h.setOptionValue("objective_bound", math.inf)
    if ours and bound < math.inf and h.getModelStatus() in _NOTHING_BELOW_CUTOFF:
        limit = float(h.getOptionValue("time_limit")[1])  # highspy answers (status, value)
        try:  # within what is left of the time limit
            h.setOptionValue("time_limit", max(limit - (time.perf_counter() - t0), 0.0))
            h.run()
        finally:
            h.setOptionValue("time_limit", limit)
    return first


def cutoff_of(first: Start) -> float:
    """The objective above which HiGHS need not look, given the root start's rounded design."""
    return first.objective + _CUTOFF * max(1.0, abs(first.objective))


@dataclass(frozen=True)
class ElasticResult:
    """An elastic solve and how much each elastic family had to give, in its own unit."""

    result: SolveResult
    slacks: dict[str, float]


def _counts_fixed(
    lp: highspy.HighsLp, cols: Columns, sol: PlacementSolution, data: PlacementData
) -> highspy.HighsLp:
    """``lp`` made the LP left when the counts, and which mixed units serve at all, are fixed at
    ``sol``'s (changed in place)."""
    lower, upper = np.array(lp.col_lower_), np.array(lp.col_upper_)
    used = used_by(data, sol.fresh + sol.returning.sum(axis=(1, 2)))  # as the checker reads it
    fans = fan_set(data, sol.instances)
    for where, values in (
        (cols.x, sol.instances),
        (cols.n, sol.sale_units),
        (cols.used, used),
        (cols.fan, fans),
    ):
        seen = where >= 0
        lower[where[seen]] = upper[where[seen]] = values[seen]
    lp.col_lower_, lp.col_upper_ = lower, upper
    lp.integrality_ = []
    return lp


@contextmanager
def _counts_relaxed(
    m: pyo.ConcreteModel,
    x_lb: np.ndarray,
    x_ub: np.ndarray,
    n_lb: np.ndarray,
    n_ub: np.ndarray,
    used: np.ndarray,
    fans: np.ndarray,
) -> Iterator[None]:
    """Unit and sale-unit counts as continuous variables within bounds (inf: none), and which
    mixed units are used and which fan-out levels set fixed at ``used`` and ``fans``, for the
    duration of a block; integral (binary) and unbounded again afterwards."""
    pairs = [(m.x, x_lb, x_ub), (m.n, n_lb, n_ub)]
    switches = [(m.used, used), (m.fan, fans)]
    try:
        for var, values in switches:
            for k in var:  # fixed, and continuous: an LP, whose duals HiGHS gives
                var[k].domain = pyo.UnitInterval
                var[k].fix(float(values[k]))
        for var, lb, ub in pairs:
            for i in var:
                var[i].domain = pyo.NonNegativeReals
                var[i].setlb(float(lb[i]))
                var[i].setub(float(ub[i]) if np.isfinite(ub[i]) else None)
        yield
    finally:
        for var, _, _ in pairs:
            for i in var:
                var[i].domain = pyo.NonNegativeIntegers
                var[i].setlb(0.0)
                var[i].setub(None)
        for var, _ in switches:
            for k in var:
                var[k].unfix()
                var[k].domain = pyo.Binary


def _with_build(result: SolveResult, build_s: float) -> SolveResult:
    return replace(result, build_s=build_s)


def _result(
    term: Termination,
    status: SolutionStatus,
    obj: float,
    bound: float,
    solve_s: float,
    sol: PlacementSolution | None,
) -> SolveResult:
    if term is Termination.OPTIMAL and np.isnan(bound):
        bound = obj
    gap = abs(obj - bound) / max(abs(obj), 1e-9) if np.isfinite(obj) and np.isfinite(bound) else float("nan")
    return SolveResult(term, status, obj, bound, gap, 0.0, solve_s, sol)


def _read_back(m: pyo.ConcreteModel, data: PlacementData) -> PlacementSolution:
    U, C, T = data.n_units, data.n_classes, len(TIERS)
    r = np.zeros((U, C, T))
    for (u, c, t), v in m.r.items():
        r[u, c, t] = v.value or 0.0
    return PlacementSolution(
        sale_units=np.array([round(m.n[h].value or 0.0, 9) for h in range(data.n_hw)]),
        instances=np.array([round(m.x[u].value or 0.0, 9) for u in range(U)]),
        fresh=np.array([max(m.f[u].value or 0.0, 0.0) for u in range(U)]),
        returning=np.maximum(r, 0.0),
        scale=float(m.scale.value),
    )


def _family_duals(m: pyo.ConcreteModel, data: PlacementData, raw: dict[Any, float]) -> dict[str, np.ndarray]:
    def get(con: Any) -> float:
        return abs(float(raw.get(con, 0.0)))

    role = data.unit_role
    out: dict[str, np.ndarray] = {
        "gpus_in_sale_units": np.array([get(m.gpus_in_sale_units[h]) for h in m.H]),
        "fresh_demand": np.array([get(m.fresh_demand)]),
        "prefill_time": np.array([get(m.prefill_time[u]) for u in m.U]),
        "nic_out": np.array([get(m.nic_out[u]) for u in m.U]),
        "tier_link": np.array([get(m.tier_link[t, u]) for t in LINK_TIERS for u in m.U]),
        "tier_capacity": np.array([get(m.tier_capacity[t, u]) for t in CAPACITY_TIERS for u in m.U]),
    }
    finite = np.isfinite(data.inventory_gpus)
    if finite.any():
        out["inventory"] = np.array([get(m.inventory_c[h]) for h in m.H])[finite]
    if data.n_classes:
        out["returning_demand"] = np.array([get(m.returning_demand[c]) for c in m.C])
    mixed = [u for u in m.U if role[u] == Role.MIXED]
    if mixed:
        out["decode_mixed"] = np.array([get(m.decode_mixed[u]) for u in mixed])
    for name in ("decode_pool", "handoff_in", "ffn_pool", "afd_attention", "afd_ffn", "afd_fed"):
        if hasattr(m, name):
            out[name] = np.array([get(getattr(m, name))])
    for name in ("afd_beside_attention", "afd_beside_ffn", "afd_domains"):  # indexed, where built
        if hasattr(m, name):
            rows = getattr(m, name)
            out[name] = np.array([get(rows[k]) for k in rows])
    if hasattr(m, "afd_fan_wide"):  # a level's binary fixed: one of its two rows holds a side at 0
        out["afd_fan_out"] = np.array([get(m.afd_fan_wide[k]) + get(m.afd_fan_narrow[k]) for k in m.F])
    if np.isfinite(data.network_capacity_gb):
        out["network_capacity"] = np.array([get(m.network_capacity)])
    if np.isfinite(data.power_w):
        out["power"] = np.array([get(m.power_c)])
    if np.isfinite(data.budget_usd_hour):
        out["budget"] = np.array([get(m.budget_c)])
    return out


@contextmanager
def _ctrl_c_after() -> Iterator[None]:
    """Ctrl-C (or SIGTERM) during a HiGHS solve takes effect once the solve returns (milliseconds
    in a study, the time limit at most): interrupted inside it, pyomo's thread that copies the
    solver's output reads a closed pipe and prints a traceback over the run's one-line message.
    A second one interrupts at once (a solve without a time limit can take long)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread handles signals
        return
    # None: a handler Python did not install; SIGTERM only where a handler of Python's stands (the
    # command line's), not its default, which ends the process at once
    held = [signal.SIGINT] if signal.getsignal(signal.SIGINT) not in (None, signal.SIG_IGN) else []
    held += [signal.SIGTERM] if callable(signal.getsignal(signal.SIGTERM)) else []
    if not held:
        yield
        return
    hit: list[int] = []

    def later(signum: int, frame: object) -> None:
        if hit:  # came again: the user means it now
            hit.clear()
            for s, before in previous.items():
                signal.signal(s, before)
            signal.raise_signal(signum)
            return
        hit.append(signum)

    previous = {s: signal.signal(s, later) for s in held}
    try:
        yield
    finally:
        for s, before in previous.items():
            signal.signal(s, before)
        if hit:
            signal.raise_signal(hit[0])  # to the handler that was there before
