"""Placement: which units, how many, on which hardware, and where KV rests between turns."""

from typing import TYPE_CHECKING

from dse.lazy import exports

if TYPE_CHECKING:
    from dse.placement.api import PlacementReport, PoolPlan, TierPlan, TopologyOutcome, place
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
__getattr__, __dir__ = exports(
    __name__,
    {
        **dict.fromkeys(
            ["PlacementReport", "PoolPlan", "TierPlan", "TopologyOutcome", "place"], "dse.placement.api"
        ),
        **dict.fromkeys(["Limits", "PlacementRequest", "Topology"], "dse.placement.request"),
        "Objective": "formulations.placement_data",
    },
)
