"""What a placement is asked for: model, traffic, targets, candidates, topology, objective, caps."""

from __future__ import annotations

import enum
import functools
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from dse.errors import InputError
from dse.placement.parallel import canonical_shape
from dse.typed_data import (
    Rule,
    acceptance,
    at_least_one,
    build,
    check_number,
    draft_depth,
    gap_rule,
    non_negative,
    positive,
    to_plain,
)
from dse.units import Precision
from dse.workload import Slo, Workload
from formulations.placement_data import Objective


class Topology(enum.Enum):
    AGGREGATED = "aggregated"  # prefill and decode share each instance (chunked prefill)
    DISAGGREGATED = "disaggregated"  # prefill pool hands KV to a decode pool
    AFD = "afd"  # disaggregated, and decode attention split from decode experts
    FOUR_STAGE = "four-stage"  # afd, and returning turns may get a midfill pool of their own
    AUTO = "auto"  # solve aggregated, disaggregated and afd, keep the best (four-stage: ask for it)

    def concrete(self) -> tuple[Topology, ...]:
        if self is Topology.AUTO:
            return (Topology.AGGREGATED, Topology.DISAGGREGATED, Topology.AFD)
        return (self,)

    @property
    def splits_experts(self) -> bool:
        """Whether decode attention runs apart from the experts, on a pool of its own: a model
        without routed experts (a dense Llama) has no FFN pool to fill."""
        return self in (Topology.AFD, Topology.FOUR_STAGE)


PRICE_TIERS = ("own_hyperscaler", "own_neocloud", "rent_3yr")


@dataclass(frozen=True)
class Energy:
    """The site's energy terms: its price per kWh (0: included in the GPU-hour rate) and PUE
    (facility power per watt of IT load; 1: the GPUs' own draw)."""

    usd_per_kwh: float = 0.0
    pue: float = 1.0


@dataclass(frozen=True)
class Storage:
    """What resting KV costs beyond the GPU-hour rate: the capex of a TB of host DRAM, local NVMe
    and network storage, spread over ``years``. 0 (the default): no sourced price, and the price
    tiers' node prices hold the hosts' own DRAM and NVMe."""

    dram_usd_per_tb: float = 0.0
    nvme_usd_per_tb: float = 0.0
    network_usd_per_tb: float = 0.0
    years: float = 4.0

    def usd_per_gb_hour(self, tier: str) -> float:
        """The capex of holding one GB in ``tier`` for an hour."""
        per_tb = {
            "dram": self.dram_usd_per_tb,
            "nvme": self.nvme_usd_per_tb,
            "network": self.network_usd_per_tb,
        }
        return per_tb[tier] / 1e3 / (self.years * HOURS_PER_YEAR)


HOURS_PER_YEAR = 8760.0


@dataclass(frozen=True)
class Limits:
    """Optional caps; ``None`` means no cap."""

    budget_usd_hour: float | None = None
    power_kw: float | None = None
    inventory_gpus: dict[str, int] = field(default_factory=dict)  # hardware id -> GPUs available
    network_kv_capacity_tb: float | None = None

    def bounds(self, hardware: tuple[str, ...], same: Callable[[str], str] = str) -> bool:
        """Whether these caps bound what a design over ``hardware`` may buy: a budget, a power
        cap, or an inventory of each hardware (what the goodput objective needs to be finite),
        names compared as ``same`` reads them (a catalog's ids for its aliases)."""
        stocked = {same(h) for h in hardware} <= {same(h) for h in self.inventory_gpus}
        return self.budget_usd_hour is not None or self.power_kw is not None or stocked


KV_POLICIES = {
    "tiered": ("hbm", "dram", "nvme", "network", "drop"),  # the MILP chooses among every tier
    "hbm-only": ("hbm", "drop"),  # prefix cache in HBM; what does not fit is recomputed
    "offload": ("dram", "nvme", "network", "drop"),  # processed KV leaves HBM at once
    "recompute": ("drop",),  # no prefix cache: every returning turn prefills its whole context
}


SRC = "placement request"


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class UnitOptions:
    """Which unit shapes and operating points the candidate builder may use (a search trial
    narrows them to one each); ``None`` means every default."""

    prefill_shapes: tuple[str, ...] | None = None  # Parallel labels, e.g. "8gpu-dpa-ep8"
    decode_shapes: tuple[str, ...] | None = None  # also the shape of aggregated and attention/FFN units
    prefill_hardware: tuple[str, ...] | None = None  # hardware ids prefill units may use
    decode_hardware: tuple[str, ...] | None = None
    midfill_shapes: tuple[str, ...] | None = None  # four-stage; None: the prefill units' shapes
    midfill_hardware: tuple[str, ...] | None = None  # four-stage; None: every candidate hardware
    prefill_chunk_tokens: int = 8192  # per prefill forward: per attention-DP rank, or per instance (SGLang)
    decode_max_batch: float | None = None  # cap on sequences per decode instance
    agg_prefill_shares: tuple[float, ...] = (0.1, 0.2, 0.35, 0.5)
    ffn_tokens_per_gpu: tuple[float, ...] = (16.0, 64.0, 256.0)
    kv_policy: str = "tiered"
    # aggregated units also at tighter TPOT paces (``dse place`` and a grid study's points; a
    # search trial searches the batch instead, and the warm start builds the units a trial builds)
    tighter_paces: bool = True

    def __post_init__(self) -> None:
        for name in ("prefill_shapes", "decode_shapes", "midfill_shapes"):
            labels = getattr(self, name)
            if labels is not None:  # one spelling of each shape, the one shapes are matched by
                object.__setattr__(self, name, tuple(dict.fromkeys(canonical_shape(x) for x in labels)))
        if self.kv_policy not in KV_POLICIES:
            raise InputError(
                "placement request",
                "options.kv_policy",
                f"must be one of {', '.join(KV_POLICIES)}",
                self.kv_policy,
            )
        self._check_numbers()

    def _check_numbers(self) -> None:
        """The operating points by their rules: a chunk of 0 tokens had ended in a
        ZeroDivisionError, one of -5 was taken, an empty list of prefill shares or FFN batches in
        a numpy or index traceback, and a prefill share of 1.5 had said a token takes -60.6 ms."""
        chunk, cap = self.prefill_chunk_tokens, self.decode_max_batch
        if not (_is_number(chunk) and math.isfinite(chunk) and float(chunk).is_integer() and chunk >= 1):
            raise InputError(SRC, "options.prefill_chunk_tokens", "must be a whole number, >= 1", chunk)
        if cap is not None and not (_is_number(cap) and math.isfinite(cap) and cap >= 1):
            raise InputError(SRC, "options.decode_max_batch", "must be None or a number >= 1", cap)
        for key, values, rule, ok in (
            ("agg_prefill_shares", self.agg_prefill_shares, "in (0, 1)", lambda v: 0 < v < 1),
            ("ffn_tokens_per_gpu", self.ffn_tokens_per_gpu, "> 0", lambda v: math.isfinite(v) and v > 0),
        ):
            if not isinstance(values, tuple) or not values:
                raise InputError(SRC, f"options.{key}", f"must be a non-empty tuple, each {rule}", values)
            for v in values:
                if not (_is_number(v) and ok(v)):
                    raise InputError(SRC, f"options.{key}", f"each must be a number {rule}", v)

    @property
    def tiers(self) -> tuple[str, ...]:
        return KV_POLICIES[self.kv_policy]


def _check_traffic(workload: Workload, slo: Slo) -> None:
    """The traffic and the targets by the rules a study file's are built by, for a request built in
    Python too: a rate of 0 had been "served" by no GPU at $0, a percentile of 0 or NaN had ended
    in a statistics library's traceback. Once per distinct pair (a study's trials share one),
    told apart by their fields' types as well (``True`` equals 1, and a rate of ``True`` had
    passed once 1 had), and every time where a field cannot be hashed (a list of think bins had
    been a bare ``TypeError``, and is refused as a study file's is)."""
    try:
        _checked_traffic(workload, slo, _kinds(workload), _kinds(slo))
    except TypeError:  # unhashable: checked, not kept
        _checked_traffic.__wrapped__(workload, slo, (), ())


def _kinds(obj: object) -> tuple[type, ...]:
    return tuple(type(getattr(obj, f.name)) for f in fields(obj))  # type: ignore[arg-type]


@functools.lru_cache(maxsize=64)
def _checked_traffic(workload: Workload, slo: Slo, *kinds: tuple[type, ...]) -> None:
    build(Workload, to_plain(workload), source="placement request", prefix="workload.")
    build(Slo, to_plain(slo), source="placement request", prefix="slo.")


@dataclass(frozen=True)
class PlacementRequest:
    model: str
    hardware: tuple[str, ...]
    workload: Workload
    slo: Slo
    topology: Topology = Topology.AUTO
    objective: Objective = Objective.COST
    price_tier: str = "own_hyperscaler"
    # engine profile of the calibration (kernel speed, KV precision); left out, the one that runs on
    # the hardware, as dse place takes it: TensorRT-LLM's on NVIDIA's alone, else SGLang's (it had
    # been "trt" whatever the hardware, and a request on MI355X was refused until it named one)
    engine: str = None  # type: ignore[assignment]
    # routed-expert weights; left out, the model's serving precision (fp4 for checkpoints that ship fp4
    # experts), as dse place takes it, filled in as the request is made: the field is a Precision
    # from then on (it had defaulted to fp8, and Kimi K3 was priced at 43 times its fp4 design)
    weight_precision: Precision = None  # type: ignore[assignment]
    mtp: bool = False
    # the deployment's own draft depth and acceptance rate (None: the engine profile's)
    mtp_draft_tokens: int | None = None
    mtp_accept_rate: float | None = None
    limits: Limits = Limits()
    options: UnitOptions = UnitOptions()
    network_kv_usd_per_tb_hour: float = 0.0  # no sourced price: zero unless the user sets one
    # energy, priced on top of the GPU-hour rate when the site's price is given: the shipped rates
    # (SemiAnalysis's TCO per GPU-hour) already hold power, so 0 unless the user sets one
    energy: Energy = Energy()
    storage: Storage = Storage()  # capex of the DRAM, NVMe and network storage resting KV fills
    latency_usd_per_s: float = 0.0  # value of a request-second of reload wait
    time_limit_s: float | None = 30.0
    mip_rel_gap: float = 1e-4

    def __post_init__(self) -> None:
        _check_types(self)
        if self.weight_precision is None:
            object.__setattr__(self, "weight_precision", _serving_precision(self.model))
        elif not isinstance(self.weight_precision, Precision):
            members = ", ".join(f"Precision.{m.name}" for m in Precision)
            rule = f"must be of type Precision (dse.units): one of {members}, or left out (the model's)"
            raise InputError(SRC, "weight_precision", rule, self.weight_precision)
        if not self.hardware:
            raise InputError("placement request", "hardware", "needs at least one hardware id")
        if self.engine is None:
            object.__setattr__(self, "engine", _running_engine(self.hardware))
        _check_traffic(self.workload, self.slo)
        # a hardware named twice (or by two of its names, resolved to one id) is one candidate:
        # each copy would otherwise get the inventory cap of its own
        object.__setattr__(self, "hardware", tuple(dict.fromkeys(self.hardware)))
        if self.price_tier not in PRICE_TIERS:
            raise InputError(
                "placement request", "price_tier", f"must be one of {', '.join(PRICE_TIERS)}", self.price_tier
            )
        # (an inventory of h200-sxm stocks hardware named h200: the same entry, as place() reads it)
        if self.objective is Objective.GOODPUT and not self.limits.bounds(self.hardware, _hardware_id):
            raise InputError(
                "placement request",
                "limits.budget_usd_hour",
                "is required by the goodput objective (the most traffic a budget serves), unless a "
                "power cap or an inventory of every candidate hardware bounds it",
            )


# the fields a request built in Python must hold as typed objects, not their names or dicts (a
# string topology had failed in the solver with ``AttributeError: 'str' object has no attribute
# 'concrete'``, a dict workload with ``TypeError: unhashable type``)
TYPED_FIELDS: dict[str, type] = {
    "workload": Workload,
    "slo": Slo,
    "topology": Topology,
    "objective": Objective,
    "limits": Limits,
    "options": UnitOptions,
    "energy": Energy,
    "storage": Storage,
}

# optional numbers of a request and of its limits, energy and storage, with the rules the command
# line's flags and a study file's keys have (``dse place --gap``, ``mtp_accept_rate``)
NUMBER_RULES: dict[str, Rule] = {
    "mtp_draft_tokens": draft_depth,
    "mtp_accept_rate": acceptance,
    "network_kv_usd_per_tb_hour": non_negative,
    "latency_usd_per_s": non_negative,
    "time_limit_s": positive,
    "mip_rel_gap": gap_rule,
    "limits.budget_usd_hour": positive,
    "limits.power_kw": positive,
    "limits.network_kv_capacity_tb": non_negative,
    "energy.usd_per_kwh": non_negative,
    "energy.pue": at_least_one,
    "storage.dram_usd_per_tb": non_negative,
    "storage.nvme_usd_per_tb": non_negative,
    "storage.network_usd_per_tb": non_negative,
    "storage.years": positive,
}


OPTIONAL = frozenset(
    ("mtp_draft_tokens", "mtp_accept_rate", "time_limit_s", "limits.budget_usd_hour", "limits.power_kw",
     "limits.network_kv_capacity_tb")
)  # fmt: skip
"""The keys of :data:`NUMBER_RULES` whose None means "none": the engine profile's, no cap."""


def _check_types(req: PlacementRequest) -> None:
    """A request built in Python, held to the types its fields declare and the rules of the
    flags and study keys they mirror: one line naming the field, not a traceback from the
    candidate builder or the solver (``hardware="b200"`` had been read as the ids 'b', '2', '0')."""
    if not isinstance(req.model, str):
        raise InputError(SRC, "model", "must be a model id (a string)", req.model)
    hw: Any = req.hardware
    if isinstance(hw, str) or not isinstance(hw, tuple | list) or not all(isinstance(h, str) for h in hw):
        raise InputError(SRC, "hardware", "must be a tuple of hardware ids, such as ('b200',)", hw)
    for name, cls in TYPED_FIELDS.items():
        value = getattr(req, name)
        if not isinstance(value, cls):
            members = ""
            if issubclass(cls, enum.Enum):  # the member, not its value's string
                members = f": one of {', '.join(f'{cls.__name__}.{m.name}' for m in cls)}"
            raise InputError(SRC, name, f"must be of type {cls.__name__} ({cls.__module__}){members}", value)
    for key, flag in (("mtp", req.mtp), ("options.tighter_paces", req.options.tighter_paces)):
        if not isinstance(flag, bool):  # "no" is truthy: it had been taken as True
            raise InputError(SRC, key, "must be True or False", flag)
    for key, check in NUMBER_RULES.items():
        owner, _, attr = key.rpartition(".")
        value = getattr(getattr(req, owner) if owner else req, attr)
        if value is None and key in OPTIONAL:
            continue
        if not _is_number(value):
            raise InputError(SRC, key, "must be a number", value)
        check_number(value, source=SRC, key=key, check=check)
    if not isinstance(req.limits.inventory_gpus, dict):
        raise InputError(
            SRC, "limits.inventory_gpus", "must be a dict of hardware id -> GPUs", req.limits.inventory_gpus
        )
    for hw_id, gpus in req.limits.inventory_gpus.items():
        # 64.0 counts whole GPUs, as --inventory h200=64.0 does; 12.5, -8 and True do not
        whole = _is_number(gpus) and math.isfinite(gpus) and float(gpus).is_integer()
        if not whole or gpus < 0:
            raise InputError(
                SRC, f"limits.inventory_gpus.{hw_id}", "must be a whole number of GPUs, >= 0", gpus
            )


def _hardware_id(name: str) -> str:
    """``name``'s id in the shipped catalog and ``DSE_CATALOG_DIR``'s folders, or ``name`` where
    those do not hold it."""
    from dse.catalog import load_catalog

    try:
        return load_catalog().hardware(name).id
    except InputError:
        return name


def _running_engine(hardware: tuple[str, ...]) -> str | None:
    """The engine profile that runs on every GPU of ``hardware`` (TensorRT-LLM's on NVIDIA's alone,
    else SGLang's: :func:`dse.perf.frameworks.default_engine`), as ``dse place`` takes it, read in
    the shipped catalog and ``DSE_CATALOG_DIR``'s folders; None where those do not hold them all
    (:func:`dse.placement.plan.place` reads the vendors in the catalog it is given)."""
    from dse.catalog import load_catalog
    from dse.perf.frameworks import default_engine

    try:
        catalog = load_catalog()
        return default_engine({catalog.hardware(h).vendor for h in hardware})
    except InputError:
        return None


def _serving_precision(model: str) -> Precision:
    """The serving precision of ``model`` in the shipped catalog and ``DSE_CATALOG_DIR``'s folders,
    for a request that leaves its precision out; a model of another folder must give it."""
    from dse.catalog import load_catalog

    catalog = load_catalog()
    try:
        return catalog.model(model).serving_precision
    except InputError:
        # (named as weight_precision's, a misspelt model had been told to give a precision first)
        rule = (
            "is in neither the shipped catalog nor DSE_CATALOG_DIR's folders: check its spelling "
            f"(valid ids: {', '.join(sorted(catalog.models_by_id))}), or give weight_precision for a "
            "model of a catalog of one's own (left out, it is the model's serving precision)"
        )
        raise InputError(SRC, "model", rule, model) from None
