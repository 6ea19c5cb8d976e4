"""One metric registry (dse.metrics): what an evaluation records, the trials table's columns and
the schema page all derive from it, so a metric cannot be in one list and missing from another."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import Cli

from dse.errors import InputError
from dse.metrics import CONSTRAINTS, METRIC_COLUMNS, METRICS, OBJECTIVES, markdown_table
from dse.study import Study

REPO = Path(__file__).resolve().parents[1]
TINY = Path(__file__).resolve().parent / "data" / "tiny-study.toml"


def test_the_schema_page_shows_the_registry() -> None:
    page = (REPO / "docs" / "schema.md").read_text()
    block = page.split("<!-- metrics:begin -->\n", 1)[1].split("\n<!-- metrics:end -->", 1)[0]
    assert block == markdown_table(), "docs/schema.md: paste dse.metrics.markdown_table() between the markers"


def test_the_schema_table_names_each_columns_objective() -> None:
    """A column exported under another name than its metric's (``tpot_mean_s``) shows the
    objective that names it, with its direction; a metric without one is recorded only."""
    rows = {r.split("|")[1].strip(" `"): r.split("|")[2].strip() for r in markdown_table().splitlines()[2:]}
    assert rows["tpot_mean_s"] == "`tpot_s` (minimize)"
    assert rows["tokens_per_s_per_user"] == "`tokens_per_s_per_user` (maximize)"
    # a recorded-only metric exported under another name: the name an objective function reads it by
    assert rows["decode_batch_sequences"] == 'recorded only (`m["decode_batch"]`)' and rows["c_gpus"] == ""
    assert rows["milp_solve_s"] == "recorded only"
    assert {r.split("`")[1] for r in rows.values() if r.startswith("`")} == set(OBJECTIVES)


def test_an_objective_named_by_its_exported_column_is_told_its_name(tmp_path: Path, cli: Cli) -> None:
    """One name per objective, the metric's: the loader says which one an exported column is."""
    spec = tmp_path / "tiny-study.toml"
    text = TINY.read_text()
    for name, rule in [
        ("tpot_mean_s", "'tpot_mean_s' is the exported column of objective 'tpot_s': name the objective"),
        (
            "decode_batch_sequences",
            "'decode_batch_sequences' is the exported column of metric "
            "'decode_batch', recorded only (no direction)",
        ),
        ("decode_batch", "is recorded only (no direction); must be a metric with a direction: e2e_s, gpus"),
        ("nope", "must be a metric with a direction: e2e_s, gpus"),
    ]:
        spec.write_text(text + f'\n[objectives]\nnames = ["{name}"]\n')
        out = cli("study", "show", spec)
        assert out.code == 2 and len(out.err.strip().splitlines()) == 1, out.err
        assert f"tiny-study.toml: objectives.names = '{name}': {rule}" in out.err, out.err
    with pytest.raises(InputError, match="'ttft_mean_s' is the exported column of objective 'ttft_s'"):
        Study.load(TINY).with_objective("ttft_mean_s")


def test_a_trial_records_registered_metrics_and_constraints_and_exports_their_columns(tmp_path: Path) -> None:
    res = Study.load(TINY).run(trials=8, out=tmp_path)
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
    for name, value in placed[0]["metrics"].items():
        if value is not None:  # a swing of the signal not judged is null
            assert trials[METRIC_COLUMNS[name]].drop_nulls().len() > 0, name
    # each placed trial's swing in the one column of its signal's unit, the other null
    swings = trials.filter(pl.col("usd_per_hour").is_not_null())
    both = swings["swing_prefill_servers"].is_null() ^ swings["swing_prefill_queue_requests"].is_null()
    assert both.all() and "oscillation_amplitude" not in trials.columns
    # counts are integers in the file (a BI tool sums GPUs, it does not round them), the rest floats
    types = pq.read_schema(tmp_path / "exports" / "trials" / "study=tiny-study" / "part-0.parquet")
    for name, metric in METRICS.items():
        want = pa.int64() if metric.whole else pa.float64()
        assert types.field(METRIC_COLUMNS[name]).type == want, name
    whole = {"gpus", "planner_moves", "milp_resolves", "milp_topology_rank"}
    assert {n for n, m in METRICS.items() if m.whole} == whole
    assert trials["gpus"].drop_nulls().to_list() == [int(r["metrics"]["gpus"]) for r in placed]
    assert types.field("design_trials").type == pa.int64()
    series = pq.read_schema(tmp_path / "exports" / "sim_timeseries" / "study=tiny-study" / "part-0.parquet")
    assert "prefill_servers" in series.names and "prefill_instances" not in series.names  # what it holds
    # a choice the trial's topology does not make, and the binding constraint of a feasible trial,
    # are null (an analyst's average of prefill shares is not pulled toward 0)
    agg = trials["p_topology"] == "aggregated"
    assert trials.filter(agg)["p_prefill_share"].null_count() == 0
    assert trials.filter(~agg)["p_prefill_share"].null_count() == trials.filter(~agg).height
    assert trials["p_ffn_tokens_per_gpu"].null_count() == trials.height  # no attention-FFN trial
    assert (trials["binding"].is_null() == trials["feasible"]).all()


def test_a_run_stores_its_best_designs_shadow_prices_for_the_report(tmp_path: Path) -> None:
    """The report's shadow prices are the ones the run stored for its best trial (computed once,
    when the run ends), equal to a fresh solve of that trial's placement."""
    from dse.context import Context
    from dse.perf.params import load_params
    from dse.placement.plan import place_best
    from dse.placement.request import Topology
    from dse.study.best import PRICES_ATTR, best_design
    from dse.study.choice import choice_from_params
    from dse.study.runner import TRIAL_SOLVE
    from dse.study.trial import request_for
    from formulations.solve import PlacementSolver

    res = Study.load(TINY).run(trials=6, out=tmp_path)
    best = res.best_trial()
    assert best is not None
    stored = res.study.user_attrs[PRICES_ATTR]
    assert stored["trial"] == best and stored["prices"]
    trial = next(t for t in res.study.get_trials() if t.number == best)
    choice = choice_from_params(trial.params)
    ctx = Context(res._cat(), load_params(), PlacementSolver(TRIAL_SOLVE))
    fresh = place_best(request_for(res.spec, choice, ctx.catalog), [Topology(choice.topology)], ctx)
    assert [p["usd_per_hour"] for p in stored["prices"]] == [p.usd_per_hour for p in fresh.shadow_prices]
    design = best_design(Study.load(TINY).results(out=tmp_path))
    assert design is not None and design.trial == best and design.shadow_prices == stored["prices"]
    assert design.stage_ms and design.sim["stable"] in (True, False)


def test_checks_a_trial_stopped_before_are_null_not_met() -> None:
    """No placement (or over the wall clock): the latency and stability checks never ran; 0 would
    read as "exactly at the target"."""
    from dse.study.results import _constraints

    none = _constraints({"placement": 1.0})
    assert none["c_placement"] == 1.0 and none["c_ttft_s"] is None and none["c_stability"] is None
    placed = _constraints({"placement": 0.0, "ttft_s": -1.0, "tpot_s": -0.01, "stability": 0.0})
    assert placed["c_ttft_s"] == -1.0 and placed["c_gpus"] == 0.0 and placed["c_wall_clock"] == 0.0


def test_the_schema_page_names_the_columns_a_design_groups_within_3_percent() -> None:
    """docs/schema.md's ``design`` column lists the metrics compared within 3% rather than 0.1%:
    the ones dse.study.results compares so (``engine_*``: every engine-level column)."""
    import re

    from dse.study.results import SAMPLED_COLUMNS, SAMPLED_RTOL

    page = (REPO / "docs" / "schema.md").read_text()
    said = page.split("within 0.1% of that first trial's (", 1)[1].split("; in trial order", 1)[0]
    assert said.startswith(f"{SAMPLED_RTOL:.0%} for "), said
    names = set(re.findall(r"`([a-z0-9_*]+)`", said))
    engine = {c for c in METRIC_COLUMNS.values() if c.startswith("engine_")}
    listed = (names - {"engine_*"}) | (engine if "engine_*" in names else set())
    assert listed == set(SAMPLED_COLUMNS)
    from dse.study.results import QUEUE_COLUMNS

    queues = page.split("; in trial order a trial joins the first design it matches; ", 1)[1].split(")", 1)[0]
    assert set(re.findall(r"`([a-z0-9_]+)`", queues)) == set(QUEUE_COLUMNS), queues


def test_a_trial_recorded_before_the_swings_were_split_exports_what_it_can_tell() -> None:
    """A study stored before schema 6 recorded one `oscillation_amplitude`, in prefill servers
    where the planner had moved them after the warm-up, else in prefill-queue requests: read again,
    it is the queue's where the planner moved no instance in the run, else unknown (null in both),
    never a number in a column of the wrong unit."""
    from dse.study.results import recorded_metrics

    still = recorded_metrics({"oscillation_amplitude": 2.5, "planner_moves": 0.0, "gpus": 8.0})
    assert still == {"planner_moves": 0.0, "gpus": 8.0, "swing_prefill_servers": None,
                     "swing_prefill_queue_requests": 2.5}  # fmt: skip
    moved = recorded_metrics({"oscillation_amplitude": 3.0, "planner_moves": 4.0})
    assert moved["swing_prefill_servers"] is None and moved["swing_prefill_queue_requests"] is None
    now = {"swing_prefill_servers": None, "swing_prefill_queue_requests": 1.0}
    assert recorded_metrics(now) is now


def test_a_split_decode_trials_batch_cap_is_its_attention_instances(tmp_path: Path) -> None:
    """``decode_batch_sequences`` of an attention-FFN trial was the largest batch of any pool, so
    the FFN unit's (the tokens one expert step takes from every attention instance): 4,096 for a
    trial whose attention instances run 1,404 (kimi-k3-blackwell, trial 17 of 40), in the trials
    export, the run's summary and the report's "decode batch cap". It is the attention
    instances' cap, as the placements table has it."""
    text = (REPO / "studies" / "kimi-k3-blackwell.toml").read_text()
    for old, new in [
        ('name = "kimi-k3-blackwell"', 'name = "afd-batch"'),
        ('topologies = ["aggregated", "disaggregated", "afd"]', 'topologies = ["afd"]'),
        ("[search.aggregated]\nprefill_share = [0.05, 0.5]\n", ""),  # no aggregated designs
        ('sampler = "nsga2"\npopulation = 60\n', ""),
        ("horizon_s = 1200.0\nwarmup_s = 300.0", "horizon_s = 600.0\nwarmup_s = 120.0"),
    ]:
        assert old in text, old
        text = text.replace(old, new)
    (tmp_path / "afd-batch.toml").write_text(text)
    res = Study.load(tmp_path / "afd-batch.toml").run(trials=12, out=tmp_path / "runs")
    batch = "decode_batch_sequences"
    pools = res.placements.pivot(on="role", index="trial", values=batch, aggregate_function="max")
    both = res.trials.join(pools, on="trial").filter(pl.col("decode_batch_sequences").is_not_null())
    assert both.height > 0 and (both["decode_batch_sequences"] == both["attention"]).all()
    assert (both["ffn"] != both["attention"]).any()  # else the test could not tell the two apart


def test_every_latency_metric_says_its_statistic() -> None:
    """Every TTFT, TPOT or end-to-end metric carries the statistic its labels say (a mean, p99,
    or the study's percentile), so that no report column or axis shows one bare: ``ttft_pct_s``
    had been labelled "ttft_pct_s (s)" in a study at p99 as at p50."""
    from dse.metrics import statistic, unit_label

    latencies = [n for n in METRICS if any(k in n for k in ("ttft", "tpot", "e2e"))]
    assert len(latencies) == 8 and all(METRICS[n].stat for n in latencies)
    assert [statistic(n, 99.0) for n in ("ttft_pct_s", "tpot_mean_s", "e2e_s", "engine_tpot_pct_s")] == [
        "TTFT p99", "TPOT mean", "E2E mean", "TPOT p99",
    ]  # fmt: skip
    assert statistic("ttft_pct_s", 50.0) == "TTFT p50" and statistic("gpus", 50.0) == ""
    # a label adds the statistic where the name does not say it, then the unit
    assert unit_label("ttft_pct_s", 99.9) == " (TTFT p99.9, s)"
    assert unit_label("tpot_s", 90.0) == " (TPOT mean, s)"
    assert unit_label("ttft_p99_s", 90.0) == unit_label("tpot_mean_s", 90.0) == " (s)"
    assert unit_label("usd_per_million_tokens", 90.0) == " ($/M tokens)" and unit_label("nope", 90.0) == ""
