"""Placement: which units, how many, on which hardware, and where KV rests between turns.

The names below are imported on first use (PEP 562), so that importing a light submodule (the
request's enums, which the CLI offers as choices) does not import the solver.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dse.placement.plan import PlacementReport, PoolPlan, TierPlan, TopologyOutcome, place
    from dse.placement.request import Limits, PlacementRequest, Topology
    from formulations.placement_data import Objective

__all__ = [
    "Limits",
    "Objective",
    "PlacementReport",
    "PlacementRequest",
    "PoolPlan",
    "TierPlan",
    "Topology",
    "TopologyOutcome",
    "place",
]


def __getattr__(name: str) -> object:
    if name in ("PlacementReport", "PoolPlan", "TierPlan", "TopologyOutcome", "place"):
        import dse.placement.plan as api

        return getattr(api, name)
    if name in ("Limits", "PlacementRequest", "Topology"):
        import dse.placement.request as request

        return getattr(request, name)
    if name == "Objective":
        from formulations.placement_data import Objective

        return Objective
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
