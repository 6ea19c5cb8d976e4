"""Power a GPU draws at load, from its TDP and how busy its kernels keep it.

A GPU that waits on the host (the engine's scheduler, launches, the per-step overhead) draws less
than one whose kernels run back to back, and both less than its TDP: power =
TDP x (idle + (full - idle) x busy), with busy the share of wall time kernels run, idle and full
fitted on the measured runs' average power (:mod:`dse.calibration.power`). Facility power is that
times the site's PUE.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dse.perf.params import PowerParams


def gpu_power_w(tdp_w: Any, busy: Any, p: PowerParams) -> Any:
    """Watts one GPU draws with its kernels running ``busy`` of the time (0..1)."""
    b = np.clip(np.asarray(busy, dtype=float), 0.0, 1.0)
    return np.asarray(tdp_w, dtype=float) * (p.idle + (p.full - p.idle) * b)


def step_busy(gemm_s: Any, attention_s: Any, comm_s: Any, overhead_s: Any) -> Any:
    """The share of a forward pass its kernels run: all of it but the per-step overhead, which the
    GPU spends waiting on the host."""
    kernels = np.asarray(gemm_s) + np.asarray(attention_s) + np.asarray(comm_s)
    return kernels / np.maximum(kernels + np.asarray(overhead_s), 1e-12)


def kwh_per_million_tokens(power_kw: float, tokens_per_s: float) -> float:
    """Energy per million tokens served at ``tokens_per_s`` drawing ``power_kw``."""
    return power_kw * 1e6 / (tokens_per_s * 3600.0) if tokens_per_s > 0 else float("nan")
