"""The hardware catalog entry: one accelerator (per GPU for rack systems)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from dse.typed_data import lower_id, non_empty, positive, rule
from dse.units import Precision


class Status(enum.Enum):
    SHIPPING = "shipping"
    PROJECTED = "projected"


class HostLinkKind(enum.Enum):
    """How a GPU reaches its host DRAM."""

    PCIE = "pcie"
    NVLINK_C2C = "nvlink-c2c"


@dataclass(frozen=True)
class Compute:
    """Dense peak compute per precision; ``None`` where the GPU lacks the format."""

    bf16_dense_tflops: float | None = field(default=None, metadata=rule(positive))
    fp8_dense_tflops: float | None = field(default=None, metadata=rule(positive))
    fp4_dense_tflops: float | None = field(default=None, metadata=rule(positive))

    def tflops(self, precision: Precision) -> float | None:
        """Peak for ``precision``; ``None`` when the hardware has no such format."""
        value: float | None = getattr(self, f"{precision.value}_dense_tflops")  # hot: no dict per call
        return value


@dataclass(frozen=True)
class Hbm:
    """HBM per GPU. ``capacity_gb`` is the datasheet figure, which the engine reads as GiB
    (``dse.perf.pool.HBM_GB_BYTES``): nvidia-smi's total matches it within 0.5% on H100, H200, B200
    and GB200, but reads 268.6 GiB on B300 and 277.5 GiB on GB300 against their 288 (S1). Where
    they differ, ``visible_gib`` is what the driver reports, and the engine sizes with it."""

    capacity_gb: float = field(metadata=rule(positive))
    bandwidth_tb_per_s: float = field(metadata=rule(positive))
    visible_gib: float | None = field(default=None, metadata=rule(positive))

    def problem(self) -> tuple[str, str, object] | None:
        if self.visible_gib is not None and self.visible_gib > self.capacity_gb:
            return ("visible_gib", f"must be at most capacity_gb ({self.capacity_gb:g}): what the driver "
                    "shows where it is below the datasheet", self.visible_gib)  # fmt: skip
        return None

    @property
    def usable_gib(self) -> float:
        """The memory the engine sizes weights, activations and KV against, in GiB."""
        return self.visible_gib if self.visible_gib is not None else self.capacity_gb

    def scaled(self, factor: float = 1.0, plus_gib: float = 0.0) -> Hbm:
        """This HBM with its capacity times ``factor`` plus ``plus_gib`` (a what-if), the datasheet
        figure and the visible one alike."""
        visible = None if self.visible_gib is None else self.visible_gib * factor + plus_gib
        return replace(self, capacity_gb=self.capacity_gb * factor + plus_gib, visible_gib=visible)


@dataclass(frozen=True)
class ScaleUp:
    """The scale-up domain (NVLink, Infinity Fabric): GPUs that talk at memory-like speed."""

    link: str = field(metadata=rule(non_empty))
    gb_per_s_per_dir: float = field(metadata=rule(positive))
    domain_gpus: int = field(metadata=rule(positive))


@dataclass(frozen=True)
class ScaleOut:
    nic_gbit_per_s_per_gpu: float = field(metadata=rule(positive))

    @property
    def nic_gb_per_s_per_gpu(self) -> float:
        return self.nic_gbit_per_s_per_gpu / 8.0


@dataclass(frozen=True)
class Host:
    """Host DRAM and the GPU-host link; bandwidth is the per-GPU share of a shared link."""

    dram_gb_per_gpu: float = field(metadata=rule(positive))
    link: str = field(metadata=rule(non_empty))
    link_kind: HostLinkKind
    link_gb_per_s_per_dir: float = field(metadata=rule(positive))
    gpus_per_link: int = field(metadata=rule(positive))


@dataclass(frozen=True)
class LocalNvme:
    capacity_tb_per_gpu: float = field(metadata=rule(positive))
    read_gb_per_s_per_gpu: float = field(metadata=rule(positive))


@dataclass(frozen=True)
class NetworkKvStore:
    """A pooled KV store reached over the scale-out NIC (3FS, Mooncake store)."""

    read_gb_per_s_per_gpu: float = field(metadata=rule(positive))


@dataclass(frozen=True)
class Storage:
    local_nvme: LocalNvme
    network_kv: NetworkKvStore


@dataclass(frozen=True)
class Prices:
    """US$ per GPU-hour for three cost bases (long-term rates, not on-demand)."""

    usd_per_gpu_hour_own_hyperscaler: float | None = field(default=None, metadata=rule(positive))
    usd_per_gpu_hour_own_neocloud: float | None = field(default=None, metadata=rule(positive))
    usd_per_gpu_hour_rent_3yr: float | None = field(default=None, metadata=rule(positive))


VENDORS = ("amd", "nvidia")
"""The GPU vendors whose engines dse prices: an engine runs on its vendor's GPUs, and a fresh
server's cold start is fitted per engine and vendor."""


def known_vendor(value: str) -> str | None:
    """A vendor of :data:`VENDORS`, spelled as there: ``Nvidia`` had read as no NVIDIA GPU, which
    refused TensorRT-LLM on it ("runs on NVIDIA GPUs only, not b200 (Nvidia)") and dropped its
    cold start."""
    return None if value in VENDORS else f"must be one of {', '.join(VENDORS)} (lowercase)"


@dataclass(frozen=True)
class Hardware:
    """One accelerator as the engine sees it. Units live in the field names."""

    id: str = field(metadata=rule(lower_id))
    name: str = field(metadata=rule(non_empty))
    vendor: str = field(metadata=rule(known_vendor))
    status: Status
    compute: Compute
    hbm: Hbm
    scale_up: ScaleUp
    scale_out: ScaleOut
    host: Host
    storage: Storage
    sources: tuple[str, ...] = field(metadata=rule(non_empty))
    tdp_w: float = field(metadata=rule(positive))
    # GPUs bought at once: a node (8 on HGX boards, 4 on a 4-GPU server) or a rack (72 on NVL72)
    sale_unit_gpus: int = field(metadata=rule(positive))
    prices: Prices = Prices()
    aliases: tuple[str, ...] = ()
    notes: str = ""
    assumptions: tuple[str, ...] = ()
    # GPUs one host (one OS, one launch of an engine's node-local ranks) holds: 8 on HGX boards, 4 on
    # an NVL72 compute tray; an instance wider than this spans hosts
    gpus_per_host: int = field(default=8, metadata=rule(positive))
    # the GPU folder of AIConfigurator's measured kernel tables (aiconfigurator-core's
    # systems/data/<folder>), empty where none were measured: dse.perf.kernels
    measured_kernels: str = ""
    # a what-if variant's measured kernels ran on its base's HBM: the bandwidth they were measured
    # at (TB/s), None for the GPU itself
    measured_hbm_tb_per_s: float | None = field(default=None, metadata=rule(positive))

    @property
    def projected(self) -> bool:
        return self.status is Status.PROJECTED

    def problem(self) -> tuple[str, str, object] | None:
        """(key, rule, value) where the counts of GPUs do not fit each other: a link shared by more
        GPUs than a host holds, or a sale unit that is neither whole hosts nor a share of one (a
        placement buys whole sale units: 3 GPUs of an 8-GPU host had been priced as such)."""
        if self.measured_hbm_tb_per_s is not None and not self.measured_kernels:
            rule = "is read only with measured_kernels (the bandwidth its kernel tables were measured at)"
            return "measured_hbm_tb_per_s", rule, self.measured_hbm_tb_per_s
        host = self.gpus_per_host
        domain = self.scale_up.domain_gpus
        if domain % host and host % domain:  # 6 on an 8-GPU host had priced TP 8 across the network
            rule = f"must be whole hosts of gpus_per_host ({host}) GPUs, or divide it"
            return "scale_up.domain_gpus", rule, domain
        if host % self.host.gpus_per_link:
            rule = f"must divide gpus_per_host ({host}): the GPUs of a host share its links evenly"
            return "host.gpus_per_link", rule, self.host.gpus_per_link
        unit = self.sale_unit_gpus
        if unit % host and host % unit:
            rule = f"must be whole hosts of gpus_per_host ({host}) GPUs, or divide it (GPUs rented of a host)"
            return "sale_unit_gpus", rule, unit
        return None


# (key, least, most, the slip a value outside suggests): ranges a few times wider than any part
# shipped or announced, so that only a figure in another unit falls outside
UNIT_RANGES = (
    ("hbm.bandwidth_tb_per_s", 0.1, 100.0, "a GB/s figure in a TB/s key?"),
    ("hbm.capacity_gb", 4.0, 10_000.0, "a TB or MB figure in a GB key?"),
    # what the driver shows, and the bandwidth a GPU's measured kernels ran at: a slip in either
    # had priced a measured-tier B200 at a hundredth of its speed, or its HBM at 0.3 GB, unseen
    ("hbm.visible_gib", 4.0, 10_000.0, "a TB or MB figure in a GiB key?"),
    ("measured_hbm_tb_per_s", 0.1, 100.0, "a GB/s figure in a TB/s key?"),
    ("scale_up.gb_per_s_per_dir", 1.0, 100_000.0, "a Gb/s or TB/s figure in a GB/s key?"),
    ("tdp_w", 50.0, 20_000.0, "a kW figure in a W key?"),
    # where resting KV fits: a slip here moves the tiers' capacity a thousandfold, unseen
    ("host.dram_gb_per_gpu", 8.0, 100_000.0, "a TB figure in a GB key?"),
    ("storage.local_nvme.capacity_tb_per_gpu", 0.05, 250.0, "a GB figure in a TB key?"),
    ("compute.bf16_dense_tflops", 1.0, 1_000_000.0, "a GFLOPS figure in a TFLOPS key?"),
    ("compute.fp8_dense_tflops", 1.0, 1_000_000.0, "a GFLOPS figure in a TFLOPS key?"),
    ("compute.fp4_dense_tflops", 1.0, 1_000_000.0, "a GFLOPS figure in a TFLOPS key?"),
    # the links resting KV comes back over, and the prices every $/M-token figure is made of
    ("scale_out.nic_gbit_per_s_per_gpu", 10.0, 20_000.0, "a Mb/s figure in a Gb/s key?"),
    ("host.link_gb_per_s_per_dir", 1.0, 10_000.0, "a Gb/s or MB/s figure in a GB/s key?"),
    ("storage.local_nvme.read_gb_per_s_per_gpu", 0.1, 1_000.0, "a Gb/s or MB/s figure in a GB/s key?"),
    ("storage.network_kv.read_gb_per_s_per_gpu", 0.1, 1_000.0, "a Gb/s or MB/s figure in a GB/s key?"),
    (
        "prices.usd_per_gpu_hour_own_hyperscaler",
        0.05,
        100.0,
        "a node's or a month's price in a GPU-hour key?",
    ),
    ("prices.usd_per_gpu_hour_own_neocloud", 0.05, 100.0, "a node's or a month's price in a GPU-hour key?"),
    ("prices.usd_per_gpu_hour_rent_3yr", 0.05, 100.0, "a node's or a month's price in a GPU-hour key?"),
)


def unit_doubts(h: Hardware) -> list[str]:
    """``key = value: ...`` for each figure of ``h`` far outside what any GPU has: valid, so not
    refused (a what-if may go far), but most likely typed in another unit."""
    out = []
    for key, least, most, slip in UNIT_RANGES:
        *path, name = key.split(".")
        held: object = h
        for part in path:
            held = getattr(held, part)
        value = getattr(held, name)
        if value is not None and not least <= value <= most:
            out.append(f"{key} = {value:g}: outside {least:g} to {most:g}, where every GPU sits; {slip}")
    c = h.compute
    for narrow, wide in (("fp8", "bf16"), ("fp4", "fp8")):  # a narrower format is as fast or faster
        n, w = getattr(c, f"{narrow}_dense_tflops"), getattr(c, f"{wide}_dense_tflops")
        if n is not None and w is not None and n < w:
            out.append(
                f"compute.{narrow}_dense_tflops = {n:g}: below {wide}_dense_tflops ({w:g}), where every "
                "GPU is at least as fast in the narrower format; the two swapped, or a sparse figure?"
            )
    return out
