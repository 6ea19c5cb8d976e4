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
    LAUNCHED,
    NO_CAP,
    PARALLEL_COLUMNS,
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
    # SGLang MTP runs the file does not name: their launches' caps are not known either, so the
    # KV cache alone caps them ("none"), not SGLang's default of 48 a server
    unknown = [m for _, m in filled if m.get(ENGINE_COLUMNS[0]) == NO_CAP]
    assert all(m["spec_method"] == "mtp" and "sglang" in m["framework"] for m in unknown)
    assert not any(m.get(c) for m in unknown for c in ENGINE_COLUMNS[1:])
    assert len(filled) - len(unknown) == len(settings) and len(unknown) >= 10
    assert all(c <= {*ENGINE_COLUMNS, WARMUP_COLUMN, *PARALLEL_COLUMNS} for c in changed)
    # the parallelism changes only where a setting says what the run's script launched
    relaunched = sum(any(s[LAUNCHED + c] for c in PARALLEL_COLUMNS) for s in settings)
    assert sum(bool(c & set(PARALLEL_COLUMNS)) for c in changed) == relaunched >= 4
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
    # Dynamo-SGLang's GB200 low-latency scripts of 2025-12 serve TP4 instances, whatever the rows say
    low = [m.row for m in with_settings if m.row.hardware == "gb200-nvl72" and m.raw["date"] < "2026"
           and m.row.engine == "sglang" and m.row.decode.gpus == 4 and m.row.isl > 4000]  # fmt: skip
    assert len(low) == 4 and all((r.decode.attn_tp, r.decode.ep) == (4.0, 1.0) for r in low)
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


def test_the_launched_parallelism_replaces_the_rows(catalog, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A run whose script launched tensor-parallel attention and MoE on its 4-GPU instances, where
    its row (as InferenceX's config recorded it) says attention data parallelism: it is modelled
    as launched, and only where a setting names it."""
    row = {
        "hardware": "gb200", "framework": "dynamo-sglang", "model": "dsr1", "precision": "fp8",
        "spec_method": "none", "disagg": "True", "isl": "8192", "osl": "1024", "conc": "4",
        "prefill_tp": "1", "prefill_ep": "1", "prefill_dp_attention": "True", "prefill_num_workers": "1",
        "num_prefill_gpu": "4", "decode_tp": "1", "decode_ep": "1", "decode_dp_attention": "True",
        "decode_num_workers": "1", "num_decode_gpu": "4", "date": "2025-12-21",
    }  # fmt: skip
    launched = {f"{LAUNCHED}{side}_{c}": v for side in ("prefill", "decode")
                for c, v in (("tp", "4"), ("ep", "1"), ("dp_attention", "False"))}  # fmt: skip
    path = tmp_path / "settings.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=[*RECIPE_KEY, *ENGINE_COLUMNS, *launched, "source"])
        writer.writeheader()
        writer.writerow(
            {**{c: row[c] for c in RECIPE_KEY}, "kv_cache_dtype": "fp8", **launched, "source": "x"}
        )
    as_recorded = parse_row(row, catalog)
    assert (as_recorded.decode.attn_tp, as_recorded.decode.ep) == (1.0, 4.0)  # DP attention, EP4
    merged = with_recipe_settings([row, dict(row, conc="8")], path)
    assert merged[0]["decode_dp_attention"] == "False" and merged[1] == dict(row, conc="8")
    as_run = parse_row(merged[0], catalog)
    for pool in (as_run.decode, as_run.prefill):
        assert pool is not None and (pool.gpus, pool.attn_tp, pool.ep) == (4.0, 4.0, 1.0)


def test_sglang_with_mtp_runs_48_a_server_where_its_launch_sets_no_cap(
    catalog, settings: list[dict[str, str]]
) -> None:  # type: ignore[no-untyped-def]
    """SGLang resets an unset --max-running-requests to 48 for speculative decoding
    (server_args.py), each attention-DP rank a whole share of it. InferenceX's MI355X MTP script
    sets none: its run at 64 clients measured a median TTFT of 4.3 s, 16 requests always waiting
    for a slot, where the KV cache alone had let all 64 in (0.14 s simulated)."""
    from dse.perf.benchmark_rows import PoolSpec, engine_running_cap

    tp8, dp8, dp64 = PoolSpec(8, 8, 8, 1), PoolSpec(8, 1, 8, 1), PoolSpec(64, 1, 64, 1)
    hw = catalog.hardware("mi355x")
    assert engine_running_cap("sglang", True, tp8, hw) == 48.0
    assert engine_running_cap("sglang", True, dp8, hw) == 48.0  # 6 a rank
    assert engine_running_cap("sglang", True, PoolSpec(5, 1, 5, 1), hw) == 45.0  # 9 a rank
    assert engine_running_cap("sglang", True, dp64, hw) == 64.0  # a rank runs one at least
    assert engine_running_cap("sglang", False, tp8, hw) == float("inf")
    # the other engines' own caps (dse.perf.frameworks), whatever MTP: each rank the whole of it
    assert engine_running_cap("trt", True, tp8, hw) == 2048.0
    assert engine_running_cap("vllm", True, tp8, hw) == 1024.0
    runs, _ = cal.read_measured(INFERENCEX, catalog)
    named = {tuple(s[c] for c in RECIPE_KEY) for s in settings}
    mi355x = [m for m in runs if m.row.hardware == "mi355x" and m.row.engine == "sglang" and m.row.mtp
              and tuple(m.raw[c] for c in RECIPE_KEY) in named]  # fmt: skip
    assert len(mi355x) == 3 and {m.row.decode_max_running for m in mi355x} == {48.0}
    # one a launch not known: no cap but the KV cache, as the fit always read it
    speculative = [m.row for m in runs if m.row.engine == "sglang" and m.row.mtp]
    assert any(r.decode_max_running == float("inf") for r in speculative)
    row = {k: v for k, v in mi355x[0].raw.items() if k != ENGINE_COLUMNS[0]}
    assert parse_row({**row, ENGINE_COLUMNS[0]: NO_CAP}, catalog).decode_max_running == float("inf")
    assert parse_row({**row, ENGINE_COLUMNS[0]: "64"}, catalog).decode_max_running == 64.0
    assert parse_row(row, catalog).decode_max_running == 48.0
