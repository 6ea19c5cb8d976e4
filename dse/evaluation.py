"""What a design is worth: the spine from a placement request to the figures a study records.

:func:`evaluate` places a request (:func:`dse.placement.plan.place_best`), and :func:`check` takes
a placed outcome from there: the simulator's typed design (:func:`design_of`), its pipeline, the
fluid simulation in a scenario, and the :class:`Evaluation`: the request, the outcome, the
metrics (keys of :data:`dse.metrics.METRICS`), the constraints (``<= 0`` feasible, keys of
:data:`dse.metrics.CONSTRAINTS`), the binding one, and each pool's step split into GEMMs,
attention, communication and overhead. Typed objects only: nothing here is turned into a dict and
parsed back. A study trial is one call of :func:`evaluate` or :func:`check`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import numpy as np

from dse.context import Context
from dse.design_power import power_metrics, stage_split
from dse.placement.candidates import SLOT_ROLES
from dse.placement.plan import PlacementReport, PoolPlan, TopologyOutcome, place_best
from dse.placement.request import PlacementRequest, Topology
from dse.sim.from_placement import SimDesign, SimPool, at_rate, pipeline_of, stage_replicas
from dse.sim.kv_tiers import RestingClass
from dse.sim.scenario import Scenario
from dse.sim.simulation import SimulationReport, simulate
from formulations.placement_data import Objective

INFEASIBLE = 1.0
"""The ``placement`` constraint of a request the MILP could not place."""


@dataclass(frozen=True)
class Evaluation:
    request: PlacementRequest
    outcome: TopologyOutcome
    design: SimDesign | None  # None: nothing was placed
    simulation: SimulationReport | None
    metrics: dict[str, float | None]
    constraints: dict[str, float]  # <= 0 feasible
    binding: str  # the constraint that fails most, with its reason, or ""
    stage_ms: dict[str, dict[str, float]]  # pool label -> stage -> ms of one step
    scenario: Scenario | None = None  # what the design was simulated in (None: nothing placed)
    dt_s: float = 1.0
    buffer_max: float = np.inf
    resolves: int = 0  # times its topology was solved again before this design (:func:`held`)
    topology_rank: int = 0  # its topology's place in the MILP's ranking (:func:`held`; 0: the cheapest)

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.constraints.values())


def evaluate(
    req: PlacementRequest,
    topologies: Iterable[Topology],
    scenario: Scenario,
    ctx: Context,
    *,
    dt_s: float,
    max_gpus: float | None = None,
) -> Evaluation:
    """Place ``req`` over ``topologies`` (the best by the MILP objective; when none is feasible, the
    first one's explanation) and :func:`check` the result: a search trial. A design the
    simulations reject is the trial's answer, not solved again as :func:`held` does for a grid
    point and ``dse place --confirm``: the sampler learns from it, and re-solving is rarely worth
    it there (2026-12-05: 2 of the headline study's 500 trials rejected so; in kimi-k3-blackwell
    34 of 600, of which re-solving held 4, for 150 more solves and simulations)."""
    placed = place_best(req, topologies, ctx, with_shadow_prices=False)
    outcome = placed.best if placed.best is not None else placed.outcomes[0]
    return check(req, outcome, scenario, ctx, dt_s=dt_s, max_gpus=max_gpus)


RETARGET_ROUNDS = 3
"""How many times a topology is re-solved with tightened targets after the simulation rejects
its design (:func:`held`)."""


def retargeted(
    req: PlacementRequest, solved: PlacementRequest, ev: Evaluation, step: float = 1.0
) -> PlacementRequest | None:
    """The request to re-solve a rejected design's topology with: ``solved`` (the request the MILP
    sized it for) with the target the simulation found it missing tightened by the ratio it missed
    by (a TPOT 30% over its target asks the MILP for 1/1.3 of the target it was given; a TTFT:
    :func:`tighter_ttft`, from the TTFT the MILP priced the design at), or, where
    the backlog grows, its pools sized for the traffic they fell short of (``req``'s rate over the
    rate the design held, 2% more). None where the miss is not a target the MILP prices (the
    placement itself, a GPU cap) or the objective is goodput (it sizes its own traffic)."""
    if req.objective is Objective.GOODPUT or not ev.binding or ev.outcome.infeasibility is not None:
        return None
    name, m, slo = ev.binding.split(":")[0], ev.metrics, solved.slo
    ttft, tpot = m.get("ttft_pct_s"), m.get("tpot_s")
    if name == "ttft_s" and ttft:
        return tighter_ttft(req, solved, ev.outcome, float(ttft), step)
    if name == "tpot_s" and tpot:
        return replace(solved, slo=replace(slo, tpot_s=slo.tpot_s * req.slo.tpot_s / float(tpot)))
    if name == "stability":
        served = ev.scenario.arrivals.mean_rate(ev.scenario.horizon_s) if ev.scenario else 0.0
        held_rate = served - ev.constraints["stability"]
        if held_rate <= 0.0:
            return None
        w = solved.workload
        return replace(
            solved, workload=replace(w, requests_per_s=w.requests_per_s * 1.02 * served / held_rate)
        )
    return None


def tighter_ttft(
    req: PlacementRequest,
    solved: PlacementRequest,
    outcome: TopologyOutcome,
    missed_s: float,
    step: float = 1.0,
) -> PlacementRequest:
    """``solved`` with the TTFT target its design (``outcome``) should have had: the TTFT the
    MILP's surrogate gave that design (its slowest prefill pool's, at most the target it was
    solved for) times the ratio of ``req``'s target to the ``missed_s`` simulated, to the power
    ``step`` (1: the whole ratio; less: part of the way, in log terms). A design priced at 0.25 s
    that simulates at 0.30 s against 0.3 s is solved again for 0.249 s; the target alone (0.299
    s) would leave the MILP the same design."""
    own = [float(p.unit.ttft_s) for p in outcome.pools if p.unit.ttft_s is not None and p.unit.ttft_s > 0]
    base = min([solved.slo.ttft_s, max(own)]) if own else solved.slo.ttft_s
    return replace(solved, slo=replace(solved.slo, ttft_s=base * (req.slo.ttft_s / missed_s) ** step))


def ttft_steps(rounds: int) -> Callable[[], float]:
    """How far each re-solve for a missed TTFT goes, in log terms, one call a round: a third of
    the way, then half of what is left, then all of it (:func:`_tighter_engine` says why)."""
    left = iter(range(rounds, 0, -1))
    return lambda: 1.0 / next(left, 1)


C = TypeVar("C")


@dataclass(frozen=True)
class Resolved(Generic[C]):
    """One topology's checks under :func:`resolved`: the MILP's first design's, the last design's
    (the first that passed, or the last tried), the request that design was solved for, and how
    many times the topology was solved again to reach it."""

    first: C
    last: C
    sized: PlacementRequest
    rounds: int


def resolved(
    req: PlacementRequest,
    outcome: TopologyOutcome,
    ctx: Context,
    check_one: Callable[[PlacementRequest, TopologyOutcome], C],
    *,
    ok: Callable[[C], bool],
    tighter: Callable[[PlacementRequest, C], PlacementRequest | None],
    rounds: int,
) -> Resolved[C]:
    """The one rule :func:`held` and :func:`engine_checks` share: ``outcome`` (``req``'s design
    in its topology) checked with ``check_one(sized, outcome)``; while the check fails (``ok``),
    the topology is solved again for ``tighter(sized, check)`` (None: nothing the MILP prices
    would help) and that design checked, up to ``rounds`` times. No solve is made that no check
    follows."""
    first = last = check_one(req, outcome)
    sized, n = req, 0
    while n < rounds and not ok(last):
        again_req = tighter(sized, last)
        if again_req is None:
            break
        again = place_best(again_req, [outcome.topology], ctx, with_shadow_prices=False).best
        if again is None:
            break
        sized, outcome, n = again_req, again, n + 1
        last = check_one(sized, outcome)
    return Resolved(first, last, sized, n)


def held(
    req: PlacementRequest,
    placed: PlacementReport,
    ctx: Context,
    check_one: Callable[[PlacementRequest, TopologyOutcome], Evaluation],
) -> Evaluation:
    """The cheapest design the simulations hold, from ``placed`` (``req``'s placement): each
    feasible topology's design by the MILP's objective, checked with ``check_one(sized, outcome)``
    (``sized``: the request the outcome was solved for, with ``req``'s targets). Where
    the simulation rejects a design, its topology is re-solved with the missed target tightened
    (:func:`retargeted`; a TTFT a third of the way first, then half of what is left, then all of
    it, as :func:`engine_checks` goes), up to :data:`RETARGET_ROUNDS` times; a later topology is
    tried while its MILP objective is below the best design held so far (the design held records
    its topology's place in the MILP's ranking, ``topology_rank``). None held: the MILP's best
    design's check (the answer names what binds); nothing placed: the first topology's outcome,
    checked."""
    ranked = placed.ranked()
    if not ranked:
        return check_one(req, placed.outcomes[0])
    first: Evaluation | None = None
    best: Evaluation | None = None
    for rank, outcome in enumerate(ranked):
        if best is not None and not outcome.result.objective < best.outcome.result.objective:
            break
        step = ttft_steps(RETARGET_ROUNDS)

        def tighter(
            sized: PlacementRequest, ev: Evaluation, step: Callable[[], float] = step
        ) -> PlacementRequest | None:  # (a TPOT or backlog round spends no TTFT step)
            return retargeted(req, sized, ev, step() if ev.binding.startswith("ttft_s") else 1.0)

        tried = resolved(
            req,
            outcome,
            ctx,
            lambda sized, o: check_one(replace(sized, slo=req.slo), o),  # the targets are req's
            ok=lambda ev: ev.feasible,
            tighter=tighter,
            rounds=RETARGET_ROUNDS,
        )
        first = first or tried.first
        ev = tried.last
        if ev.feasible and (best is None or ev.outcome.result.objective < best.outcome.result.objective):
            best = replace(ev, resolves=tried.rounds, topology_rank=rank)
    assert first is not None
    return best or first


def _binding(
    req: PlacementRequest, constraints: dict[str, float], metrics: dict[str, Any], max_gpus: float | None
) -> str:
    """The constraint a design fails by most, each against its own limit (a TTFT 10% over its
    target binds before 2 GPUs over a cap of 100), with its numbers; "" when none fails."""
    w, slo = req.workload, req.slo
    limits = {
        "ttft_s": slo.ttft_s,
        "tpot_s": slo.tpot_s,
        "stability": w.requests_per_s,
        "gpus": max_gpus or 1.0,
    }
    failing = {k: v / limits.get(k, 1.0) for k, v in constraints.items() if v > 0}
    if not failing:
        return ""
    name = max(failing, key=failing.__getitem__)
    pct = f"p{slo.percentile:g}"
    said = {
        "ttft_s": lambda: f"TTFT {pct} {float(metrics['ttft_pct_s']):.3g} s against {slo.ttft_s:g} s",
        "tpot_s": lambda: (
            f"TPOT mean {float(metrics['tpot_s']) * 1e3:.3g} ms against {slo.tpot_s * 1e3:g} ms"
        ),
        "stability": lambda: f"the backlog grows {constraints['stability']:.3g} requests/s",
        "gpus": lambda: f"{metrics.get('gpus', 0.0):.0f} GPUs against a cap of {max_gpus:g}",
    }
    return f"{name}: {said[name]()}" if name in said else name


def check(
    req: PlacementRequest,
    outcome: TopologyOutcome,
    scenario: Scenario,
    ctx: Context,
    *,
    dt_s: float,
    buffer_max: float = np.inf,
    max_gpus: float | None = None,
    served_per_s: float | None = None,
) -> Evaluation:
    """A placed outcome checked over time in ``scenario``: metrics, constraints, stage split.
    ``served_per_s``: the traffic the design serves where its pools were sized for more (a grid's
    headroom; default the request's): cost per token, throughput per GPU, power and energy are
    at that traffic."""
    if not outcome.feasible:
        why = outcome.infeasibility
        binding = f"{why.binding}: {why.detail}" if why else outcome.result.termination.value
        return Evaluation(
            req,
            outcome,
            None,
            None,
            {"milp_solve_s": outcome.result.solve_s},
            {"placement": INFEASIBLE},
            binding,
            {},
        )
    design = design_of(req, outcome)
    pipe, kv_gb = pipeline_of(design, ctx.catalog, ctx.params, buffer_max=buffer_max)
    sim = simulate(pipe, scenario, dt=dt_s, kv_gb_per_seq=kv_gb, resting=design.resting)
    metrics = _metrics(req, outcome, sim, served_per_s)
    metrics |= _engine_metrics(req, design, scenario, ctx, metrics)
    f = sim.fluid
    constraints = {
        "placement": 0.0,
        "ttft_s": float(metrics["ttft_pct_s"] or 0.0) - req.slo.ttft_s,
        "tpot_s": float(metrics["tpot_s"] or 0.0) - req.slo.tpot_s,
        # unstable: the backlog grows; the number is how fast
        "stability": 0.0 if bool(f.stable[0]) else max(float(f.backlog_growth_per_s[0]), 1e-9),
    }
    if max_gpus is not None:
        constraints["gpus"] = float(outcome.gpus) - max_gpus
    binding = _binding(req, constraints, metrics, max_gpus)
    stages = stage_split(req, outcome.pools, ctx)
    metrics |= power_metrics(req, outcome, stages, ctx, served_per_s)
    return Evaluation(
        req, outcome, design, sim, metrics, constraints, binding, stages, scenario, dt_s, buffer_max
    )


def _metrics(
    req: PlacementRequest, outcome: TopologyOutcome, sim: SimulationReport, served_per_s: float | None
) -> dict[str, float | None]:
    f, w = sim.fluid, req.workload
    served = w.requests_per_s if served_per_s is None else served_per_s
    share = served / w.requests_per_s  # below 1: the pools are sized for more than they serve
    ttft_pct = ttft_at_percentile(float(f.ttft_mean_s[0]), float(f.ttft_p99_s[0]), req.slo.percentile)
    tpot = float(f.tpot_mean_s[0])
    decode_gpus = sum(p.gpus for p in outcome.pools if not p.unit.role.hands_off)
    metrics = {
        "usd_per_million_tokens": outcome.usd_per_million_tokens / share,  # the served tokens'
        "usd_per_hour": outcome.usd_per_hour,
        "storage_usd_per_hour": outcome.storage_usd_per_hour,
        "gpus": float(outcome.gpus),
        "tokens_per_s_per_gpu": share * outcome.tokens_per_s / max(outcome.gpus, 1),
        "tokens_per_s_per_user": 1.0 / tpot if tpot > 0 else None,  # no decode step: no speed
        "output_tokens_per_s_per_decode_gpu": served * w.output_tokens / max(decode_gpus, 1),
        "ttft_s": float(f.ttft_mean_s[0]),
        "ttft_pct_s": ttft_pct,
        "tpot_s": tpot,
        "e2e_s": float(f.e2e_mean_s[0]),
        "hbm_peak_gb_per_gpu": max(p.hbm_gb_per_gpu for p in outcome.pools),
        # an instance's running sequences, its batch cap: not an FFN unit's, whose batch is the
        # tokens one expert step takes from every attention instance (4,096 beside a cap of 1,404)
        "decode_batch": max(
            (p.unit.decode_batch for p in outcome.pools if p.unit.role in SLOT_ROLES), default=0
        ),
        "milp_solve_s": outcome.result.solve_s,
        "sim_backlog_growth_per_s": float(f.backlog_growth_per_s[0]),
        # the fluid model's p99 is a quantile over time of each moment's: never below its mean
        "ttft_p99_s": max(float(f.ttft_p99_s[0]), float(f.ttft_mean_s[0])),
        # at every step the fluid integrates: the trajectories' rows miss a peak between them
        "queue_peak_prefill_requests": float(f.prefill_queue_peak_requests[0]),
        "queue_peak_buffer_requests": float(f.buffer_peak_requests[0]),
        "planner_moves": float(f.planner_moves[0]),
        # in the unit of the signal judged; the other is nan, so None (null in the exports)
        "swing_prefill_servers": float(f.swing_prefill_servers[0]),
        "swing_prefill_queue_requests": float(f.swing_prefill_queue_requests[0]),
    }
    return {k: (float(v) if v is not None and math.isfinite(float(v)) else None) for k, v in metrics.items()}


def _engine_metrics(
    req: PlacementRequest,
    design: SimDesign,
    scenario: Scenario,
    ctx: Context,
    fluid: dict[str, float | None],
) -> dict[str, float | None]:
    """The engine-level simulation's TTFT and TPOT at the SLO's percentile (Poisson arrivals at
    the scenario's mean traffic, a burst's included, as ``dse simulate`` runs it; not simulated
    where that is none; :mod:`dse.sim.engine_latency`), and the TTFT the constraint reads: the
    worse of it and the fluid model's over the scenario (where the design cannot be simulated
    request by request, the fluid model's alone), and the TTFT p99 the same way. TPOT keeps the
    SLO's rule, its mean."""
    from dse.sim.engine_latency import design_latency  # numba and scipy: not for `dse place`'s power line

    q, rate = req.slo.percentile, scenario.arrivals.mean_rate(scenario.horizon_s)
    lat = design_latency(at_rate(design, rate), ctx.catalog, ctx.params) if rate > 0 else None
    ttft = lat.worst("ttft", q) if lat is not None else math.nan  # every pool's requests meet it
    tpot = lat.worst("tpot", q) if lat is not None else math.nan
    fluid_ttft = fluid["ttft_pct_s"]  # None where the fluid model has none
    worse = ttft if fluid_ttft is None else max(float(fluid_ttft), ttft)
    p99 = lat.worst("ttft", 99.0) if lat is not None else math.nan
    fluid_p99 = fluid["ttft_p99_s"]
    return {
        "engine_ttft_pct_s": _or_none(ttft),
        "engine_tpot_pct_s": _or_none(tpot),
        "engine_ttft_p99_s": _or_none(p99),
        "ttft_pct_s": fluid_ttft if math.isnan(ttft) else _or_none(worse),
        # the same worse of the two, so that the p99 is never below the percentile it tops
        "ttft_p99_s": fluid_p99 if math.isnan(p99) else _or_none(max(fluid_p99 or p99, p99)),
    }


@dataclass(frozen=True)
class EngineCheck:
    """One topology's design through the engine-level simulation (Poisson arrivals at its mean
    traffic, every request through the engines' schedulers): TTFT and TPOT at the SLO's
    percentile, None where the design cannot be simulated request by request (a layout of pools
    :mod:`dse.sim.engine_latency` does not run), which then stands on the MILP's own TTFT. Where
    the MILP's design missed and the topology was solved again for a tighter TTFT
    (:func:`engine_checks`), ``outcome`` is that design, ``sized_ttft_s`` the target it was solved
    for and ``first_ttft_s`` what the MILP's first design simulated at."""

    topology: Topology
    ttft_s: float | None
    tpot_s: float | None
    ttft_target_s: float
    percentile: float
    unsimulated: str = ""  # why not, where ttft_s is None (:func:`dse.sim.engine_latency.unsimulated`)
    outcome: TopologyOutcome | None = None  # the design checked
    sized_ttft_s: float | None = None
    first_ttft_s: float | None = None
    # the percentile over all the design's requests, where ``ttft_s`` (its worst pool's) is above it
    all_ttft_s: float | None = None
    # the worst pool's mean TPOT and the target it is held to (the design's pace): until session 57
    # only the TTFT was, and 17 of 152 attention-FFN designs of benchmarks/engine_agreement.py held
    # that stepped up to 8.9% slower than their TPOT target
    tpot_mean_s: float | None = None
    tpot_target_s: float = math.inf

    @property
    def ttft_holds(self) -> bool:
        return self.ttft_s is None or self.ttft_s <= self.ttft_target_s * (1.0 + 1e-9)

    @property
    def tpot_holds(self) -> bool:
        return self.tpot_mean_s is None or self.tpot_mean_s <= self.tpot_target_s * (1.0 + 1e-9)

    @property
    def holds(self) -> bool:
        return self.ttft_holds and self.tpot_holds

    def describe(self) -> str:
        name, q = self.topology.value, f"p{self.percentile:g}"
        if self.ttft_s is None:
            return f"{name}: not simulated request by request ({self.unsimulated}); the MILP's TTFT stands"
        verdict = "holds" if self.ttft_holds else "misses"
        tpot_ms = 1e3 * (self.tpot_s or 0.0)
        ttft = f"TTFT {q} {self.ttft_s:.3g} s against {self.ttft_target_s:g} s ({verdict})"
        if self.all_ttft_s is not None:
            ttft += f" in its worst pool (all its requests: {q} {self.all_ttft_s:.3g} s)"
        if self.sized_ttft_s is not None and self.first_ttft_s is not None:
            ttft += (
                f", solved again for {self.sized_ttft_s:.3g} s (its first design: {self.first_ttft_s:.3g} s)"
            )
        tpot = f"TPOT {q} {tpot_ms:.3g} ms"
        if not self.tpot_holds:
            mean_ms = 1e3 * (self.tpot_mean_s or 0.0)
            tpot += f", mean {mean_ms:.3g} ms against {1e3 * self.tpot_target_s:g} ms (misses)"
        return f"{name}: {ttft}; {tpot}"


def engine_checks(
    report: PlacementReport, ctx: Context, rounds: int = RETARGET_ROUNDS
) -> tuple[EngineCheck, ...]:
    """Each feasible topology's design through the engine-level simulation, cheapest first by the
    MILP's objective. Where a design misses its TTFT, its topology is solved again for a tighter
    one (:func:`tighter_ttft`, as :func:`held` does on the simulations' verdict), up to ``rounds``
    times, and the first design that holds is checked in its place; none holds: the MILP's first
    design's check. A topology no cheaper than a design already held is not solved again (a
    tighter target cannot make it cheaper)."""
    req = report.request
    out = []
    cheapest = math.inf  # the MILP objective of the cheapest design held so far
    for o in report.ranked():
        step = ttft_steps(rounds)

        def tighter(
            sized: PlacementRequest, c: EngineCheck, step: Callable[[], float] = step
        ) -> PlacementRequest | None:
            return _tighter_engine(req, sized, c, step())

        tried = resolved(
            req,
            o,
            ctx,
            lambda _sized, design: _engine_check(req, design, ctx),  # the targets are req's
            ok=lambda c: c.holds,
            tighter=tighter,
            rounds=rounds if req.objective is not Objective.GOODPUT and o.result.objective < cheapest else 0,
        )
        check = tried.last
        if tried.rounds:
            check = replace(check, sized_ttft_s=tried.sized.slo.ttft_s, first_ttft_s=tried.first.ttft_s)
        out.append(check if check.holds else tried.first)
        if check.holds:
            cheapest = min(cheapest, (check.outcome or o).result.objective)
    return tuple(out)


def _tighter_engine(
    req: PlacementRequest, sized: PlacementRequest, c: EngineCheck, step: float
) -> PlacementRequest | None:
    """:func:`tighter_ttft` for an engine check that missed its TTFT, ``step`` of the way (None
    where it was not simulated, or held its TTFT and missed its TPOT, which no tighter TTFT
    mends). :func:`engine_checks` goes a third of the way first, then half of what is left, then
    all of it: a design's simulated TTFT does not follow its target in proportion (its decode
    pool's slots can make it), and the whole ratio at once had jumped past targets whose designs
    hold at the first design's price (MI355X at 10 requests/s, 50,000-token prefixes: the design
    priced at 0.83 s missed 1 s at 2.54 s in its worst pool; solved for 0.33 s it cost $343/hour
    and missed, where one solved for 0.61 s holds)."""
    if c.ttft_s is None or c.outcome is None or c.ttft_holds:
        return None
    return tighter_ttft(req, sized, c.outcome, c.ttft_s, step)


def _engine_check(req: PlacementRequest, o: TopologyOutcome, ctx: Context) -> EngineCheck:
    from dse.sim.engine_latency import design_latency, unsimulated  # numba: only when asked for

    q = req.slo.percentile
    design = design_of(req, o)
    lat = design_latency(design, ctx.catalog, ctx.params)
    ttft = lat.worst("ttft", q) if lat is not None else None  # every pool's requests meet it
    tpot = lat.worst("tpot", q) if lat is not None else None
    mean = lat.worst_mean("tpot") if lat is not None else None
    why = unsimulated(design) if lat is None else ""
    pooled = lat.percentile("ttft", q) if lat is not None else None
    # the mix's figure beside the worst pool's where the two read apart at the figures shown
    apart = pooled if ttft is not None and pooled is not None and f"{ttft:.3g}" != f"{pooled:.3g}" else None
    return EngineCheck(
        o.topology, ttft, tpot, req.slo.ttft_s, q, why, o, all_ttft_s=apart, tpot_mean_s=mean,
        tpot_target_s=req.slo.tpot_s,
    )  # fmt: skip


def confirmed(report: PlacementReport, checks: Iterable[EngineCheck]) -> PlacementReport:
    """``report`` with its best the cheapest design whose engine-level TTFT holds (None: none
    holds), a design solved again in place of its topology's first one; the shadow prices are the
    MILP's best design's, so they go where that one fails."""
    checks = list(checks)
    again = {c.topology: c.outcome for c in checks if c.outcome is not None and c.sized_ttft_s is not None}
    outcomes = tuple(again.get(o.topology, o) for o in report.outcomes)
    held = [c.outcome for c in checks if c.holds and c.outcome is not None]
    best = min(held, key=lambda o: o.result.objective) if held else None
    if best is report.best:  # the MILP's best holds: its prices stand
        return replace(report, outcomes=outcomes) if again else report
    note = None
    if report.shadow_prices:  # (they had gone without a word, --no-shadow-prices not given)
        note = (
            "they price the MILP's best design, which the engine-level check replaced: run without "
            "--confirm for them"
        )
    return replace(report, outcomes=outcomes, best=best, shadow_prices=(), shadow_prices_note=note)


def ttft_at_percentile(mean: float, p99: float, percentile: float) -> float:
    """TTFT at ``percentile`` of the distribution a shift plus an exponential tail of the simulated
    mean and p99 describes: its quantile grows with ``ln(1 / (1 - p))``, which is 1 at about p63
    (the mean of an exponential) and ``ln 100`` at p99, so the median is below the mean (by 0.31
    of the tail's scale). No lower than 0; a p99 at or below the mean (no tail) gives the mean.
    (Until 2026-12-06 it gave the mean for every percentile below p63, so a p50 target read the
    mean under the median's name.)"""
    grow = math.log(1.0 / (1.0 - percentile / 100.0))
    return max(mean + max(p99 - mean, 0.0) * (grow - 1.0) / (math.log(100.0) - 1.0), 0.0)


def _or_none(x: float) -> float | None:
    return None if x is None or math.isnan(x) else float(x)


def _sim_pool(p: PoolPlan) -> SimPool:
    u = p.unit
    pool = SimPool(
        role=u.role.name.lower(),
        hardware=u.hardware,
        name=u.name,
        gpus=float(u.parallel.gpus),
        attn_tp=float(u.parallel.attn_tp),
        ep=float(u.parallel.ep),
        instances=float(p.instances),
        prefill_share=float(u.prefill_share or 0.0),
        prefill_batch_requests=float(u.prefill_batch_requests or 0.0),
        prefill_forward_requests=float(u.prefill_forward_requests or 0.0),
        decode_batch=float(u.decode_batch or 0.0),
        output_tokens_per_s=float(p.output_tokens_per_s),
        requests_per_s=float(p.requests_per_s),
        returning_per_s=float(p.returning_per_s),
        prefill_busy_s=_or_none(p.prefill_busy_s),
        fresh_busy_s=_or_none(p.fresh_busy_s),
        midfill_busy_s=_or_none(p.midfill_busy_s),
        reload_s=_or_none(p.reload_s),
        recompute_per_s=float(p.recompute_per_s),
    )
    return stage_replicas(pool, float(u.parallel.pp))


def design_of(req: PlacementRequest, outcome: TopologyOutcome) -> SimDesign:
    """The design of a feasible placement outcome, typed all the way, carrying the traffic it was
    sized for: a goodput outcome's (the most its caps serve; the request's rate only sets the mix)."""
    workload = req.workload
    if req.objective is Objective.GOODPUT and outcome.requests_per_s > 0:
        workload = replace(workload, requests_per_s=outcome.requests_per_s)
    total = workload.requests_per_s
    return SimDesign(
        model=req.model,
        engine=req.engine,
        weight_precision=req.weight_precision.value,
        mtp=req.mtp,
        topology=outcome.topology.value,
        workload=workload,
        slo=req.slo,
        pools=tuple(_sim_pool(p) for p in outcome.pools),
        resting=tuple(
            RestingClass(t.returning_per_s / total, t.dwell_s, t.gb_per_session, dict(t.share))
            for t in outcome.tiers
        ),
        mtp_draft_tokens=req.mtp_draft_tokens,
        mtp_accept_rate=req.mtp_accept_rate,
    )
