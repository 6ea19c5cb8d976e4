"""Every shipped study runs end to end on a reduced budget: trials, exports, report."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from dse.cli.study_cmd import _write_all
from dse.study import Study
from dse.study.spec import study_files

pytestmark = pytest.mark.e2e  # whole studies


@pytest.mark.parametrize("name", sorted(study_files()))
def test_shipped_study_runs_on_a_reduced_budget(name: str, tmp_path: Path) -> None:
    res = Study.load(name).run(trials=8, out=tmp_path)
    assert res.trials.height == 8
    assert set(res.trials["p_topology"].drop_nulls().unique().to_list()) <= set(res.spec.search.topologies)
    _write_all(res, tmp_path)
    folder = tmp_path / name
    trials = pl.read_parquet(folder / "exports" / "trials" / f"study={name}" / "part-0.parquet")
    assert trials.height == 8
    report = (folder / "report" / "report.md").read_text()
    assert f"# Study report: {name}" in report
