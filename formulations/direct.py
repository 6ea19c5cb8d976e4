"""Re-solving a built placement model straight through highspy, without pyomo's per-solve sync.

Pyomo stays the formulation and the source of truth. The rows and columns, their order, and the
expression of every coefficient, bound and cost come from the pyomo model and from the HiGHS model
pyomo's persistent interface built for it. Once per structure, every one of those expressions is
expanded into a polynomial in the model's parameters, all of them kept as numpy arrays, so that
one vectorised evaluation gives every value (:class:`DirectModel`).
A re-solve then reads the values the parameters hold after :func:`formulations.placement.update`,
evaluates that function, and passes the arrays to a HiGHS instance of its own. A trial changes
coefficients and bounds only, so nothing else needs to move.

Pyomo's persistent solver is left as it was: elastic solves and duals still go through it, and
``tests/test_direct_solve.py`` checks that both paths return the same solutions. Pyomo's own
re-solve walks every mutable expression and compares every parameter on each call, which is
about two thirds of a study-sized re-solve outside HiGHS (``benchmarks/milp_speed.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import highspy
import numpy as np
from pyomo.core.expr.numeric_expr import (
    DivisionExpression,
    NegationExpression,
    ProductExpression,
    SumExpression,
)
from pyomo.core.expr.numvalue import native_numeric_types
from pyomo.repn.standard_repn import generate_standard_repn

from formulations.placement_data import PlacementSolution
from formulations.pyomo_layer import pyo

_INF = highspy.kHighsInf
_BIG = 1e20  # HiGHS's infinite_bound: a bound this large is no bound


@dataclass(frozen=True)
class Columns:
    """Where each decision variable of the placement model sits among the HiGHS columns (-1: in no
    row and not in the objective, so HiGHS never saw it and its value is 0)."""

    n: np.ndarray  # (H,)
    x: np.ndarray  # (U,)
    f: np.ndarray  # (U,)
    r: np.ndarray  # (U, C, T)
    scale: int
    used: np.ndarray  # (U,) whether a mixed unit serves at all (binary; -1 for the other units)
    fan: np.ndarray  # (F,) whether expert units of a fan-out level are bought (formulations.fan_out)

    def solution(self, col: np.ndarray) -> PlacementSolution:
        """The solution HiGHS's column values ``col`` hold (a column HiGHS never saw is 0)."""
        padded = np.append(col, 0.0)  # index -1 reads the 0 at the end
        return PlacementSolution(
            sale_units=np.round(padded[self.n], 9),
            instances=np.round(padded[self.x], 9),
            fresh=np.maximum(padded[self.f], 0.0),
            returning=np.maximum(padded[self.r], 0.0),
            scale=float(padded[self.scale]),
        )


def columns_of(m: pyo.ConcreteModel, var_col: dict[int, int]) -> Columns:
    """Where ``m``'s variables sit among HiGHS's columns, from pyomo's map of variable (by id) to
    column (pyomo's persistent interface keeps it, and :class:`DirectModel` uses the same)."""

    def where(v: Any) -> int:
        return var_col.get(id(v), -1)

    shape = (len(m.U), len(m.C), len(m.T))
    return Columns(
        n=np.array([where(m.n[h]) for h in m.H], dtype=np.int64),
        x=np.array([where(m.x[u]) for u in m.U], dtype=np.int64),
        f=np.array([where(m.f[u]) for u in m.U], dtype=np.int64),
        r=np.array([where(v) for v in m.r.values()], dtype=np.int64).reshape(shape),
        scale=where(m.scale),
        used=np.array([where(m.used[u]) for u in m.U], dtype=np.int64),
        fan=np.array([where(m.fan[k]) for k in m.F], dtype=np.int64),
    )


class _Program:
    """Every expression's value as a polynomial in the parameters, evaluated with numpy: each
    expression is a sum of monomials ``coefficient x product of parameters``. :meth:`code` adds
    one expression; :meth:`compile` turns them all into one function of the parameter values."""

    def __init__(self) -> None:
        self.params: list[Any] = []
        self._slot: dict[int, int] = {}
        self._terms: list[list[tuple[float, tuple[int, ...]]]] = []

    def slot(self, p: Any) -> int:
        i = self._slot.get(id(p))
        if i is None:
            i = self._slot[id(p)] = len(self.params)
            self.params.append(p)
        return i

    def code(self, e: Any) -> int:
        """Add ``e``, an expression of parameters and constants; returns its index."""
        self._terms.append(self._monomials(e))
        return len(self._terms) - 1

    def _monomials(self, e: Any) -> list[tuple[float, tuple[int, ...]]]:
        if e is None:
            raise TypeError("no expression")
        if type(e) in native_numeric_types:
            return [(float(e), ())]
        if not e.is_expression_type():
            if e.is_parameter_type():
                return [(1.0, (self.slot(e),))]
            if e.is_constant():
                return [(float(pyo.value(e)), ())]
            raise TypeError(f"cannot compile {type(e).__name__}: it is not a parameter or a constant")
        args = [self._monomials(a) for a in e.args]
        if isinstance(e, SumExpression):
            return [t for a in args for t in a]
        if isinstance(e, ProductExpression):
            return [(ca * cb, sa + sb) for ca, sa in args[0] for cb, sb in args[1]]
        if isinstance(e, NegationExpression):
            return [(-c, s) for c, s in args[0]]
        if isinstance(e, DivisionExpression) and all(not s for _, s in args[1]):
            return [(c / sum(d for d, _ in args[1]), s) for c, s in args[0]]
        raise TypeError(f"cannot compile a {type(e).__name__} into the direct re-solve")

    def compile(self) -> Callable[[Sequence[float] | np.ndarray], np.ndarray]:
        """``fill(values)``: every expression's value, in the order they were added."""
        terms = [(k, c, s) for k, ts in enumerate(self._terms) for c, s in ts]
        width = max((len(s) for _, _, s in terms), default=0)
        one = len(self.params)  # the slot of a constant 1, padding shorter products
        slots = np.full((len(terms), max(width, 1)), one, dtype=np.int64)
        for j, (_, _, s) in enumerate(terms):
            slots[j, : len(s)] = s
        coef = np.array([c for _, c, _ in terms], dtype=np.float64)
        owner = np.array([k for k, _, _ in terms], dtype=np.int64)
        n = len(self._terms)

        def fill(values: Sequence[float] | np.ndarray) -> np.ndarray:
            v = np.append(np.asarray(values, dtype=np.float64), 1.0)
            return np.bincount(owner, weights=coef * v[slots].prod(axis=1), minlength=n)

        return fill


class _Gather:
    """Where each of some components' items sits in the values given by component name: the
    items' values as one array, in the items' order."""

    def __init__(self, items: Sequence[Any]) -> None:
        self._names: list[str] = []
        where: list[tuple[int, int]] = []  # (component, position among its keys)
        seen: dict[str, tuple[int, dict[Any, int]]] = {}
        for item in items:
            comp = item.parent_component()
            name = comp.local_name
            if name not in seen:
                seen[name] = (len(self._names), {k: j for j, k in enumerate(comp.keys())})
                self._names.append(name)
            c, keys = seen[name]
            where.append((c, keys[item.index()]))
        self._comp = np.array([c for c, _ in where], dtype=np.int64)
        self._pos = np.array([j for _, j in where], dtype=np.int64)

    def take(self, values: Mapping[str, np.ndarray]) -> np.ndarray:
        flat = [np.ravel(values[n]) for n in self._names]
        starts = np.cumsum([0] + [len(f) for f in flat])
        return np.concatenate(flat)[starts[self._comp] + self._pos] if flat else np.zeros(0)


class DirectModel:
    """The LP/MIP of one built pyomo model as arrays HiGHS reads, refilled from the parameters."""

    def __init__(self, m: pyo.ConcreteModel, var_col: dict[int, int], con_row: dict[Any, int]) -> None:
        prog = _Program()
        n_col, n_row = len(var_col), len(con_row)
        self.n_col, self.n_row = n_col, n_row
        self._vars: list[Any] = [None] * n_col
        for v in m.component_data_objects(pyo.Var, descend_into=True):
            if id(v) in var_col:
                self._vars[var_col[id(v)]] = v
        entries: list[tuple[int, int, int]] = []  # (row, column, expression)
        bounds = np.full((3, n_row), -1, dtype=np.int64)  # lower, upper, the body's constant; -1: none
        for con, row in con_row.items():
            repn = generate_standard_repn(con.body, compute_values=False, quadratic=False)
            if repn.nonlinear_expr is not None or repn.quadratic_vars:
                raise TypeError(f"row {con.name} is not linear")
            for v, coef in zip(repn.linear_vars, repn.linear_coefs, strict=True):
                entries.append((row, var_col[id(v)], prog.code(coef)))
            bounds[2, row] = prog.code(repn.constant)
            if con.has_lb():
                bounds[0, row] = prog.code(con.lower)
            if con.has_ub():
                bounds[1, row] = prog.code(con.upper)
        obj = next(m.component_data_objects(pyo.Objective, active=True))
        if obj.sense != pyo.minimize:
            raise TypeError("the direct re-solve expects a minimisation")
        orepn = generate_standard_repn(obj.expr, compute_values=False, quadratic=False)
        cost = {
            var_col[id(v)]: prog.code(c) for v, c in zip(orepn.linear_vars, orepn.linear_coefs, strict=True)
        }
        entries.sort(key=lambda e: (e[1], e[0]))  # column-wise, as HiGHS stores its matrix
        self._a_index = np.array([r for r, _, _ in entries], dtype=np.int32)
        self._a_start = np.searchsorted(np.array([c for _, c, _ in entries]), np.arange(n_col + 1)).astype(
            np.int32
        )
        self._a_expr = np.array([e for _, _, e in entries], dtype=np.int64)
        self._bounds = bounds
        self._cost_cols = np.array(sorted(cost), dtype=np.int64)
        self._cost_expr = np.array([cost[c] for c in self._cost_cols.tolist()], dtype=np.int64)
        self._offset_expr = prog.code(orepn.constant)
        self._params = prog.params
        self._fill = prog.compile()
        self._integrality = [
            highspy.HighsVarType.kInteger if v.is_integer() else highspy.HighsVarType.kContinuous
            for v in self._vars
        ]  # a variable's domain is the structure's
        self._param_at = _Gather(prog.params)
        self._var_at = _Gather(self._vars)

    @classmethod
    def of_persistent(cls, m: pyo.ConcreteModel, solver: Any) -> DirectModel:
        """From the rows and columns pyomo's persistent HiGHS interface gave ``m``'s components,
        so both paths hand HiGHS the same model in the same order."""
        if getattr(solver, "_model", None) is not m:
            solver.set_instance(m)
        return cls(m, dict(solver._pyomo_var_to_solver_var_map), dict(solver._pyomo_con_to_solver_con_map))

    def lp(self) -> highspy.HighsLp:
        """The model as it stands: parameter values, variable bounds and domains read now."""
        lb, ub = np.empty(self.n_col), np.empty(self.n_col)
        for i, v in enumerate(self._vars):
            low, up = v.bounds
            lb[i] = -_INF if low is None else low
            ub[i] = _INF if up is None else up
        integer = [
            highspy.HighsVarType.kInteger if v.is_integer() else highspy.HighsVarType.kContinuous
            for v in self._vars
        ]
        return self._arrays(self._fill([p.value for p in self._params]), lb, ub, integer)

    def lp_from(
        self, params: Mapping[str, np.ndarray], bounds: Mapping[str, tuple[np.ndarray, np.ndarray]]
    ) -> highspy.HighsLp:
        """The model with these values, without reading or writing the pyomo model: ``params``
        maps every parameter component's name to its values and ``bounds`` every variable
        component's name to its lower and upper bounds (inf: none), each an array in the order of
        the component's keys (:func:`formulations.placement.param_values` and
        :func:`~formulations.placement.var_bounds`). The same arrays as :meth:`lp` gives once the
        model holds those values (``tests/test_direct_solve.py``); pyomo's per-item reads were
        most of a re-solve outside HiGHS (``benchmarks/milp_speed.py``)."""
        lb = np.clip(self._var_at.take({k: b[0] for k, b in bounds.items()}), -_INF, _INF)
        ub = np.clip(self._var_at.take({k: b[1] for k, b in bounds.items()}), -_INF, _INF)
        return self._arrays(self._fill(self._param_at.take(params)), lb, ub, self._integrality)

    def _arrays(
        self, vals: np.ndarray, lb: np.ndarray, ub: np.ndarray, integer: list[Any]
    ) -> highspy.HighsLp:
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = self.n_col, self.n_row
        cost = np.zeros(self.n_col)
        cost[self._cost_cols] = vals[self._cost_expr]
        lp.col_cost_ = cost
        lp.offset_ = float(vals[self._offset_expr])
        lp.col_lower_, lp.col_upper_ = lb, ub
        lo_i, hi_i, k_i = self._bounds
        const = vals[k_i]
        row_lo = np.where(lo_i >= 0, vals[lo_i] - const, -_INF)
        row_hi = np.where(hi_i >= 0, vals[hi_i] - const, _INF)
        for row in (row_lo, row_hi):
            row[np.abs(row) >= _BIG] = np.sign(row[np.abs(row) >= _BIG]) * _INF  # HiGHS's reading of 1e20
        lp.row_lower_, lp.row_upper_ = row_lo, row_hi
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = self._a_start
        lp.a_matrix_.index_ = self._a_index
        lp.a_matrix_.value_ = vals[self._a_expr]
        lp.integrality_ = integer
        return lp
