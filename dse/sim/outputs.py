"""What a simulation returns: trajectories and a summary, the same shape from both simulators."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dse.quantiles import percentile
from dse.sim.kinds import ArrivalKind
from dse.sim.scenario import Array, Scenario
from dse.sim.statistics import (
    FLUID_GROWTH_SHARE,
    FLUID_MIN_BACKLOG_S,
    GROWTH_SHARE,
    MIN_BACKLOG_S,
    Oscillation,
    backlog_growth,
    detect_oscillation,
)


def e2e_p99(ttft_mean: Array, ttft_p99: Array, decode_mean_s: Array, decode_p99_s: Array) -> Array:
    """A fluid run's 99th percentile of end-to-end time: the larger of its two parts' tails, each
    with the other at its mean (the TTFT p99 with a mean answer's decode, a p99 answer's decode
    with the mean TTFT). The second alone had given 31.0 s beside a TTFT p99 of 51.6 s under a
    burst's queue (the discrete-event reference: 58.7 s; now 56.1 s); where the decode dominates it
    is the figure, within 1-3% of the reference (docs/accuracy.md). Drawing the two apart as a
    shift plus an exponential tail of the TTFT came 8-26% off the reference there. Per config,
    arrays in and out."""
    return np.maximum(ttft_mean + decode_p99_s, ttft_p99 + decode_mean_s)


@dataclass(frozen=True)
class Trajectories:
    """Sampled state, shape (configs, samples); ``t`` is shared."""

    t: Array
    arrival_rate: Array  # requests/s
    prefill_queue: Array  # requests upstream of the buffer: reloading, waiting for or in prefill, handing off
    buffer: Array  # prefilled requests waiting for a decode slot
    decode_batch: Array  # sequences per decode instance
    prefill_instances: Array  # serving (switching ones excluded)
    decode_instances: Array
    completions_per_s: Array
    kv_active_gb: Array  # KV of the sequences decoding
    # the fluid model's ``prefill_queue`` and ``buffer`` count the prompts in prefill and the
    # requests its stationary waits hold (arrivals x the wait its TTFT adds below capacity, by
    # Little's law), which its state does not: its state's own queues, empty below capacity and
    # growing by the excess above it (None for the reference, whose queues are all real requests)
    queued: Array | None = None
    queued_buffer: Array | None = None  # of ``queued``, the buffer's (the rest is upstream of it)

    def backlog(self) -> Array:
        return self.prefill_queue + self.buffer


@dataclass(frozen=True)
class Summary:
    """Per configuration, over the horizon after the warm-up."""

    requests_per_s: Array
    output_tokens_per_s: Array
    ttft_mean_s: Array
    ttft_p99_s: Array
    tpot_mean_s: Array
    tpot_p99_s: Array
    e2e_mean_s: Array
    e2e_p99_s: Array
    stable: Array  # bool
    backlog_growth_per_s: Array
    # what the growth was judged over: the span of the whole periods whose mean it compares with
    # the one before (statistics.backlog_growth), nan where it is the slope over the last third
    growth_window_s: Array
    oscillating: Array  # bool
    oscillation_period_s: Array
    # the swing (half the 5-95% range after the warm-up) of the signal the oscillation is judged
    # on, in that signal's unit: the prefill servers where a planner moved them after the warm-up,
    # else the requests in the prefill queue; nan in the column of the signal not judged
    # (:func:`swings`: one amplitude column had held either, unnamed)
    swing_prefill_servers: Array
    swing_prefill_queue_requests: Array
    near_capacity: Array  # bool: percentiles are low-confidence here
    planner_moves: Array
    # the most requests in ``Trajectories.prefill_queue`` and ``buffer`` over the whole run, the
    # warm-up too; the fluid's at every step it integrates, so a coarse reporting step, whose rows
    # are the state at each step's end, reports a burst's peak between them (a 20 s burst's queue
    # of 75 requests had read 0.5 at a 60 s step); the reference's at its samples
    prefill_queue_peak_requests: Array
    buffer_peak_requests: Array


def verdicts(
    traj: Trajectories, scenario: Scenario, *, fluid: bool = False
) -> tuple[Array, Array, Array, list[Oscillation]]:
    """(stable, growth, its window, oscillation per configuration): the oscillation of prefill
    instances when a planner moves them, else of the prefill queue; backlog growth over the last
    third, or over the last two periods of a swing (a diurnal rate's where no planner moves
    servers, else the oscillation's). ``fluid`` judges the growth without the allowance a run of
    drawn requests needs for its noise; a trajectory with its state's own queues
    (``traj.queued``) is judged on them: the prompts in prefill and the requests its stationary
    waits hold grow with the arrival rate, not with an excess, and a rise late in the run below
    capacity had been called unstable."""
    after = traj.t >= scenario.warmup_s
    rate = float(np.mean(scenario.arrivals.rate(traj.t)))
    cp = traj.prefill_instances[:, after]
    moved = (cp.max(axis=1) > cp.min(axis=1)) if after.any() else np.zeros(len(cp), dtype=bool)
    signal = np.where(moved[:, None], traj.prefill_instances, traj.prefill_queue)[:, after]
    floor = np.where(moved, 1.0, max(1.0, 0.5 * rate))
    # the autocorrelation only where the swing is large enough to matter
    if signal.shape[1]:
        lo = np.array([percentile(row, 5.0) for row in signal])
        hi = np.array([percentile(row, 95.0) for row in signal])
    else:
        lo, hi = np.zeros(1), np.zeros(1)
    swing = (hi - lo) / 2.0
    osc = [
        replace(
            detect_oscillation(traj.t[after], signal[i], min_amplitude=floor[i])
            if swing[i] >= floor[i]
            else Oscillation(False, float("nan"), float(swing[i])),
            servers=bool(moved[i]),
        )
        for i in range(len(signal))
    ]
    diurnal = scenario.arrivals.period_s if scenario.arrivals.kind is ArrivalKind.DIURNAL else np.nan
    # a swing no planner drives is the diurnal rate's: judged on its exact period, not on the one
    # the autocorrelation of a noisy run detects (596-606 s for a 600 s rate)
    own = [o.detected and (o.servers or np.isnan(diurnal)) for o in osc]
    period = np.array([o.period_s if mine else diurnal for o, mine in zip(osc, own, strict=True)])
    share, least = (FLUID_GROWTH_SHARE, FLUID_MIN_BACKLOG_S) if fluid else (GROWTH_SHARE, MIN_BACKLOG_S)
    backlog = traj.backlog() if traj.queued is None else traj.queued
    stable, growth, window = backlog_growth(
        traj.t, backlog, rate, period_s=period, share=share, min_backlog_s=least, peaks=fluid
    )
    return stable, growth, window, osc


def swings(osc: list[Oscillation]) -> dict[str, Array]:
    """:class:`Summary`'s amplitude columns: each oscillation's swing in the column of the signal
    it was judged on (prefill servers, or requests in the prefill queue), nan in the other."""
    amp = np.array([o.amplitude for o in osc], dtype=float)
    on = np.array([o.servers for o in osc], dtype=bool)
    return {
        "swing_prefill_servers": np.where(on, amp, np.nan),
        "swing_prefill_queue_requests": np.where(on, np.nan, amp),
    }


def row_times(tr: Trajectories, simulator: str, horizon_s: float) -> Array:
    """The time each row's queues hold at: a fluid row's step's end (its rates are the step's
    means), a discrete-event sample's own instant. The fluid's rows had been labelled with their
    step's start, a whole step ahead of the reference's samples at the same label."""
    if simulator != "fluid":
        return tr.t
    step = float(tr.t[1] - tr.t[0]) if len(tr.t) > 1 else horizon_s
    return tr.t + step
