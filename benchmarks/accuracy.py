"""Accuracy of the performance model against measured runs: in-sample and leave-one-hardware-out.

Prints median and 75th-percentile absolute percentage error of tokens/s/GPU and tokens/s/user,
overall and per hardware, the share of hardware pairs ordered right at about equal tokens/s/user,
where the error lives, the TTFT error, the floor (the in-sample error left when each hardware and
engine pair, or each software image, gets constants of its own) and the DeepSeek fleet check.
Run: ``python benchmarks/accuracy.py`` (about two minutes). Every change to the model and its
figures: ``benchmarks/ACCURACY_LOG.md``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from record import figure

from dse.calibration import fit as cal
from dse.calibration.published import POINTS, measured_per_gpu
from dse.catalog import load_catalog
from dse.paths import MEASURED_RUNS, PUBLISHED_POINTS
from dse.perf.params import default_params

sys.path.insert(0, str(Path(__file__).parent))
from fleet_check import fleet_nodes  # noqa: E402


def _line(name: str, s: cal.ErrorStats) -> str:
    return (
        f"| {name} | {s.n} | {s.tput_median_ape:.1%} | {s.tput_p75_ape:.1%} | "
        f"{s.intvty_median_ape:.1%} | {s.intvty_p75_ape:.1%} |"
    )


def main() -> None:
    catalog = load_catalog()
    data, skipped = cal.read_measured(MEASURED_RUNS, catalog)
    measured = measured_per_gpu(PUBLISHED_POINTS)
    values = [measured[p.id] for p in POINTS]
    fitted = cal.fit(data, catalog, default_params(), POINTS, values)
    t_in, i_in = cal.predict_measured(data, catalog, fitted)
    t_lo, i_lo = cal.leave_one_hardware_out(data, catalog, default_params(), POINTS, values)
    print(f"rows modelled: {len(data)}; skipped: {len(skipped)}")
    header = (
        "| hardware | rows | tok/s/GPU median | tok/s/GPU p75 | tok/s/user median | "
        "tok/s/user p75 |\n|---|---|---|---|---|---|"
    )
    for label, t, i in (("in-sample", t_in, i_in), ("leave-one-hardware-out", t_lo, i_lo)):
        print(f"\n{label}\n{header}")
        stats = cal.error_stats(data, t, i)
        print(_line("all", stats))
        figure(f"{label}: tokens/s/GPU median error", 100 * stats.tput_median_ape, "%", f"{stats.n} rows")
        figure(f"{label}: tokens/s/user median error", 100 * stats.intvty_median_ape, "%")
        for hw in sorted({m.row.hardware for m in data}):
            idx = [k for k, m in enumerate(data) if m.row.hardware == hw]
            print(_line(hw, cal.error_stats([data[k] for k in idx], t[idx], i[idx])))
        print(
            f"hardware pairs ordered right at about equal tokens/s/user: "
            f"{cal.pair_order_agreement(data, t, i):.1%}"
        )
    little, step = cal.error_sources(data, catalog, fitted)

    def ape(logs: np.ndarray, q: float) -> float:
        return float(np.nanpercentile(np.abs(np.expm1(logs)), q))

    print(
        f"\nwhere the error lives: Little's law on each run's own median TTFT and TPOT gives its "
        f"tokens/s/GPU within {ape(little, 50):.1%} (median); the model's TPOT at each run's "
        f"measured decode batch is off by {ape(step, 50):.1%} (median; p75 {ape(step, 75):.1%})"
    )
    figure("TPOT at the measured decode batch: median error", 100 * ape(step, 50), "%")
    ttft = cal.ttft_errors(data, catalog, fitted)
    low = np.array([m.row.conc <= 16 for m in data])
    print(
        f"median TTFT, in-sample: median error {np.nanmedian(ttft):.0%}, "
        f"p75 {np.nanpercentile(ttft, 75):.0%} "
        f"(runs of at most 16 requests in flight: {np.nanmedian(ttft[low]):.0%})"
    )
    figure("TTFT in-sample: median error", 100 * np.nanmedian(ttft), "%")
    print("\nthe floor: in-sample error when each cell of runs has its own kernel speed and MTP acceptance")
    cells = {
        "hardware and engine": lambda m: m.row.hardware,
        "hardware, engine and software image": lambda m: f"{m.row.hardware}@{m.raw.get('image', '')}",
    }
    for name, cell in cells.items():
        t, i, n = cal.fit_per_cell(data, catalog, default_params(), cell, POINTS, values)
        s = cal.error_stats(data, t, i)
        print(
            f"  per {name} ({n} cells): tokens/s/GPU {s.tput_median_ape:.1%} / {s.tput_p75_ape:.1%}, "
            f"tokens/s/user {s.intvty_median_ape:.1%} / {s.intvty_p75_ape:.1%} (median / p75)"
        )
        figure(f"floor per {name}: tokens/s/GPU median error", 100 * s.tput_median_ape, "%", f"{n} cells")
    fleet = fleet_nodes(catalog, fitted)
    figure("DeepSeek fleet: nodes against published", 100 * fleet["error"], "%")
    print(
        f"\nDeepSeek fleet check: {fleet['nodes']:.1f} nodes against "
        f"{fleet['published_nodes']} published ({fleet['error']:+.1%})"
    )


if __name__ == "__main__":
    main()
