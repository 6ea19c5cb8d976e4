"""One trial of a study: the sampler's choice -> candidate units -> MILP -> fluid check -> record.

:func:`suggest` asks an Optuna trial for a :class:`Choice` (the search space of the study's
``[search]`` table, conditional on the topology); :func:`evaluate` is a pure function of the spec
and the choice, so a trial can be re-evaluated later (exports re-simulate the Pareto front).
Constraints are numbers where ``<= 0`` is feasible, as Optuna's constraint-aware samplers expect.
"""

from __future__ import annotations

import math
import numbers
import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from dse.catalog import Catalog
from dse.context import Context
from dse.evaluation import Evaluation
from dse.evaluation import evaluate as evaluate_design
from dse.metrics import metric_of_column
from dse.perf.params import PerfParams
from dse.placement.plan import TopologyOutcome
from dse.placement.request import Energy, Limits, PlacementRequest, Storage, Topology, UnitOptions
from dse.plain import plain
from dse.sim import ArrivalKind, Arrivals, OutputLengths, Planner, Scenario
from dse.sim.simulation import SimulationReport
from dse.study.choice import Choice
from dse.study.objectives import NO_VALUE, MissingMetric, ObjectiveError, ObjectiveWarning, at
from dse.study.spec import StudySpec
from dse.units import Precision
from dse.workload import Workload
from formulations.placement_data import LINK_TIERS, Objective
from formulations.solve import PlacementSolver

# values recorded for a trial without a design, so samplers can still rank it (constraints mark
# it): the worst in either direction (0 was not, for a maximised objective that can be negative)
WORST = {"minimize": NO_VALUE, "maximize": -NO_VALUE}


def request_for(spec: StudySpec, c: Choice, catalog: Catalog) -> PlacementRequest:
    """The placement a search trial's choice asks for: one shape per side."""
    midfill = (c.midfill_hardware,) if c.midfill_hardware else ()
    return study_request(
        spec,
        catalog,
        hardware=(c.prefill_hardware, c.decode_hardware, *midfill),
        topology=Topology(c.topology),
        options=UnitOptions(
            prefill_shapes=(c.prefill_shape,),
            decode_shapes=(c.decode_shape,),
            prefill_hardware=(catalog.hardware(c.prefill_hardware).id,),
            decode_hardware=(catalog.hardware(c.decode_hardware).id,),
            midfill_shapes=(c.midfill_shape,) if c.midfill_shape else None,
            midfill_hardware=tuple(catalog.hardware(h).id for h in midfill) or None,
            prefill_chunk_tokens=c.chunk_tokens,
            decode_max_batch=float(c.max_batch),
            agg_prefill_shares=(c.prefill_share,) if c.prefill_share > 0 else (0.2,),
            ffn_tokens_per_gpu=(c.ffn_tokens_per_gpu,) if c.ffn_tokens_per_gpu > 0 else (64.0,),
            kv_policy=c.kv_policy,
            tighter_paces=False,
        ),
        time_limit_s=10.0,
    )


def study_request(
    spec: StudySpec,
    catalog: Catalog,
    *,
    hardware: Sequence[str],
    topology: Topology,
    options: UnitOptions,
    time_limit_s: float,
    workload: Workload | None = None,
) -> PlacementRequest:
    """A placement request with the study's model, targets, prices and limits (one place for
    what a search trial and a grid point share)."""
    spec = spec.served_by(catalog)  # (a run's is already)
    return PlacementRequest(
        model=catalog.model(spec.model).id,
        hardware=tuple(dict.fromkeys(catalog.hardware(h).id for h in hardware)),
        workload=workload if workload is not None else spec.workload,
        slo=spec.slo,
        topology=topology,
        objective=_milp_objective(spec),
        price_tier=spec.price_tier,
        engine=spec.engine,
        weight_precision=Precision(spec.precision),
        mtp=spec.mtp,
        mtp_draft_tokens=spec.mtp_draft_tokens,
        mtp_accept_rate=spec.mtp_accept_rate,
        limits=Limits(budget_usd_hour=spec.limits.budget_usd_hour, power_kw=spec.limits.power_kw),
        energy=Energy(usd_per_kwh=spec.energy.usd_per_kwh, pue=spec.energy.pue),
        storage=Storage(**asdict(spec.storage)),
        options=options,
        time_limit_s=time_limit_s,
    )


def _milp_objective(spec: StudySpec) -> Objective:
    """The MILP sizes pools for the fewest GPUs when the study counts GPUs, else for cost."""
    return Objective.GPUS if spec.objectives.names[0] == "gpus" else Objective.COST


# a long-tailed output: (share of the requests in the tail, their mean over the whole mean); the
# rest keep the whole mean (the body at half of it: 0.9 x 0.5 + 0.1 x 5.5 = 1 and 0.95 x 0.5 +
# 0.05 x 10.5 = 1). Until 2026-12-05 the bodies were at 1/2.8 and 1/1.9 of the mean, so a "long"
# tail served 12.9% fewer output tokens than the workload (and "heavy" 2.5% more).
TAIL_MIX = {"long": (0.1, 5.5), "heavy": (0.05, 10.5)}


def output_lengths(mean: float, tail: str) -> OutputLengths:
    """Output lengths with mean ``mean``: ``none`` one exponential; ``long`` 10% of the requests
    at 5.5x the mean; ``heavy`` 5% at 10.5x; the others at what keeps the mean
    (:data:`TAIL_MIX`)."""
    if tail in TAIL_MIX:
        share, times = TAIL_MIX[tail]
        body = (1.0 - share * times) / (1.0 - share)
        return OutputLengths((1.0 - share, share), (mean * body, mean * times))
    return OutputLengths((1.0,), (mean,))


def scenario_for(spec: StudySpec, tail: str | None = None, planner: Planner | None = None) -> Scenario:
    sim, w = spec.simulate, spec.workload
    tail = tail if tail is not None else ("long" if sim.long_tail else "none")
    kind = ArrivalKind(sim.arrivals)
    return Scenario(
        Arrivals(
            kind,
            w.requests_per_s,
            burst_factor=sim.burst_factor,
            burst_start_s=sim.burst_start_s,
            burst_s=sim.burst_s,
        ),
        output_lengths(w.output_tokens, tail),
        planner=planner if planner is not None else Planner(),
        horizon_s=sim.horizon_s,
        warmup_s=sim.warmup_s,
    )


@dataclass(frozen=True)
class TrialRecord:
    """What a trial leaves behind: JSON-ready, apart from the in-memory evaluation. What the
    exports and the report need is stored here at trial time (the simulator's design, the stage
    split), so they never place anything again."""

    metrics: dict[str, float | None]
    constraints: dict[str, float]  # <= 0 feasible
    binding: str  # why the design is infeasible, or ""
    pools: list[dict[str, Any]]
    tiers: list[dict[str, Any]]
    # what the exports and the report simulate again (no solve): the simulator's design
    # (dse.sim.from_placement.SimDesign), its scenario and time step (dse.sim.stored)
    simulation_inputs: dict[str, Any] | None = None
    stage_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    evaluation: Evaluation | None = None

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.constraints.values())

    @property
    def outcome(self) -> TopologyOutcome | None:
        return self.evaluation.outcome if self.evaluation is not None else None

    @property
    def simulation(self) -> SimulationReport | None:
        return self.evaluation.simulation if self.evaluation is not None else None

    @property
    def request(self) -> PlacementRequest | None:
        return self.evaluation.request if self.evaluation is not None else None

    def attrs(self) -> dict[str, Any]:
        """For Optuna's user attributes."""
        return {
            "metrics": self.metrics,
            "constraints": self.constraints,
            "binding": self.binding,
            "pools": self.pools,
            "tiers": self.tiers,
            "simulation": self.simulation_inputs,
            "stage_ms": self.stage_ms,
        }


def evaluate(
    spec: StudySpec, c: Choice, catalog: Catalog, params: PerfParams, solver: PlacementSolver
) -> TrialRecord:
    """Place the choice for the study's traffic, then check it over time."""
    req = request_for(spec, c, catalog)
    ev = evaluate_design(
        req,
        [Topology(c.topology)],
        scenario_for(spec),
        Context(catalog, params, solver),
        dt_s=spec.simulate.dt_s,
        max_gpus=spec.limits.max_gpus,
    )
    return record_of(ev)


def record_of(ev: Evaluation) -> TrialRecord:
    """The stored record of an evaluation."""
    pools = [
        {
            "role": p.unit.role.name.lower(),
            "hardware": p.unit.hardware,
            "shape": p.unit.parallel.label(),
            "instances": p.instances,
            "gpus": p.gpus,
            "decode_batch": p.unit.decode_batch,
            "prefill_share": p.unit.prefill_share,
            "hbm_gb_per_gpu": p.hbm_gb_per_gpu,
            "working_gb_per_gpu": p.unit.hbm_gb_per_gpu,  # without the KV resting between turns
            "weights_gb_per_gpu": p.unit.weights_gb_per_gpu,
            "requests_per_s": p.requests_per_s,  # what the pool is sized for (a grid's headroom in it)
            "output_tokens_per_s": p.output_tokens_per_s,
            "usd_per_hour": p.usd_per_hour,
            # the KV its returning turns reload, resting between turns in its hosts' DRAM, on their
            # NVMe and in the network store (GB over the pool): what deploy gives each instance
            **{f"resting_{t}_gb": p.resting_gb.get(t, 0.0) for t in LINK_TIERS},
            # the GPUs of an instance that hold distinct shares of its KV (each other one a copy)
            "kv_gpus": int(round(p.unit.kv_shard)),
        }
        for p in ev.outcome.pools
    ]
    tiers = [
        {
            "kv_class": t.kv_class,
            "returning_per_s": t.returning_per_s,
            "dwell_s": t.dwell_s,
            "gb_per_session": t.gb_per_session,
            **{f"share_{k}": v for k, v in t.share.items()},
            **{f"stored_{k}_gb": v for k, v in t.stored_gb.items()},
        }
        for t in ev.outcome.tiers
    ]
    inputs = None
    if ev.design is not None and ev.scenario is not None:
        buffer = ev.buffer_max if math.isfinite(ev.buffer_max) else None
        inputs = {
            "design": plain(ev.design),
            "scenario": plain(ev.scenario),
            "dt_s": ev.dt_s,
            "buffer_max": buffer,
        }
    return TrialRecord(ev.metrics, ev.constraints, ev.binding, pools, tiers, inputs, ev.stage_ms, ev)


class _Metrics(dict):  # type: ignore[type-arg]
    """A trial's metrics as an objective function reads them: a key it lacks is bad input that
    lists the keys it has (an exported column's name, ``ttft_mean_s``, names its metric here)."""

    def __init__(self, metrics: dict[str, Any], objective: str, trial: int | None) -> None:
        super().__init__(metrics)
        self._objective, self._trial = objective, trial

    def __missing__(self, key: str) -> Any:
        metric = metric_of_column(key)
        hint = f"the exported column {key!r} is the metric {metric!r} here; " if metric else ""
        has = ", ".join(sorted(self))
        rule = f"reads a metric trials do not have ({at(self._trial)}): {hint}they have {has}"
        raise MissingMetric(self._objective, self._trial, rule, key)


def objective_values(
    record: TrialRecord,
    objectives: Sequence[tuple[str, str, Any]],
    trial: int | None = None,
    warned: set[str] | None = None,
    no_value: list[str] | None = None,
) -> list[float]:
    """One value per objective (name, direction, function of the metrics or None for a metric)
    of trial number ``trial``; a trial without a design gets the worst value so samplers still
    learn from it, and so does one whose function gives None, nan or an infinity (stored without
    a value). A function that raises, reads a metric trials lack or returns no number is an
    :class:`ObjectiveError` naming it and the trial (what it raised is the error's ``__cause__``).
    Nan or an infinity from a function is warned of (:class:`ObjectiveWarning`) once per
    objective named in ``warned``, which gets the names warned of (a run passes one set).
    ``no_value`` gets the names of the objectives without a value (stored with the trial: its
    worst value is no sign of one, a function's real values may be as large)."""
    warned = set() if warned is None else warned
    no_value = [] if no_value is None else no_value
    out = []
    for name, direction, fn in objectives:
        if "usd_per_hour" not in record.metrics:
            out.append(WORST[direction])
            no_value.append(name)
            continue
        v = _called(fn, name, record.metrics, trial) if fn is not None else record.metrics.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Real)):
            rule = f"must return a number (or None: no value); it returned this for {at(trial)}"
            raise ObjectiveError(name, trial, rule, v)
        try:
            x = float(v) if v is not None else math.nan
        except OverflowError:  # an int past float's range (10**400) had raised its bare OverflowError
            rule = f"must return a number within float's range; it returned this for {at(trial)}"
            said = (
                f"an int near 10^{math.log10(abs(v)):.0f}" if isinstance(v, int) else f"a {type(v).__name__}"
            )
            raise ObjectiveError(name, trial, rule, said) from None
        if fn is not None and v is not None and not math.isfinite(x) and name not in warned:
            warned.add(name)
            warnings.warn(
                f"objective {name}: returned {x} for {at(trial)}: such a trial is stored without a value "
                "(null), off the Pareto front and out of best_trial(); return None for no value "
                "(said once per run)",
                ObjectiveWarning,
                stacklevel=_caller_level(),
            )
        out.append(x if math.isfinite(x) else WORST[direction])
        if not math.isfinite(x):
            no_value.append(name)
    return out


def _called(fn: Any, name: str, metrics: dict[str, Any], trial: int | None) -> Any:
    """``fn`` of the trial's metrics; what it raises becomes one error naming the objective and
    the trial, with the original as its ``__cause__`` (Ctrl-C stays Ctrl-C)."""
    try:
        return fn(_Metrics(metrics, name, trial))
    except ObjectiveError:
        raise  # a metric it lacks, said already
    except Exception as exc:  # noqa: BLE001 - the user's function: any error is its own
        text = " ".join(str(exc).split())
        said = f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__
        rule = f"raised {said} for {at(trial)} (its traceback is this error's __cause__)"
        raise ObjectiveError(name, trial, rule) from exc


def _caller_level() -> int:
    """The ``stacklevel`` of a warning that names the first caller outside the dse package (the
    user's ``Study.run`` line) rather than a line of dse."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(root + os.sep):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level
