"""The numbers a placement MILP is built from: plain arrays, no engine objects.

The engine (``dse.placement.candidates``) turns a model, hardware and workload into this; the
formulation, the checker and the brute-force reference all read the same object, so they cannot
disagree about inputs. Units: requests/s, tokens/s, seconds, GB, GB/s, $/hour, watts.

Index sets
----------
``h`` hardware, ``u`` candidate units (a serving instance of one role on one hardware at one
operating point), ``c`` KV classes (returning turns binned by think time), ``t`` tiers
(:data:`TIERS`: where a class's KV rests between turns, or ``drop`` to recompute it).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy for the annotations only: the CLI reads the enums below at start-up
    import numpy as np

    Array = np.ndarray

TIERS = ("hbm", "dram", "nvme", "network", "drop")
"""Where a class's KV rests between turns. ``drop`` frees it and recomputes the prefix on return."""
LINK_TIERS = ("dram", "nvme", "network")  # reloads cross a link whose bandwidth is a row per unit
CAPACITY_TIERS = ("hbm", "dram", "nvme")  # resting KV fills room per unit (network: one shared row)


class Role(enum.IntEnum):
    """What a unit does. Mixed units run prefill and decode on the same GPUs (aggregated)."""

    PREFILL = 0
    DECODE = 1
    MIXED = 2
    ATTENTION = 3  # decode attention of an attention-FFN disaggregated deployment
    FFN = 4  # decode experts of an attention-FFN disaggregated deployment
    MIDFILL = 5  # returning turns only (KV reload, suffix prefill), handed to decode: four-stage

    @property
    def prefills(self) -> bool:
        return self in (Role.PREFILL, Role.MIXED, Role.MIDFILL)

    @property
    def hands_off(self) -> bool:
        """Prefills for a separate decode pool, so hands it the KV over the NIC."""
        return self in (Role.PREFILL, Role.MIDFILL)


class Objective(enum.Enum):
    COST = "cost"  # $/hour (so $ per million tokens at the fixed demand)
    GPUS = "gpus"
    GOODPUT = "goodput"  # largest multiple of the demand served under the budget


@dataclass(frozen=True)
class PlacementData:
    """Everything the placement MILP needs. Arrays are read-only by convention."""

    # hardware, shape (H,)
    hw_names: tuple[str, ...]
    sale_gpus: Array  # GPUs per purchasable unit (8-GPU node, 72-GPU rack)
    usd_per_gpu_hour: Array
    watts_per_gpu: Array
    inventory_gpus: Array  # inf when unlimited
    tier_gb_per_gpu: Array  # (H, T) capacity to rest idle KV per GPU (hbm column unused)
    tier_gb_s_per_gpu: Array  # (H, T) reload bandwidth per GPU (hbm and drop columns unused)
    # (a unit's DRAM and NVMe room and its reload links count its GPUs that hold distinct shares
    # of the resting KV, ``unit_kv_gpus``: a GPU holding a copy holds it in its host tiers too)
    # units, shape (U,)
    unit_names: tuple[str, ...]
    unit_hw: Array  # int index into hardware
    unit_role: Array  # int Role
    unit_gpus: Array
    prefill_share: Array  # busy-time fraction a unit may spend prefilling and still meet TTFT
    fresh_s: Array  # busy seconds to prefill one fresh request; inf where TTFT cannot be met
    decode_tok_s: Array  # output tokens/s one unit sustains at the TPOT target
    hbm_idle_gb: Array  # HBM one unit can lend to resting KV at its operating point
    nic_gb_s: Array  # usable NIC bandwidth of one unit (KV handoff, attention-FFN traffic)
    # per unit, class and tier, shape (U, C, T): busy seconds to serve one returning request of
    # class c whose KV rests in tier t (reload + suffix, or full recompute for drop); inf where
    # the reload misses the TTFT target or the unit cannot prefill
    mid_s: Array
    reload_s: Array  # (U, C, T) seconds the tier adds to that request's TTFT over a prefix in HBM
    # classes, shape (C,)
    class_names: tuple[str, ...]
    class_per_s: Array  # returning requests/s of the class at demand scale 1
    class_dwell_s: Array  # mean time its KV rests between turns (Little's law)
    class_gb: Array  # KV of one resting session
    class_handoff_gb: Array  # KV handed from a prefill unit to decode after the midfill
    # demand at scale 1
    fresh_per_s: float
    output_tokens: float  # per request
    fresh_handoff_gb: float  # KV handed from prefill to decode per fresh request
    # attention<->FFN traffic per output token an FFN unit serves, per unit (a scalar: the same for
    # every unit); 0 if not split. The hidden states fan out to the expert GPUs a token's experts
    # are on, so it depends on the FFN unit's shape (dse.perf.afd.afd_bytes_per_token)
    afd_gb_per_token: float | Array
    # attention-FFN units in one scale-up domain (dse.perf.afd.afd_in_domain), per unit (U,):
    # ``afd_partner``, for an FFN unit, the index of the attention unit of its shape at its pace
    # that it pairs with (-1 for every other unit, and an FFN unit without one); for an FFN unit
    # whose unit with its partner fits in one domain (the others 0): ``afd_attention_per_ffn``,
    # the attention instances at most beside one of its instances, ``afd_ffn_per_attention``, the
    # expert instances at most one attention instance's tokens are shared over, and
    # ``afd_units_per_domain``, the units (of those instances) one domain holds. Such a unit's
    # hidden states stay on NVLink: its ``afd_gb_per_token`` is 0. None: no such pairs.
    afd_partner: Array | None = None
    afd_attention_per_ffn: Array | None = None
    afd_ffn_per_attention: Array | None = None
    afd_units_per_domain: Array | None = None
    # attention-FFN units across the NICs sized for the expert units they feed
    # (:mod:`formulations.fan_out`), per unit (U,): an FFN unit's fan-out level (0 the narrowest of
    # the expert shapes offered across the NICs), an attention unit's reach (the level its batch is
    # capped for), -1 for every other unit. None: no expert shape serves across the NICs.
    afd_fan_level: Array | None = None
    # caps (inf when absent)
    budget_usd_hour: float = float("inf")
    power_w: float = float("inf")
    network_capacity_gb: float = float("inf")
    network_usd_per_gb_hour: float = 0.0
    dram_usd_per_gb_hour: float = 0.0  # capex of host DRAM that resting KV fills, per GB-hour
    nvme_usd_per_gb_hour: float = 0.0
    # energy at full draw, $ per GPU-hour bought (None: 0): the objective's, not the cost's, since
    # the evaluation prices energy at the designs' real utilisation on top of the cost
    energy_usd_per_gpu_hour: Array | None = None
    latency_usd_per_s: float = 0.0  # penalty per request-second of reload time added to TTFTs
    objective: Objective = Objective.COST
    # (U,) sequences one instance of a decoding unit runs (its slots; 0 elsewhere) and the
    # headroom its pool keeps free for the traffic's fluctuation (:mod:`formulations.slots`);
    # None or 0: a pool's slots may be all in use
    decode_slots: Array | None = None
    slot_beta: float = 0.0
    # the multiple of the demand the slot rows are sized for: 1, or a goodput placement's reach
    # (dse.placement.plan settles it on the scale the placement reaches)
    slot_scale: float = 1.0
    # (U,) GPUs of one instance that hold distinct shares of the KV (its attention-DP ranks times
    # the useful head split, every pipeline stage's: dse.placement.rows.UnitInfo.kv_shard). The
    # others hold copies, in their hosts' DRAM and NVMe as in HBM: the engines keep a host tier
    # per GPU rank, so a unit rests in DRAM and NVMe, and reloads over its links, what these GPUs'
    # shares hold. None: every GPU holds a share of its own.
    unit_kv_gpus: Array | None = None
    # (U,) GB of each GPU's host DRAM its engine keeps as a copy of the GPU's own KV pool (SGLang's
    # hierarchical cache writes the GPU's KV through to a host pool that must be larger than it):
    # the DRAM tier's room a GPU is the rest (``dram_room_gb``). None: no such copy.
    unit_host_mirror_gb: Array | None = None

    @property
    def kv_gpus(self) -> Array:
        """:attr:`unit_kv_gpus`, or every GPU of a unit where it is None."""
        return self.unit_gpus if self.unit_kv_gpus is None else self.unit_kv_gpus

    @property
    def dram_room_gb(self) -> Array:
        """(U,) GB of host DRAM a GPU of each unit has for resting KV: its hardware's DRAM tier less
        :attr:`unit_host_mirror_gb`, at least 0."""
        import numpy as np  # not at import: the CLI reads this module's enums at start-up

        room = self.tier_gb_per_gpu[self.unit_hw, TIERS.index("dram")]
        if self.unit_host_mirror_gb is None:
            return room
        return np.maximum(room - self.unit_host_mirror_gb, 0.0)

    @property
    def n_hw(self) -> int:
        return len(self.hw_names)

    @property
    def n_units(self) -> int:
        return len(self.unit_names)

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def total_per_s(self) -> float:
        return self.fresh_per_s + float(self.class_per_s.sum())

    def structure(self) -> tuple[object, ...]:
        """What fixes the shape of the built model; data with the same structure re-solves in
        place (caps are rows whose bound is infinite when absent, so they do not change it)."""
        pairs = () if self.afd_partner is None else tuple(self.afd_partner.tolist())
        fans = () if self.afd_fan_level is None else tuple(self.afd_fan_level.tolist())
        units = (tuple(self.unit_hw.tolist()), tuple(self.unit_role.tolist()))
        return (self.n_hw, *units, self.n_classes, pairs, fans)


@dataclass(frozen=True)
class PlacementSolution:
    """Values of the decision variables, in the units of :class:`PlacementData`."""

    sale_units: Array  # (H,) integer nodes or racks bought
    instances: Array  # (U,) integer instances of each unit
    fresh: Array  # (U,) fresh requests/s prefilled on each unit
    returning: Array  # (U, C, T) returning requests/s per unit, class and tier
    scale: float  # multiple of the demand served
