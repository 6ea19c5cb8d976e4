"""The kinds of traffic and of planner a simulation can run: plain enums, cheap to import (the CLI
offers them as choices); and the fluid steps a run must measure."""

from __future__ import annotations

import enum


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
