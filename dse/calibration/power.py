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


PER_GPU = (0.05, 1.1)
"""The average power per GPU a run can measure, as shares of the GPU's TDP: above 110% it is a
node's or a server's (eight GPUs': 185% of a TDP had been fitted, a file no command then loads),
below 5% kilowatts, not watts (fitted as 5% of TDP idle and full)."""


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
    runs, _ = per_gpu_power(data, catalog)
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
    idle, full = float(sol.x[0]), float(sol.x[0] + sol.x[1])
    if full > 1.0:  # past the TDP, which the power model's rule refuses: the best within it

        def within(x: np.ndarray) -> PowerParams:  # full as a share of the way from idle to the TDP
            return PowerParams(idle=x[0], full=x[0] + x[1] * (1.0 - x[0]))

        sol = least_squares(
            lambda x: np.log(gpu_power_w(tdp, busy, within(x)) / watts), x0=[0.3, 0.5],
            bounds=([0.05, 0.0], [0.9, 1.0]),
        )  # fmt: skip
        idle, full = within(sol.x).idle, within(sol.x).full
    fitted = PowerParams(idle=float(idle), full=float(full))
    err = np.abs(gpu_power_w(tdp, busy, fitted) / watts - 1.0)
    hardware = tuple(sorted({m.row.hardware for m, _ in runs}))
    return PowerFit(fitted, len(runs), hardware, float(np.median(err)))


def per_gpu_power(
    data: Sequence[Measured], catalog: Catalog
) -> tuple[list[tuple[Measured, float]], list[str]]:
    """The runs whose measured power can be a GPU's (:data:`PER_GPU`), with it; and one line per
    run whose power cannot, which the fit leaves out."""
    runs, left_out = [], []
    for m, w in measured_power(data):
        tdp_w = catalog.hardware(m.row.hardware).tdp_w
        if PER_GPU[0] * tdp_w <= w <= PER_GPU[1] * tdp_w:
            runs.append((m, w))
            continue
        unit = "a node's or a server's, not a GPU's" if w > tdp_w else "kilowatts, not watts"
        left_out.append(
            f"{m.where}: {POWER_COLUMN} = {w:g}: is {w / tdp_w:.0%} of {m.row.hardware}'s TDP ({tdp_w:g} W): "
            f"{unit}? (left out; the row's other figures are fitted)"
        )
    return runs, left_out
