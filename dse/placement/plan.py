"""`place`: the cheapest (or smallest, or highest-goodput) deployment for a traffic and its targets.

Build, solve, read back and report are separate: :func:`build_candidates` turns the request into
MILP data, :class:`~formulations.solve.PlacementSolver` solves it, :func:`read_back` turns the
solution into pools and a KV-tier plan, :mod:`formulations.placement_check` re-checks it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from dse.catalog import Catalog, load_catalog
from dse.context import Context
from dse.errors import InputError, typed_arg
from dse.perf.params import PerfParams, load_params
from dse.placement.candidates import Candidates, Exclusion, UnitInfo, build_candidates
from dse.placement.explain import Infeasibility, ShadowPrice, explain, nearness, shadow_prices
from dse.placement.parallel import parse_shape
from dse.placement.request import PlacementRequest, Topology
from dse.placement.shapes import unrunnable
from dse.units import Precision
from formulations.placement import COST_TIE, TIE_BREAK
from formulations.placement_check import CheckReport, check, cost_usd_hour, objective_value, reload_wait
from formulations.placement_data import LINK_TIERS, TIERS, Objective, PlacementData, PlacementSolution, Role
from formulations.solve import PlacementSolver, SolutionStatus, SolveOptions, SolveResult, Termination


@dataclass(frozen=True)
class PoolPlan:
    """Instances of one unit in the design."""

    unit: UnitInfo
    instances: int
    gpus: int
    hbm_gb_per_gpu: float  # the unit's, plus the KV resting in its HBM between turns
    usd_per_hour: float
    requests_per_s: float  # prefilled or midfilled here (0 for decode-only pools)
    returning_per_s: float  # of which returning turns (midfills and recomputes)
    output_tokens_per_s: float  # decode capacity the pool provides at the TPOT target
    prefill_busy_s: float  # busy seconds of one instance per request it prefills (mean of its mix)
    fresh_busy_s: float  # ... per fresh prompt (nan for decode-only pools)
    midfill_busy_s: float  # ... per returning turn, over the tiers its KV comes from (nan if none)
    reload_s: float  # mean seconds a returning turn's KV takes to come back, of those that rest (nan if none)
    recompute_per_s: float = 0.0  # returning turns whose KV was dropped, prefilled whole again here
    # GB of KV resting between turns in the tiers below HBM that this pool's returning turns reload
    # from, over all its instances (Little's law): "dram" in its hosts' memory, "nvme" on their
    # drives, "network" in the shared store; the tiers it uses only
    resting_gb: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TierPlan:
    """Where one KV class rests between turns."""

    kv_class: str
    returning_per_s: float
    dwell_s: float
    gb_per_session: float
    share: dict[str, float]  # tier -> fraction of the class
    stored_gb: dict[str, float]  # tier -> GB resting there (Little's law)
    reload_gb_s: dict[str, float]  # tier -> GB/s brought back


@dataclass(frozen=True)
class IdleGpus:
    """GPUs of a hardware's nodes or racks bought that no pool runs on: a design buys whole sale
    units (an 8-GPU node, a 72-GPU rack), so a pool of 4 GPUs leaves 4 of its node idle, paid for
    in the design's $/hour and in none of its pools'."""

    hardware: str
    gpus: int
    usd_per_hour: float
    sale_unit_gpus: int  # GPUs the hardware is bought in at once: 8 (a node), 72 (a rack)


@dataclass(frozen=True)
class TopologyOutcome:
    topology: Topology
    result: SolveResult
    candidates: int
    exclusions: tuple[Exclusion, ...]
    check: CheckReport | None
    pools: tuple[PoolPlan, ...]
    tiers: tuple[TierPlan, ...]
    usd_per_hour: float
    gpus: int
    requests_per_s: float
    tokens_per_s: float  # input + output tokens served per second
    usd_per_million_tokens: float
    infeasibility: Infeasibility | None
    idle: tuple[IdleGpus, ...] = ()  # GPUs bought that no pool runs on, per hardware

    @property
    def feasible(self) -> bool:
        return self.result.has_solution and self.infeasibility is None

    @property
    def storage_usd_per_hour(self) -> float:
        """$/hour of the host DRAM, NVMe and network store the resting KV fills where they are
        priced: what the design costs beyond its pools and idle GPUs (nan where the catalog lacks a
        price; 0 for round-off)."""
        rows = sum(p.usd_per_hour for p in self.pools) + sum(i.usd_per_hour for i in self.idle)
        rest = self.usd_per_hour - rows
        if not math.isfinite(rest):
            return math.nan
        return rest if rest > 1e-9 * max(abs(self.usd_per_hour), 1.0) else 0.0


@dataclass(frozen=True)
class PlacementReport:
    request: PlacementRequest
    outcomes: tuple[TopologyOutcome, ...]
    best: TopologyOutcome | None
    shadow_prices: tuple[ShadowPrice, ...]
    # why there are none where they were asked for (the best design is not the one they priced)
    shadow_prices_note: str | None = None

    def ranked(self) -> list[TopologyOutcome]:
        """The feasible outcomes, best first by the MILP objective."""
        return sorted((o for o in self.outcomes if o.feasible), key=lambda o: o.result.objective)

    def why_none(self) -> Infeasibility | None:
        """Why there is no design: the reason of the topology nearest to feasible (the least past
        its limits; the first among equals), what `dse place` and `dse simulate` both quote. None
        where there is a best design, or no topology said why."""
        if self.best is not None:
            return None
        whys = [o.infeasibility for o in self.outcomes if o.infeasibility is not None]
        return min(whys, key=nearness, default=None)


def place(
    req: PlacementRequest,
    *,
    catalog: Catalog | None = None,
    params: PerfParams | None = None,
    solver: PlacementSolver | None = None,
    with_shadow_prices: bool = True,
) -> PlacementReport:
    """Solve the request for each of its topologies and keep the best by the objective.

    Parameters
    ----------
    req
        What is asked: model, hardware, traffic, targets, topology, objective, caps.
    catalog, params, solver
        The hardware and model catalog (default: the shipped one and ``DSE_CATALOG_DIR``'s), the
        performance model's calibration and the MILP solver (default: the request's time limit
        and gap).
    with_shadow_prices
        Whether to price bandwidth and capacity at the best design.

    Returns
    -------
    PlacementReport
        An outcome per topology; ``best`` is None when none is feasible, each outcome's
        ``infeasibility`` then naming its binding constraint. Arguments of the wrong type are
        bad input (:class:`~dse.errors.InputError`) naming the argument.
    """
    typed_arg(req, PlacementRequest, "req", optional=False)
    typed_arg(catalog, Catalog, "catalog")
    typed_arg(params, PerfParams, "params")
    typed_arg(solver, PlacementSolver, "solver")
    typed_arg(with_shadow_prices, bool, "with_shadow_prices", optional=False)
    ctx = Context(
        catalog if catalog is not None else load_catalog(),
        params if params is not None else load_params(),
        solver
        if solver is not None
        else PlacementSolver(SolveOptions(time_limit_s=req.time_limit_s, mip_rel_gap=req.mip_rel_gap)),
    )
    req = _as_dse_place_takes_it(_by_catalog_id(req, ctx.catalog), ctx.catalog)
    return place_best(req, req.topology.concrete(), ctx, with_shadow_prices=with_shadow_prices)


def _as_dse_place_takes_it(req: PlacementRequest, catalog: Catalog) -> PlacementRequest:
    """``req`` with its model by id (an alias had stayed in the report's request, where hardware
    aliases are resolved), and refused where ``dse place`` refuses its flags, each as one line
    naming the field (a Python request had been priced, or ended in a traceback): an engine that
    does not run on the hardware (the default TensorRT-LLM profile on an MI355X had priced a design
    a third cheaper than SGLang's, which no engine runs), fp4 of a model without routed experts, a
    topology that splits the experts from attention on a model without them, a shape no candidate
    hardware can run."""
    from dse.perf.frameworks import default_engine, engine_vendor_problem

    model = catalog.model(req.model)
    vendors = {h: catalog.hardware(h).vendor for h in req.hardware}
    req = replace(req, model=model.id, engine=req.engine or default_engine(set(vendors.values())))
    if (why := engine_vendor_problem(req.engine, vendors)) is not None:
        raise InputError("placement request", "engine", f"cannot price this hardware: {why}", req.engine)
    if req.weight_precision is Precision.FP4 and (why := model.fp4_problem()) is not None:
        raise InputError("placement request", "weight_precision", why, "fp4")
    if req.topology.splits_experts and model.moe is None:  # (it had answered "no ffn unit")
        rule = f"needs a model with routed experts to split from attention ({model.id} has none)"
        raise InputError("placement request", "topology", rule, req.topology.value)
    hws = [catalog.hardware(h) for h in req.hardware]
    for name in ("prefill_shapes", "decode_shapes", "midfill_shapes"):
        for label in getattr(req.options, name) or ():
            if (why := unrunnable(parse_shape(label), hws, model)) is not None:
                rule = f"no candidate hardware can run it: {why}"
                raise InputError("placement request", f"options.{name}", rule, label)
    return req


def _by_catalog_id(req: PlacementRequest, catalog: Catalog) -> PlacementRequest:
    """``req`` with its candidate hardware, and the hardware its inventory and its roles name, by
    catalog id (``h200`` is ``h200-sxm``), the candidates each once, the others each among them:
    an inventory of
    ``h200`` had been refused beside ``hardware=("h200",)``, which ``--inventory h200=64`` is not,
    and a role's hardware outside the candidates had answered "no candidate shapes"."""
    ids = [catalog.hardware(h).id for h in req.hardware]

    def among(names: Iterable[str], key: str) -> list[str]:
        out = []
        for name in names:
            try:
                hw = catalog.hardware(name).id
            except InputError:
                hw = name
            if hw not in ids:
                rule = f"names hardware that is not a candidate; candidates: {', '.join(ids)}"
                raise InputError("placement request", key, rule, name)
            out.append(hw)
        return out

    inventory = req.limits.inventory_gpus
    keys = among(inventory, "limits.inventory_gpus")
    if len(set(keys)) < len(keys):
        raise InputError("placement request", "limits.inventory_gpus", "names one hardware twice", inventory)
    o = req.options

    def role(names: tuple[str, ...] | None, name: str) -> tuple[str, ...] | None:
        return None if names is None else tuple(among(names, f"options.{name}"))

    options = replace(
        o,
        prefill_hardware=role(o.prefill_hardware, "prefill_hardware"),
        decode_hardware=role(o.decode_hardware, "decode_hardware"),
        midfill_hardware=role(o.midfill_hardware, "midfill_hardware"),
    )
    limits = replace(req.limits, inventory_gpus=dict(zip(keys, inventory.values(), strict=True)))
    # one candidate per hardware however it is named (h200 and h200-sxm had been two, each with the
    # inventory's cap: 40 GPUs bought against an inventory of 24)
    return replace(req, hardware=tuple(dict.fromkeys(ids)), limits=limits, options=options)


def place_best(
    req: PlacementRequest, topologies: Iterable[Topology], ctx: Context, *, with_shadow_prices: bool = True
) -> PlacementReport:
    """Solve ``req`` for each topology, keep the best feasible outcome by the MILP objective, and
    price bandwidth and capacity at it (shadow prices). The one place that does this: ``dse
    place``, a grid point and a search's warm start all call it."""
    outcomes = []
    built: dict[Topology, Candidates] = {}
    for topo in topologies:
        outcome, built[topo] = _solve_topology(req, topo, ctx)
        outcomes.append(outcome)
    feasible = [o for o in outcomes if o.feasible]
    best = min(feasible, key=lambda o: o.result.objective) if feasible else None
    prices: tuple[ShadowPrice, ...] = ()
    if best is not None and with_shadow_prices and best.result.solution is not None:
        sol = best.result.solution
        prices = shadow_prices(req, built[best.topology], sol, ctx.solver, ctx.catalog, ctx.params)
    return PlacementReport(req, tuple(outcomes), best, prices)


def _solve_topology(
    req: PlacementRequest, topo: Topology, ctx: Context
) -> tuple[TopologyOutcome, Candidates]:
    """One topology's outcome and the candidates it was solved on. An attention-FFN design is
    also solved at each tighter pace its target's build found (its decode units all at that
    pace: the two halves step in lockstep) and the best feasible one kept, the target's on a
    tie: an attention shape whose batch HBM holds steps faster than a loose target, which
    credits the unit only batch / target (``Candidates.tighter_afd_paces``). A pace's MILP is
    cut off at the best objective so far (a cost or GPU objective; goodput settles its own
    rows), and a pace with nothing better is dropped unexplained."""
    goodput = req.objective is Objective.GOODPUT
    cands = build_candidates(req, topo, ctx.catalog, ctx.params)
    settled = None
    if goodput:
        cands, settled = settled_reach(cands, ctx.solver)
    best = (solve_candidates(req, cands, ctx.solver, settled), cands)
    limits = (Termination.TIME_LIMIT, Termination.WORK_LIMIT)
    # a pace's solve its limit stopped before it proved its answer (the target's first)
    stopped = best[0].result.termination if best[0].result.termination in limits else None
    for pace in cands.tighter_afd_paces:
        c = build_candidates(req, topo, ctx.catalog, ctx.params, afd_pace=pace)
        beat = best[0].result.objective if best[0].feasible else math.inf
        if goodput:
            c, solved = settled_reach(c, ctx.solver)
        else:
            solved = ctx.solver.solve(c.data, beat=beat)
        if solved is not None and solved.termination in limits:
            stopped = solved.termination
        if solved is None or solved.solution is None or solved.solution.scale <= 0.0:
            continue  # nothing placed (a goodput of nothing is no design)
        if not solved.objective < beat:
            continue  # no better than the best pace so far: not explained, not checked
        outcome = solve_candidates(req, c, ctx.solver, solved)
        if _better(outcome, best[0]):
            best = (outcome, c)
    if stopped is not None and best[0].result.termination is Termination.OPTIMAL:
        # the topology's answer is proven no more where a pace's solve stopped at its limit: a
        # tighter pace's "optimal" and gap 0 had been reported beside a target's solve the limit
        # stopped at $170.40 (a $159.12 design at a 0.05 s limit, where 0.2 s found $157.92)
        result = replace(best[0].result, termination=stopped, bound=math.nan, gap=math.nan)
        best = (replace(best[0], result=result), best[1])
    return best


def _better(a: TopologyOutcome, b: TopologyOutcome) -> bool:
    """Whether ``a`` beats ``b``: feasible where ``b`` is not, or a lower objective by more than
    the solver's tolerance."""
    if not a.feasible:
        return False
    if not b.feasible:
        return True
    return a.result.objective < b.result.objective - 1e-9 * max(abs(b.result.objective), 1.0)


# a goodput placement's slot rows are sized for the traffic it reaches, found by re-solving at the
# scale the last solve reached: each round's rows admit no more than the slots carry (any tangent
# of their convex carrying curve lies below it), so every round's design holds, and the rounds
# stop once the reach moves by less than SETTLED
SETTLE_ROUNDS, SETTLED = 8, 0.01


def settled_reach(c: Candidates, solver: PlacementSolver) -> tuple[Candidates, SolveResult | None]:
    """``c`` with its slot rows sized for the demand scale a goodput placement of it reaches
    (:data:`SETTLE_ROUNDS`), and the solve of that data (None where the rounds ran out before it
    was solved, or nothing is placed)."""
    data = c.data
    if not data.n_units:
        return c, None
    result = None
    for _ in range(SETTLE_ROUNDS):
        result = solver.solve(data)
        if result.solution is None or result.solution.scale <= 0.0:
            break
        reach = float(result.solution.scale)
        if abs(reach - data.slot_scale) <= SETTLED * reach:
            break
        data, result = replace(data, slot_scale=reach), None
    return replace(c, data=data), _cheapest_at_reach(data, result, solver)


# the share of its reach a goodput design's cost stage may give up: within the solvers' tolerance
REACH_GIVE = 1e-7


def _cheapest_at_reach(
    data: PlacementData, result: SolveResult | None, solver: PlacementSolver
) -> SolveResult | None:
    """The cheapest design that serves what the goodput solve ``result`` reached (less
    :data:`REACH_GIVE`), where it is cheaper than the solve's own: goodput weighs cost only as a
    tie-break (:data:`~formulations.placement.COST_TIE`), far inside the MILP's gap and below the
    noise of the settled reach, so the same traffic had come at $147.36 an hour at ``--rate 1``
    and $140.40 at ``--rate 10``. Solved as the cost objective at the demand scaled to the reach
    (the rates enter the MILP only as scale x rate, and the slot rows as rate x slot scale); the
    answer is read back at ``data``'s rates, with the goodput MILP's objective of that design."""
    sol = None if result is None else result.solution
    if result is None or sol is None or sol.scale <= 0.0:
        return result
    reach = float(sol.scale) * (1.0 - REACH_GIVE)
    at = replace(
        data,
        objective=Objective.COST,
        fresh_per_s=data.fresh_per_s * reach,
        class_per_s=data.class_per_s * reach,
        slot_scale=data.slot_scale / reach,
    )
    cheap = solver.solve(at)
    if cheap.solution is None or cheap.termination is not Termination.OPTIMAL:
        return result
    new = replace(cheap.solution, scale=reach)
    if not objective_value(at, new) < objective_value(at, sol) * (1.0 - 1e-9):
        return result
    # the goodput MILP's objective of the design, its reach within REACH_GIVE counted as the
    # solve's: weighed as given up, the cheaper design had compared worse at --rate 1 and better
    # at 10 (the give is a share of the scale, which the rate sets)
    objective = COST_TIE * objective_value(at, new) + TIE_BREAK * reload_wait(at, new) - float(sol.scale)
    return replace(result, objective=objective, solve_s=result.solve_s + cheap.solve_s, solution=new)


def solve_candidates(
    req: PlacementRequest, c: Candidates, solver: PlacementSolver, solved: SolveResult | None = None
) -> TopologyOutcome:
    """Solve one topology's units (``solved``: its solve, already run); explain it when nothing
    is feasible."""
    data = c.data
    result = solved if solved is not None else solver.solve(data) if data.n_units else _empty_result()
    sol = result.solution
    served_none = _serves_nothing(c, sol, solver)
    if sol is None or served_none is not None:
        return TopologyOutcome(
            c.topology,
            result,
            data.n_units,
            c.exclusions,
            None,
            (),
            (),
            np.nan,
            0,
            0.0,
            0.0,
            np.nan,
            served_none or _unsolved(result, solver) or _no_instance(c) or explain(c, solver),
        )
    pools, tiers = read_back(c, sol)
    req_s = sol.scale * data.total_per_s
    w = req.workload
    tokens = req_s * (w.mean_prompt_tokens() + w.output_tokens)
    cost = cost_usd_hour(data, sol)
    return TopologyOutcome(
        topology=c.topology,
        result=result,
        candidates=data.n_units,
        exclusions=c.exclusions,
        check=check(data, sol),
        pools=pools,
        tiers=tiers,
        usd_per_hour=cost,
        gpus=int(round(float((sol.sale_units * data.sale_gpus).sum()))),
        requests_per_s=req_s,
        tokens_per_s=tokens,
        usd_per_million_tokens=cost / (3600.0 * tokens) * 1e6 if tokens > 0 else np.nan,
        infeasibility=None,
        idle=idle_gpus(data, sol, pools),
    )


def idle_gpus(
    data: PlacementData, sol: PlacementSolution, pools: tuple[PoolPlan, ...]
) -> tuple[IdleGpus, ...]:
    """Per hardware, the GPUs of the nodes or racks bought that its pools leave idle, at that
    hardware's price (the pools' $/hour and these add up to the GPUs' part of the design's)."""
    out = []
    for h, name in enumerate(data.hw_names):
        bought = int(round(float(sol.sale_units[h] * data.sale_gpus[h])))
        idle = bought - sum(p.gpus for p in pools if p.unit.hardware == name)
        if idle > 0:
            sale = int(data.sale_gpus[h])
            out.append(IdleGpus(name, idle, idle * float(data.usd_per_gpu_hour[h]), sale))
    return tuple(out)


def _serves_nothing(
    c: Candidates, sol: PlacementSolution | None, solver: PlacementSolver
) -> Infeasibility | None:
    """The goodput objective's answer when its optimum serves no traffic: a design of nothing is
    no design (None: the solution serves some, or there is none). A budget or an inventory binds
    when it holds no instance (:func:`_no_instance`); when it does, something else keeps every
    design at zero traffic (a role no unit fills, a latency target), and :func:`explain` says what."""
    data = c.data
    if sol is None or data.objective is not Objective.GOODPUT or sol.scale * data.total_per_s > 1e-9:
        return None
    return _no_instance(c) or explain(c, solver)


def _no_instance(c: Candidates) -> Infeasibility | None:
    """Under the goodput objective, a budget or an inventory that holds no instance of any unit,
    bought in whole nodes or racks: the answer is no instance, whatever the traffic (None: another
    objective, or one fits). :func:`explain` answers at ``--rate``'s traffic, which goodput reads
    for its mix alone: 4 H200 at ``--rate 20`` had read "serving the demand needs 36 GPUs more than
    the inventory holds", the 8 GPUs a single instance takes unsaid."""
    data = c.data
    if data.objective is not Objective.GOODPUT or not data.n_units:
        return None
    gpus = np.ceil(data.unit_gpus / data.sale_gpus[data.unit_hw]) * data.sale_gpus[data.unit_hw]
    cheapest = float(np.nanmin(gpus * data.usd_per_gpu_hour[data.unit_hw]))  # the least an instance costs
    if cheapest > data.budget_usd_hour:
        return Infeasibility(
            "budget",
            f"${data.budget_usd_hour:,.2f}/h buys no instance that serves traffic "
            f"(the cheapest instance costs ${cheapest:,.2f}/h)",
            cheapest / data.budget_usd_hour - 1.0 if data.budget_usd_hour > 0 else math.inf,  # as a slack
        )
    held = data.inventory_gpus[data.unit_hw]
    if not (gpus > held).all():
        return None
    k = int(np.argmin(gpus - held))  # the instance nearest to fitting its hardware's inventory
    h = int(data.unit_hw[k])
    have = ", ".join(
        f"{name} {n:.0f}"
        for name, n in zip(data.hw_names, data.inventory_gpus, strict=True)
        if np.isfinite(n)
    )
    return Infeasibility(
        "inventory",
        f"the inventory ({have} GPUs) holds no instance that serves traffic (the smallest takes "
        f"{gpus[k]:.0f} {data.hw_names[h]} GPUs: {c.units[k].parallel.label()}, bought "
        f"{data.sale_gpus[h]:.0f} at a time)",
        float(gpus[k] / held[k]) - 1.0 if held[k] > 0 else math.inf,  # as a slack
    )


def _unsolved(result: SolveResult, solver: PlacementSolver) -> Infeasibility | None:
    """A solve the time (or node) limit stopped before any design: no constraint is known to bind,
    and more time may find one (None: the solver finished, and nothing is feasible)."""
    if result.termination not in (Termination.TIME_LIMIT, Termination.WORK_LIMIT):
        return None
    seconds = solver.options.time_limit_s
    timed = result.termination is Termination.TIME_LIMIT and seconds is not None
    limit = f"its {seconds:g} s limit" if timed else "its limit"
    return Infeasibility(
        "solver limit",
        f"the solver stopped at {limit} before it found any design, which does not show that none "
        "exists: give it more time (dse place --time-limit)",
    )


def _empty_result() -> SolveResult:
    """No unit survived the candidate filters: nothing to solve."""
    return SolveResult(Termination.INFEASIBLE, SolutionStatus.NONE, np.nan, np.nan, np.nan, 0.0, 0.0, None)


RETURNING_NOISE = 1e-9
"""A unit's returning turns of a class in a tier below this share of the class's are the solver's
round-off, read as none: HiGHS leaves 1e-16 to 1e-11 of a class in a tier where it rests wholly in
another, which the tier plan had shown as a reload bandwidth (2.297e-15 GB/s)."""


def without_noise(returning: np.ndarray) -> np.ndarray:
    """``returning`` (unit x class x tier, turns/s) with the solver's round-off set to 0
    (:data:`RETURNING_NOISE`)."""
    per_class = returning.sum(axis=(0, 2), keepdims=True)
    return np.where(returning > RETURNING_NOISE * per_class, returning, 0.0)


def read_back(c: Candidates, sol: PlacementSolution) -> tuple[tuple[PoolPlan, ...], tuple[TierPlan, ...]]:
    """Pools with at least one instance (a unit that takes requests, sent some), and the tier
    plan per KV class (the solver's round-off left out: :func:`without_noise`)."""
    d = c.data
    pools = []
    ret = without_noise(sol.returning)
    served = sol.fresh + ret.sum(axis=(1, 2))
    fresh_busy = np.multiply(sol.fresh, d.fresh_s, out=np.zeros_like(sol.fresh), where=sol.fresh > 0)
    mid_busy = np.multiply(ret, d.mid_s, out=np.zeros_like(ret), where=ret > 0).sum(axis=(1, 2))
    t_hbm, t_drop = TIERS.index("hbm"), TIERS.index("drop")
    # a dropped KV comes back from nowhere: its turn is prefilled whole (the MILP's reload
    # seconds for it are its recompute's time beyond a midfill, a forward, not a transfer)
    kept = ret.copy()
    kept[:, :, t_drop] = 0.0
    reload = (kept * d.reload_s).sum(axis=(1, 2))
    ret_total, kept_total = ret.sum(axis=(1, 2)), kept.sum(axis=(1, 2))
    resting_hbm = ret[:, :, t_hbm] @ (d.class_dwell_s * d.class_gb) if d.n_classes else np.zeros(d.n_units)
    # (U, T) GB each unit rests in each tier
    resting = np.einsum("uct,c->ut", ret, d.class_dwell_s * d.class_gb)
    busy = fresh_busy + mid_busy
    # a unit that takes requests and is sent none runs no pool: its GPUs are idle (a rack bought
    # whole had shown a 4-GPU prefill instance of no traffic beside the one that carried it all)
    takes = np.isin(d.unit_role, [int(Role.PREFILL), int(Role.MIDFILL), int(Role.MIXED)])
    unsent = takes & (served <= RETURNING_NOISE * max(float(served.sum()), 1e-12))
    for u in np.flatnonzero((sol.instances > 0.5) & ~unsent):
        k = int(round(sol.instances[u]))
        g = int(k * d.unit_gpus[u])
        pools.append(
            PoolPlan(
                unit=c.units[u],
                instances=k,
                gpus=g,
                hbm_gb_per_gpu=c.units[u].hbm_gb_per_gpu + float(resting_hbm[u]) / (k * c.units[u].kv_shard),
                usd_per_hour=g * float(d.usd_per_gpu_hour[d.unit_hw[u]]),
                requests_per_s=float(served[u]),
                returning_per_s=float(ret_total[u]),
                output_tokens_per_s=float(k * d.decode_tok_s[u]),
                prefill_busy_s=float(busy[u] / served[u]) if served[u] > 0 else float("nan"),
                fresh_busy_s=float(d.fresh_s[u]) if np.isfinite(d.fresh_s[u]) else float("nan"),
                midfill_busy_s=float(mid_busy[u] / ret_total[u]) if ret_total[u] > 0 else float("nan"),
                reload_s=float(reload[u] / kept_total[u]) if kept_total[u] > 0 else float("nan"),
                recompute_per_s=float(ret[u, :, t_drop].sum()),
                resting_gb={
                    t: float(resting[u, i])
                    for i, t in enumerate(TIERS)
                    if t in LINK_TIERS and resting[u, i] > 0
                },
            )
        )
    tiers = []
    for ci, name in enumerate(d.class_names):
        per_tier = ret[:, ci, :].sum(axis=0)
        total = max(float(per_tier.sum()), 1e-12)
        tiers.append(
            TierPlan(
                kv_class=name,
                returning_per_s=float(d.class_per_s[ci] * sol.scale),
                dwell_s=float(d.class_dwell_s[ci]),
                gb_per_session=float(d.class_gb[ci]),
                share={t: float(per_tier[i] / total) for i, t in enumerate(TIERS)},
                stored_gb={
                    t: float(per_tier[i] * d.class_dwell_s[ci] * d.class_gb[ci])
                    for i, t in enumerate(TIERS)
                    if t != "drop"
                },
                reload_gb_s={
                    t: float(per_tier[i] * d.class_gb[ci])
                    for i, t in enumerate(TIERS)
                    if t not in ("hbm", "drop")
                },
            )
        )
    order = {Role.PREFILL: 0, Role.MIDFILL: 1, Role.MIXED: 2, Role.DECODE: 3, Role.ATTENTION: 4, Role.FFN: 5}
    pools.sort(key=lambda p: (order[p.unit.role], p.unit.hardware))
    return tuple(pools), tuple(tiers)


__all__ = [
    "IdleGpus",
    "Objective",
    "PlacementReport",
    "PoolPlan",
    "TierPlan",
    "TopologyOutcome",
    "place",
    "place_best",
    "read_back",
]
