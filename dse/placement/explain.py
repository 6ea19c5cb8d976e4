"""Why a placement is infeasible, and what more of a resource would be worth.

Infeasibility: first the candidate shapes (a role no unit can fill: weights that do not fit, a
latency target no batch meets), then an elastic solve that opens the demand, inventory, power,
budget and network-capacity rows and minimises their relative violation; what had to give, and by
how much, is the answer.

Shadow prices: the LP over the units a solution uses, with their counts relaxed, gives a
multiplier per constraint. A hardware change (one more TB/s of HBM per GPU, say) changes the
coefficients the performance model produced; by the envelope theorem the optimum moves by
``sum_i lambda_i * delta g_i`` at the LP solution, where ``g_i`` are the rows of
:func:`formulations.placement_check.residuals`. That includes every path through which the change
acts on a constraint: larger decode batches, more idle-KV room, faster reloads, faster handoffs.
Prices are in $/hour (the LP is solved for cost whatever the placement optimised); a faster reload
also lowers the optional latency cost, which these prices leave out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from dse.catalog import Catalog, Hardware
from dse.perf.params import PerfParams
from dse.placement.candidates import Candidates, Exclusion, build_candidates
from dse.placement.parallel import parse_shape
from dse.placement.request import PlacementRequest, Topology
from dse.units import GB, GIB
from formulations.placement_check import residuals
from formulations.placement_data import Objective, PlacementData, PlacementSolution, Role
from formulations.solve import PlacementSolver

REQUIRED_ROLES = {
    Topology.AGGREGATED: (Role.MIXED,),
    Topology.DISAGGREGATED: (Role.PREFILL, Role.DECODE),
    Topology.AFD: (Role.PREFILL, Role.ATTENTION, Role.FFN),
    Topology.FOUR_STAGE: (Role.PREFILL, Role.ATTENTION, Role.FFN),  # a midfill pool is optional
}


DEMANDS = ("fresh_demand", "returning_demand")
DEMAND_PRIORITY = 1e-3  # demand slack costs 1000x a relative unit of any cap's slack
# a cap of zero has no size of its own: its slack is measured in 10,000s of its units (GPUs, W,
# $/h, GB), cheap beside a sliver of the demand but still minimised (the GPUs an inventory of none
# lacks are the GPUs the demand needs, not any count)
ZERO_CAP_SIZE = 1e4


@dataclass(frozen=True)
class Infeasibility:
    """The constraint family that binds, in words and numbers; ``overshoot``, how far past its
    caps the demand takes it (the elastic solve's slacks, each in units of its cap; infinite where
    no unit could serve), so several topologies' reasons can name the nearest."""

    binding: str
    detail: str
    overshoot: float = math.inf


def nearness(why: Infeasibility) -> tuple[bool, bool, float]:
    """How near a topology is to feasible, to compare topologies' reasons (least first): one whose
    roles all have units, missing only its caps, before one with a role no unit fills, whose
    overshoot is its nearest shape's alone and says nothing of the caps it would meet past that
    (an H100 attention-FFN design's FFN unit 1.4% past its pace had been quoted over a
    disaggregated design 72 GPUs short of an inventory of 8, which the FFN design is short of too)."""
    # (a reason of no measure, an elastic model that did not solve or a returning turn no unit
    # reloads in time, after both: it had come before a role's shape 1.4% past its limit)
    missing = why.binding.startswith("no ") and why.binding.endswith(" unit")
    return (math.isinf(why.overshoot), missing, why.overshoot)


def _cap(value: float, places: int) -> str:
    """A cap as the user set it: ``places`` decimals, or three significant figures where those
    would show none (a 0.001-kW cap had read "the cap is 0.0 kW")."""
    return f"{value:,.{places}f}" if value == 0 or abs(value) >= 10.0 ** (1 - places) else f"{value:.3g}"


def _apart(need: float, cap: float, places: int) -> tuple[str, str]:
    """A need past its cap and the cap, each with ``places`` decimals (the cap as :func:`_cap`
    shows it), or as many more as make them differ: 15.96 kW had read "needs 16.0 kW but the cap
    is 16.0 kW"."""
    shown = (f"{need:,.{places}f}", _cap(cap, places))
    for more in range(places + 1, places + 7):
        if shown[0] != shown[1]:
            break
        shown = (f"{need:,.{more}f}", f"{cap:,.{more}f}")
    return shown


def explain(c: Candidates, solver: PlacementSolver) -> Infeasibility:
    """What keeps ``c`` from a feasible placement: a role no candidate unit fills, a returning turn
    no unit can serve in time, or else what the elastic solve had to give."""
    data = c.data
    missing = _missing_role(c)
    if missing is not None:
        return missing
    if data.n_classes and not np.isfinite(data.mid_s).any():
        why = _nearest([e for e in c.exclusions if e.role == "returning"])  # with each shape's figures
        shown = "; ".join(f"{e.hardware} {e.parallel}: {e.reason}" for e in _distinct(why)[:3])
        return Infeasibility(
            "returning-turn TTFT",
            "no unit can reload or recompute a returning turn's "
            f"{data.class_gb.max():.2f} GB of KV within the TTFT target" + (f": {shown}" if shown else ""),
        )
    sizes = _elastic_sizes(data)
    # the demand held whole first: what the caps must give to serve it. Weighed against them, a
    # demand of 2,000 requests/s had given way wholly against a budget 2,750 times short, and the
    # answer read "only 0 of 2000 requests/s can be served" (or "costs $10.40/h": one node)
    el = solver.elastic(data, {k: v for k, v in sizes.items() if k not in DEMANDS})
    if not el.result.has_solution:  # no cap keeps it: the demand itself gives, last
        el = solver.elastic(data, sizes)
    if not el.result.has_solution:
        return Infeasibility("unknown", f"the elastic model did not solve ({el.result.termination.value})")
    sol = el.result.solution
    assert sol is not None
    texts = _slack_texts(data, sol, el.slacks)
    if not texts:
        return Infeasibility(
            "unknown", "the elastic model needed no slack; the instance may be numerically hard"
        )
    # in units of each cap, as the names of the topologies' reasons are compared: summed in their
    # own units (W, $/h, GPUs), a power cap 60% short had weighed 6,000 beside a budget 60% short's 0.6
    over = float(sum(v / sizes[k] for k, v in el.slacks.items() if v > 1e-6))
    return Infeasibility(" and ".join(t[0] for t in texts), "; ".join(t[1] for t in texts), over)


PIPELINED = (Role.PREFILL, Role.MIDFILL)  # the roles whose shapes may have pipeline stages


def _pipelined(e: Exclusion) -> bool:
    """Whether the excluded shape has pipeline stages (``any shape`` has none)."""
    return e.parallel != "any shape" and parse_shape(e.parallel).pp > 1


def _missing_role(c: Candidates) -> Infeasibility | None:
    """The first role the topology needs that no candidate unit fills, with up to three reasons
    its shapes were excluded (the role's own first); a role no shape at all can fill (a model
    without routed experts has no FFN units) before the roles left empty with it."""
    roles = set(Role(int(r)) for r in c.data.unit_role)
    missing = [role for role in REQUIRED_ROLES[c.topology] if role not in roles]
    whole = {e.role for e in c.exclusions if e.parallel == "any shape"}  # (sorted: the rest in order)
    for role in sorted(missing, key=lambda r: r.name.lower() not in whole):
        own = _nearest([e for e in c.exclusions if e.role == role.name.lower()])
        # the role's own first; then the shapes no role runs, but not pipelined ones where the role
        # does not pipeline (a decode unit had been told of 16gpu-pp2-tp8-ep8's weights)
        shared = [e for e in c.exclusions if e.role == "all" and (role in PIPELINED or not _pipelined(e))]
        reasons = own + _nearest(shared)
        shown = "; ".join(f"{e.hardware} {e.parallel}: {e.reason}" for e in _distinct(reasons)[:3])
        # how far its nearest shape misses, as a slack in units of its limit (a TPOT 1.5 times the
        # target: 0.5), so that the topology nearest to feasible is the one quoted: every such
        # answer had been infinitely far, and the first topology's was quoted, whatever it missed by.
        # A role no shape can fill (no routed experts to split off) is as far as ever
        # measured on the role's own shapes where it has any: a shape no role runs (weights over
        # the HBM) is as near for every topology, and had tied them all, the first one quoted
        whole_role = any(e.parallel == "any shape" for e in reasons)
        nearest = math.inf if whole_role else min((e.over for e in (own or reasons)), default=math.inf)
        return Infeasibility(
            f"no {role.name.lower()} unit", shown or "no candidate shapes", max(nearest - 1.0, 0.0)
        )
    return None


def _elastic_sizes(data: PlacementData) -> dict[str, float]:
    """What each elastic family's slack is measured against: the cap (1 for a cap that is not set,
    whose slack stays closed; :data:`ZERO_CAP_SIZE` for a cap of zero)."""
    inventory = np.where(np.isfinite(data.inventory_gpus), data.inventory_gpus, 0.0)
    set_any = bool(np.isfinite(data.inventory_gpus).any())
    # demand gives last: the question is which limit keeps the demand from being served
    return {
        "fresh_demand": DEMAND_PRIORITY * max(data.fresh_per_s, 1e-9),
        "returning_demand": DEMAND_PRIORITY * max(float(data.class_per_s.sum()), 1e-9),
        "inventory": _cap_size(float(inventory.sum()) if set_any else np.inf),
        "power": _cap_size(data.power_w),
        "budget": _cap_size(data.budget_usd_hour),
        "network_capacity": _cap_size(data.network_capacity_gb),
    }


def _cap_size(cap: float) -> float:
    """A cap's slack is measured in units of the cap. A cap of zero has none: measured in single
    GPUs, serving a sliver less than the demand weighed less than a few GPUs more, and the answer
    understated the GPUs needed."""
    if not np.isfinite(cap):
        return 1.0
    return float(cap) if cap > 0 else ZERO_CAP_SIZE


def _slack_texts(data: PlacementData, sol: PlacementSolution, s: dict[str, float]) -> list[tuple[str, str]]:
    """(binding, detail) of each elastic family that had to give, in the numbers of its cap."""
    texts = []
    if s.get("inventory", 0.0) > 1e-6:
        need = sol.sale_units * data.sale_gpus
        capped = np.isfinite(data.inventory_gpus)
        parts = [
            f"{h} {need[i]:.0f} of {data.inventory_gpus[i]:.0f}"
            for i, h in enumerate(data.hw_names)
            if capped[i]
        ]
        # the slack is the sum of the hardware's overshoots (formulations.placement.inv_over)
        more = float(np.maximum(need[capped] - data.inventory_gpus[capped], 0.0).sum())
        texts.append(
            (
                "inventory",
                f"serving the demand needs {more:.0f} GPUs more than the "
                f"inventory holds (GPUs needed of available: {', '.join(parts)})",
            )
        )
    if s.get("power", 0.0) > 1e-6:
        need, cap = _apart((data.power_w + s["power"]) / 1e3, data.power_w / 1e3, 1)
        texts.append(("power", f"serving the demand needs {need} kW but the cap is {cap} kW"))
    if s.get("budget", 0.0) > 1e-6:
        need, cap = _apart(data.budget_usd_hour + s["budget"], data.budget_usd_hour, 2)
        texts.append(("budget", f"serving the demand costs ${need}/h but the budget is ${cap}/h"))
    if s.get("network_capacity", 0.0) > 1e-6:
        gb = data.network_capacity_gb
        need, cap = _apart((gb + s["network_capacity"]) / 1e3, gb / 1e3, 1)
        texts.append(("network KV capacity", f"resting KV needs {need} TB but the store holds {cap} TB"))
    for key, total in (
        ("fresh_demand", data.fresh_per_s),
        ("returning_demand", float(data.class_per_s.sum())),
    ):
        if s.get(key, 0.0) > 1e-6:
            texts.append(
                (
                    key.replace("_", " "),
                    f"only {_served(total - s[key], total)} of {total:.6g} requests/s can be served",
                )
            )
    return texts


def _served(served: float, total: float) -> str:
    """What can be served, with digits enough to tell it from the demand (19.95 of 20, not 20 of 20)."""
    for digits in range(3, 10):
        text = f"{served:.{digits}g}"
        if float(text) != float(f"{total:.{digits}g}"):
            return text
    return f"{served:.10g}"


def _nearest(items: list[Exclusion]) -> list[Exclusion]:
    """``items`` with the shapes nearest to serving first (the least ``over``; in their order
    among equals): the answer quotes what binds the best shape, not the first one listed."""
    return sorted(items, key=lambda e: e.over)


def _distinct(items: list[Exclusion]) -> list[Exclusion]:
    """One reason per shape (an aggregated shape's first prefill share: the others had repeated
    its figures), and a reason word for word the same (``the hidden states' transfers wait 22.13
    ms a step on RDMA, over half of TPOT 5 ms``) once per hardware."""
    seen: set[tuple[str, str, str]] = set()
    out = []
    for e in items:
        keys = {(e.hardware, "shape", e.parallel), (e.hardware, "reason", _unshared(e.reason))}
        if not keys & seen:
            seen |= keys
            out.append(e)
    return out


def _unshared(reason: str) -> str:
    """A reason without the prefill share an aggregated unit's reason opens with."""
    head, sep, rest = reason.partition(": ")
    return rest if sep and head.startswith("at prefill share ") else reason


@dataclass(frozen=True)
class ShadowPrice:
    """What one more unit of a per-GPU resource on one hardware is worth at the optimum."""

    hardware: str
    resource: str  # hbm_bandwidth, hbm_capacity, host_link, nic
    unit: str  # "TB/s", "GB", "GB/s"
    usd_per_hour: float  # saved per hour across the fleet, if every GPU of this hardware had one more
    usd_per_gpu_hour: float  # the same per GPU of this hardware in the design


def _more_bandwidth(hw: Hardware, d: float) -> Hardware:
    """``hw`` with ``d`` TB/s more HBM bandwidth per GPU. Its measured kernel tables (if any) stay
    measured at its own bandwidth and are scaled to the new one, as a what-if variant's are
    (:func:`dse.study.variants.variant_hardware`): read at the new bandwidth as measured, the
    memory-bound ops kept their times and bandwidth was worth nothing under ``--kernels
    measured``."""
    return replace(
        hw,
        hbm=replace(hw.hbm, bandwidth_tb_per_s=hw.hbm.bandwidth_tb_per_s + d),
        measured_hbm_tb_per_s=hw.measured_hbm_tb_per_s or hw.hbm.bandwidth_tb_per_s,
    )


def _more_capacity(hw: Hardware, d: float) -> Hardware:
    """``hw`` with ``d`` GB (10^9 bytes, the unit dse prints) more HBM per GPU. The catalog's
    capacity is the datasheet's figure, read as GiB (:class:`dse.catalog.hardware.Hbm`); adding
    ``d`` to it added GiB, and the price per "GB" was that of 1.074 GB."""
    return replace(hw, hbm=hw.hbm.scaled(plus_gib=d * GB / GIB))


RESOURCES = {
    # name: (unit, step per GPU, apply)
    "hbm_bandwidth": ("TB/s", 0.1, _more_bandwidth),
    "hbm_capacity": ("GB", 4.0, _more_capacity),
    "host_link": (
        "GB/s",
        4.0,
        lambda hw, d: replace(
            hw, host=replace(hw.host, link_gb_per_s_per_dir=hw.host.link_gb_per_s_per_dir + d)
        ),
    ),
    "nic": (
        "GB/s",
        4.0,
        lambda hw, d: replace(
            hw,
            scale_out=replace(
                hw.scale_out, nic_gbit_per_s_per_gpu=hw.scale_out.nic_gbit_per_s_per_gpu + 8.0 * d
            ),
        ),
    ),
}


def shadow_prices(
    req: PlacementRequest,
    c: Candidates,
    chosen: PlacementSolution,
    solver: PlacementSolver,
    catalog: Catalog,
    params: PerfParams,
) -> tuple[ShadowPrice, ...]:
    """Value of one more TB/s of HBM bandwidth, GB of HBM, GB/s of host link and GB/s of NIC
    per GPU, for each hardware the design uses (finite differences of the coefficients, priced
    with the multipliers of the relaxed LP)."""
    # priced in $/hour whatever the placement optimised (GPU counts or goodput have other units)
    data = replace(c.data, objective=Objective.COST)
    if not np.isfinite(data.usd_per_gpu_hour[chosen.sale_units > 0.5]).all():
        # a GPU-count design on hardware the price tier does not price (VR200): no $/hour to save,
        # and the LP's costs are not numbers (every price had come out $0)
        return ()
    lp, duals = solver.relaxed_duals(data, chosen)
    if not lp.has_solution or lp.solution is None:
        return ()
    x = lp.solution
    base = residuals(data, x)
    hws = [catalog.hardware(h) for h in req.hardware]
    out = []
    for h, hw in enumerate(hws):
        if chosen.sale_units[h] < 0.5:
            continue
        # per GPU of the design (the relaxed LP may move this hardware's count, even to 0)
        gpus = float(chosen.sale_units[h] * c.data.sale_gpus[h])
        for name, (unit, step, apply) in RESOURCES.items():
            bumped: list[Hardware] = list(hws)
            bumped[h] = apply(hw, step)
            new = build_candidates(
                req, c.topology, catalog, params, hardware=bumped, afd_pace=c.afd_pace
            ).data
            moved = residuals(_align(replace(new, objective=Objective.COST), data), x)
            d_obj = _moved_objective(duals, moved, base)
            # free disposal: a design may leave more of a resource unused, so it is worth at least
            # nothing; the estimate goes below 0 where the rebuilt units take the resource into a
            # larger batch that costs elsewhere (an aggregated unit's KV against its capacity):
            # 14 of the 325 bandwidth prices of bandwidth-vs-capacity, down to -$0.012 per TB/s-hour
            value = max(-d_obj / step, 0.0)
            noise = 1e-7 * max(abs(lp.objective), 1.0)  # below the solver's tolerances; and no "-0"
            value = 0.0 if value < noise else value
            out.append(ShadowPrice(hw.id, name, unit, value, value / gpus if gpus > 0 else float("nan")))
    return tuple(out)


def _moved_objective(
    duals: dict[str, np.ndarray], moved: dict[str, np.ndarray], base: dict[str, np.ndarray]
) -> float:
    """The first-order change of the LP's objective when its rows move from ``base`` to ``moved``
    (``g <= 0`` each): the duals times the change, over the rows whose residual is a number both
    times. A row that is infinite (a unit that cannot prefill at all has an infinite prefill
    time, its flow held at 0 by its bound) moves by no margin: ``inf - inf`` had made the price
    nan, and numpy warn on stderr (stage-memory-2027, Kimi K3 on GB300 with 4x HBM)."""
    total = 0.0
    for k, b in base.items():
        if k not in duals:
            continue
        with np.errstate(invalid="ignore"):
            diff = np.asarray(moved[k] - b, dtype=float)
        ok = np.isfinite(diff)
        total += float(np.dot(np.asarray(duals[k], dtype=float)[ok], diff[ok]))
    return total


def _align(new: PlacementData, old: PlacementData) -> PlacementData:
    """``new``'s coefficients in ``old``'s unit order (and ``old``'s slot sizing: a goodput
    placement's reach); a unit that left keeps its old values."""
    if new.unit_names == old.unit_names:
        return replace(new, slot_scale=old.slot_scale)
    where = {n: i for i, n in enumerate(new.unit_names)}
    idx = [where.get(n, -1) for n in old.unit_names]

    def pick(a_new: np.ndarray, a_old: np.ndarray) -> np.ndarray:
        out = a_old.copy()
        for i, j in enumerate(idx):
            if j >= 0:
                out[i] = a_new[j]
        return out

    return replace(
        old,
        prefill_share=pick(new.prefill_share, old.prefill_share),
        fresh_s=pick(new.fresh_s, old.fresh_s),
        decode_tok_s=pick(new.decode_tok_s, old.decode_tok_s),
        decode_slots=None
        if old.decode_slots is None or new.decode_slots is None
        else pick(new.decode_slots, old.decode_slots),
        hbm_idle_gb=pick(new.hbm_idle_gb, old.hbm_idle_gb),
        nic_gb_s=pick(new.nic_gb_s, old.nic_gb_s),
        mid_s=pick(new.mid_s, old.mid_s),
        reload_s=pick(new.reload_s, old.reload_s),
        tier_gb_per_gpu=new.tier_gb_per_gpu,
        tier_gb_s_per_gpu=new.tier_gb_s_per_gpu,
    )
