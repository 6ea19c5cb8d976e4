"""The kinds of traffic and of planner a simulation can run: plain enums, cheap to import (the CLI
offers them as choices); and the fluid steps a run must measure."""

from __future__ import annotations

import enum
import math


class ArrivalKind(enum.Enum):
    CONSTANT = "constant"
    BURST = "burst"  # constant, times ``burst_factor`` during [burst_start_s, burst_start_s + burst_s)
    DIURNAL = "diurnal"  # 1 + amplitude * sin(2 pi t / period)
    TRACE = "trace"  # piecewise-constant rates given per interval


class PlannerKind(enum.Enum):
    NONE = "none"
    REACTIVE = "reactive"  # moves instances toward the stage whose (delayed) backlog is larger
    HYSTERESIS = "hysteresis"  # reactive, with a dead band, two agreeing readings, and a wait for the
    # last move to show in the (delayed) measurements before the next
    PREDICTIVE = "predictive"  # sizes prefill from the arrival rate the router sees now


MIN_MEASURED_STEPS = 10
"""Fluid steps a simulation measures after its warm-up, at the least (a study's ``dt_s``, ``dse
simulate --dt``): its means need one, and its stability verdict a slope over three or more in the
last third of the run (``dse.sim.statistics.backlog_growth``, which calls fewer stable)."""


MAX_SUBSTEP_S = 2.0
"""The longest step the fluid model integrates (``dse.sim.fluid``): a longer ``dt`` is the reporting
step of its trajectories alone, integrated in the fewest equal sub-steps no longer than this. What
the kernel integrates sets it: the prefill and handoff queues fill and drain by a step's whole
excess (a burst's edge, an instance the planner moves) and the TTFT reads their waits, on the scale
of the targets it is judged against (the shipped studies' tightest: 2 s); the decode departures go
by backward Euler, exact in steady state but of first order in a transient of a request's decode
time ``L tau`` (5-25 s for 100-500 tokens at 50 ms), which the step must stay well under. Measured
(docs/engine.md, the simulators): the figures converge at first order in the step, at most 0.07% of
the TTFT mean per second of step; a 2 s step is within 0.35% of a 0.25 s one in every figure, where
one of 60 s was up to 12% off (the TTFT p99 of a diurnal rate; 28% with a planner). And 2 s is the
step the shipped studies run, so their answers stay as they were."""


MAX_STEPS = 1e6
"""Fluid time steps one run may take (a horizon over its integrated step, ``dse simulate``'s and a
study's): a week at one step a second; the kernel keeps every step's state (a study of 1e9 steps
had asked numpy for 52 GiB in its first trial)."""


def substeps(dt: float) -> int:
    """Sub-steps of one reporting step ``dt``: the fewest no longer than :data:`MAX_SUBSTEP_S`
    (one at or below it, so such a run is integrated as it always was)."""
    return max(1, math.ceil(dt / MAX_SUBSTEP_S))
