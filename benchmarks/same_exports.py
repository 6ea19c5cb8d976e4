"""Whether two runs of a study exported the same tables: every Parquet file of one run folder
against the other's, with polars ``equals`` (values, dtypes, column order, row order), leaving out
only the wall-clock columns (``CLOCKS``: when a trial started and finished, how long it took, and
the MILP's solve seconds, docs/schema.md). Each ``report.md`` is compared as text, its lines that
name one of those columns left out, and each PNG byte for byte. A speed change that keeps every
answer passes this on two runs with the same seed.

Run: ``python benchmarks/same_exports.py RUN_A RUN_B`` (the folders given to ``--out``); exit 1
and the first difference of each table when they differ.
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

CLOCKS = ("started_utc", "finished_utc", "duration_s", "milp_solve_s")  # wall-clock, not results


def parquet_files(run: Path) -> dict[str, Path]:
    """Each Parquet file under ``run``, by its path inside it."""
    return {str(p.relative_to(run)): p for p in sorted(run.rglob("*.parquet"))}


def differences(a: Path, b: Path) -> list[str]:
    """What differs between the Parquet files of run folders ``a`` and ``b`` (empty: the same)."""
    fa, fb = parquet_files(a), parquet_files(b)
    out = [f"{name}: only in {a if name in fa else b}" for name in sorted(fa.keys() ^ fb.keys())]
    if not fa:
        out.append(f"{a}: no Parquet file")
    for name in sorted(fa.keys() & fb.keys()):
        da, db = pl.read_parquet(fa[name]), pl.read_parquet(fb[name])
        if da.columns != db.columns:
            out.append(f"{name}: columns differ")
            continue
        keep = [c for c in da.columns if c not in CLOCKS]
        da, db = da.select(keep), db.select(keep)
        if da.equals(db):
            continue
        if da.shape != db.shape:
            out.append(f"{name}: shape {da.shape} against {db.shape}")
            continue
        for c in keep:
            if not da[c].equals(db[c]):
                rows = (da[c].ne_missing(db[c])).arg_true().to_list()
                out.append(f"{name}: column {c} differs in {len(rows)} rows, first row {rows[0]}")
                break
    return out + _report_differences(a, b)


def _report_differences(a: Path, b: Path) -> list[str]:
    """The reports' differences: ``report.md`` but for the clocks' lines, and the figures."""
    out = []
    for pa in sorted(a.rglob("report/*")):
        pb = b / pa.relative_to(a)
        if not pb.exists():
            out.append(f"{pa.relative_to(a)}: only in {a}")
        elif pa.suffix == ".md":
            la, lb = (
                [line for line in p.read_text().splitlines() if not any(c in line for c in CLOCKS)]
                for p in (pa, pb)
            )
            if la != lb:
                first = next((i for i, (x, y) in enumerate(zip(la, lb, strict=False)) if x != y), len(la))
                out.append(f"{pa.relative_to(a)}: differs (line {first + 1} of those compared)")
        elif pa.read_bytes() != pb.read_bytes():
            out.append(f"{pa.relative_to(a)}: differs")
    return out


def main(a: str, b: str) -> int:
    diff = differences(Path(a), Path(b))
    for line in diff:
        print(line)
    n = len(parquet_files(Path(a)))
    said = "the same" if not diff else f"{len(diff)} differ"
    print(f"{n} Parquet files and the report compared: {said}")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
