"""Parquet exports for BI tools: hive-partitioned by study, zstd, UTC timestamps, with the engine
version, schema version and resolved study spec in each file's metadata. Every file is written
to a temporary name and renamed, so a reader (or a killed export) never sees half a file.

Layout: ``OUT/<table>/study=<name>/part-0.parquet`` for the tables trials, pareto, placements,
kv_tiers and sim_timeseries (the ``study`` column lives in the folder name, as hive expects).
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import polars as pl

from dse import __version__
from dse.atomic import atomic_path
from dse.study.results import SCHEMA_VERSION

TABLES = ("trials", "pareto", "placements", "kv_tiers", "sim_timeseries")
STALE_TMP_S = 600.0  # a temporary file this old belongs to no running export


def write_table(df: pl.DataFrame, out: Path, table: str, study: str, spec: dict[str, Any]) -> Path:
    """One table of one study, atomically."""
    folder = out / table / f"study={study}"
    path = folder / "part-0.parquet"
    body = df.drop("study") if "study" in df.columns else df
    meta = {
        "dse.engine_version": __version__,
        "dse.schema_version": str(SCHEMA_VERSION),
        "dse.table": table,
        "dse.study_spec": json.dumps(spec),
    }
    for stale in folder.glob(f".{path.name}.*.tmp"):  # left by an export killed mid-write
        with contextlib.suppress(OSError):  # (a fresh one may be a concurrent export's: leave it)
            if time.time() - stale.stat().st_mtime > STALE_TMP_S:
                stale.unlink()
    with atomic_path(path) as tmp:
        body.write_parquet(tmp, compression="zstd", metadata=meta)
    return path


def export_all(tables: dict[str, pl.DataFrame], out: Path, study: str, spec: dict[str, Any]) -> list[Path]:
    """Write every table (empty ones too, so a schema-less study still has its files)."""
    return [write_table(tables[name], out, name, study, spec) for name in TABLES if name in tables]
