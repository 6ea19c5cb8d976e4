"""The hardware catalog entry: one accelerator (per GPU for rack systems)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dse.typed_data import non_empty, one_of, positive, ruled
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

    bf16_dense_tflops: float | None = ruled(positive, default=None)
    fp8_dense_tflops: float | None = ruled(positive, default=None)
    fp4_dense_tflops: float | None = ruled(positive, default=None)

    def tflops(self, precision: Precision) -> float | None:
        """Peak for ``precision``; ``None`` when the hardware has no such format."""
        return {
            Precision.BF16: self.bf16_dense_tflops,
            Precision.FP8: self.fp8_dense_tflops,
            Precision.FP4: self.fp4_dense_tflops,
        }[precision]


@dataclass(frozen=True)
class Hbm:
    capacity_gb: float = ruled(positive)
    bandwidth_tb_per_s: float = ruled(positive)


@dataclass(frozen=True)
class ScaleUp:
    """The scale-up domain (NVLink, Infinity Fabric): GPUs that talk at memory-like speed."""

    link: str = ruled(non_empty)
    gb_per_s_per_dir: float = ruled(positive)
    domain_gpus: int = ruled(positive)


@dataclass(frozen=True)
class ScaleOut:
    nic_gbit_per_s_per_gpu: float = ruled(positive)

    @property
    def nic_gb_per_s_per_gpu(self) -> float:
        return self.nic_gbit_per_s_per_gpu / 8.0


@dataclass(frozen=True)
class Host:
    """Host DRAM and the GPU-host link; bandwidth is the per-GPU share of a shared link."""

    dram_gb_per_gpu: float = ruled(positive)
    link: str = ruled(non_empty)
    link_kind: HostLinkKind
    link_gb_per_s_per_dir: float = ruled(positive)
    gpus_per_link: int = ruled(positive)


@dataclass(frozen=True)
class LocalNvme:
    capacity_tb_per_gpu: float = ruled(positive)
    read_gb_per_s_per_gpu: float = ruled(positive)


@dataclass(frozen=True)
class NetworkKvStore:
    """A pooled KV store reached over the scale-out NIC (3FS, Mooncake store)."""

    read_gb_per_s_per_gpu: float = ruled(positive)


@dataclass(frozen=True)
class Storage:
    local_nvme: LocalNvme
    network_kv: NetworkKvStore


@dataclass(frozen=True)
class Prices:
    """US$ per GPU-hour for three cost bases (long-term rates, not on-demand)."""

    usd_per_gpu_hour_own_hyperscaler: float | None = ruled(positive, default=None)
    usd_per_gpu_hour_own_neocloud: float | None = ruled(positive, default=None)
    usd_per_gpu_hour_rent_3yr: float | None = ruled(positive, default=None)


@dataclass(frozen=True)
class Hardware:
    """One accelerator as the engine sees it. Units live in the field names."""

    id: str = ruled(non_empty)
    name: str = ruled(non_empty)
    vendor: str = ruled(non_empty)
    status: Status
    compute: Compute
    hbm: Hbm
    scale_up: ScaleUp
    scale_out: ScaleOut
    host: Host
    storage: Storage
    sources: tuple[str, ...] = ruled(non_empty)
    tdp_w: float = ruled(positive)
    sale_unit_gpus: int = ruled(one_of(8, 72))
    prices: Prices = Prices()
    aliases: tuple[str, ...] = ()
    notes: str = ""
    assumptions: tuple[str, ...] = ()

    @property
    def projected(self) -> bool:
        return self.status is Status.PROJECTED
