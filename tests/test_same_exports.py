"""benchmarks/same_exports.py, the check that a speed change keeps every exported record: two run
folders' Parquet files compared with polars ``equals``, the wall-clock columns alone left out."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import polars as pl

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "same_exports.py"


def _module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("same_exports", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(folder: Path, cost: float, seconds: float, report: str) -> Path:
    part = folder / "s" / "exports" / "trials" / "study=s"
    part.mkdir(parents=True)
    pl.DataFrame({"trial": [0, 1], "usd": [0.5, cost], "milp_solve_s": [0.001, seconds]}).write_parquet(
        part / "part-0.parquet"
    )
    (folder / "s" / "report").mkdir()
    (folder / "s" / "report" / "report.md").write_text(f"| milp_solve_s | {seconds} |\n{report}\n")
    return folder


def test_runs_differing_only_in_their_clocks_are_the_same(tmp_path: Path) -> None:
    same = _module()
    a = _run(tmp_path / "a", 0.25, 0.002, "best: trial 1")
    assert same.differences(a, _run(tmp_path / "b", 0.25, 0.009, "best: trial 1")) == []
    assert same.main(str(a), str(tmp_path / "b")) == 0


def test_a_changed_value_row_or_report_line_is_named(tmp_path: Path) -> None:
    same = _module()
    a = _run(tmp_path / "a", 0.25, 0.002, "best: trial 1")
    value = same.differences(a, _run(tmp_path / "b", 0.25000000000000006, 0.002, "best: trial 1"))
    assert value == ["s/exports/trials/study=s/part-0.parquet: column usd differs in 1 rows, first row 1"]
    report = same.differences(a, _run(tmp_path / "c", 0.25, 0.002, "best: trial 0"))
    assert report == ["s/report/report.md: differs (line 1 of those compared)"]
    assert same.main(str(a), str(tmp_path / "c")) == 1
    empty = tmp_path / "empty"
    assert same.differences(empty, empty) == [f"{empty}: no Parquet file"]
