"""`dse predict --batch`: the serving figures of a CSV of deployments, one row each, written to a
CSV beside the input columns."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from dse.atomic import atomic_path
from dse.catalog import Catalog
from dse.errors import InputError, output_error
from dse.perf.benchmark_rows import (
    ENGINE_COLUMNS,
    INPUT_COLUMNS,
    NO_CAP,
    OUTPUT_COLUMNS,
    PARALLEL_COLUMNS,
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
    settings added, then the predictions); on standard error, how many rows could not be modelled
    (with the first one's error) and what ``recipes`` adds (or would add). Exit 0 when one row at
    least was predicted; a file of no row, or of none that could be predicted, is bad input
    (:class:`InputError`, exit 2) and ``out`` is not written."""
    if src is None:
        raise InputError(SRC, "--recipe-settings", "needs --batch")
    if out is None:
        raise InputError(SRC, "--out", "is required with --batch")
    if out.resolve() == src.resolve() or (out.exists() and src.exists() and out.samefile(src)):
        rule = f"must not be the --batch file ({src}): the input would be overwritten"
        raise InputError(SRC, "--out", rule)
    header, rows, lines = read_csv(src, "--batch")
    missing = [c for c in INPUT_COLUMNS if c not in header]
    if missing:
        raise InputError(str(src), missing[0], "is a required column")
    known = with_recipe_settings(rows)
    pairs = list(zip(rows, known, strict=True))
    engine = sum(1 for a, b in pairs if any(a.get(c) != b.get(c) != NO_CAP for c in ENGINE_COLUMNS))
    # SGLang MTP runs the settings do not name: their cap is not known, so not SGLang's default 48
    unknown = sum(1 for a, b in pairs if b.get(ENGINE_COLUMNS[0]) == NO_CAP != a.get(ENGINE_COLUMNS[0]))
    warmup = sum(1 for a, b in pairs if b.get(WARMUP_COLUMN) != a.get(WARMUP_COLUMN))
    # rows whose tp, ep or dp-attention cells the settings replace with what the run launched
    relaunched = sum(1 for a, b in pairs if any(b.get(c) != a.get(c) for c in PARALLEL_COLUMNS))
    added = [c for c in (*ENGINE_COLUMNS, WARMUP_COLUMN) if c not in header] if recipes else []
    if not rows:  # nothing to predict: an output of its header alone would read as done
        raise InputError(str(src), "", "needs at least one row (it holds a header alone)")
    result = predict_rows(known if recipes else rows, catalog, params, source=src.name, lines=lines)
    errors = [str(r["pred_error"]) for r in result if r["pred_error"]]
    if len(errors) == len(result):  # bad input, as dse calibrate's file of no row it can fit: no output
        which = "its one row" if len(errors) == 1 else f"the first of its {len(errors)} rows"
        rule = f"holds no row that could be predicted ({which}: {errors[0]})"
        raise InputError(str(src), "", rule)
    columns = header + added + [c for c in OUTPUT_COLUMNS if c not in header]
    try:
        with atomic_path(out) as tmp, tmp.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(result)
    except OSError as exc:
        raise output_error(exc, SRC, "--out", out) from None
    # the rows it could not model are in the file, each with its pred_error: the first one said here
    failed = f"; {len(errors)} could not be modelled (pred_error), the first: {errors[0]}" if errors else ""
    # and those whose simulated window shows no steady state, as dse predict warns of one row's
    unsteady = [str(r["pred_latency_warning"]) for r in result if r.get("pred_latency_warning")]
    if unsteady:
        failed += (
            f"; {len(unsteady)} simulated no steady state (pred_latency_warning, their percentiles "
            f"describe none), the first: {unsteady[0]}"
        )
    print(f"wrote {_rows(len(result))} to {out}{failed}", file=sys.stderr)
    what = (
        f"the engine settings of the InferenceX runs they name to {_rows(engine)} "
        "(dse/perf/recipe_settings.csv)"
        + (
            f", the parallelism their launch scripts ran to {_rows(relaunched)} "
            "(where the row records another),"
            if relaunched
            else ""
        )
        + (  # after the parallelism's part, or else its own comma after the settings file's
            f"{'' if relaunched else ','} decode_max_running_requests '{NO_CAP}' to {_rows(unknown)} "
            "(SGLang with MTP, whose "
            "launch it lacks: only the KV cache caps them, not SGLang's default of 48),"
            if unknown
            else ""
        )
        + f" and benchmark_warmup 'none' to {_rows(warmup)} (single-node runs "
        "dated before InferenceX's harness sent a warm-up)"
    )
    if recipes:
        print(f"added {what}, as dse calibrate does", file=sys.stderr)
    elif engine or warmup or relaunched or unknown:
        print(f"--recipe-settings would add {what}, as dse calibrate does for its accuracy", file=sys.stderr)
    return 0


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"
