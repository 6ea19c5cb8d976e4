"""The study report: Markdown sections from small hand-made tables, PNGs, and the empty study."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from dse.catalog import load_catalog
from dse.study.markdown import fmt
from dse.study.report import BestDesign, below_share, write_report
from dse.study.results import distinct_designs, pareto_frame, speed_front, with_designs
from dse.study.spec import StudySpec, load_study

PNG = b"\x89PNG\r\n\x1a\n"
OBJECTIVES = [("usd_per_million_tokens", "minimize")]
LONG_BINDING = "placement: HBM of the decode pool needs 182.5 GB per GPU of 180 " + "x" * 60  # numbers
SECTIONS = (
    "# Study report: deepseek-v3-blackwell",
    "## Best designs",
    "## Pareto front",
    "## Binding constraints",
    "## Best design detail",
    "## Peak HBM residency",
    "## Figures",
)


@pytest.fixture(scope="module")
def spec() -> StudySpec:
    return load_study("deepseek-v3-blackwell")


def _trials() -> pl.DataFrame:
    """Six trials: 0, 1, 2 feasible (peak HBM 70, 90, 75 GB: two of three below 80), 3 and 4
    infeasible on TTFT, 5 infeasible in placement. Trial 2 is the cheapest."""
    cost = [1.20, 0.95, 0.80, None, None, None]
    return pl.DataFrame(
        {
            "study": ["s"] * 6,
            "trial": [0, 1, 2, 3, 4, 5],
            "p_topology": [
                "aggregated",
                "disaggregated",
                "disaggregated",
                "aggregated",
                "disaggregated",
                "aggregated",
            ],
            "p_kv_policy": ["tiered"] * 6,
            "p_max_batch": [512, 256, 1024, 512, 512, 512],
            "decode_batch_sequences": [512.0, 256.0, 700.0, 512.0, 512.0, None],
            "p_prefill_hardware": ["b200", "h200-sxm", "b200", "b200", "b200", "h200-sxm"],
            "p_prefill_shape": [
                "8gpu-dpa-ep8",
                "8gpu-tp8-ep8",
                "8gpu-tp8-ep8",
                "16gpu-dpa-ep16",
                "8gpu-tp8-ep8",
                "8gpu-dpa-ep8",
            ],
            "p_decode_hardware": ["b200", "gb200-nvl72", "gb200-nvl72", "b200", "b200", "h200-sxm"],
            "p_decode_shape": [
                "8gpu-dpa-ep8",
                "32gpu-dpa-ep32",
                "64gpu-dpa-ep64",
                "16gpu-dpa-ep16",
                "8gpu-dpa-ep8",
                "8gpu-dpa-ep8",
            ],
            "usd_per_million_tokens": cost,
            "gpus": [64.0, 88.0, 72.0, None, None, None],
            "tokens_per_s_per_gpu": [2375.0, 1727.0, 2111.0, None, None, None],
            "tokens_per_s_per_user": [31.0, 45.0, 38.0, None, None, None],
            "ttft_mean_s": [0.6, 0.4, 0.5, 3.1, 2.8, None],
            "ttft_pct_s": [1.4, 0.9, 1.1, 7.0, 6.4, None],
            "tpot_mean_s": [0.032, 0.022, 0.026, 0.03, 0.04, None],
            "hbm_peak_gb_per_gpu": [70.0, 90.0, 75.0, 60.0, 65.0, None],
            "feasible": [True, True, True, False, False, False],
            "binding": ["", "", "", LONG_BINDING, "ttft_s", LONG_BINDING.replace("182.5", "191.25")],
            "objective_usd_per_million_tokens": [c if c is not None else 1e12 for c in cost],
        }
    )


def _tables() -> dict[str, pl.DataFrame]:
    trials = _trials()
    pareto = trials.filter(pl.col("trial").is_in([2, 1])).sort("objective_usd_per_million_tokens")
    t = np.arange(50) * 10.0
    sim = pl.DataFrame(
        {
            "trial": [0] * 5 + [2] * 50,  # trial 0 first: the best trial must still be chosen
            "t_s": np.concatenate([t[:5], t]),
            "arrival_rate_per_s": np.full(55, 40.0),
            "prefill_queue_requests": np.concatenate([np.zeros(5), 5.0 * np.exp(-t / 100.0)]),
            "buffer_requests": np.ones(55),
            "decode_batch_per_instance": np.concatenate([np.zeros(5), 300.0 * (1 - np.exp(-t / 60.0))]),
            "prefill_instances": np.full(55, 2.0),
            "decode_instances": np.full(55, 1.0),
            "completions_per_s": np.concatenate([np.zeros(5), 40.0 * (1 - np.exp(-t / 60.0))]),
            "kv_active_gb": np.full(55, 500.0),
            "resting_kv_hbm_gb": np.zeros(55),
            "resting_kv_dram_gb": np.full(55, 100.0),
            "resting_kv_nvme_gb": np.zeros(55),
            "resting_kv_network_gb": np.zeros(55),
        }
    )
    return {
        "trials": trials,
        "pareto": pareto,
        "placements": pl.DataFrame(),
        "kv_tiers": pl.DataFrame(),
        "sim_timeseries": sim,
    }


def _best() -> BestDesign:
    pools = [
        {
            "role": "prefill",
            "hardware": "b200",
            "shape": "8gpu-tp8-ep8",
            "instances": 1,
            "gpus": 8,
            "decode_batch": 0.0,
            "prefill_share": 0.0,
            "hbm_gb_per_gpu": 75.0,
            "usd_per_hour": 40.0,
        },
        {
            "role": "decode",
            "hardware": "gb200-nvl72",
            "shape": "64gpu-dpa-ep64",
            "instances": 1,
            "gpus": 64,
            "decode_batch": 2048.0,
            "prefill_share": 0.0,
            "hbm_gb_per_gpu": 61.5,
            "usd_per_hour": 390.0,
        },
    ]
    return BestDesign(
        trial=2,
        pools=pools,
        metrics={
            "usd_per_million_tokens": 0.8,
            "gpus": 72.0,
            "tokens_per_s_per_gpu": 2111.0,
            "ttft_s": 0.5,
            "tpot_s": 0.026,
            "e2e_s": None,
        },
        shadow_prices=[
            {
                "hardware": "gb200-nvl72",
                "resource": "hbm_bandwidth",
                "unit": "TB/s",
                "usd_per_hour": 12.5,
                "usd_per_gpu_hour": 0.195,
            },
            {
                "hardware": "b200",
                "resource": "hbm_capacity",
                "unit": "GB",
                "usd_per_hour": 0.0,
                "usd_per_gpu_hour": float("nan"),
            },
        ],
        sim={
            "stable": True,
            "oscillating": False,
            "oscillation_period_s": float("nan"),
            "ttft_mean_s": 0.5,
            "ttft_p99_s": 1.3,
            "tpot_mean_s": 0.026,
            "e2e_mean_s": 21.3,
            "near_capacity": False,
        },
        settings={
            "engine profile": "trt",
            "KV cache": "fp8",
            "MTP draft tokens per step": 0,
            "running requests per decode instance (cap)": 1024,
        },
        tiers=[
            {
                "kv_class": "think60s",
                "returning_per_s": 11.2,
                "dwell_s": 60.0,
                "share_hbm": 0.65,
                "share_dram": 0.35,
                "share_nvme": 0.0,
                "share_network": 0.0,
                "share_drop": 0.0,
                "stored_hbm_gb": 283.4,
                "stored_dram_gb": 152.4,
                "stored_nvme_gb": 0.0,
                "stored_network_gb": 0.0,
            }
        ],
        stage_ms={
            "prefill b200 8gpu-tp8-ep8": {
                "gemm": 310.0,
                "attention": 95.0,
                "communication": 40.0,
                "overhead": 8.0,
            },
            "decode gb200-nvl72 64gpu-dpa-ep64": {
                "gemm": 12.0,
                "attention": 9.5,
                "communication": 4.0,
                "overhead": 2.6,
            },
        },
    )


def _section(md: str, heading: str) -> str:
    """The text of one ``## `` section, up to the next one."""
    start = md.index(heading + "\n")
    end = md.find("\n## ", start + len(heading))
    return md[start:] if end < 0 else md[start:end]


def _rows(section: str) -> list[list[str]]:
    """The body rows of the first Markdown table of a section, as stripped cells."""
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]


def test_report_sections_numbers_and_pngs(tmp_path: Path, spec: StudySpec) -> None:
    path = write_report(tmp_path, spec=spec, objectives=OBJECTIVES, tables=_tables(), best=_best())
    assert path == tmp_path / "report.md"
    md = path.read_text(encoding="utf-8")
    for heading in SECTIONS:
        assert heading in md
    assert "6 finished: 3 feasible, 3 infeasible" in md
    # the TPOT target holds the mean (c_tpot_s is mean TPOT minus it), and the line says so
    assert "40 requests/s" in md and "TTFT at p90 <= 2 s, TPOT mean <= 50 ms" in md

    best_rows = _rows(_section(md, "## Best designs"))
    assert [r[0] for r in best_rows] == ["2", "1", "0"]  # cheapest first, infeasible left out
    assert best_rows[0][1] == "1"  # trials with its design
    assert "gb200-nvl72" in best_rows[0][4] and best_rows[0][9] == "0.8"  # four significant figures
    # the settings rows of the same pools differ in: the chunk (none in this table) and the
    # decode instance's cap, the batch its pool was sized at (700), as `dse deploy` launches it
    assert best_rows[0][6:8] == ["-", "700"]

    assert [r[0] for r in _rows(_section(md, "## Pareto front"))] == ["2", "1"]

    binding = _rows(_section(md, "## Binding constraints"))
    # the same constraint at other numbers counts once, most common first, its first line whole
    assert binding[0] == [LONG_BINDING, "2", "67%"] and binding[1] == ["ttft_s", "1", "33%"]

    detail = _section(md, "## Best design detail")
    assert "Trial 2, the feasible design best by usd_per_million_tokens (minimize)." in detail
    assert "+1 TB/s/GPU" in detail and "stable: yes" in detail
    assert "requests/s (load)" in detail and "output tokens/s (capacity)" in detail
    # the pool's batch is the cap it was sized at, not the batch the load fills (the trajectory's)
    assert "| decode batch cap (sequences) |" in detail
    pools = _rows(detail[detail.index("### Pools") :])[:2]
    # a figure the pool's role does not have is "-", as `dse place` shows it; a decode pool's batch is
    assert [r[0] for r in pools] == ["prefill", "decode"]
    assert pools[0][5:7] == ["-", "-"] and pools[1][5:7] == ["2,048", "-"]  # batch, prefill share
    assert 'B200\'s "180 GB" holds 193.3 GB' in detail
    settings = dict(r[:2] for r in _rows(detail[detail.index("### Engine settings") :]))
    assert settings["running requests per decode instance (cap)"] == "1,024"
    assert settings["KV cache"] == "fp8" and settings["MTP draft tokens per step"] == "0"
    kv = _rows(detail[detail.index("### KV placement") :])
    assert kv[0][:8] == ["think60s", "11.20", "60", "65%", "35%", "0%", "0%", "0%"]
    assert kv[0][8:10] == ["0.283", "0.152"]  # TB stored in HBM and host DRAM
    assert "decode gb200-nvl72 64gpu-dpa-ep64" in detail and "28.10" in detail  # stage total, ms

    hbm = _rows(_section(md, "## Peak HBM residency"))
    assert hbm[0][:3] == ["feasible trials", "3", "67% (2 of 3)"]  # 70 and 75 of 70, 75, 90
    assert hbm[0][3:] == ["75.0", "90.0"]
    assert hbm[1][:3] == ["Pareto front designs", "2", "50% (1 of 2)"]  # 75 of 75, 90
    # the line is the brief's 80 GB, not an H100's capacity (80 GiB): it had read "(an H100's HBM)"
    assert 'not an H100\'s capacity: its "80 GB" is 80 GiB, 85.9 GB' in _section(md, "## Peak HBM residency")

    assert "Simulated trajectory of trial 2" in md
    for name in ("pareto.png", "stage_breakdown.png", "hbm_residency.png", "sim_trajectory.png"):
        assert f"]({name})" in md
        assert (tmp_path / name).read_bytes().startswith(PNG)
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporary files


def test_empty_study_still_writes_a_report(tmp_path: Path, spec: StudySpec) -> None:
    empty = {k: pl.DataFrame() for k in ("trials", "pareto", "placements", "kv_tiers", "sim_timeseries")}
    path = write_report(tmp_path / "report", spec=spec, objectives=OBJECTIVES, tables=empty, best=None)
    md = path.read_text(encoding="utf-8")
    for heading in SECTIONS:
        assert heading in md
    assert "0 finished: 0 feasible, 0 infeasible" in md
    assert "No feasible designs." in md
    assert "not drawn (no feasible trials with both speeds)" in md
    assert not list(path.parent.glob("*.png"))


def test_all_feasible_says_none_and_trajectory_falls_back(tmp_path: Path, spec: StudySpec) -> None:
    tables = _tables()
    tables["trials"] = tables["trials"].filter(pl.col("feasible"))
    path = write_report(tmp_path, spec=spec, objectives=OBJECTIVES, tables=tables, best=None)
    md = path.read_text(encoding="utf-8")
    assert re.search(r"## Binding constraints\n\nnone: all 3 trials are feasible\.", md)
    assert "No best design to detail." in md
    assert "Simulated trajectory of trial 0" in md  # no best: the first trial of the series
    assert "stage breakdown" in md and not (tmp_path / "stage_breakdown.png").exists()


def test_maximized_objective_ranks_descending(tmp_path: Path, spec: StudySpec) -> None:
    tables = _tables()
    tables["trials"] = tables["trials"].with_columns(
        pl.col("tokens_per_s_per_gpu").alias("objective_tokens_per_s_per_gpu")
    )
    md = write_report(
        tmp_path, spec=spec, objectives=[("tokens_per_s_per_gpu", "maximize")], tables=tables, best=None
    ).read_text(encoding="utf-8")
    assert [r[0] for r in _rows(_section(md, "## Best designs"))] == ["0", "2", "1"]


@pytest.mark.parametrize(
    ("warm", "said"),
    [
        (
            [0],
            "The sampled trials beat the best warm-start trial (the full placement's design, "
            "trial 0: 1.2) by 33.3%.",
        ),
        (
            [2, 3],
            "The best is a warm-start trial (the full placement's design, trial 2); "
            "no sampled trial beat it.",
        ),
        ([], None),
    ],
)
def test_the_report_says_what_the_sampler_added_to_the_warm_start(
    tmp_path: Path, spec: StudySpec, warm: list[int], said: str | None
) -> None:
    tables = _tables()
    tables["trials"] = tables["trials"].with_columns(warm_start=pl.col("trial").is_in(warm))
    md = write_report(tmp_path, spec=spec, objectives=OBJECTIVES, tables=tables, best=None).read_text("utf-8")
    if said is None:
        assert "warm" not in md
        return
    assert said in _section(md, "## Best designs")
    assert f"{len(warm)} of them are the full placement's designs (the warm start)" in md


@pytest.mark.parametrize(
    ("values", "said"),
    [  # trial 0 is the warm start's; maximised
        ([0.0, 2.5, None, None, None, None], "trial 0: 0) by 2.5."),  # no ratio to zero
        ([-2.0, -1.0, None, None, None, None], "trial 0: -2) by 50.0%."),
        ([1.0, float("nan"), 0.5, None, None, None], "no sampled trial beat it."),  # NaN does not count
    ],
)
def test_the_warm_start_sentence_copes_with_zero_negative_and_missing_values(
    tmp_path: Path, spec: StudySpec, values: list[float | None], said: str
) -> None:
    tables = _tables()
    tables["trials"] = (
        tables["trials"]
        .with_columns(warm_start=pl.col("trial") == 0, feasible=pl.lit(True))
        .with_columns(objective_tokens_per_s_per_gpu=pl.Series(values, dtype=pl.Float64))
    )
    md = write_report(
        tmp_path, spec=spec, objectives=[("tokens_per_s_per_gpu", "maximize")], tables=tables, best=None
    ).read_text(encoding="utf-8")
    assert said in _section(md, "## Best designs")


def test_a_sampled_trial_level_with_the_warm_start_and_first_by_the_next_objective_is_said_best(
    tmp_path: Path, spec: StudySpec
) -> None:
    """Trial 2 (sampled) ties the warm start's trial 0 on the first objective and is cheaper: the
    study's best. The report had said the best is the warm-start trial, beside its own table's
    trial 2; and a lead of 0.04% read "by 0.0%"."""
    tables = _tables()
    objectives = [("tokens_per_s_per_gpu", "maximize"), ("usd_per_million_tokens", "minimize")]
    tables["trials"] = (
        tables["trials"]
        .with_columns(warm_start=pl.col("trial") == 0, feasible=pl.lit(True))
        .with_columns(objective_tokens_per_s_per_gpu=pl.Series([2.0, None, 2.0, None, None, None]))
    )
    md = write_report(tmp_path, spec=spec, objectives=objectives, tables=tables, best=None).read_text("utf-8")
    best = _section(md, "## Best designs")
    assert _rows(best)[0][0] == "2"
    assert (
        "The best is a sampled trial (trial 2), level on tokens_per_s_per_gpu with the best warm-start "
        "trial (the full placement's design, trial 0: 2) and first of the equals by usd_per_million_tokens "
        "(minimize)"
    ) in best
    tables["trials"] = tables["trials"].with_columns(
        objective_tokens_per_s_per_gpu=pl.Series([2.0, None, 2.0008, None, None, None])
    )
    md = write_report(tmp_path, spec=spec, objectives=objectives, tables=tables, best=None).read_text("utf-8")
    assert "trial 0: 2) by 0.04%." in _section(md, "## Best designs")


def _alike(trials: pl.DataFrame, first: int, new: int, **changes: object) -> pl.DataFrame:
    """``trials`` with a trial ``new``: a copy of trial ``first`` with ``changes``."""
    row = trials.filter(pl.col("trial") == first).with_columns(trial=pl.lit(new, pl.Int64))
    row = row.with_columns(**{k: pl.lit(v, dtype=trials.schema[k]) for k, v in changes.items()})
    return pl.concat([trials, row])


def test_trials_that_deliver_the_same_design_are_one_design() -> None:
    # 6: trial 2 with another batch cap and decode batch and the simulator's last digits moved
    t = _alike(_trials(), 2, 6, p_max_batch=None, decode_batch_sequences=300.0, ttft_mean_s=0.5 * (1 + 3e-4))
    t = _alike(t, 2, 7, ttft_mean_s=0.5 * 1.01)  # 1% slower to first token: another design
    t = _alike(t, 2, 8, p_decode_hardware="b200")  # other hardware, the same figures: another design
    t = _alike(t, 3, 9, ttft_pct_s=7.0 + 1e-9)  # an infeasible trial's twin
    t = _alike(t, 2, 10, feasible=False)  # just over a limit: not the feasible one
    d = with_designs(t.reverse())  # later trials first: designs still go by trial number
    design = dict(zip(d["trial"].to_list(), d["design"].to_list(), strict=True))
    count = dict(zip(d["trial"].to_list(), d["design_trials"].to_list(), strict=True))
    assert design == {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 2, 7: 7, 8: 8, 9: 3, 10: 10}
    assert count[2] == count[6] == 2 and count[3] == 2 and count[7] == count[8] == count[10] == 1
    assert distinct_designs(t)["trial"].to_list() == [0, 1, 2, 3, 4, 5, 7, 8, 10]


def test_gpus_and_grid_points_part_designs_exactly() -> None:
    two = pl.DataFrame({"trial": [0, 1], "gpus": [8000.0, 8008.0], "usd_per_million_tokens": [1.0, 1.0005]})
    assert with_designs(two)["design"].to_list() == [0, 1]  # a node apart, 0.1% apart: two designs
    grid = pl.DataFrame(
        {"trial": [0, 1], "x_requests_per_s": [40.0, 40.04], "usd_per_million_tokens": [1.0] * 2}
    )
    assert with_designs(grid)["design"].to_list() == [0, 1]
    assert with_designs(grid.drop("x_requests_per_s"))["design"].to_list() == [0, 0]


def test_a_queue_empty_to_the_solver_s_last_digits_is_one_design() -> None:
    """deepseek-production's trials 35 and 55: the same design to 1e-9 in every figure but the
    buffer queue's peak, 3.5e-13 against 1.2e-6 requests (both empty), had been two designs."""
    q = "queue_peak_buffer_requests"
    t = pl.DataFrame({"trial": [0, 1, 2], q: [3.5e-13, 1.18e-6, 0.5], "usd_per_million_tokens": [1.0] * 3})
    assert with_designs(t)["design"].to_list() == [0, 0, 2]  # half a request waiting: another design


def test_the_front_and_the_report_show_each_design_once(tmp_path: Path, spec: StudySpec) -> None:
    t = _alike(_trials(), 2, 6, ttft_mean_s=0.5 * (1 + 1e-4))  # a tie on cost: the first stands
    t = with_designs(_alike(t, 1, 7, objective_usd_per_million_tokens=0.95 * (1 - 1e-4)))  # cheaper
    front = pareto_frame(t, ["usd_per_million_tokens"], ["minimize"])
    assert front["trial"].to_list() == [2] and front["design_trials"].to_list() == [2]
    tables = {**_tables(), "trials": t, "pareto": front}
    md = write_report(tmp_path, spec=spec, objectives=OBJECTIVES, tables=tables, best=None).read_text()
    best = _section(md, "## Best designs")
    assert "The 3 best of 3 distinct designs (5 feasible trials)" in best
    assert [r[:2] for r in _rows(best)] == [["2", "2"], ["7", "2"], ["0", "1"]]  # each design's best trial
    assert "1 non-dominated design." in _section(md, "## Pareto front")
    t = t.with_columns(objective_tokens_per_s_per_user=pl.col("tokens_per_s_per_user"))
    two = pareto_frame(t, ["usd_per_million_tokens", "tokens_per_s_per_user"], ["minimize", "maximize"])
    assert two["trial"].to_list() == [2, 7] and two["design"].to_list() == [2, 1]  # 7 beats 1, alike
    speed = pareto_frame(t, ["tokens_per_s_per_user", "usd_per_million_tokens"], ["maximize", "minimize"])
    assert speed["trial"].to_list() == [7, 2]  # best first on a maximised objective


def test_below_share_ignores_non_finite() -> None:
    assert below_share(np.array([79.9, 80.0, np.nan, 10.0]), 80.0) == (2, 3)


def test_cells_format_missing_noise_and_pipes() -> None:
    assert [fmt(None), fmt(float("nan")), fmt(True), fmt(-3e-18), fmt(2048), fmt(0.026, ".1f", 1e3)] == [
        "-",
        "-",
        "yes",
        "0",
        "2,048",
        "26.0",
    ]
    assert fmt("a|b") == "a\\|b"


def test_hbm_histogram_of_equal_values(tmp_path: Path) -> None:
    from dse.study.report_figures import hbm_png

    df = pl.DataFrame({"hbm_peak_gb_per_gpu": [76.8] * 40})
    fig = hbm_png(tmp_path / "hbm.png", df)
    assert not fig.skipped and (tmp_path / "hbm.png").read_bytes()[:4] == b"\x89PNG"


def test_speed_front_keeps_what_nothing_beats_on_both_speeds() -> None:
    df = pl.DataFrame(
        {
            "trial": [0, 1, 2, 3, 4, 5],
            "user": [20.0, 30.0, 30.0, 40.0, 25.0, None],
            "gpu": [900.0, 700.0, 650.0, 300.0, 600.0, 5000.0],
        }
    )
    # 2 is beaten by 1 (same speed, less per GPU), 4 by 1; 5 has no speed per user
    assert speed_front(df, "user", "gpu")["trial"].to_list() == [0, 1, 3]


def test_the_best_designs_metrics_are_named_as_the_exported_columns(tmp_path: Path, spec: StudySpec) -> None:
    """The trials export's names (``ttft_mean_s``), not the recorded ones (``ttft_s``): they join."""
    md = write_report(tmp_path, spec=spec, objectives=OBJECTIVES, tables=_tables(), best=_best()).read_text()
    detail = _section(md, "## Best design detail")
    metrics = detail[detail.index("### Metrics") :].split("\n### ")[0]
    assert "| column | value | unit | what |" in metrics
    assert [r[0] for r in _rows(metrics)] == [
        "usd_per_million_tokens", "gpus", "tokens_per_s_per_gpu", "ttft_mean_s", "tpot_mean_s", "e2e_mean_s",
    ]  # fmt: skip
    assert _rows(metrics)[4] == ["tpot_mean_s", "0.026", "s", "mean time per output token, simulated"]


def test_the_best_designs_percentile_metrics_name_their_percentile(tmp_path: Path, spec: StudySpec) -> None:
    """ttft_pct_s and the engine's percentiles had a value and "s" only: nothing said p90."""
    best = _best()
    best.metrics.update({"ttft_pct_s": 1.1, "engine_tpot_pct_s": 0.03, "engine_ttft_p99_s": 1.2})
    md = write_report(tmp_path, spec=spec, objectives=OBJECTIVES, tables=_tables(), best=best).read_text()
    metrics = md[md.index("### Metrics") :].split("\n### ")[0]
    what = {r[0]: r[3] for r in _rows(metrics)}
    assert what["ttft_pct_s"].startswith("TTFT at the study's percentile (p90): the worse of")
    assert what["engine_tpot_pct_s"].startswith("TPOT at the study's percentile (p90)")
    assert what["engine_ttft_p99_s"].startswith("99th-percentile TTFT")
    assert what["ttft_mean_s"].startswith("mean time to first token")


def test_the_overview_says_what_the_study_prices_beyond_gpu_hours_and_its_caps(
    tmp_path: Path, spec: StudySpec
) -> None:
    """Energy, resting KV's storage and the caps on each design move the figures (energy is in
    $/M tokens, a cap rules designs out), and the overview, "the spec in words", had left them out."""
    from dataclasses import replace

    from dse.study.spec import StudyEnergy, StudyLimits, StudyStorage

    priced = replace(
        spec,
        energy=StudyEnergy(usd_per_kwh=0.12, pue=1.3),
        storage=StudyStorage(dram_usd_per_tb=3000.0, network_usd_per_tb=150.0),
        limits=StudyLimits(budget_usd_hour=500.0, max_gpus=64),
    )
    md = write_report(tmp_path, spec=priced, objectives=OBJECTIVES, tables=_tables(), best=None).read_text(
        "utf-8"
    )
    lines = md.splitlines()
    assert (
        "- **Priced too:** energy $0.12/kWh at PUE 1.3; resting KV's host DRAM $3,000/TB, network "
        "$150/TB over 4 years" in lines
    )
    assert "- **Caps on each design:** budget $500.00/hour, GPUs 64" in lines
    plain = write_report(tmp_path, spec=spec, objectives=OBJECTIVES, tables=_tables(), best=None).read_text(
        "utf-8"
    )
    assert "Priced too" not in plain and "Caps on each design" not in plain


GRID_STUDY = """\
name = "{name}"
model = "deepseek-v3"
hardware = ["h200-sxm", "b200"]

[workload]
requests_per_s = 10.0
input_tokens = 4000.0
output_tokens = 1000.0
returning_share = 0.5
cached_prefix_tokens = 8000.0
suffix_tokens = 300.0
think = [{{ share = 1.0, dwell_s = 60.0 }}]

[slo]
ttft_s = 2.0
tpot_s = 0.05

[sweep]
{sweep}
"""


@pytest.mark.parametrize(
    "sweep,said",
    [
        (
            'tpot_s = [0.05, 0.1, 0.4]\nmodel = ["deepseek-v3", "kimi-k2"]\nhardware = ["h200-sxm", "b200"]',
            [
                "- **Model:** deepseek-v3 or kimi-k2 by grid point (fp8, engine trt)",
                "- **Hardware:** h200-sxm or b200 by grid point (prices: own_hyperscaler)",
                "- **Traffic:** 10 requests/s; fresh prompts of 4,000 tokens, 1,000 output tokens; 50% "
                "returning turns reusing 8,000 cached tokens plus 300 new ones (100% after 60 s)",
                "- **Targets:** TTFT at p50 <= 2 s, TPOT mean <= 50, 100 or 400 ms by grid point",
            ],
        ),
        (
            "ttft_s = [2.0, 4.0]\ninput_tokens = [2000, 16000]\ncached_prefix_tokens = [32000, 128000]\n"
            "requests_per_s = [5.0]",
            [
                "- **Model:** deepseek-v3 (fp8, engine trt)",
                "- **Hardware:** h200-sxm, b200 (prices: own_hyperscaler)",
                "- **Traffic:** 5 requests/s by grid point; fresh prompts of 2,000 or 16,000 tokens by grid "
                "point, 1,000 output tokens; 50% returning turns reusing 32,000 or 128,000 cached tokens by "
                "grid point plus 300 new ones (100% after 60 s)",
                "- **Targets:** TTFT at p50 <= 2 or 4 s by grid point, TPOT mean <= 50 ms",
            ],
        ),
    ],
)
def test_a_grids_report_says_which_targets_and_traffic_vary_by_point(
    tmp_path: Path, sweep: str, said: list[str]
) -> None:
    """The study's own target (or traffic) holds only where the grid does not sweep it."""
    (tmp_path / "g.toml").write_text(GRID_STUDY.format(name="g", sweep=sweep))
    empty = {k: pl.DataFrame() for k in ("trials", "pareto", "placements", "kv_tiers", "sim_timeseries")}
    grid = load_study(tmp_path / "g.toml").served_by(load_catalog())  # its engine and precision as a run's
    md = write_report(
        tmp_path / "report", spec=grid, objectives=OBJECTIVES, tables=empty, best=None
    ).read_text()
    lines = md.splitlines()
    for line in said:
        assert line in lines


def test_the_reports_running_request_cap_is_each_decode_pools_as_dse_deploy_writes_it() -> None:
    """The report had given the trial's max_batch (the search's bound, 4,096) as the engine's cap,
    while `dse deploy` writes and the summary shows the batch each pool was sized at."""
    from dse.perf.params import load_params
    from dse.study.best import engine_settings

    spec = load_study("deepseek-v3-blackwell")
    choice = {"max_batch": 4096, "chunk_tokens": 8192, "topology": "disaggregated"}
    one = [{"role": "prefill", "hardware": "b200"},
           {"role": "decode", "hardware": "b200", "decode_batch": 1581.4}]  # fmt: skip
    cap = "running requests per decode instance (cap)"
    assert engine_settings(spec, choice, load_params(), one)[cap] == 1581
    two = [*one, {"role": "decode", "hardware": "h200-sxm", "decode_batch": 327.4}]
    both = "1,581 (decode on b200), 327 (decode on h200-sxm)"
    assert engine_settings(spec, choice, load_params(), two)[cap] == both
    assert engine_settings(spec, choice, load_params())[cap] == 4096  # no pools recorded: the bound


DYNAMICS_GRID = GRID_STUDY.format(
    name="g",
    sweep='burst_factor = [1.0, 2.0]\nhardware = ["h200-sxm", "h200-bw150"]\n\n'
    '[objectives]\nnames = ["ttft_p99_s"]\n\n'
    '[[variants]]\nid = "h200-bw150"\nbase = "h200-sxm"\nhbm_bandwidth_scale = 1.5',
)


def _grid_trials() -> pl.DataFrame:
    """Four points of DYNAMICS_GRID: the calm ones (0, 1) feasible and tied on TTFT p99, the bursts
    infeasible; point 1 (the variant) has no price, so its recorded shadow prices (0) mean nothing."""
    return pl.DataFrame(
        {
            "trial": [0, 1, 2, 3],
            "x_burst_factor": [1.0, 1.0, 2.0, 2.0],
            "x_hardware": ["h200-sxm", "h200-bw150", "h200-sxm", "h200-bw150"],
            "p_topology": ["aggregated", "disaggregated", "aggregated", "aggregated"],
            "p_kv_policy": ["tiered"] * 4,
            "p_prefill_hardware": ["h200-sxm", "h200-bw150", "h200-sxm", "h200-bw150"],
            "p_prefill_shape": ["8gpu-dpa-ep8"] * 4,
            "p_decode_hardware": ["h200-sxm", "h200-bw150", "h200-sxm", "h200-bw150"],
            "p_decode_shape": ["8gpu-dpa-ep8", "16gpu-dpa-ep16", "8gpu-dpa-ep8", "8gpu-dpa-ep8"],
            "gpus": [16, 24, 16, 16],
            "usd_per_hour": [20.0, None, 20.0, None],
            "ttft_p99_s": [0.6, 0.6, 90.0, 80.0],
            "ttft_pct_s": [0.6, 0.6, 90.0, 80.0],
            "hbm_bandwidth_usd_per_tbps_gpu_hour": [0.5, 0.0, 0.5, 0.0],
            "hbm_capacity_usd_per_gb_gpu_hour": [0.01, 0.0, 0.01, 0.0],
            "feasible": [True, True, False, False],
            "binding": [None, None, "ttft_s: TTFT p99 90 s against 2 s", "ttft_s: TTFT p99 80 s against 2 s"],
            "objective_ttft_p99_s": [0.6, 0.6, 90.0, 80.0],
        }
    )


def _grid_md(tmp_path: Path, trials: pl.DataFrame, best: BestDesign | None = None) -> str:
    (tmp_path / "g.toml").write_text(DYNAMICS_GRID)
    tables = {k: pl.DataFrame() for k in ("pareto", "placements", "kv_tiers", "sim_timeseries")}
    grid = load_study(tmp_path / "g.toml")
    objectives = [("ttft_p99_s", "minimize")]
    return write_report(
        tmp_path / "report", spec=grid, objectives=objectives, tables={**tables, "trials": trials}, best=best
    ).read_text()


def test_a_grids_best_design_names_its_point_and_the_points_tied_with_it(tmp_path: Path) -> None:
    """The detail said "Trial 0." only: not at which point, nor that others tie with it (where
    every calm point has the same TTFT, the best is the first by trial order, nothing more)."""
    best = BestDesign(trial=0, pools=[], metrics={}, shadow_prices=[], sim={}, stage_ms={})
    detail = _section(_grid_md(tmp_path, _grid_trials(), best), "## Best design detail")
    assert (
        "Trial 0, the feasible point best by ttft_p99_s (minimize): hardware = h200-sxm, burst_factor = 1."
        " 1 other feasible point ties with it at 0.6; it is the best of them by usd_per_million_tokens"
        " (minimize), then tokens_per_s_per_gpu (maximize) (then the first in trial order)." in detail
    )


def test_a_grids_axis_effects_show_the_objective_once_with_its_unit(tmp_path: Path) -> None:
    """An objective of ttft_p99_s on a dynamics grid gave it twice: "median ttft_p99_s" (no unit)
    and "median TTFT p99 (s)"."""
    effects = _section(_grid_md(tmp_path, _grid_trials()), "## Effect of each axis")
    header = effects.splitlines()[4]
    assert header.count("ttft_p99") + header.count("TTFT p99") == 1 and "median ttft_p99_s (s)" in header


def test_a_grid_says_how_its_designs_are_chosen_and_shows_an_aggregated_unit_once(tmp_path: Path) -> None:
    """The grid had said "checked by the fluid simulator" (the engine-level one checks too, and a
    rejected design is solved again), and "X + X" for an aggregated design's one unit."""
    grid = _section(_grid_md(tmp_path, _grid_trials()), "## Grid")
    assert "checked by the fluid simulator" not in grid and "the simulators (fluid and engine-level)" in grid
    assert "share that design, checked in their own dynamics" in grid
    designs = [r[2] for r in _rows(grid)]
    assert "aggregated: h200-sxm/8gpu-dpa-ep8" in designs
    assert "disaggregated: h200-bw150/8gpu-dpa-ep8 + h200-bw150/16gpu-dpa-ep16" in designs


def test_a_grid_counts_the_designs_solved_again(tmp_path: Path) -> None:
    """How many points' designs were solved again before they held, where the trials say."""
    trials = _grid_trials().with_columns(milp_resolves=pl.Series([0, 1, None, 2], dtype=pl.Int64))
    assert "2 of the points' designs were solved again" in _section(_grid_md(tmp_path, trials), "## Grid")
    assert "solved again before they held" not in _section(_grid_md(tmp_path, _grid_trials()), "## Grid")


def test_a_grid_counts_the_points_answered_in_another_topology(tmp_path: Path) -> None:
    """Where the MILP's cheapest topology's design failed the simulations and another topology
    answers, the grid says at how many points."""
    trials = _grid_trials().with_columns(milp_topology_rank=pl.Series([0, 1, None, 0], dtype=pl.Int64))
    assert "1 of the points are answered in a topology the MILP did not rank cheapest" in _section(
        _grid_md(tmp_path, trials), "## Grid"
    )
    zeros = _grid_trials().with_columns(milp_topology_rank=pl.Series([0, 0, None, 0], dtype=pl.Int64))
    assert "did not rank cheapest" not in _section(_grid_md(tmp_path, zeros), "## Grid")


def test_a_whatif_without_a_price_shows_no_shadow_price(tmp_path: Path) -> None:
    """An unpriced design records its shadow prices as 0; the section says "none without a
    price" and showed 0.000 (nothing saved), now "-"."""
    trials = _grid_trials().with_columns(
        usd_per_hour=pl.Series([None, 30.0, None, 30.0], dtype=pl.Float64)  # the base unpriced
    )
    whatif = _section(_grid_md(tmp_path, trials), "## What-if hardware")
    (row,) = _rows(whatif)
    assert row[:2] == ["1", "h200-bw150"] and row[-2:] == ["-", "-"]


def test_a_grid_without_variants_says_it_has_none(tmp_path: Path) -> None:
    """A grid with no `[[variants]]` had said "No feasible pair of a variant and its base at the
    same point", as if variants had run and failed."""
    text = GRID_STUDY.format(
        name="g", sweep='burst_factor = [1.0, 2.0]\n\n[objectives]\nnames = ["ttft_p99_s"]'
    )
    (tmp_path / "g.toml").write_text(text)
    tables = {k: pl.DataFrame() for k in ("pareto", "placements", "kv_tiers", "sim_timeseries")}
    md = write_report(
        tmp_path / "report", spec=load_study(tmp_path / "g.toml"), objectives=[("ttft_p99_s", "minimize")],
        tables={**tables, "trials": _grid_trials()}, best=None,
    ).read_text()  # fmt: skip
    assert (
        _section(md, "## What-if hardware")
        .strip()
        .endswith("The study has no what-if variants (`[[variants]]`).")
    )


def test_a_whatif_shows_a_small_shadow_price_to_its_digits(tmp_path: Path) -> None:
    """A capacity price of $0.00004 per GB-hour printed as 0.0000 (four decimals), as if HBM
    capacity were worth nothing there; prices now keep three significant digits."""
    trials = _grid_trials().with_columns(
        usd_per_hour=pl.Series([30.0, 20.0, 30.0, 20.0], dtype=pl.Float64),
        hbm_bandwidth_usd_per_tbps_gpu_hour=pl.Series([0.000123, 0.0, 0.5, 0.0]),
        hbm_capacity_usd_per_gb_gpu_hour=pl.Series([4.27e-5, 0.0, 0.01, 0.0]),
    )
    (row,) = _rows(_section(_grid_md(tmp_path, trials), "## What-if hardware"))
    assert row[-2:] == ["0.000123", "4.27e-05"]


def test_the_grid_figures_labels_write_values_as_the_tables_do() -> None:
    """The legend and the ticks had read `input_tokens=64000.0, tpot_s=0.2` where the report's
    tables write 64,000."""
    from dse.study.report_grid import grid_figure

    line = pl.DataFrame({"x_input_tokens": [8000.0, 64000.0], "usd": [1.0, 2.0]})
    fig = grid_figure("input_tokens", ["x_tpot_s"], [(0.2,)], [line], [8000.0, 64000.0], "usd", "usd")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["tpot_s=0.2"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["8,000", "64,000"]


def test_the_grid_figure_says_which_lines_it_leaves_out(tmp_path: Path) -> None:
    """The figure drew 12 lines of however many combinations there were, in trial order, and its
    caption did not say so; its y axis had no unit."""
    from dse.study.report_grid import MAX_SERIES, _series

    n = MAX_SERIES + 3
    tokens = ", ".join(str(1000 * t) for t in range(1, n + 1))
    (tmp_path / "g.toml").write_text(
        GRID_STUDY.format(name="g", sweep=f"requests_per_s = [1.0, 2.0]\ninput_tokens = [{tokens}]")
    )
    grid = load_study(tmp_path / "g.toml")
    assert list(grid.sweep.axes()) == ["requests_per_s", "input_tokens"]
    rows = [(r, 1000.0 * t) for t in range(n, 0, -1) for r in (1.0, 2.0)]  # trial order: prompts falling
    trials = pl.DataFrame(
        {
            "trial": list(range(len(rows))),
            "x_requests_per_s": [r for r, _ in rows],
            "x_input_tokens": [t for _, t in rows],
            "feasible": [True] * len(rows),
            "usd_per_million_tokens": [t / 1e4 for _, t in rows],
            "objective_usd_per_million_tokens": [t / 1e4 for _, t in rows],
        }
    )
    tables = {k: pl.DataFrame() for k in ("pareto", "placements", "kv_tiers", "sim_timeseries")}
    md = write_report(
        tmp_path / "report", spec=grid, objectives=OBJECTIVES, tables={**tables, "trials": trials}, best=None
    ).read_text()
    assert (
        f"![usd_per_million_tokens ($/M tokens) across requests_per_s, feasible points only; the first "
        f"{MAX_SERIES} of the {n} combinations of input_tokens (in the order of their values)" in md
    )
    assert [k for k, _ in _series(trials, ["x_input_tokens"]).items()][:2] == [(1000.0,), (2000.0,)]
    assert (tmp_path / "report" / "grid.png").read_bytes().startswith(PNG)


def test_a_single_feasible_trial_reads_in_the_singular(tmp_path: Path, spec: StudySpec) -> None:
    tables = _tables()
    tables["trials"] = (
        tables["trials"].filter(pl.col("trial") != 0).with_columns(feasible=pl.col("trial") == 2)
    )
    md = write_report(tmp_path, spec=spec, objectives=OBJECTIVES, tables=tables, best=None).read_text()
    assert "The 1 best of 1 distinct design (1 feasible trial) by usd_per_million_tokens" in md


def test_a_whatif_says_the_points_where_only_one_side_is_feasible(tmp_path: Path) -> None:
    """The line "better at 1 of 1 points" counted only the points where both were feasible: a variant
    that made a point feasible, or lost one, went unsaid."""
    trials = _grid_trials().with_columns(feasible=pl.Series([True, True, False, True]))
    whatif = _section(_grid_md(tmp_path, trials), "## What-if hardware")
    line = next(ln for ln in whatif.splitlines() if ln.startswith("- **h200-bw150**"))
    assert "better at 0 of 1 points" in line
    assert line.endswith("; not counted: 1 point feasible with the variant only, 0 with the base only")


def _split_trials() -> pl.DataFrame:
    """The six trials with trial 1 an attention-FFN design and trial 2 a four-stage one, whose
    midfill and expert pools the trials table names only in part (``p_midfill_*``)."""
    t = _trials().with_columns(
        p_topology=pl.Series(
            ["aggregated", "afd", "four-stage", "aggregated", "disaggregated", "aggregated"]
        ),
        p_ffn_tokens_per_gpu=pl.Series([None, 64.0, 16.0, None, None, None]),
        p_midfill_hardware=pl.Series([None, None, "h200-sxm", None, None, None], dtype=pl.String),
        p_midfill_shape=pl.Series([None, None, "8gpu-tp8-ep8", None, None, None], dtype=pl.String),
    )
    return t


def _split_pools() -> pl.DataFrame:
    """Trial 1's pools: prefill, attention and FFN; trial 2 has none recorded."""
    return pl.DataFrame(
        {
            "trial": [1, 1, 1, 0],
            "pool": [0, 1, 2, 0],
            "role": ["prefill", "attention", "ffn", "mixed"],
            "hardware": ["h200-sxm", "gb200-nvl72", "gb200-nvl72", "b200"],
            "shape": ["8gpu-tp8-ep8", "32gpu-dpa-ep32", "32gpu-dpa-ep32", "8gpu-dpa-ep8"],
        }
    )


def test_the_design_tables_name_the_midfill_and_expert_pools(tmp_path: Path, spec: StudySpec) -> None:
    """An attention-FFN or four-stage design's expert and midfill pools follow its prefill / decode
    pair: from the placements' pools, else (trial 2, none recorded) from the trials columns; a
    study without such a design keeps its tables as they were."""
    trials = _split_trials()
    pareto = trials.filter(pl.col("trial").is_in([2, 1])).sort("objective_usd_per_million_tokens")
    tables = {**_tables(), "trials": trials, "pareto": pareto, "placements": _split_pools()}
    md = write_report(tmp_path / "r", spec=spec, objectives=OBJECTIVES, tables=tables, best=None).read_text()
    best, front = _section(md, "## Best designs"), _section(md, "## Pareto front")
    cells = {r[0]: r[4:6] for r in _rows(best)}
    assert cells["2"] == [
        "b200 / gb200-nvl72 + midfill h200-sxm + ffn gb200-nvl72",
        "8gpu-tp8-ep8 / 64gpu-dpa-ep64 + midfill 8gpu-tp8-ep8 + ffn 64gpu-dpa-ep64",
    ]
    assert cells["1"] == [
        "h200-sxm / gb200-nvl72 + ffn gb200-nvl72",
        "8gpu-tp8-ep8 / 32gpu-dpa-ep32 + ffn 32gpu-dpa-ep32",
    ]
    assert cells["0"] == ["b200", "8gpu-dpa-ep8"]  # aggregated: as before
    assert {r[0]: r[4] for r in _rows(front)}["1"] == "h200-sxm / gb200-nvl72 + ffn gb200-nvl72"
    assert "an attention-FFN design's decode pool is its attention pool" in best
    assert "an attention-FFN design's decode pool is its attention pool" in front
    # a four-stage design whose placement has no midfill pool (it is optional) shows none
    pools = pl.concat(
        [_split_pools(), _split_pools().filter(pl.col("trial") == 1).with_columns(trial=pl.lit(2, pl.Int64))]
    )
    md = write_report(
        tmp_path / "o", spec=spec, objectives=OBJECTIVES, tables={**tables, "placements": pools}, best=None
    ).read_text()
    assert {r[0]: r[4] for r in _rows(_section(md, "## Best designs"))}["2"] == (
        "b200 / gb200-nvl72 + ffn gb200-nvl72"
    )
    plain = write_report(
        tmp_path / "p", spec=spec, objectives=OBJECTIVES, tables=_tables(), best=None
    ).read_text()
    assert " + ffn" not in plain and " + midfill" not in plain and "attention-FFN" not in plain


def test_a_grids_design_names_its_expert_pool(tmp_path: Path) -> None:
    trials = _grid_trials().with_columns(
        p_topology=pl.Series(["afd", "disaggregated", "aggregated", "aggregated"])
    )
    pools = _split_pools().with_columns(trial=pl.lit(0, pl.Int64))
    (tmp_path / "g.toml").write_text(DYNAMICS_GRID)
    tables = {k: pl.DataFrame() for k in ("pareto", "kv_tiers", "sim_timeseries")}
    md = write_report(
        tmp_path / "report",
        spec=load_study(tmp_path / "g.toml"),
        objectives=[("ttft_p99_s", "minimize")],
        tables={**tables, "trials": trials, "placements": pools},
        best=None,
    ).read_text()
    designs = {r[2] for r in _rows(_section(md, "## Grid"))}
    assert "afd: h200-sxm/8gpu-dpa-ep8 + h200-sxm/8gpu-dpa-ep8 + ffn gb200-nvl72/32gpu-dpa-ep32" in designs
    assert "disaggregated: h200-bw150/8gpu-dpa-ep8 + h200-bw150/16gpu-dpa-ep16" in designs


class _Kept:
    """A drawer that keeps what it is asked to draw, so a test reads the figures' labels."""

    def __init__(self) -> None:
        self.jobs: dict[str, tuple[Any, tuple[Any, ...]]] = {}

    def draw(self, path: Path, build: Any, args: tuple[Any, ...]) -> None:
        self.jobs[path.name] = (build, args)

    def finish(self) -> None:
        pass


def test_a_p99_grids_latency_objective_says_p99_in_every_label(tmp_path: Path) -> None:
    """A grid at percentile 99 whose objective is ttft_pct_s named it bare in the overview
    ("ttft_pct_s (s, minimize)"), the axis effects, the what-if table and both figures: nothing
    said it was a p99 (a p50 study's column has the same name)."""
    (tmp_path / "g.toml").write_text(
        DYNAMICS_GRID.replace('names = ["ttft_p99_s"]', 'names = ["ttft_pct_s"]').replace(
            "tpot_s = 0.05\n", "tpot_s = 0.05\npercentile = 99.0\n", 1
        )
    )
    grid = load_study(tmp_path / "g.toml")
    assert grid.slo.percentile == 99.0
    trials = _grid_trials().with_columns(objective_ttft_pct_s=pl.col("ttft_pct_s"))
    tables = {k: pl.DataFrame() for k in ("pareto", "placements", "kv_tiers", "sim_timeseries")}
    kept = _Kept()
    md = write_report(
        tmp_path / "report", spec=grid, objectives=[("ttft_pct_s", "minimize")],
        tables={**tables, "trials": trials}, best=None, drawer=kept,
    ).read_text()  # fmt: skip
    said = "ttft_pct_s (TTFT p99, s"
    assert f"- **Objectives:** {said}, minimize)" in md.splitlines()
    effects = _section(md, "## Effect of each axis")
    assert f"median {said})" in effects.splitlines()[4]
    whatif = _section(md, "## What-if hardware")
    assert f"base {said})" in whatif and f"variant {said})" in whatif
    assert f"![{said}) across hardware" in md
    import matplotlib.pyplot as plt

    for name, label in (("grid.png", f"{said})"), ("whatif.png", "ttft_pct_s (TTFT p99) change vs base, %")):
        build, args = kept.jobs[name]
        fig = build(*args)
        assert fig.axes[0].get_ylabel() == label
        plt.close(fig)


def test_a_p50_studys_pareto_front_names_its_latency_objectives_statistic(
    tmp_path: Path, spec: StudySpec
) -> None:
    """The front's columns are the objectives: ttft_pct_s at the study's p50, tpot_s a mean."""
    tables = _tables()
    pareto = tables["pareto"].with_columns(objective_ttft_pct_s=pl.lit(0.4), objective_tpot_s=pl.lit(0.03))
    at50 = dataclasses.replace(spec, slo=dataclasses.replace(spec.slo, percentile=50.0))
    objectives = [*OBJECTIVES, ("ttft_pct_s", "minimize"), ("tpot_s", "minimize")]
    md = write_report(
        tmp_path, spec=at50, objectives=objectives, tables={**tables, "pareto": pareto}, best=None
    ).read_text()
    header = _section(md, "## Pareto front").split("\n\n")[2].splitlines()[0]
    assert "| ttft_pct_s (TTFT p50, s, minimize) | tpot_s (TPOT mean, s, minimize) |" in header


def test_a_live_cache_difference_that_rounds_to_nothing_reads_plus_zero() -> None:
    """A tier found 0.02 points less often in the live cache than planned had read "-0.0"."""
    from dse.study.report import _kv_cache_table

    table = _kv_cache_table({"hbm": (0.5, 0.4998), "drop": (0.1, 0.12)})
    assert "| hbm | 50.0% | 50.0% | +0.0 |" in table and "-0.0" not in table


def test_binding_constraints_that_differ_in_hardware_or_shape_are_counted_apart() -> None:
    """The numbers a name holds (b200 and b300, 16gpu and 32gpu) had been taken out with the
    measures, so one row had counted another GPU's or shape's failures as its own."""
    from dse.study.report import _binding_section

    def text(hw: str, shape: str, share: str, ms: str) -> str:
        return f"no mixed unit: {hw} {shape}: at prefill share {share}: TPOT 40 ms cannot be met: {ms} ms"

    texts = [
        text("b300", "16gpu-dpa-ep16", "0.58", "73.7"),
        text("b300", "16gpu-dpa-ep16", "0.49", "61.5"),
        text("b200", "32gpu-dpa-ep32", "0.35", "46.9"),
        text("b300", "64gpu-dpa-ep64", "0.31", "1.2e+03"),
        "ttft_s: TTFT p99 413 s against 2 s",
        "ttft_s: TTFT p99 1.54e+03 s against 2 s",
    ]
    trials = pl.DataFrame({"feasible": [False] * len(texts), "binding": texts})
    rows = _rows(_section(_binding_section(trials), "## Binding constraints"))
    assert [r[1] for r in rows] == ["2", "2", "1", "1"]
    assert {r[0] for r in rows if r[1] == "2"} == {texts[0], texts[4]}


def test_a_cost_per_million_tokens_keeps_four_significant_figures(spec: StudySpec) -> None:
    """$0.01449 and $0.01115 per million tokens had read 0.014 and 0.011 (3% off), five designs
    that differ by 0.3% all 0.015, beside a sentence saying one beat another by 0.0021%."""
    from dse.study.markdown import COST_SPEC, fmt
    from dse.study.report import _trial_columns

    (cost,) = [s for _, key, s, _ in _trial_columns(spec) if key == "usd_per_million_tokens"]
    assert cost == COST_SPEC  # the grid's table too
    assert [fmt(x, cost) for x in (0.01449, 0.01115, 1.2086, 38.46)] == [
        "0.01449",
        "0.01115",
        "1.209",
        "38.46",
    ]
