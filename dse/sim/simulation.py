"""`simulate`: the fluid model, optionally beside the discrete-event reference, as one report."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, fields, replace

import numpy as np
import polars as pl

from dse.errors import InputError
from dse.perf.memo import Memo, frozen
from dse.sim.des import simulate_des
from dse.sim.fluid import simulate_fluid
from dse.sim.kinds import ArrivalKind, PlannerKind
from dse.sim.kv_tiers import TIER_NAMES, RestingClass, resting_kv_gb
from dse.sim.outputs import Summary, Trajectories, row_times
from dse.sim.scenario import Array, Arrivals, Pipeline, Planner, Scenario


@dataclass(frozen=True)
class SimulationReport:
    pipeline: Pipeline
    scenario: Scenario
    fluid: Summary
    fluid_trajectories: Trajectories
    fluid_s: float  # wall-clock seconds
    reference: Summary | None = None  # discrete-event run of configuration 0
    reference_trajectories: Trajectories | None = None
    reference_s: float = float("nan")
    resting_kv_gb: dict[str, Array] = field(default_factory=dict)  # tier -> GB at the fluid's row times


def simulate(
    pipe: Pipeline,
    scenario: Scenario,
    *,
    reference: bool = False,
    seed: int = 0,
    dt: float = 1.0,
    kv_gb_per_seq: float = 0.0,
    resting: tuple[RestingClass, ...] = (),
) -> SimulationReport:
    """Simulate every configuration with the fluid model; with ``reference``, configuration 0 also
    request by request (seeded). ``resting`` classes give the KV resting per tier over time."""
    _check_inputs(scenario, dt, seed)
    t0 = time.perf_counter()
    fluid, ftraj = _fluid(pipe, scenario, dt, kv_gb_per_seq)
    # read where the fluid's rows hold their queues, at each step's end (row_times)
    at = row_times(ftraj, "fluid", scenario.horizon_s)
    tiers = resting_kv_gb(resting, scenario.arrivals, at) if resting else {}
    t_fluid = time.perf_counter() - t0
    if not reference:
        return SimulationReport(pipe, scenario, fluid, ftraj, t_fluid, resting_kv_gb=tiers)
    t0 = time.perf_counter()
    des, dtraj, _ = simulate_des(pipe.one(0), scenario, seed=seed)
    # the KV of the sequences decoding, as the fluid model counts it (the reference had written 0s)
    dtraj = replace(dtraj, kv_active_gb=dtraj.decode_batch * dtraj.decode_instances * kv_gb_per_seq)
    return SimulationReport(
        pipe, scenario, fluid, ftraj, t_fluid, des, dtraj, time.perf_counter() - t0, tiers
    )


def _check_inputs(scenario: Scenario, dt: float, seed: int) -> None:
    """The rules `dse simulate` holds its flags to, for a call from Python: a negative rate had
    simulated a TTFT of -11.7 s and called it stable, a NaN one the design's capacity, and a zero
    step, a zero-mean length or a warm-up past the horizon had ended in a numpy traceback."""
    a, lengths = scenario.arrivals, scenario.lengths

    def refuse(field: str, rule: str, value: object) -> None:
        raise InputError("simulate", field, rule, value)

    if not (math.isfinite(a.rate_per_s) and a.rate_per_s >= 0):
        refuse("scenario.arrivals.rate_per_s", "must be a finite number >= 0 (requests/s)", a.rate_per_s)
    _check_arrivals(a, refuse)
    _check_planner(scenario.planner, refuse)
    shares, means = tuple(lengths.shares), tuple(lengths.means)
    if not shares or len(shares) != len(means):
        refuse("scenario.lengths", "must give as many shares as means, one at least", lengths)
    if any(not (math.isfinite(x) and x >= 0) for x in shares) or not math.isclose(
        sum(shares), 1.0, abs_tol=1e-6
    ):
        refuse("scenario.lengths.shares", "must be fractions >= 0 that sum to 1", shares)
    if any(not (math.isfinite(m) and m >= 1) for m in means):
        refuse("scenario.lengths.means", "must be finite and at least 1 token each", means)
    if not (math.isfinite(scenario.horizon_s) and scenario.horizon_s > 0):
        refuse("scenario.horizon_s", "must be a finite number > 0 (seconds)", scenario.horizon_s)
    if not 0 <= scenario.warmup_s < scenario.horizon_s:
        refuse("scenario.warmup_s", "must be at least 0 and below horizon_s", scenario.warmup_s)
    if not (math.isfinite(dt) and 0 < dt <= scenario.horizon_s):
        refuse("dt", "must be a finite number > 0 and at most horizon_s (seconds)", dt)
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        refuse("seed", "must be a whole number >= 0", seed)


def _check_arrivals(a: Arrivals, refuse: Callable[[str, str, object], None]) -> None:
    """The arrivals' own numbers by the rules of `dse simulate`'s flags: a kind given as its
    string had run as constant arrivals (a burst's TTFT 0.31 s where it is 189 s), a negative
    factor, a swing past the rate or a negative trace rate had made arrivals negative (TTFT
    -24.3 s), an empty trace ended in an IndexError."""
    at = "scenario.arrivals."
    if not isinstance(a.kind, ArrivalKind):
        refuse(
            at + "kind", f"must be an ArrivalKind: one of {', '.join(k.name for k in ArrivalKind)}", a.kind
        )
    if a.kind is ArrivalKind.BURST:
        for key, value, ok, rule in (
            ("burst_factor", a.burst_factor, a.burst_factor > 0, "> 0 (a multiple of the rate)"),
            ("burst_s", a.burst_s, a.burst_s > 0, "> 0 (seconds)"),
            ("burst_start_s", a.burst_start_s, a.burst_start_s >= 0, ">= 0 (seconds)"),
        ):
            if not (math.isfinite(value) and ok):
                refuse(at + key, f"must be a finite number {rule}", value)
    if a.kind is ArrivalKind.DIURNAL:
        if not 0 <= a.amplitude <= 1:  # past 1 the rate swings below 0
            refuse(at + "amplitude", "must be between 0 and 1 (a fraction of the rate)", a.amplitude)
        if not (math.isfinite(a.period_s) and a.period_s > 0):
            refuse(at + "period_s", "must be a finite number > 0 (seconds)", a.period_s)
    if a.kind is ArrivalKind.TRACE:
        times, rates = tuple(a.trace_times_s), tuple(a.trace_rates)
        if not times or len(times) != len(rates):
            refuse(
                at + "trace_times_s", "must give as many interval starts as trace_rates, one at least", times
            )
        if any(not math.isfinite(t) for t in times) or any(b <= t for t, b in itertools.pairwise(times)):
            refuse(at + "trace_times_s", "must be finite and strictly ascending (seconds)", times)
        if any(not (math.isfinite(r) and r >= 0) for r in rates):
            refuse(at + "trace_rates", "must be finite numbers >= 0 (requests/s)", rates)


def _check_planner(p: Planner, refuse: Callable[[str, str, object], None]) -> None:
    """The planner's times by the rules of `dse simulate`'s flags: a period of 0 had never
    returned (the next decision never came later)."""
    if not isinstance(p.kind, PlannerKind):
        refuse(
            "scenario.planner.kind",
            f"must be a PlannerKind: one of {', '.join(k.name for k in PlannerKind)}",
            p.kind,
        )
    if not (math.isfinite(p.period_s) and p.period_s > 0):
        refuse("scenario.planner.period_s", "must be a finite number > 0 (seconds)", p.period_s)
    for key, value in (("delay_s", p.delay_s), ("switch_s", p.switch_s)):
        if not (math.isfinite(value) and value >= 0):
            refuse(f"scenario.planner.{key}", "must be a finite number >= 0 (seconds)", value)


# A study's trials check the same design again and again (a decode cap past what the KV cache holds
# changes nothing: a third of the headline study's fluid runs repeat one exactly), so a single
# configuration's run is kept by its exact inputs (about 200 kB a run of 1,800 steps).
_FLUID = Memo(128)


def _fluid(
    pipe: Pipeline, scenario: Scenario, dt: float, kv_gb_per_seq: Array | float
) -> tuple[Summary, Trajectories]:
    """:func:`simulate_fluid`, run once per process for the same inputs where ``pipe`` is one
    configuration (a trial's design; what is kept is shared, so its arrays are read-only)."""
    if pipe.n != 1:
        return simulate_fluid(pipe, scenario, dt=dt, kv_gb_per_seq=kv_gb_per_seq)

    def run() -> tuple[Summary, Trajectories]:
        summary, traj = simulate_fluid(pipe, scenario, dt=dt, kv_gb_per_seq=kv_gb_per_seq)
        return frozen(summary), frozen(traj)

    key = (
        tuple(_exact(getattr(pipe, f.name)) for f in fields(pipe)),
        repr(scenario),
        _exact(dt),
        _exact(kv_gb_per_seq),
    )
    return _FLUID.get(key, None, run)


def _exact(v: object) -> Hashable:
    """``v`` as a key that tells apart whatever a run could tell apart: an array by its type, shape and
    bytes, anything else by its type and exact text (1 and 1.0 give other arrays)."""
    if isinstance(v, np.ndarray):
        return v.dtype.str, v.shape, v.tobytes()
    return type(v).__name__, repr(v)


TRAJECTORY_COLUMNS = {
    "arrival_rate": "arrival_rate_per_s",
    "prefill_queue": "prefill_queue_requests",
    "buffer": "buffer_requests",
    "decode_batch": "decode_batch_per_instance",
    "prefill_instances": "prefill_servers",  # an instance batching m prompts per forward is m
    "decode_instances": "decode_instances",
    "completions_per_s": "completions_per_s",
    "kv_active_gb": "kv_active_gb",
}


def trajectories_frame(report: SimulationReport) -> pl.DataFrame:
    """One row per simulator, configuration and sample; units in the column names; ``t_s`` the
    time its queues hold at (:func:`row_times`)."""
    frames = []
    runs = [("fluid", report.fluid_trajectories)]
    if report.reference_trajectories is not None:
        runs.append(("des", report.reference_trajectories))
    for name, tr in runs:
        n, m = tr.prefill_queue.shape
        t = row_times(tr, name, report.scenario.horizon_s)
        cols = {"simulator": [name] * (n * m), "config": np.repeat(np.arange(n), m), "t_s": np.tile(t, n)}
        for attr, col in TRAJECTORY_COLUMNS.items():
            cols[col] = np.asarray(getattr(tr, attr), dtype=float).reshape(-1)
        for tier in TIER_NAMES:  # resting KV is a fluid quantity; the reference leaves it empty
            series = report.resting_kv_gb.get(tier)
            if name != "fluid":  # null, not nan: readers skip a missing value, nan poisons a sum
                cols[f"resting_kv_{tier}_gb"] = pl.repeat(None, n * m, dtype=pl.Float64, eager=True)
            else:  # none resting (no returning turns) is 0 GB, which sums, not a missing value
                cols[f"resting_kv_{tier}_gb"] = np.tile(series, n) if series is not None else np.zeros(n * m)
        frames.append(pl.DataFrame(cols))
    return pl.concat(frames)
