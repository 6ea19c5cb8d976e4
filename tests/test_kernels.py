"""The measured-kernel tier (dse.perf.kernels): AIConfigurator's tables read right and interpolated
without overshoot, scaled for what-if variants, the datasheet path where they are missing or
broken, and the tier chosen by the calibration and reported by dse predict."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import Cli

from dse.catalog import Catalog
from dse.perf import kernel_data, kernels
from dse.perf.afd import attention_side, ffn_side
from dse.perf.kernels import GRID_1D, STEP_1D, KernelKey, kernel_row
from dse.perf.params import load_params
from dse.perf.pool import Pool, build_pool, kernel_key
from dse.perf.stages import forward_cost
from dse.study.spec import Variant
from dse.study.variants import variant_hardware
from dse.units import Precision

FP8 = Precision.FP8


@pytest.fixture(autouse=True)
def fresh_tables() -> Iterator[None]:
    """Each test reads the tables (and meets their problems) afresh."""

    def clear() -> None:
        kernel_data.read_table.cache_clear()
        kernels.kernel_row.cache_clear()
        kernels._gemm_cache.clear()
        kernel_data._problems.clear()

    clear()
    yield
    clear()


def _key(catalog: Catalog, hardware: str = "h200", engine: str = "sglang", **shape: float) -> KernelKey:
    model = catalog.model("deepseek-v3")
    from dse.perf.pool import ModelTerms

    key = kernel_key(
        model, ModelTerms.of(model), catalog.hardware(hardware), engine, None, FP8, Precision.BF16,
        shape.get("gpus", 8.0), shape.get("attn_tp", 8.0), shape.get("ep", 8.0),
    )  # fmt: skip
    assert key is not None
    return key


def _measured_gemm(n: int, k: int) -> pl.DataFrame:
    found = kernel_data.table_versions("h200_sxm", "gemm", "sglang", "gemm_perf")
    version = kernel_data.preferred_versions(found, None)[0]
    df = kernel_data.read_table("h200_sxm", "gemm", "sglang", version, "gemm_perf")
    assert df is not None
    return (
        df.filter((pl.col("gemm_dtype") == "fp8_block") & (pl.col("n") == n) & (pl.col("k") == k))
        .group_by("m")
        .agg(pl.col("latency").min())
        .sort("m")
    )


def test_a_measured_gemm_is_priced_at_its_measured_time(catalog: Catalog) -> None:
    """At a shape and a row count the table measured, the GEMM curve gives the measured time
    exactly; between two measured row counts it stays between their times (no overshoot)."""
    measured = _measured_gemm(2048, 7168)
    key = replace(_key(catalog), gemm_shapes=((2048.0, 7168.0, 1.0),))
    curve = kernel_row(key).gemm
    assert curve is not None
    m, seconds = measured["m"].to_numpy(), measured["latency"].to_numpy() * 1e-3
    on_grid = 0
    for mm, s in zip(m, seconds, strict=True):
        idx = np.log2(mm) / STEP_1D
        if idx == round(idx) and idx < len(GRID_1D):
            assert curve[int(idx)] == pytest.approx(s, rel=1e-9)
            on_grid += 1
    assert on_grid >= 10
    inside = (GRID_1D > m[0]) & (GRID_1D < m[-1])
    for x, value in zip(GRID_1D[inside], curve[inside], strict=True):
        j = np.searchsorted(m, x)
        lo, hi = sorted((seconds[j - 1], seconds[j]))
        assert lo * (1 - 1e-12) <= value <= hi * (1 + 1e-12), x
    # two GEMMs of the same shape take twice as long
    double = replace(key, gemm_shapes=((2048.0, 7168.0, 2.0),))
    assert kernel_row(double).gemm == pytest.approx(2.0 * curve)


def test_ratio_on_grid_holds_the_end_ratios_beyond_the_measured_range() -> None:
    xs = np.array([4.0, 16.0])
    measured = np.array([2.0, 4.0])
    roof = np.array([1.0, 4.0])  # ratios 2 and 1
    grid = np.array([1.0, 4.0, 8.0, 16.0, 64.0])
    ratio = kernels._ratio_on_grid(xs, measured, roof, grid, roof_grid=np.array([0.25, 1.0, 2.0, 4.0, 16.0]))
    assert ratio[0] == pytest.approx(2.0) and ratio[-1] == pytest.approx(1.0)  # flat beyond
    assert ratio[1] * 1.0 == pytest.approx(2.0) and ratio[3] * 4.0 == pytest.approx(4.0)  # exact at data
    assert ratio[2] * 2.0 == pytest.approx(np.sqrt(2.0 * 4.0))  # log-log between


def test_each_op_names_the_table_and_version_that_priced_it(catalog: Catalog) -> None:
    pool = build_pool(
        catalog.model("deepseek-v3"), [catalog.hardware("h200"), catalog.hardware("mi355x")],
        gpus=[8, 8], attn_tp=[8, 8], ep=[8, 8], weight_precision=[FP8, FP8], kv_precision=[FP8, FP8],
        engines=["sglang", "sglang"], engine_versions=["0.5.12", None],
    )  # fmt: skip
    assert pool.kernels is not None
    h200, mi355x = pool.kernels.sources
    assert h200["moe"] == "measured h200_sxm sglang 0.5.10"  # the newest measured not newer than 0.5.12
    assert h200["gemm"] == "measured h200_sxm sglang 0.5.14"  # the only one measured
    assert set(mi355x.values()) == {"datasheet"}


def test_versions_nearest_the_run_are_tried_first() -> None:
    versions = ["0.5.6.post2", "0.5.10", "0.5.14", "0.5.9"]
    assert kernel_data.preferred_versions(versions, "0.5.12") == ["0.5.10", "0.5.9", "0.5.6.post2", "0.5.14"]
    assert kernel_data.preferred_versions(versions, "0.5.1") == ["0.5.6.post2", "0.5.9", "0.5.10", "0.5.14"]
    assert kernel_data.preferred_versions(versions, None)[0] == "0.5.14"
    assert kernel_data.version_key("1.3.0rc20") < kernel_data.version_key("1.3.0")
    assert kernel_data.version_key("0.5.12") < kernel_data.version_key("0.5.12.post1")
    assert kernel_data.image_version("lmsysorg/sglang:v0.5.12-cu130") == "0.5.12"
    assert kernel_data.image_version("nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc14") == "1.3.0rc14"
    assert kernel_data.image_version("nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post2") is None


def _step(catalog: Catalog, hardware: object, tier: str, tokens: float, engines: list[str] | None) -> float:
    pool = build_pool(
        catalog.model("deepseek-v3"), [hardware], gpus=[8], attn_tp=[8], ep=[8],
        weight_precision=[FP8], kv_precision=[FP8], engines=engines,
    )  # fmt: skip
    p = replace(load_params(), kernels=tier)
    t = np.array([tokens])
    return float(forward_cost(pool, p, tokens=t, sequences=t, context=t * 0 + 2000, prefill=False,
                              speed=np.ones(1)).total_s[0])  # fmt: skip


def test_a_gpu_without_tables_takes_the_datasheet_path_unchanged(catalog: Catalog) -> None:
    mi355x, h200 = catalog.hardware("mi355x"), catalog.hardware("h200")
    for tokens in (1.0, 64.0, 4096.0):
        datasheet = _step(catalog, mi355x, "datasheet", tokens, None)
        assert _step(catalog, mi355x, "measured", tokens, ["sglang"]) == datasheet
        # and the datasheet tier ignores the tables of a GPU that has them
        with_tables = _step(catalog, h200, "datasheet", tokens, ["sglang"])
        assert with_tables == _step(catalog, h200, "datasheet", tokens, None)
    assert _step(catalog, h200, "measured", 64.0, ["sglang"]) != _step(catalog, h200, "datasheet", 64.0, None)


def test_a_gpu_folder_the_tables_lack_is_one_line_and_the_datasheet_path(catalog: Catalog) -> None:
    """A catalog entry's measured_kernels that names no folder of the tables (a slip: b200-sxm for
    b200_sxm) prices from the datasheet, as it did, and now says so."""
    slip = replace(catalog.hardware("b200"), measured_kernels="b200-sxm")
    datasheet = _step(catalog, catalog.hardware("b200"), "datasheet", 64.0, None)
    assert _step(catalog, slip, "measured", 64.0, ["trt"]) == datasheet
    (line,) = kernel_data.problems()
    assert line.startswith("hardware b200: measured_kernels = 'b200-sxm' names no GPU folder of ")
    assert "b200_sxm" in line and line.endswith("its ops are priced from the datasheet")


def test_a_what_if_variant_scales_the_measured_time_by_its_datasheet(catalog: Catalog) -> None:
    """+50% HBM bandwidth: a single-token step's GEMMs read weights, so their measured time falls
    by the ratio of the rooflines, 1.5x, while the compute-bound large batch barely moves."""
    h200 = catalog.hardware("h200")
    faster = variant_hardware(h200, Variant(id="h200-bw", base="h200-sxm", hbm_bandwidth_scale=1.5))
    p = replace(load_params(), kernels="measured", launch_saving_us=0.0, measured_scale=1.0)

    def gemm_s(hw: object, tokens: float) -> float:
        pool = build_pool(
            catalog.model("deepseek-v3"), [hw], gpus=[8], attn_tp=[8], ep=[8],
            weight_precision=[FP8], kv_precision=[FP8], engines=["sglang"],
        )  # fmt: skip
        t = np.array([tokens])
        return float(forward_cost(pool, p, tokens=t, sequences=t, context=t, prefill=False,
                                  speed=np.ones(1)).gemm_s[0])  # fmt: skip

    assert gemm_s(h200, 1.0) / gemm_s(faster, 1.0) == pytest.approx(1.5, rel=1e-6)
    assert gemm_s(h200, 16384.0) / gemm_s(faster, 16384.0) < 1.1


def test_an_override_by_id_with_more_bandwidth_is_priced_as_a_variant(tmp_path: Path) -> None:
    """A user's h200-sxm.toml that raises HBM bandwidth 1.5x keeps the shipped tables'
    folder: they were measured at the shipped bandwidth, so the override scales them as a variant
    does (it had kept the measured times, and more bandwidth could predict less)."""
    from dse.catalog import load_catalog
    from dse.paths import SHIPPED_HARDWARE

    folder = tmp_path / "hardware"
    folder.mkdir()
    text = (SHIPPED_HARDWARE / "h200-sxm.toml").read_text()
    shipped = load_catalog(use_env=False).hardware("h200-sxm")
    old = f"bandwidth_tb_per_s = {shipped.hbm.bandwidth_tb_per_s:g}"
    assert old in text
    faster = f"bandwidth_tb_per_s = {1.5 * shipped.hbm.bandwidth_tb_per_s:g}"
    (folder / "h200-sxm.toml").write_text(text.replace(old, faster))
    override = load_catalog([tmp_path], use_env=False).hardware("h200-sxm")
    assert override.measured_hbm_tb_per_s == shipped.hbm.bandwidth_tb_per_s
    assert shipped.measured_hbm_tb_per_s is None  # the shipped GPU itself: its own tables
    p = replace(load_params(), kernels="measured", launch_saving_us=0.0, measured_scale=1.0)

    def gemm_s(hw: object) -> float:
        pool = build_pool(
            load_catalog(use_env=False).model("deepseek-v3"), [hw], gpus=[8], attn_tp=[8], ep=[8],
            weight_precision=[FP8], kv_precision=[FP8], engines=["sglang"],
        )  # fmt: skip
        t = np.ones(1)
        return float(forward_cost(pool, p, tokens=t, sequences=t, context=t, prefill=False,
                                  speed=np.ones(1)).gemm_s[0])  # fmt: skip

    assert gemm_s(shipped) / gemm_s(override) == pytest.approx(1.5, rel=1e-6)


def _broken_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of H200's SGLang tables whose GEMM table is not Parquet."""
    root = kernel_data.data_root()
    assert root is not None
    for folder in ("gemm", "moe", "mla"):
        shutil.copytree(root / "h200_sxm" / folder / "sglang", tmp_path / "h200_sxm" / folder / "sglang")
    bad = tmp_path / "h200_sxm" / "gemm" / "sglang" / "0.5.14" / "gemm_perf.parquet"
    bad.write_bytes(b"PAR1 this is not a parquet file")
    for other in (tmp_path / "h200_sxm" / "gemm" / "sglang").iterdir():
        if other.name != "0.5.14":
            shutil.rmtree(other)
    monkeypatch.setattr(kernel_data, "data_root", lambda: tmp_path)
    return bad


def test_a_corrupt_table_is_one_line_naming_it_and_the_datasheet_prices_the_op(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = _broken_tables(tmp_path, monkeypatch)
    row = kernel_row(_key(catalog))
    assert row.gemm is None and row.moe is not None
    assert row.source(_key(catalog))["gemm"] == "datasheet"
    (line,) = kernel_data.problems()
    assert str(bad) in line and "not a readable Parquet table" in line and "\n" not in line


def test_without_the_package_every_op_is_priced_from_the_datasheet(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kernel_data.importlib.util, "find_spec", lambda name: None)
    pool = build_pool(
        catalog.model("deepseek-v3"), [catalog.hardware("h200")], gpus=[8], attn_tp=[8], ep=[8],
        weight_precision=[FP8], kv_precision=[FP8], engines=["sglang"],
    )  # fmt: skip
    assert pool.kernels is None
    (line,) = kernel_data.problems()
    assert line == "aiconfigurator-core is not installed: every op is priced from the datasheet"


def _measured_calibration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shipped calibration with the measured tier switched on (no refit), as the file
    `dse calibrate --kernels measured` writes would be named by DSE_CALIBRATION."""
    from dse.paths import CALIBRATION_FILE

    raw = json.loads(CALIBRATION_FILE.read_text())
    raw["kernels"] = "measured"
    file = tmp_path / "measured.json"
    file.write_text(json.dumps(raw))
    monkeypatch.setenv("DSE_CALIBRATION", str(file))
    return file


def test_predict_says_which_source_priced_each_op(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flags = ("predict", "--conc", "16", "--requests", "100")
    proc = cli(*flags, "--hardware", "h200", "--json")
    assert proc.code == 0, proc.err
    shipped = json.loads(proc.out)["kernels"]
    assert shipped["tier"] == "datasheet" and set(shipped["pools"]["instance"].values()) == {"datasheet"}
    _measured_calibration(tmp_path, monkeypatch)
    proc = cli(*flags, "--hardware", "h200", "--json")
    assert proc.code == 0, proc.err
    out = json.loads(proc.out)
    assert out["kernels"]["tier"] == "measured"
    decode = out["kernels"]["pools"]["instance"]
    assert decode["gemm"].startswith("measured h200_sxm sglang ") and decode["moe"].startswith("measured")
    assert out["expected_error"]["kernels"] == "measured"
    amd = json.loads(cli(*flags, "--hardware", "mi355x", "--json").out)["kernels"]["pools"]["instance"]
    assert set(amd.values()) == {"datasheet"}
    text = cli(*flags, "--hardware", "h200", "--disagg").out
    assert "ops priced by (measured tier):" in text
    assert "  prefill: gemm, moe, prefill attention: measured h200_sxm sglang" in text
    assert "(measured kernels, " in text.strip().splitlines()[-1]


def test_predict_lists_only_the_ops_each_pool_runs(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attention-FFN deployment's expert pool had listed decode and prefill attention and its
    attention pool the MoE, every pool every op: each lists its own (the prefill pool prefill's
    attention, the attention pool decode's and no experts, the expert pool the GEMMs and the MoE);
    a dense model's instance lists no MoE. The JSON holds the same ops."""
    flags = ("predict", "--conc", "16", "--requests", "100", "--hardware", "h200")

    def listed(*more: str) -> list[str]:
        proc = cli(*flags, *more)
        assert proc.code == 0, proc.err
        lines = proc.out.splitlines()
        at = lines.index(next(line for line in lines if line.startswith("ops priced by")))
        return [line for line in lines[at + 1 :] if line.startswith("  ") and not line.startswith("  note")]

    assert listed("--afd") == [
        "  prefill: gemm, moe, prefill attention: datasheet",
        "  decode: gemm, decode attention: datasheet",
        "  ffn: gemm, moe: datasheet",
    ]
    dense = listed("--model", "llama-3.1-70b")
    assert dense == ["  instance: gemm, decode attention, prefill attention: datasheet"]
    _measured_calibration(tmp_path, monkeypatch)
    measured = listed("--afd")
    assert [line.split(": measured h200_sxm sglang ")[0] for line in measured] == [
        "  prefill: gemm, moe, prefill attention",
        "  decode: gemm, decode attention",
        "  ffn: gemm, moe",
    ]
    pools = json.loads(cli(*flags, "--afd", "--json").out)["kernels"]["pools"]
    assert {k: list(v) for k, v in pools.items()} == {
        "prefill": ["gemm", "moe", "prefill_attention"],
        "decode": ["gemm", "decode_attention"],
        "ffn": ["gemm", "moe"],
    }


def test_predict_reports_a_corrupt_table_and_still_predicts(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = _broken_tables(tmp_path / "tables", monkeypatch)
    _measured_calibration(tmp_path, monkeypatch)
    proc = cli("predict", "--hardware", "h200", "--conc", "16", "--requests", "100")
    assert proc.code == 0, proc.err
    assert "Traceback" not in proc.err
    assert f"  note: {bad}: not a readable Parquet table" in proc.out
    assert "gemm: datasheet" in proc.out


def test_a_missing_or_bad_calibration_file_is_one_line(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSE_CALIBRATION", str(tmp_path / "nowhere.json"))
    proc = cli("predict", "--hardware", "h200")
    assert proc.code == 2 and "DSE_CALIBRATION" in proc.err and "nowhere.json" in proc.err
    file = _measured_calibration(tmp_path, monkeypatch)
    raw = json.loads(file.read_text())
    raw["kernels"] = "fast"
    file.write_text(json.dumps(raw))
    proc = cli("predict", "--hardware", "h200")
    assert proc.code == 2 and f"{file}: kernels = 'fast': must be one of datasheet, measured" in proc.err
    file.write_text("not json")
    proc = cli("predict", "--hardware", "h200")
    assert proc.code == 2 and len(proc.err.strip().splitlines()) == 1


@pytest.mark.e2e  # a whole calibration (about 13 s): beside the quick tests, which are the longer group
def test_calibrate_fits_the_measured_tier(cli: Cli, tmp_path: Path, two_gpu_runs: Path) -> None:
    """`dse calibrate --kernels measured` refits what stays calibrated on that tier and records it:
    on H200's runs alone (the tables' GPU of the two; with MI355X's as well the fit takes 80
    evaluations, 50 s, against 26), the measured-kernel scale and launch saving move off their
    starting values, and the file says which tier its figures belong to.

    The same fit reads its runs from a copy in another folder, with a row whose throughput is not a
    measured number > 0 and a row with such a latency figure (what reading the runs does, before
    either tier's fit): the copy still fits the shipped stage points (they were read from beside
    the runs' file, so a copy fitted none), the row is skipped with its reason, not fitted (a log
    of -5), and the figure is left out and said (it was silent)."""
    import csv

    with open(two_gpu_runs, newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["hardware"] == "h200"]
    rows[0]["tput_per_gpu_total"] = "-5"
    rows[1]["median_tpot_ms"] = "-5"
    data = tmp_path / "elsewhere.csv"
    with open(data, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    out = tmp_path / "measured.json"
    flags = ("--kernels", "measured", "--data", str(data), "--out", str(out), "--no-cross-validation")
    proc = cli("calibrate", *flags)
    assert proc.code == 0, proc.err
    assert "measured kernels ->" in proc.out
    fitted = json.loads(out.read_text())
    assert fitted["kernels"] == "measured" and fitted["provenance"]["kernels"] == "measured"
    assert fitted["params"]["measured_scale"] != 1.0 and fitted["params"]["launch_saving_us"] != 0.0
    assert load_params(out).kernels == "measured"
    assert "(1 skipped) and 7 stage points" in proc.out, proc.out
    skipped = "skipped: elsewhere.csv line 2: tput_per_gpu_total = '-5': must be a measured number > 0"
    assert skipped in proc.out
    left_out = "not a measurement: elsewhere.csv line 3: median_tpot_ms = '-5': must be a measured number > 0"
    assert left_out + " (left out; the row's other figures are fitted)" in proc.out
    assert "RuntimeWarning" not in proc.err


def _r1_pool(catalog: Catalog, attn_tp: float) -> Pool:
    """A DeepSeek-R1 decode instance of 8 H200s under SGLang, its measured curves built."""
    pool = build_pool(
        catalog.model("deepseek-r1"), [catalog.hardware("h200")], gpus=[8], attn_tp=[attn_tp], ep=[8],
        weight_precision=[FP8], kv_precision=[FP8], engines=["sglang"],
    )  # fmt: skip
    assert pool.kernels is not None
    return pool


def test_each_afd_pool_prices_the_dense_gemms_it_runs_under_the_measured_tier(catalog: Catalog) -> None:
    """An attention-FFN deployment's two pools had both kept the whole model's measured GEMMs:
    the attention pool priced the shared experts, dense FFNs, router and output head, the expert
    pool attention's q/kv/o projections, every dense GEMM on both (1.4x and 3.4x the FLOPs the
    fitted tier gives each). Each side now prices the FLOPs per token the fitted tier does
    (attention's projections; the rest), and between them every GEMM kernel of the instance
    once. The expert pool runs its dense GEMMs on its own tokens whatever the attention
    pool's tensor parallelism (a TP8 shape's FFN side had been priced at 0.61x)."""
    for attn_tp in (1.0, 8.0):
        whole = _r1_pool(catalog, attn_tp)
        sides = {"attention": attention_side(whole), "ffn": ffn_side(whole)}
        calls = 0.0
        for name, side in sides.items():
            k = side.kernels
            assert k is not None, name
            r = k.row_of[0]
            measured = k.gemm_flops_per_row[r] / side.attn_dp[0]
            fitted = 2.0 * side.model.params_dense_active / side.gpus[0]
            if name == "ffn" or attn_tp == 1.0:  # TP attention replicates q_a and kv_a on each rank
                assert measured == pytest.approx(fitted, rel=1e-9), (name, attn_tp)
            calls += k.gemm_calls[r]
        assert whole.kernels is not None
        assert calls == whole.kernels.gemm_calls[whole.kernels.row_of[0]]


def test_an_afd_decode_step_prices_each_measured_gemm_on_one_pool(catalog: Catalog) -> None:
    """Under the measured tier (launch saving 0, scale 1: the kernels' own seconds), the GEMM
    seconds of an attention-FFN instance's two sides add up to the whole instance's at the same
    batch: each measured GEMM is priced on one pool, none on both (they had added to 1.2-1.5x)."""
    p = replace(load_params(), kernels="measured", launch_saving_us=0.0, measured_scale=1.0)
    whole = _r1_pool(catalog, 1.0)
    for batch in (8.0, 64.0, 512.0, 4096.0):
        t = np.array([batch])
        gemm = [
            float(forward_cost(x, p, tokens=t, sequences=t, context=t * 0 + 2000, prefill=False,
                               speed=np.ones(1)).gemm_s[0])
            for x in (whole, attention_side(whole), ffn_side(whole))
        ]  # fmt: skip
        assert gemm[1] + gemm[2] == pytest.approx(gemm[0], rel=1e-6), batch
