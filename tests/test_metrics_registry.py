"""One metric registry (dse.metrics): what an evaluation records, the trials table's columns and
the schema page all derive from it, so a metric cannot be in one list and missing from another."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from dse.metrics import CONSTRAINTS, METRIC_COLUMNS, METRICS, markdown_table
from dse.study import Study

REPO = Path(__file__).resolve().parents[1]
TINY = Path(__file__).resolve().parent / "data" / "tiny-study.toml"


def test_the_schema_page_shows_the_registry() -> None:
    page = (REPO / "docs" / "schema.md").read_text()
    block = page.split("<!-- metrics:begin -->\n", 1)[1].split("\n<!-- metrics:end -->", 1)[0]
    assert block == markdown_table(), "docs/schema.md: paste dse.metrics.markdown_table() between the markers"


def test_a_trial_records_registered_metrics_and_constraints_and_exports_their_columns(tmp_path: Path) -> None:
    res = Study.load(TINY).run(trials=4, out=tmp_path)
    records = [t.user_attrs["record"] for t in res.study.get_trials()]
    placed = [r for r in records if "usd_per_hour" in r["metrics"]]
    assert placed, "no trial placed a design"
    for r in records:
        assert set(r["metrics"]) <= set(METRICS), set(r["metrics"]) - set(METRICS)
        assert set(r["constraints"]) <= set(CONSTRAINTS)
    res.export(tmp_path / "exports")
    trials = pl.read_parquet(tmp_path / "exports" / "trials" / "study=tiny-study" / "part-0.parquet")
    assert set(METRIC_COLUMNS.values()) <= set(trials.columns)
    assert {f"c_{c}" for c in CONSTRAINTS} <= set(trials.columns)
    for name in placed[0]["metrics"]:
        assert trials[METRIC_COLUMNS[name]].drop_nulls().len() > 0, name
