"""How close the simulated TTFT and TPOT percentiles come to the measured runs, leave one
hardware out: for each GPU type, the throughput fit, the latency offsets, the cold starts and the
attention-DP prefill slowdown without its runs predict its p50 and p99 (what ``dse calibrate``
stores), against the closed-form TTFT as before.

Prints figures, not verdicts. Run: ``python benchmarks/latency_accuracy.py`` (about 90 s).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from record import figure

from dse.calibration import fit as cal
from dse.calibration.latency import LABELS, SEED, fit_latency, measured_latency
from dse.calibration.published import POINTS, measured_per_gpu
from dse.catalog import load_catalog
from dse.paths import MEASURED_RUNS, PUBLISHED_POINTS
from dse.perf.benchmark_rows import latency_of
from dse.perf.params import PerfParams, default_params, load_params


def main() -> None:
    catalog = load_catalog(use_env=False)
    params = load_params()
    data, _ = cal.read_measured(MEASURED_RUNS, catalog)
    folds: dict[str, PerfParams] = {}
    measured = measured_per_gpu(PUBLISHED_POINTS)  # the stage points, as dse calibrate fits them
    values = [measured[p.id] for p in POINTS]
    cal.leave_one_hardware_out(data, catalog, default_params(), POINTS, values, folds)
    fitted = fit_latency(data, catalog, params, folds)
    print(f"{len(data)} measured runs; offsets fitted: front end {fitted.params.frontend_s * 1e3:.0f} ms, "
          f"disaggregated hand-off {fitted.params.handoff_s * 1e3:.0f} ms; SGLang attention-DP prefill "
          f"forwards x{fitted.params.dp_prefill_slowdown:g}")  # fmt: skip
    head = "| | " + " | ".join(LABELS) + " |"
    print(head.replace("_", " ") + "\n|---|" + "---|" * len(LABELS))
    assert fitted.loho is not None and fitted.loho_by_hardware is not None
    rows = [("in-sample, all", fitted.in_sample), ("leave-one-hardware-out, all", fitted.loho)]
    rows += [(f"LOHO {hw}", errs) for hw, errs in fitted.loho_by_hardware.items()]
    for label, errs in rows:
        print(f"| {label} | " + " | ".join(f"{errs[k]:.1%}" for k in LABELS) + " |")
    for k in LABELS:
        figure(f"loho_{k}_median_ape", fitted.loho[k], "fraction")
    ttft = cal.ttft_errors(data, catalog, params)
    print(f"\nclosed-form TTFT against the measured median (in-sample): {np.nanmedian(ttft):.1%}")
    _first_waves(data, catalog, params)
    _recv_interval(data, catalog, params)


def _first_waves(data: list[cal.Measured], catalog, params: PerfParams) -> None:  # type: ignore[no-untyped-def]
    """The closed loop's p99 is its first wave: H200 with 8k-token prompts, measured against
    simulated as calibrated (the offsets and the engine's cold start in)."""
    rows = [m for m in data if m.row.hardware == "h200-sxm" and m.row.isl > 5000 and not m.row.disagg]
    meas = measured_latency(rows)
    print("\nH200, 8k-token prompts, aggregated: TTFT p99 measured / simulated (s)")
    for m, x in zip(rows, meas, strict=True):
        sim = latency_of(m.row, catalog, params, seed=SEED).percentile("ttft", 99.0)
        print(f"  {m.row.engine:6s} {m.row.conc:5.0f} clients: {x[1]:7.3f} / {sim:7.3f}")


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
