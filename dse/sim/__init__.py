"""Simulators: a fluid model of the serving pipeline and its discrete-event reference."""

from typing import TYPE_CHECKING

from dse.lazy import exports

if TYPE_CHECKING:
    from dse.sim.api import SimulationReport, simulate, trajectories_frame
    from dse.sim.kinds import ArrivalKind, PlannerKind
    from dse.sim.scenario import Arrivals, OutputLengths, Pipeline, Planner, Scenario

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
__getattr__, __dir__ = exports(
    __name__,
    {
        **dict.fromkeys(["SimulationReport", "simulate", "trajectories_frame"], "dse.sim.api"),
        **dict.fromkeys(["ArrivalKind", "PlannerKind"], "dse.sim.kinds"),
        **dict.fromkeys(["Arrivals", "OutputLengths", "Pipeline", "Planner", "Scenario"], "dse.sim.scenario"),
    },
)
