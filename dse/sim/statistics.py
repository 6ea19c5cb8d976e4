"""Verdicts shared by both simulators: backlog growth, oscillation, weighted quantiles, queueing.

Applying the same functions to the fluid trajectories and to the discrete-event samples means a
disagreement between the two is about the traffic model, not about how the verdict was taken.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.quantiles import percentile
from dse.sim.scenario import Array

GROWTH_SHARE = 0.01  # a backlog growing faster than 1% of the arrival rate is not stable
MIN_BACKLOG_S = 10.0  # ... and holding more than 10 s of arrivals at the end
ACF_PEAK = 0.3  # autocorrelation a repeating swing must reach at its period


def backlog_growth(t: Array, backlog: Array, arrival_rate: float) -> tuple[Array, Array]:
    """(stable, growth in requests/s) per row of ``backlog`` (configurations x samples), from the
    last third of the trajectory: a least-squares slope, judged against the arrival rate."""
    t = np.asarray(t, dtype=float)
    b = np.atleast_2d(np.asarray(backlog, dtype=float))
    keep = t >= t[-1] - (t[-1] - t[0]) / 3.0
    tt, bb = t[keep], b[:, keep]
    if len(tt) < 3:
        return np.ones(len(b), dtype=bool), np.zeros(len(b))
    tc = tt - tt.mean()
    slope = (bb * tc).sum(axis=1) / (tc**2).sum()
    unstable = (slope > GROWTH_SHARE * arrival_rate) & (bb[:, -1] > MIN_BACKLOG_S * arrival_rate)
    return ~unstable, slope


@dataclass(frozen=True)
class Oscillation:
    detected: bool
    period_s: float  # nan when not detected
    amplitude: float  # half the 5-95% range of the signal


def detect_oscillation(t: Array, signal: Array, *, min_amplitude: float) -> Oscillation:
    """A sustained swing: the autocorrelation has a peak of at least :data:`ACF_PEAK` after its
    first zero crossing, and the swing is at least ``min_amplitude``."""
    t = np.asarray(t, dtype=float)
    x = np.asarray(signal, dtype=float)
    amp = (percentile(x, 95.0) - percentile(x, 5.0)) / 2.0 if len(x) else 0.0
    if len(x) < 8 or amp < min_amplitude:
        return Oscillation(False, float("nan"), amp)
    # resample to a uniform grid, then the autocorrelation of the detrended signal
    grid = np.linspace(t[0], t[-1], min(len(t), 4096))
    y = np.interp(grid, t, x)
    y = y - np.polyval(np.polyfit(grid, y, 1), grid)
    f = np.fft.rfft(y, n=2 * len(y))
    acf = np.fft.irfft(f * np.conj(f))[: len(y)]
    if acf[0] <= 0:
        return Oscillation(False, float("nan"), amp)
    acf = acf / acf[0]
    below = np.flatnonzero(acf < 0.0)
    if not len(below):
        return Oscillation(False, float("nan"), amp)
    start = below[0]
    lag = start + int(np.argmax(acf[start : len(acf) // 2])) if start < len(acf) // 2 else start
    if lag >= len(acf) // 2 or acf[lag] < ACF_PEAK:
        return Oscillation(False, float("nan"), amp)
    return Oscillation(True, float(lag * (grid[1] - grid[0])), amp)


def weighted_quantile(values: Array, weights: Array, q: float) -> Array:
    """The ``q`` quantile of each row of ``values`` under the row's ``weights``."""
    v = np.atleast_2d(np.asarray(values, dtype=float))
    w = np.broadcast_to(np.atleast_2d(np.asarray(weights, dtype=float)), v.shape)
    if v.shape[1] == 0:
        return np.full(len(v), np.nan)
    order = np.argsort(v, axis=1)
    cw = np.cumsum(np.take_along_axis(w, order, axis=1), axis=1)
    idx = np.argmax(cw >= q * cw[:, -1:], axis=1)
    return np.take_along_axis(v, order, axis=1)[np.arange(len(v)), idx]
