"""`dse predict --batch`: the serving figures of a CSV of deployments, one row each, written to a
CSV beside the input columns."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from dse.atomic import atomic_path
from dse.catalog import Catalog
from dse.errors import InputError
from dse.perf.benchmark_rows import (
    ENGINE_COLUMNS,
    INPUT_COLUMNS,
    OUTPUT_COLUMNS,
    WARMUP_COLUMN,
    predict_rows,
    with_recipe_settings,
)
from dse.perf.params import PerfParams
from dse.typed_data import read_csv

SRC = "dse predict"


def run_batch(
    src: Path | None, out: Path | None, catalog: Catalog, params: PerfParams, *, recipes: bool
) -> int:
    """Predict every row of ``src`` into ``out`` (the input columns, with ``recipes`` the engine
    settings added, then the predictions); one line on standard error says how many rows could not
    be modelled, and how many are InferenceX runs with known settings."""
    if src is None:
        raise InputError(SRC, "--recipe-settings", "needs --batch")
    if out is None:
        raise InputError(SRC, "--out", "is required with --batch")
    header, rows = read_csv(src, "--batch")
    missing = [c for c in INPUT_COLUMNS if c not in header]
    if missing:
        raise InputError(str(src), missing[0], "is a required column")
    known = with_recipe_settings(rows)
    named = sum(1 for a, b in zip(rows, known, strict=True) if a != b)  # rows the settings would change
    added = [c for c in (*ENGINE_COLUMNS, WARMUP_COLUMN) if c not in header] if recipes else []
    result = predict_rows(known if recipes else rows, catalog, params, source=src.name)
    columns = header + added + [c for c in OUTPUT_COLUMNS if c not in header]
    try:
        with atomic_path(out) as tmp, tmp.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(result)
    except OSError as exc:
        raise InputError(SRC, "--out", f"cannot be written ({exc.strerror})", str(out)) from None
    failed = sum(1 for r in result if r["pred_error"])
    print(f"wrote {len(result)} rows to {out} ({failed} could not be modelled)", file=sys.stderr)
    if recipes:
        print(
            f"InferenceX engine settings added to {named} rows, as dse calibrate adds them",
            file=sys.stderr,
        )
    elif named:
        print(
            f"{named} rows are InferenceX runs whose engine settings dse knows "
            "(dse/perf/recipe_settings.csv); --recipe-settings adds them, as dse calibrate does for its "
            "accuracy figures",
            file=sys.stderr,
        )
    return 0
