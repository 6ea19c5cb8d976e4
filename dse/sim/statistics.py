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
# the fluid model has no noise to allow for: a backlog growing by 0.1% of the arrival rate, holding
# one second of arrivals, is a load above capacity (1% had called up to 1% over it stable)
FLUID_GROWTH_SHARE = 0.001
FLUID_MIN_BACKLOG_S = 1.0
ACF_PEAK = 0.3  # autocorrelation a repeating swing must reach at its period


def backlog_growth(
    t: Array,
    backlog: Array,
    arrival_rate: float,
    *,
    period_s: Array | None = None,
    share: float = GROWTH_SHARE,
    min_backlog_s: float = MIN_BACKLOG_S,
    peaks: bool = False,
) -> tuple[Array, Array, Array]:
    """(stable, growth in requests/s, window in s) per row of ``backlog`` (configurations x
    samples): a least-squares slope over the last third of the trajectory (window nan), judged
    against the arrival rate.

    A row that swings with a period (``period_s``, nan for none: a planner's cycle, a diurnal
    swing) whose last two periods fit in the trajectory is judged over whole periods instead: the
    mean of its last period less the mean of the one before, over the period (with ``peaks``, or
    the same of their peaks, whichever is less: for a deterministic run, the fluid's, whose peaks
    are exact; in a run of drawn requests one noisy peak would hide real growth), and the last
    period's mean backlog (window: the whole periods each mean spans). A slope over a window that
    is not a whole number of periods reads the phase the run ended in: a bounded cycle had been
    called unstable at one planner delay and stable at a longer one."""
    t = np.asarray(t, dtype=float)
    b = np.atleast_2d(np.asarray(backlog, dtype=float))
    keep = t >= t[-1] - (t[-1] - t[0]) / 3.0
    tt, bb = t[keep], b[:, keep]
    window = np.full(len(b), np.nan)
    if len(tt) < 3:
        return np.ones(len(b), dtype=bool), np.zeros(len(b)), window
    tc = tt - tt.mean()
    slope = (bb * tc).sum(axis=1) / (tc**2).sum()
    level = bb[:, -1].copy()
    periods = np.full(len(b), np.nan) if period_s is None else np.broadcast_to(period_s, len(b))
    for i, per in enumerate(periods):
        whole = _whole_periods(t, b[i], float(per), peaks)
        if whole is not None:
            slope[i], level[i], window[i] = whole
    unstable = (slope > share * arrival_rate) & (level > min_backlog_s * arrival_rate)
    return ~unstable, slope, window


def _whole_periods(t: Array, b: Array, period_s: float, peaks: bool) -> tuple[float, float, float] | None:
    """(growth, level, window) of ``b`` over whole periods: the mean of its last ``k`` periods less
    the mean of the ``k`` before, over ``k`` periods, the last ones' mean, and ``k`` periods in
    seconds; ``k`` the multiple that
    repeats best (the cycle of a backlog can be a multiple of the period of the servers that
    drive it). None without a period, or where two periods do not fit in ``t``."""
    if not np.isfinite(period_s) or period_s <= 0:
        return None
    best: tuple[float, float, float, float] | None = None  # (mismatch, growth, level, window)
    k = 1
    while 2.0 * k * period_s <= t[-1] - t[0]:
        w = k * period_s
        last = t > t[-1] - w
        before = (t > t[-1] - 2.0 * w) & ~last
        n = min(last.sum(), before.sum())
        if n >= 3:
            a, z = b[last][-n:], b[before][-n:]
            # with peaks, the growth of both the mean and the peak: a backlog past capacity raises
            # both, while a bounded cycle that does not repeat exactly (its period drifts) moves its
            # mean between periods but meets the same ceiling
            grow = (min(a.mean() - z.mean(), a.max() - z.max()) if peaks else a.mean() - z.mean()) / w
            fit = (float(np.mean(np.abs(a - z))), float(grow), float(a.mean()), w)
            if best is None or fit[0] < best[0] - 1e-9:
                best = fit
        k += 1
    return None if best is None else (best[1], best[2], best[3])


@dataclass(frozen=True)
class Oscillation:
    detected: bool
    period_s: float  # nan when not detected
    amplitude: float  # half the 5-95% range of the signal
    servers: bool = False  # the signal: prefill servers (a planner moved them), else prefill-queue requests


def detect_oscillation(t: Array, signal: Array, *, min_amplitude: float) -> Oscillation:
    """A sustained swing: the autocorrelation has a peak of at least :data:`ACF_PEAK` after its
    first zero crossing, the swing is at least ``min_amplitude``, and the signal still rises and
    falls by ``min_amplitude`` in the second half of the run (:func:`_sustained`). The period is
    the first peak's lag, or a multiple of it whose peak is as high (a cycle of two unequal lobes
    peaks at half its period first)."""
    t = np.asarray(t, dtype=float)
    x = np.asarray(signal, dtype=float)
    amp = (percentile(x, 95.0) - percentile(x, 5.0)) / 2.0 if len(x) else 0.0
    if len(x) < 8 or amp < min_amplitude or not _sustained(x[len(x) // 2 :], min_amplitude):
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
    half = len(acf) // 2
    lag = start + int(np.argmax(acf[start:half])) if start < half else start
    if lag >= half or acf[lag] < ACF_PEAK:
        return Oscillation(False, float("nan"), amp)
    # unbiased: the estimate above shrinks with the lag by the samples it overlaps
    fair = acf * len(acf) / (len(acf) - np.arange(len(acf)))
    best = lag
    for k in range(2, half // lag + 1):
        lo, hi = k * lag - lag // 4, min(k * lag + lag // 4 + 1, half)
        if lo >= hi:
            break
        peak = lo + int(np.argmax(fair[lo:hi]))
        if fair[peak] > fair[best] + 0.2:
            best = peak
    return Oscillation(True, float(best * (grid[1] - grid[0])), amp)


def _sustained(x: Array, height: float) -> bool:
    """Whether ``x`` rises and falls (or falls and rises) by ``height`` at least: two swings of
    opposite direction. A staircase that only climbs (a planner adding an instance at a time)
    and a ringing that died away do neither, though their detrended autocorrelation can peak."""
    swings, direction, lo, hi = 0, 0, float(x[0]), float(x[0])
    for v in x:
        lo, hi = min(lo, v), max(hi, v)
        if direction <= 0 and v - lo >= height:  # a rise completed
            swings, direction, hi = swings + 1, 1, v
        elif direction >= 0 and hi - v >= height:  # a fall completed
            swings, direction, lo = swings + 1, -1, v
        if swings >= 2:
            return True
    return False


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
