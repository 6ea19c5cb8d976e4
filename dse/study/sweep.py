"""Grid studies: each point of the study's ``[sweep]`` grid is one trial.

A point changes the study's model, hardware, traffic or targets (placement axes) and the
simulated dynamics (burst, output tail, planner, buffer). The point is answered by the full
placement: every listed shape, every listed topology, one MILP each, the cheapest kept (as
``dse place`` does), with the shadow prices of its resources. Points that differ only in dynamics
axes share one placement (cached in the process). The simulator then checks the design in the
point's dynamics. Records have the same metrics as a search trial, plus the shadow prices.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np
import optuna

from dse.catalog import Catalog
from dse.context import Context
from dse.evaluation import check
from dse.perf.params import PerfParams
from dse.placement.plan import PlacementReport, TopologyOutcome, place_best
from dse.placement.request import PlacementRequest, Topology, UnitOptions
from dse.plain import plain
from dse.sim import Planner, PlannerKind
from dse.study.optuna_compat import grid_of, set_trial_system_attr
from dse.study.spec import StudySpec
from dse.study.trial import Choice, TrialRecord, record_of, scenario_for, study_request
from formulations.placement_data import Role
from formulations.solve import PlacementSolver

PREFIX = "x_"  # Optuna parameter names of the grid axes
WORKLOAD_AXES = ("requests_per_s", "input_tokens", "output_tokens", "cached_prefix_tokens")
SLO_AXES = ("ttft_s", "tpot_s")
PLANNER_DELAY_S = 30.0  # age of the planner's measurements unless swept (at most its period)


class GridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler, choosing each trial's point by what the storage holds: a point is
    taken when a complete or running trial has its values, so a failed trial's point is run again,
    a resumed run (whatever its numbering or seed) runs only the missing points, and workers pick
    at random among the free ones. No ``study.stop()`` once the grid is done: the runner asks and
    tells itself and stops at its budget (one trial per point)."""

    def before_trial(self, study: Any, trial: Any) -> None:
        if "grid_id" in trial.system_attrs or "fixed_params" in trial.system_attrs:
            return
        live = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING)
        grid = grid_of(self)  # Optuna's shuffled grid and random state (dse.study.optuna_compat)
        taken = {
            tuple(_key(t.params[k]) for k in grid.names)
            for t in study.get_trials(deepcopy=False, states=live)
            if t.number != trial.number and all(k in t.params for k in grid.names)
        }
        free = [i for i, g in enumerate(grid.points) if tuple(_key(v) for v in g) not in taken]
        grid_id = int(grid.rng.choice(free)) if free else 0  # 0: the budget ran past the grid
        set_trial_system_attr(study, trial, "search_space", grid.search_space)
        set_trial_system_attr(study, trial, "grid_id", grid_id)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        return None


def _key(value: Any) -> Any:
    """A grid value as stored and as listed compare equal (2000 and 2000.0)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def grid_space(spec: StudySpec) -> dict[str, list[Any]]:
    return {PREFIX + k: list(v) for k, v in spec.sweep.axes().items()}


def grid_sampler(spec: StudySpec, seed: int) -> GridSampler:
    return GridSampler(grid_space(spec), seed=seed)


def suggest_point(trial: optuna.Trial, spec: StudySpec) -> dict[str, Any]:
    return {k: trial.suggest_categorical(PREFIX + k, list(v)) for k, v in spec.sweep.axes().items()}


def point_of(params: dict[str, Any]) -> dict[str, Any]:
    """A finished trial's grid point, from its recorded parameters."""
    return {k.removeprefix(PREFIX): v for k, v in params.items() if k.startswith(PREFIX)}


def spec_at(spec: StudySpec, point: dict[str, Any]) -> StudySpec:
    """The study as one grid point sees it."""
    changes: dict[str, Any] = {k: float(point[k]) for k in WORKLOAD_AXES if k in point}
    workload = replace(spec.workload, **changes)
    slo = replace(spec.slo, **{k: float(point[k]) for k in SLO_AXES if k in point})
    sim = spec.simulate
    if "burst_factor" in point:
        sim = replace(sim, arrivals="burst", burst_factor=float(point["burst_factor"]))
    return replace(
        spec,
        model=str(point.get("model", spec.model)),
        hardware=(str(point["hardware"]),) if "hardware" in point else spec.hardware,
        workload=workload,
        slo=slo,
        simulate=sim,
    )


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
    cache: dict[str, PlacementReport] | None = None,
) -> TrialRecord:
    """Place the point (or reuse its placement), simulate it in the point's dynamics, record."""
    s = spec_at(spec, point)
    headroom = float(point.get("headroom", 0.0))
    req = request_at(s, catalog, headroom, point.get("kv_policy"))
    cache = cache if cache is not None else {}
    key = json.dumps(plain(req), sort_keys=True)
    if key not in cache:
        topologies = [Topology(t) for t in s.search.topologies]
        cache[key] = place_best(req, topologies, Context(catalog, params, solver))
    placed = cache[key]
    # none feasible: the first topology's outcome explains why
    outcome, prices = placed.best or placed.outcomes[0], placed.shadow_prices
    planner = None
    if "planner" in point:
        period = float(point.get("planner_period_s", 60.0))
        delay = float(point.get("planner_delay_s", min(PLANNER_DELAY_S, period)))
        planner = Planner(PlannerKind(point["planner"]), period_s=period, delay_s=delay)
    scenario = scenario_for(s, tail=point.get("output_tail"), planner=planner)
    ev = check(
        req,
        outcome,
        scenario,
        Context(catalog, params, solver),
        dt_s=s.simulate.dt_s,
        buffer_max=float(point.get("buffer_requests", np.inf)),
        max_gpus=s.limits.max_gpus,
    )
    rec = record_of(ev)
    if not outcome.feasible:
        return rec
    metrics: dict[str, float | None] = dict(rec.metrics)
    if headroom > 0:  # the pools are sized for more than they serve: price the served tokens
        for k in ("usd_per_million_tokens",):
            metrics[k] = _scaled(metrics.get(k), 1.0 + headroom)
        for k in ("tokens_per_s_per_gpu", "output_tokens_per_s_per_decode_gpu"):
            metrics[k] = _scaled(metrics.get(k), 1.0 / (1.0 + headroom))
    decode_hw = _decode_hardware(outcome)
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
    )


def _decode_hardware(outcome: TopologyOutcome) -> str | None:
    pools = sorted((p for p in outcome.pools if p.unit.role is not Role.PREFILL), key=lambda p: -p.gpus)
    return pools[0].unit.hardware if pools else None


def _scaled(v: float | None, factor: float) -> float | None:
    return None if v is None else v * factor
