"""Every shipped study runs end to end on a reduced budget: trials, exports, report; and gives the
trials and best design frozen in ``tests/data/golden_studies.json``.

The golden file pins what a study answers, so a change to the middle of the house (how a trial is
evaluated, stored and exported) can be checked to answer the same. Regenerate it, only for a change
meant to move the answers, with ``DSE_WRITE_GOLDEN=1 pytest tests/test_shipped_studies.py`` and
say why in the commit.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from dse.cli.study_cmd import _write_all
from dse.study import Study, StudyResults
from dse.study.spec import study_files

pytestmark = pytest.mark.e2e  # whole studies

GOLDEN = Path(__file__).resolve().parent / "data" / "golden_studies.json"
TRIALS = 8
METRICS = ("usd_per_million_tokens", "gpus", "tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_pct_s",
           "tpot_mean_s", "hbm_peak_gb_per_gpu")  # fmt: skip
REL = 1e-6  # the same arithmetic in another order may move the last digits


def answers(res: StudyResults) -> dict[str, Any]:
    """What a study run answers: each trial's choices, feasibility, binding family and headline
    metrics; the best trial and its pools."""
    t = res.trials.sort("trial")
    choices = [c for c in t.columns if c.startswith(("p_", "x_"))]
    trials = [
        {
            "trial": r["trial"],
            "choice": {c: r[c] for c in choices},
            "feasible": r["feasible"],
            "binding": (r["binding"] or "").split(":")[0],
            "metrics": {m: r.get(m) for m in METRICS},
            "objectives": [r.get(o.name) for o in res.objectives],
        }
        for r in t.iter_rows(named=True)
    ]
    best = res.best_trial()
    pools = (
        res.placements.filter(pl.col("trial") == best)
        .select("role", "hardware", "shape", "instances", "gpus")
        .rows(named=True)
        if best is not None and "trial" in res.placements.columns
        else []
    )
    return {"trials": trials, "best": best, "best_pools": pools}


def same(got: Any, want: Any, where: str = "") -> list[str]:
    """Where ``got`` differs from ``want`` (numbers within :data:`REL`)."""
    if isinstance(want, dict) and isinstance(got, dict):
        if set(got) != set(want):
            return [f"{where}: keys {sorted(set(got) ^ set(want))}"]
        return [d for k in want for d in same(got[k], want[k], f"{where}.{k}")]
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return [f"{where}: {len(got)} items, not {len(want)}"]
        return [
            d for i, (g, w) in enumerate(zip(got, want, strict=True)) for d in same(g, w, f"{where}[{i}]")
        ]
    if isinstance(want, float) and isinstance(got, int | float) and not isinstance(got, bool):
        if math.isnan(want) and math.isnan(got) or math.isclose(got, want, rel_tol=REL, abs_tol=1e-12):
            return []
    elif got == want:
        return []
    return [f"{where}: {got!r}, not {want!r}"]


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


@pytest.mark.parametrize("name", sorted(study_files()))
def test_shipped_study_runs_on_a_reduced_budget(name: str, tmp_path: Path, golden: dict[str, Any]) -> None:
    res = Study.load(name).run(trials=TRIALS, out=tmp_path)
    assert res.trials.height == TRIALS
    assert set(res.trials["p_topology"].drop_nulls().unique().to_list()) <= set(res.spec.search.topologies)
    got = answers(res)
    if os.environ.get("DSE_WRITE_GOLDEN") == "1":
        data = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        data[name] = json.loads(json.dumps(got, default=str))
        GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    else:
        assert name in golden, f"{name} has no golden answers: DSE_WRITE_GOLDEN=1 writes them"
        assert same(json.loads(json.dumps(got, default=str)), golden[name], name) == []
    _write_all(res, tmp_path)
    folder = tmp_path / name
    trials = pl.read_parquet(folder / "exports" / "trials" / f"study={name}" / "part-0.parquet")
    assert trials.height == TRIALS
    report = (folder / "report" / "report.md").read_text()
    assert f"# Study report: {name}" in report
