"""`dse predict` (flags and batch) and `dse calibrate`, run as a user runs them."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Calibration, Cli

from dse.catalog import Catalog
from dse.errors import Written
from dse.paths import MEASURED_RUNS
from dse.perf.benchmark_rows import INPUT_COLUMNS, OUTPUT_COLUMNS
from dse.perf.params import CALIBRATION_FILE, load_params


def test_predict_one_deployment_json(cli: Cli) -> None:
    proc = cli(
        "predict",
        "--hardware",
        "gb200",
        "--precision",
        "fp4",
        "--tp",
        "8",
        "--ep",
        "8",
        "--dp-attention",
        "--conc",
        "256",
        "--json",
    )
    assert proc.code == 0, proc.err
    pred = json.loads(proc.out)["prediction"]
    assert pred["tput_per_gpu"] > 0 and pred["intvty_tok_s_user"] > 0
    assert 0 < pred["hbm_peak_gb_per_gpu"] <= 186
    parts = sum(
        pred[k] for k in ("decode_gemm_ms", "decode_attention_ms", "decode_comm_ms", "decode_overhead_ms")
    )
    assert parts <= pred["decode_step_ms"] + 1e-6
    assert pred["binding_regime"] in {
        "compute",
        "hbm-bandwidth",
        "communication",
        "overhead",
        "hbm-capacity",
        "prefill-compute",
    }


def test_predict_table_and_bad_flag(cli: Cli) -> None:
    ok = cli("predict", "--hardware", "h200", "--framework", "trt")
    assert ok.code == 0 and "tput_per_gpu" in ok.out
    bad = cli("predict", "--hardware", "h200", "--framework", "tgi")
    assert bad.code == 2
    assert bad.err.strip() == (
        "dse: error: dse predict: --framework = 'tgi': must be one of "
        "atom, dynamo-sglang, dynamo-trt, mori-sglang, sglang, trt, vllm"
    )


def test_predict_batch_repeats_inputs_and_flags_rows_it_cannot_model(tmp_path: Path, cli: Cli) -> None:
    src = tmp_path / "in.csv"
    with open(MEASURED_RUNS, newline="") as fh:
        rows = list(csv.DictReader(fh))[:5]
    header = list(rows[0])
    rows[1]["hardware"] = "tpu-v9"  # unknown hardware
    rows[2]["conc"] = "lots"
    rows[3]["conc"] = "0.4"  # a fraction of a client (the closed form would read it; a benchmark cannot)
    # ten million clients: the simulated window (its cap of 200,000 requests) is their first wave
    rows.append({**rows[0], "conc": "10000000"})
    with open(src, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=header)
        w.writeheader()
        w.writerows(rows)
    out = tmp_path / "out.csv"
    # with the runs' engine settings: the first run's launch capped SGLang with MTP at 2,048 requests,
    # where an empty cell is SGLang's own cap of 48
    proc = cli("predict", "--batch", str(src), "--out", str(out), "--recipe-settings")
    assert proc.code == 0, proc.err
    with open(out, newline="") as fh:
        got = list(csv.DictReader(fh))
    assert len(got) == 6
    assert list(got[0])[: len(header)] == header
    assert set(OUTPUT_COLUMNS) <= set(got[0])
    assert "unknown hardware id" in got[1]["pred_error"] and got[1]["pred_tput_per_gpu"] == ""
    assert "conc = 'lots': must be a number" in got[2]["pred_error"]
    assert "conc = 0.4: must be a whole number of clients" in got[3]["pred_error"]
    for row in (got[0], got[4]):
        assert row["pred_error"] == ""
        assert float(row["pred_tput_per_gpu"]) > 0
        measured = float(row["tput_per_gpu_total"])
        assert 0.33 < float(row["pred_tput_per_gpu"]) / measured < 3.0
        # the simulated percentiles of the row's closed loop, in order, beside the measured ones
        ttft = [float(row[f"pred_ttft_p{q}_s"]) for q in (50, 90, 99)]
        assert 0 < ttft[0] <= ttft[1] <= ttft[2]
        assert 0 < float(row["pred_tpot_p50_ms"]) <= float(row["pred_tpot_p99_ms"])
        assert float(row["pred_e2el_p50_s"]) > ttft[0]
        assert 0.2 < float(row["pred_tpot_p50_ms"]) / float(row["median_tpot_ms"]) < 5.0
    assert got[1]["pred_ttft_p50_s"] == ""  # a row it cannot model has no percentiles either
    # a row whose window shows no steady state says so, as dse predict warns of one deployment (its
    # TTFT of thousands of seconds had been written with nothing said)
    assert [r["pred_latency_warning"] for r in got[:5]] == [""] * 5
    unsteady = got[5]["pred_latency_warning"]
    assert unsteady.startswith("in.csv line 7: not steady: 200000 requests for 10000000 clients"), unsteady
    assert (
        proc.err.count("\n") == 2
        and (
            f"; 1 simulated no steady state (pred_latency_warning, their percentiles describe none), the "
            f"first: {unsteady}\n"
        )
        in proc.err
    ), proc.err


def test_a_percentile_finer_than_the_window_resolves_is_warned_of(cli: Cli) -> None:
    """p99.999 of 80 requests (8 clients, ten each) had been printed with no caveat: it is no more
    than their slowest. The benchmarks' own p99 of such a window is not warned of."""
    fine = cli("predict", "--hardware", "b200", "--conc", "8", "--percentiles", "50,99.999")
    assert fine.code == 0, fine.err
    said = "dse: warning: p99.999 of 80 requests is no more than their slowest: 100,000 requests or more"
    assert said in fine.err, fine.err
    as_json = cli("predict", "--hardware", "b200", "--conc", "8", "--percentiles", "99.999", "--json")
    assert as_json.code == 0 and said in as_json.err, as_json.err
    usual = cli("predict", "--hardware", "b200", "--conc", "8")
    assert usual.code == 0 and "warning" not in usual.err, usual.err
    assert fine.err.rstrip().endswith("resolve it (--requests)"), fine.err


def test_a_trace_too_short_for_a_percentile_is_not_told_to_use_requests(cli: Cli, tmp_path: Path) -> None:
    """A replay's requests are the trace's (--requests is refused beside --load trace): the warning
    had suggested "--requests, or a longer trace"."""
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,1000,100\n1,1000,100\n2,1000,100\n")
    proc = cli("predict", "--hardware", "b200", "--load", "trace", "--trace", trace)
    assert proc.code == 0, proc.err
    said = "dse: warning: p99 of 3 requests is no more than their slowest: 100 requests or more resolve it"
    assert f"{said} (a longer trace)" in proc.err.splitlines(), proc.err
    # its served rate is every request over the window, not the one completion in the middle half
    # of its arrivals (two requests 0.5 s apart had "served 4 requests/s")
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,4000,10\n0.5,1000,300\n")
    lat = json.loads(cli("predict", "--hardware", "b200", "--load", "trace", "--trace", trace, "--json").out)
    served = lat["latency"]["requests_per_s"]
    assert 0 < served < 2.0, lat["latency"]  # two requests over more than a second


def test_predict_prints_the_latency_percentiles_of_the_load_asked(cli: Cli, tmp_path: Path) -> None:
    """Closed loop by default (ten requests per client, as InferenceX), Poisson at a rate, a trace
    replayed; each gives the percentiles asked, the same seed the same figures."""
    base = ("predict", "--hardware", "b200", "--json", "--percentiles", "50,90,99.9")
    closed = json.loads(cli(*base, "--conc", "32").out)["latency"]
    assert closed["load"] == "closed loop, 32 requests in flight" and closed["requests"] == 320
    # a closed loop starts on a fresh server: its first wave waits the engine's fitted cold start
    waits = load_params().latency.cold_start_s.values()
    assert closed["cold_start_s"] > 0 and closed["cold_start_s"] in waits
    p = closed["percentiles"]
    assert list(p) == ["p50", "p90", "p99.9"]
    assert p["p50"]["ttft_s"] <= p["p90"]["ttft_s"] <= p["p99.9"]["ttft_s"]
    assert p["p50"]["tpot_ms"] <= p["p99.9"]["tpot_ms"] and p["p50"]["e2el_s"] > p["p50"]["ttft_s"]
    poisson = cli(*base, "--load", "poisson", "--rate", "2", "--requests", "500", "--seed", "3")
    again = cli(*base, "--load", "poisson", "--rate", "2", "--requests", "500", "--seed", "3")
    assert poisson.code == 0 and poisson.out == again.out
    lat = json.loads(poisson.out)["latency"]
    assert lat["load"] == "poisson arrivals at 2 requests/s" and lat["requests"] == 500
    assert lat["cold_start_s"] == 0.0  # an open loop has no first wave
    assert lat["requests_per_s"] == pytest.approx(2.0, rel=0.15) and lat["warning"] is None
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,1000,100\n0.5,2000,50\n0.5,500,10\n")
    replay = json.loads(cli(*base, "--load", "trace", "--trace", str(trace)).out)["latency"]
    assert replay["load"] == "trace replay, 3 requests" and replay["requests"] == 3
    text = cli("predict", "--hardware", "b200", "--conc", "8")
    wait = json.loads(cli(*base, "--conc", "8").out)["latency"]["cold_start_s"]
    assert (
        f"latency, simulated: closed loop, 8 requests in flight; the first wave waits {wait:.3g} s "
        "(a fresh server, warm-up: one-prompt); 80 requests"
    ) in text.out
    # a benchmark that sent the fresh server nothing first: its engine's wait without a warm-up
    bare = json.loads(cli(*base, "--conc", "8", "--benchmark-warmup", "none").out)["latency"]
    assert bare["benchmark_warmup"] == "none" and closed["benchmark_warmup"] == "one-prompt"
    assert bare["cold_start_s"] == load_params().latency.cold_start_s["sglang/nvidia/none"] != wait
    assert "percentile" in text.out and "p99" in text.out
    # --warm-server: the engine starts with the clients; the first wave's TTFTs drop by the wait
    warm = json.loads(cli(*base, "--conc", "8", "--warm-server").out)["latency"]
    fresh = json.loads(cli(*base, "--conc", "8").out)["latency"]
    assert warm["cold_start_s"] == 0.0 and fresh["cold_start_s"] == wait > 0
    assert warm["percentiles"]["p50"]["ttft_s"] == pytest.approx(fresh["percentiles"]["p50"]["ttft_s"])
    assert warm["percentiles"]["p99.9"]["ttft_s"] < fresh["percentiles"]["p99.9"]["ttft_s"] - 0.5 * wait
    warm_text = cli("predict", "--hardware", "b200", "--conc", "8", "--warm-server").out
    assert "latency, simulated: closed loop, 8 requests in flight; 80 requests" in warm_text


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--percentiles", "50,100"), "--percentiles = 100: each must be a number in (0, 100)"),
        (("--percentiles", "0"), "--percentiles = 0: each must be a number in (0, 100)"),
        (("--load", "poisson"), "--rate: is required with --load poisson"),
        (("--load", "poisson", "--rate", "0"), "--rate = 0: must be > 0"),
        (("--load", "bursty", "--rate", "-1"), "--rate = -1: must be > 0"),
        (("--load", "poisson", "--rate", "nan"), "--rate = nan: must be a finite number"),
        # a rate too small to be one: it had been told "must be 0 or between ...", and 0 is refused
        (("--load", "poisson", "--rate", "1e-300"), "--rate = 1e-300: must be between 1e-09 and 1e+12"),
        (("--conc", "1e300"), "--conc = 1e300: must be between 1e-09 and 1e+12"),
        (("--rate", "2"), "--rate = 2: needs --load poisson or bursty"),
        (("--conc", "nan"), "--conc = nan: must be a finite number"),
        (("--conc", "-4"), "--conc = -4: must be > 0"),
        (("--load", "trace"), "--trace: is required with --load trace"),
        (
            ("--load", "poisson", "--rate", "2", "--warm-server"),
            "--warm-server: needs --load closed (an open loop has no first wave)",
        ),
        (("--requests", "300000"), "--requests = 300000: must be at most 200,000"),
        (("--requests", "0"), "--requests = 0: must be > 0"),  # 0 had meant the default
        # half a token: the closed form had priced 0.45 output tokens, the simulation one whole token
        (("--osl", "0.5"), "--osl = 0.5: must be at least 1 (tokens)"),
        (("--isl", "0.3"), "--isl = 0.3: must be at least 1 (tokens)"),
        (
            ("--isl", "300000"),
            "--isl = 300000: with osl (1024) must fit deepseek-v3's context of 163,840 tokens",
        ),
        (  # the longer names the flag: --isl, at the 1024 not typed, had been named
            ("--osl", "1e9"),
            "--osl = 1e9: with isl (1024) must fit deepseek-v3's context of 163,840 tokens",
        ),
        (("--tp", "7", "--ep", "7"), "--tp = 7: must divide deepseek-v3's 128 attention heads"),
        (("--tp", "1000"), "--tp = 1000: must divide deepseek-v3's 128 attention heads"),
        # whole-number flags as typed: they had been read as floats (`--tp = 7.0`) or text (`'5'`)
        (("--tp", "4", "--ep", "5"), "--ep = 5: must be at most the instance's 4 GPUs"),
        (("--tp", "8", "--ep", "3"), "--ep = 3: must divide the instance's 8 GPUs"),
        (
            ("--disagg", "--decode-gpus", "12", "--decode-workers", "5"),
            "--decode-gpus = 12: must split into 5 whole instances",
        ),
        (
            ("--mtp", "--mtp-draft-tokens", "0"),
            "--mtp-draft-tokens = 0: must be a whole number from 1 to 16 with MTP",
        ),
        (
            ("--decode-max-running-requests", "0"),
            "--decode-max-running-requests = 0: must be a whole number from 1 to 1e+12 (requests per "
            "instance), or none",
        ),
        (  # --tp left out is the instance's GPUs up to 8, and the message says so
            ("--disagg", "--decode-gpus", "12", "--decode-workers", "2"),
            "--tp = 6: must divide deepseek-v3's 128 attention heads (--tp left out: the instance's "
            "GPUs up to 8)",
        ),
        (  # typed past the instance: it had been capped in silence, and the JSON echoed 128
            ("--disagg", "--prefill-gpus", "8", "--prefill-workers", "2", "--prefill-tp", "128"),
            "--prefill-tp = 128: must be at most the instance's 4 GPUs "
            "(--prefill-gpus over --prefill-workers)",
        ),
        (
            ("--disagg", "--decode-gpus", "16", "--decode-workers", "4", "--tp", "16"),
            "--tp = 16: must be at most the instance's 4 GPUs (--decode-gpus over --decode-workers)",
        ),
        (("--seed", "-1"), "--seed = -1: must be >= 0"),
        # flags the deployment would not read, typed at their default values: they had been ignored
        # in silence (an aggregated --prefill-gpus 8, --mtp-draft-tokens 0 without --mtp)
        (("--prefill-gpus", "8"), "--prefill-gpus = 8: needs --disagg"),
        (("--decode-workers", "1"), "--decode-workers = 1: needs --disagg"),
        (("--disagg", "--ffn-gpus", "8"), "--ffn-gpus = 8: needs --afd"),
        # the attention pool holds no experts: --ep had been echoed in the JSON and not read
        (
            ("--afd", "--ep", "4"),
            "--ep = 4: does not apply with --afd: its attention pool holds no experts (--ffn-ep sets "
            "the expert pool's)",
        ),
        (
            ("--mtp-draft-tokens", "0"),
            "--mtp-draft-tokens = 0: needs --mtp (the drafts of its speculative steps)",
        ),
        (  # the simulation applies it to an aggregated instance: it had been printed as applied
            ("--disagg", "--scheduler-recv-interval", "30"),
            "--scheduler-recv-interval = 30: applies to an aggregated deployment only (a disaggregated "
            "one is simulated without it)",
        ),
        (
            ("--load", "poisson", "--rate", "2", "--burstiness", "0"),
            "--burstiness = 0: needs --load bursty",
        ),
        (("--burstiness", "nan"), "--burstiness = nan: needs --load bursty"),
        (("--load", "bursty", "--rate", "2", "--burstiness", "0"), "--burstiness = 0: must be > 0"),
        (
            ("--long-tail", "40"),
            "--long-tail = 40: must be at most 3 (a wider log-normal keeps its mean only in a few "
            "requests longer than any context)",
        ),
    ],
)
def test_bad_latency_flags_are_one_line_and_exit_2(cli: Cli, flags: tuple[str, ...], message: str) -> None:
    proc = cli("predict", "--hardware", "b200", *flags)
    assert proc.code == 2 and proc.out == ""
    assert proc.err.strip() == f"dse: error: dse predict: {message}"


def test_limits_a_batch_row_cannot_pass(catalog: Catalog) -> None:
    """Rows no engine runs are refused with the reason, each on its own: a prompt beyond the
    model's context, attention TP that does not divide its heads, an aggregated row whose prefill
    columns say another shape than the one instance that runs both."""
    from dse.perf.benchmark_rows import predict_rows

    base = dict(AFD, disagg="False", num_ffn_gpu="", ffn_num_workers="", ffn_ep="",
                prefill_dp_attention="False", decode_dp_attention="False", num_decode_gpu="8",
                num_prefill_gpu="8", decode_num_workers="1")  # fmt: skip
    seven = {"decode_tp": "7", "prefill_tp": "7", "num_decode_gpu": "7", "decode_ep": "7", "prefill_ep": "7"}
    rows = [base, {**base, "isl": "200000"}, {**base, **seven}, {**base, "prefill_tp": "4"}]
    out = predict_rows([*rows, {**base, "osl": "0.5"}], catalog, load_params(), source="runs.csv")
    assert out[4]["pred_error"] == "runs.csv row 5: osl = 0.5: must be at least 1 (tokens)"
    assert out[0]["pred_error"] == ""
    assert out[1]["pred_error"] == (
        "runs.csv row 2: isl = 200000: with osl (1000) must fit deepseek-v3's context of 163,840 tokens"
    )
    assert (
        out[2]["pred_error"] == "runs.csv row 3: decode_tp = 7: must divide deepseek-v3's 128 attention heads"
    )
    assert (
        out[3]["pred_error"]
        == "runs.csv row 4: prefill_tp = 4: must equal decode_tp (8) in an aggregated row"
    )


def test_tp_below_a_disaggregated_instances_gpus_says_its_attention_groups(cli: Cli) -> None:
    """`--tp 4` on a 16-GPU decode instance without --dp-attention runs attention TP 4 in four
    data-parallel groups (as the measured runs' rows are read); the first line had not said so."""
    proc = cli(
        "predict", "--hardware", "h200", "--disagg", "--decode-gpus", "16", "--tp", "4", "--conc", "64"
    )
    assert proc.code == 0, proc.err
    head = proc.out.splitlines()[0]
    assert ", decode attention TP 4 in 4 data-parallel groups of its 16 GPUs)" in head, head
    plain = cli("predict", "--hardware", "h200", "--disagg", "--conc", "64").out.splitlines()[0]
    assert "data-parallel groups" not in plain


def test_a_batch_row_wider_than_its_instance_is_refused_as_the_flags_are(catalog: Catalog) -> None:
    """A disaggregated row whose decode TP or EP is more than its instance's GPUs: the flags are
    refused (`--tp 8` on a 4-GPU instance), the rows had been predicted as if the instance's GPUs
    were written (tp 8 / ep 8, tp 4 / ep 4 and tp 4 / ep 64 on 4 GPUs: the same 254.7 tokens/s/GPU)."""
    from dse.perf.benchmark_rows import predict_rows

    base = dict(AFD, num_ffn_gpu="", ffn_num_workers="", ffn_ep="", prefill_dp_attention="False",
                decode_dp_attention="False", decode_num_workers="1", num_decode_gpu="4",
                prefill_num_workers="1", num_prefill_gpu="8", conc="64")  # fmt: skip
    rows = [{**base, "decode_tp": "4", "decode_ep": "4"}, {**base, "decode_tp": "8", "decode_ep": "4"},
            {**base, "decode_tp": "4", "decode_ep": "64"},
            {**base, "decode_tp": "4", "decode_ep": "4", "prefill_tp": "16"},
            {**base, "decode_tp": "64", "decode_ep": "4", "decode_dp_attention": "True"}]  # fmt: skip
    out = predict_rows(rows, catalog, load_params(), source="runs.csv")
    assert out[0]["pred_error"] == ""
    assert [r["pred_error"] for r in out[1:]] == [
        "runs.csv row 2: decode_tp = 8: must be at most the instance's 4 GPUs",
        "runs.csv row 3: decode_ep = 64: must be at most the instance's 4 GPUs",
        "runs.csv row 4: prefill_tp = 16: must be at most the instance's 8 GPUs",
        "runs.csv row 5: decode_tp = 64: must be at most the instance's 4 GPUs",  # under DP attention too
    ]


def test_a_framework_is_predicted_only_on_the_gpus_it_runs_on(cli: Cli, catalog: Catalog) -> None:
    """TensorRT-LLM runs on NVIDIA GPUs, ATOM and SGLang over MoRI on AMD ones: TensorRT-LLM on an
    MI355X had been predicted (601.9 tokens/s/GPU, above the engines that run there), and ATOM
    on a B200. A flag is one line and exit 2, a batch row its pred_error."""
    from dse.perf.benchmark_rows import predict_rows

    cases = {("mi355x", "trt"): "NVIDIA", ("mi300x", "dynamo-trt"): "NVIDIA", ("b200", "atom"): "AMD",
             ("b200", "mori-sglang"): "AMD"}  # fmt: skip
    for (hw, fw), vendor in cases.items():
        res = cli("predict", "--hardware", hw, "--framework", fw)
        assert res.code == 2 and res.err.count("\n") == 1, res.err
        assert f"--framework = '{fw}': runs on {vendor} GPUs only, not {catalog.hardware(hw).id}" in res.err
    row = dict(AFD, disagg="False", num_ffn_gpu="", ffn_num_workers="", ffn_ep="", hardware="mi355x",
               framework="trt", num_decode_gpu="8", num_prefill_gpu="8", decode_num_workers="1")  # fmt: skip
    (out,) = predict_rows([row], catalog, load_params(), source="runs.csv")
    assert (
        out["pred_error"] == "runs.csv row 1: framework = 'trt': runs on NVIDIA GPUs only, not mi355x (amd)"
    )
    assert cli("predict", "--hardware", "mi355x", "--framework", "atom", "--requests", "40").code == 0


def test_an_aggregated_rows_gpus_and_workers_are_its_instances_replicas(catalog: Catalog) -> None:
    """An aggregated row's num_decode_gpu are whole replicas of its TP8 instance (64 as the
    measured runs have them, predicted as 8), and a decode_num_workers other than 0 counts them:
    0 GPUs, 3 workers on 8 and 1 worker on 24 had all been predicted at the one instance's
    figure without a word."""
    from dse.perf.benchmark_rows import predict_rows

    base = dict(AFD, disagg="False", num_ffn_gpu="", ffn_num_workers="", ffn_ep="",
                prefill_dp_attention="False", decode_dp_attention="False", num_decode_gpu="8",
                num_prefill_gpu="8", decode_num_workers="0")  # fmt: skip
    cells = [("0", "8"), ("1", "8"), ("8", "64"), ("3", "8"), ("1", "24"), ("0", "0"), ("0", "12")]
    rows = [{**base, "decode_num_workers": w, "num_decode_gpu": g} for w, g in cells]
    out = predict_rows(rows, catalog, load_params(), source="runs.csv")
    assert [r["pred_error"] for r in out[:3]] == ["", "", ""]
    assert out[0]["pred_tput_per_gpu"] == out[1]["pred_tput_per_gpu"] == out[2]["pred_tput_per_gpu"]
    workers = "must be 0 or the replicas of the instance ({}) in an aggregated row"
    whole = "must be a whole multiple of the instance's 8 GPUs (decode_tp) in an aggregated row"
    assert [r["pred_error"] for r in out[3:]] == [
        f"runs.csv row 4: decode_num_workers = 3: {workers.format(1)}",
        f"runs.csv row 5: decode_num_workers = 1: {workers.format(3)}",
        f"runs.csv row 6: num_decode_gpu = 0: {whole}",
        f"runs.csv row 7: num_decode_gpu = 12: {whole}",
    ]


def test_an_aggregated_row_may_write_its_one_shape_two_ways(catalog: Catalog) -> None:
    """The prefill columns of an aggregated row are compared with the decode ones by what they say:
    `8.0` against `8` had been refused as "prefill_tp = 8.0: must equal decode_tp (8)", and `1`
    against `True` likewise, though the row's parser reads each pair alike."""
    from dse.perf.benchmark_rows import predict_rows

    base = dict(AFD, disagg="False", num_ffn_gpu="", ffn_num_workers="", ffn_ep="",
                prefill_dp_attention="True", decode_dp_attention="True", num_decode_gpu="8",
                num_prefill_gpu="8", decode_num_workers="1")  # fmt: skip
    rows = [base, {**base, "prefill_tp": "8.0"}, {**base, "prefill_dp_attention": "1"},
            {**base, "prefill_dp_attention": "0"}]  # fmt: skip
    out = predict_rows(rows, catalog, load_params(), source="runs.csv")
    assert [r["pred_error"] for r in out[:3]] == ["", "", ""]
    assert out[1]["pred_tput_per_gpu"] == out[2]["pred_tput_per_gpu"] == out[0]["pred_tput_per_gpu"]
    assert out[3]["pred_error"] == (
        "runs.csv row 4: prefill_dp_attention = 0: must equal decode_dp_attention (True) in an aggregated row"
    )


def test_an_aggregated_rows_prefill_cell_no_parser_takes_states_its_own_rule(catalog: Catalog) -> None:
    """A prefill cell of an aggregated row that is no value of its kind is refused by its kind's
    rule, as in a disaggregated row: `banana` had been told to equal decode_dp_attention (True),
    and `x` to equal decode_tp (8)."""
    from dse.perf.benchmark_rows import predict_rows

    base = dict(AFD, disagg="False", num_ffn_gpu="", ffn_num_workers="", ffn_ep="",
                prefill_dp_attention="True", decode_dp_attention="True", num_decode_gpu="8",
                num_prefill_gpu="8", decode_num_workers="1", prefill_num_workers="1")  # fmt: skip
    rows = [{**base, "prefill_dp_attention": "banana"}, {**base, "prefill_tp": "x"},
            {**base, "disagg": "True", "prefill_dp_attention": "banana"}]  # fmt: skip
    out = predict_rows(rows, catalog, load_params(), source="runs.csv")
    assert [r["pred_error"] for r in out] == [
        "runs.csv row 1: prefill_dp_attention = 'banana': must be True or False",
        "runs.csv row 2: prefill_tp = 'x': must be a number",
        "runs.csv row 3: prefill_dp_attention = 'banana': must be True or False",
    ]


def test_a_batch_rows_conc_states_the_rule_it_breaks(tmp_path: Path, cli: Cli) -> None:
    """Zero, negative, NaN and infinite clients break one rule, said alike (-4 had been told
    "must be a finite number >= 0", which 0 meets, and 0 then "must be > 0")."""
    with open(MEASURED_RUNS, newline="") as fh:
        row = next(csv.DictReader(fh))
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    values = ("0", "-4", "nan", "inf")
    with open(src, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(row))
        w.writeheader()
        w.writerows([*({**row, "conc": v} for v in values), row])  # and one it can model
    proc = cli("predict", "--batch", str(src), "--out", str(out))
    assert proc.code == 0, proc.err
    with open(out, newline="") as fh:
        errors = [r["pred_error"] for r in csv.DictReader(fh)]
    rule = "must be a finite number > 0"
    assert errors == [*(f"in.csv line {i + 2}: conc = {v}: {rule}" for i, v in enumerate(values)), ""]


def test_a_batch_of_no_row_it_can_predict_is_bad_input(tmp_path: Path, cli: Cli) -> None:
    """A file of which no row could be predicted is bad input: one line naming the file, the first
    row and its rule, exit 2, and no --out (it had written a file of empty predictions and exited
    0, a run that read as done); a header alone likewise. Some rows that fail among rows predicted
    are written, each with its pred_error, exit 0, and standard error says how many and the first."""
    with open(MEASURED_RUNS, newline="") as fh:
        row = next(csv.DictReader(fh))
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"

    def batch(*rows: dict[str, str]) -> tuple[int, str]:
        with open(src, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(row))
            w.writeheader()
            w.writerows(rows)
        proc = cli("predict", "--batch", src, "--out", out)
        assert proc.out == ""
        return proc.code, proc.err

    code, err = batch({**row, "conc": "0"}, {**row, "hardware": "tpu-v9"})
    assert code == 2 and err.count("\n") == 1 and not out.exists(), err
    assert err.startswith(
        f"dse: error: {src}: holds no row that could be predicted (the first of its 2 rows: "
        "in.csv line 2: conc = 0: must be a finite number > 0)"
    )
    code, err = batch({**row, "conc": "0"})
    assert code == 2 and "(its one row: in.csv line 2: conc = 0:" in err and not out.exists(), err
    code, err = batch()
    assert code == 2 and not out.exists()
    assert err == f"dse: error: {src}: needs at least one row (it holds a header alone)\n"
    code, err = batch(row, {**row, "conc": "0"}, {**row, "hardware": "tpu-v9"})
    assert code == 0 and out.exists(), err
    assert err.splitlines()[0] == (
        f"wrote 3 rows to {out}; 2 could not be modelled (pred_error), the first: "
        "in.csv line 3: conc = 0: must be a finite number > 0"
    )
    code, err = batch(row)
    assert code == 0 and err.splitlines()[0] == f"wrote 1 row to {out}", err


def test_a_trace_with_a_bad_row_names_it(cli: Cli, tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    for body, message in (
        ("0,100,10\n0.5,abc,3\n", "line 3: input_tokens = 'abc': must be a number >= 1 and <= 1e+12"),
        ("1,100,10\n0.5,100,3\n", "line 3: arrival_s = 0.5: must not be earlier than the row before"),
        ("0,100,0\n", "line 2: output_tokens = 0: must be a number >= 1 and <= 1e+12"),
        ("1e300,100,10\n", "line 2: arrival_s = 1e300: must be a number >= 0 and <= 1e+12"),
        # inside the range that rule states, and refused by the files' least magnitude: say that one
        ("0,100,10\n1e-20,100,10\n", "line 3: arrival_s = 1e-20: must be 0 or at least 1e-09"),
        # a request the model cannot take once hung the simulation (a step at a time past the KV cache)
        ("0,1e21,10\n", "line 2: input_tokens = 1e21: must be a number >= 1 and <= 1e+12"),
        (
            "0,100000,100000\n",
            "line 2: input_tokens = '100000 + 100000': with output_tokens must fit the "
            "model's context of 163,840 tokens",
        ),
        ("0,100,10,99\n", "line 2: has 4 fields, 1 more than the header's 3"),
        ("0,100.5,10\n", "line 2: input_tokens = 100.5: must be a whole number of tokens"),
        # the line an editor shows: blank lines hold no row but count
        ("0,100,10\n\n\n0.5,abc,3\n", "line 5: input_tokens = 'abc': must be a number >= 1 and <= 1e+12"),
    ):
        trace.write_text("arrival_s,input_tokens,output_tokens\n" + body)
        proc = cli("predict", "--hardware", "b200", "--load", "trace", "--trace", str(trace))
        assert proc.code == 2 and proc.err.strip() == f"dse: error: {trace} {message}"
    trace.write_text("arrival_s,input_tokens\n0,100\n")
    proc = cli("predict", "--hardware", "b200", "--load", "trace", "--trace", str(trace))
    assert proc.code == 2 and proc.err.strip() == f"dse: error: {trace}: output_tokens: is a required column"
    trace.write_text("arrival_s,input_tokens,output_tokens,arrival_s\n0,100,10,5\n")  # which one holds?
    proc = cli("predict", "--hardware", "b200", "--load", "trace", "--trace", str(trace))
    twice = f"dse: error: {trace}: arrival_s: is a column the header names twice"
    assert proc.code == 2 and proc.err.strip() == twice
    trace.write_bytes(b"\xff\xfe\x00 not text")
    proc = cli("predict", "--hardware", "b200", "--load", "trace", "--trace", str(trace))
    assert proc.code == 2 and proc.err.strip().startswith(f"dse: error: {trace}: --trace: must be UTF-8 text")


def test_predict_batch_missing_column(tmp_path: Path, cli: Cli) -> None:
    src = tmp_path / "in.csv"
    src.write_text("hardware,model\nb200,dsr1\n")
    proc = cli("predict", "--batch", str(src), "--out", str(tmp_path / "o.csv"))
    assert proc.code == 2
    assert "framework: is a required column" in proc.err
    assert not (tmp_path / "o.csv").exists()


def test_a_batch_refuses_to_write_over_its_input(tmp_path: Path, cli: Cli) -> None:
    """--out naming the --batch file (the same path, or another name of it) would overwrite the
    rows it reads: refused, the file untouched."""
    src = tmp_path / "in.csv"
    text = "hardware,model\nb200,dsr1\n"
    src.write_text(text)
    (tmp_path / "link.csv").symlink_to(src)
    for out in (src, tmp_path / "." / "in.csv", tmp_path / "link.csv"):
        proc = cli("predict", "--batch", str(src), "--out", str(out))
        assert proc.code == 2 and "--out: must not be the --batch file" in proc.err, proc.err
        assert len(proc.err.strip().splitlines()) == 1
    assert src.read_text() == text


def test_a_batch_refuses_the_flags_of_one_deployment(tmp_path: Path, cli: Cli) -> None:
    """Each row names its deployment: a flag of one (a percentile out of range included) would be
    silently ignored, so it is refused, as --out is without --batch."""
    src = tmp_path / "in.csv"
    src.write_text("hardware,model\nb200,dsr1\n")
    # a pool's flag at its default value too (--decode-gpus 8 had passed: it was read as left out)
    # and any flag typed at its default value (--framework trt, --conc 64 had been ignored in
    # silence), in full, abbreviated or with "="
    given = (("--percentiles", "0"), ("--rate", "0"), ("--seed", "3"), ("--json",), ("--decode-gpus", "8"),
             ("--framework", "trt"), ("--conc", "64"), ("--fram", "trt"), ("--load=closed",),
             ("--model", "dsr1"))  # fmt: skip
    for flags in given:
        proc = cli("predict", "--batch", str(src), "--out", str(tmp_path / "o.csv"), *flags)
        assert proc.code == 2, (flags, proc.err)
        rule = "does not apply to --batch (each row names its deployment)"
        named = {"--fram": "--framework", "--load=closed": "--load"}.get(flags[0], flags[0])
        assert proc.err.strip() == f"dse: error: dse predict: {named}: {rule}"
    assert not (tmp_path / "o.csv").exists()
    alone = cli("predict", "--hardware", "b200", "--out", str(tmp_path / "o.csv"))
    assert alone.code == 2 and "--out: needs --batch" in alone.err and not (tmp_path / "o.csv").exists()


def test_a_mistyped_flag_is_one_line_and_exit_2(cli: Cli) -> None:
    proc = cli("predict", "--hardware", "b200", "--conc", "abc")
    assert proc.code == 2
    assert proc.err == (
        "dse: error: dse predict: argument --conc: invalid float value: 'abc' (see dse predict --help)\n"
    )


def test_an_open_loop_window_grows_until_its_ends_weigh_little(cli: Cli) -> None:
    """11.5 requests/s on one B200 instance keep about 800 in flight: 2,000 requests would be mostly
    the batches filling and draining (TTFT p99 0.2 s against 2.8 s once steady; 12 requests/s,
    steady before session 47's refit, is now beyond what the instance serves). By default the
    window grows to ten times the requests in flight; a window asked for says it is short."""
    flags = ("predict", "--hardware", "b200", "--load", "poisson", "--rate", "11.5", "--json")
    steady = cli(*flags)
    grown = json.loads(steady.out)["latency"]
    warned = cli(*flags, "--requests", "2000")
    short = json.loads(warned.out)["latency"]
    assert grown["warning"] is None and grown["requests"] > 8000, grown
    assert "requests are in flight at once and the window has 2000" in short["warning"]
    # with --json too the warning is on stderr, as without (a pipe to a JSON reader leaves it in sight)
    assert steady.err == "" and warned.err == f"dse: warning: {short['warning']}\n", warned.err
    assert grown["percentiles"]["p99"]["ttft_s"] > 5 * short["percentiles"]["p99"]["ttft_s"]
    assert grown["requests_per_s"] == pytest.approx(11.5, rel=0.05)  # served while the load lasts
    brief = json.loads(cli(*flags, "--requests", "40").out)["latency"]  # no steady middle: all counted
    assert brief["requests_per_s"] > 0 and "not steady" in brief["warning"]
    # TensorRT-LLM with MTP at 16 requests/s: grown once (11,467 requests) it still held fewer than ten
    # times the ~1,250 in flight, and the default window warned it was short; it grows again
    mtp = cli(
        "predict",
        "--hardware",
        "b200",
        "--framework",
        "trt",
        "--mtp",
        "--load",
        "poisson",
        "--rate",
        "16",
        "--json",
    )
    again = json.loads(mtp.out)["latency"]
    assert again["warning"] is None and again["requests"] > 12_517 and mtp.err == "", mtp.err


def test_a_rate_beyond_what_the_deployment_serves_is_said_overloaded_with_both_rates(cli: Cli) -> None:
    """20 requests/s on one B200 instance that serves about 12: the percentiles had come back as
    figures (TTFT p99 910 s, a window's, which a longer window raises without bound) beside a
    warning that the load exceeds what the deployment serves "or the window is too short". It is
    now said overloaded, with what arrives and what is served, on stdout, on stderr and in the JSON."""
    flags = ("predict", "--hardware", "b200", "--load", "poisson", "--rate", "20")
    text = cli(*flags)
    assert text.code == 0, text.err
    lat = json.loads(cli(*flags, "--json").out)["latency"]
    assert lat["overloaded"] is True
    assert lat["offered_requests_per_s"] == pytest.approx(20.0, rel=0.05)
    assert lat["requests_per_s"] < 0.7 * lat["offered_requests_per_s"]
    served = (
        f"served {lat['requests_per_s']:.4g} requests/s of the {lat['offered_requests_per_s']:.4g} "
        f"arriving (overloaded: its lengths hold {lat['kv_held_share']:.0%} of the KV cache), "
    )
    assert served in text.out, text.out
    said = (
        f"dse: warning: overloaded: {lat['offered_requests_per_s']:.3g} requests/s arrive and the deployment "
        f"serves {lat['requests_per_s']:.3g}; the TTFT median grew"
    )
    assert text.err.startswith(said) and lat["warning"] in text.err, text.err
    calm = json.loads(cli("predict", "--hardware", "b200", "--load", "poisson", "--rate", "4", "--json").out)
    assert calm["latency"]["overloaded"] is False and calm["latency"]["warning"] is None
    closed = json.loads(cli("predict", "--hardware", "b200", "--conc", "4096", "--json").out)["latency"]
    assert (
        closed["overloaded"] is False and closed["offered_requests_per_s"] is closed["kv_held_share"] is None
    )
    # a long tail the window cannot show holds more KV than the cache: overloaded all the same
    tail = json.loads(cli(*flags[:-1], "6", "--long-tail", "2", "--json").out)["latency"]
    assert tail["overloaded"] is True and tail["kv_held_share"] > 1.5, tail
    # ten times the cache and more is said in times (1e12 requests/s had held 7715246377247% of it)
    flood = cli(*flags[:-1], "1e12")
    assert "(overloaded: its lengths hold 7.72e+10 times the KV cache)" in flood.out, flood.out


def test_batch_rows_cover_the_columns_of_the_reference() -> None:
    with open(MEASURED_RUNS, newline="") as fh:
        header = next(csv.reader(fh))
    assert set(INPUT_COLUMNS) <= set(header)


@pytest.mark.e2e
def test_calibration_is_reproducible(calibration: Calibration | None) -> None:
    """Refitting from the reference data gives the values the engine ships with. (`dse calibrate`
    runs as a process started with the session, beside the other tests: see conftest.)"""
    assert calibration is not None
    proc, out = calibration.result(), calibration.file
    assert proc.code == 0, proc.err
    fresh = json.loads(out.read_text())
    shipped = json.loads(CALIBRATION_FILE.read_text())
    for key, value in shipped["params"].items():
        assert fresh["params"][key] == pytest.approx(value, rel=1e-3, abs=1e-6), key
    for name, eng in shipped["engines"].items():
        assert fresh["engines"][name]["speed"] == pytest.approx(eng["speed"], rel=1e-3)
        assert fresh["engines"][name]["mtp_accept_rate"] == pytest.approx(eng["mtp_accept_rate"], rel=1e-3)
        assert fresh["engines"][name]["prefill_chunk_per_instance"] == eng["prefill_chunk_per_instance"]
    speeds = [e["speed"] for e in fresh["engines"].values()]
    assert float(np.exp(np.mean(np.log(speeds)))) == pytest.approx(1.0, rel=1e-9)  # relative speeds
    assert fresh["provenance"]["rows_fitted"] == 223
    assert load_params().provenance["fitted_by"] == "dse calibrate"
    # the error figures dse predict quotes, cross-validation included, are the shipped ones
    for key, value in shipped["provenance"].items():
        if key.endswith("_ape"):
            assert fresh["provenance"][key] == pytest.approx(value, abs=2e-3), key
    assert fresh["provenance"]["loho_tput_median_ape"] > fresh["provenance"]["in_sample_tput_median_ape"]
    assert fresh["provenance"]["hardware_fitted"] == shipped["provenance"]["hardware_fitted"]
    assert "leave-one-hardware-out abs error" in proc.out
    # the latency side: its fitted offsets and cross-validated errors, as shipped
    for key, value in shipped["latency"].items():
        assert fresh["latency"][key] == pytest.approx(value, abs=1e-9), key
    for key, value in shipped["power"].items():  # the GPU power shares, fitted on the runs' power
        assert fresh["power"][key] == pytest.approx(value, rel=1e-3), key
    for basis in ("in_sample_median_ape", "loho_median_ape"):
        for key, value in shipped["provenance"]["latency"][basis].items():
            assert fresh["provenance"]["latency"][basis][key] == pytest.approx(value, abs=2e-3), key
    assert "leave-one-hardware-out abs error of the simulated percentiles" in proc.out


def test_predict_states_its_expected_error(cli: Cli) -> None:
    """The error to expect comes with each prediction: in-sample on measured hardware, the
    leave-one-hardware-out figure on hardware the calibration never saw (B300), and a warning for
    a model it never measured; --json carries the same."""
    prov = load_params().provenance

    def last_line(*flags: str) -> str:
        proc = cli("predict", *flags, "--conc", "64")
        assert proc.code == 0, proc.err
        return proc.out.strip().splitlines()[-1]

    seen = last_line("--hardware", "b200")
    assert "(datasheet kernels, in-sample: the calibration saw this hardware)" in seen
    med, p75 = prov["in_sample_tput_median_ape"], prov["in_sample_tput_p75_ape"]
    assert f"tokens/s/GPU {med:.0%} / {p75:.0%}" in seen
    unseen = last_line("--hardware", "b300")
    assert "(datasheet kernels, leave-one-hardware-out: the calibration did not see this hardware)" in unseen
    assert f"tokens/s/GPU {prov['loho_tput_median_ape']:.0%} / {prov['loho_tput_p75_ape']:.0%}" in unseen
    assert "unmeasured" not in seen + unseen
    assert "deepseek-v3 runs only: this model's error is unmeasured" in last_line(
        "--hardware",
        "b200",
        "--model",
        "kimi-k3",
        "--precision",
        "fp4",  # fp8 weights do not fit 8 GPUs
    )
    js = cli("predict", "--hardware", "b300", "--conc", "64", "--json")
    err = json.loads(js.out)["expected_error"]
    assert err["basis"] == "leave-one-hardware-out"
    assert err["tput_median_ape"] == prov["loho_tput_median_ape"] and err["model_fitted"] is True
    # the simulated percentiles' error on the same basis: cross-validated for unseen hardware
    lat = prov["latency"]["loho_median_ape"]
    assert err["latency_median_ape"] == lat
    assert f"simulated TTFT p50 / p99 {lat['ttft_p50']:.0%} / {lat['ttft_p99']:.0%}" in unseen
    assert f"TPOT p50 / p99 {lat['tpot_p50']:.0%} / {lat['tpot_p99']:.0%}" in unseen


def test_no_expected_error_from_a_calibration_file_without_its_figures() -> None:
    from dataclasses import replace

    from dse.perf.expected_error import expected_error

    params = load_params()
    old = {k: v for k, v in params.provenance.items() if not k.startswith("loho_")}
    assert expected_error(replace(params, provenance=old), "b300", "deepseek-v3") is None
    assert expected_error(replace(params, provenance=old), "b200", "deepseek-v3") is not None
    assert expected_error(replace(params, provenance={}), "b200", "deepseek-v3") is None


def test_a_prediction_on_hardware_a_calibration_without_cross_validation_never_saw_says_so(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dse calibrate --no-cross-validation` stores the in-sample error alone: a prediction on
    hardware that fit did not see had printed no expected-error line at all (and `--json` a null),
    so nothing said the answer was out of sample."""
    doc = json.loads(CALIBRATION_FILE.read_text())
    doc["provenance"] = {k: v for k, v in doc["provenance"].items() if not k.startswith("loho_")}
    doc["provenance"]["latency"]["loho_median_ape"] = None
    path = tmp_path / "no-cv.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setenv("DSE_CALIBRATION", str(path))
    unseen = cli("predict", "--hardware", "b300", "--conc", "64")
    assert unseen.code == 0, unseen.err
    last = unseen.out.strip().splitlines()[-1]
    assert last.startswith("expected error against measured runs: unknown: the calibration did not see")
    assert "(it measured b200, " in last and "stores no leave-one-hardware-out error" in last
    js = cli("predict", "--hardware", "b300", "--conc", "64", "--json")
    assert json.loads(js.out)["expected_error"] is None
    assert "dse: warning: expected error against measured runs: unknown" in js.err
    seen = cli("predict", "--hardware", "b200", "--conc", "64")
    assert "(datasheet kernels, in-sample: the calibration saw this hardware)" in seen.out
    assert "unknown" not in seen.out + seen.err


def test_a_calibration_of_few_runs_says_so_on_hardware_it_did_not_see(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A calibration fitted on 2 runs of one GPU type stores no leave-one-hardware-out error: on
    other hardware the prediction's one trust line had said only that the fit did not see it,
    dropping the "fitted 2 runs, fewer than the 25" it says on the hardware it saw."""
    doc = json.loads(CALIBRATION_FILE.read_text())
    doc["provenance"] = {k: v for k, v in doc["provenance"].items() if not k.startswith("loho_")}
    doc["provenance"]["latency"]["loho_median_ape"] = None
    doc["provenance"]["rows_fitted"] = 2
    path = tmp_path / "two-runs.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setenv("DSE_CALIBRATION", str(path))
    few = "the calibration fitted 2 runs, fewer than the 25 or so values it sets: a poorly determined fit"
    for hardware in ("b300", "b200"):  # unseen, seen
        res = cli("predict", "--hardware", hardware, "--conc", "64")
        assert res.code == 0, res.err
        last = res.out.strip().splitlines()[-1]
        assert last.startswith("expected error against measured runs") and few in last, (hardware, last)
    js = cli("predict", "--hardware", "b300", "--conc", "64", "--json")
    assert "dse: warning: expected error against measured runs: unknown" in js.err and few in js.err


def _reference_rows(n: int) -> list[dict[str, str]]:
    with open(MEASURED_RUNS, newline="") as fh:
        return list(csv.DictReader(fh))[:n]


def test_one_row_that_fails_in_evaluation_does_not_abort_the_others(catalog) -> None:  # type: ignore[no-untyped-def]
    from dse.perf.benchmark_rows import predict_rows

    rows = _reference_rows(3)
    bad = dict(rows[0], hardware="vr200", precision="bf16")  # no bf16 figure is published
    out = predict_rows([*rows, bad], catalog, load_params())
    assert all(r["pred_error"] == "" for r in out[:3])
    assert "bf16" in str(out[3]["pred_error"]) and out[3]["pred_tput_per_gpu"] == ""


def test_prefill_pool_whose_weights_do_not_fit_is_flagged(catalog) -> None:  # type: ignore[no-untyped-def]
    from dse.perf.benchmark_rows import predict_rows

    row = dict(
        _reference_rows(1)[0],
        precision="fp8",
        prefill_tp="1",
        prefill_ep="1",
        prefill_dp_attention="False",
        prefill_num_workers="1",
        num_prefill_gpu="1",
    )
    out = predict_rows([row], catalog, load_params())[0]
    # named by its row as every other refusal, with no predictions (the peak HBM had been filled)
    assert out["pred_tput_per_gpu"] == "" and out["pred_hbm_peak_gb_per_gpu"] == ""
    assert str(out["pred_error"]).startswith("input row 1: prefill-weights-do-not-fit: weights need")


AFD = dict(
    hardware="b200", framework="sglang", model="dsr1", precision="fp8", spec_method="none", disagg="True",
    isl="4000", osl="1000", conc="512", prefill_tp="8", prefill_ep="8", prefill_dp_attention="True",
    prefill_num_workers="2", num_prefill_gpu="16", decode_tp="8", decode_ep="8", decode_dp_attention="True",
    decode_num_workers="2", num_decode_gpu="16", num_ffn_gpu="16", ffn_num_workers="1", ffn_ep="16",
)  # fmt: skip


AFD_FLAGS = (
    "--hardware b200 --afd --tp 8 --dp-attention --decode-gpus 16 --decode-workers 2 --ffn-gpus 16 "
    "--ffn-ep 16 --prefill-gpus 16 --prefill-workers 2 --prefill-dp-attention --isl 4000 --osl 1000 "
    "--conc 512 --json"
)  # the attention-FFN deployment the row AFD describes


def _predicted(cli: Cli, flags: str = AFD_FLAGS) -> dict[str, Any]:
    """`dse predict`'s JSON document for ``flags``."""
    proc = cli("predict", *flags.split())
    assert proc.code == 0, proc.err
    doc: dict[str, Any] = json.loads(proc.out)
    return doc


@pytest.mark.parametrize(
    "flags, pool",
    [
        ("--hardware b200 --framework trt --mtp", "decode"),
        ("--hardware h200 --mtp", "decode"),
        ("--hardware gb200 --afd --mtp", "expert"),
    ],
)
def test_the_decode_step_parts_add_up_to_the_step_with_mtp(cli: Cli, flags: str, pool: str) -> None:
    """The step is broken into GEMM, attention, communication and overhead; with MTP the draft
    layers' passes are in each part. They had been in none: B200 TensorRT-LLM's parts added up
    to 29.20 ms of a 30.64 ms step (1 + drafts / 61 layers short)."""
    proc = cli("predict", *flags.split(), "--json")
    assert proc.code == 0, proc.err
    pred = json.loads(proc.out)["prediction"]
    names = ("gemm", "attention", "comm", "overhead") if pool == "decode" else ("gemm", "comm", "overhead")
    assert sum(pred[f"{pool}_{k}_ms"] for k in names) == pytest.approx(pred["decode_step_ms"], rel=1e-9)


def test_predict_attention_ffn_disaggregated_from_flags_and_rows(tmp_path: Path, cli: Cli, catalog) -> None:  # type: ignore[no-untyped-def]
    from dse.perf.benchmark_rows import predict_rows

    doc = _predicted(cli)
    pred = doc["prediction"]
    row = predict_rows([AFD], catalog, load_params())[0]
    assert row["pred_error"] == ""
    assert float(row["pred_tput_per_gpu"]) == pytest.approx(pred["tput_per_gpu"], rel=1e-3)
    # every GPU counts: 16 prefill, 16 attention, 16 expert
    served = float(row["pred_output_tput_per_gpu"]) * 32 + float(row["pred_input_tput_per_gpu"]) * 16
    assert served / 48 == pytest.approx(float(row["pred_tput_per_gpu"]), rel=1e-3)
    # the step by pool: the attention pool's pass (decode_*), the expert pool's (expert_*) and the
    # hidden states' transfer run side by side; the slowest paces the step, and each pool shows
    # its own work (16 attention GPUs never report zero attention)
    attention = sum(
        pred[k] for k in ("decode_gemm_ms", "decode_attention_ms", "decode_comm_ms", "decode_overhead_ms")
    )
    experts = sum(pred[k] for k in ("expert_gemm_ms", "expert_comm_ms", "expert_overhead_ms"))
    paced = {"attention pool": attention, "expert pool": experts, "transfer": pred["afd_transfer_ms"]}
    assert max(paced.values()) == pytest.approx(pred["decode_step_ms"])
    assert paced[pred["decode_paced_by"]] == pytest.approx(pred["decode_step_ms"])
    assert pred["decode_attention_ms"] > 0 and pred["expert_gemm_ms"] > 0
    narrow = _predicted(cli, AFD_FLAGS.replace("--ffn-gpus 16 --ffn-ep 16", "--ffn-gpus 8 --ffn-ep 8"))
    # (both paced by the transfer since its fan-out and RDMA waits are counted; the attention
    # pool still shows its own work)
    assert narrow["prediction"]["decode_paced_by"] != "attention pool"
    assert narrow["prediction"]["decode_attention_ms"] > 0
    # the simulation steps at the pace of the slowest pool too: its TPOT is the closed form's step
    # (disaggregated decode carries no prefill) for either expert pool, and so is the batch row's
    for one in (doc, narrow):
        assert one["latency"]["percentiles"]["p50"]["tpot_ms"] == pytest.approx(
            one["prediction"]["tpot_mean_ms"], rel=0.05
        )
    assert float(row["pred_tpot_p50_ms"]) == pytest.approx(pred["tpot_mean_ms"], rel=0.05)
    # more expert instances never slow a step down; an expert pool too small for the experts fails
    wider = predict_rows([dict(AFD, num_ffn_gpu="32", ffn_num_workers="2")], catalog, load_params())[0]
    assert float(wider["pred_intvty_tok_s_user"]) >= float(row["pred_intvty_tok_s_user"]) * (1 - 1e-9)
    tiny = predict_rows([dict(AFD, num_ffn_gpu="1", ffn_ep="1")], catalog, load_params())[0]
    assert str(tiny["pred_error"]).startswith("input row 1: ffn-weights-do-not-fit")
    agg = predict_rows([dict(AFD, disagg="False")], catalog, load_params())[0]
    assert "num_ffn_gpu" in str(agg["pred_error"]) and "disaggregated" in str(agg["pred_error"])
    odd = predict_rows([dict(AFD, ffn_ep="3")], catalog, load_params())[0]
    assert "ffn_ep" in str(odd["pred_error"]) and "must divide" in str(odd["pred_error"])
    alone = cli("predict", "--hardware", "b200", "--ffn-gpus", "16")
    assert alone.code == 2 and "--ffn-gpus = 16: needs --afd" in alone.err
    for flag, value in (("--prefill-gpus", "16"), ("--decode-workers", "3"), ("--prefill-tp", "4")):
        aggregated = cli("predict", "--hardware", "b200", flag, value)  # it had been ignored in silence
        assert aggregated.code == 2 and f"{flag} = {value}: needs --disagg" in aggregated.err, aggregated.err


def test_predict_says_which_links_the_hidden_states_cross(cli: Cli) -> None:
    """Two 8-GPU attention instances and a 16-GPU expert instance: 32 GPUs, over four 8-GPU B200
    nodes (the NICs) or inside one 72-GPU GB200 NVL72 rack (NVLink, :func:`~dse.perf.afd.afd_in_domain`),
    where the transfer takes a fraction of the time (`afd_transfer_link`, `afd_transfer_ms`)."""
    nodes = _predicted(cli)["prediction"]
    rack = _predicted(cli, AFD_FLAGS.replace("--hardware b200", "--hardware gb200"))["prediction"]
    assert (nodes["afd_transfer_link"], rack["afd_transfer_link"]) == ("nic", "nvlink")
    assert rack["afd_transfer_ms"] < nodes["afd_transfer_ms"] / 3


def test_an_afd_deployment_of_a_dense_model_is_refused(cli: Cli, catalog: Catalog) -> None:
    """llama-3.1-70b has no routed experts: `--afd` had been taken, and an "expert pool" of its
    dense FFNs priced (expert_gemm_ms 5.5 on h200), as had a batch row with an FFN pool."""
    from dse.perf.benchmark_rows import predict_rows

    proc = cli("predict", "--hardware", "h200", "--model", "llama-3.1-70b", "--afd")
    assert proc.code == 2 and proc.out == ""
    assert proc.err == (
        "dse: error: dse predict: --afd: needs a model with routed experts to split from attention "
        "(llama-3.1-70b has none)\n"
    )
    dense = dict(AFD, hardware="h200", model="llama-3.1-70b", precision="bf16", prefill_ep="1", decode_ep="1",
                 prefill_dp_attention="False", decode_dp_attention="False", ffn_ep="")  # fmt: skip
    (row,) = predict_rows([dense], catalog, load_params())
    assert row["pred_error"] == (
        "input row 1: num_ffn_gpu = 16: needs a model with routed experts to split from attention "
        "(llama-3.1-70b has none)"
    )
    assert row["pred_tput_per_gpu"] == ""
    (disagg,) = predict_rows([dict(dense, num_ffn_gpu="", ffn_num_workers="")], catalog, load_params())
    assert disagg["pred_error"] == "" and float(disagg["pred_tput_per_gpu"]) > 0


def test_afd_step_follows_the_slower_side(catalog) -> None:  # type: ignore[no-untyped-def]
    """With the expert pool cut from 16 GPUs to 8, its share of each step doubles and paces it.
    On GB200 NVL72 both pools stay inside one NVLink domain; on 8-GPU B200 nodes the 16-GPU
    expert pool would also pay the cross-node all-to-all latency, which is a different effect."""
    from dse.perf.benchmark_rows import evaluate, parse_row

    p = load_params()
    afd = dict(AFD, hardware="gb200")
    wide = evaluate([parse_row(afd, catalog)], catalog, p)
    narrow = evaluate([parse_row(dict(afd, num_ffn_gpu="8", ffn_ep="8"), catalog)], catalog, p)
    assert narrow.tpot_s[0] > wide.tpot_s[0]
    assert narrow.decode_attention_s[0] == 0.0  # the expert side binds: no attention in its step


def test_afd_step_is_paced_by_the_hidden_state_transfer_when_the_nics_are_slow(catalog) -> None:  # type: ignore[no-untyped-def]
    """With NICs a thousand times slower, moving hidden states between the pools takes longer than
    either side's compute: the step is then all communication, twice the transfer (its bytes over
    the NICs and its fixed RDMA waits, :func:`~dse.perf.afd.afd_transfer_latency_s`)."""
    from dataclasses import replace

    from dse.perf.afd import SIDE_SHARE, afd_bytes_per_token, afd_transfer_latency_s
    from dse.perf.benchmark_rows import deployment_of, evaluate, parse_row
    from dse.perf.serving import _decode_step

    p = load_params()
    row = parse_row(dict(AFD, ffn_num_workers="2", ffn_ep="8"), catalog)
    res = evaluate([row], catalog, p)
    slow = replace(p, nic_eff=p.nic_eff / 1000)
    dep = deployment_of([row], catalog, slow)
    b = np.array([64.0])
    cost, step = _decode_step(dep, slow, b)
    assert dep.ffn is not None
    sent = afd_bytes_per_token(dep.ffn) * b
    nic = dep.decode.nic_bytes_per_s * slow.nic_eff * dep.decode.gpus
    wait = float(afd_transfer_latency_s(dep.ffn, slow)[0])
    assert cost.comm_s[0] == pytest.approx((float(sent[0] / nic[0]) + wait) / SIDE_SHARE)
    assert cost.gemm_s[0] == cost.attention_s[0] == cost.overhead_s[0] == 0.0
    assert step[0] == pytest.approx(cost.comm_s[0])
    assert res.decode_comm_s[0] < cost.comm_s[0]
    # one 8-GPU expert instance receives what two 8-GPU attention instances send: twice as long
    # as two expert instances, which receive one attention instance's each
    narrow = deployment_of([parse_row(dict(AFD, num_ffn_gpu="8", ffn_ep="8"), catalog)], catalog, slow)
    cost2, _ = _decode_step(narrow, slow, b)
    assert cost2.comm_s[0] - wait / SIDE_SHARE == pytest.approx(2 * (cost.comm_s[0] - wait / SIDE_SHARE))


CAPPED = dict(
    hardware="h200", framework="dynamo-sglang", model="dsr1", precision="fp8", spec_method="mtp",
    disagg="True", isl="1024", osl="1024", conc="2048", prefill_tp="8", prefill_ep="8",
    prefill_dp_attention="True", prefill_num_workers="1", num_prefill_gpu="8", decode_tp="8",
    decode_ep="8", decode_dp_attention="True", decode_num_workers="6", num_decode_gpu="48",
)  # fmt: skip


def test_running_request_cap_queues_the_requests_beyond_it(catalog) -> None:  # type: ignore[no-untyped-def]
    from dse.perf.benchmark_rows import predict_rows

    free, capped, loose, own = predict_rows(
        [
            dict(CAPPED, decode_max_running_requests="none"),
            dict(CAPPED, decode_max_running_requests="128"),
            dict(CAPPED, decode_max_running_requests=""),
            dict(CAPPED, decode_max_running_requests="48"),
        ],
        catalog,
        load_params(),
    )
    assert free["pred_error"] == capped["pred_error"] == loose["pred_error"] == ""
    assert float(capped["pred_tput_per_gpu"]) < 0.9 * float(free["pred_tput_per_gpu"])
    assert float(capped["pred_ttft_mean_s"]) > 1.5 * float(free["pred_ttft_mean_s"])
    assert capped["pred_binding_regime"] == "running-request-cap"
    assert _preds(loose) == _preds(own)  # an empty cell is the engine's own: SGLang with MTP, 48
    # a cap above the batch the load forms changes nothing
    uncapped = dict(CAPPED, conc="64", decode_max_running_requests="none")
    batch = predict_rows([uncapped], catalog, load_params())[0]
    high = dict(CAPPED, conc="64", decode_max_running_requests="4096")
    high = predict_rows([high], catalog, load_params())[0]
    assert _preds(high) == _preds(batch)


def _preds(row: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in row.items() if k.startswith("pred_")}


@pytest.mark.parametrize("bad", ["0", "2.5", "-4", "many", "inf", "1e13"])
def test_running_request_cap_refuses_what_is_not_a_count(catalog, bad: str) -> None:  # type: ignore[no-untyped-def]
    from dse.perf.benchmark_rows import predict_rows

    out = predict_rows([dict(CAPPED, decode_max_running_requests=bad)], catalog, load_params())[0]
    assert out["pred_tput_per_gpu"] == ""
    assert str(out["pred_error"]) == (
        f"input row 1: decode_max_running_requests = {Written(bad)!r}: must be a whole number from 1 to "
        "1e+12 (requests per instance), or none"
    )


def test_running_request_cap_flag(cli: Cli) -> None:
    flags = "--hardware h200 --framework dynamo-sglang --mtp --disagg --prefill-dp-attention "
    flags += "--prefill-gpus 8 --decode-gpus 48 --decode-workers 6 --tp 8 --ep 8 --dp-attention "
    flags += "--conc 2048 --json"
    free = cli("predict", *flags.split(), "--decode-max-running-requests", "none")
    capped = cli("predict", *flags.split(), "--decode-max-running-requests", "128")
    assert free.code == 0 and capped.code == 0, capped.err
    a, b = (json.loads(p.out) for p in (free, capped))
    assert b["prediction"]["tput_per_gpu"] < a["prediction"]["tput_per_gpu"]
    assert b["prediction"]["ttft_mean_s"] > a["prediction"]["ttft_mean_s"]
    # the simulation holds the requests beyond the cap in the queue too: the TTFT tail grows
    assert b["latency"]["percentiles"]["p99"]["ttft_s"] > a["latency"]["percentiles"]["p99"]["ttft_s"]
    b = b["prediction"]
    assert b["decode_batch_per_instance"] <= 128 + 1e-6 and b["binding_regime"] == "running-request-cap"
    bad = cli("predict", "--hardware", "h200", "--decode-max-running-requests", "0")
    assert bad.code == 2
    assert bad.err.strip() == (
        "dse: error: dse predict: --decode-max-running-requests = 0: must be a whole number from 1 "
        "to 1e+12 (requests per instance), or none"
    )
    # unset, SGLang with MTP runs 48 an instance (6 on each of its 8 attention-DP ranks), as its
    # launcher resets an unset flag; --json says so, the text's first line too
    own = json.loads(cli("predict", *flags.split()).out)
    assert own["assumed"]["decode_max_running_requests"] == 48
    assert round(own["prediction"]["decode_batch_per_instance"]) == 48
    assert a["assumed"]["decode_max_running_requests"] is None
    text = cli("predict", *flags.removesuffix(" --json").split()).out.splitlines()[0]
    assert "48 running at most (SGLang's own cap with MTP, 6 on each of 8 attention-DP ranks)" in text, text


@pytest.mark.parametrize(
    ("framework", "hardware", "cap", "words"),
    [
        ("vllm", "h200", 1024, "vLLM's own --max-num-seqs"),
        ("trt", "h200", 2048, "TensorRT-LLM's own max_batch_size"),
        ("atom", "mi355x", 512, "ATOM's own --max-num-seqs"),
    ],
)
def test_engine_default_running_cap(cli: Cli, framework: str, hardware: str, cap: int, words: str) -> None:
    """Unset, vLLM, TensorRT-LLM and ATOM cap a decode instance at their own defaults (one
    instance without attention DP: one rank): at as many clients as the cap every request runs
    (as with only the KV cache capping, 'none'); at twice as many half of them wait, so the TTFT
    grows far beyond the uncapped instance's, and the closed form says the cap binds. --json's
    `assumed` and the text's first line name the cap taken."""
    flags = f"--hardware {hardware} --framework {framework} --tp 8 --ep 8 --isl 256 --osl 256".split()

    def run(conc: int, *extra: str) -> dict:  # type: ignore[type-arg]
        proc = cli("predict", *flags, "--conc", str(conc), "--json", *extra)
        assert proc.code == 0, proc.err
        return json.loads(proc.out)  # type: ignore[no-any-return]

    at, beyond = run(cap), run(2 * cap)
    free = run(2 * cap, "--decode-max-running-requests", "none")
    assert at["assumed"]["decode_max_running_requests"] == cap
    assert beyond["assumed"]["decode_max_running_requests"] == cap
    assert free["assumed"]["decode_max_running_requests"] is None  # 'none': the KV cache alone
    assert at["prediction"]["binding_regime"] != "running-request-cap"
    assert beyond["prediction"]["binding_regime"] == "running-request-cap"
    assert free["prediction"]["binding_regime"] != "running-request-cap"
    assert round(beyond["prediction"]["decode_batch_per_instance"]) == cap
    assert free["prediction"]["decode_batch_per_instance"] > 1.5 * cap
    runs = (("at", at), ("beyond", beyond), ("free", free))
    p50 = {k: d["latency"]["percentiles"]["p50"]["ttft_s"] for k, d in runs}
    assert p50["beyond"] > 10 * p50["at"] and p50["beyond"] > 4 * p50["free"], p50
    assert beyond["prediction"]["ttft_mean_s"] > 4 * free["prediction"]["ttft_mean_s"]
    said = f"{cap} running at most ({words})"  # in the text where the clients reach it
    assert said not in cli("predict", *flags, "--conc", str(cap)).out.splitlines()[0]
    text = cli("predict", *flags, "--conc", str(2 * cap)).out.splitlines()[0]
    assert said in text, text


def test_engine_default_running_cap_per_rank(catalog: Catalog) -> None:
    """vLLM, TensorRT-LLM and ATOM apply their default to each attention-DP rank (each runs a
    scheduler of its own), SGLang shares its 48 among them; vLLM takes 256 on a GPU under 70 GiB
    or an A100, as its own table does."""
    from dataclasses import replace

    from dse.perf.benchmark_rows import PoolSpec, engine_running_cap, vllm_max_num_seqs

    h200, mi355x = catalog.hardware("h200"), catalog.hardware("mi355x")
    dp8 = PoolSpec(gpus=8, attn_tp=1, ep=8, instances=1)
    tp8 = PoolSpec(gpus=8, attn_tp=8, ep=8, instances=1)
    assert engine_running_cap("vllm", False, dp8, h200) == 8 * 1024
    assert engine_running_cap("trt", True, dp8, h200) == 8 * 2048
    assert engine_running_cap("atom", False, dp8, mi355x) == 8 * 512
    assert engine_running_cap("sglang", True, dp8, h200) == 48
    assert engine_running_cap("sglang", True, tp8, h200) == 48
    assert engine_running_cap("sglang", False, tp8, h200) == float("inf")
    small = replace(h200, hbm=replace(h200.hbm, capacity_gb=48.0, visible_gib=None))
    a100 = replace(h200, id="a100-sxm", hbm=replace(h200.hbm, capacity_gb=80.0, visible_gib=None))
    assert [vllm_max_num_seqs(h) for h in (h200, small, a100)] == [1024, 256, 256]


def test_engine_default_running_cap_text_per_rank(cli: Cli) -> None:
    """The text's first line names an engine's own cap where the clients reach it, with what each
    attention-DP rank runs; a cap they do not reach is left to --json's ``assumed``."""
    flags = "--model gpt-oss-120b --hardware h200 --framework trt --tp 2 --ep 2 --dp-attention --isl 256"
    said = "4096 running at most (TensorRT-LLM's own max_batch_size, 2048 on each of 2 attention-DP ranks)"
    for conc, shown in (("8", False), ("8192", True)):
        proc = cli("predict", *flags.split(), "--osl", "256", "--conc", conc)
        assert proc.code == 0, proc.err
        assert (said in proc.out.splitlines()[0]) is shown, proc.out.splitlines()[0]


def test_scheduler_recv_interval_flag(cli: Cli) -> None:
    """SGLang looking for new requests every 30 decode steps: an aggregated instance busy decoding
    sees a new request up to 30 steps late, so the TTFT median grows by about half of 30 steps."""
    flags = "--hardware b200 --framework sglang --tp 8 --ep 8 --conc 64 --json".split()
    every, late = (cli("predict", *flags, *extra) for extra in ([], ["--scheduler-recv-interval", "30"]))
    assert every.code == 0 and late.code == 0, late.err
    a, b = (json.loads(p.out) for p in (every, late))
    step = a["latency"]["percentiles"]["p50"]["tpot_ms"] / 1e3
    added = b["latency"]["percentiles"]["p50"]["ttft_s"] - a["latency"]["percentiles"]["p50"]["ttft_s"]
    assert 10 * step < added < 20 * step, (added, step)
    text = cli("predict", *flags[:-1], "--scheduler-recv-interval", "30").out.splitlines()[0]
    assert "new requests looked for every 30 decode steps" in text, text
    bad = cli("predict", "--hardware", "b200", "--framework", "sglang", "--scheduler-recv-interval", "0")
    assert bad.code == 2
    assert bad.err.strip() == (
        "dse: error: dse predict: --scheduler-recv-interval = 0: must be a whole number from 1 to 1000 "
        "(decode steps)"
    )
    # TensorRT-LLM (the default), vLLM and ATOM have no such setting: it had slowed their TTFT 3x
    for fw in ("trt", "vllm"):
        other = cli("predict", "--hardware", "b200", "--framework", fw, "--scheduler-recv-interval", "30")
        assert (other.code, other.out) == (2, ""), other.out
        assert other.err == (
            "dse: error: dse predict: --scheduler-recv-interval = 30: is SGLang's setting alone: "
            f"the {fw} engine has none (leave it out)\n"
        )


def test_adp_balance_timeout_iters_flag(cli: Cli) -> None:
    """TensorRT-LLM balancing 8 attention-DP ranks with a 60-iteration timer: at 64 clients a new
    request rarely finds one queued for every rank, so it mostly waits for the timer, on average
    about half of 60 steps; a row that cannot balance is refused, one line and exit 2."""
    flags = "--hardware b200 --framework trt --tp 8 --ep 8 --dp-attention --conc 64 --json".split()
    plain, held = (cli("predict", *flags, *extra) for extra in ([], ["--adp-balance-timeout-iters", "60"]))
    assert plain.code == 0 and held.code == 0, held.err
    a, b = (json.loads(p.out) for p in (plain, held))
    step = a["latency"]["percentiles"]["p50"]["tpot_ms"] / 1e3
    added = b["latency"]["percentiles"]["p50"]["ttft_s"] - a["latency"]["percentiles"]["p50"]["ttft_s"]
    assert 10 * step < added < 45 * step, (added, step)
    text = cli("predict", *flags[:-1], "--adp-balance-timeout-iters", "60").out.splitlines()[0]
    assert "context requests held up to 60 iterations for every attention-DP rank" in text, text
    bad = cli("predict", "--hardware", "b200", "--framework", "trt", "--adp-balance-timeout-iters", "60")
    assert bad.code == 2
    assert bad.err.strip() == (
        "dse: error: dse predict: --adp-balance-timeout-iters = 60: only an aggregated TensorRT-LLM (trt) "
        "row with attention DP balances its ranks"
    )


def test_tokens_per_speculative_step_follow_the_acceptance_rate() -> None:
    from dse.perf.params import mtp_tokens_per_step

    a = 0.7
    assert mtp_tokens_per_step(a, 0) == pytest.approx(1.0)  # no drafts: the verified token only
    assert mtp_tokens_per_step(a, 1) == pytest.approx(1.0 + a)
    assert mtp_tokens_per_step(a, 3) == pytest.approx(1.0 + a + a**2 + a**3)
    depths = mtp_tokens_per_step(a, np.arange(0, 12))
    gains = np.diff(depths)
    assert np.all(gains > 0) and np.all(np.diff(gains) < 0)  # deeper drafts gain ever less
    assert depths[-1] < 1.0 / (1.0 - a)  # and never more than the geometric limit
    assert mtp_tokens_per_step(0.9, 3) > mtp_tokens_per_step(0.5, 3)


def test_draft_depth_of_a_row_sets_the_tokens_per_step(catalog) -> None:  # type: ignore[no-untyped-def]
    from dse.perf.benchmark_rows import parse_row, predict_rows

    params = load_params()
    engine = params.engine("sglang")
    default, one, deep, explicit = predict_rows(
        [
            CAPPED,
            dict(CAPPED, mtp_draft_tokens="1"),
            dict(CAPPED, mtp_draft_tokens="6"),
            dict(CAPPED, mtp_draft_tokens=str(engine.mtp_draft_tokens)),
        ],
        catalog,
        params,
    )
    assert all(r["pred_error"] == "" for r in (default, one, deep, explicit))
    assert _preds(explicit) == _preds(default)  # the engine's depth is the default
    assert float(one["pred_intvty_tok_s_user"]) < float(default["pred_intvty_tok_s_user"])
    assert parse_row(dict(CAPPED, mtp_draft_tokens="1"), catalog).mtp_draft == 1.0
    # a row without MTP takes 0 or nothing
    plain = dict(CAPPED, spec_method="none")
    base, zero = predict_rows([plain, dict(plain, mtp_draft_tokens="0")], catalog, params)
    assert zero["pred_error"] == "" and _preds(zero) == _preds(base)


@pytest.mark.parametrize(
    ("spec", "bad", "rule"),
    [
        ("mtp", "0", "must be a whole number from 1 to 16 with MTP"),
        ("mtp", "2.5", "must be a whole number from 1 to 16 with MTP"),
        ("mtp", "17", "must be a whole number from 1 to 16 with MTP"),
        ("mtp", "three", "must be a whole number from 1 to 16 with MTP"),
        ("none", "3", "must be empty or 0 in a row without MTP (spec_method none)"),
    ],
)
def test_draft_depth_refuses_what_cannot_be_one(catalog, spec: str, bad: str, rule: str) -> None:  # type: ignore[no-untyped-def]
    from dse.perf.benchmark_rows import predict_rows

    row = dict(CAPPED, spec_method=spec, mtp_draft_tokens=bad)
    out = predict_rows([row], catalog, load_params())[0]
    assert out["pred_tput_per_gpu"] == ""
    # a number as written (0), other text quoted ('three')
    assert out["pred_error"] == f"input row 1: mtp_draft_tokens = {Written(bad)!r}: {rule}"


def test_draft_depth_flag(cli: Cli) -> None:
    flags = "--hardware b200 --framework trt --mtp --tp 8 --ep 8 --conc 64 --json".split()
    deep = cli("predict", *flags, "--mtp-draft-tokens", "3")
    shallow = cli("predict", *flags, "--mtp-draft-tokens", "1")
    assert deep.code == 0 and shallow.code == 0, shallow.err
    a, b = (json.loads(p.out)["prediction"] for p in (deep, shallow))
    assert b["intvty_tok_s_user"] < a["intvty_tok_s_user"]
    said = json.loads(shallow.out)["assumed"]  # what the prediction took, shown with it
    rate = load_params().engine("trt").mtp_accept_rate
    assert said == {
        "kv_cache_dtype": "fp8",
        "mtp_draft_tokens": 1,
        "mtp_tokens_per_step": round(1 + rate, 4),
        "decode_max_running_requests": 2048,  # TensorRT-LLM's own max_batch_size (one rank)
    }
    table = cli("predict", *flags[:-1], "--mtp-draft-tokens", "1", "--kv-cache-dtype", "bf16")
    # (TensorRT-LLM's own cap, which 64 clients do not reach, is --json's alone)
    assert f"MTP 1 draft ({1 + rate:.2f} tokens per step), KV bf16)" in table.out.splitlines()[0]
    bad = cli("predict", "--hardware", "b200", "--mtp-draft-tokens", "2")
    assert bad.code == 2
    # the flag's own words (it had said a batch row's: "must be empty or 0 in a row without MTP
    # (spec_method none)")
    assert bad.err.strip() == (
        "dse: error: dse predict: --mtp-draft-tokens = 2: needs --mtp (the drafts of its speculative steps)"
    )


def test_kv_cache_dtype_of_a_row(catalog) -> None:  # type: ignore[no-untyped-def]
    from dse.perf.benchmark_rows import predict_rows

    # SGLang's default KV cache is bf16: an fp8 one halves the bytes per token, so the decode
    # pool holds more sequences and attention reads less
    full = dict(CAPPED, spec_method="none", conc="8192")
    bf16, fp8, named = predict_rows(
        [full, dict(full, kv_cache_dtype="fp8"), dict(full, kv_cache_dtype="BF16")], catalog, load_params()
    )
    assert bf16["pred_error"] == fp8["pred_error"] == named["pred_error"] == ""
    assert _preds(named) == _preds(bf16)  # the engine's own precision, named
    assert float(fp8["pred_tput_per_gpu"]) > float(bf16["pred_tput_per_gpu"])
    bad = predict_rows([dict(full, kv_cache_dtype="int3")], catalog, load_params())[0]
    assert bad["pred_error"] == (
        "input row 1: kv_cache_dtype = 'int3': must be bf16, fp8 or fp4 (or empty: the engine's)"
    )


def test_a_calibration_file_from_before_the_acceptance_rate_still_loads(tmp_path: Path) -> None:
    """Files that held tokens per step at the default depth load with the rate that gives them."""
    raw = json.loads(CALIBRATION_FILE.read_text())
    for name, e in raw["engines"].items():
        e["mtp_accept_tokens"] = load_params().engines[name].mtp_accept_tokens
        del e["mtp_accept_rate"]
    old = tmp_path / "calibration.json"
    old.write_text(json.dumps(raw))
    now, then = load_params(), load_params(old)
    for name, e in now.engines.items():
        assert then.engines[name].mtp_accept_rate == pytest.approx(e.mtp_accept_rate, rel=1e-9)


def test_an_engine_no_run_calibrated_is_marked_assumed(cli: Cli) -> None:
    """vLLM on NVIDIA has no measured run: its profile takes the calibrated engines' mean speed and
    MTP acceptance, and a prediction with it says so; a calibrated engine's does not."""
    prov = load_params().provenance
    assert "vllm" not in prov["engines_fitted"] and "sglang" in prov["engines_fitted"]
    vllm = cli("predict", "--hardware", "h200", "--framework", "vllm", "--conc", "16", "--requests", "100")
    assert vllm.code == 0, vllm.err
    assert "engine profile vllm has no measured runs" in vllm.out.strip().splitlines()[-1]
    sglang = cli(
        "predict", "--hardware", "h200", "--framework", "sglang", "--conc", "16", "--requests", "100"
    )
    assert "no measured runs" not in sglang.out
    assert load_params().engine("vllm").speed == 1.0


def test_a_trace_replay_is_priced_at_the_trace_alone(cli: Cli, tmp_path: Path) -> None:
    """A replay's step costs come from its own requests: --isl once moved its TTFT (the tables were
    the flags'); --requests and --long-tail do not apply to it, and a spreadsheet's byte-order mark
    is no column."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0.0,12000,300\n0.4,11000,250\n0.9,13000,280\n")
    runs = [cli("predict", "--hardware", "b200", "--load", "trace", "--trace", str(trace), "--json", *extra)
            for extra in ([], ["--isl", "50000"], ["--isl", "512", "--osl", "64"])]  # fmt: skip
    assert all(r.code == 0 for r in runs), [r.err for r in runs]
    latency = [json.loads(r.out)["latency"] for r in runs]
    assert latency[0]["percentiles"] == latency[1]["percentiles"] == latency[2]["percentiles"]
    assert latency[0]["lengths"] == "the trace's lengths" and latency[0]["requests"] == 3
    for flag, value in (("--requests", "1"), ("--long-tail", "1")):
        proc = cli("predict", "--hardware", "b200", "--load", "trace", "--trace", str(trace), flag, value)
        assert proc.code == 2, proc.err
        assert "does not apply to --load trace (the trace's requests are replayed)" in proc.err
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + trace.read_bytes())
    again = cli("predict", "--hardware", "b200", "--load", "trace", "--trace", str(bom), "--json")
    assert again.code == 0, again.err
    assert json.loads(again.out)["latency"]["percentiles"] == latency[0]["percentiles"]


def test_a_window_too_short_for_a_steady_state_warns_with_its_figures(cli: Cli) -> None:
    """Closed loop: fewer requests than two per client is mostly the first wave; open loop:
    arrivals that end before a request is through never fill the batches. Each says so."""
    short = cli("predict", "--hardware", "b200", "--conc", "256", "--requests", "100")
    assert short.code == 0, short.err
    assert "not steady: 100 requests for 256 clients, fewer than two each" in short.err
    enough = cli("predict", "--hardware", "b200", "--conc", "8", "--requests", "80")
    assert enough.code == 0 and "not steady" not in enough.err
    part = cli("predict", "--hardware", "b200", "--conc", "0.4")  # the simulation runs whole clients
    assert part.code == 2
    assert part.err.strip() == (
        "dse: error: dse predict: --conc = 0.4: must be a whole number of clients in a closed loop"
    )
    brief = cli("predict", "--hardware", "b200", "--load", "poisson", "--rate", "8", "--requests", "40")
    assert brief.code == 0, brief.err
    assert re.search(r"not steady: the 40 arrivals span [0-9.]+ s, less than a request takes end to end "
                     r"\(median [0-9.]+ s\)", brief.err), brief.err  # fmt: skip
    # 64 requests/s, five times what the instance serves: its KV cache says so, however short the window
    over = cli("predict", "--hardware", "b200", "--load", "poisson", "--rate", "64", "--requests", "40")
    assert over.code == 0 and over.err.startswith("dse: warning: overloaded: at 64 requests/s"), over.err


def test_the_text_says_one_request_and_the_default_lengths_as_numbers(cli: Cli, tmp_path: Path) -> None:
    """One client, one request and one arrival are said in the singular (it had printed "1 requests
    in flight", "1 requests for 1 clients", "trace replay, 1 requests", "the 1 arrivals span"),
    and the default --isl and --osl as numbers, as typed ones are ("ISL 1024.0 OSL 1024.0")."""
    one = cli("predict", "--hardware", "b200", "--conc", "1", "--requests", "1")
    assert one.code == 0, one.err
    head, latency = one.out.splitlines()[0], next(x for x in one.out.splitlines() if x.startswith("latency"))
    assert head.endswith(", ISL 1024 OSL 1024, 1 request in flight"), head
    assert latency.startswith("latency, simulated: closed loop, 1 request in flight; ")
    assert "; 1 request, lengths" in latency
    assert "not steady: 1 request for 1 client, fewer than two each" in one.err
    trace = tmp_path / "one.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,1000,100\n")
    replay = cli("predict", "--hardware", "b200", "--isl", "2000", "--load", "trace", "--trace", trace)
    assert replay.code == 0, replay.err
    assert replay.out.splitlines()[0].endswith(
        ", ISL 2000 OSL 1024, 64 requests in flight "
        "(the figures; the latency below runs trace replay, 1 request)"
    )
    assert "not steady: the 1 arrival spans 0 s, less than a request takes end to end" in replay.err


def test_percentiles_keep_the_digits_they_were_given(cli: Cli) -> None:
    proc = cli("predict", "--hardware", "b200", "--conc", "4", "--percentiles", "50,99.99999,99.999999,50",
               "--json")  # fmt: skip
    assert proc.code == 0, proc.err
    assert list(json.loads(proc.out)["latency"]["percentiles"]) == ["p50", "p99.99999", "p99.999999"]
    # in ascending order, each once, however typed (99,50,50 had printed p99 above p50)
    text = cli("predict", "--hardware", "b200", "--conc", "4", "--percentiles", "99,50,50").out
    assert [line.split()[0] for line in text.splitlines() if re.match(r"p[0-9]", line)] == ["p50", "p99"]


def test_long_tailed_lengths_stay_within_the_context() -> None:
    from dse.perf.latency_inputs import Lengths, Load, draw_requests

    lengths = Lengths(921.6, 921.6, tail_sigma=3.0, limit=163_840.0)
    _, isl, osl, _ = draw_requests(Load("poisson", rate=1.0), lengths, 20_000, np.random.default_rng(0))
    assert (isl + osl).max() <= 163_840 and isl.min() >= 1 and osl.min() >= 1
    assert isl.max() > 20_000  # the tail is there, up to the cap


@pytest.mark.parametrize("nominal, sigma", [(8000.0, 3.0), (1024.0, 3.0), (1024.0, 2.0)])
def test_long_tailed_lengths_keep_their_mean_within_the_context(nominal: float, sigma: float) -> None:
    """--long-tail promises log-normal lengths of the same mean, each within the model's context.
    The cap had cut a wide tail's mean: 8,000-token prompts and answers at sigma 3 in 163,840
    tokens drew 3,232 and 3,222 on average for 7,200 (the uniform lengths' mean, 0.9 of nominal)."""
    from dse.perf.latency_inputs import Lengths, Load, draw_requests

    lengths = Lengths(nominal, nominal, tail_sigma=sigma, limit=163_840.0)
    _, isl, osl, _ = draw_requests(Load("closed", concurrency=16), lengths, 400_000, np.random.default_rng(0))
    assert (isl + osl).max() <= 163_840
    assert isl.mean() == pytest.approx(0.9 * nominal, rel=0.02)
    assert osl.mean() == pytest.approx(0.9 * nominal, rel=0.02)


def test_a_trace_longer_than_a_window_is_refused(cli: Cli, tmp_path: Path) -> None:
    from dse.perf.latency import MAX_REQUESTS

    trace = tmp_path / "long.csv"
    rows = "".join(f"{i * 0.01:.2f},100,10\n" for i in range(MAX_REQUESTS + 1))
    trace.write_text("arrival_s,input_tokens,output_tokens\n" + rows)
    proc = cli("predict", "--hardware", "b200", "--load", "trace", "--trace", str(trace))
    assert proc.code == 2
    want = f"{trace}: --trace = '200,001 rows': must hold at most 200,000 requests (a window's cap)"
    assert proc.err.strip() == f"dse: error: {want}"


def test_a_batch_with_recipe_settings_predicts_the_runs_as_the_calibration_does(
    tmp_path: Path, cli: Cli
) -> None:
    """`--recipe-settings` adds the engine settings of the InferenceX runs the rows name, writes them
    beside the predictions, and predicts each row as `dse calibrate` replays it; without the flag
    the rows are modelled as they are, and the command says how many rows the settings would
    change. The flag means nothing without `--batch`."""
    from conftest import Result

    from dse.calibration.fit import read_measured
    from dse.catalog import load_catalog
    from dse.perf.benchmark_rows import ENGINE_COLUMNS, WARMUP_COLUMN, latency_of, with_recipe_settings

    with open(MEASURED_RUNS, newline="") as fh:
        reference = list(csv.DictReader(fh))
    merged = with_recipe_settings(reference)
    pairs = list(enumerate(zip(reference, merged, strict=True)))
    capped = [i for i, (a, b) in pairs if a != b and b.get(ENGINE_COLUMNS[0], "").isdigit()]
    plain = next(i for i, (a, b) in pairs if a == b)
    keep = [*capped[:3], plain]
    src = tmp_path / "in.csv"
    with open(src, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(reference[0]))
        w.writeheader()
        w.writerows(reference[i] for i in keep)

    def batch(*flags: str) -> tuple[Result, list[dict[str, str]]]:
        out = tmp_path / f"out{len(flags)}.csv"
        proc = cli("predict", "--batch", str(src), "--out", str(out), *flags)
        assert proc.code == 0, proc.err
        with open(out, newline="") as fh:
            return proc, list(csv.DictReader(fh))

    warmups = sum(merged[i].get(WARMUP_COLUMN) != reference[i].get(WARMUP_COLUMN) for i in keep)
    what = (
        "the engine settings of the InferenceX runs they name to 3 rows (dse/perf/recipe_settings.csv) "
        f"and benchmark_warmup 'none' to {warmups} row{'' if warmups == 1 else 's'}"
    )
    as_is, rows = batch()
    assert f"--recipe-settings would add {what}" in as_is.err
    assert ENGINE_COLUMNS[0] not in rows[0]
    flagged, with_settings = batch("--recipe-settings")
    assert f"added {what}" in flagged.err
    for got, i in zip(with_settings, keep, strict=True):
        assert got[ENGINE_COLUMNS[0]] == merged[i].get(ENGINE_COLUMNS[0], "")
    assert with_settings[-1] == {**rows[-1], **{c: "" for c in with_settings[-1] if c not in rows[-1]}}
    pairs_out = zip(rows[:3], with_settings[:3], strict=True)
    assert any(a["pred_ttft_p50_s"] != b["pred_ttft_p50_s"] for a, b in pairs_out)
    # each row as the calibration replays it: the measured run with its settings, the shipped fit
    catalog = load_catalog(use_env=False)
    data, _ = read_measured(src, catalog)
    for m, got in zip(data, with_settings, strict=True):
        s = latency_of(m.row, catalog, load_params()).summary()
        assert float(got["pred_ttft_p50_s"]) == round(s["ttft_p50_s"], 4)
    alone = cli("predict", "--hardware", "b200", "--recipe-settings")
    assert alone.code == 2
    assert alone.err.strip() == "dse: error: dse predict: --recipe-settings: needs --batch"


def test_a_batch_says_where_recipe_settings_replace_the_parallelism_of_a_row(
    tmp_path: Path, cli: Cli
) -> None:
    """Four GB200 runs' rows record attention DP where their scripts launched TP4 instances:
    `--recipe-settings` replaces those rows' tp, ep and dp-attention cells (and writes them so),
    which the command had not said, counting the rows among those given engine settings. It says
    how many rows it models at the parallelism their scripts launched, with the flag or without."""
    from dse.perf.benchmark_rows import PARALLEL_COLUMNS, with_recipe_settings

    with open(MEASURED_RUNS, newline="") as fh:
        reference = list(csv.DictReader(fh))
    merged = with_recipe_settings(reference)
    pairs = zip(reference, merged, strict=True)
    relaunched = [r for r, m in pairs if any(r[c] != m[c] for c in PARALLEL_COLUMNS)]
    assert len(relaunched) == 4
    src = tmp_path / "in.csv"
    with open(src, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(reference[0]))
        w.writeheader()
        w.writerows(relaunched[:2])
    said = "the parallelism their launch scripts ran to 2 rows (where the row records another)"
    for flags, lead in (((), "--recipe-settings would add"), (("--recipe-settings",), "added")):
        proc = cli("predict", "--batch", str(src), "--out", str(tmp_path / "o.csv"), *flags)
        assert proc.code == 0, proc.err
        line = next(x for x in proc.err.splitlines() if x.startswith(lead))
        assert said in line, proc.err


def test_predict_without_a_precision_serves_the_checkpoint_as_shipped(cli: Cli) -> None:
    """gpt-oss-120b's MXFP4 checkpoint fits one 80 GB GPU, as its model card says; fp8 experts
    would not (they were the default, and the prediction was refused)."""
    one_gpu = ("--hardware", "h100", "--tp", "1", "--ep", "1")
    res = cli("predict", "--model", "gpt-oss-120b", *one_gpu, "--json")
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert out["deployment"]["precision"] == "fp4"
    assert out["prediction"]["hbm_peak_gb_per_gpu"] < 80 * 1.073741824
    wide = cli("predict", "--model", "gpt-oss-120b", *one_gpu, "--precision", "fp8")
    assert wide.code == 3 and "weights need 116.8 GB per GPU" in wide.err, wide.err
    llama = cli("predict", "--model", "llama-3.1-70b", *one_gpu, "--precision", "bf16")
    assert llama.code == 3 and "weights need 141.1 GB per GPU" in llama.err, llama.err


def test_predict_runs_the_expert_parallelism_it_is_given(cli: Cli) -> None:
    """`--tp 16 --ep 8 --dp-attention` runs ep 8 (each expert split over 2 GPUs), as `dse place`'s
    16gpu-dpa-ep8 does; it was run as ep 16 while the output said 8. Without --ep every GPU of the
    instance holds experts of its own."""
    base = ("predict", "--hardware", "h200", "--tp", "16", "--dp-attention", "--json")
    given = json.loads(cli(*base, "--ep", "8").out)
    whole = json.loads(cli(*base).out)
    assert (given["deployment"]["decode_ep"], whole["deployment"]["decode_ep"]) == (8, 16)
    assert given["prediction"]["hbm_peak_gb_per_gpu"] != whole["prediction"]["hbm_peak_gb_per_gpu"]
    # what runs is what is printed: ep 1 beside DP attention runs the experts over the instance
    one = json.loads(cli(*base, "--ep", "1").out)
    assert one["deployment"]["decode_ep"] == 16 and one["prediction"] == whole["prediction"]
    wide = cli(*base, "--ep", "32")
    assert wide.code == 2 and wide.err == (
        "dse: error: dse predict: --ep = 32: must be at most the instance's 16 GPUs\n"
    ), wide.err


def test_predict_says_when_its_closed_form_and_its_simulation_part_ways(cli: Cli) -> None:
    """16-token answers: the closed form's steady state gives 30 output tokens/s per GPU, the
    request-by-request simulation 41; the two are not shown side by side as equals, and
    docs/cli.md quotes the two figures of this command. Where they agree (the 1k-token answers of
    the measured runs) nothing is added."""
    apart = cli("predict", "--hardware", "h200", "--osl", "16")
    assert apart.code == 0, apart.err
    assert "closed form                 value" in apart.out
    note = next(line for line in apart.out.splitlines() if line.startswith("note: "))
    pattern = r"note: the closed form and the simulation differ by \d+% on output tokens/s per decode GPU "
    pattern += r"\((\S+) against (\S+)\)"
    said = re.match(pattern, note)
    assert said, note
    page = " ".join((Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text().split())
    quoted = f"`dse predict --hardware h200 --osl 16` gives {said[1]} output tokens/s per decode GPU in the "
    assert quoted + f"closed form and {said[2]} simulated" in page, "docs/cli.md: quote the command's note"
    alike = cli("predict", "--hardware", "h200", "--conc", "32")
    assert alike.code == 0 and "note: " not in alike.out, alike.out


def test_kimi_k3_at_tp8_holds_an_eighth_of_each_requests_linear_state(cli: Cli) -> None:
    """Each of 8 tensor-parallel GPUs holds an eighth of a request's 414 MiB KDA state, so all 64
    requests decode at once; charged the whole state per GPU, 17 did and HBM capacity bound."""
    res = cli("predict", "--model", "kimi-k3", "--hardware", "b200", "--precision", "fp4", "--tp", "8",
              "--ep", "8", "--conc", "64", "--json")  # fmt: skip
    assert res.code == 0, res.err
    pred = json.loads(res.out)["prediction"]
    assert pred["decode_batch_per_instance"] > 60 and pred["binding_regime"] != "hbm-capacity", pred


def test_an_entry_a_users_catalog_changes_is_not_one_the_calibration_saw(cli: Cli, tmp_path: Path) -> None:
    """The expected error is keyed by id: a user's b200 at twice the bandwidth had claimed the
    in-sample error of the B200 the runs measured. A changed entry is unseen; an unchanged copy is
    the shipped entry."""
    from dse.paths import SHIPPED_HARDWARE, SHIPPED_MODELS

    (tmp_path / "hardware").mkdir()
    (tmp_path / "models").mkdir()
    b200 = (SHIPPED_HARDWARE / "b200.toml").read_text()
    faster = b200.replace("bandwidth_tb_per_s = 8.0", "bandwidth_tb_per_s = 16.0")
    assert faster != b200
    (tmp_path / "hardware" / "b200.toml").write_text(faster)
    same = (SHIPPED_MODELS / "deepseek-v3.toml").read_text()
    (tmp_path / "models" / "deepseek-v3.toml").write_text(same)
    res = cli("--catalog-dir", tmp_path, "predict", "--hardware", "b200", "--conc", "8", "--json")
    assert res.code == 0, res.err
    error = json.loads(res.out)["expected_error"]
    assert error["basis"] == "leave-one-hardware-out" and error["edited"] == [["hardware", "b200"]]
    assert error["model_fitted"] is True  # the copy is the shipped model
    shorter = same.replace("max_context = 163840", "max_context = 65536")
    (tmp_path / "models" / "deepseek-v3.toml").write_text(shorter)
    res = cli("--catalog-dir", tmp_path, "predict", "--hardware", "b200", "--conc", "8")
    assert res.code == 0, res.err
    assert "your catalog changes b200 from the entry it saw" in res.out
    changed = "the runs measured the shipped deepseek-v3, which your catalog changes: its error is unmeasured"
    assert changed in res.out


def test_an_entry_changed_only_in_its_price_and_words_is_the_one_the_calibration_saw(
    cli: Cli, tmp_path: Path
) -> None:
    """docs/catalogs.md's example: B200 at your own price, its notes and assumptions left out. The
    runs measured that B200 (a price moves no token/s), so the expected error stays in-sample; it
    had been called unseen, the leave-one-hardware-out error (14% against 12%) and "your catalog
    changes b200"."""
    from dse.paths import SHIPPED_HARDWARE

    b200 = (SHIPPED_HARDWARE / "b200.toml").read_text()
    own = b200.replace("usd_per_gpu_hour_own_hyperscaler = 1.95", "usd_per_gpu_hour_own_hyperscaler = 2.34")
    own = re.sub(r"(?ms)^sources = \[.*?^\]", 'sources = ["our own price per GPU-hour"]', own)
    own = re.sub(r"(?ms)^(notes = .*?$|assumptions = \[.*?^\])\n", "", own)
    assert own != b200 and "\nnotes =" not in own and "\nassumptions =" not in own
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "b200.toml").write_text(own)
    res = cli("--catalog-dir", tmp_path, "catalog", "show", "b200", "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["prices"]["usd_per_gpu_hour_own_hyperscaler"] == 2.34
    res = cli("--catalog-dir", tmp_path, "predict", "--hardware", "b200", "--conc", "8", "--json")
    assert res.code == 0, res.err
    error = json.loads(res.out)["expected_error"]
    assert error["basis"] == "in-sample" and error["edited"] == [], error


def test_a_batch_row_with_no_tpot_leaves_its_tpot_percentiles_empty(catalog: Catalog) -> None:
    """One-token answers have no time per output token: empty in the CSV, as null in JSON and "-"
    in text (the CSV had read 'nan')."""
    from dse.perf.benchmark_rows import predict_rows

    with open(MEASURED_RUNS, newline="") as fh:
        row = next(csv.DictReader(fh))
    out = predict_rows([dict(row, osl="1")], catalog, load_params())[0]
    assert out["pred_error"] == "" and float(str(out["pred_ttft_p50_s"])) > 0
    assert out["pred_tpot_p50_ms"] == "" and out["pred_tpot_p99_ms"] == ""


def test_a_disaggregated_prediction_compares_output_per_decode_gpu_with_its_table(cli: Cli) -> None:
    """Disaggregated, the closed form's ``output_tput_per_decode_gpu`` counts the decode GPUs and
    the simulation's served figure all of them (8 prefill + 16 decode): the served line adds the
    figure per decode GPU, and the note compares the table's figure with that one (it quoted an
    all-GPU closed-form figure that the table does not show, 19.93 against the table's 29.89)."""
    out = cli("predict", "--hardware", "b200", "--disagg", "--decode-gpus", "16", "--osl", "16")
    assert out.code == 0, out.err
    table = float(re.search(r"^output_tput_per_decode_gpu +(\S+)$", out.out, re.M)[1])  # type: ignore[index]
    served = re.search(
        r"^served \S+ requests/s, (\S+) output tokens/s/GPU \((\S+) per decode GPU\);", out.out, re.M
    )
    assert served, out.out
    assert float(served[2]) == pytest.approx(float(served[1]) * 24 / 16, rel=1e-3)
    note = re.search(r"^note: .* on output tokens/s per decode GPU \((\S+) against (\S+)\);", out.out, re.M)
    assert note, out.out
    assert (float(note[1]), float(note[2])) == (table, float(served[2]))
    doc = json.loads(
        cli("predict", "--hardware", "b200", "--disagg", "--decode-gpus", "16", "--osl", "16", "--json").out
    )
    lat = doc["latency"]
    per_gpu = lat["output_tokens_per_s_per_gpu"]
    assert lat["output_tokens_per_s_per_decode_gpu"] == pytest.approx(per_gpu * 1.5)
    assert lat["output_tokens_per_s_per_decode_gpu"] == pytest.approx(float(served[2]), rel=1e-3)
    agg = cli("predict", "--hardware", "h200", "--osl", "16")  # one pool: its GPUs are the decode GPUs
    assert agg.code == 0 and "per decode GPU)" not in agg.out, agg.out


def test_recipe_settings_leave_an_unknown_launchs_cap_to_the_kv_cache(tmp_path: Path, cli: Cli) -> None:
    """An SGLang MTP run whose launch the settings file lacks: its empty cap would be SGLang's own
    48, and the multi-node launches found all set one (its 1,024 clients on one decode instance
    finished in 24 s); with --recipe-settings it is `none`, the KV cache alone, and the command
    says so apart from the settings it read."""
    from dse.perf.benchmark_rows import ENGINE_COLUMNS, NO_CAP, with_recipe_settings

    with open(MEASURED_RUNS, newline="") as fh:
        reference = list(csv.DictReader(fh))
    merged = with_recipe_settings(reference)
    unknown = [r for r, m in zip(reference, merged, strict=True) if m.get(ENGINE_COLUMNS[0]) == NO_CAP]
    row = next(r for r in unknown if r["conc"] == "1024")
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    with open(src, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(reference[0]))
        w.writeheader()
        w.writerow(row)
    as_is = cli("predict", "--batch", str(src), "--out", str(out))
    assert as_is.code == 0, as_is.err
    with open(out, newline="") as fh:
        own = next(csv.DictReader(fh))
    said = cli("predict", "--batch", str(src), "--out", str(out), "--recipe-settings")
    assert said.code == 0, said.err
    assert "to 0 rows (dse/perf/recipe_settings.csv)" in said.err
    assert "decode_max_running_requests 'none' to 1 row (SGLang with MTP, whose launch it lacks" in said.err
    with open(out, newline="") as fh:
        kv = next(csv.DictReader(fh))
    assert kv[ENGINE_COLUMNS[0]] == NO_CAP
    measured = float(row["tput_per_gpu_total"])
    assert float(own["pred_tput_per_gpu"]) < 0.2 * measured < float(kv["pred_tput_per_gpu"])


def test_a_batch_says_what_recipe_settings_add_in_one_sentence(tmp_path: Path, cli: Cli) -> None:
    """The docs' two rows: the second an SGLang MTP run whose launch the settings file lacks. Its
    part of the sentence had followed the settings file's with no comma between them
    ("... to 0 rows (dse/perf/recipe_settings.csv) decode_max_running_requests ...")."""
    src = tmp_path / "runs.csv"
    src.write_text(
        "hardware,framework,model,precision,spec_method,disagg,isl,osl,conc,prefill_tp,prefill_ep,"
        "prefill_dp_attention,prefill_num_workers,num_prefill_gpu,decode_tp,decode_ep,"
        "decode_dp_attention,decode_num_workers,num_decode_gpu\n"
        "b200,dynamo-sglang,dsr1,fp4,mtp,True,1024,1024,256,4,4,True,1,4,8,8,False,6,48\n"
    )
    proc = cli("predict", "--batch", src, "--out", tmp_path / "out.csv")
    assert proc.code == 0, proc.err
    said = "to 0 rows (dse/perf/recipe_settings.csv), decode_max_running_requests 'none' to 1 row"
    assert said in proc.err, proc.err


def test_the_json_deployment_names_the_catalog_ids_an_alias_stands_for(cli: Cli) -> None:
    """`--hardware gb200 --model dsr1`: the first line of the text says gb200-nvl72 and deepseek-v3,
    and the JSON's deployment had echoed the aliases, so a reader keying on ids missed them."""
    proc = cli("predict", "--hardware", "gb200", "--model", "dsr1", "--conc", "8", "--json")
    assert proc.code == 0, proc.err
    dep = json.loads(proc.out)["deployment"]
    assert (dep["hardware"], dep["model"]) == ("gb200-nvl72", "deepseek-v3")


def test_the_json_deployment_of_an_aggregated_instance_counts_its_own_gpus(cli: Cli, tmp_path: Path) -> None:
    """An aggregated `--tp 16` instance prefills and decodes on its 16 GPUs: the JSON's deployment
    had said `num_prefill_gpu` 8 (`--prefill-gpus`'s default, which an aggregated deployment
    refuses) beside `num_decode_gpu` 16. It says the instance's GPUs on both sides, as the
    reference file's aggregated rows do, and the row, run through `--batch`, predicts the same."""
    proc = cli("predict", "--hardware", "b200", "--tp", "16", "--conc", "32", "--json")
    assert proc.code == 0, proc.err
    got = json.loads(proc.out)
    dep = got["deployment"]
    assert dep["num_prefill_gpu"] == dep["num_decode_gpu"] == dep["prefill_tp"] == 16, dep
    src, out = tmp_path / "row.csv", tmp_path / "out.csv"
    with open(src, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(dep))
        w.writeheader()
        w.writerow({k: "" if v is None else v for k, v in dep.items()})
    assert cli("predict", "--batch", src, "--out", out).code == 0
    (row,) = list(csv.DictReader(open(out, encoding="utf-8")))
    assert float(row["pred_tput_per_gpu"]) == pytest.approx(got["prediction"]["tput_per_gpu"], abs=1e-3)
    assert float(row["pred_ttft_p99_s"]) == pytest.approx(
        got["latency"]["percentiles"]["p99"]["ttft_s"], abs=1e-4
    )


def test_expert_parallelism_of_a_dense_model_is_refused(cli: Cli) -> None:
    """llama-3.1-70b has no routed experts: `--ep 4` had been taken, and its figures were those of
    `--ep 8` to the last digit."""
    proc = cli("predict", "--hardware", "h200", "--model", "llama-3.1-70b", "--ep", "4")
    assert proc.code == 2 and proc.out == ""
    assert proc.err == (
        "dse: error: dse predict: --ep = 4: must be 0 or 1 for a model without routed experts "
        "(llama-3.1-70b has none)\n"
    )
    assert cli("predict", "--hardware", "h200", "--model", "llama-3.1-70b", "--conc", "8").code == 0
    # and so in a --batch row, where it had been predicted as fp8, labelled fp4
    from dse.perf.benchmark_rows import predict_rows

    row = {"hardware": "h200", "framework": "trt", "model": "llama-3.1-70b", "precision": "fp8",
           "spec_method": "none", "disagg": "False", "isl": "1024", "osl": "1024", "conc": "8",
           "decode_tp": "8", "decode_ep": "1", "decode_dp_attention": "False",
           "num_decode_gpu": "8"}  # fmt: skip
    from dse.catalog import load_catalog
    from dse.perf.params import load_params

    (fp4,) = predict_rows([{**row, "precision": "fp4"}], load_catalog(use_env=False), load_params())
    assert "precision = 'fp4': quantizes the routed experts, and llama-3.1-70b has none" in fp4["pred_error"]
    # fp4 quantizes routed experts: on a dense model it had been taken, its figures fp8's to the digit
    for command in (("predict", "--tp", "8"), ("place", "--rate", "2", "--ttft", "2", "--tpot", "0.05")):
        fp4 = cli(*command, "--hardware", "h200", "--model", "llama-3.1-70b", "--precision", "fp4")
        assert fp4.code == 2 and fp4.err.count("\n") == 1, fp4.err
        assert "--precision = 'fp4': quantizes the routed experts, and llama-3.1-70b has none" in fp4.err


def test_the_batch_columns_say_which_statistic_each_latency_is(cli: Cli, catalog) -> None:  # type: ignore[no-untyped-def]
    """`dse predict` prints the closed form's TPOT and TTFT as `tpot_mean_ms` and `ttft_mean_s`;
    `--batch` wrote the same figures as `pred_tpot_ms` and `pred_ttft_s`, which did not say they
    were means beside the percentiles `pred_ttft_p50_s` ... Every latency column names its statistic."""
    from dse.perf.benchmark_rows import predict_rows

    latency = [c for c in OUTPUT_COLUMNS if re.match(r"pred_(ttft|tpot|e2el?)_", c)]
    said = r"pred_(ttft|tpot|e2el)_(mean|p\d+)_(s|ms)$"  # the statistic, then the unit
    assert latency and all(re.match(said, c) for c in latency), latency
    pred = _predicted(cli)["prediction"]
    row = predict_rows([AFD], catalog, load_params())[0]
    assert float(row["pred_tpot_mean_ms"]) == pytest.approx(pred["tpot_mean_ms"], rel=1e-3)
    assert float(row["pred_ttft_mean_s"]) == pytest.approx(pred["ttft_mean_s"], rel=1e-3)


def test_arrivals_bunched_at_an_instant_print_no_rate_they_lack(cli: Cli) -> None:
    """Gamma gaps of shape 1e-9 put a window's middle half of arrivals at one instant, which has no
    rate: "served 12.16 requests/s of the nan arriving" had been printed. The overload is said
    without it."""
    res = cli("predict", "--hardware", "b200", "--load", "bursty", "--rate", "20", "--burstiness", "1e-9")
    assert res.code == 0, res.err
    served = next(line for line in res.out.splitlines() if line.startswith("served "))
    assert "nan" not in res.out and " requests/s (overloaded: " in served, served


def test_a_draft_runs_one_mtp_module_however_many_the_checkpoint_ships(tmp_path: Path, cli: Cli) -> None:
    """Each draft token runs the next MTP module, cycling through them (vLLM's spec_step_idx %
    num_mtp_layers; SGLang and TensorRT-LLM one NextN module a draft): a DeepSeek-V3 whose
    checkpoint ships 3 modules drafts as fast as one of 1. Every module had been counted for every
    draft (10 modules: 12% slower at one draft)."""
    src = (Path(__file__).resolve().parents[1] / "model_catalog" / "deepseek-v3.toml").read_text()
    (tmp_path / "models").mkdir()
    assert src.count("mtp_layers = 1") == 1 and src.count('id = "deepseek-v3"') == 1
    for layers in (1, 3):
        mine = src.replace('id = "deepseek-v3"', f'id = "ds-mtp{layers}"')
        mine = mine.replace("mtp_layers = 1", f"mtp_layers = {layers}")
        mine = "\n".join(line for line in mine.splitlines() if not line.startswith("aliases"))
        (tmp_path / "models" / f"ds-mtp{layers}.toml").write_text(mine)
    figures = []
    for layers in (1, 3):
        args = ["--model", f"ds-mtp{layers}", "--hardware", "b200", "--mtp", "--mtp-draft-tokens", "2"]
        res = cli("--catalog-dir", tmp_path, "predict", *args, "--json")
        assert res.code == 0, res.err
        figures.append(json.loads(res.out)["prediction"]["tput_per_gpu"])
    assert figures[0] == figures[1] > 0
