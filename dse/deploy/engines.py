"""Each engine's own flags for a pool of a design: SGLang, vLLM, TRT-LLM (with its options
YAML) and Dynamo's workers of each, and the designs an engine cannot launch as the study priced
them. The flag names come from ``dse/deploy/engine_flags.toml``, which cites the engine source each
was read from.
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

from dse.deploy.design import SRC, Design, PoolLaunch
from dse.deploy.host_cache import (
    check_tiers,
    sglang_hicache_gb,
    sglang_storage,
    trtllm_host_cache_bytes,
    vllm_offload_gib,
)
from dse.deploy.scripts import check_ports
from dse.errors import InputError
from dse.placement.parallel import Parallel
from dse.units import Precision

FLAGS_FILE = Path(__file__).with_name("engine_flags.toml")


ENGINES = ("sglang", "trtllm", "vllm", "dynamo")


BACKEND_OF_PROFILE = {"sglang": "sglang", "trt": "trtllm", "atom": "vllm", "vllm": "vllm"}
"""The engine a study's engine profile (its calibration) stands for, as Dynamo's backend."""


def engine_flags() -> dict[str, dict[str, str]]:
    with open(FLAGS_FILE, "rb") as fh:
        return tomllib.load(fh)


def backend_of(design: Design, engine: str) -> str:
    """The engine that runs the workers: Dynamo's the study's profile stands for."""
    return BACKEND_OF_PROFILE[design.profile] if engine == "dynamo" else engine


def check_launchable(design: Design, engine: str) -> None:
    """Refuses, in one line, a design ``engine`` cannot launch as the study priced it."""
    if engine not in ENGINES:
        raise InputError(SRC, "--engine", f"must be one of {', '.join(ENGINES)}", engine)
    crowded = check_ports(design)
    if crowded:
        raise InputError(SRC, "pools", f"cannot be given ports: {crowded}")
    backend = backend_of(design, engine)
    on = f"on {backend}" if engine != "dynamo" else f"on Dynamo's {backend} workers"
    if any(p.role == "prefill" for p in design.pools) and engine in ("trtllm", "vllm"):
        why = f"launches one aggregated server; this {design.topology} design needs sglang or dynamo"
        raise InputError(SRC, "--engine", why, engine)
    other = next((p for p in design.pools if p.vendor != "nvidia"), None)
    if other is not None and backend == "trtllm":
        why = (
            f"cannot launch the {other.name} pool {on}: it runs on {other.hardware} GPUs ({other.vendor}), "
            "and TensorRT-LLM runs on NVIDIA GPUs only (--engine sglang or vllm)"
        )
        raise InputError(SRC, "--engine", why, engine)
    for p in design.pools:
        shape = Parallel(p.gpus, p.attn_tp, p.ep, p.pp).label()
        if p.pp > 1 and backend != "sglang":
            why = (
                f"has no pipeline-parallel launch here: the {p.name} pool runs {p.pp} stages "
                "(SGLang's --pp-size launches it: --engine sglang, or dynamo on SGLang)"
            )
            raise InputError(SRC, "--engine", why, engine)
        if p.pp > 1 and design.mtp_drafts > 0:  # SGLang asserts it at start-up (server_args.py)
            why = (
                f"cannot launch the {p.name} pool {on}: it runs {p.pp} pipeline stages with MTP's drafts, "
                "and SGLang refuses speculative decoding under pipeline parallelism"
            )
            raise InputError(SRC, "--engine", why, engine)
        if engine in ("vllm", "trtllm") and p.hosts > 1:
            why = (
                f"cannot launch the {p.name} pool: an instance's {p.gpus} GPUs span {p.hosts} hosts of "
                f"{p.gpus_per_host} GPUs, and dse writes no multi-host launch for {engine} "
                "(--engine sglang, or dynamo, whose operator wires the hosts)"
            )
            raise InputError(SRC, "--engine", why, engine)
        if backend == "trtllm" and 1 < p.attn_tp < p.gpus:
            why = (
                f"cannot launch the {p.name} pool's shape {shape} {on}: its attention DP runs attention "
                f"TP 1 only, not TP{p.attn_tp} x DP{p.dp}"
            )
            raise InputError(SRC, "--engine", why, engine)
        if backend == "vllm" and 1 < p.ep < p.tp:
            why = (
                f"cannot launch the {p.name} pool's shape {shape} {on}: its expert-parallel group is "
                f"all {p.tp} GPUs of an instance (DP x TP), not EP{p.ep}"
            )
            raise InputError(SRC, "--engine", why, engine)
    check_tiers(design, engine, backend)


def _kv(design: Design, table: dict[str, str]) -> str:
    return table["kv_fp8"] if design.kv_dtype is Precision.FP8 else table["kv_bf16"]


def sglang_dp(pool: PoolLaunch) -> int:
    """SGLang's --dp-size under --enable-dp-attention: the attention-DP ranks (its TP size over
    the attention TP, ``tp / attn_tp``, whenever attention TP is smaller than the TP size), else 1."""
    return pool.dp


def trtllm_dp(pool: PoolLaunch) -> int:
    """TRT-LLM's attention-DP ranks: every GPU of an instance with enable_attention_dp, else 1."""
    return pool.gpus if pool.attn_tp == 1 and pool.gpus > 1 else 1


def sglang_cap(pool: PoolLaunch) -> int | None:
    """The --max-running-requests SGLang gets: it floors it per attention-DP rank
    (``max_running_requests // dp_size``, and refuses a zero), so a multiple of its DP size, the
    largest not above the sized batch, and at least one per rank."""
    if pool.max_running is None:
        return None
    dp = sglang_dp(pool)
    return max(dp, pool.max_running // dp * dp)


# The requests an SGLang data-parallel worker runs where --max-running-requests is not passed: at
# least 2048 (at most 4096, and within half its KV tokens; sgl-project/sglang:python/sglang/srt/
# mem_cache/kv_cache_configurator.py, KVCacheConfigurator.resolve_max_num_reqs, `estimated`).
# Under speculative decoding server_args sets an unset flag to 48 for the whole server first
# (dse.perf.frameworks.SGLANG_SPECULATIVE_RUNNING), and a worker then gets 48 // --dp-size: one
# request a rank for a prefill server of 32 ranks. An MTP launch of a pool the study gave no cap
# (a prefill pool) passes this a rank instead, the least the worker runs without MTP.
SGLANG_UNSET_PER_WORKER = 2048


def sglang_running(pool: PoolLaunch, design: Design) -> int | None:
    """The --max-running-requests an SGLang launch passes: the pool's cap (:func:`sglang_cap`),
    or, for a pool without one under MTP, SGLang's own default without speculative decoding,
    :data:`SGLANG_UNSET_PER_WORKER` a data-parallel worker (unset, MTP would cut it to 48 a
    server); None: the flag is left to the engine."""
    cap = sglang_cap(pool)
    if cap is None and design.mtp_drafts:
        return SGLANG_UNSET_PER_WORKER * sglang_dp(pool)
    return cap


def instance_cap(pool: PoolLaunch, backend: str) -> int | None:
    """The most requests one instance of ``pool`` runs at once on ``backend`` (its running-request
    cap as that engine applies it: SGLang's floored to its DP size, vLLM's and TRT-LLM's split per
    rank, whole sequences down); None: the engine's default."""
    if backend == "sglang":
        return sglang_cap(pool)
    dp = pool.dp if backend == "vllm" else trtllm_dp(pool)
    per = per_rank_cap(pool, dp)
    return None if per is None else per * dp


def running_slots(design: Design, engine: str) -> int | None:
    """The requests the design's instances run at once: each decode (or aggregated) instance's
    cap as its engine applies it, times the instances; None where a pool has none (the engine's
    default). A router that admits fewer at once throttles the design below what it was sized at."""
    backend = backend_of(design, engine)
    total = 0
    for p in design.pools:
        if p.role == "prefill":
            continue
        cap = instance_cap(p, backend)
        if cap is None:
            return None
        total += cap * p.instances
    return total


def before_decode(design: Design) -> int:
    """The requests in flight before a running slot holds them, at the design's traffic: its rate
    times the seconds one spends there (``Design.before_decode_s``), by Little's law, whole ones up."""
    return math.ceil(design.requests_per_s * design.before_decode_s - 1e-9)


def router_admits(design: Design, engine: str) -> int | None:
    """The requests the router in front of the design must admit at once not to hold back the
    traffic it was sized for: the instances' running slots (``running_slots``) and those in flight
    before a slot holds them (``before_decode``); None where a pool runs its engine's default cap.

    The router counts a request from its arrival until its response ends: SGLang's takes a token
    of its bucket (capacity ``--max-concurrent-requests``) before it routes the request and returns
    it when the response body is done or dropped (sgl-project/sglang:
    sgl-model-gateway/src/middleware.rs @ 0317c97a, ``concurrency_limit_middleware`` and
    ``TokenGuardBody``, sgl-project/sglang#14653; earlier releases when the handler returns, a
    stream's at its first bytes: sgl-router/src/middleware.rs @ 07f5f749), around the handler
    that, in PD mode, sends the request to a prefill and a decode server at once and waits for
    both (sgl-model-gateway/src/routers/http/pd_router.rs, ``tokio::join!`` of the two sends). So
    a disaggregated design's requests hold one while queued for or in prefill and while their KV
    moves, before any decode slot is theirs, and an aggregated one's while they wait in an
    instance's queue for a running slot. vLLM's router does the same
    (vllm-project/router:src/middleware.rs @ 1dbe5075; a stream's token back at its first bytes,
    vllm-project/router#280 open). At the cap a request waits in the router's queue
    (``--queue-size``, default 100) for up to ``--queue-timeout-secs`` (default 60), then gets
    408; with the queue full, 429 (sgl-model-gateway/bindings/python/src/sglang_router/
    router_args.py @ 05e589ad). The bucket also refills at ``--rate-limit-tokens-per-second``,
    by default the cap a second (sgl-model-gateway/src/app_context.rs @ 00a85115,
    ``maybe_rate_limiter``; src/core/token_bucket.rs), which the scripts leave: the cap is the
    most it admits at once from a full bucket, and an empty one admits the cap a second besides
    the tokens returned."""
    slots = running_slots(design, engine)
    return None if slots is None else slots + before_decode(design)


def per_rank_cap(pool: PoolLaunch, dp: int) -> int | None:
    """The running-request cap of each of ``dp`` ranks of an engine that caps per rank: the
    instance's split, whole sequences down, at least one."""
    return None if pool.max_running is None else max(1, pool.max_running // dp)


def _per_rank_caps(
    pool: PoolLaunch, design: Design, dp: int, cap_flag: str, chunk_flag: str, graphs: bool = False
) -> list[str]:
    """The running-request cap as an engine that caps each of its ``dp`` data-parallel ranks takes
    it (the instance's split), and its token budget (:func:`token_budget`; ``graphs``: vLLM's,
    holding its CUDA graphs' largest size), where they are set."""
    out = []
    cap = per_rank_cap(pool, dp)
    if cap is not None:
        out += [cap_flag, str(cap)]
    budget = token_budget(pool, design, dp, graphs)
    if budget is not None:
        out += [chunk_flag, str(budget)]
    return out


# vLLM's and TRT-LLM's token budget per step where none is passed: vLLM's for `vllm serve` on GPUs
# of 70 GiB or more (vllm/engine/arg_utils.py @ 99d7eb5d, EngineArgs._set_default_args; later releases
# EngineArgs.get_batch_defaults), TRT-LLM's
# BaseLlmArgs.max_num_tokens (tensorrt_llm/llmapi/llm_args.py)
DEFAULT_TOKEN_BUDGET = 8192


def batch_tokens(pool: PoolLaunch, design: Design, dp: int) -> int:
    """The tokens one step of a rank's whole running batch takes: its cap, each request with its
    MTP drafts (0 where the pool has no cap)."""
    return (per_rank_cap(pool, dp) or 0) * (1 + design.mtp_drafts)


def token_budget(pool: PoolLaunch, design: Design, dp: int, graphs: bool = False) -> int | None:
    """The token budget per step of each of ``dp`` ranks of an engine whose budget the running
    requests' decode tokens share with prefill chunks (vLLM's --max-num-batched-tokens, TRT-LLM's
    max_num_tokens): the design's chunk (:func:`per_rank_chunk`), raised where it would not hold
    one step of the rank's whole running batch (:func:`batch_tokens`): vLLM refuses to start with
    a budget below --max-num-seqs (vllm/config/scheduler.py: ``verify_max_model_len``), and
    either engine would run fewer requests a step than the batch the study sized. ``graphs``
    (vLLM): that step as its CUDA graphs' grid rounds it (:func:`vllm_graph_tokens`), so the graphs
    reach the whole batch. A pool without a chunk keeps the engine's default (None) unless that is
    too small for its batch."""
    need = batch_tokens(pool, design, dp)
    if graphs and need:
        need = _on_graph_grid(need)
    if pool.chunk_tokens is None:
        return need if need > DEFAULT_TOKEN_BUDGET else None
    return max(per_rank_chunk(pool, design, dp), need)


def vllm_graph_tokens(pool: PoolLaunch, design: Design) -> int | None:
    """vLLM's --max-cudagraph-capture-size for a pool with a running cap: one decode step of a
    data-parallel rank's whole running batch (:func:`batch_tokens`), up to vLLM's grid of capture
    sizes (8 apart below 256, 16 from there: a maximum off it is cut to the size below, and a
    batch between the two then steps eagerly, vllm-project/vllm#37865), within the rank's token
    budget, where vLLM stops its graphs anyway. By default its graphs stop at 512 tokens a step
    (``engine_flags.toml``), and a larger running batch decodes eagerly, slower than the runs the
    step costs were fitted on. None: a pool without a cap (a Dynamo prefill worker)."""
    need = batch_tokens(pool, design, pool.dp)
    if not need:
        return None
    budget = token_budget(pool, design, pool.dp, graphs=True) or DEFAULT_TOKEN_BUDGET
    # the budget holds the rounded step (token_budget): it had been cut to the budget, off the
    # grid (280 tokens a step: vLLM's graphs then stopped at 272, the batch's top stepping eagerly)
    return min(_on_graph_grid(need), budget)


def _on_graph_grid(tokens: int) -> int:
    """``tokens`` rounded up to vLLM's grid of CUDA graph sizes (8 apart below 256, 16 from there)."""
    step = 8 if tokens < 256 else 16
    return -(-tokens // step) * step


def sglang_graph_batch(pool: PoolLaunch) -> int | None:
    """SGLang's --cuda-graph-max-bs for a pool with a running cap: the requests each attention-DP
    rank runs at once (:func:`sglang_cap` over :func:`sglang_dp`), up to a size its capture grid
    holds, so that its decode steps replay a CUDA graph; by default its graphs stop at 160 to 512
    requests by the GPU's memory and TP size (``engine_flags.toml``), and a larger batch steps
    eagerly. None: a pool without a cap.

    SGLang captures batch sizes on a grid up to this flag (``ServerArgs._generate_cuda_graph_batch_sizes``:
    8 apart to 256, then 16 and, without speculative decoding, 32 apart from 512; under it 4 or 2
    apart) and cuts the flag to the grid's largest size within it; ``get_batch_sizes_to_capture``
    then adds the rank's request pool only where a size above it was generated. A cap off the grid
    (197 a rank: sizes to 192) had its largest batches step eagerly, so the flag is the cap rounded
    up to a multiple of 32, which every grid holds, and of the attention TP size under DP
    attention, the only batch sizes SGLang captures there (its ``mul_base``)."""
    cap = sglang_cap(pool)
    if cap is None:
        return None
    step = math.lcm(32, pool.attn_tp if sglang_dp(pool) > 1 else 1)
    return -(-(cap // sglang_dp(pool)) // step) * step


def per_rank_chunk(pool: PoolLaunch, design: Design, dp: int) -> int:
    """The token budget of each of ``dp`` ranks of an engine that budgets per rank (vLLM,
    TRT-LLM): the design's chunk, split where its profile priced it for the whole instance."""
    chunk = int(pool.chunk_tokens or 0)
    return max(1, chunk // dp) if design.chunk_per_instance else chunk


def sglang_chunk(pool: PoolLaunch, design: Design) -> int:
    """SGLang's --chunked-prefill-size: it divides it by --dp-size under DP attention, so a
    chunk priced per attention-DP rank is passed times the ranks."""
    chunk = int(pool.chunk_tokens or 0)
    return chunk if design.chunk_per_instance else chunk * sglang_dp(pool)


# SGLang's ServerArgs.max_prefill_tokens: the prompt tokens a prefill batch of a rank takes, whatever
# --chunked-prefill-size is (sgl-project/sglang:python/sglang/srt/server_args.py; PrefillAdder's
# rem_input_tokens: a second request past it waits, python/sglang/srt/managers/schedule_policy.py)
SGLANG_MAX_PREFILL_TOKENS = 16384


def sglang_prefill_tokens(pool: PoolLaunch, design: Design) -> int | None:
    """SGLang's --max-prefill-tokens where a rank's chunk (--chunked-prefill-size over --dp-size)
    exceeds its default (:data:`SGLANG_MAX_PREFILL_TOKENS`): a prefill batch of short prompts would
    otherwise stop there, below the chunk the study priced a forward at. None: the default holds."""
    if pool.chunk_tokens is None:
        return None
    per_rank = sglang_chunk(pool, design) // sglang_dp(pool)
    return per_rank if per_rank > SGLANG_MAX_PREFILL_TOKENS else None


def sglang_args(pool: PoolLaunch, design: Design, f: dict[str, str], mode: str | None) -> list[str]:
    """SGLang: the instance's GPUs are its TP size; data-parallel attention splits them into
    ``dp`` attention ranks. Its running-request cap and chunk are for the whole instance."""
    args = [*f["launch"].split(), f["model"], "$MODEL", f["tp"], str(pool.tp)]
    args += _sglang_body(pool, design, f, mode)
    return [*args, f["host"], "0.0.0.0", f["port"], "$PORT", f["trust"]]


def _sglang_body(pool: PoolLaunch, design: Design, f: dict[str, str], mode: str | None) -> list[str]:
    args: list[str] = []
    if pool.pp > 1:
        args += [f["pp"], str(pool.pp)]
    if pool.ep > 1:
        args += [f["ep"], str(pool.ep)]
    if sglang_dp(pool) > 1:
        args += [f["dp_attention"], f["dp"], str(sglang_dp(pool))]
    cap = sglang_running(pool, design)
    if cap is not None:
        args += [f["max_running"], str(cap)]
    graphs = sglang_graph_batch(pool)
    if graphs is not None:
        args += [f["cuda_graph_max"], str(graphs)]
    if pool.chunk_tokens is not None:
        args += [f["chunk"], str(sglang_chunk(pool, design))]
    prefill = sglang_prefill_tokens(pool, design)
    if prefill is not None:
        args += [f["max_prefill"], str(prefill)]
    args += [f["kv_dtype"], _kv(design, f)]
    host = sglang_hicache_gb(pool)
    if host is not None:
        args += [f["hicache"], f["hicache_size"], str(host)]
        if sglang_storage(pool):
            args += [f["hicache_storage"], f["hicache_storage_file"]]
    if design.mtp_drafts:
        d = design.mtp_drafts
        args += [f["spec_algorithm"], f["spec_algorithm_mtp"], f["spec_steps"], str(d), f["spec_topk"], "1"]
        args += [f["spec_draft_tokens"], str(d + 1)]
    if mode is not None:
        args += [f["disagg_mode"], mode, f["disagg_backend"], f["disagg_backend_value"]]
    if mode == "prefill":
        args += [f["bootstrap_port"], "$BOOTSTRAP_PORT"]
    if pool.hosts > 1:
        # rank 0's host and the port the instance's slot keeps for it (scripts.DIST_INIT_OFFSET)
        args += [f["nnodes"], str(pool.hosts), f["node_rank"], "$NODE_RANK"]
        args += [f["dist_init"], "$HEAD_HOST:$DIST_INIT_PORT"]
    return args


def vllm_args(pool: PoolLaunch, design: Design, f: dict[str, str]) -> list[str]:
    """vLLM: tensor parallelism inside an attention rank, data parallelism across ranks, each
    rank an engine with its own running-request cap (the instance's, split)."""
    args = [*f["launch"].split(), "$MODEL", f["tp"], str(pool.attn_tp), f["dp"], str(pool.dp)]
    if pool.ep > 1:
        args.append(f["ep"])
    args += _per_rank_caps(pool, design, pool.dp, f["max_running"], f["chunk"], graphs=True)
    graphs = vllm_graph_tokens(pool, design)
    if graphs is not None:
        args += [f["cuda_graph_max"], str(graphs)]
    args += [f["kv_dtype"], _kv(design, f)]
    offload = vllm_offload_gib(pool)
    if offload is not None:
        args += [f["kv_offload_size"], f"{offload:g}", f["kv_offload_backend"], f["kv_offload_backend_value"]]
    if design.mtp_drafts:
        spec = json.dumps({"method": f["spec_method"], "num_speculative_tokens": design.mtp_drafts})
        args += [f["spec_config"], spec]
    # with its server's port, each instance's own data-parallel RPC port (``_placement``); after
    # --host, so that Dynamo's vLLM worker, which takes the flags before it, goes without
    rpc = [f["dp_rpc_port"], "$DP_RPC_PORT"] if pool.dp > 1 else []
    return [*args, f["host"], "0.0.0.0", f["port"], "$PORT", *rpc, f["trust"]]


def trtllm_args(pool: PoolLaunch, design: Design, f: dict[str, str], options: str) -> list[str]:
    """TRT-LLM: the instance's GPUs are its TP size; its batch cap is per attention-DP rank."""
    args = [f["launch"], "$MODEL", f["tp"], str(pool.gpus), f["ep"], str(pool.ep)]
    args += _per_rank_caps(pool, design, trtllm_dp(pool), f["max_running"], f["chunk"])
    return [*args, f["options"], f"$HERE/{options}", f["host"], "0.0.0.0", f["port"], "$PORT", f["trust"]]


def trtllm_options(
    pool: PoolLaunch, design: Design, f: dict[str, str], mode: str | None = None
) -> dict[str, Any]:
    """A TRT-LLM options YAML: attention DP, the KV cache, MTP; chunked prefill where the pool has
    a chunk (off by default, and a prompt longer than max_num_tokens is then refused); the longest
    sequence the workload reaches; CUDA graphs up to a rank's running cap (its default stops at 128
    sequences, above which a step runs eagerly); and, for a disaggregated worker (``mode``), the KV cache
    transceiver (the prefill worker without the overlap scheduler), as Dynamo's examples have them."""
    kv: dict[str, Any] = {f["yaml_kv_dtype"]: _kv(design, f)}
    host = trtllm_host_cache_bytes(pool)
    if host is not None:  # the KV the study rests in the hosts' DRAM, each rank's share
        kv[f["yaml_host_cache"]] = host
    out: dict[str, Any] = {
        f[
            "yaml_trust"
        ]: True,  # as every launch here trusts the checkpoint's code (Dynamo reads it here alone)
        f["yaml_dp_attention"]: pool.attn_tp == 1 and pool.gpus > 1,
        f["yaml_kv"]: kv,
    }
    if pool.chunk_tokens is not None:
        out[f["yaml_chunked_prefill"]] = True
    if design.context_tokens:
        out[f["yaml_max_seq_len"]] = design.context_tokens
    cap = per_rank_cap(pool, trtllm_dp(pool))
    if cap is not None and mode != "prefill":  # a decode or aggregated worker's running batch
        out[f["yaml_cuda_graph"]] = {f["yaml_cg_padding"]: True, f["yaml_cg_max_batch"]: cap}
    if design.mtp_drafts:
        out[f["yaml_spec"]] = {
            f["yaml_spec_type"]: f["yaml_spec_type_mtp"],
            f["yaml_spec_layers"]: design.mtp_drafts,
        }
    if mode is not None:
        transceiver: dict[str, Any] = {f["yaml_ct_backend"]: f["yaml_ct_backend_value"]}
        if design.prompt_tokens:
            transceiver[f["yaml_ct_max_tokens"]] = design.prompt_tokens
        out[f["yaml_ct"]] = transceiver
        if mode == "prefill":
            out[f["yaml_no_overlap"]] = True
    return out


def dynamo_args(
    pool: PoolLaunch, design: Design, flags: dict[str, dict[str, str]], mode: str | None
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """A Dynamo worker of the study's engine: its backend's own flags, and its role where it has one
    (an aggregated worker is given none: aggregated is the default, whose spelling dynamo.trtllm
    changed); and the options files it reads (file name -> their contents, for a TRT-LLM worker)."""
    d = flags["dynamo"]
    backend = BACKEND_OF_PROFILE[design.profile]
    if backend == "sglang":
        args = [
            *d["sglang_worker"].split(),
            flags["sglang"]["model"],
            "$MODEL",
            flags["sglang"]["tp"],
            str(pool.tp),
        ]
        body = _sglang_body(pool, design, flags["sglang"], None)
        if pool.per_host > 1:  # SGLang derives ports from it (scripts.SGLANG_DERIVED): the slot's own
            body += [flags["sglang"]["port"], "$PORT"]
        sg = flags["sglang"]
        mode_args = [d["sglang_mode"], mode, sg["disagg_backend"], sg["disagg_backend_value"]] if mode else []
        if mode == "prefill":
            mode_args += [flags["sglang"]["bootstrap_port"], "$BOOTSTRAP_PORT"]
        return [*args, *body, *mode_args, flags["sglang"]["trust"]], {}
    if backend == "vllm":
        v = vllm_args(pool, design, flags["vllm"])
        body = v[len(flags["vllm"]["launch"].split()) + 1 : v.index(flags["vllm"]["host"])]
        # a prefill or decode worker's role and its KV connector (NIXL, set by no default)
        role = [d["vllm_mode"], mode, d["vllm_kv_transfer"], d["vllm_kv_transfer_value"]] if mode else []
        # (body stops at --host, before the --trust-remote-code the engine's own launch ends with)
        words = [*d["vllm_worker"].split(), d["vllm_model"], "$MODEL", *role, *body, flags["vllm"]["trust"]]
        if mode and pool.per_host > 1:  # its NIXL side channel's ports, its own on a shared host
            words = ["env", f"{d['vllm_nixl_port_env']}=$NIXL_SIDE_PORT", *words]
        return words, {}
    options = f"{pool.name}.yaml"
    args = [*d["trtllm_worker"].split(), d["trtllm_model"], "$MODEL"]
    args += [d["trtllm_mode"], mode] if mode else []
    args += [d["trtllm_tp"], str(pool.gpus), d["trtllm_ep"], str(pool.ep)]
    if pool.attn_tp == 1 and pool.gpus > 1:
        args.append(d["trtllm_dp_attention"])
    args += _per_rank_caps(pool, design, trtllm_dp(pool), d["trtllm_max_running"], d["trtllm_chunk"])
    args += [d["trtllm_options"], f"$HERE/{options}"]
    return args, {options: trtllm_options(pool, design, flags["trtllm"], mode)}
