"""What a placement is asked for: model, traffic, targets, candidates, topology, objective, caps."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from dse.errors import InputError
from dse.units import Precision
from dse.workload import Slo, Workload
from formulations.placement_data import Objective


class Topology(enum.Enum):
    AGGREGATED = "aggregated"  # prefill and decode share each instance (chunked prefill)
    DISAGGREGATED = "disaggregated"  # prefill pool hands KV to a decode pool
    AFD = "afd"  # disaggregated, and decode attention split from decode experts
    AUTO = "auto"  # solve each of the above, keep the best

    def concrete(self) -> tuple[Topology, ...]:
        if self is Topology.AUTO:
            return (Topology.AGGREGATED, Topology.DISAGGREGATED, Topology.AFD)
        return (self,)


PRICE_TIERS = ("own_hyperscaler", "own_neocloud", "rent_3yr")


@dataclass(frozen=True)
class Limits:
    """Optional caps; ``None`` means no cap."""

    budget_usd_hour: float | None = None
    power_kw: float | None = None
    inventory_gpus: dict[str, int] = field(default_factory=dict)  # hardware id -> GPUs available
    network_kv_capacity_tb: float | None = None


@dataclass(frozen=True)
class PlacementRequest:
    model: str
    hardware: tuple[str, ...]
    workload: Workload
    slo: Slo
    topology: Topology = Topology.AUTO
    objective: Objective = Objective.COST
    price_tier: str = "own_hyperscaler"
    engine: str = "trt"  # engine profile of the calibration (kernel speed, KV precision)
    weight_precision: Precision = Precision.FP8  # routed-expert weights
    mtp: bool = False
    limits: Limits = Limits()
    network_kv_usd_per_tb_hour: float = 0.0  # no sourced price: zero unless the user sets one
    latency_usd_per_s: float = 0.0  # value of a request-second of reload wait
    time_limit_s: float | None = 30.0
    mip_rel_gap: float = 1e-4

    def __post_init__(self) -> None:
        if not self.hardware:
            raise InputError("placement request", "hardware", "needs at least one hardware id")
        if self.price_tier not in PRICE_TIERS:
            raise InputError(
                "placement request", "price_tier", f"must be one of {', '.join(PRICE_TIERS)}", self.price_tier
            )
        if self.objective is Objective.GOODPUT and self.limits.budget_usd_hour is None:
            raise InputError(
                "placement request",
                "limits.budget_usd_hour",
                "is required by the goodput objective (the most traffic a budget serves)",
            )
