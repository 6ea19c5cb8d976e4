"""Placement: which units, how many, on which hardware, and where KV rests between turns."""

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
