"""A candidate unit as the reports name it (:class:`UnitInfo`) and as the placement MILP prices it
(:class:`Row`): what every role's builder fills (:mod:`dse.placement.candidates`,
:mod:`dse.placement.afd_units`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dse.perf.pool import Array
from dse.placement.shapes import Parallel
from formulations.placement_data import TIERS, Role


@dataclass(frozen=True)
class UnitInfo:
    """What a unit is, for reports: one entry per MILP unit."""

    name: str
    hardware: str
    role: Role
    parallel: Parallel
    decode_batch: float  # sequences per instance
    prefill_share: float  # aggregated units: time share given to prefill
    hbm_gb_per_gpu: float  # weights + KV of the work in flight at the operating point
    weights_gb_per_gpu: float
    ttft_s: float  # fresh request at the unit's utilisation cap (nan for decode-only units)
    tpot_s: float  # nan for prefill-only units
    prefill_batch_requests: float = 0.0  # fresh prompts one prefill forward batches together, at most
    prefill_forward_requests: float = 0.0  # prompts a forward batches at its load (0: at most)
    kv_shard: float = 1.0  # GPUs a copy of a sequence's KV is split over, stages too (resting KV per GPU)


@dataclass
class Row:
    """MILP coefficients of one unit, filled by a role builder."""

    info: UnitInfo
    shape: int
    n_classes: int
    share: float = 0.0
    fresh_s: float = np.inf
    dec: float = 0.0
    hbm_idle: float = 0.0
    nic: float = 0.0
    mid: Array = field(default_factory=lambda: np.zeros(0))
    reload: Array = field(default_factory=lambda: np.zeros(0))
    forward_prompts: float = 0.0  # prompts a prefill forward batches at the unit's load (0: at most)
    # an FFN unit: its shape's attention row (-1: none); where the two make a unit in one scale-up
    # domain, the attention instances at most beside one instance, the expert instances at most
    # one attention instance's tokens are shared over, and the units one domain holds (else 0)
    partner: int = -1
    beside: float = 0.0
    spread: float = 0.0
    per_domain: float = 0.0
    # across the NICs, an FFN unit's fan-out level and an attention unit's reach (-1: none; see
    # formulations.fan_out)
    fan: int = -1

    def __post_init__(self) -> None:
        if self.mid.size == 0:
            self.mid = np.full((self.n_classes, len(TIERS)), np.inf)
            self.reload = np.zeros((self.n_classes, len(TIERS)))
