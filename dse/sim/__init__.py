"""Simulators: a fluid model of the serving pipeline and its discrete-event reference."""

from dse.sim.api import SimulationReport, simulate, trajectories_frame
from dse.sim.scenario import (
    ArrivalKind,
    Arrivals,
    OutputLengths,
    Pipeline,
    Planner,
    PlannerKind,
    Scenario,
)

__all__ = [
    "ArrivalKind",
    "Arrivals",
    "OutputLengths",
    "Pipeline",
    "Planner",
    "PlannerKind",
    "Scenario",
    "SimulationReport",
    "simulate",
    "trajectories_frame",
]
