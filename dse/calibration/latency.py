"""Fit the latency side to the measured runs' TTFT and TPOT percentiles.

Each measured run is replayed as its benchmark ran it (:mod:`dse.perf.latency`: closed loop at
its concurrency, ten prompts per client, lengths uniform on 80-100% of nominal), on the step costs
of the throughput fit. What the simulation does not see is fitted: the seconds a request spends
outside the engine's forwards before its first token reaches the client
(:attr:`~dse.perf.params.LatencyParams.frontend_s`) and, disaggregated, the hand-off's own
(:attr:`~dse.perf.params.LatencyParams.handoff_s`). Both add to every TTFT, so they are fitted on
one simulation per parameter set by a grid search minimising the median absolute error of the
TTFT p50 and p99. Third, per engine and GPU vendor, the wait of a fresh server's first wave
(:attr:`~dse.perf.params.LatencyParams.cold_start_s`): it moves only that wave, a tenth of a
run's requests, so its p99 above all (a run's mean TTFT over its median says the same: the
excess is about a tenth of the first wave's wait), and is fitted on the group's TTFT p99 once the
two offsets are.

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
COLD_STEP = 0.05  # seconds between two waits the fit tries
COLD_GRID = np.round(np.arange(0.0, 5.0001, COLD_STEP), 2)  # seconds: a first wave's wait
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


@dataclass(frozen=True)
class Replays:
    """Each measured run replayed without the fitted offsets and cold starts: its TTFT p50 and
    p99 as functions of its first wave's wait (on :data:`COLD_GRID`), its TPOT p50 and p99, and the
    group (``engine/vendor``) whose wait applies to it."""

    ttft: np.ndarray  # (rows, 2, len(COLD_GRID)): p50 and p99 at each wait
    tpot: np.ndarray  # (rows, 2)
    group: np.ndarray  # (rows,) str

    def at(self, cold: np.ndarray) -> np.ndarray:
        """``(rows, 4)`` percentiles with each row's first wave waiting ``cold[row]`` seconds (a
        value of the grid)."""
        k = np.searchsorted(COLD_GRID, np.round(cold, 2))
        out = np.empty((len(cold), len(MEASURED)))
        out[:, :2] = self.ttft[np.arange(len(cold)), :, k]
        out[:, 2:] = self.tpot
        return out


def replay_measured(data: Sequence[Measured], catalog: Catalog, params: PerfParams) -> Replays:
    """Each run replayed under ``params`` (its closed loop, :func:`latency_of`) without the fitted
    offsets and cold starts, with its TTFT percentiles at every first-wave wait of the grid."""
    bare = replace(params, latency=LatencyParams())
    ttft = np.full((len(data), 2, len(COLD_GRID)), np.nan)
    tpot = np.full((len(data), 2), np.nan)
    for i, m in enumerate(data):
        lat = latency_of(m.row, catalog, bare, seed=SEED)
        wave = lat.first_wave  # the closed loop's first requests, sent at once
        t = np.where(np.isnan(lat.ttft_s), np.inf, lat.ttft_s)
        ttft[i] = [_with_waits(t, wave, 50.0), _with_waits(t, wave, 99.0)]
        tpot[i] = [lat.percentile("tpot", 50.0), lat.percentile("tpot", 99.0)]
    group = np.array([f"{m.row.engine}/{catalog.hardware(m.row.hardware).vendor}" for m in data])
    return Replays(ttft, tpot, group)


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


def _with_waits(t: np.ndarray, wave: int, q: float) -> np.ndarray:
    """The ``q``-th percentile of ``t`` with its first ``wave`` values raised by each wait of
    :data:`COLD_GRID` (numpy's linear interpolation). Only the values at or above the percentile's
    lower rank can be it, so only the top of each part is kept; a percentile the largest wait
    leaves where it was is the same at every wait (raising values never lowers one)."""
    n = len(t)
    with np.errstate(invalid="ignore"):  # an inf beside the rank: numpy's nan
        at_ends = np.percentile(np.r_[t[:wave] + COLD_GRID[-1], t[wave:]], q)
        if at_ends == np.percentile(t, q):
            return np.full(len(COLD_GRID), at_ends)
    pos = q / 100.0 * (n - 1)
    lo = int(np.floor(pos))
    top = n - lo  # the union's values of rank lo and up: among the top of each part
    first = _top(t[:wave], top)
    rest = _top(t[wave:], top)
    raised = first[None, :] + COLD_GRID[:, None]
    union = np.concatenate([raised, np.tile(rest, (len(COLD_GRID), 1))], axis=1)
    k = union.shape[1] - top  # the column of rank lo
    k1 = min(k + 1, union.shape[1] - 1)
    union = np.partition(union, sorted({k, k1}), axis=1)
    below, above = union[:, k], union[:, k1]
    g = pos - lo
    with np.errstate(invalid="ignore"):  # numpy's own lerp, so an inf beside the rank gives its nan
        diff = above - below
        return below + diff * g if g < 0.5 else above - diff * (1.0 - g)


def _top(x: np.ndarray, m: int) -> np.ndarray:
    """The ``m`` largest values of ``x`` (all of it when it has fewer), in no order."""
    return x if m >= len(x) else np.partition(x, len(x) - m)[len(x) - m :]


def fit_cold_starts(
    rep: Replays, meas: np.ndarray, disagg: np.ndarray, frontend_s: float, handoff_s: float
) -> dict[str, float]:
    """Per group, the first-wave wait of :data:`COLD_GRID` minimising the median absolute error
    of its runs' TTFT p99 under the offsets."""
    off = frontend_s + np.where(disagg, handoff_s, 0.0)
    out = {}
    for g in sorted(set(rep.group)):
        rows = rep.group == g
        err = np.abs((rep.ttft[rows, 1, :] + off[rows, None]) / meas[rows, 1, None] - 1.0)
        if np.isnan(err).all():
            continue
        out[str(g)] = float(COLD_GRID[int(np.nanargmin(np.nanmedian(err, axis=0)))])
    return out


def fit_all(rep: Replays, meas: np.ndarray, disagg: np.ndarray) -> LatencyParams:
    """The offsets on the runs without cold starts, then each group's cold start under them.
    (Refitting the offsets with the cold starts moved them by 5-20 ms in the leave-one-out folds
    and the TTFT p50 error from 32.5% to 35.1%: the offsets stay fitted where the cold start
    cannot reach.)"""
    f, h = fit_offsets(rep.at(np.zeros(len(disagg))), meas, disagg)
    return LatencyParams(frontend_s=f, handoff_s=h, cold_start_s=fit_cold_starts(rep, meas, disagg, f, h))


def cold_of(rep: Replays, lp: LatencyParams) -> np.ndarray:
    """Each row's first-wave wait under ``lp`` (:meth:`~dse.perf.params.LatencyParams.cold_start`),
    rounded to the grid."""
    waits = [lp.cold_start(*str(g).split("/", 1)) for g in rep.group]
    return np.clip(np.round(np.array(waits, dtype=float) / COLD_STEP) * COLD_STEP, 0.0, COLD_GRID[-1])


def predicted(rep: Replays, disagg: np.ndarray, lp: LatencyParams) -> np.ndarray:
    """``(rows, 4)`` percentiles under ``lp``'s offsets and cold starts."""
    return with_offsets(rep.at(cold_of(rep, lp)), disagg, lp.frontend_s, lp.handoff_s)


def fit_latency(
    data: Sequence[Measured],
    catalog: Catalog,
    params: PerfParams,
    fold_fits: Mapping[str, PerfParams] | None = None,
) -> LatencyFit:
    """The offsets and cold starts fitted on every run, their in-sample error and, with the
    throughput fits that left each GPU type out (``fold_fits``), the leave-one-hardware-out error
    (the held-out GPU's group takes the wait its engine was fitted to on the other GPUs of its
    vendor; a group with none there, none)."""
    meas = measured_latency(data)
    disagg = np.array([m.row.disagg for m in data])
    rep = replay_measured(data, catalog, params)
    fitted = fit_all(rep, meas, disagg)
    in_sample = medians(abs_errors(predicted(rep, disagg, fitted), meas))
    if fold_fits is None:
        return LatencyFit(fitted, in_sample, None, None)
    hw = np.array([m.row.hardware for m in data])
    pred = np.full_like(meas, np.nan)
    for held, fold in fold_fits.items():
        fold_rep = replay_measured(data, catalog, fold)
        train = hw != held
        part = Replays(fold_rep.ttft[train], fold_rep.tpot[train], fold_rep.group[train])
        lp = fit_all(part, meas[train], disagg[train])
        held_rep = Replays(fold_rep.ttft[~train], fold_rep.tpot[~train], fold_rep.group[~train])
        pred[~train] = predicted(held_rep, disagg[~train], lp)
    err = abs_errors(pred, meas)
    by_hw = {h_: medians(err[hw == h_]) for h_ in sorted(set(hw))}
    return LatencyFit(fitted, in_sample, medians(err), by_hw)
