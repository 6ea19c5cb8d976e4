"""The metrics a trial records, with units and, for those a study may optimise, a direction."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    unit: str
    direction: str | None  # "minimize", "maximize", or None (recorded only)
    doc: str


METRICS = {
    "usd_per_million_tokens": Metric("$/M tokens", "minimize", "cost per million prompt + output tokens"),
    "usd_per_hour": Metric("$/h", "minimize", "GPUs bought, at the study's price tier"),
    "gpus": Metric("GPUs", "minimize", "GPUs bought, in whole nodes or racks"),
    "tokens_per_s_per_gpu": Metric("tokens/s/GPU", "maximize", "prompt + output tokens per GPU bought"),
    "tokens_per_s_per_user": Metric("tokens/s", "maximize", "decode speed one user sees (1 / TPOT)"),
    "output_tokens_per_s_per_decode_gpu": Metric("tokens/s/GPU", "maximize", "output tokens per decode GPU"),
    "ttft_s": Metric("s", "minimize", "mean time to first token, simulated"),
    "ttft_pct_s": Metric("s", "minimize", "TTFT at the study's percentile, simulated"),
    "tpot_s": Metric("s", "minimize", "mean time per output token, simulated"),
    "e2e_s": Metric("s", "minimize", "mean end-to-end latency, simulated"),
    "hbm_peak_gb_per_gpu": Metric("GB", "minimize", "largest HBM residency of any pool"),
    "decode_batch": Metric("sequences", None, "sequences per decode instance"),
    "milp_solve_s": Metric("s", None, "MILP solve time"),
    "sim_backlog_growth_per_s": Metric("requests/s", None, "backlog growth over the simulation's last third"),
    "ttft_p99_s": Metric("s", "minimize", "99th-percentile time to first token, simulated"),
    "queue_peak_prefill_requests": Metric(
        "requests", None, "most requests waiting for or in prefill (incl. reload, handoff), simulated"
    ),
    "queue_peak_buffer_requests": Metric(
        "requests", None, "most prefilled requests waiting for a decode slot"
    ),
    "planner_moves": Metric("moves", None, "instances the planner moved between prefill and decode"),
    "oscillation_amplitude": Metric(
        "instances or requests", None, "swing of a sustained oscillation, else 0"
    ),
    "hbm_bandwidth_usd_per_tbps_gpu_hour": Metric(
        "$/h per TB/s per GPU",
        None,
        "shadow price of HBM bandwidth, decode hardware (grid studies)",
    ),
    "hbm_capacity_usd_per_gb_gpu_hour": Metric(
        "$/h per GB per GPU",
        None,
        "shadow price of HBM capacity, decode hardware (grid studies)",
    ),
}
