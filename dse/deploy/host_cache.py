"""Where a design rests KV between turns below HBM, as each engine launches it: SGLang's
hierarchical cache, vLLM's native CPU offloading and TensorRT-LLM's host cache, each sized from
the KV the study rests in a pool's hosts' DRAM; and the designs an engine cannot launch so.

The study rests a pool's KV in its hosts' DRAM (and NVMe, or the network store) by Little's law,
per GPU as the engines keep it: a host tier per GPU rank, so that a GPU holding a copy of a
session's KV (MLA's latent KV on every GPU of an attention TP group) holds it there too
(``PoolLaunch.dram_gb_per_gpu``; ``formulations.placement_data.PlacementData.unit_kv_gpus``).
"""

from __future__ import annotations

import math

from dse.deploy.design import SRC, Design, PoolLaunch
from dse.errors import InputError
from dse.perf.latency_tables import SGLANG_HOST_RESERVE_GB
from dse.units import GB, GIB


def sglang_hicache_gb(pool: PoolLaunch) -> int | None:
    """SGLang's --hicache-size of each rank of ``pool``, whole GB up: its share of the resting KV
    and, since its host pool must be larger than the rank's GPU pool (HiCache writes the GPU's KV
    through to it), the most the GPU's pool can hold (its HBM less the weights). None: the pool
    rests no KV below HBM."""
    if not pool.tiered:
        return None
    return max(1, math.ceil(pool.hbm_kv_gb + pool.dram_gb_per_gpu))


def sglang_storage(pool: PoolLaunch) -> bool:
    """Whether ``pool`` rests KV on NVMe or in the network store: SGLang's third tier, files."""
    return pool.kv_nvme_gb > 0 or pool.kv_network_gb > 0


def vllm_offload_gib(pool: PoolLaunch) -> float | None:
    """vLLM's --kv-offloading-size of ``pool``: each data-parallel engine's, summed over its
    attention TP ranks, in GiB (up to a hundredth). None: no KV in DRAM."""
    if pool.kv_dram_gb <= 0:
        return None
    return math.ceil(pool.dram_gb_per_gpu * pool.attn_tp * GB / GIB * 100) / 100


def trtllm_host_cache_bytes(pool: PoolLaunch) -> int | None:
    """TensorRT-LLM's ``kv_cache_config.host_cache_size`` of each rank of ``pool``, bytes. None: no
    KV in DRAM."""
    if pool.kv_dram_gb <= 0:
        return None
    return math.ceil(pool.dram_gb_per_gpu * GB)


def check_tiers(design: Design, engine: str, backend: str) -> None:
    """Refuses, in one line, a design whose resting KV ``engine`` (running ``backend``) has no
    tier for as the study priced it: NVMe and the network store at once (SGLang's cache, the one
    with a storage tier, has one), either on anything but SGLang (its file tier), and DRAM on
    Dynamo's disaggregated vLLM workers (their NIXL connector and vLLM's CPU offloading would each
    take the KV connector; KVBM is not written here)."""
    for p in design.pools:
        where = [t for t, gb in (("NVMe", p.kv_nvme_gb), ("the network store", p.kv_network_gb)) if gb > 0]
        if len(where) > 1:
            why = (
                f"cannot rest the {p.name} pool's KV both on NVMe and in the network store: no engine here "
                "does (SGLang's hierarchical cache, the one with a storage tier, has one)"
            )
            raise InputError(SRC, "--engine", why, engine)
        if where and backend != "sglang":
            how = (
                f"Dynamo runs the study's profile `{design.profile}` as {backend}, which has none here"
                if engine == "dynamo"
                else "--engine sglang launches it as its hierarchical cache's file tier"
            )
            why = (
                f"has no tier for the {p.name} pool's KV resting on {where[0]} between turns "
                f"({_gb(p.kv_nvme_gb + p.kv_network_gb)} an instance), which the study priced: {how}"
            )
            raise InputError(SRC, "--engine", why, engine)
        if backend == "sglang":
            _sglang_host_fits(design, p, engine)
        if p.kv_dram_gb > 0 and engine == "dynamo" and backend == "vllm" and p.role != "mixed":
            why = (
                f"writes no host tier for Dynamo's disaggregated vLLM workers (KVBM): the {p.name} pool "
                f"rests {_gb(p.kv_dram_gb)} of KV an instance in its hosts' DRAM, which the study priced"
            )
            raise InputError(SRC, "--engine", why, engine)


def _sglang_host_fits(design: Design, p: PoolLaunch, engine: str) -> None:
    """Refuse a pool whose SGLang host pool (its share of the resting KV and the copy of the GPU's
    KV pool it mirrors), with what SGLang leaves free, is more than its GPU's DRAM: SGLang refuses
    such a pool at start-up ("Not enough host memory available"), and the launch had been written,
    its README alone saying it would fail."""
    if not p.tiered:  # no host cache is launched
        return
    need = (sglang_hicache_gb(p) or 0) + SGLANG_HOST_RESERVE_GB
    if not p.host_gb_per_gpu or need <= p.host_gb_per_gpu + 1.0:  # (--hicache-size is whole GB up)
        return
    why = (
        f"the study's engine profile `{design.profile}` priced its DRAM tier without SGLang's copy of "
        "the GPU's pool: launch it on that engine, or on hosts with more memory (a --catalog-dir "
        "entry of theirs)"
        if design.profile != "sglang"
        else "give the hosts more memory (a --catalog-dir entry of theirs)"
    )
    rule = (
        f"cannot fit the {p.name} pool's SGLang host cache: {need:.0f} GB a rank (its "
        f"{_gb(p.dram_gb_per_gpu)} of resting KV, the {_gb(p.hbm_kv_gb)} of its GPU's KV pool it "
        f"mirrors and the {_gb(SGLANG_HOST_RESERVE_GB)} SGLang leaves free) against the "
        f"{_gb(p.host_gb_per_gpu)} of DRAM "
        f"a GPU of {p.hardware} has, and SGLang refuses a host pool larger than the memory free: {why}"
    )
    raise InputError(SRC, "--engine", rule, engine)


def _gb(gb: float) -> str:
    return f"{gb / 1e3:.3g} TB" if gb >= 1e3 else f"{gb:.3g} GB"


def host_cache_notes(design: Design, backend: str, f: dict[str, str]) -> list[str]:
    """README lines for each pool that rests KV below HBM: what it rests, what each GPU's host
    holds of it, and how the engine (``backend``, whose flags are ``f``) is told."""
    out = []
    for p in design.pools:
        if not p.tiered:
            continue
        parts = [f"{_gb(gb)} of KV {where}" for gb, where in (
            (p.kv_dram_gb, "in its hosts' DRAM"), (p.kv_nvme_gb, "on their NVMe"),
            (p.kv_network_gb, "in the network store"),
        ) if gb > 0]  # fmt: skip
        shares = p.kv_gpus or p.gpus
        copies = (
            f"; {shares} of an instance's {p.gpus} GPUs hold distinct shares of it and each of the others a "
            "copy, in its host tier too, as the engines keep one per rank"
            if shares < p.gpus
            else ""
        )
        line = (
            f"- each instance of the `{p.name}` pool rests {', '.join(parts)} between turns, as the "
            f"study priced it: {_gb(p.dram_gb_per_gpu)} of DRAM a GPU{copies}; "
        )
        if backend == "sglang":
            line += (
                f"SGLang's hierarchical cache gets `{f['hicache_size']} {sglang_hicache_gb(p)}` GB a rank, "
                f"that and the {_gb(p.hbm_kv_gb)} its GPU's KV pool can hold at most, which it mirrors"
            )
            if sglang_storage(p):
                line += (
                    f", and its file tier (`{f['hicache_storage']} {f['hicache_storage_file']}`): mount "
                    f"the NVMe or the network store at {f['hicache_dir_default']}, or set "
                    f"`{f['hicache_dir_env']}` to where it is"
                )
        elif backend == "vllm":
            line += (
                f"vLLM's CPU offloading gets `{f['kv_offload_size']} {vllm_offload_gib(p):g}` GiB an engine"
            )
        else:
            line += (
                f"TensorRT-LLM's host cache gets `{f['yaml_host_cache']}` {trtllm_host_cache_bytes(p):,} "
                "bytes a rank in the options files"
            )
        if backend != "sglang" and p.host_gb_per_gpu and p.dram_gb_per_gpu > p.host_gb_per_gpu:
            line += (
                f". That is more than the {_gb(p.host_gb_per_gpu)} of DRAM a GPU of {p.hardware} has (the "
                "hardware catalog's): give the hosts more memory"
            )
        out.append(line + ";")
    return out
