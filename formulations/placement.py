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

from dataclasses import dataclass

import numpy as np

from formulations.domains import afd_domain_rows
from formulations.fan_out import fan_cap, fan_members
from formulations.placement_data import CAPACITY_TIERS, LINK_TIERS, TIERS, Objective, PlacementData, Role
from formulations.pyomo_layer import pyo
from formulations.slots import slot_rows

INF_BOUND = 1e20
TIE_BREAK = (
    1e-3  # $/h per request-second/s of reload wait: prefers faster tiers at equal cost, far below a node
)
# the cost's weight where the objective is the GPUs or the goodput: a tie-break (a goodput
# placement also takes the cheapest design of its reach afterwards, dse.placement.plan)
COST_TIE = 1e-6
ELASTIC = ("fresh_demand", "returning_demand", "inventory", "power", "budget", "network_capacity")
_T = {t: i for i, t in enumerate(TIERS)}


def _finite(v: float) -> float:
    return float(v) if np.isfinite(v) else INF_BOUND


@dataclass(frozen=True)
class _Index:
    """The model's index ranges and which units play which role, read once from the data."""

    H: range
    U: range
    C: range
    T: range
    role: list[Role]
    hw: list[int]  # hardware of each unit
    partner: list[int]  # an FFN unit's attention unit of the same shape and pace (-1: none)
    fans: list[tuple[list[int], list[int]]]  # per fan-out level, its wide and narrow units (fan_out)

    @classmethod
    def of(cls, data: PlacementData) -> _Index:
        n = data.n_units
        return cls(
            H=range(data.n_hw),
            U=range(n),
            C=range(data.n_classes),
            T=range(len(TIERS)),
            role=[Role(int(v)) for v in data.unit_role],
            hw=[int(v) for v in data.unit_hw],
            partner=[-1] * n if data.afd_partner is None else [int(v) for v in data.afd_partner],
            fans=fan_members(data),
        )

    def units(self, *roles: Role) -> list[int]:
        return [u for u in self.U if self.role[u] in roles]


def build(data: PlacementData) -> pyo.ConcreteModel:
    """A pyomo model for ``data``'s structure, with ``data``'s values loaded.

    Components are added in a fixed order (sets, parameters, variables, expressions, then each
    constraint family and the objective): it is the order of HiGHS's rows and columns, on which
    its path, and so a tie between equal optima, depends.
    """
    m = pyo.ConcreteModel(name="placement")
    ix = _Index.of(data)
    _add_sets(m, ix)
    _add_params(m)
    _add_variables(m)
    _add_expressions(m, ix)
    _add_purchase_rows(m, ix)
    _add_demand_rows(m, ix)
    _add_serving_rows(m, ix)
    _add_transfer_rows(m, ix)
    _add_storage_rows(m, ix)
    _add_objective(m, ix)
    update(m, data)
    return m


def _add_sets(m: pyo.ConcreteModel, ix: _Index) -> None:
    m.H, m.U, m.C, m.T = (
        pyo.Set(initialize=ix.H),
        pyo.Set(initialize=ix.U),
        pyo.Set(initialize=ix.C),
        pyo.Set(initialize=ix.T),
    )
    m.F = pyo.Set(initialize=range(len(ix.fans)))  # fan-out levels with rows (formulations.fan_out)


def _add_params(m: pyo.ConcreteModel) -> None:
    """Every coefficient, mutable and zero until :func:`update` loads it."""
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
    m.kv_gpus = pyo.Param(m.U, **mut)  # those holding distinct shares of the KV (PlacementData.kv_gpus)
    m.dram_room = pyo.Param(m.U, **mut)  # a GPU's host DRAM for resting KV (PlacementData.dram_room_gb)
    m.share = pyo.Param(m.U, **mut)
    m.fresh_s = pyo.Param(m.U, **mut)
    m.dec = pyo.Param(m.U, **mut)
    m.hbm_idle = pyo.Param(m.U, **mut)
    m.nic = pyo.Param(m.U, **mut)
    # decode tokens/s a mixed unit's instances carry with slots kept free, mix_s x - mix_k once
    # used (formulations.slots), and the requests/s any unit can serve (the used binary's bound)
    m.mix_s = pyo.Param(m.U, **mut)
    m.mix_k = pyo.Param(m.U, **mut)
    m.serve_cap = pyo.Param(**mut)
    m.pool_s = pyo.Param(**mut)  # the decode pool's: pool_s sum(dec x) - pool_k
    m.pool_k = pyo.Param(**mut)
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
    m.afd_gb = pyo.Param(m.U, **mut)  # GB per token an FFN unit's tokens move (0 elsewhere)
    # attention-FFN units in one scale-up domain (PlacementData.afd_partner ...): per FFN unit, the
    # attention instances at most beside one instance, the share of an attention instance one
    # instance may take, and the domains one instance takes (0 where its unit does not fit one);
    # per attention unit, INF_BOUND where none of its FFN units fits one (its rows then open), and
    # per unit whether its capacity feeds the decode across the NICs or from beside it (afd_fed)
    m.afd_beside = pyo.Param(m.U, **mut)
    m.afd_share = pyo.Param(m.U, **mut)
    m.afd_domain_share = pyo.Param(m.U, **mut)
    m.afd_open = pyo.Param(m.U, **mut)
    m.afd_feeds = pyo.Param(m.U, **mut)
    m.fan_cap = pyo.Param(**mut)  # decode tokens/s either side of a fan-out level may carry
    m.budget = pyo.Param(**mut)
    m.power = pyo.Param(**mut)
    m.net_cap = pyo.Param(**mut)
    m.net_price = pyo.Param(**mut)
    m.dram_price = pyo.Param(**mut)
    m.nvme_price = pyo.Param(**mut)
    m.energy_price = pyo.Param(m.H, **mut)
    m.latency_price = pyo.Param(**mut)
    # objective weights
    m.w_cost = pyo.Param(**mut)
    m.w_gpus = pyo.Param(**mut)
    m.w_scale = pyo.Param(**mut)
    m.w_slack = pyo.Param(list(ELASTIC), **mut)


def _add_variables(m: pyo.ConcreteModel) -> None:
    m.n = pyo.Var(m.H, domain=pyo.NonNegativeIntegers)
    m.x = pyo.Var(m.U, domain=pyo.NonNegativeIntegers)
    m.f = pyo.Var(m.U, domain=pyo.NonNegativeReals)
    m.r = pyo.Var(m.U, m.C, m.T, domain=pyo.NonNegativeReals)
    m.scale = pyo.Var(domain=pyo.NonNegativeReals, bounds=(1.0, 1.0))
    m.slack = pyo.Var(list(ELASTIC), domain=pyo.NonNegativeReals, bounds=(0.0, 0.0))
    # each hardware's GPUs past its inventory, together within the inventory's slack (closed but
    # in the elastic solve): one slack for every row had been each row's largest overshoot, so
    # the elastic solve spread the need over the hardware and the sum it reported overstated it
    m.inv_over = pyo.Var(m.H, domain=pyo.NonNegativeReals)
    m.used = pyo.Var(m.U, domain=pyo.Binary)  # whether a mixed unit serves at all (others: unused)
    m.fan = pyo.Var(m.F, domain=pyo.Binary)  # whether expert units of the level or wider are bought


def _reload_wait(m: pyo.ConcreteModel, ix: _Index) -> pyo.Expression:
    """Request-seconds of reload wait per second, over every unit, class and tier."""
    return sum(m.r[u, c, t] * m.reload_s[u, c, t] for u in ix.U for c in ix.C for t in ix.T)


def _stored(m: pyo.ConcreteModel, ix: _Index, tier: str) -> pyo.Expression:
    """GB of KV resting in ``tier`` over every unit and class (Little's law)."""
    t = _T[tier]
    return sum(m.r[u, c, t] * m.dwell[c] * m.class_gb[c] for u in ix.U for c in ix.C)


def _add_expressions(m: pyo.ConcreteModel, ix: _Index) -> None:
    """Resting KV in the network store, $/hour (GPUs and the storage resting KV fills), the
    latency and energy costs, and the GPUs bought."""
    m.net_stored = pyo.Expression(expr=_stored(m, ix, "network"))
    m.cost = pyo.Expression(
        expr=sum(m.price[h] * m.sale[h] * m.n[h] for h in ix.H)
        + m.net_price * m.net_stored
        + m.dram_price * _stored(m, ix, "dram")
        + m.nvme_price * _stored(m, ix, "nvme")
    )
    m.energy_cost = pyo.Expression(expr=sum(m.energy_price[h] * m.sale[h] * m.n[h] for h in ix.H))
    m.latency_cost = pyo.Expression(expr=3600.0 * m.latency_price * _reload_wait(m, ix))
    m.gpu_count = pyo.Expression(expr=sum(m.sale[h] * m.n[h] for h in ix.H))


def _add_purchase_rows(m: pyo.ConcreteModel, ix: _Index) -> None:
    """Units fit in the nodes or racks bought, and those within the inventory."""
    m.gpus_in_sale_units = pyo.Constraint(
        m.H, rule=lambda m, h: sum(m.gpus[u] * m.x[u] for u in ix.U if ix.hw[u] == h) <= m.sale[h] * m.n[h]
    )
    m.inventory_c = pyo.Constraint(
        m.H, rule=lambda m, h: m.sale[h] * m.n[h] <= m.inventory[h] + m.inv_over[h]
    )
    m.inventory_over = pyo.Constraint(expr=sum(m.inv_over[h] for h in ix.H) <= m.slack["inventory"])


def _add_demand_rows(m: pyo.ConcreteModel, ix: _Index) -> None:
    """Every fresh request and every returning turn of each class is served somewhere."""
    m.fresh_demand = pyo.Constraint(
        expr=sum(m.f[u] for u in ix.U) + m.slack["fresh_demand"] == m.scale * m.fresh_rate
    )
    m.returning_demand = pyo.Constraint(
        m.C,
        rule=lambda m, c: (
            sum(m.r[u, c, t] for u in ix.U for t in ix.T) + m.slack["returning_demand"]
            == m.scale * m.class_rate[c]
        ),
    )


def _served(m: pyo.ConcreteModel, ix: _Index, u: int) -> pyo.Expression:
    """Requests/s unit ``u`` prefills: fresh and returning."""
    return m.f[u] + sum(m.r[u, c, t] for c in ix.C for t in ix.T)


def _handoff(m: pyo.ConcreteModel, ix: _Index, u: int) -> pyo.Expression:
    """GB/s of KV unit ``u`` hands to the decode pool."""
    return m.f[u] * m.fresh_handoff + sum(m.r[u, c, t] * m.class_handoff[c] for c in ix.C for t in ix.T)


def _add_serving_rows(m: pyo.ConcreteModel, ix: _Index) -> None:
    """Prefill time per unit, and decode tokens/s where the prefilled requests go, within what
    the decoding units' slots carry with headroom for the traffic's fluctuation
    (:mod:`formulations.slots`): a mixed unit pays the headroom's fixed part where it is used."""
    m.prefill_time = pyo.Constraint(
        m.U,
        rule=lambda m, u: (
            m.f[u] * m.fresh_s[u] + sum(m.r[u, c, t] * m.mid_s[u, c, t] for c in ix.C for t in ix.T)
            <= m.share[u] * m.x[u]
        ),
    )
    mixed = ix.units(Role.MIXED)
    m.decode_mixed = pyo.Constraint(
        mixed, rule=lambda m, u: _served(m, ix, u) * m.osl <= m.mix_s[u] * m.x[u] - m.mix_k[u] * m.used[u]
    )
    m.mixed_used = pyo.Constraint(mixed, rule=lambda m, u: _served(m, ix, u) <= m.serve_cap * m.used[u])
    prefill_only = ix.units(Role.PREFILL, Role.MIDFILL)
    if prefill_only:
        _add_handed_decode_rows(m, ix, prefill_only)


def _add_handed_decode_rows(m: pyo.ConcreteModel, ix: _Index, prefill_only: list[int]) -> None:
    """Disaggregated: the decode pool carries what the prefill pool hands it, over its NICs."""
    decoders = ix.units(Role.DECODE, Role.ATTENTION)
    ffn, attention = ix.units(Role.FFN), ix.units(Role.ATTENTION)
    handed = sum(_served(m, ix, u) for u in prefill_only)
    capacity = sum(m.dec[u] * m.x[u] for u in decoders)
    m.decode_pool = pyo.Constraint(expr=m.osl * handed <= m.pool_s * capacity - m.pool_k)
    m.handoff_in = pyo.Constraint(
        expr=sum(_handoff(m, ix, u) for u in prefill_only) <= sum(m.nic[u] * m.x[u] for u in decoders)
    )
    if ffn or attention:  # attention-FFN disaggregated: both halves must carry the decode
        m.ffn_pool = pyo.Constraint(expr=m.osl * handed <= sum(m.dec[u] * m.x[u] for u in ffn))
        # the hidden states' traffic, at what the FFN units carry (each unit's fan-out differs by
        # shape, and which units carry which tokens is not a variable): at most one unit's worth
        # above the traffic itself, as the FFN units are whole
        if ffn:  # (without FFN units ffn_pool already refuses the decode)
            traffic = sum(m.afd_gb[u] * m.dec[u] * m.x[u] for u in ffn)
            m.afd_attention = pyo.Constraint(expr=traffic <= sum(m.nic[u] * m.x[u] for u in attention))
            m.afd_ffn = pyo.Constraint(expr=traffic <= sum(m.nic[u] * m.x[u] for u in ffn))
        paired = sorted({ix.partner[u] for u in ffn if ix.partner[u] >= 0})
        if paired:
            _add_domain_rows(m, ix, paired, handed)
        if ix.fans:
            _add_fan_rows(m, ix)


def _add_fan_rows(m: pyo.ConcreteModel, ix: _Index) -> None:
    """Every attention unit across the NICs reaches the widest expert unit across them the design
    buys (:mod:`formulations.fan_out`): per level, the expert units of it or wider carry nothing
    unless ``fan`` is set, and the attention units whose reach is below it nothing when it is."""

    def carry(m: pyo.ConcreteModel, units: list[int]) -> pyo.Expression:
        return sum(m.dec[u] * m.x[u] for u in units)

    m.afd_fan_wide = pyo.Constraint(m.F, rule=lambda m, k: carry(m, ix.fans[k][0]) <= m.fan_cap * m.fan[k])
    m.afd_fan_narrow = pyo.Constraint(
        m.F, rule=lambda m, k: carry(m, ix.fans[k][1]) <= m.fan_cap * (1.0 - m.fan[k])
    )


def _add_domain_rows(m: pyo.ConcreteModel, ix: _Index, paired: list[int], handed: pyo.Expression) -> None:
    """Attention-FFN units whose GPUs fit in one scale-up domain (``dse.perf.afd.afd_in_domain``)
    move their hidden states over NVLink, not the NICs (their ``afd_gb`` is 0), and so must stay
    in it: an attention unit paired with such FFN units (``paired``) runs no more instances than
    sit beside theirs, nor fewer than their tokens are shared over (``afd_beside_*``: the sims
    find the same unit from the counts); each unit keeps to a domain bought, whole, several to a
    domain where they fit (``afd_domains``); and the decode those FFN units carry comes from the
    attention beside them, never across the NICs from other attention units (``afd_fed``). An
    attention unit whose FFN units all carry nothing at this pace has its rows open
    (``afd_open``)."""
    mates = {i: [u for u in ix.U if ix.partner[u] == i] for i in paired}
    m.afd_beside_attention = pyo.Constraint(
        paired, rule=lambda m, i: m.x[i] - sum(m.afd_beside[u] * m.x[u] for u in mates[i]) <= m.afd_open[i]
    )
    m.afd_beside_ffn = pyo.Constraint(
        paired, rule=lambda m, i: sum(m.afd_share[u] * m.x[u] for u in mates[i]) - m.x[i] <= m.afd_open[i]
    )
    ffn = [u for us in mates.values() for u in us]
    held = sorted({ix.hw[u] for u in ffn})
    m.afd_domains = pyo.Constraint(
        held, rule=lambda m, h: sum(m.afd_domain_share[u] * m.x[u] for u in ffn if ix.hw[u] == h) <= m.n[h]
    )
    feeders = ix.units(Role.FFN, Role.ATTENTION)
    fed = sum(m.afd_feeds[u] * m.dec[u] * m.x[u] for u in feeders)
    m.afd_fed = pyo.Constraint(expr=m.osl * handed <= fed)


def _add_transfer_rows(m: pyo.ConcreteModel, ix: _Index) -> None:
    """Each unit's NIC carries its handoffs and network reloads; each tier link its reloads."""
    net = _T["network"]
    m.nic_out = pyo.Constraint(
        m.U,
        rule=lambda m, u: (
            (_handoff(m, ix, u) if ix.role[u].hands_off else 0.0)
            + sum(m.r[u, c, net] * m.class_gb[c] for c in ix.C)
            <= m.nic[u] * m.x[u]
        ),
    )
    m.tier_link = pyo.Constraint(
        [(t, u) for t in LINK_TIERS for u in ix.U],
        rule=lambda m, t, u: (
            sum(m.r[u, c, _T[t]] * m.class_gb[c] for c in ix.C)
            <= m.tier_bw[ix.hw[u], _T[t]] * m.kv_gpus[u] * m.x[u]
        ),
    )


def _add_storage_rows(m: pyo.ConcreteModel, ix: _Index) -> None:
    """Resting KV within each unit's tiers and the network store; power and budget caps."""

    def capacity(m: pyo.ConcreteModel, t: str, u: int) -> pyo.Expression:
        stored = sum(m.r[u, c, _T[t]] * m.dwell[c] * m.class_gb[c] for c in ix.C)
        if t == "hbm":
            room = m.hbm_idle[u] * m.x[u]
        else:
            per_gpu = m.dram_room[u] if t == "dram" else m.tier_gb[ix.hw[u], _T[t]]
            room = per_gpu * m.kv_gpus[u] * m.x[u]
        return stored <= room

    m.tier_capacity = pyo.Constraint([(t, u) for t in CAPACITY_TIERS for u in ix.U], rule=capacity)
    m.network_capacity = pyo.Constraint(expr=m.net_stored <= m.net_cap + m.slack["network_capacity"])
    m.power_c = pyo.Constraint(
        expr=sum(m.watts[h] * m.sale[h] * m.n[h] for h in ix.H) <= m.power + m.slack["power"]
    )
    m.budget_c = pyo.Constraint(expr=m.cost <= m.budget + m.slack["budget"])


def _add_objective(m: pyo.ConcreteModel, ix: _Index) -> None:
    """Weighted cost, GPUs, demand scale and slacks; the weights are set by :func:`set_objective`."""
    # ties between equally priced tiers break toward the faster reload
    tie = TIE_BREAK * _reload_wait(m, ix)
    m.obj = pyo.Objective(
        expr=m.w_cost * (m.cost + m.latency_cost + m.energy_cost)
        + tie
        + m.w_gpus * m.gpu_count
        - m.w_scale * m.scale
        + sum(m.w_slack[k] * m.slack[k] for k in ELASTIC),
        sense=pyo.minimize,
    )


def _store(param: pyo.Param, values: np.ndarray) -> None:
    """Load an indexed parameter from an array shaped like its index (in the order of its keys).
    Every index exists (the model was built for this structure) and every value is a plain float,
    the one an item-by-item assignment would set, so pyomo's per-item validation is skipped: it
    was most of a study trial's load (``benchmarks/milp_speed.py``)."""
    param.store_values(dict(zip(param.keys(), values.ravel().tolist(), strict=True)), check=False)


def param_values(data: PlacementData) -> dict[str, np.ndarray]:
    """Every parameter's value under ``data``, by name, each shaped like its index (a scalar as a
    0-d array), the objective's weights included: what :func:`update` stores in the model and
    what :meth:`formulations.direct.DirectModel.lp_from` reads without it."""
    fresh_ok, mid_ok = np.isfinite(data.fresh_s), np.isfinite(data.mid_s)
    energy = data.energy_usd_per_gpu_hour
    slots = slot_rows(data)
    out = {
        "sale": data.sale_gpus,
        "price": np.where(np.isfinite(data.usd_per_gpu_hour), data.usd_per_gpu_hour, 0.0),  # counts only
        "watts": data.watts_per_gpu,
        "inventory": np.where(np.isfinite(data.inventory_gpus), data.inventory_gpus, INF_BOUND),
        "tier_gb": data.tier_gb_per_gpu,
        "tier_bw": data.tier_gb_s_per_gpu,
        "gpus": data.unit_gpus,
        "kv_gpus": data.kv_gpus,
        "dram_room": data.dram_room_gb,
        "share": data.prefill_share,
        "dec": data.decode_tok_s,
        "hbm_idle": np.maximum(data.hbm_idle_gb, 0.0),
        "nic": data.nic_gb_s,
        **slots,
        "fresh_s": np.where(fresh_ok, data.fresh_s, 0.0),
        "mid_s": np.where(mid_ok, data.mid_s, 0.0),
        "reload_s": np.where(mid_ok, data.reload_s, 0.0),
        "class_rate": data.class_per_s,
        "dwell": data.class_dwell_s,
        "class_gb": data.class_gb,
        "class_handoff": data.class_handoff_gb,
        "fresh_rate": data.fresh_per_s,
        "osl": data.output_tokens,
        "fresh_handoff": data.fresh_handoff_gb,
        "afd_gb": np.broadcast_to(np.asarray(data.afd_gb_per_token, dtype=float), (len(data.unit_names),)),
        **{k: np.where(np.isfinite(v), v, INF_BOUND) for k, v in afd_domain_rows(data).items()},
        "fan_cap": fan_cap(data, slots),
        "budget": _finite(data.budget_usd_hour),
        "power": _finite(data.power_w),
        "net_cap": _finite(data.network_capacity_gb),
        "net_price": data.network_usd_per_gb_hour,
        "dram_price": data.dram_usd_per_gb_hour,
        "nvme_price": data.nvme_usd_per_gb_hour,
        "energy_price": np.asarray(energy) if energy is not None else np.zeros(data.n_hw),
        "latency_price": data.latency_usd_per_s,
        **_weights(data.objective, None),
    }
    return {k: np.asarray(v, dtype=float) for k, v in out.items()}


def var_bounds(data: PlacementData) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every variable's lower and upper bounds under ``data`` (inf: none), by name, each shaped
    like its index: the routes a unit cannot serve are closed, and the demand scale and the
    elastic slacks are fixed or free as the objective wants (:func:`set_objective`)."""
    goodput = data.objective is Objective.GOODPUT
    inf, levels = np.inf, len(fan_members(data))
    return {
        "n": (np.zeros(data.n_hw), np.full(data.n_hw, inf)),
        "x": (np.zeros(data.n_units), np.full(data.n_units, inf)),
        "f": (np.zeros(data.n_units), np.where(np.isfinite(data.fresh_s), inf, 0.0)),
        "r": (np.zeros(data.mid_s.shape), np.where(np.isfinite(data.mid_s), inf, 0.0)),
        "scale": (np.array(0.0 if goodput else 1.0), np.array(inf if goodput else 1.0)),
        "slack": (np.zeros(len(ELASTIC)), np.zeros(len(ELASTIC))),
        "inv_over": (np.zeros(data.n_hw), np.full(data.n_hw, inf)),
        "used": (np.zeros(data.n_units), np.ones(data.n_units)),
        "fan": (np.zeros(levels), np.ones(levels)),
    }


def update(m: pyo.ConcreteModel, data: PlacementData) -> None:
    """Load ``data``'s values into a model built for the same structure."""
    for name, values in param_values(data).items():
        param = getattr(m, name)
        if param.is_indexed():
            _store(param, values)
        else:
            param.set_value(float(values))
    bounds = var_bounds(data)
    for name in ("f", "r"):  # the counts keep their domain's bounds; the rest set_objective sets
        var = getattr(m, name)
        for v, up in zip(var.values(), bounds[name][1].ravel().tolist(), strict=True):
            v.setub(None if up == np.inf else up)
    set_objective(m, data.objective)


def _weights(objective: Objective, elastic: dict[str, float] | None) -> dict[str, float | list[float]]:
    """The objective's weights (see :func:`set_objective`), by parameter name."""
    slack = [1.0 / elastic[k] if elastic is not None and k in elastic else 0.0 for k in ELASTIC]
    if elastic is not None:
        return {"w_cost": 0.0, "w_gpus": 0.0, "w_scale": 0.0, "w_slack": slack}
    goodput = objective is Objective.GOODPUT
    return {
        "w_cost": {Objective.COST: 1.0, Objective.GPUS: COST_TIE, Objective.GOODPUT: COST_TIE}[objective],
        "w_gpus": 1.0 if objective is Objective.GPUS else 0.0,
        "w_scale": 1.0 if goodput else 0.0,
        "w_slack": slack,
    }


def set_objective(
    m: pyo.ConcreteModel, objective: Objective, elastic: dict[str, float] | None = None
) -> None:
    """Weights of the objective; ties break on cost. ``elastic`` maps each elastic family to
    the size it is measured against: the model then minimises the slacks relative to those sizes
    (and nothing else), so their values say what is missing and by how much; a family it leaves
    out keeps its slack closed."""
    goodput = objective is Objective.GOODPUT and elastic is None
    m.scale.setlb(0.0 if goodput else 1.0)
    m.scale.setub(None if goodput else 1.0)
    for k in ELASTIC:  # a family ``elastic`` leaves out stays closed
        m.slack[k].setub(None if elastic is not None and k in elastic else 0.0)
    for name, value in _weights(objective, elastic).items():
        if isinstance(value, list):
            _store(getattr(m, name), np.array(value))
        else:
            getattr(m, name).set_value(value)
