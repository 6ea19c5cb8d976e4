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

ENGINES: tuple[str, ...] = tuple(dict.fromkeys(FRAMEWORK_ENGINE.values()))
"""The engine profiles, in first-seen order: ``dse place --engine`` and study files name these."""

SGLANG_SPECULATIVE_RUNNING = 48
"""SGLang's ``--max-running-requests`` where speculative decoding (MTP runs as its EAGLE family)
is on and the flag is not given: "Max running requests is reset to 48 for speculative decoding"
(``python/sglang/srt/server_args.py``, ``_handle_speculative_decoding``, v0.4-0.5.x), for the whole
server whatever its ``--disaggregation-mode``; each attention-DP rank takes ``48 // dp``
(``resolve_max_num_reqs``)."""
