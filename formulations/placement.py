"""The joint placement and KV-tiering MILP as a pyomo model with mutable parameters.

Decisions: nodes or racks bought per hardware (``n``), instances per candidate unit (``x``),
fresh requests/s prefilled per unit (``f``), returning requests/s per unit, KV class and tier
(``r``), and the demand scale (fixed at 1 unless the objective is goodput). Constraint families and
their meaning are those of :func:`formulations.placement_check.residuals`, which re-evaluates
them independently; read that module for the algebra in numpy form.

Every coefficient is a mutable ``Param``, so a new :class:`PlacementData` with the same
:meth:`~PlacementData.structure` re-solves the built model in place (:func:`update`). Elastic
slacks on demand, inventory, power, budget and network capacity are part of the structure with
upper bound zero; :meth:`formulations.solve.PlacementSolver.elastic` opens them to find what makes
an instance infeasible.
"""

from __future__ import annotations

import numpy as np
import pyomo.environ as pyo

from formulations.placement_data import CAPACITY_TIERS, LINK_TIERS, TIERS, Objective, PlacementData, Role

INF_BOUND = 1e20
TIE_BREAK = (
    1e-3  # $/h per request-second/s of reload wait: prefers faster tiers at equal cost, far below a node
)
ELASTIC = ("fresh_demand", "returning_demand", "inventory", "power", "budget", "network_capacity")
_T = {t: i for i, t in enumerate(TIERS)}


def _finite_or_zero(v: float) -> float:
    return float(v) if np.isfinite(v) else 0.0


def _finite(v: float) -> float:
    return float(v) if np.isfinite(v) else INF_BOUND


def build(data: PlacementData) -> pyo.ConcreteModel:
    """A pyomo model for ``data``'s structure, with ``data``'s values loaded."""
    m = pyo.ConcreteModel(name="placement")
    H, U, C = range(data.n_hw), range(data.n_units), range(data.n_classes)
    T = range(len(TIERS))
    m.H, m.U, m.C, m.T = (
        pyo.Set(initialize=H),
        pyo.Set(initialize=U),
        pyo.Set(initialize=C),
        pyo.Set(initialize=T),
    )
    mut = {"mutable": True, "initialize": 0.0}
    # hardware
    m.sale = pyo.Param(m.H, **mut)
    m.price = pyo.Param(m.H, **mut)
    m.watts = pyo.Param(m.H, **mut)
    m.inventory = pyo.Param(m.H, **mut)
    m.tier_gb = pyo.Param(m.H, m.T, **mut)
    m.tier_bw = pyo.Param(m.H, m.T, **mut)
    # units
    m.gpus = pyo.Param(m.U, **mut)
    m.share = pyo.Param(m.U, **mut)
    m.fresh_s = pyo.Param(m.U, **mut)
    m.dec = pyo.Param(m.U, **mut)
    m.hbm_idle = pyo.Param(m.U, **mut)
    m.nic = pyo.Param(m.U, **mut)
    m.mid_s = pyo.Param(m.U, m.C, m.T, **mut)
    m.reload_s = pyo.Param(m.U, m.C, m.T, **mut)
    # classes and demand
    m.class_rate = pyo.Param(m.C, **mut)
    m.dwell = pyo.Param(m.C, **mut)
    m.class_gb = pyo.Param(m.C, **mut)
    m.class_handoff = pyo.Param(m.C, **mut)
    m.fresh_rate = pyo.Param(**mut)
    m.osl = pyo.Param(**mut)
    m.fresh_handoff = pyo.Param(**mut)
    m.afd_gb = pyo.Param(**mut)
    m.budget = pyo.Param(**mut)
    m.power = pyo.Param(**mut)
    m.net_cap = pyo.Param(**mut)
    m.net_price = pyo.Param(**mut)
    m.latency_price = pyo.Param(**mut)
    # objective weights
    m.w_cost = pyo.Param(**mut)
    m.w_gpus = pyo.Param(**mut)
    m.w_scale = pyo.Param(**mut)
    m.w_slack = pyo.Param(list(ELASTIC), **mut)

    m.n = pyo.Var(m.H, domain=pyo.NonNegativeIntegers)
    m.x = pyo.Var(m.U, domain=pyo.NonNegativeIntegers)
    m.f = pyo.Var(m.U, domain=pyo.NonNegativeReals)
    m.r = pyo.Var(m.U, m.C, m.T, domain=pyo.NonNegativeReals)
    m.scale = pyo.Var(domain=pyo.NonNegativeReals, bounds=(1.0, 1.0))
    m.slack = pyo.Var(list(ELASTIC), domain=pyo.NonNegativeReals, bounds=(0.0, 0.0))

    role = [Role(int(v)) for v in data.unit_role]
    hw = [int(v) for v in data.unit_hw]
    prefill_only = [u for u in U if role[u] is Role.PREFILL]
    decoders = [u for u in U if role[u] in (Role.DECODE, Role.ATTENTION)]
    ffn = [u for u in U if role[u] is Role.FFN]
    attention = [u for u in U if role[u] is Role.ATTENTION]

    def served(u: int) -> pyo.Expression:
        return m.f[u] + sum(m.r[u, c, t] for c in C for t in T)

    def handoff(u: int) -> pyo.Expression:
        return m.f[u] * m.fresh_handoff + sum(m.r[u, c, t] * m.class_handoff[c] for c in C for t in T)

    net = _T["network"]
    m.net_stored = pyo.Expression(expr=sum(m.r[u, c, net] * m.dwell[c] * m.class_gb[c] for u in U for c in C))
    m.cost = pyo.Expression(expr=sum(m.price[h] * m.sale[h] * m.n[h] for h in H) + m.net_price * m.net_stored)
    m.latency_cost = pyo.Expression(
        expr=3600.0
        * m.latency_price
        * sum(m.r[u, c, t] * m.reload_s[u, c, t] for u in U for c in C for t in T)
    )
    m.gpu_count = pyo.Expression(expr=sum(m.sale[h] * m.n[h] for h in H))

    m.gpus_in_sale_units = pyo.Constraint(
        m.H, rule=lambda m, h: sum(m.gpus[u] * m.x[u] for u in U if hw[u] == h) <= m.sale[h] * m.n[h]
    )
    m.inventory_c = pyo.Constraint(
        m.H, rule=lambda m, h: m.sale[h] * m.n[h] <= m.inventory[h] + m.slack["inventory"]
    )
    m.fresh_demand = pyo.Constraint(
        expr=sum(m.f[u] for u in U) + m.slack["fresh_demand"] == m.scale * m.fresh_rate
    )
    m.returning_demand = pyo.Constraint(
        m.C,
        rule=lambda m, c: (
            sum(m.r[u, c, t] for u in U for t in T) + m.slack["returning_demand"] == m.scale * m.class_rate[c]
        ),
    )
    m.prefill_time = pyo.Constraint(
        m.U,
        rule=lambda m, u: (
            m.f[u] * m.fresh_s[u] + sum(m.r[u, c, t] * m.mid_s[u, c, t] for c in C for t in T)
            <= m.share[u] * m.x[u]
        ),
    )
    mixed = [u for u in U if role[u] is Role.MIXED]
    m.decode_mixed = pyo.Constraint(mixed, rule=lambda m, u: served(u) * m.osl <= m.dec[u] * m.x[u])
    if prefill_only:
        handed = sum(served(u) for u in prefill_only)
        m.decode_pool = pyo.Constraint(expr=m.osl * handed <= sum(m.dec[u] * m.x[u] for u in decoders))
        m.handoff_in = pyo.Constraint(
            expr=sum(handoff(u) for u in prefill_only) <= sum(m.nic[u] * m.x[u] for u in decoders)
        )
        if ffn or attention:  # attention-FFN disaggregated: both halves must carry the decode
            m.ffn_pool = pyo.Constraint(expr=m.osl * handed <= sum(m.dec[u] * m.x[u] for u in ffn))
            m.afd_attention = pyo.Constraint(
                expr=m.afd_gb * m.osl * handed <= sum(m.nic[u] * m.x[u] for u in attention)
            )
            m.afd_ffn = pyo.Constraint(expr=m.afd_gb * m.osl * handed <= sum(m.nic[u] * m.x[u] for u in ffn))
    m.nic_out = pyo.Constraint(
        m.U,
        rule=lambda m, u: (
            (handoff(u) if role[u] is Role.PREFILL else 0.0) + sum(m.r[u, c, net] * m.class_gb[c] for c in C)
            <= m.nic[u] * m.x[u]
        ),
    )
    m.tier_link = pyo.Constraint(
        [(t, u) for t in LINK_TIERS for u in U],
        rule=lambda m, t, u: (
            sum(m.r[u, c, _T[t]] * m.class_gb[c] for c in C) <= m.tier_bw[hw[u], _T[t]] * m.gpus[u] * m.x[u]
        ),
    )

    def capacity(m: pyo.ConcreteModel, t: str, u: int) -> pyo.Expression:
        stored = sum(m.r[u, c, _T[t]] * m.dwell[c] * m.class_gb[c] for c in C)
        room = m.hbm_idle[u] * m.x[u] if t == "hbm" else m.tier_gb[hw[u], _T[t]] * m.gpus[u] * m.x[u]
        return stored <= room

    m.tier_capacity = pyo.Constraint([(t, u) for t in CAPACITY_TIERS for u in U], rule=capacity)
    m.network_capacity = pyo.Constraint(expr=m.net_stored <= m.net_cap + m.slack["network_capacity"])
    m.power_c = pyo.Constraint(
        expr=sum(m.watts[h] * m.sale[h] * m.n[h] for h in H) <= m.power + m.slack["power"]
    )
    m.budget_c = pyo.Constraint(expr=m.cost <= m.budget + m.slack["budget"])

    # ties between equally priced tiers break toward the faster reload
    tie = TIE_BREAK * sum(m.r[u, c, t] * m.reload_s[u, c, t] for u in U for c in C for t in T)
    m.obj = pyo.Objective(
        expr=m.w_cost * (m.cost + m.latency_cost)
        + tie
        + m.w_gpus * m.gpu_count
        - m.w_scale * m.scale
        + sum(m.w_slack[k] * m.slack[k] for k in ELASTIC),
        sense=pyo.minimize,
    )
    update(m, data)
    return m


def update(m: pyo.ConcreteModel, data: PlacementData) -> None:
    """Load ``data``'s values into a model built for the same structure."""
    for h in range(data.n_hw):
        m.sale[h] = float(data.sale_gpus[h])
        m.price[h] = _finite_or_zero(data.usd_per_gpu_hour[h])  # unpriced hardware: counts only
        m.watts[h] = float(data.watts_per_gpu[h])
        m.inventory[h] = _finite(data.inventory_gpus[h])
        for t in range(len(TIERS)):
            m.tier_gb[h, t] = float(data.tier_gb_per_gpu[h, t])
            m.tier_bw[h, t] = float(data.tier_gb_s_per_gpu[h, t])
    for u in range(data.n_units):
        m.gpus[u] = float(data.unit_gpus[u])
        m.share[u] = float(data.prefill_share[u])
        m.dec[u] = float(data.decode_tok_s[u])
        m.hbm_idle[u] = max(float(data.hbm_idle_gb[u]), 0.0)
        m.nic[u] = float(data.nic_gb_s[u])
        fs = float(data.fresh_s[u])
        m.fresh_s[u] = fs if np.isfinite(fs) else 0.0
        m.f[u].setub(None if np.isfinite(fs) else 0.0)
        for c in range(data.n_classes):
            for t in range(len(TIERS)):
                ms = float(data.mid_s[u, c, t])
                m.mid_s[u, c, t] = ms if np.isfinite(ms) else 0.0
                m.reload_s[u, c, t] = float(data.reload_s[u, c, t]) if np.isfinite(ms) else 0.0
                m.r[u, c, t].setub(None if np.isfinite(ms) else 0.0)
    for c in range(data.n_classes):
        m.class_rate[c] = float(data.class_per_s[c])
        m.dwell[c] = float(data.class_dwell_s[c])
        m.class_gb[c] = float(data.class_gb[c])
        m.class_handoff[c] = float(data.class_handoff_gb[c])
    m.fresh_rate = float(data.fresh_per_s)
    m.osl = float(data.output_tokens)
    m.fresh_handoff = float(data.fresh_handoff_gb)
    m.afd_gb = float(data.afd_gb_per_token)
    m.budget = _finite(data.budget_usd_hour)
    m.power = _finite(data.power_w)
    m.net_cap = _finite(data.network_capacity_gb)
    m.net_price = float(data.network_usd_per_gb_hour)
    m.latency_price = float(data.latency_usd_per_s)
    set_objective(m, data.objective)


def set_objective(
    m: pyo.ConcreteModel, objective: Objective, elastic: dict[str, float] | None = None
) -> None:
    """Weights of the objective; ties break on cost. ``elastic`` maps each elastic family to
    the size it is measured against: the model then minimises the slacks relative to those sizes
    (and nothing else), so their values say what is missing and by how much."""
    goodput = objective is Objective.GOODPUT and elastic is None
    m.scale.setlb(0.0 if goodput else 1.0)
    m.scale.setub(None if goodput else 1.0)
    for k in ELASTIC:
        m.slack[k].setub(None if elastic is not None else 0.0)
        m.w_slack[k] = 1.0 / elastic[k] if elastic is not None else 0.0
    if elastic is not None:
        m.w_cost, m.w_gpus, m.w_scale = 0.0, 0.0, 0.0
        return
    m.w_cost = {Objective.COST: 1.0, Objective.GPUS: 1e-6, Objective.GOODPUT: 1e-6}[objective]
    m.w_gpus = 1.0 if objective is Objective.GPUS else 0.0
    m.w_scale = 1.0 if goodput else 0.0
