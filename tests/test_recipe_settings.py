"""The engine settings of the InferenceX runs (dse/perf/recipe_settings.csv): each names one run of
the reference file, cites the script or recipe it was read from, parses, and reaches the fit."""

from __future__ import annotations

import csv
import re

import pytest

from dse.calibration import fit as cal
from dse.paths import MEASURED_RUNS as INFERENCEX  # the measured runs, vendored in reference/
from dse.perf.benchmark_rows import (
    ENGINE_COLUMNS,
    HARNESS_WARMUP_SINCE,
    RECIPE_KEY,
    RECIPE_SETTINGS,
    WARMUP_COLUMN,
    parse_row,
    with_recipe_settings,
)

# owner/repo:path@commit, and which entry of a file of many
SOURCE = re.compile(r"^[\w.-]+/[\w.-]+:[\w./+-]+@[0-9a-f]{40}( \([^)]*\))?$")


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
    changed = [{k for k in m if m[k] != r.get(k)} for r, m in zip(reference, merged, strict=True)]
    filled = [(r, m) for r, m, c in zip(reference, merged, changed, strict=True) if c & set(ENGINE_COLUMNS)]
    assert len(filled) == len(settings)
    assert all(c <= {*ENGINE_COLUMNS, WARMUP_COLUMN} for c in changed)
    # InferenceX's single-node harness sent no warm-up before 2026-01-21; the multi-node one did
    unwarmed = [r["disagg"] == "False" and r["date"] < HARNESS_WARMUP_SINCE for r in reference]
    assert [WARMUP_COLUMN in c for c in changed] == unwarmed and sum(unwarmed) >= 10
    assert {m[WARMUP_COLUMN] for m, u in zip(merged, unwarmed, strict=True) if u} == {"none"}
    for raw, row in filled:
        if raw["prefill_num_workers"] != "0" or raw["disagg"] != "True":
            parse_row(row, catalog)  # a setting the model refuses would drop its run from the fit
    # a cell the row has already wins
    mtp = next(r for r, m in filled if m.get("mtp_draft_tokens"))
    again = with_recipe_settings([dict(mtp, mtp_draft_tokens="7")])[0]
    assert again["mtp_draft_tokens"] == "7"


def test_the_fit_sees_the_settings(catalog) -> None:  # type: ignore[no-untyped-def]
    if not INFERENCEX.exists():
        pytest.skip(f"{INFERENCEX} is not here")
    with_settings, _ = cal.read_measured(INFERENCEX, catalog)
    without, _ = cal.read_measured(INFERENCEX, catalog, settings=None)
    assert len(with_settings) == len(without)
    drafts = {m.row.mtp_draft for m in with_settings if m.row.mtp}
    assert {1.0, 2.0, 3.0} <= drafts and all(m.row.mtp_draft is None for m in without)
    assert any(m.row.kv_precision is not None for m in with_settings)
    assert any(m.row.decode_max_running < float("inf") for m in with_settings)
    # InferenceX's B200 SGLang scripts look for new requests every 30 decode steps from 16 clients
    looks = {(m.row.conc >= 16, m.row.recv_interval) for m in with_settings if m.row.recv_interval > 1}
    assert looks == {(True, 30.0), (False, 10.0), (True, 10.0)}
    # InferenceX's TensorRT-LLM scripts balance attention-DP ranks for 60 iterations at most
    balanced = sorted((m.row.hardware, m.row.conc) for m in with_settings if m.row.adp_balance == 60.0)
    assert balanced == [("b200", 64.0), ("b200", 128.0), ("b200", 256.0), ("h200-sxm", 256.0)]
    assert all(m.row.adp_balance in (0.0, 60.0) for m in with_settings)
    # the benchmark's warm-up: none before the single-node harness sent one, then copies of one
    # prompt; the multi-node harness's run of random prompts on every disaggregated run
    warmups = {(m.row.disagg, m.raw["date"] >= HARNESS_WARMUP_SINCE, m.row.warmup) for m in with_settings}
    assert warmups == {
        (False, False, "none"),
        (False, True, "one-prompt"),
        (True, False, "random"),
        (True, True, "random"),
    }
    assert {m.row.warmup for m in without} == {"one-prompt", "random"}
