"""Grid studies: each point of the study's ``[sweep]`` grid is one trial.

A point changes the study's model, hardware, traffic or targets (placement axes) and the
simulated dynamics (burst, output tail, planner, buffer). The point is answered by the full
placement: every listed shape, every listed topology, one MILP each (as ``dse place`` does), with
the shadow prices of its resources; the cheapest design the simulators hold in the point's traffic
and the study's own dynamics is kept (:func:`dse.evaluation.held`: a rejected design's topology is
solved again for what it missed). Points that differ only in dynamics axes share that design
(cached in the process), which the simulators then check in the point's dynamics. Records have
the same metrics as a search trial, plus the shadow prices (the MILP's best design's).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np

from dse.catalog import Catalog
from dse.context import Context
from dse.evaluation import Evaluation, check, held
from dse.perf.params import PerfParams
from dse.placement.plan import PlacementReport, TopologyOutcome, place_best
from dse.placement.request import PlacementRequest, Topology, UnitOptions
from dse.plain import plain
from dse.sim import Planner, PlannerKind
from dse.sim.scenario import Scenario
from dse.study.choice import Choice
from dse.study.grid import DYNAMICS_AXES, PLANNER_DELAY_S, spec_at
from dse.study.spec import StudySpec
from dse.study.trial import TrialRecord, record_of, scenario_for, study_request
from formulations.placement_data import Role
from formulations.solve import PlacementSolver


def request_at(
    spec: StudySpec, catalog: Catalog, headroom: float = 0.0, kv_policy: str | None = None
) -> PlacementRequest:
    """Every listed shape on every hardware of the point, pools sized for ``1 + headroom`` times
    the traffic."""
    s = spec.search
    hw = tuple(dict.fromkeys(catalog.hardware(h).id for h in spec.hardware))
    lo, hi = s.aggregated.prefill_share
    w = spec.workload
    return study_request(
        spec,
        catalog,
        hardware=hw,
        topology=Topology.AUTO,
        workload=replace(w, requests_per_s=w.requests_per_s * (1.0 + headroom)),
        options=UnitOptions(
            prefill_shapes=s.prefill.shapes,
            midfill_shapes=s.midfill.shapes or None,
            decode_shapes=s.decode.shapes,
            prefill_hardware=hw,
            decode_hardware=hw,
            prefill_chunk_tokens=int(s.prefill.chunk_tokens[0]),
            decode_max_batch=float(s.decode.max_batch[1]),
            # rounded for the reports, and kept inside the study's range
            agg_prefill_shares=tuple(float(x) for x in np.clip(np.round(np.linspace(lo, hi, 4), 3), lo, hi)),
            ffn_tokens_per_gpu=s.afd.ffn_tokens_per_gpu,
            kv_policy=kv_policy or s.kv_policies[0],
        ),
        time_limit_s=30.0,
    )


def evaluate_point(
    spec: StudySpec,
    point: dict[str, Any],
    catalog: Catalog,
    params: PerfParams,
    solver: PlacementSolver,
    cache: dict[str, tuple[PlacementReport, Evaluation]] | None = None,
) -> TrialRecord:
    """Place the point and keep the cheapest design that holds its traffic (or reuse both), then
    simulate that design in the point's dynamics and record."""
    s = spec_at(spec, point)
    headroom = float(point.get("headroom", 0.0))
    req = request_at(s, catalog, headroom, point.get("kv_policy"))
    ctx = Context(catalog, params, solver)
    served = s.workload.requests_per_s  # the pools are sized for 1 + headroom times it

    def checked(sized: PlacementRequest, o: TopologyOutcome, scenario: Scenario, **kw: Any) -> Evaluation:
        return check(
            sized, o, scenario, ctx, dt_s=s.simulate.dt_s, max_gpus=s.limits.max_gpus, served_per_s=served,
            **kw,
        )  # fmt: skip

    cache = cache if cache is not None else {}
    # the design held is checked at the traffic served: 40 requests/s with headroom 0.25 places as
    # 50 with none, and is held (and priced per token) at 40
    key = json.dumps([plain(req), served], sort_keys=True)
    if key not in cache:
        placed = place_best(req, [Topology(t) for t in s.search.topologies], ctx)
        # the design must hold the point's traffic in the study's own dynamics; the point's
        # dynamics axes then test that design, as the study asks
        steady = scenario_for(spec_at(spec, {k: v for k, v in point.items() if k not in DYNAMICS_AXES}))
        cache[key] = (placed, held(req, placed, ctx, lambda sized, o: checked(sized, o, steady)))
    placed, ev = cache[key]
    if any(k in DYNAMICS_AXES for k in point):
        planner = None
        if "planner" in point:
            period = float(point.get("planner_period_s", 60.0))
            delay = float(point.get("planner_delay_s", min(PLANNER_DELAY_S, period)))
            planner = Planner(PlannerKind(point["planner"]), period_s=period, delay_s=delay)
        scenario = scenario_for(s, tail=point.get("output_tail"), planner=planner)
        buffer_max = float(point.get("buffer_requests", np.inf))
        again = checked(ev.request, ev.outcome, scenario, buffer_max=buffer_max)
        ev = replace(again, resolves=ev.resolves, topology_rank=ev.topology_rank)
    rec = record_of(ev)
    if not ev.outcome.feasible:
        return rec
    prices = placed.shadow_prices if ev.outcome is placed.best else ()  # the MILP's best design's
    metrics: dict[str, float | None] = dict(rec.metrics)
    metrics["milp_resolves"] = float(ev.resolves)
    metrics["milp_topology_rank"] = float(ev.topology_rank)
    decode_hw = _decode_hardware(ev.outcome)
    for p in prices:
        if p.hardware == decode_hw and p.resource == "hbm_bandwidth":
            metrics["hbm_bandwidth_usd_per_tbps_gpu_hour"] = p.usd_per_gpu_hour
        if p.hardware == decode_hw and p.resource == "hbm_capacity":
            metrics["hbm_capacity_usd_per_gb_gpu_hour"] = p.usd_per_gpu_hour
    return replace(rec, metrics=metrics)  # type: ignore[arg-type]


def choice_of(outcome: TopologyOutcome, req: PlacementRequest) -> Choice:
    """The design a placement chose, in the columns of a search trial: the largest pool per side
    (for attention-FFN designs the decode side is the attention pool; the expert pool gives the
    tokens per expert GPU); the batch is the decode pool's operating batch."""
    pools = sorted(outcome.pools, key=lambda p: -p.gpus)
    pre = next((p for p in pools if p.unit.role in (Role.PREFILL, Role.MIXED)), None)
    dec = next((p for p in pools if p.unit.role in (Role.DECODE, Role.MIXED, Role.ATTENTION)), None)
    ffn = next((p for p in pools if p.unit.role is Role.FFN), None)
    mid = next((p for p in pools if p.unit.role is Role.MIDFILL), None)
    return Choice(
        topology=outcome.topology.value,
        kv_policy=req.options.kv_policy,
        prefill_hardware=pre.unit.hardware if pre else "",
        decode_hardware=dec.unit.hardware if dec else "",
        prefill_shape=pre.unit.parallel.label() if pre else "",
        decode_shape=dec.unit.parallel.label() if dec else "",
        chunk_tokens=req.options.prefill_chunk_tokens,
        max_batch=int(round(dec.unit.decode_batch)) if dec else 0,
        prefill_share=float(pre.unit.prefill_share) if pre and pre.unit.role is Role.MIXED else 0.0,
        ffn_tokens_per_gpu=ffn.unit.decode_batch / ffn.unit.parallel.gpus if ffn else 0.0,
        midfill_hardware=mid.unit.hardware if mid else None,
        midfill_shape=mid.unit.parallel.label() if mid else None,
    )


def _decode_hardware(outcome: TopologyOutcome) -> str | None:
    pools = sorted((p for p in outcome.pools if not p.unit.role.hands_off), key=lambda p: -p.gpus)
    return pools[0].unit.hardware if pools else None
