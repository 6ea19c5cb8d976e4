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
}
