"""Fit the GPU power model (:mod:`dse.perf.power`) to the measured runs' average power.

Each run that reports ``avg_power_w`` (average power per GPU over the benchmark) is predicted as
its TDP times ``idle + (full - idle) x busy``, with busy the share of the run's decode step its
kernels take under the throughput fit; ``idle`` and ``full`` minimise the squared log error.
The runs with power are MI355X's alone, so on other GPUs the shares are an assumption, and the
provenance says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from dse.calibration.fit import POWER_COLUMN, Measured
from dse.catalog import Catalog
from dse.errors import InputError
from dse.perf.benchmark_rows import evaluate
from dse.perf.params import PerfParams, PowerParams
from dse.perf.power import gpu_power_w, step_busy
from dse.typed_data import measured_number


@dataclass(frozen=True)
class PowerFit:
    params: PowerParams
    rows: int
    hardware: tuple[str, ...]
    median_ape: float  # in-sample, of the average power per GPU


def measured_power(data: Sequence[Measured]) -> list[tuple[Measured, float]]:
    """The runs that measured their average power per GPU, with it: a cell that is no measurement
    (not a number > 0 within the data files' range) is left out, as
    :func:`~dse.calibration.fit.unmeasured_figures` says (an ``inf`` had been fitted, and ``x``
    or ``-5`` dropped unsaid)."""
    out = []
    for m in data:
        cell = m.raw.get(POWER_COLUMN)
        if cell is None or not str(cell).strip():
            continue  # not measured
        try:
            out.append((m, measured_number(cell, m.where, POWER_COLUMN)))
        except InputError:
            continue
    return out


def fit_power(data: Sequence[Measured], catalog: Catalog, params: PerfParams) -> PowerFit | None:
    """The fitted shares, or None when no run reports its power."""
    runs = measured_power(data)
    if not runs:
        return None
    tdp = np.array([catalog.hardware(m.row.hardware).tdp_w for m, _ in runs], dtype=float)
    watts = np.array([w for _, w in runs])
    busy = np.empty(len(runs))
    groups: dict[tuple[str, str], list[int]] = {}
    for i, (m, _) in enumerate(runs):
        groups.setdefault((m.row.model, m.row.topology), []).append(i)
    for idx in groups.values():
        r = evaluate([runs[i][0].row for i in idx], catalog, params)
        busy[idx] = step_busy(r.decode_gemm_s, r.decode_attention_s, r.decode_comm_s, r.decode_overhead_s)

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.log(gpu_power_w(tdp, busy, PowerParams(idle=x[0], full=x[0] + x[1])) / watts)

    sol = least_squares(residuals, x0=[0.3, 0.5], bounds=([0.05, 0.0], [0.9, 0.95]))
    fitted = PowerParams(idle=float(sol.x[0]), full=float(sol.x[0] + sol.x[1]))
    err = np.abs(gpu_power_w(tdp, busy, fitted) / watts - 1.0)
    hardware = tuple(sorted({m.row.hardware for m, _ in runs}))
    return PowerFit(fitted, len(runs), hardware, float(np.median(err)))
