"""Fit the latency side to the measured runs' TTFT and TPOT percentiles.

Each measured run is replayed as its benchmark ran it (:mod:`dse.perf.latency`: closed loop at
its concurrency, ten prompts per client, lengths uniform on 80-100% of nominal), on the step costs
of the throughput fit. What the simulation does not see is fitted: the seconds a request spends
outside the engine's forwards before its first token reaches the client
(:attr:`~dse.perf.params.LatencyParams.frontend_s`) and, disaggregated, the hand-off's own
(:attr:`~dse.perf.params.LatencyParams.handoff_s`). Both add to every TTFT, so they are fitted on
one simulation per parameter set by a grid search minimising the median absolute error of the
TTFT p50 and p99.

Leave-one-hardware-out: for each GPU type, the step costs come from the throughput fit without
it, the two offsets are fitted on the other GPUs' runs, and its runs are predicted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from dse.calibration.fit import Measured
from dse.catalog import Catalog
from dse.perf.benchmark_rows import latency_of
from dse.perf.params import LatencyParams, PerfParams

# (metric, percentile, the measured column, its unit in seconds)
MEASURED = (
    ("ttft", 50.0, "median_ttft_s", 1.0),
    ("ttft", 99.0, "p99_ttft_s", 1.0),
    ("tpot", 50.0, "median_tpot_ms", 1e-3),
    ("tpot", 99.0, "p99_tpot_ms", 1e-3),
)
LABELS = ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99")
OFFSET_GRID = np.round(np.arange(0.0, 0.6001, 0.005), 3)  # seconds
SEED = 0


def measured_latency(data: Sequence[Measured]) -> np.ndarray:
    """``(rows, 4)``: each run's measured TTFT p50, p99 and TPOT p50, p99 in seconds (nan if absent)."""
    out = np.full((len(data), len(MEASURED)), np.nan)
    for i, m in enumerate(data):
        for j, (_, _, col, unit) in enumerate(MEASURED):
            try:
                v = float(m.raw.get(col) or "nan") * unit
            except ValueError:
                v = float("nan")
            out[i, j] = v if v > 0 else np.nan
    return out


def simulate_measured(data: Sequence[Measured], catalog: Catalog, params: PerfParams) -> np.ndarray:
    """``(rows, 4)``: each run replayed under ``params`` without the fitted offsets: TTFT p50,
    p99 and TPOT p50, p99 in seconds."""
    bare = replace(params, latency=replace(params.latency, frontend_s=0.0, handoff_s=0.0))
    out = np.full((len(data), len(MEASURED)), np.nan)
    for i, m in enumerate(data):
        lat = latency_of(m.row, catalog, bare, seed=SEED)
        for j, (metric, q, _, _) in enumerate(MEASURED):
            out[i, j] = lat.percentile(metric, q)
    return out


def with_offsets(sim: np.ndarray, disagg: np.ndarray, frontend_s: float, handoff_s: float) -> np.ndarray:
    """The simulated percentiles with the offsets added to the TTFT columns."""
    out = sim.copy()
    out[:, :2] += frontend_s + np.where(disagg, handoff_s, 0.0)[:, None]
    return out


def abs_errors(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.abs(pred / meas - 1.0)


def fit_offsets(sim: np.ndarray, meas: np.ndarray, disagg: np.ndarray) -> tuple[float, float]:
    """(frontend, hand-off) seconds minimising the mean of the TTFT p50 and p99 median absolute
    errors, over the grid of both at once (the hand-off moves the disaggregated runs only)."""
    best = (np.inf, 0.0, 0.0)
    for f in OFFSET_GRID:
        for h in OFFSET_GRID if disagg.any() else OFFSET_GRID[:1]:
            e = abs_errors(with_offsets(sim, disagg, f, h)[:, :2], meas[:, :2])
            score = float(np.mean([np.nanmedian(e[:, 0]), np.nanmedian(e[:, 1])]))
            if score < best[0] - 1e-12:
                best = (score, float(f), float(h))
    return best[1], best[2]


@dataclass(frozen=True)
class LatencyFit:
    params: LatencyParams
    in_sample: dict[str, float]  # median absolute error per label
    loho: dict[str, float] | None
    loho_by_hardware: dict[str, dict[str, float]] | None


def medians(err: np.ndarray) -> dict[str, float]:
    return {label: round(float(np.nanmedian(err[:, j])), 4) for j, label in enumerate(LABELS)}


def fit_latency(
    data: Sequence[Measured],
    catalog: Catalog,
    params: PerfParams,
    fold_fits: Mapping[str, PerfParams] | None = None,
) -> LatencyFit:
    """The offsets fitted on every run, their in-sample error and, with the throughput fits that
    left each GPU type out (``fold_fits``), the leave-one-hardware-out error."""
    meas = measured_latency(data)
    disagg = np.array([m.row.disagg for m in data])
    sim = simulate_measured(data, catalog, params)
    f, h = fit_offsets(sim, meas, disagg)
    fitted = replace(params.latency, frontend_s=f, handoff_s=h)
    in_sample = medians(abs_errors(with_offsets(sim, disagg, f, h), meas))
    if fold_fits is None:
        return LatencyFit(fitted, in_sample, None, None)
    hw = np.array([m.row.hardware for m in data])
    pred = np.full_like(meas, np.nan)
    for held, fold in fold_fits.items():
        fold_sim = simulate_measured(data, catalog, fold)
        train = hw != held
        fo, ho = fit_offsets(fold_sim[train], meas[train], disagg[train])
        pred[~train] = with_offsets(fold_sim[~train], disagg[~train], fo, ho)
    err = abs_errors(pred, meas)
    by_hw = {h_: medians(err[hw == h_]) for h_ in sorted(set(hw))}
    return LatencyFit(fitted, in_sample, medians(err), by_hw)
