"""Independent re-evaluation of every placement constraint with numpy.

The pyomo model in :mod:`formulations.placement` and this module are written separately from the
same :class:`~formulations.placement_data.PlacementData`; a solution passes only if both agree.
Every family is written as ``g <= 0`` (``g`` in the family's own unit; the two demand families
are equalities, so their ``g`` is the absolute miss), which also serves the
shadow prices (the Lagrangian derivative of the optimum is the dual-weighted change of ``g``) and
the infeasibility explanations (a family's ``g`` shows its numbers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from formulations.fan_out import fan_carry
from formulations.placement_data import (
    CAPACITY_TIERS,
    LINK_TIERS,
    TIERS,
    Objective,
    PlacementData,
    PlacementSolution,
    Role,
)
from formulations.slots import slot_rows, used_by

Array = np.ndarray

FAMILY_UNITS = {
    "gpus_in_sale_units": "GPUs",
    "inventory": "GPUs",
    "fresh_demand": "requests/s",
    "returning_demand": "requests/s",
    "prefill_time": "busy s/s",
    "decode_mixed": "tokens/s",
    "decode_pool": "tokens/s",
    "ffn_pool": "tokens/s",
    "nic_out": "GB/s",
    "handoff_in": "GB/s",
    "afd_attention": "GB/s",
    "afd_ffn": "GB/s",
    "afd_beside_attention": "instances",
    "afd_beside_ffn": "instances",
    "afd_domains": "domains",
    "afd_fed": "tokens/s",
    "afd_fan_out": "tokens/s",
    "tier_link": "GB/s",
    "tier_capacity": "GB",
    "network_capacity": "GB",
    "power": "W",
    "budget": "$/h",
}

_T = {t: i for i, t in enumerate(TIERS)}


def _times(coef: Array, amount: Array) -> Array:
    """``coef * amount`` where an infinite coefficient with zero amount costs nothing."""
    coef, amount = np.broadcast_arrays(coef, amount)
    return np.multiply(coef, amount, out=np.zeros(coef.shape), where=amount != 0.0)


def served_per_unit(data: PlacementData, sol: PlacementSolution) -> Array:
    """Requests/s each unit prefills or midfills (fresh and returning)."""
    return sol.fresh + sol.returning.sum(axis=(1, 2))


def stored_gb(data: PlacementData, sol: PlacementSolution, tier: str) -> float:
    """GB of KV resting in ``tier`` (Little's law over every unit and class)."""
    t = _T[tier]
    return float((sol.returning[:, :, t] * data.class_dwell_s * data.class_gb).sum())


def network_stored_gb(data: PlacementData, sol: PlacementSolution) -> float:
    return stored_gb(data, sol, "network")


def cost_usd_hour(data: PlacementData, sol: PlacementSolution) -> float:
    """GPUs bought, and the network store, host DRAM and NVMe that resting KV fills."""
    gpus = sol.sale_units * data.sale_gpus
    bought = gpus > 0  # hardware without a price costs nan only where the design buys it
    return float(
        (gpus[bought] * data.usd_per_gpu_hour[bought]).sum()
        + data.network_usd_per_gb_hour * network_stored_gb(data, sol)
        + data.dram_usd_per_gb_hour * stored_gb(data, sol, "dram")
        + data.nvme_usd_per_gb_hour * stored_gb(data, sol, "nvme")
    )


def energy_usd_hour(data: PlacementData, sol: PlacementSolution) -> float:
    """The objective's energy term: every GPU bought at full draw."""
    if data.energy_usd_per_gpu_hour is None:
        return 0.0
    return float((sol.sale_units * data.sale_gpus * data.energy_usd_per_gpu_hour).sum())


def reload_wait(data: PlacementData, sol: PlacementSolution) -> float:
    """Request-seconds of reload wait per second, over every unit, class and tier."""
    return float(_times(data.reload_s, sol.returning).sum())


def latency_usd_hour(data: PlacementData, sol: PlacementSolution) -> float:
    return 3600.0 * data.latency_usd_per_s * reload_wait(data, sol)


def objective_value(data: PlacementData, sol: PlacementSolution) -> float:
    """The primary objective as the MILP minimises it (goodput is negated)."""
    if data.objective is Objective.COST:
        return cost_usd_hour(data, sol) + latency_usd_hour(data, sol) + energy_usd_hour(data, sol)
    if data.objective is Objective.GPUS:
        return float((sol.sale_units * data.sale_gpus).sum())
    return -sol.scale


def residuals(data: PlacementData, sol: PlacementSolution) -> dict[str, Array]:
    """``g`` of every constraint family (``g <= 0`` holds); families absent from the instance
    (no prefill-only units, no cap) are left out."""
    x, n, f, r = sol.instances, sol.sale_units, sol.fresh, sol.returning
    role = data.unit_role
    osl = data.output_tokens
    prefill_only = (role == Role.PREFILL) | (role == Role.MIDFILL)  # they hand KV to decode
    decoders = (role == Role.DECODE) | (role == Role.ATTENTION)
    served = served_per_unit(data, sol)
    hw_onehot = data.unit_hw[None, :] == np.arange(data.n_hw)[:, None]  # (H, U)
    g: dict[str, Array] = {}

    g["gpus_in_sale_units"] = hw_onehot @ (data.unit_gpus * x) - data.sale_gpus * n
    finite = np.isfinite(data.inventory_gpus)
    if finite.any():
        g["inventory"] = (data.sale_gpus * n - data.inventory_gpus)[finite]
    g["fresh_demand"] = np.abs(np.array([sol.scale * data.fresh_per_s - f.sum()]))
    if data.n_classes:
        g["returning_demand"] = np.abs(sol.scale * data.class_per_s - r.sum(axis=(0, 2)))
    busy = _times(data.fresh_s, f) + _times(data.mid_s, r).sum(axis=(1, 2))
    g["prefill_time"] = busy - data.prefill_share * x
    mixed = role == Role.MIXED
    rows = slot_rows(data)  # decode tokens/s the slots carry with headroom; its fixed part once used
    if mixed.any():
        used = used_by(data, served)
        g["decode_mixed"] = (served * osl - (rows["mix_s"] * x - rows["mix_k"] * used))[mixed]
    if prefill_only.any():
        handed = served[prefill_only].sum()
        capacity = (data.decode_tok_s * x)[decoders].sum()
        g["decode_pool"] = np.array([osl * handed - (rows["pool_s"] * capacity - rows["pool_k"])])
        out = f * data.fresh_handoff_gb + (r.sum(axis=2) * data.class_handoff_gb).sum(axis=1)
        out = np.where(prefill_only, out, 0.0)
        g["handoff_in"] = np.array([out.sum() - (data.nic_gb_s * x)[decoders].sum()])
    else:
        out = np.zeros_like(f)
    network_reload = r[:, :, _T["network"]] @ data.class_gb
    g["nic_out"] = out + network_reload - data.nic_gb_s * x  # handoffs and network reloads
    ffn = role == Role.FFN
    if ffn.any() or (role == Role.ATTENTION).any():
        handed = served[prefill_only].sum()
        g["ffn_pool"] = np.array([osl * handed - (data.decode_tok_s * x)[ffn].sum()])
        afd = np.broadcast_to(np.asarray(data.afd_gb_per_token, dtype=float), x.shape)
        traffic = (afd * data.decode_tok_s * x)[ffn].sum()  # as formulations.placement prices it
        g["afd_attention"] = np.array([traffic - (data.nic_gb_s * x)[role == Role.ATTENTION].sum()])
        g["afd_ffn"] = np.array([traffic - (data.nic_gb_s * x)[ffn].sum()])
        if data.afd_partner is not None:
            g.update(_domain_residuals(data, x, n, osl * handed))
        carried = fan_carry(data, x)  # no attention unit across the NICs feeds expert units beyond its reach
        if carried:
            g["afd_fan_out"] = np.array([min(wide, narrow) for wide, narrow in carried])
    links = []
    caps = []
    for t in LINK_TIERS:
        ti = _T[t]
        bw = data.tier_gb_s_per_gpu[data.unit_hw, ti] * data.kv_gpus * x
        links.append(r[:, :, ti] @ data.class_gb - bw)
    for t in CAPACITY_TIERS:
        ti = _T[t]
        stored = r[:, :, ti] @ (data.class_dwell_s * data.class_gb)
        per_gpu = data.dram_room_gb if t == "dram" else data.tier_gb_per_gpu[data.unit_hw, ti]
        room = data.hbm_idle_gb * x if t == "hbm" else per_gpu * data.kv_gpus * x
        caps.append(stored - room)
    g["tier_link"] = np.concatenate(links)
    g["tier_capacity"] = np.concatenate(caps)
    if np.isfinite(data.network_capacity_gb):
        g["network_capacity"] = np.array([network_stored_gb(data, sol) - data.network_capacity_gb])
    if np.isfinite(data.power_w):
        g["power"] = np.array([(data.watts_per_gpu * data.sale_gpus * n).sum() - data.power_w])
    if np.isfinite(data.budget_usd_hour):
        g["budget"] = np.array([cost_usd_hour(data, sol) - data.budget_usd_hour])
    return g


def _domain_residuals(data: PlacementData, x: Array, n: Array, demand: float) -> dict[str, Array]:
    """The attention-FFN units in one scale-up domain: each attention unit paired with FFN units
    whose unit fits a domain runs no more instances than sit beside theirs, nor fewer than their
    tokens are shared over; they keep to whole domains bought; and the decode they carry comes
    from the attention beside them (the rows of ``formulations.placement._add_domain_rows``)."""
    assert data.afd_partner is not None and data.afd_attention_per_ffn is not None
    assert data.afd_ffn_per_attention is not None and data.afd_units_per_domain is not None
    role = data.unit_role
    partner = np.asarray(data.afd_partner, dtype=int)
    near = np.asarray(data.afd_attention_per_ffn, dtype=float) > 0
    paired = sorted(set(partner[partner >= 0].tolist()))
    beside_att, beside_ffn = [], []
    for i in paired:
        mates = (partner == i) & near
        if not mates.any():  # none of its FFN units fits a domain: the rows are open
            beside_att.append(-np.inf)
            beside_ffn.append(-np.inf)
            continue
        beside_att.append(x[i] - (data.afd_attention_per_ffn * x)[mates].sum())
        beside_ffn.append((x[mates] / data.afd_ffn_per_attention[mates]).sum() - x[i])
    racked = np.zeros(data.n_units, dtype=bool)
    racked[partner[near & (partner >= 0)]] = True
    per_unit = np.where(near, data.afd_ffn_per_attention * data.afd_units_per_domain, 1.0)
    per_domain = np.where(near, 1.0 / per_unit, 0.0)
    paired_ffn = (role == Role.FFN) & (partner >= 0)
    held = sorted(set(data.unit_hw[paired_ffn].tolist()))
    domains = [(per_domain * x)[paired_ffn & (data.unit_hw == h)].sum() - n[h] for h in held]
    feeds = ((role == Role.FFN) & ~near) | ((role == Role.ATTENTION) & racked)
    return {
        "afd_beside_attention": np.array(beside_att),
        "afd_beside_ffn": np.array(beside_ffn),
        "afd_domains": np.array(domains),
        "afd_fed": np.array([demand - (data.decode_tok_s * x)[feeds].sum()]),
    }


@dataclass(frozen=True)
class Violation:
    family: str
    index: int
    excess: float  # g, in the family's unit

    def __str__(self) -> str:
        return (
            f"{self.family}[{self.index}] exceeded by {self.excess:.6g} {FAMILY_UNITS.get(self.family, '')}"
        )


@dataclass(frozen=True)
class CheckReport:
    rows: int  # constraints re-evaluated
    violations: tuple[Violation, ...]

    @property
    def ok(self) -> bool:
        return not self.violations


def check(data: PlacementData, sol: PlacementSolution, *, rel_tol: float = 1e-6) -> CheckReport:
    """Re-evaluate every constraint, plus integrality and signs, from the data alone.

    A row may exceed zero by ``rel_tol`` times the size of its terms (solver feasibility
    tolerance), never more."""
    found: list[Violation] = []
    rows = 0
    scale_ref = _term_scale(data, sol)
    for family, g in residuals(data, sol).items():
        rows += g.size
        tol = rel_tol * scale_ref.get(family, 1.0)
        for i in np.flatnonzero(g > tol):
            found.append(Violation(family, int(i), float(g[i])))
    for name, v in (("sale_units", sol.sale_units), ("instances", sol.instances)):
        rows += v.size
        for i in np.flatnonzero(np.abs(v - np.round(v)) > 1e-6):
            found.append(Violation(f"{name}_integral", int(i), float(v[i] - np.round(v[i]))))
    for name, v in (
        ("sale_units", sol.sale_units),
        ("instances", sol.instances),
        ("fresh", sol.fresh),
        ("returning", sol.returning.ravel()),
    ):
        rows += v.size
        for i in np.flatnonzero(v < -1e-9):
            found.append(Violation(f"{name}_nonnegative", int(i), float(-v[i])))
    if data.objective is not Objective.GOODPUT:
        rows += 1
        if abs(sol.scale - 1.0) > 1e-9:
            found.append(Violation("demand_scale", 0, sol.scale - 1.0))
    return CheckReport(rows=rows, violations=tuple(found))


def _term_scale(data: PlacementData, sol: PlacementSolution) -> dict[str, float]:
    """Typical magnitude of each family's terms, so the tolerance is relative to the row's size."""
    served = float(served_per_unit(data, sol).sum()) + 1.0
    tok = served * data.output_tokens
    returning = sol.scale * data.class_per_s
    stored = float((returning * data.class_dwell_s * data.class_gb).sum()) + 1.0  # GB resting
    reloads = float((returning * data.class_gb).sum()) + 1.0  # GB/s coming back
    handoffs = served * max(data.fresh_handoff_gb, float(data.class_handoff_gb.max(initial=0.0))) + 1.0
    return {
        "gpus_in_sale_units": 1.0,
        "inventory": 1.0,
        "fresh_demand": served,
        "returning_demand": served,
        "prefill_time": 1.0 + float(sol.instances.max(initial=0)),
        "decode_mixed": tok,
        "decode_pool": tok,
        "ffn_pool": tok,
        "nic_out": handoffs + reloads,
        "handoff_in": handoffs,
        "afd_attention": 1.0 + float(np.max(data.afd_gb_per_token)) * tok,
        "afd_ffn": 1.0 + float(np.max(data.afd_gb_per_token)) * tok,
        "afd_beside_attention": 1.0 + float(sol.instances.max(initial=0)),
        "afd_beside_ffn": 1.0 + float(sol.instances.max(initial=0)),
        "afd_domains": 1.0 + float(sol.sale_units.max(initial=0)),
        "afd_fed": tok,
        "afd_fan_out": tok,
        "tier_link": reloads,
        "tier_capacity": stored,
        "network_capacity": stored,
        "power": 1e3,
        "budget": 1.0 + cost_usd_hour(data, sol),
    }
