"""`dse calibrate`: refit the performance model to the measured runs and write the result."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from dse.atomic import write_text
from dse.catalog import Catalog
from dse.errors import InputError
from dse.perf import calibration as cal
from dse.perf.params import CALIBRATION_FILE, default_params, params_to_json
from dse.perf.published import POINTS, StagePoint, measured_per_gpu

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared" / "reference" / ("inferencex_calibration.csv")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("calibrate", help="fit the performance model to measured serving runs")
    p.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="measured runs (columns of inferencex_calibration.csv)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=CALIBRATION_FILE,
        help="where to write the fitted values (default: the file the engine loads)",
    )


def run(args: argparse.Namespace, catalog: Catalog) -> int:
    if not args.data.is_file():
        raise InputError(str(args.data), "--data", "must be an existing CSV file")
    data, skipped = cal.read_measured(args.data, catalog)
    if not data:
        raise InputError(str(args.data), "", "holds no row the model can describe")
    points_file = args.data.with_name("published_points.csv")
    points: tuple[StagePoint, ...] = ()
    values: tuple[float, ...] = ()
    if points_file.is_file():
        measured = measured_per_gpu(points_file)
        points, values = POINTS, tuple(measured[p.id] for p in POINTS)
    fitted = cal.fit(data, catalog, default_params(), points, values)
    tput, intv = cal.predict_measured(data, catalog, fitted)
    stats = cal.error_stats(data, tput, intv)
    fitted = replace(fitted, provenance=cal.provenance(args.data, data, len(skipped), stats))
    write_text(args.out, params_to_json(fitted) + "\n")
    print(f"fitted {len(data)} rows ({len(skipped)} skipped) and {len(points)} stage points -> {args.out}")
    for msg in skipped:
        print(f"  skipped: {msg}")
    print(
        f"in-sample median abs error: tokens/s/GPU {stats.tput_median_ape:.1%}, "
        f"tokens/s/user {stats.intvty_median_ape:.1%}"
    )
    return 0
