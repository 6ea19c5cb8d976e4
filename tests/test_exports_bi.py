"""The Parquet exports as a BI tool reads them (docs/schema.md): every documented column and no
other, nulls rather than nan or a 0 that stands for "does not apply", the same columns with and
without a feasible design, and no temporary file where a reader of a table's folder looks.
Also the public Python API's docstrings and the example of ``dse.study.api``."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import optuna
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import dse.study.api as api
import dse.study.export as export
from dse.study import Study, StudyResults
from dse.study.results import SCHEMA_VERSION, TrialsRead, placements_frame, trials_frame

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "data" / "tiny-study.toml"
GRID = REPO / "tests" / "data" / "tiny-grid.toml"
TABLES = ("trials", "pareto", "placements", "kv_tiers", "sim_timeseries")


def _study_with(records: list[dict[str, Any]]) -> TrialsRead:
    """The trials of an in-memory study holding one finished trial per record (as a run stores
    them), read as the tables read them."""
    study = optuna.create_study(study_name="fake", directions=["minimize"])
    for rec in records:
        study.add_trial(optuna.trial.create_trial(value=1.0, user_attrs={"record": rec}))
    return TrialsRead(study)


def _pool(role: str, **figures: float) -> dict[str, Any]:
    base = {
        "role": role, "hardware": "b200", "shape": "8gpu-dpa-ep8", "instances": 1, "gpus": 8,
        "decode_batch": 0.0, "prefill_share": 0.0, "hbm_gb_per_gpu": 150.0, "working_gb_per_gpu": 140.0,
        "weights_gb_per_gpu": 90.0, "requests_per_s": 0.0, "output_tokens_per_s": 0.0, "usd_per_hour": 15.6,
    }  # fmt: skip
    return base | figures


def test_a_pools_figure_it_does_not_have_is_null_and_nan_is_null() -> None:
    """A prefill pool's decode batch and prefill share, a decode pool's prefill share, were 0 (a
    BI average of the decode batch over pools counted the prefill pools as batch 0); a pool of
    hardware with no price in the study's tier had usd_per_hour nan where trials has null (and
    DuckDB's max of the column was nan)."""
    pools = [
        _pool("prefill", requests_per_s=10.0, usd_per_hour=math.nan),
        _pool("decode", decode_batch=256.0, output_tokens_per_s=9000.0),
        _pool("mixed", decode_batch=64.0, prefill_share=0.3, requests_per_s=10.0, output_tokens_per_s=5000.0),
    ]
    df = placements_frame(_study_with([{"pools": pools}]))
    assert df["decode_batch_sequences"].to_list() == [None, 256.0, 64.0]
    assert df["prefill_share"].to_list() == [None, None, 0.3]
    assert df["usd_per_hour"].to_list() == [None, 15.6, 15.6]
    assert df["requests_per_s"].to_list() == [10.0, 0.0, 10.0]  # flows: 0 is what the pool carries
    assert df.schema["decode_batch_sequences"] == pl.Float64 and df.schema["prefill_share"] == pl.Float64


def test_a_trials_table_without_a_finished_trial_has_every_column() -> None:
    """A study whose trials all failed wrote trials and pareto without ``design`` and
    ``design_trials``: a dashboard joining on ``design`` broke on it."""
    full = trials_frame(_study_with([{"choice": {"topology": "disaggregated"}}]), ["usd_per_million_tokens"])
    empty = trials_frame(TrialsRead(optuna.create_study(study_name="none")), ["usd_per_million_tokens"])
    assert empty.is_empty() and empty.schema == full.schema


def test_a_grid_study_without_a_finished_trial_exports_its_point_columns(tmp_path: Path) -> None:
    """A grid study whose run stopped before its first point finished exported ``trials`` and
    ``pareto`` without ``x_<axis>``: a dashboard of the grid's points failed on the column, and a
    union with a later export had to guess its type. Each file read back (pyarrow, polars) has
    the same columns and types as once its points ran."""
    ran = Study.load(GRID).run(trials=2, out=tmp_path / "runs")
    none = dataclasses.replace(ran, study=optuna.create_study(study_name="tiny-grid"))
    exports = {"ran": ran, "none": none}
    for label, res in exports.items():
        res.export(tmp_path / label)
    for table in ("trials", "pareto"):
        files = {label: tmp_path / label / table / "study=tiny-grid" / "part-0.parquet" for label in exports}
        arrow = {label: pq.read_schema(f).remove_metadata() for label, f in files.items()}
        assert arrow["none"] == arrow["ran"], table
        point = {c: arrow["none"].field(c).type for c in ("x_input_tokens", "x_hardware")}
        assert point == {"x_input_tokens": pa.float64(), "x_hardware": pa.string()}, table
        empty = pl.read_parquet(files["none"])
        assert empty.is_empty() and empty.schema == pl.read_parquet(files["ran"]).schema, table


def test_the_time_series_is_sampled_as_the_schema_page_says(tmp_path: Path) -> None:
    """docs/schema.md said a 10-s sample: a study whose simulation step does not divide 10 s (3 s,
    which a TTFT target of 3 s allows) has one every 9 s, the whole number of steps nearest 10 s;
    an analyst summing a rate times 10 s over its rows was 11% off. The page says so now."""
    text = TINY.read_text()
    spec = tmp_path / "tiny-study.toml"
    spec.write_text(text.replace("ttft_s = 2.0", "ttft_s = 3.0").replace("dt_s = 2.0", "dt_s = 3.0"))
    assert spec.read_text().count("3.0") == text.count("3.0") + 2
    Study.load(spec).run(trials=2, out=tmp_path / "runs").export(tmp_path / "exports")
    series = pl.read_parquet(tmp_path / "exports" / "sim_timeseries" / "study=tiny-study" / "part-0.parquet")
    steps = series.select(pl.col("t_s").diff().over("trial").drop_nulls().unique())
    assert series.height > 0 and steps["t_s"].to_list() == [9.0]
    row = next(
        line
        for line in (REPO / "docs" / "schema.md").read_text().splitlines()
        if line.startswith("| `sim_timeseries`")
    )
    assert "3 s: every 3rd step, 9 s" in row and "10-s sample" not in row


def _tables(tag: float) -> dict[str, pl.DataFrame]:
    return {name: pl.DataFrame({"study": ["s"], "trial": [1], "value": [tag]}) for name in TABLES}


def test_an_export_writes_its_temporary_files_outside_the_tables_folders_and_all_or_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The temporary file lay in the table's partition folder while it was written, and stayed
    there (for 10 minutes at least) after a kill: ``pl.read_parquet("exports/trials/")`` and
    DuckDB's ``exports/trials/**`` failed on it. An export failing at its third table had
    replaced the first two, so the tables disagreed."""
    out = tmp_path / "exports"
    export.export_all(_tables(1.0), out, "s", {})
    real = export.write_parquet
    seen: list[Path] = []

    def third_fails(df: pl.DataFrame, file: Path, meta: dict[str, str]) -> None:
        seen.append(Path(file))
        real(df, file, meta)
        assert pl.read_parquet(out / "trials/", hive_partitioning=True).height == 1  # a reader meanwhile
        rows = duckdb.sql(f"select count(*) from read_parquet('{out}/trials/**', hive_partitioning=true)")
        assert rows.fetchall() == [(1,)]
        if len(seen) == 3:
            raise RuntimeError("stopped")

    monkeypatch.setattr(export, "write_parquet", third_fails)
    with pytest.raises(RuntimeError, match="stopped"):
        export.export_all(_tables(2.0), out, "s", {})
    assert {p.parent for p in seen} == {out}
    for name in TABLES:
        assert pl.read_parquet(out / name / "study=s" / "part-0.parquet")["value"].to_list() == [1.0]
    assert not list(out.rglob("*.tmp")) and not [p for p in out.rglob(".*") if p.is_file()]
    monkeypatch.undo()
    export.export_all(_tables(2.0), out, "s", {})
    for name in TABLES:
        assert pl.read_parquet(out / name / "study=s" / "part-0.parquet")["value"].to_list() == [2.0]


def test_a_ctrl_c_among_the_renames_moves_every_table_or_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every table is written to a temporary file before any is renamed into place; a Ctrl-C (a
    real SIGINT, as the command line handles it) that came as the first was renamed had left that
    table new and the other four old. It now waits for the last rename, then stops the export."""
    import os
    import signal

    from dse import interrupt

    out = tmp_path / "exports"
    export.export_all(_tables(1.0), out, "s", {})
    real = os.replace
    renamed: list[str] = []

    def first_then_ctrl_c(src: Any, dst: Any) -> None:
        real(src, dst)
        renamed.append(str(dst))
        if len(renamed) == 1:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(os, "replace", first_then_ctrl_c)
    with interrupt.remembered(), pytest.raises(KeyboardInterrupt):
        export.export_all(_tables(2.0), out, "s", {})
    monkeypatch.undo()
    assert len(renamed) == len(TABLES), renamed
    for name in TABLES:
        assert pl.read_parquet(out / name / "study=s" / "part-0.parquet")["value"].to_list() == [2.0], name
    assert not list(out.rglob("*.tmp"))


def _schema_4_export(out: Path, study: str, tag: float) -> None:
    """``study``'s tables as an export before schema 5 wrote them: in ``study=<name>`` unescaped,
    by polars with the metadata in the file's key-value metadata (``git show bb69222^``)."""
    for name in TABLES:
        folder = out / name / f"study={study}"
        folder.mkdir(parents=True, exist_ok=True)
        meta = {
            "dse.engine_version": "0.1.0", "dse.schema_version": "4", "dse.table": name,
            "dse.study_spec": json.dumps({"name": study}),
        }  # fmt: skip
        table = pl.DataFrame({"trial": [1], "value": [tag]})
        table.write_parquet(folder / "part-0.parquet", compression="zstd", metadata=meta)


def _read_table(out: Path, table: str) -> pl.DataFrame:
    """Every study's rows of ``table`` under ``out``, as a reader of the table's folder sees them."""
    files = out / table / "*" / "*.parquet"
    return pl.read_parquet(files, hive_partitioning=True, hive_schema={"study": pl.String})


def test_a_reexport_leaves_one_partition_of_a_study_an_earlier_schema_named_otherwise(
    tmp_path: Path,
) -> None:
    """Before schema 5 a study's folder was ``study=<name>`` unescaped; today's escapes a '%'. A
    re-export had written ``study=50%25off`` beside the old ``study=50%off``, and a reader of the
    table's folder read the study's rows twice (4 trials of a study of 2). The old folder is
    removed once the new files are in place, where it holds dse's file of that study and table:
    not the folder of another study that takes the same name (``50%off``'s escaped folder is
    ``50%25off``'s unescaped one), nor a file dse did not write."""
    out = tmp_path / "exports"
    _schema_4_export(out, "50%off", 1.0)
    (out / "kv_tiers" / "study=50%off" / "notes.txt").write_text("mine")  # a user's, kept
    export.export_all(_tables(2.0), out, "50%off", {"name": "50%off"})
    for name in TABLES:
        hive = _read_table(out, name)
        assert hive["study"].to_list() == ["50%off"] and hive["value"].to_list() == [2.0], name
        kept = {p.name for p in (out / name).iterdir()}
        assert kept == ({"study=50%25off", "study=50%off"} if name == "kv_tiers" else {"study=50%25off"})
    assert [p.name for p in (out / "kv_tiers" / "study=50%off").iterdir()] == ["notes.txt"]

    # 50%25off's folder of old is 50%off's of today: a re-export of 50%25off leaves it alone
    _schema_4_export(out, "50%25off", 3.0)  # (it wrote over 50%off's files, as it did then)
    export.export_all(_tables(2.0), out, "50%off", {"name": "50%off"})
    export.export_all(_tables(4.0), out, "50%25off", {"name": "50%25off"})
    for name in TABLES:
        hive = _read_table(out, name)
        assert sorted(hive.select("study", "value").rows()) == [("50%25off", 4.0), ("50%off", 2.0)], name


def test_a_table_folder_on_another_file_system_is_written_there(tmp_path: Path) -> None:
    """A table's folder linked to another disk: its temporary file goes beside it, since a rename
    cannot cross file systems (it had failed with EXDEV, the tables before it already replaced)."""
    other = Path("/dev/shm")
    if not other.is_dir() or other.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second file system to link a table's folder to")
    out = tmp_path / "exports"
    out.mkdir()
    elsewhere = Path(tempfile.mkdtemp(dir=other))
    try:
        (out / "trials").symlink_to(elsewhere)
        export.export_all(_tables(3.0), out, "s", {})
        for name in TABLES:
            assert pl.read_parquet(out / name / "study=s" / "part-0.parquet")["value"].to_list() == [3.0]
        assert (elsewhere / "study=s" / "part-0.parquet").is_file()
        assert not [p for p in (*out.rglob(".*"), *elsewhere.rglob(".*")) if p.is_file()]
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)


def _documented_columns() -> dict[str, set[str]]:
    """Each table's columns as docs/schema.md's table lists them (:func:`_documented_order`)."""
    return {table: set(names) for table, names in _documented_order().items()}


def _documented_order() -> dict[str, list[str]]:
    """Each table's columns in the order docs/schema.md's table lists them: the names in
    backticks outside parentheses (which hold values and notes: a pool's ``role``), ``{a,b}``
    expanded, the patterns ``x_<axis>`` and ``objective_<name>`` left aside."""
    cells = {}
    for line in (REPO / "docs" / "schema.md").read_text().splitlines():
        m = re.match(r"^\| `(\w+)` \| .*? \| (.*) \|$", line)
        if m and m.group(1) in TABLES:
            cells[m.group(1)] = m.group(2)
    out = {}
    for table, cell in cells.items():
        names: list[str] = []
        for n in re.findall(r"`([^`]+)`", _outside_parentheses(cell)):
            brace = re.fullmatch(r"(\w*)\{([\w,]+)\}(\w*)", n)
            if brace:
                names += [brace.group(1) + x + brace.group(3) for x in brace.group(2).split(",")]
            elif re.fullmatch(r"[a-z_0-9]+", n):
                names.append(n)
        out[table] = names
    out["pareto"] = out["trials"]  # "as trials"
    return out


def _outside_parentheses(text: str) -> str:
    out, depth = [], 0
    for ch in text:
        depth += ch == "("
        if depth == 0:
            out.append(ch)
        depth -= ch == ")" and depth > 0
    return "".join(out)


@pytest.fixture(scope="module")
def two_exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny study's exports, and those of its copy that no design fits (budget $0.001/hour)."""
    root = tmp_path_factory.mktemp("bi")
    spec = root / "tiny-study.toml"
    spec.write_text(TINY.read_text() + "\n[limits]\nbudget_usd_hour = 0.001\n")
    out = {}
    for label, path in (("feasible", TINY), ("none", spec)):
        res = Study.load(path).run(trials=6, out=root / label)
        assert res.trials["feasible"].any() == (label == "feasible")
        res.export(root / label / "exports")
        out[label] = root / label / "exports"
    return out


def test_exports_hold_the_documented_columns_with_the_same_types_feasible_or_not(
    two_exports: dict[str, Path],
) -> None:
    documented = _documented_columns()
    for table in TABLES:
        schemas = {}
        for label, folder in two_exports.items():
            path = folder / table / "study=tiny-study" / "part-0.parquet"
            schemas[label] = pl.read_parquet_schema(path)
            cols = {c for c in schemas[label] if not c.startswith("objective_")}
            assert cols == documented[table], (table, label, cols ^ documented[table])
            df = pl.read_parquet(path)
            for c, t in df.schema.items():
                if t.is_float():
                    assert not df[c].is_nan().any(), (table, c)
        assert schemas["feasible"] == schemas["none"], table
    trials = pl.read_parquet(two_exports["feasible"] / "trials" / "study=tiny-study" / "part-0.parquet")
    assert trials.schema["started_utc"] == pl.Datetime("us", "UTC") and trials.schema["gpus"] == pl.Int64


def test_the_schema_page_lists_the_columns_of_the_fixed_tables_in_their_files_order(
    two_exports: dict[str, Path],
) -> None:
    """docs/schema.md listed ``trial`` first in ``sim_timeseries``, whose files have it last (the
    page's prose said so, its table did not). The files keep their order (a reader of an earlier
    export, and benchmarks/same_exports.py comparing a run of this dse with one of an earlier,
    read the columns in it); the page lists each table's columns in it, for the tables whose
    columns do not vary with the study (``trials`` and ``pareto`` add ``x_<axis>`` and
    ``objective_<name>``)."""
    documented = _documented_order()
    for table in ("placements", "kv_tiers", "sim_timeseries"):
        for label, folder in two_exports.items():
            path = folder / table / "study=tiny-study" / "part-0.parquet"
            assert pl.read_parquet_schema(path).names() == documented[table], (table, label)
    assert documented["sim_timeseries"][-1] == "trial" and documented["placements"][0] == "trial"
    # what the page says stored_gb is: the flow resting there, none in drop (recomputed)
    kv = pl.read_parquet(two_exports["feasible"] / "kv_tiers" / "study=tiny-study" / "part-0.parquet")
    flow = pl.col("returning_per_s") * pl.col("dwell_s") * pl.col("gb_per_session") * pl.col("share")
    kept, dropped = kv.filter(pl.col("tier") != "drop"), kv.filter(pl.col("tier") == "drop")
    assert kept.height > 0 and (kept["stored_gb"] - kept.select(flow).to_series()).abs().max() < 1e-6
    assert (dropped["stored_gb"] == 0).all() and kv["share"].sum() > 0


def test_every_reader_shows_the_files_metadata_and_the_schema_page_its_version(
    two_exports: dict[str, Path],
) -> None:
    """pyarrow (``pq.read_schema``, a table it read, ``pyarrow.dataset``) showed no ``dse.*`` key:
    polars' writer left them out of the Arrow schema it stores in the file, from which pyarrow
    takes a schema's metadata. And docs/schema.md's title said schema version 4 of files that
    say 5."""
    folder = two_exports["feasible"]
    for table in TABLES:
        path = folder / table / "study=tiny-study" / "part-0.parquet"
        want = {"dse.schema_version": str(SCHEMA_VERSION), "dse.table": table}
        dataset = ds.dataset(folder / table, format="parquet", partitioning="hive")
        seen = {
            "pyarrow schema": pq.read_schema(path).metadata,
            "pyarrow table": pq.read_table(path).schema.metadata,
            "pyarrow dataset": dataset.schema.metadata,
            "parquet footer": pq.read_metadata(path).metadata,
            "polars": pl.read_parquet_metadata(path),
            "duckdb": dict(duckdb.sql(f"select key, value from parquet_kv_metadata('{path}')").fetchall()),
        }
        for reader, meta in seen.items():
            got = {
                (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                for k, v in (meta or {}).items()
            }
            assert want.items() <= got.items(), (table, reader, sorted(got))
            assert json.loads(got["dse.study_spec"])["name"] == "tiny-study", (table, reader)
        # the types as before the writer changed: polars and DuckDB read them alike
        assert pl.read_parquet(path).schema == pl.read_parquet_schema(path)
    title = (REPO / "docs" / "schema.md").read_text().splitlines()[0]
    assert title == f"# Parquet exports (schema version {SCHEMA_VERSION})", title
    history = re.search(r"^- \*\*(\d+)\*\* ", (REPO / "docs" / "schema.md").read_text(), re.M)
    assert history is not None and int(history.group(1)) == SCHEMA_VERSION


def test_studies_exported_into_one_folder_read_together_as_the_schema_page_says(
    tmp_path: Path, two_exports: dict[str, Path]
) -> None:
    """Two studies' ``trials`` differ in their ``objective_<name>`` and ``x_<axis>`` columns:
    read with a reader's defaults, DuckDB failed on them, polars too, and pyarrow's dataset (and
    pandas') dropped the columns its first file lacked, silently. docs/schema.md ("Reading several
    studies together") gives each reader's way; here each reads every study's rows and values as
    its own file holds them, and nulls where a study has no such column."""
    out = tmp_path / "exports"
    shutil.copytree(two_exports["feasible"], out)  # tiny-study: objective_usd_per_million_tokens
    other = tmp_path / "tiny-other.toml"
    other.write_text(
        TINY.read_text()
        .replace('name = "tiny-study"', 'name = "tiny-other"')
        .replace("percentile = 90.0", "percentile = 99.0")
        + '\n[objectives]\nnames = ["gpus", "tokens_per_s_per_gpu"]\n'
    )
    Study.load(other).run(trials=3, out=tmp_path / "runs").export(out)
    Study.load(GRID).run(trials=2, out=tmp_path / "runs").export(out)  # x_input_tokens, x_hardware
    own = {
        s: pl.read_parquet(out / "trials" / f"study={s}" / "part-0.parquet")
        for s in ("tiny-study", "tiny-other", "tiny-grid")
    }
    pattern = str(out / "trials" / "*" / "*.parquet")
    files = sorted(str(p) for p in out.glob("trials/*/*.parquet"))
    study = ds.partitioning(pa.schema([("study", pa.string())]), flavor="hive")
    schema = pa.unify_schemas([pq.read_schema(f) for f in files] + [study.schema])
    united = ds.dataset(files, format="parquet", partitioning=study, schema=schema)
    each = [pl.read_parquet(f, hive_partitioning=True) for f in files]
    read = {
        "duckdb": duckdb.sql(
            f"select * from read_parquet('{pattern}', hive_partitioning = true, union_by_name = true)"
        ).pl(),
        "polars": pl.concat(each, how="diagonal_relaxed"),
        "pyarrow": pl.from_arrow(united.to_table()),
    }
    for reader, df in read.items():
        assert isinstance(df, pl.DataFrame) and df.schema["study"] == pl.String, reader
        for name, mine in own.items():
            rows = df.filter(pl.col("study") == name).sort("trial")
            assert rows.height == mine.height > 0, (reader, name)
            for c in mine.columns:
                assert rows[c].to_list() == mine[c].to_list(), (reader, name, c)
            for c in set(df.columns) - set(mine.columns) - {"study"}:
                assert rows[c].null_count() == rows.height, (reader, name, c)
    # each row says the percentile its TTFT columns are taken at, its own study's
    at = {name: set(mine["slo_percentile"].to_list()) for name, mine in own.items()}
    assert at == {"tiny-study": {90.0}, "tiny-other": {99.0}, "tiny-grid": {90.0}}
    differing = {"objective_gpus", "objective_usd_per_million_tokens", "x_input_tokens"}
    assert differing <= set(read["duckdb"].columns)
    # the defaults the page warns of
    with pytest.raises(duckdb.Error, match="union_by_name"):
        duckdb.sql(f"select * from read_parquet('{pattern}', hive_partitioning = true)").fetchall()
    first_files = ds.dataset(out / "trials", format="parquet", partitioning="hive")
    assert not differing <= set(first_files.schema.names)


def test_the_public_api_says_what_it_does() -> None:
    """``help(Study)`` showed the dataclass's signature alone, and ``Study.load``, ``trials``,
    ``pareto``, ``placements``, ``kv_tiers`` and ``tables`` had no docstring."""
    for cls in (Study, StudyResults):
        assert cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("), cls
        for name, member in vars(cls).items():  # methods, properties, cached properties
            public = not name.startswith("_") and (callable(member) or hasattr(member, "__get__"))
            if public and not isinstance(member, (str, int, float, tuple, type(None))):
                assert getattr(member, "__doc__", None), f"{cls.__name__}.{name}"


def test_the_api_module_points_at_the_readme_s_example_and_keeps_none_of_its_own() -> None:
    """Its own example had used ``Path`` without importing it (a NameError as written), and no
    test ran it: the module now points at the README's "Python" section, whose example
    ``tests/test_docs_examples.py`` runs as shown."""
    doc = api.__doc__ or ""
    assert "```python" not in doc and 'README\'s "Python" section' in doc
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    assert "```python" in section and "Study.load(" in section
