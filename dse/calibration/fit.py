"""Fit the performance model's efficiencies to measured serving runs.

The fit minimises the log-error of tokens/s/GPU and of tokens/s/user over every row the model can
describe, with a soft-L1 loss so a few odd runs do not steer it. Leave-one-hardware-out
cross-validation refits without one GPU type and predicts it from its datasheet alone.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import re
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from dse import __version__
from dse.calibration.folds import map_folds
from dse.calibration.published import POINTS_MODEL, StagePoint, predict_points
from dse.catalog import Catalog
from dse.errors import DseError, InputError
from dse.paths import CALIBRATION_FILE, REPO_ROOT
from dse.perf.benchmark_rows import (
    ENGINE_COLUMNS,
    INPUT_COLUMNS,
    NO_CAP,
    RECIPE_SETTINGS,
    BenchRow,
    deployment_of,
    evaluate,
    parse_row,
    with_recipe_settings,
)
from dse.perf.params import FITTED_SCALARS, POINTS_ENGINE, PerfParams
from dse.perf.serving import tpot_at_batch
from dse.quantiles import known_median
from dse.typed_data import measured_number, read_csv, row_shape_problem

# (lower, upper) bounds of each fitted value
BOUNDS = {
    "gemm_eff": (0.1, 0.95),
    "prefill_gemm_eff": (0.1, 0.95),
    "attn_eff": (0.05, 0.95),
    "hbm_eff": (0.3, 0.95),
    "link_eff": (0.1, 0.95),
    "nic_eff": (0.1, 0.95),
    "step_overhead_ms": (0.05, 20.0),
    "layer_overhead_us": (0.1, 100.0),
    # NVLink latency per peer of an all-to-all (stages.nvlink_a2a_latency_us): at most what DeepEP's
    # low-latency dispatch pays per peer over RDMA at its widest measured group (194 us over 255
    # peers at EP256); left free up to 100 us, a fit without GB200 NVL72's wide groups put it at
    # 10 us, which charged an EP48 all-to-all half a millisecond. (The same value is the latency
    # of one NVLink all-reduce, which NCCL takes longer over; the per-step overhead holds the rest.)
    "collective_latency_us": (0.5, 0.76),
    "comm_overlap": (0.0, 0.95),
    "prefill_queue_factor": (0.05, 10.0),
    "nic_a2a_latency_us": (1.0, 300.0),
    "nic_allreduce_latency_us": (1.0, 300.0),
    "measured_scale": (0.3, 1.5),
    "launch_saving_us": (0.0, 20.0),
}
TTFT_WEIGHT = 0.3  # weight of a TTFT log-error against a tokens/s one (TTFT is noisier)
# Relative step of the finite-difference Jacobian. At scipy's default (about 1.5e-8) the
# predictions' last-bit wobble (closed-loop bisections, capacity caps) steered the solver:
# the same 223 runs fitted in reverse order stopped at another point (cost 11.9106 against
# 11.9118; per-layer overhead 25 against 47 us, attention efficiency 0.94 against 0.91), and
# another machine's rounding moved the shipped values as far. At 1e-3 both orders reach the
# same lower optimum (cost 11.90895, every value alike to 1e-5 but the split below).
DIFF_STEP = 1e-3
# Residual evaluations the solver may spend (not counting its Jacobian's): the shipped fit and its
# six leave-one-hardware-out folds converge in 14-23, a measured-kernel fit of two GPUs' runs in
# 80. A fit still moving at the limit is one its rows cannot pin (five runs for ten values crept
# on for 400 evaluations, 23 s, and never converged); it stops there and says so (``notes``).
MAX_EVALS = 100
# SPLIT_NOTE: a forward's fixed time is step_overhead_ms + layers x layer_overhead_us. When every
# run and point the fit sees has one depth, the data fix only that sum, and the split would be
# wherever the solver's path ends (0.13 to 75 us a layer in past fits): the per-layer overhead
# then keeps its starting value and the per-step overhead takes the rest. What the split does to
# models of other depths: docs/accuracy.md (known gaps), benchmarks/overhead_split.py.
ENGINE_BOUNDS = {"speed": (0.4, 3.0), "mtp_accept_rate": (0.05, 0.98)}


@dataclass(frozen=True)
class Measured:
    row: BenchRow
    tput_per_gpu: float
    intvty: float
    raw: Mapping[str, str]
    where: str = ""  # the file and line it came from


def read_measured(
    path: Path, catalog: Catalog, settings: Path | None = RECIPE_SETTINGS
) -> tuple[list[Measured], list[str]]:
    """Rows the model can describe, and one message per row it cannot; each with the engine
    settings its run used, from ``settings`` (:func:`~dse.perf.benchmark_rows.with_recipe_settings`;
    None: the engine defaults)."""
    out, skipped = [], []
    header, rows, lines = read_csv(path, "--data")
    missing = [c for c in (*INPUT_COLUMNS, *FITTED_COLUMNS) if c not in header]
    if missing:
        raise InputError(str(path), missing[0], "is a required column")
    # a row of more or fewer fields than the header, before the settings fill any of its cells: a
    # short one had been told as its first missing cell, e.g. "decode_tp = 'None': must be a
    # number", and a long one, its cells shifted against the header, fitted as it was
    shapes = [row_shape_problem(raw) for raw in rows]
    if settings is not None:
        rows = with_recipe_settings(rows, settings)
    seen: dict[tuple[tuple[str, str], ...], int] = {}
    for raw, line, shape in zip(rows, lines, shapes, strict=True):
        source = f"{path.name} line {line}"
        if shape:
            skipped.append(f"{source}: {shape}")
            continue
        # a row pasted twice had been fitted twice, weighing double, and counted among the runs
        first = seen.setdefault(tuple(sorted((k, str(v).strip()) for k, v in raw.items())), line)
        if first != line:
            skipped.append(f"{source}: repeats line {first} cell for cell (fitted once)")
            continue
        try:
            row = parse_row(raw, catalog, source=source)
            tput, intvty = (measured_number(raw.get(col), source, col) for col in FITTED_COLUMNS)
        except DseError as exc:
            skipped.append(str(exc))
            continue
        out.append(Measured(row, tput, intvty, raw, source))
    return out, skipped


LATENCY_COLUMNS = ("median_ttft_s", "p99_ttft_s", "median_tpot_ms", "p99_tpot_ms")
POWER_COLUMN = "avg_power_w"  # the average power per GPU a run measured (dse.calibration.power)


def contradiction(raw: Mapping[str, str], col: str) -> str | None:
    """Why a row's latency figure ``col`` cannot be what its run measured, by the row's own other
    figures (None where they agree or are absent): a median TTFT longer than the median request
    (seconds typed as milliseconds), a median TPOT that is not 1,000 over the tokens/s per user
    the throughput fit reads (every measured run's is, to 0.002%), within a factor of 2; a p99
    TTFT over ten median requests; a p99 TTFT or TPOT below the run's (uncontradicted) median."""

    def number(c: str) -> float:
        try:
            v = float(raw.get(c) or "nan")
        except ValueError:
            return math.nan
        return v if math.isfinite(v) and v > 0 else math.nan

    v = number(col)
    if col == "median_ttft_s" and v > number("median_e2el_s"):
        return f"is longer than the run's median_e2el_s ({number('median_e2el_s'):g} s): milliseconds?"
    # a p99 below its median is no percentile of the same requests (ms typed as s, or s as ms:
    # a p99 TPOT of 0.05 "ms" had been stored as a 91,550% error)
    if col == "p99_ttft_s" and v > 10.0 * number("median_e2el_s"):  # (a tail, not ten requests)
        return f"is over ten times the run's median_e2el_s ({number('median_e2el_s'):g} s): milliseconds?"
    median = {"p99_ttft_s": "median_ttft_s", "p99_tpot_ms": "median_tpot_ms"}.get(col)
    if median is not None and v < number(median) and contradiction(raw, median) is None:
        return f"is below the run's {median} ({number(median):g}): another unit?"
    per_user = number("median_intvty_tok_s_user")
    if col == "median_tpot_ms" and math.isfinite(v * per_user) and not 0.5 <= v * per_user / 1000.0 <= 2.0:
        said = 1000.0 / per_user
        return f"disagrees with median_intvty_tok_s_user (1,000 over it is {said:.4g} ms): another unit?"
    return None


def unmeasured_figures(data: Sequence[Measured]) -> list[str]:
    """One line per latency or power figure a fitted row gives that is no measurement (not a
    number > 0 within the data files' range, or one the row's other figures contradict:
    :func:`contradiction`): the fit leaves that figure out and fits the row's others."""
    notes = []
    for m in data:
        for col in (*LATENCY_COLUMNS, POWER_COLUMN):
            cell = m.raw.get(col)
            if cell is None or not str(cell).strip():
                continue  # not measured: nothing to say
            try:
                measured_number(cell, m.where, col)
            except InputError as exc:
                notes.append(f"{exc} (left out; the row's other figures are fitted)")
                continue
            if (why := contradiction(m.raw, col)) is not None:
                notes.append(
                    f"{m.where}: {col} = {cell}: {why} (left out; the row's other figures are fitted)"
                )
    return notes


FITTED_COLUMNS = ("tput_per_gpu_total", "median_intvty_tok_s_user")  # what a run measured, fitted


def predict_measured(
    data: Sequence[Measured], catalog: Catalog, params: PerfParams
) -> tuple[np.ndarray, np.ndarray]:
    """(tokens/s/GPU, tokens/s/user) predicted for each measured row, in input order."""
    t, i, _ = _predict_all(data, catalog, params)
    return t, i


def _predict_all(
    data: Sequence[Measured], catalog: Catalog, params: PerfParams
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    tput = np.full(len(data), np.nan)
    intv = np.full(len(data), np.nan)
    ttft = np.full(len(data), np.nan)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, m in enumerate(data):
        groups.setdefault((m.row.model, m.row.topology), []).append(i)
    for idx in groups.values():
        res = evaluate([data[i].row for i in idx], catalog, params)
        tput[idx] = res.tput_per_gpu
        intv[idx] = res.intvty_tok_s_user
        ttft[idx] = res.ttft_s
    return tput, intv, ttft


def measured_decode_batch(m: Measured) -> float:
    """Sequences one decode instance of the run held, by Little's law on the decode pool: its
    measured output tokens/s per instance times its measured median TPOT (nan without one)."""
    r = m.row
    tpot = _cell(m, "median_tpot_ms") / 1e3
    if r.disagg:
        out = _cell(m, "output_tput_per_gpu") * r.decode.gpus
    else:
        out = m.tput_per_gpu * r.decode.gpus * r.osl / (r.isl + r.osl)
    return out * tpot


def error_sources(
    data: Sequence[Measured], catalog: Catalog, params: PerfParams
) -> tuple[np.ndarray, np.ndarray]:
    """Where the error of the tokens/s predictions comes from, per row (log ratios, nan where
    a figure is missing):

    * Little's law on the run's own median TTFT and TPOT against its measured tokens/s/GPU: how
      far the measurements themselves are from one steady closed loop;
    * the model's TPOT at the run's measured decode batch (:func:`measured_decode_batch`)
      against the measured TPOT: the step-time error with the load model taken out."""
    little = np.full(len(data), np.nan)
    step = np.full(len(data), np.nan)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, m in enumerate(data):
        r = m.row
        gpus = sum(pool.gpus * pool.instances for pool in (r.prefill, r.decode, r.ffn) if pool is not None)
        e2e = _cell(m, "median_ttft_s") + r.osl * _cell(m, "median_tpot_ms") / 1e3
        little[i] = np.log(r.conc / e2e * (r.isl + r.osl) / gpus / m.tput_per_gpu)
        if r.ffn is None:
            groups.setdefault((r.model, r.topology), []).append(i)
    for idx in groups.values():
        d = deployment_of([data[i].row for i in idx], catalog, params)
        batch = np.array([measured_decode_batch(data[i]) for i in idx])
        measured = np.array([_cell(data[i], "median_tpot_ms") / 1e3 for i in idx])
        step[idx] = np.log(tpot_at_batch(d, params, np.maximum(batch, 1e-6)) / measured)
    return little, step


def ttft_errors(data: Sequence[Measured], catalog: Catalog, params: PerfParams) -> np.ndarray:
    """Absolute relative error of the predicted TTFT against each run's measured median TTFT
    (nan where the run has none: :func:`_median_ttft_s`)."""
    _, _, ttft = _predict_all(data, catalog, params)
    measured = np.array([_median_ttft_s(m) for m in data])
    return np.abs(ttft / measured - 1.0)


def _cell(m: Measured, key: str) -> float:
    try:
        return float(m.raw.get(key) or "nan")
    except ValueError:
        return float("nan")


def _engines_used(data: Sequence[Measured]) -> list[str]:
    return sorted({m.row.engine for m in data})


def _unpack(x: np.ndarray, base: PerfParams, engines: Sequence[str], mtp: set[str]) -> PerfParams:
    """Engine speeds are relative: the last engine's speed makes their geometric mean 1, so the
    absolute kernel efficiency lives only in the (bounded) efficiencies, and an engine the fit
    never saw runs at the average speed of those it did."""
    values = dict(zip(FITTED_SCALARS, x[: len(FITTED_SCALARS)], strict=True))
    p = base.with_values(**values)
    eng = dict(p.engines)
    k = len(FITTED_SCALARS)
    log_speeds: list[float] = []
    for j, name in enumerate(engines):
        if j < len(engines) - 1:
            speed = float(x[k])
            k += 1
        else:
            speed = float(np.exp(-sum(log_speeds)))
        log_speeds.append(float(np.log(speed)))
        accept = eng[name].mtp_accept_rate
        if name in mtp:
            accept = x[k]
            k += 1
        eng[name] = replace(eng[name], speed=speed, mtp_accept_rate=float(accept))
    # engines without data: average speed (1) and the mean acceptance of the fitted MTP engines
    seen = [n for n in engines if n in mtp]
    mean_accept = float(np.mean([eng[n].mtp_accept_rate for n in seen])) if seen else None
    for name in eng:
        if name not in engines:
            eng[name] = replace(eng[name], speed=1.0)
        if name not in mtp and mean_accept is not None:
            eng[name] = replace(eng[name], mtp_accept_rate=mean_accept)
    return replace(p, engines=eng)


def _pack(p: PerfParams, engines: Sequence[str], mtp: set[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x, lo, hi = [], [], []
    for name in FITTED_SCALARS:
        x.append(getattr(p, name))
        lo.append(BOUNDS[name][0])
        hi.append(BOUNDS[name][1])
    for j, name in enumerate(engines):
        if j < len(engines) - 1:
            x.append(p.engines[name].speed)
            lo.append(ENGINE_BOUNDS["speed"][0])
            hi.append(ENGINE_BOUNDS["speed"][1])
        if name in mtp:
            x.append(p.engines[name].mtp_accept_rate)
            lo.append(ENGINE_BOUNDS["mtp_accept_rate"][0])
            hi.append(ENGINE_BOUNDS["mtp_accept_rate"][1])
    xa, la, ha = np.array(x), np.array(lo), np.array(hi)
    return np.clip(xa, la + 1e-9, ha - 1e-9), la, ha


def fit(
    data: Sequence[Measured],
    catalog: Catalog,
    start: PerfParams,
    points: Sequence[StagePoint] = (),
    point_values: Sequence[float] = (),
    notes: list[str] | None = None,
) -> PerfParams:
    """Least-squares fit of the efficiencies to ``data`` (log errors, soft-L1 loss), and to
    stage-level ``points`` with their measured tokens/s per GPU. A fit that stops at
    :data:`MAX_EVALS` without converging says so in ``notes``, when given."""
    engines = sorted(set(_engines_used(data)) | ({POINTS_ENGINE} if points else set()))
    mtp = {m.row.engine for m in data if m.row.mtp}
    x0, lo, hi = _pack(start, engines, mtp)
    meas_t = np.log([m.tput_per_gpu for m in data])
    meas_i = np.log([m.intvty for m in data])
    meas_p = np.log(np.asarray(point_values, dtype=float))
    # the median TTFT each run measured: it pins the prefill queue (it enters tokens/s only
    # through Little's law, where other terms can stand in for it)
    meas_f = np.log([_median_ttft_s(m) for m in data])

    def residuals(x: np.ndarray) -> np.ndarray:
        t, i, f = _predict_all(data, catalog, _unpack(x, start, engines, mtp))
        rf = TTFT_WEIGHT * np.where(np.isfinite(meas_f), np.log(f) - meas_f, 0.0)
        r = np.concatenate([np.log(t) - meas_t, np.log(i) - meas_i, rf])
        if points:
            pp = predict_points(catalog, _unpack(x, start, engines, mtp), tuple(points))
            r = np.concatenate([r, np.log(pp) - meas_p])
        return np.nan_to_num(r, nan=3.0, posinf=3.0, neginf=-3.0)

    free = _identifiable(residuals, x0, lo, hi)
    if one_depth(data, catalog, points):
        free[FITTED_SCALARS.index("layer_overhead_us")] = False  # see SPLIT_NOTE

    def free_residuals(xf: np.ndarray) -> np.ndarray:
        x = x0.copy()
        x[free] = xf
        return residuals(x)

    sol = least_squares(
        free_residuals,
        x0[free],
        bounds=(lo[free], hi[free]),
        loss="soft_l1",
        f_scale=0.15,
        x_scale="jac",
        diff_step=DIFF_STEP,
        max_nfev=MAX_EVALS,
    )
    if sol.status == 0 and notes is not None:
        notes.append(
            f"the fit stopped at its limit of {MAX_EVALS} evaluations before converging: {len(data)} runs "
            f"and {len(points)} stage points do not pin its {int(free.sum())} values"
        )
    x = x0.copy()
    x[free] = sol.x
    fitted = _unpack(x, start, engines, mtp)
    # the last engine's speed follows from the others (geometric mean 1), outside the solver's
    # bounds: a fit that pushes it out of them is refused rather than shipped
    lo_s, hi_s = ENGINE_BOUNDS["speed"]
    last = fitted.engines[engines[-1]].speed
    if not lo_s <= last <= hi_s:
        raise DseError(f"dse calibrate: engine {engines[-1]}'s speed {last:.3g} left [{lo_s}, {hi_s}]")
    return fitted


def one_depth(data: Sequence[Measured], catalog: Catalog, points: Sequence[StagePoint] = ()) -> bool:
    """Whether every run and stage point is of a model of one depth: then the fit sees only a
    forward's fixed time, not its split into a time per step and one per layer (SPLIT_NOTE)."""
    depths = {catalog.model(m.row.model).layers for m in data}
    return len(depths | ({catalog.model(POINTS_MODEL).layers} if points else set())) == 1


def _identifiable(
    residuals: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """Which values the data can move: a value no residual responds to (a 5% step within its
    bounds changes nothing, e.g. the latency of an all-reduce that crosses nodes when no training
    row spans nodes with tensor parallelism) keeps its starting value. Left free, the solver's
    Jacobian scaling lets it drift to wherever the trust region happens to take it, and a
    leave-one-hardware-out fold then predicts the held-out GPU from that arbitrary value."""
    base = residuals(x0)
    free = np.ones(len(x0), dtype=bool)
    for k in range(len(x0)):
        x = x0.copy()
        x[k] = x0[k] * 1.05 if x0[k] * 1.05 <= hi[k] else x0[k] * 0.95
        x[k] = np.clip(x[k], lo[k], hi[k])
        free[k] = not np.array_equal(residuals(x), base)
    return free


def _median_ttft_s(m: Measured) -> float:
    """The run's measured median TTFT (at least 1 ms), or nan where the cell is empty, not a
    number, not > 0 or contradicted by the row's other figures (:func:`contradiction`, which the
    fit says it leaves out: 37 rows of milliseconds had pinned the prefill queue factor at its
    bound all the same): such a row then fits tokens/s only."""
    cell = _cell(m, "median_ttft_s")
    if not cell > 0 or contradiction(m.raw, "median_ttft_s") is not None:
        return math.nan
    return max(cell, 1e-3)


@dataclass(frozen=True)
class ErrorStats:
    n: int
    tput_median_ape: float
    tput_p75_ape: float
    intvty_median_ape: float
    intvty_p75_ape: float


def error_stats(data: Sequence[Measured], tput: np.ndarray, intv: np.ndarray) -> ErrorStats:
    mt = np.array([m.tput_per_gpu for m in data])
    mi = np.array([m.intvty for m in data])
    et = np.abs(tput / mt - 1.0)
    ei = np.abs(intv / mi - 1.0)
    et = np.where(np.isfinite(et), et, 1.0)
    ei = np.where(np.isfinite(ei), ei, 1.0)
    return ErrorStats(
        len(data),
        float(np.median(et)),
        float(np.percentile(et, 75)),
        float(np.median(ei)),
        float(np.percentile(ei, 75)),
    )


def leave_one_hardware_out(
    data: Sequence[Measured],
    catalog: Catalog,
    start: PerfParams,
    points: Sequence[StagePoint] = (),
    point_values: Sequence[float] = (),
    fold_fits: dict[str, PerfParams] | None = None,
    jobs: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Predictions for every row from a fit that never saw that row's hardware (neither its
    benchmark rows nor its stage points); each fold's fit goes into ``fold_fits`` by the
    hardware it left out, when given. ``jobs`` folds are fitted at once (:mod:`.folds`)."""
    tput = np.full(len(data), np.nan)
    intv = np.full(len(data), np.nan)
    held = sorted({m.row.hardware for m in data})
    one = partial(_fit_without, data, catalog, start, tuple(points), tuple(point_values))
    for hw, fitted in zip(held, map_folds(one, held, jobs), strict=True):
        if fold_fits is not None:
            fold_fits[hw] = fitted
        test_idx = [i for i, m in enumerate(data) if m.row.hardware == hw]
        t, i = predict_measured([data[k] for k in test_idx], catalog, fitted)
        tput[test_idx] = t
        intv[test_idx] = i
    return tput, intv


def _fit_without(
    data: Sequence[Measured],
    catalog: Catalog,
    start: PerfParams,
    points: Sequence[StagePoint],
    point_values: Sequence[float],
    hw: str,
) -> PerfParams:
    """The fit on every row and stage point but ``hw``'s."""
    train = [m for m in data if m.row.hardware != hw]
    keep = [k for k, pt in enumerate(points) if catalog.hardware(pt.hardware).id != hw]
    return fit(train, catalog, start, [points[k] for k in keep], [point_values[k] for k in keep])


def fit_per_cell(
    data: Sequence[Measured],
    catalog: Catalog,
    start: PerfParams,
    cell: Callable[[Measured], str],
    points: Sequence[StagePoint] = (),
    point_values: Sequence[float] = (),
) -> tuple[np.ndarray, np.ndarray, int]:
    """In-sample predictions of a fit that gives the rows of each engine and ``cell`` value (with
    ``cell`` the hardware: each hardware and engine pair) an engine profile of their own: a kernel
    speed and an MTP acceptance rate, besides the global efficiencies. A floor, not a model: it
    measures how much of the error a constant per cell could take out, which no datasheet can
    supply for hardware nobody has measured. Returns (tokens/s/GPU, tokens/s/user, number of
    cells)."""
    engines = dict(start.engines)
    renamed = []
    for m in data:
        name = f"{m.row.engine}@{cell(m)}"
        engines.setdefault(name, replace(engines[m.row.engine], name=name))
        renamed.append(replace(m, row=replace(m.row, engine=name)))
    fitted = fit(renamed, catalog, replace(start, engines=engines), points, point_values)
    t, i = predict_measured(renamed, catalog, fitted)
    return t, i, len({m.row.engine for m in renamed})


def pair_order_agreement(
    data: Sequence[Measured], tput: np.ndarray, intv: np.ndarray, band: float = 0.25
) -> float:
    """Share of hardware pairs ranked right by tokens/s/GPU at about equal tokens/s/user.

    Pairs are rows of different hardware and the same lengths whose measured interactivities lie
    within ``band`` of each other and whose measured tokens/s/GPU differ by more than 10%; a pair
    counts as right when the predictions order the two the same way as the measurements."""
    good = total = 0
    for a in range(len(data)):
        for b in range(a + 1, len(data)):
            ma, mb = data[a], data[b]
            if ma.row.hardware == mb.row.hardware or (ma.row.isl, ma.row.osl) != (mb.row.isl, mb.row.osl):
                continue
            if abs(np.log(ma.intvty / mb.intvty)) > np.log(1 + band):
                continue
            if abs(np.log(ma.tput_per_gpu / mb.tput_per_gpu)) < np.log(1.1):
                continue  # too close to call in the measurements themselves
            total += 1
            good += (ma.tput_per_gpu > mb.tput_per_gpu) == (tput[a] > tput[b])
    return good / total if total else float("nan")


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, in hex: what names the exact data a fit read."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


CODE_PATHS = ("dse", "reference", "hardware_catalog", "model_catalog")
"""What a refit's result depends on in the checkout (the code, the data, the catalogs)."""


def code_commit(root: Path = REPO_ROOT) -> tuple[str | None, bool | None]:
    """(the commit the checkout at ``root`` is at, whether :data:`CODE_PATHS` differ from it
    there: the shipped calibration file aside, which the fit rewrites); (None, None) outside a git
    checkout (an installed copy), where ``engine_version`` alone names the code."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    head = git("rev-parse", "--verify", "HEAD")
    if head is None or not re.fullmatch(r"[0-9a-f]{40}\n?", head):
        return None, None
    shipped = CALIBRATION_FILE.relative_to(REPO_ROOT).as_posix()
    status = git("status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS, f":(exclude){shipped}")
    return head.strip(), None if status is None else bool(status.strip())


def provenance(
    data_path: Path,
    data: Sequence[Measured],
    n_skipped: int,
    stats: ErrorStats,
    ttft: np.ndarray,
    loho: ErrorStats | None = None,
    params_kernels: str = "datasheet",
) -> dict[str, object]:
    """Where the fitted values came from and how far they are from the measurements: in-sample
    error of tokens/s/GPU, tokens/s/user and TTFT (``ttft``: :func:`ttft_errors`), and, when the
    cross-validation ran, the leave-one-hardware-out error (what to expect on hardware the fit did
    not see; ``hardware_fitted`` names what it did see). What to rerun it with (the command, the
    files' hashes, the commit and the seeds): :func:`recipe`, which `dse calibrate` adds."""
    out: dict[str, object] = {
        "fitted_by": "dse calibrate",
        "kernels": params_kernels,
        "engine_version": __version__,
        "data": str(data_path.name),
        "rows_fitted": len(data),
        "rows_skipped": n_skipped,
        # rows whose run's engine settings (draft depth, running cap, KV precision) were known
        "rows_with_recipe_settings": sum(
            any(m.raw.get(c) and m.raw.get(c) != NO_CAP for c in ENGINE_COLUMNS) for m in data
        ),
        "hardware_fitted": sorted({m.row.hardware for m in data}),
        # engine profiles with measured runs; the others are assumed (the fitted ones' mean speed)
        "engines_fitted": _engines_used(data),
        "models_fitted": sorted({m.row.model for m in data}),
        "fitted_at_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "in_sample_tput_median_ape": round(stats.tput_median_ape, 4),
        "in_sample_tput_p75_ape": round(stats.tput_p75_ape, 4),
        "in_sample_intvty_median_ape": round(stats.intvty_median_ape, 4),
        "in_sample_intvty_p75_ape": round(stats.intvty_p75_ape, 4),
        "in_sample_ttft_median_ape": None if (med := known_median(ttft)) is None else round(med, 4),
    }
    if loho is not None:
        out |= {
            "loho_tput_median_ape": round(loho.tput_median_ape, 4),
            "loho_tput_p75_ape": round(loho.tput_p75_ape, 4),
            "loho_intvty_median_ape": round(loho.intvty_median_ape, 4),
            "loho_intvty_p75_ape": round(loho.intvty_p75_ape, 4),
        }
    return out


def _shown(path: Path) -> str:
    """A path as a rerun names it: relative to the checkout's root where it lies in it."""
    resolved = path.resolve()
    return resolved.relative_to(REPO_ROOT).as_posix() if resolved.is_relative_to(REPO_ROOT) else str(resolved)


def recipe(
    data_path: Path,
    points_path: Path | None,
    kernels: str,
    cross_validation: bool,
    seeds: Sequence[int],
    settings_path: Path | None = RECIPE_SETTINGS,
    catalog_dirs: Sequence[Path] = (),
) -> dict[str, object]:
    """What a rerun needs beside the provenance's figures: the command that refits the same values
    (``--jobs`` and ``--out`` leave them as they are; paths in the checkout relative to its root,
    where it is run; the catalog folders read, ``DSE_CATALOG_DIR``'s first, as flags), the SHA-256
    of each file it read (the runs, the engine settings the runs are replayed with, the stage
    points; None for one not read), the
    commit of the code and whether the checkout differed from it, and the seeds of the latency
    replays (the throughput and power fits draw nothing)."""
    # the catalog folders it read (a fit of a folder's GPU had recorded none, and its rerun
    # skipped that GPU's runs as unknown hardware)
    command = ["dse", *(w for d in catalog_dirs for w in ("--catalog-dir", _shown(d))), "calibrate"]
    command += ["--data", _shown(data_path)]
    command += ["--no-points"] if points_path is None else ["--points", _shown(points_path)]
    command += ["--kernels", kernels] + ([] if cross_validation else ["--no-cross-validation"])
    commit, modified = code_commit()
    return {
        "command": shlex.join(command),
        "data_sha256": file_sha256(data_path),
        "recipe_settings": None if settings_path is None else settings_path.name,
        "recipe_settings_sha256": None if settings_path is None else file_sha256(settings_path),
        "stage_points_sha256": None if points_path is None else file_sha256(points_path),
        "code_commit": commit,
        "code_modified": modified,
        "seeds": {"latency_replay": [int(s) for s in seeds]},
    }
