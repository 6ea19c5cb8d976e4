"""Simulators: a fluid model of the serving pipeline and its discrete-event reference.

The names below are imported on first use (PEP 562), so that the CLI can offer the arrival and
planner kinds as choices without compiling the simulators.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dse.sim.kinds import ArrivalKind, PlannerKind
    from dse.sim.scenario import Arrivals, OutputLengths, Pipeline, Planner, Scenario
    from dse.sim.simulation import SimulationReport, simulate, trajectories_frame

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


def __getattr__(name: str) -> object:
    if name in ("SimulationReport", "simulate", "trajectories_frame"):
        import dse.sim.simulation as api

        return getattr(api, name)
    if name in ("ArrivalKind", "PlannerKind"):
        import dse.sim.kinds as kinds

        return getattr(kinds, name)
    if name in ("Arrivals", "OutputLengths", "Pipeline", "Planner", "Scenario"):
        import dse.sim.scenario as scenario

        return getattr(scenario, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
