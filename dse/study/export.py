"""Parquet exports for BI tools: hive-partitioned by study, zstd, UTC timestamps, with the engine
version, schema version and resolved study spec in each file's metadata. Every file is written
to a temporary name and renamed, so a reader (or a killed export) never sees half a file; the
temporary files lie in ``OUT`` itself, outside the tables' folders, where a reader of a table's
folder (``pl.read_parquet("OUT/trials/")``, DuckDB's ``OUT/trials/**``) would take one for a
Parquet file and fail on it; and every table is written before any is renamed into place.

Layout: ``OUT/<table>/study=<name>/part-0.parquet`` for the tables trials, pareto, placements,
kv_tiers and sim_timeseries (the ``study`` column lives in the folder name, as hive expects, a
``%`` in the name escaped as hive escapes it: :func:`partition`). A study's folder an earlier
schema named otherwise (:func:`superseded_partitions`) is removed once the new files are in place,
where it holds dse's own file of that study and table.
"""

from __future__ import annotations

import contextlib
import errno
import json
from pathlib import Path
from typing import Any

import polars as pl

from dse import __version__, interrupt
from dse.atomic import atomic_path, remove_stale
from dse.errors import InputError
from dse.study.faults import writing
from dse.study.results import SCHEMA_VERSION

TABLES = ("trials", "pareto", "placements", "kv_tiers", "sim_timeseries")
HIVE_ESCAPES = {"%": "%25", "=": "%3D"}
"""Characters of a study name that hive readers decode or split on (polars, DuckDB, pyarrow):
unescaped, a name ``50%20off`` read back as ``50 off``. (A study file's name may not hold ``=``,
which its run folder would carry too: ``dse.study.spec.folder_name``.)"""


def partition(study: str) -> str:
    """The folder of ``study``'s rows in a table: ``study=<name>``, percent-escaped where hive
    readers would misread the name (they decode it back)."""
    return "study=" + "".join(HIVE_ESCAPES.get(c, c) for c in study)


def superseded_partitions(study: str) -> list[str]:
    """The folders of ``study``'s rows that exports before schema 5 wrote and today's do not:
    ``study=<name>`` unescaped (``study=50%off`` for ``study=50%25off``). Left beside the new one,
    a reader of the table's folder read the study's rows twice."""
    return [old for old in (f"study={study}",) if old != partition(study)]


def _dse_export_of(path: Path, table: str, study: str) -> bool:
    """Whether ``path`` is a file an export of dse wrote for ``study``'s ``table``: its metadata's
    ``dse.table`` and the name in ``dse.study_spec`` say so (every schema wrote both). The folder
    of another study's (``study=50%25off`` is the unescaped folder of a study named so, and the
    escaped one of ``50%off``), or a file dse did not write, is not."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        meta = pl.read_parquet_metadata(path)
        spec = json.loads(meta.get("dse.study_spec", "null"))
    except Exception:  # not Parquet, unreadable, no JSON: not dse's export, so not removed
        return False
    return meta.get("dse.table") == table and isinstance(spec, dict) and spec.get("name") == study


def _remove_superseded(out: Path, table: str, study: str) -> None:
    """Remove ``study``'s folder of ``table`` that an export of an earlier schema wrote
    (:func:`superseded_partitions`): its file, where it is dse's export of that study and table,
    the temporary files a killed export of then left there, and the folder once nothing else is
    in it (anything else stays, and so the folder)."""
    for name in superseded_partitions(study):
        folder = out / table / name
        if folder.is_symlink() or not folder.is_dir():
            continue
        path = folder / "part-0.parquet"
        if _dse_export_of(path, table, study):
            path.unlink()
            remove_stale(path)
        with contextlib.suppress(OSError):  # not empty: what is left there is not ours
            folder.rmdir()


def _staged(
    stack: contextlib.ExitStack[Any],
    df: pl.DataFrame,
    out: Path,
    table: str,
    study: str,
    spec: dict[str, Any],
    numbers: dict[str, Any],
) -> Path:
    """Write one table to a temporary file in ``out``, renamed into its folder when ``stack``
    closes without an error (removed otherwise); ``numbers`` (``dse.catalog``,
    ``dse.calibration``) go to its metadata as JSON, each that is not None."""
    path = out / table / partition(study) / "part-0.parquet"
    body = df.drop("study") if "study" in df.columns else df
    meta = {
        "dse.engine_version": __version__,
        "dse.schema_version": str(SCHEMA_VERSION),
        "dse.table": table,
        "dse.study_spec": json.dumps(spec),
    }
    meta.update({key: json.dumps(held) for key, held in numbers.items() if held is not None})
    remove_stale(path)  # left in the table's folder by an export of an earlier version killed mid-write
    remove_stale(path, staging=out)  # and in ``out`` by one of this version
    tmp = stack.enter_context(atomic_path(path, staging=out))
    write_parquet(body, tmp, meta)
    return path


def write_parquet(df: pl.DataFrame, path: Path, meta: dict[str, str]) -> None:
    """``df`` to ``path`` (zstd) with ``meta`` in the file's key-value metadata, which every reader
    shows: polars' writer adds an Arrow schema without it, and pyarrow takes a file's schema and
    its metadata from that Arrow schema when there is one, so ``pq.read_schema``, a table's schema
    and ``pyarrow.dataset`` showed no ``dse.*`` key. Without it pyarrow reads the Parquet types
    (a string column is ``string``, a UTC timestamp ``timestamp[us, tz=UTC]``) and the key-value
    metadata; polars and DuckDB read the same types as before."""
    import pyarrow.parquet as pq  # an export's alone: dse.study's other users do without it

    table = df.to_arrow(compat_level=pl.CompatLevel.oldest())
    with pq.ParquetWriter(path, table.schema, compression="zstd", store_schema=False) as writer:
        writer.write_table(table)
        writer.add_key_value_metadata(meta)


def export_all(
    tables: dict[str, pl.DataFrame],
    out: Path,
    study: str,
    spec: dict[str, Any],
    catalog: Any = None,
    *,
    series_catalog: Any = None,
    calibration: Any = None,
    series_calibration: Any = None,
) -> list[Path]:
    """Write every table (empty ones too, so a schema-less study still has its files), once each
    one's place is known to take it: all of them to temporary files first, then each renamed into
    place, so that an export that fails or is stopped while it writes leaves every table as it
    was; then remove the study's folders an earlier schema named otherwise
    (:func:`superseded_partitions`), so that a reader of a table's folder sees the study once.
    Each file's ``dse.catalog`` is the catalog numbers its rows were computed with: ``catalog``,
    the trials', but for ``sim_timeseries``, simulated at export time with ``series_catalog``
    (where given), which differs from the trials' when the study is read under another catalog.
    Their ``dse.calibration`` is likewise ``calibration``, the performance model's numbers the
    trials were priced with, and ``series_calibration`` the series'."""
    names = [name for name in TABLES if name in tables]
    with writing(out):
        with contextlib.ExitStack() as stack:
            _check_destinations(out, study, names)
            numbers = {name: {"dse.catalog": catalog, "dse.calibration": calibration} for name in names}
            series = numbers.get("sim_timeseries", {})
            if series_catalog is not None:
                series["dse.catalog"] = series_catalog
            if series_calibration is not None:
                series["dse.calibration"] = series_calibration
            paths = [_staged(stack, tables[n], out, n, study, spec, numbers[n]) for n in names]
            renames = stack.pop_all()  # each table renamed into place as it closes
        # a Ctrl-C among the renames waits for the last one: it had left the tables renamed before
        # it new and the rest old (a Ctrl-C while the tables are written removes every new one)
        with interrupt.deferred():
            renames.close()
        for name in names:  # once the new files are in place: a failed export leaves the old ones
            _remove_superseded(out, name, study)
        return paths


def _check_destinations(out: Path, study: str, names: list[str]) -> None:
    """Refuse, before the first table is written, a file where a table's folder goes or a folder
    where its file goes: a table blocked that way had left the tables before it written (and a
    folder in the file's place was a traceback)."""
    for name in names:
        path = out / name / partition(study) / "part-0.parquet"
        if path.is_dir() and not path.is_symlink():
            raise InputError(str(path), "", "must be a file: a folder has its name")
        existing = next(d for d in (path.parent, *path.parent.parents) if d.exists() or d.is_symlink())
        if not existing.is_dir():  # raised as writing() names it
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(existing))
