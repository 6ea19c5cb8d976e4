"""The slow control loop, shared by the fluid and the discrete-event simulators.

Both simulators record measurements as they go and call :meth:`PlannerState.tick` every planner
period with the measurement that is ``delay_s`` old, so the two differ only in how they model the
traffic, never in the controller. Arrays hold one element per configuration.
"""

from __future__ import annotations

import bisect
from typing import Protocol

import numpy as np

from dse.sim.kinds import PlannerKind
from dse.sim.scenario import Array, Pipeline, Planner


class Measurements(Protocol):
    """What the planner reads: the backlogs (seconds of work) measured at or before ``t``."""

    def at(self, t: float) -> tuple[Array, Array]: ...


class MeasurementLog:
    """Time-stamped measurements per configuration, read back with a delay."""

    def __init__(self, n: int) -> None:
        self.times: list[float] = []
        self.prefill_backlog_s: list[Array] = []
        self.decode_backlog_s: list[Array] = []
        self.n = n

    def record(self, t: float, prefill_backlog_s: Array, decode_backlog_s: Array) -> None:
        """Append a measurement; times must not decrease."""
        self.times.append(t)
        self.prefill_backlog_s.append(prefill_backlog_s)
        self.decode_backlog_s.append(decode_backlog_s)

    def at(self, t: float) -> tuple[Array, Array]:
        """The latest measurement taken at or before ``t`` (zeros before the first)."""
        i = bisect.bisect_right(self.times, t) - 1
        if i < 0:
            return np.zeros(self.n), np.zeros(self.n)
        return self.prefill_backlog_s[i], self.decode_backlog_s[i]


class PlannerState:
    """Instances per role, including those switching roles (serving nothing until ready)."""

    def __init__(self, planner: Planner, pipe: Pipeline) -> None:
        self.planner = planner
        self.prefill = pipe.prefill_instances.astype(float).copy()
        self.decode = pipe.decode_instances.astype(float).copy()
        self.to_prefill = np.zeros(pipe.n)  # switching, not yet serving
        self.to_decode = np.zeros(pipe.n)
        self.ready_at = np.full(pipe.n, np.inf)
        self.previous = np.zeros(pipe.n)  # sign of the last reading (hysteresis)
        self.last_move = np.full(pipe.n, -np.inf)
        self.next_tick = planner.period_s if planner.kind is not PlannerKind.NONE else np.inf
        self.moves = np.zeros(pipe.n)  # moves made (each a step of each role), per configuration
        # an aggregated instance prefills and decodes both: no pool to move it to
        self.shared = pipe.arrays("prefill_time_share") > 0

    def release(self, t: float) -> None:
        """Switching instances whose reload finished start serving."""
        done = t >= self.ready_at
        if done.any():
            self.prefill = np.where(done, self.prefill + self.to_prefill, self.prefill)
            self.decode = np.where(done, self.decode + self.to_decode, self.decode)
            self.to_prefill = np.where(done, 0.0, self.to_prefill)
            self.to_decode = np.where(done, 0.0, self.to_decode)
            self.ready_at = np.where(done, np.inf, self.ready_at)

    def due(self, t: float) -> bool:
        return t >= self.next_tick

    def tick(self, t: float, log: Measurements, arrival_rate: Array, pipe: Pipeline) -> Array:
        """Decide moves at time ``t``; returns the moves toward prefill (negative: toward decode),
        each :attr:`~dse.sim.scenario.Pipeline.planner_prefill_step` servers for
        :attr:`~dse.sim.scenario.Pipeline.planner_decode_step` decode instances (the same GPUs),
        already removed from their old role and switching."""
        pl = self.planner
        # on the period's own schedule: a step that does not divide the period ticks at the first
        # step at or after each multiple of it (``t + period`` had drifted a 60 s period to 61.25 s
        # at a 1.75 s fluid step: a reactive planner's TTFT mean 26% off a fine step's)
        while self.next_tick <= t:
            self.next_tick += pl.period_s
        bp, bd = log.at(t - pl.delay_s)
        ps, ds = pipe.arrays("planner_prefill_step"), pipe.arrays("planner_decode_step")
        if pl.kind is PlannerKind.PREDICTIVE:
            want = np.ceil(arrival_rate * pipe.prefill_s / pl.target_utilisation)
            short = (want - (self.prefill + self.to_prefill)) / ps  # in moves: enough toward prefill,
            move = np.where(short > 0, np.ceil(short), np.trunc(short))  # whole ones of a surplus
        else:
            gap = bp - bd
            move = np.where(
                np.abs(gap) > pl.threshold_s, np.sign(gap) * np.ceil(np.abs(gap) / pl.threshold_s), 0.0
            )
            if pl.kind is PlannerKind.HYSTERESIS:
                agree = np.sign(move) == self.previous
                self.previous = np.sign(move)
                # a dead band twice as wide, two readings that agree, one instance at a time, and
                # no move until the last one shows in the (delayed) measurements
                settled = t >= self.last_move + pl.delay_s + pl.switch_s
                move = np.where(agree & settled & (np.abs(gap) > 2.0 * pl.threshold_s), np.sign(move), 0.0)
        move = np.where(self.shared, 0.0, np.clip(move, -pl.max_move, pl.max_move))
        # whole moves each role can give, one of each kept serving
        give_p = np.maximum(np.floor((self.prefill - 1.0) / ps), 0.0)
        give_d = np.maximum(np.floor((self.decode - 1.0) / ds), 0.0)
        move = np.clip(move, -give_p, give_d)
        move = np.where(self.to_prefill + self.to_decode > 0, 0.0, move)  # one switch at a time
        up, down = np.maximum(move, 0.0), np.maximum(-move, 0.0)
        self.decode -= up * ds
        self.prefill -= down * ps
        self.to_prefill += up * ps
        self.to_decode += down * ds
        self.ready_at = np.where(move != 0, t + pl.switch_s, self.ready_at)
        self.last_move = np.where(move != 0, t, self.last_move)
        self.moves += np.abs(move)
        return move
