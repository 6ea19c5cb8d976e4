"""Serving frameworks as measured runs name them, and the engine profile each is priced with.

Plain data, cheap to import: the CLI lists the names in its help. The profiles themselves (KV
precision, draft depth, fitted overheads) live in ``dse.perf.params``; a test checks the two agree.
"""

from __future__ import annotations

FRAMEWORK_ENGINE: dict[str, str] = {
    "trt": "trt",
    "dynamo-trt": "trt",
    "sglang": "sglang",
    "dynamo-sglang": "sglang",
    "mori-sglang": "sglang",
    "atom": "atom",
    "vllm": "vllm",
}
"""Framework name (a measured run's ``framework`` column, ``dse predict --framework``) to engine profile."""

FRAMEWORK_VENDORS: dict[str, tuple[str, ...]] = {
    "trt": ("nvidia",),  # TensorRT-LLM: CUDA only
    "dynamo-trt": ("nvidia",),
    "atom": ("amd",),  # ATOM: AMD's ROCm engine
    "mori-sglang": ("amd",),  # SGLang over MoRI, AMD's ROCm RDMA library
}
"""The GPU vendors a framework runs on, where not every one (the measured runs have each only on
these): TensorRT-LLM on an MI355X had been predicted, and ranked above the engines that run there."""

ENGINES: tuple[str, ...] = tuple(dict.fromkeys(FRAMEWORK_ENGINE.values()))
"""The engine profiles, in first-seen order: ``dse place --engine`` and study files name these."""

ENGINE_VENDORS: dict[str, tuple[str, ...]] = {"trt": ("nvidia",), "atom": ("amd",)}
"""The GPU vendors an engine profile's engine runs on, where not every one: TensorRT-LLM on NVIDIA
only, ATOM on AMD only (:data:`FRAMEWORK_VENDORS`); SGLang and vLLM on both."""

ENGINE_NAMES: dict[str, str] = {"trt": "TensorRT-LLM", "atom": "ATOM", "sglang": "SGLang", "vllm": "vLLM"}


def default_engine(vendors: set[str]) -> str:
    """The engine profile a placement on GPUs of ``vendors`` is priced with where none is named:
    TensorRT-LLM's (``trt``) on NVIDIA alone, else SGLang's, which runs on every vendor."""
    return "trt" if vendors <= {"nvidia"} else "sglang"


def engine_vendor_problem(engine: str, hardware: dict[str, str]) -> str | None:
    """Why ``engine`` cannot run on the GPUs ``hardware`` (id -> vendor) names, or None."""
    vendors = ENGINE_VENDORS.get(engine)
    other = next((h for h, v in hardware.items() if vendors is not None and v not in vendors), None)
    if vendors is None or other is None:
        return None
    runs = [e for e in ENGINES if all(v in ENGINE_VENDORS.get(e, (v,)) for v in hardware.values())]
    return (
        f"{ENGINE_NAMES[engine]} runs on {' and '.join(_VENDOR_NAMES.get(v, v) for v in vendors)} GPUs "
        f"only, and {other}'s are {_VENDOR_NAMES.get(hardware[other], hardware[other])} "
        f"({', '.join(runs)} run on every GPU named)"
    )


_VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD"}

SGLANG_SPECULATIVE_RUNNING = 48
"""SGLang's ``--max-running-requests`` where speculative decoding (MTP runs as its EAGLE family)
is on and the flag is not given: "Max running requests is reset to 48 for speculative decoding"
(``python/sglang/srt/server_args.py``, ``_handle_speculative_decoding``, v0.4-0.5.x), for the whole
server whatever its ``--disaggregation-mode``; each attention-DP rank takes ``48 // dp``
(``resolve_max_num_reqs``)."""

# The other engines' running-request caps where a launch sets none: each caps every data-parallel
# (attention-DP) rank on its own, as a rank runs a scheduler of its own.

VLLM_MAX_NUM_SEQS = 1024
"""vLLM's ``--max-num-seqs`` where it is not given, for ``vllm serve`` (usage context
OPENAI_API_SERVER) on a GPU of :data:`VLLM_LARGE_GPU_GIB` or more whose name has no "a100"
(vllm-project/vllm ``vllm/engine/arg_utils.py`` @ 99d7eb5d, v0.11, ``EngineArgs._set_default_args``:
``default_max_num_seqs`` 1024 "For GPUs like H100 and MI300x", else :data:`VLLM_MAX_NUM_SEQS_SMALL_GPU`;
then at most ``max_num_batched_tokens``, 8192 there). Later releases keep the table (moved to
``EngineArgs.get_batch_defaults``); early 2025's (@ 001999d2, ``EngineArgs.__post_init__``) took
1024 on the V1 engine and 256 on V0 whatever the GPU. Per engine core, one a data-parallel rank
(``--data-parallel-size``)."""

VLLM_MAX_NUM_SEQS_SMALL_GPU = 256
"""vLLM's ``--max-num-seqs`` where not given on a GPU under :data:`VLLM_LARGE_GPU_GIB`, or an A100
(the same table: the A100 check keeps PR #17885's token budget off it)."""

VLLM_LARGE_GPU_GIB = 70.0
"""``device_memory >= 70 * GiB_bytes``: from here up vLLM takes :data:`VLLM_MAX_NUM_SEQS`."""

TRTLLM_MAX_BATCH_SIZE = 2048
"""TensorRT-LLM's ``max_batch_size`` where not given: ``BaseLlmArgs.max_batch_size``
``Field(default=2048)`` (NVIDIA/TensorRT-LLM ``tensorrt_llm/llmapi/llm_args.py`` @ 00043967; before,
``BuildConfig.max_batch_size = 2048`` in ``tensorrt_llm/builder.py``), which ``trtllm-serve
--max_batch_size`` takes as its default (``tensorrt_llm/commands/serve.py`` @ 00209af1:
``BuildConfig.model_fields["max_batch_size"].default``). With attention DP every rank schedules
its own: the executor lets in up to ``tp_size * max_num_active_requests``
(``tensorrt_llm/_torch/pyexecutor/py_executor.py``, ``_fetch_new_requests``)."""

ATOM_MAX_NUM_SEQS = 512
"""ATOM's ``--max-num-seqs`` where not given (ROCm/ATOM ``atom/model_engine/arg_utils.py``,
``EngineArgs.max_num_seqs = 512``, and ``atom/config.py`` ``Config.max_num_seqs``, unchanged from
its first commit of 2025-08 to v0.1.6-rc0 and ffdf3bb5 of 2026-08). Its scheduler runs at most that
many (``atom/model_engine/scheduler.py``, ``len(self.running) >= self.max_num_seqs``), and under
``--enable-dp-attention`` every GPU is a data-parallel rank with an EngineCore and scheduler of its
own (``atom/model_engine/engine_core_mgr.py``); MTP's token budget, ``max_num_batched_tokens //
(mtp_k + 1)`` with 16384 tokens, binds only beyond 31 drafts."""
