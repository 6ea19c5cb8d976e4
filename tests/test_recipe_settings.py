"""The engine settings of the InferenceX runs (dse/perf/recipe_settings.csv): each names one run of
the reference file, cites the script or recipe it was read from, parses, and reaches the fit."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest

from dse.perf import calibration as cal
from dse.perf.benchmark_rows import (
    ENGINE_COLUMNS,
    RECIPE_KEY,
    RECIPE_SETTINGS,
    parse_row,
    with_recipe_settings,
)

REF = Path(__file__).resolve().parents[2] / "shared" / "reference" / "inferencex_calibration.csv"
# owner/repo:path@commit, and which entry of a file of many
SOURCE = re.compile(r"^[\w.-]+/[\w.-]+:[\w./+-]+@[0-9a-f]{40}( \([^)]*\))?$")


@pytest.fixture(scope="module")
def reference() -> list[dict[str, str]]:
    if not REF.exists():
        pytest.skip(f"{REF} is not here")
    with open(REF, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def settings() -> list[dict[str, str]]:
    with open(RECIPE_SETTINGS, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_each_setting_names_one_run_and_its_source(
    reference: list[dict[str, str]], settings: list[dict[str, str]]
) -> None:
    runs = {tuple(r[c] for c in RECIPE_KEY) for r in reference}
    keys = [tuple(s[c] for c in RECIPE_KEY) for s in settings]
    assert settings and len(set(keys)) == len(keys)
    assert not [k for k in keys if k not in runs], "settings for a run the reference file does not have"
    assert all(SOURCE.match(s["source"]) for s in settings), [s["source"] for s in settings][:3]
    assert all(any(s[c] for c in ENGINE_COLUMNS) for s in settings)  # no empty entry


def test_settings_parse_and_fill_only_empty_engine_cells(
    catalog, reference: list[dict[str, str]], settings: list[dict[str, str]]
) -> None:  # type: ignore[no-untyped-def]
    merged = with_recipe_settings(reference)
    assert len(merged) == len(reference)
    filled = [(r, m) for r, m in zip(reference, merged, strict=True) if r != m]
    assert len(filled) == len(settings)
    for raw, row in filled:
        assert {k for k in row if row[k] != raw.get(k)} <= set(ENGINE_COLUMNS)
        if raw["prefill_num_workers"] != "0" or raw["disagg"] != "True":
            parse_row(row, catalog)  # a setting the model refuses would drop its run from the fit
    # a cell the row has already wins
    mtp = next(r for r, m in filled if m.get("mtp_draft_tokens"))
    again = with_recipe_settings([dict(mtp, mtp_draft_tokens="7")])[0]
    assert again["mtp_draft_tokens"] == "7"


def test_the_fit_sees_the_settings(catalog) -> None:  # type: ignore[no-untyped-def]
    if not REF.exists():
        pytest.skip(f"{REF} is not here")
    with_settings, _ = cal.read_measured(REF, catalog)
    without, _ = cal.read_measured(REF, catalog, settings=None)
    assert len(with_settings) == len(without)
    drafts = {m.row.mtp_draft for m in with_settings if m.row.mtp}
    assert {1.0, 2.0, 3.0} <= drafts and all(m.row.mtp_draft is None for m in without)
    assert any(m.row.kv_precision is not None for m in with_settings)
    assert any(m.row.decode_max_running < float("inf") for m in with_settings)


def test_error_sources_vanish_on_the_models_own_figures(catalog) -> None:  # type: ignore[no-untyped-def]
    """Rows whose 'measured' figures are the model's own predictions: Little's law holds on them
    and the TPOT at their decode batch is the predicted one, so both error sources are ~0; a
    wrong batch (e.g. counting the prefill GPUs) would not give that back."""
    from dse.perf.benchmark_rows import predict_rows
    from dse.perf.params import load_params

    if not REF.exists():
        pytest.skip(f"{REF} is not here")
    params = load_params()
    with open(REF, newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["prefill_num_workers"] != "0" or r["disagg"] != "True"]
    picked = rows[:: max(1, len(rows) // 24)]
    own = []
    for row in predict_rows(picked, catalog, params):
        if row["pred_error"]:
            continue
        own.append(
            cal.Measured(
                parse_row(row, catalog),
                float(row["pred_tput_per_gpu"]),
                float(row["pred_intvty_tok_s_user"]),
                {
                    "median_tpot_ms": str(row["pred_tpot_ms"]),
                    "median_ttft_s": str(row["pred_ttft_s"]),
                    "output_tput_per_gpu": str(row["pred_output_tput_per_gpu"]),
                },
            )
        )
    assert len(own) >= 20 and {m.row.disagg for m in own} == {True, False}
    little, step = cal.error_sources(own, catalog, params)
    assert np.nanmax(np.abs(little)) < 0.01  # rounding of the printed figures only
    assert np.nanmax(np.abs(step)) < 0.01


def test_littles_law_counts_the_expert_pool_of_an_attention_ffn_row(catalog) -> None:  # type: ignore[no-untyped-def]
    from dse.perf.benchmark_rows import predict_rows
    from dse.perf.params import load_params

    afd = dict(
        hardware="b200", framework="sglang", model="dsr1", precision="fp8", spec_method="none",
        disagg="True", isl="4000", osl="1000", conc="512", prefill_tp="8", prefill_ep="8",
        prefill_dp_attention="True", prefill_num_workers="2", num_prefill_gpu="16", decode_tp="8",
        decode_ep="8", decode_dp_attention="True", decode_num_workers="2", num_decode_gpu="16",
        num_ffn_gpu="16", ffn_num_workers="1", ffn_ep="16",
    )  # fmt: skip
    row = predict_rows([afd], catalog, load_params())[0]
    own = cal.Measured(
        parse_row(row, catalog),
        float(row["pred_tput_per_gpu"]),
        float(row["pred_intvty_tok_s_user"]),
        {"median_tpot_ms": str(row["pred_tpot_ms"]), "median_ttft_s": str(row["pred_ttft_s"])},
    )
    little, _ = cal.error_sources([own], catalog, load_params())
    assert abs(little[0]) < 0.01
