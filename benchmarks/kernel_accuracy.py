"""Accuracy of the two kernel tiers against the measured runs, leave-one-hardware-out.

Three columns per GPU and overall (median absolute error of tokens/s/GPU, and of tokens/s/user):

* **datasheet**: every op from the datasheet roofline, fitted as ``dse calibrate`` fits it;
* **measured**: ops the measured kernel tables (aiconfigurator-core) cover priced from them, with
  the datasheet fit's overheads and efficiencies left as they are (no refit);
* **measured + refit**: the same, with everything that stays calibrated refitted on that tier
  (``dse calibrate --kernels measured``: per-step and per-layer overheads, engine speeds and MTP
  acceptance, network efficiencies, the measured-kernel scale and launch saving).

Each fold fits on the other GPUs, as ``dse calibrate`` does, so a GPU's figure is from a fit that
never saw it. Then, for B300 and GB300, which no measured run covers, the uplift each tier
predicts over B200 and GB200 on those GPUs' own runs. Run: ``python benchmarks/kernel_accuracy.py``
(about four minutes).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from record import figure

from dse.calibration import fit as cal
from dse.calibration.published import POINTS, measured_per_gpu
from dse.catalog import load_catalog
from dse.paths import MEASURED_RUNS, PUBLISHED_POINTS
from dse.perf.kernel_data import problems
from dse.perf.params import PerfParams, default_params


def _loho(data, catalog, start, values):  # type: ignore[no-untyped-def]
    folds: dict[str, PerfParams] = {}
    t, i = cal.leave_one_hardware_out(data, catalog, start, POINTS, values, folds)
    return t, i, folds


def _without_refit(data, catalog, folds):  # type: ignore[no-untyped-def]
    """Each GPU's rows under its datasheet fold's values, priced from the measured tables."""
    t = np.full(len(data), np.nan)
    i = np.full(len(data), np.nan)
    for hw, fitted in folds.items():
        idx = [k for k, m in enumerate(data) if m.row.hardware == hw]
        rows = [data[k] for k in idx]
        t[idx], i[idx] = cal.predict_measured(rows, catalog, replace(fitted, kernels="measured"))
    return t, i


def _cell(data, t, i, idx):  # type: ignore[no-untyped-def]
    s = cal.error_stats([data[k] for k in idx], t[idx], i[idx])
    return f"{s.tput_median_ape:.1%} / {s.intvty_median_ape:.1%}"


def main() -> None:
    catalog = load_catalog()
    data, _ = cal.read_measured(MEASURED_RUNS, catalog)
    measured = measured_per_gpu(PUBLISHED_POINTS)
    values = [measured[p.id] for p in POINTS]
    start = default_params()
    t_ds, i_ds, folds = _loho(data, catalog, start, values)
    t_mn, i_mn = _without_refit(data, catalog, folds)
    t_mr, i_mr, _ = _loho(data, catalog, replace(start, kernels="measured"), values)
    tiers = (("datasheet", t_ds, i_ds), ("measured", t_mn, i_mn), ("measured + refit", t_mr, i_mr))
    print(f"{len(data)} measured runs, leave-one-hardware-out; tokens/s/GPU / tokens/s/user median abs error")
    print("| hardware | rows | " + " | ".join(n for n, _, _ in tiers) + " |\n|---|---|---|---|---|")

    def line(label: str, idx: list[int]) -> str:
        return f"| {label} | {len(idx)} | " + " | ".join(_cell(data, t, i, idx) for _, t, i in tiers) + " |"

    for hw in sorted({m.row.hardware for m in data}):
        print(line(hw, [k for k, m in enumerate(data) if m.row.hardware == hw]))
    print(
        line(
            "GPUs with tables",
            [k for k, m in enumerate(data) if catalog.hardware(m.row.hardware).measured_kernels],
        )
    )
    print(line("all", list(range(len(data)))))
    for name, t, i in tiers:
        s = cal.error_stats(data, t, i)
        print(
            f"{name}: tokens/s/GPU median {s.tput_median_ape:.1%}, p75 {s.tput_p75_ape:.1%}; "
            f"tokens/s/user median {s.intvty_median_ape:.1%}, p75 {s.intvty_p75_ape:.1%}"
        )
        figure(f"LOHO tokens/s/GPU median error, {name}", 100 * s.tput_median_ape, "%")
        figure(f"LOHO tokens/s/user median error, {name}", 100 * s.intvty_median_ape, "%")
    _unseen(data, catalog, start, values)
    for line in problems():
        print(f"note: {line}")


def _unseen(data, catalog, start, values) -> None:  # type: ignore[no-untyped-def]
    """B300 and GB300 have tables but no measured run: the uplift each tier predicts over the
    GPU a run was measured on, for the same deployment (median over that GPU's runs)."""
    fits = {
        "datasheet": cal.fit(data, catalog, start, POINTS, values),
        "measured + refit": cal.fit(data, catalog, replace(start, kernels="measured"), POINTS, values),
    }
    print("\npredicted tokens/s/GPU on an unmeasured GPU over the measured one, same runs (median)")
    print("| runs of | priced on | " + " | ".join(fits) + " |\n|---|---|---|---|")
    for base, new in (("b200", "b300"), ("gb200-nvl72", "gb300-nvl72")):
        rows = [m for m in data if m.row.hardware == base]
        moved = [replace(m, row=replace(m.row, hardware=new)) for m in rows]
        cells = []
        for name, p in fits.items():
            before, _ = cal.predict_measured(rows, catalog, p)
            after, _ = cal.predict_measured(moved, catalog, p)
            ratio = float(np.nanmedian(after / before))
            cells.append(f"{ratio:.2f}x")
            figure(f"{new} over {base}, {name}", ratio, "x")
        print(f"| {base} ({len(rows)}) | {new} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
