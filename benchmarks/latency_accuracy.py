"""How close the simulated TTFT and TPOT percentiles come to the measured runs, leave one
hardware out: for each GPU type, the throughput fit, the latency offsets, the cold starts and the
attention-DP prefill slowdown without its runs predict its p50 and p99 (what ``dse calibrate``
stores), against the closed-form TTFT as before.

Then how far the leave-one-out figures move with the simulation's draw: the same fits on replays
under seeds 1 and 2 instead of 0, and on each run's percentiles averaged over the three.

Prints figures, not verdicts. Run: ``python benchmarks/latency_accuracy.py`` (about 4 minutes on
two cores).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from record import figure

from dse.calibration import fit as cal
from dse.calibration.folds import default_jobs
from dse.calibration.latency import LABELS, SEED, fit_latency, measured_latency
from dse.calibration.published import POINTS, measured_per_gpu
from dse.catalog import load_catalog
from dse.paths import MEASURED_RUNS, PUBLISHED_POINTS
from dse.perf.benchmark_rows import latency_of
from dse.perf.latency import Load
from dse.perf.params import PerfParams, default_params, load_params


def main() -> None:
    catalog = load_catalog(use_env=False)
    params = load_params()
    data, _ = cal.read_measured(MEASURED_RUNS, catalog)
    folds: dict[str, PerfParams] = {}
    measured = measured_per_gpu(PUBLISHED_POINTS)  # the stage points, as dse calibrate fits them
    values = [measured[p.id] for p in POINTS]
    jobs = default_jobs()
    cal.leave_one_hardware_out(data, catalog, default_params(), POINTS, values, folds, jobs)
    fitted = fit_latency(data, catalog, params, folds, jobs)
    print(f"{len(data)} measured runs; offsets fitted: front end {fitted.params.frontend_s * 1e3:.0f} ms, "
          f"disaggregated hand-off {fitted.params.handoff_s * 1e3:.0f} ms; SGLang attention-DP prefill "
          f"forwards x{fitted.params.dp_prefill_slowdown:g}; aggregated prefill forwards "
          f"x{fitted.params.agg_prefill_factor:g}")  # fmt: skip
    head = "| | " + " | ".join(LABELS) + " |"
    print(head.replace("_", " ") + "\n|---|" + "---|" * len(LABELS))
    assert fitted.loho is not None and fitted.loho_by_hardware is not None
    rows = [("in-sample, all", fitted.in_sample), ("leave-one-hardware-out, all", fitted.loho)]
    rows += [(f"LOHO {hw}", errs) for hw, errs in fitted.loho_by_hardware.items()]
    for label, errs in rows:
        print(f"| {label} | " + " | ".join(f"{errs[k]:.1%}" for k in LABELS) + " |")
    for k in LABELS:
        figure(f"loho_{k}_median_ape", fitted.loho[k], "fraction")
    assert fitted.loho_params is not None
    print("\neach fold's fit, by the GPU left out: front end, hand-off, attention-DP prefill slowdown, "
          "aggregated prefill factor")  # fmt: skip
    for hw, lp in fitted.loho_params.items():
        print(f"  {hw}: {lp.frontend_s * 1e3:.0f} ms, {lp.handoff_s * 1e3:.0f} ms, "
              f"x{lp.dp_prefill_slowdown:g}, x{lp.agg_prefill_factor:g}")  # fmt: skip
    queued = _queued_split(data, catalog, params, fitted.loho_predicted)
    _offset_oracle(data, fitted.loho_predicted, queued)
    _seed_spread(data, catalog, params, folds, fitted.loho, jobs)
    ttft = cal.ttft_errors(data, catalog, params)
    print(f"\nclosed-form TTFT against the measured median (in-sample): {np.nanmedian(ttft):.1%}")
    _first_waves(data, catalog, params)
    _prefill_slopes(data, catalog, params)
    _recv_interval(data, catalog, params)


def _queued_split(data: list[cal.Measured], catalog, params: PerfParams, loho) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Where the TTFT p50 error lives: runs whose requests queue before their first token (the
    measured median over twice what the simulation gives a lone request on a warm server) and the
    others, leave-one-hardware-out. A queued run's TTFT is its cycle, concurrency C over its
    request rate X, less the rest of its latency D (Little's law, which the simulation keeps too),
    so a throughput error e moves it by about e (1 + s) / s, s = TTFT / D; the second table is how
    many queued runs would be within 25% if the TTFT model were exact and only the throughput off
    by f (either sign, no lower than the lone request's TTFT)."""
    meas = measured_latency(data)[:, 0]
    rest = np.array([float(m.raw.get("median_e2el_s") or "nan") for m in data]) - meas
    lone = np.array([
        latency_of(m.row, catalog, params, load=Load("closed", concurrency=1), seed=SEED, fresh=False)
        .percentile("ttft", 50.0)
        for m in data
    ])  # fmt: skip
    queued = meas > 2.0 * lone
    err = np.abs(loho[:, 0] / meas - 1.0)
    ratio = loho[:, 0] / meas
    disagg = np.array([m.row.disagg for m in data])
    print("\nTTFT p50 by whether the run's requests queued (measured median over twice a lone request's), "
          "LOHO")  # fmt: skip
    print("| runs | count | disaggregated | median abs error | median predicted / measured | within 25% |")
    print("|---|---|---|---|---|---|")
    for label, m in (("queued", queued), ("not queued", ~queued)):
        print(f"| {label} | {m.sum()} | {(m & disagg).sum()} | {np.median(err[m]):.1%} | "
              f"{np.median(ratio[m]):.2f} | {(err[m] < 0.25).sum()} |")  # fmt: skip
        figure(f"loho_ttft_p50_median_ape_{label.replace(' ', '_')}", float(np.median(err[m])), "fraction")
    s = meas[queued] / rest[queued]
    need = len(data) // 2 + 1
    print(f"queued runs' TTFT over the rest of their latency: median {np.nanmedian(s):.3f}; the median needs "
          f"{need} runs within 25%, {(err < 0.25).sum()} are")  # fmt: skip
    print("queued runs within 25% were the TTFT model exact and the throughput off by f "
          "(kinder / other sign):")  # fmt: skip
    for f in (0.02, 0.05, 0.072, 0.109, 0.14):
        within = []
        for sign in (1.0, -1.0):
            t = np.maximum(lone[queued], (meas[queued] + rest[queued]) / (1.0 + sign * f) - rest[queued])
            within.append(int((np.abs(t / meas[queued] - 1.0) < 0.25).sum()))
        print(f"  f {f:.1%}: {max(within)} / {min(within)} of {queued.sum()}")
    return queued


def _offset_oracle(data: list[cal.Measured], loho: np.ndarray, queued: np.ndarray) -> None:
    """What a fixed time per GPU type (or per GPU type and engine) could give the TTFT p50, were
    it known: each group's runs that did not queue shifted by their own median miss, in sample (an
    oracle no leave-one-hardware-out fit has: the GPU it predicts is the one it left out). The
    queued runs keep their predictions. A bound on what a fitted per-GPU offset could reach."""
    meas = measured_latency(data)[:, 0]
    print("\nTTFT p50 (LOHO) were each group's fixed time known: the runs that did not queue shifted by "
          "their group's median miss")  # fmt: skip
    gpu = np.array([m.row.hardware for m in data])
    framework = np.array([f"{m.row.hardware} {m.raw.get('framework')}" for m in data])
    for label, groups in (("GPU type", gpu), ("GPU type and framework", framework)):
        pred = loho[:, 0].copy()
        for g in np.unique(groups[~queued]):
            sel = (groups == g) & ~queued
            pred[sel] += np.median(meas[sel] - pred[sel])
        err = np.abs(pred / meas - 1.0)
        within = f"{(err < 0.25).sum()} of {len(err)} within 25%"
        print(f"  by {label}: median abs error {np.median(err):.1%}, {within}")
        figure(f"loho_ttft_p50_offset_oracle_{label.replace(' ', '_')}", float(np.median(err)), "fraction")


def _seed_spread(data, catalog, params, folds, shipped, jobs) -> None:  # type: ignore[no-untyped-def]
    """The leave-one-out figures under other draws of the runs' lengths and acceptances: seeds 1
    and 2 alone, and each run's percentiles averaged over seeds 0-2 (``dse calibrate`` replays
    seed 0). Each is a whole refit of the offsets, cold starts and factors; each draw's folds'
    factors (slowdown / aggregated prefill factor) are printed beside it."""
    print("\nleave-one-hardware-out, by the simulation's draw (median abs error)")
    print("| seeds | " + " | ".join(LABELS).replace("_", " ") + " |\n|---|" + "---|" * len(LABELS))
    print(f"| {SEED} (as calibrated) | " + " | ".join(f"{shipped[k]:.1%}" for k in LABELS) + " |")
    spread = {k: [shipped[k]] for k in LABELS}
    picks = []
    for seeds in ((1,), (2,), (0, 1, 2)):
        fit = fit_latency(data, catalog, params, folds, jobs, seeds=seeds)
        loho = fit.loho
        assert loho is not None and fit.loho_params is not None
        label = ", ".join(map(str, seeds)) + (" averaged" if len(seeds) > 1 else "")
        print(f"| {label} | " + " | ".join(f"{loho[k]:.1%}" for k in LABELS) + " |")
        folds_fit = ", ".join(
            f"{hw} x{lp.dp_prefill_slowdown:g} / x{lp.agg_prefill_factor:g}"
            for hw, lp in fit.loho_params.items()
        )
        picks.append(f"  seeds {label}: {folds_fit}")
        if len(seeds) == 1:
            for k in LABELS:
                spread[k].append(loho[k])
        else:
            for k in LABELS:
                figure(f"loho_{k}_median_ape_seeds_averaged", loho[k], "fraction")
    for k in LABELS:
        figure(f"loho_{k}_median_ape_seed_spread", max(spread[k]) - min(spread[k]), "fraction", "seeds 0-2")
    print("each draw's folds, by the GPU left out: attention-DP prefill slowdown / aggregated prefill factor")
    print("\n".join(picks))


def _first_waves(data: list[cal.Measured], catalog, params: PerfParams) -> None:  # type: ignore[no-untyped-def]
    """The closed loop's p99 is its first wave: H200 with 8k-token prompts, measured against
    simulated as calibrated (the offsets and the engine's cold start in)."""
    rows = [m for m in data if m.row.hardware == "h200-sxm" and m.row.isl > 5000 and not m.row.disagg]
    meas = measured_latency(rows)
    print("\nH200, 8k-token prompts, aggregated: TTFT p99 measured / simulated (s)")
    for m, x in zip(rows, meas, strict=True):
        sim = latency_of(m.row, catalog, params, seed=SEED).percentile("ttft", 99.0)
        print(f"  {m.row.engine:6s} {m.row.conc:5.0f} clients: {x[1]:7.3f} / {sim:7.3f}")


def _prefill_slopes(data: list[cal.Measured], catalog, params: PerfParams) -> None:  # type: ignore[no-untyped-def]
    """Aggregated runs at 1-16 clients, by GPU and engine: how much the median TTFT rises per prompt
    token from the 1k- to the 8k-token prompts (the medians of each), measured and simulated with
    the step costs' prefill forward as priced (aggregated prefill factor 1) — the evidence for
    fitting :attr:`~dse.perf.params.LatencyParams.agg_prefill_factor`."""
    priced = replace(params, latency=replace(params.latency, agg_prefill_factor=1.0))
    cells: dict[tuple[str, str], dict[bool, list[tuple[float, float, float]]]] = {}
    for m, x in zip(data, measured_latency(data), strict=True):
        r = m.row
        if r.disagg or r.conc > 16 or np.isnan(x[0]):
            continue
        sim = latency_of(r, catalog, priced, seed=SEED).percentile("ttft", 50.0)
        cells.setdefault((r.hardware, r.engine), {}).setdefault(r.isl > 4000, []).append((r.isl, x[0], sim))
    print("\naggregated, 1-16 clients: TTFT p50 rise per prompt token, 1k to 8k prompts (us/token)")
    print("| GPU | engine | runs | measured | simulated as priced | ratio |\n|---|---|---|---|---|---|")
    for (hw, engine), by_len in sorted(cells.items()):
        if len(by_len) < 2:
            continue
        short, long_ = (np.median(np.array(by_len[k]), axis=0) for k in (False, True))
        rise = [(long_[j] - short[j]) / (long_[0] - short[0]) * 1e6 for j in (1, 2)]
        runs = len(by_len[False]) + len(by_len[True])
        print(f"| {hw} | {engine} | {runs} | {rise[0]:.0f} | {rise[1]:.0f} | {rise[0] / rise[1]:.2f} |")


def _recv_interval(data: list[cal.Measured], catalog, params: PerfParams) -> None:  # type: ignore[no-untyped-def]
    """The runs whose scripts set SGLang's --scheduler-recv-interval: measured TTFT p50 against the
    simulated one (as calibrated) with the interval and without it."""
    rows = [m for m in data if m.row.recv_interval > 1 and not m.row.disagg]
    meas = measured_latency(rows)
    print("\nruns with --scheduler-recv-interval (aggregated): TTFT p50 measured / simulated / every step")
    for m, x in zip(rows, meas, strict=True):
        r = m.row
        looked = latency_of(r, catalog, params, seed=SEED).percentile("ttft", 50.0)
        every = latency_of(replace(r, recv_interval=1.0), catalog, params, seed=SEED).percentile("ttft", 50.0)
        print(
            f"  {r.hardware} {r.engine} {r.isl:6.0f} in {r.conc:4.0f} clients, every {r.recv_interval:2.0f}: "
            f"{x[0]:7.3f} / {looked:7.3f} / {every:7.3f}"
        )


if __name__ == "__main__":
    main()
