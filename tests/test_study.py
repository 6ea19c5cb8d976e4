"""Studies end to end: spec validation, a run, determinism, resume after a kill, the Python API
with a custom objective, Parquet exports read back with DuckDB."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import optuna
import polars as pl
import pytest
from conftest import Cli, Result, dse_cmd

import dse.study.proposer as proposer
from dse.catalog import load_catalog
from dse.errors import InputError, UnknownIdError
from dse.study import Study
from dse.study.objectives import ObjectiveWarning
from dse.study.results import SCHEMA_VERSION
from dse.study.spec import load_study

DATA = Path(__file__).resolve().parent / "data"
TINY = DATA / "tiny-study.toml"


def test_shipped_studies_load() -> None:
    spec = load_study("deepseek-v3-blackwell")
    assert spec.model == "deepseek-v3" and spec.trials > 0
    with pytest.raises(UnknownIdError, match="unknown study id; valid ids: .*deepseek-v3-blackwell"):
        load_study("no-such-study")


@pytest.mark.parametrize(
    "edit,message",
    [
        (("trials = 12", "trials = -1"), "trials = -1: must be > 0"),
        (
            ('topologies = ["aggregated", "disaggregated"]', 'topologies = ["sideways"]'),
            "search.topologies = 'sideways': must be among aggregated, disaggregated, afd",
        ),
        (('shapes = ["8gpu-dpa-ep8", "16gpu-dpa-ep16"]', 'shapes = ["eight-gpus"]'), "search.decode.shapes"),
        (("max_batch = [32, 1024]", "max_batch = [1024, 32]"), "max_batch"),
        (("ttft_s = 2.0", 'ttft_s = "fast"'), "slo.ttft_s"),
        (('name = "tiny-study"', 'name = "other"'), "name = 'other': must equal the file name"),
        # each of these once passed and then failed inside the run, after writing study.db
        (("max_batch = [32, 1024]", "max_batch = [0.2, 0.5]"), "decode.max_batch = [0.2, 0.5]: must be"),
        # a sequence runs whole: 1.5 had been searched as 1
        (
            ("max_batch = [32, 1024]", "max_batch = [1.5, 1024]"),
            "decode.max_batch = [1.5, 1024]: must be [low, high], whole numbers",
        ),
        (("chunk_tokens = [8192]", "chunk_tokens = [0.5]"), "must list whole numbers of tokens >= 1"),
        # a step past a tenth of the measured window crashed the fluid summary; one past the TTFT
        # target ran, and blurred the waits the target is on (19 of 20 trials feasible at 2 s, 8 at 60)
        (
            ("dt_s = 2.0", "dt_s = 60.0"),
            "simulate.dt_s = 60.0: must be at most horizon_s less warmup_s over 10",
        ),
        (("dt_s = 2.0", "dt_s = 10.0"), "simulate.dt_s = 10.0: must be at most the TTFT target (2 s) or 2 s"),
        # a billion fluid steps had asked numpy for 52 GiB in the first trial, leaving a study of none
        # that the corrected file could not resume
        (
            ("horizon_s = 600.0", "horizon_s = 1e9"),
            "simulate.dt_s = 2.0: must give at most 1e+06 steps over horizon_s (1e+09 s)",
        ),
        (("dt_s = 2.0", "dt_s = 0.000001"), "simulate.dt_s = 1e-06: must give at most 1e+06 steps"),
        # and the empty [sweep] table of a grid started and left: an ordinary search had run
        (("dt_s = 2.0", "dt_s = 2.0\n\n[sweep]"), "sweep: must name at least one axis"),
        # a horizon below the default warm-up had been told as a warm-up the file never gave
        (
            ("horizon_s = 600.0\nwarmup_s = 120.0", "horizon_s = 200.0"),
            "simulate.horizon_s = 200.0: must be longer than warmup_s (300 s, its default)",
        ),
        (
            ("dt_s = 2.0", 'dt_s = 2.0\narrivals = "burst"\nburst_s = 0.0'),
            "simulate.burst_s = 0.0: must be > 0",
        ),
        (
            ("dt_s = 2.0", 'dt_s = 2.0\narrivals = "burst"\nburst_start_s = 9000.0'),
            "simulate.burst_start_s = 9000.0: must be at least 0 and below horizon_s (600)",
        ),
        (
            ("dt_s = 2.0", 'dt_s = 2.0\narrivals = "burst"\nburst_start_s = 0.0\nburst_s = 100.0'),
            "simulate.burst_start_s = 0.0: with burst_s must end after warmup_s (120",
        ),
        # a fraction for a percentile had held TTFT at p0.99, the quickest requests', for p99
        (("percentile = 90.0", "percentile = 0.99"), "slo.percentile = 0.99: must be at least 1 (a"),
        # milliseconds typed for seconds: a TPOT of 50 s a token, met by any design, in the target
        # and on a grid's axis alike
        (("tpot_s = 0.06", "tpot_s = 50"), "slo.tpot_s = 50: must be at most 2 s per output token"),
        (
            ("ttft_s = 2.0", "ttft_s = 2000"),
            "slo.ttft_s = 2000: must be at most 600 s (seconds: 500 ms is 0.5)",
        ),
        (
            ("dt_s = 2.0", "dt_s = 2.0\n\n[sweep]\nttft_s = [1, 1500]"),
            "sweep.ttft_s = [1, 1500]: must be at most 600 s (seconds: 500 ms is 0.5)",
        ),
        (
            ("dt_s = 2.0", "dt_s = 2.0\n\n[sweep]\ntpot_s = [0.05, 40]"),
            "sweep.tpot_s = [0.05, 40]: must be at most 2 s per output token (seconds: 50 ms is 0.05)",
        ),
        # a burst's settings without a burst had been ignored: constant traffic simulated for "3x"
        (
            ("dt_s = 2.0", "dt_s = 2.0\nburst_factor = 3.0"),
            'simulate.burst_factor = 3.0: needs arrivals = "burst" (or a [sweep] of burst_factor)',
        ),
        # a grid of burst_factor whose burst started past the horizon gave 3x the answer of 1x
        (
            ("dt_s = 2.0", "dt_s = 2.0\nburst_start_s = 9000.0\n\n[sweep]\nburst_factor = [1.0, 3.0]"),
            "simulate.burst_start_s = 9000.0: must be at least 0 and below horizon_s (600) (the grid sweeps",
        ),
        # lists of choices name each once, as [sweep] does; shapes exactly as the exports write them
        (
            ('hardware = ["b200", "h200-sxm"]', 'hardware = ["b200", "b200"]'),
            "hardware = ['b200', 'b200']: must not repeat a value ('b200' twice)",
        ),
        (("chunk_tokens = [8192]", "chunk_tokens = [8192, 8192]"), "must not repeat a value (8192 twice)"),
        (
            ('shapes = ["8gpu-dpa-ep8", "16gpu-dpa-ep16"]', 'shapes = ["8gpu-dpa-ep8", "8gpu-tp1-ep8"]'),
            "has '8gpu-tp1-ep8' twice (as '8gpu-dpa-ep8' too)",
        ),
        (
            ('shapes = ["8gpu-dpa-ep8", "16gpu-dpa-ep16"]', 'shapes = [" 8gpu-dpa-ep8"]'),
            "has ' 8gpu-dpa-ep8', with spaces around the shape",
        ),
        (
            ('description = "test study"', 'description = "test study"\nengine = "foo"'),
            "engine = 'foo': must be one of trt, sglang, atom, vllm",
        ),
        (
            (
                'topologies = ["aggregated", "disaggregated"]',
                'topologies = ["aggregated", "disaggregated"]\nsampler = "nsga2"\npopulation = 1',
            ),
            "search.population = 1: must be at least 2 (NSGA-II breeds pairs)",
        ),
        # a cached prefix without returning turns reached no request, and was ignored
        (
            ("returning_share = 0.3", "returning_share = 0.0"),
            "workload.cached_prefix_tokens = 8000.0: needs returning_share > 0: without returning turns",
        ),
        (
            ("returning_share = 0.3\ncached_prefix_tokens = 8000.0\nsuffix_tokens = 300.0", ""),
            "workload.think = [(1.0, 120.0)]: needs returning_share > 0",
        ),
        # a KV policy places the KV resting between turns: without any, two had been one design twice
        (
            (
                "returning_share = 0.3\ncached_prefix_tokens = 8000.0\nsuffix_tokens = 300.0\n"
                "think = [{ share = 1.0, dwell_s = 120.0 }]",
                "",
            ),
            "search.kv_policies = ['tiered', 'recompute']: must list one policy without returning turns",
        ),
        # a population is NSGA-II's: with TPE (the default) or random sampling it had been ignored
        (
            ("[search]\n", "[search]\npopulation = 60\n"),
            'search.population = 60: needs sampler = "nsga2": tpe sampling has no population',
        ),
        (
            ("[search]\n", '[search]\nsampler = "random"\npopulation = 60\n'),
            'search.population = 60: needs sampler = "nsga2": random sampling has no population',
        ),
        # a repeated FFN batch had been searched as one twice as likely, where a chunk is refused
        (
            ("dt_s = 2.0", "dt_s = 2.0\n\n[search.afd]\nffn_tokens_per_gpu = [8, 8]"),
            "search.afd.ffn_tokens_per_gpu = [8, 8]: must not repeat a value (8 twice)",
        ),
        # a topology's own settings without it had been kept, and read by no trial
        (
            (
                'topologies = ["aggregated", "disaggregated"]\nkv_policies = ["tiered", "recompute"]\n',
                'topologies = ["disaggregated"]\nkv_policies = ["tiered", "recompute"]\n\n'
                "[search.aggregated]\nprefill_share = [0.1, 0.5]\n",
            ),
            "search.aggregated.prefill_share = [0.1, 0.5]: needs 'aggregated' in search.topologies",
        ),
        (
            ("dt_s = 2.0", "dt_s = 2.0\n\n[search.afd]\nffn_tokens_per_gpu = [8, 16]"),
            "search.afd.ffn_tokens_per_gpu = [8, 16]: needs 'afd' or 'four-stage' in search.topologies",
        ),
        (
            ("dt_s = 2.0", 'dt_s = 2.0\n\n[search.midfill]\nshapes = ["8gpu-dpa-ep8"]'),
            "search.midfill.shapes = ['8gpu-dpa-ep8']: needs 'four-stage' in search.topologies",
        ),
    ],
)
def test_bad_study_files_name_file_key_and_rule(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    text = TINY.read_text()
    assert edit[0] in text
    bad = tmp_path / "tiny-study.toml"
    bad.write_text(text.replace(edit[0], edit[1]))
    with pytest.raises(InputError, match=None) as err:
        load_study(bad)
    assert str(bad) in str(err.value) and message in str(err.value)


def test_a_run_folder_named_as_the_study_is_not_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From inside a runs folder, `dse study report deepseek-v3-blackwell --out .` had read the run's
    folder as the study file ('cannot be read (Is a directory)')."""
    (tmp_path / "deepseek-v3-blackwell").mkdir()
    monkeypatch.chdir(tmp_path)
    assert load_study("deepseek-v3-blackwell").name == "deepseek-v3-blackwell"


def test_a_study_file_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    """Some editors start UTF-8 files with a byte-order mark: it had read as bad TOML at line 1."""
    marked = tmp_path / "tiny-study.toml"
    marked.write_bytes(b"\xef\xbb\xbf" + TINY.read_bytes())
    assert load_study(marked) == load_study(TINY)


def test_a_topologys_setting_without_it_exits_2_before_a_run(tmp_path: Path, cli: Cli) -> None:
    """FFN batches in a study with no attention-FFN topology: refused by `run` in one line, nothing
    written (they had been kept and read by no trial); `show` prints the file with a warning."""
    bad = tmp_path / "tiny-study.toml"
    bad.write_text(TINY.read_text() + "\n[search.afd]\nffn_tokens_per_gpu = [8, 16]\n")
    said = f"{bad}: search.afd.ffn_tokens_per_gpu = [8, 16]: needs 'afd' or 'four-stage' in search.topologies"
    out = cli("study", "run", bad, "--out", tmp_path / "runs")
    assert out.code == 2 and out.err.count("\n") == 1 and said in out.err, out.err
    assert not (tmp_path / "runs").exists()
    shown = cli("study", "show", bad)
    assert shown.code == 0 and shown.err.startswith(f"dse: warning: {said}"), shown.err
    ok = tmp_path / "ok" / "tiny-study.toml"
    ok.parent.mkdir()
    ok.write_text(bad.read_text().replace('"disaggregated"]', '"disaggregated", "afd"]'))
    assert load_study(ok).search.afd.ffn_tokens_per_gpu == (8.0, 16.0)


def test_bad_study_exits_2_from_the_cli(tmp_path: Path, cli: Cli) -> None:
    bad = tmp_path / "tiny-study.toml"
    bad.write_text(TINY.read_text().replace("[slo]\n", "[slo]\nfoo = 1\n"))
    out = cli("study", "show", bad)
    assert out.code == 2 and out.err.count("\n") == 1 and "slo.foo" in out.err


def test_a_variant_left_out_of_hardware_is_refused_before_trials(tmp_path: Path, cli: Cli) -> None:
    """A what-if variant missing from hardware = [...] had run the study as if it were not there."""
    variant = '\n[[variants]]\nid = "b200-bw2"\nbase = "b200"\nhbm_bandwidth_scale = 2.0\n'
    bad = tmp_path / "tiny-study.toml"
    bad.write_text(TINY.read_text() + variant)
    rule = "variants[0].id = 'b200-bw2': must be named in hardware: no trial runs on it"
    out = cli("study", "run", bad, "--out", tmp_path / "runs")
    assert out.code == 2 and out.err.count("\n") == 1 and f"{bad}: {rule}" in out.err, out.err
    assert not (tmp_path / "runs").exists()
    shown = cli("study", "show", bad)  # shown, the refusal a warning (the test below)
    assert shown.code == 0 and shown.err.count("\n") == 1 and f"warning: {bad}: {rule}" in shown.err
    named = TINY.read_text().replace('hardware = ["b200", "h200-sxm"]', 'hardware = ["b200", "b200-bw2"]')
    bad.write_text(named + variant)
    named_shown = cli("study", "show", bad)
    assert (named_shown.code, named_shown.err) == (0, "")


def test_study_show_names_settings_with_no_effect_in_warnings(tmp_path: Path, cli: Cli) -> None:
    """`dse study show` is how one inspects a study file, the one a run refuses too: settings a run
    refuses as having no effect (:attr:`Study.idle`, a variant no trial runs on) are shown as
    written, each named in one warning, as export and report name them in a stored run's file
    (it had refused the file, exit 2, so that its spec could not be seen). Bad input is still
    refused: a file that does not parse, an unknown id, in one line and nothing shown."""
    import json

    variant = '\n[[variants]]\nid = "b200-bw2"\nbase = "b200"\nhbm_bandwidth_scale = 2.0\n'
    idle = TINY.read_text().replace("returning_share = 0.3", "returning_share = 0.0") + variant
    path = tmp_path / "tiny-study.toml"
    path.write_text(idle)
    shown = cli("study", "show", path)
    assert shown.code == 0, shown.err
    spec = json.loads(shown.out)
    assert spec["workload"]["returning_share"] == 0.0 and spec["workload"]["cached_prefix_tokens"] == 8000.0
    assert [v["id"] for v in spec["variants"]] == ["b200-bw2"]
    said = [
        f"{path}: workload.cached_prefix_tokens = 8000.0: needs returning_share > 0: without returning "
        "turns it is ignored",
        f"{path}: variants[0].id = 'b200-bw2': must be named in hardware: no trial runs on it otherwise",
    ]
    assert shown.err.splitlines() == [f"dse: warning: {s}; shown as written (a run refuses it)" for s in said]
    refused = cli("study", "run", path, "--out", tmp_path / "runs")
    assert refused.code == 2 and refused.err == f"dse: error: {said[0]}\n"
    for text, error in (
        (idle.replace('model = "deepseek-v3"', 'model = "nope"'), "model = 'nope': unknown model id"),
        (idle + "\n[slo\n", f"{path}"),  # no TOML
    ):
        path.write_text(text)
        bad = cli("study", "show", path)
        assert bad.code == 2 and bad.out == "" and bad.err.count("\n") == 1, bad.err
        assert bad.err.startswith("dse: error: ") and error in bad.err, bad.err


def test_a_shape_no_hardware_of_the_study_runs_is_refused_before_trials(tmp_path: Path, cli: Cli) -> None:
    """As `dse place --shapes` refuses it: expert groups over more GPUs than the instance, or ones
    that do not divide it, would only spend trials on designs that cannot exist."""
    text = TINY.read_text()
    first = re.search(r'\[search\.prefill\]\nshapes = \["([^"]+)"', text)
    assert first is not None
    for shape, rule in (("8gpu-tp8-ep9", "EP 9 must divide the 8 GPUs"), ("8gpu-tp8-ep16", "EP 16 must")):
        bad = tmp_path / "tiny-study.toml"
        bad.write_text(text.replace(f'"{first.group(1)}"', f'"{shape}"', 1))
        out = cli("study", "run", bad, "--out", tmp_path / "runs")
        assert out.code == 2 and out.err.count("\n") == 1, out.err
        field = f"{bad}: search.prefill.shapes[0] = '{shape}'"
        assert f"{field}: no hardware of the study can run it: " in out.err
        assert rule in out.err
        assert not (tmp_path / "runs").exists()


def test_a_topology_that_splits_experts_off_a_dense_model_is_refused_before_trials(
    tmp_path: Path, cli: Cli
) -> None:
    """As `dse place --topology afd` refuses it for a model without routed experts: its trials had
    priced FFN units of the dense FFNs (figures of a design that cannot exist)."""
    text = TINY.read_text().replace('model = "deepseek-v3"', 'model = "llama-3.1-70b"')
    text = re.sub(r"shapes = \[[^]]*\]", 'shapes = ["8gpu-tp8-ep1"]', text)  # a shape a dense model runs
    bad = tmp_path / "tiny-study.toml"
    rule = "needs a model with routed experts to split from attention (llama-3.1-70b has none)"
    for name in ("afd", "four-stage"):
        bad.write_text(text.replace('"disaggregated"]', f'"{name}"]', 1))
        for args in (("show", bad), ("run", bad, "--out", tmp_path / "runs")):
            out = cli("study", *args)
            assert out.code == 2, out.err
            assert out.err == f"dse: error: {bad}: search.topologies[1] = '{name}': {rule}\n"
        assert not (tmp_path / "runs").exists()
    bad.write_text(text)
    assert cli("study", "show", bad).code == 0


def test_a_prompt_beyond_the_model_context_is_refused_before_any_trial(tmp_path: Path, cli: Cli) -> None:
    """A study, a placement or a simulation whose requests outgrow the model's context window
    (DeepSeek-V3: 163,840 tokens) says so in one line, naming the field or the flag."""
    text = TINY.read_text()
    long = tmp_path / "tiny-study.toml"
    long.write_text(re.sub(r"input_tokens = [0-9.]+", "input_tokens = 300000.0", text, count=1))
    out = cli("study", "run", long, "--out", tmp_path / "runs")
    assert out.code == 2 and out.err.count("\n") == 1, out.err
    assert f"{long}: workload.input_tokens = 300000.0: with the other lengths and the output" in out.err
    assert "must fit deepseek-v3's context of 163,840 tokens" in out.err
    assert not (tmp_path / "runs" / "tiny-study" / "study.db").exists()
    for cmd in ("place", "simulate"):
        flags = (
            "--hardware",
            "b200",
            "--rate",
            "10",
            "--isl",
            "300000",
            "--osl",
            "1000",
            "--ttft",
            "2",
            "--tpot",
            "0.05",
        )
        out = cli(cmd, *flags)
        assert out.code == 2 and out.err.startswith(
            f"dse: error: dse {cmd}: --isl = 300000: with the other"
        ), out.err


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("runs")
    return Study.load(TINY).run(out=out), out


def test_a_run_records_trials_with_objectives_constraints_and_placements(tiny_run) -> None:  # type: ignore[no-untyped-def]
    res, out = tiny_run
    t = res.trials
    assert t.height == 12 and t["trial"].to_list() == list(range(12))
    assert t["feasible"].sum() >= 1
    feas = t.filter(t["feasible"])
    assert (feas["c_ttft_s"] <= 0).all() and (feas["c_tpot_s"] <= 0).all()
    assert (feas["objective_usd_per_million_tokens"] == feas["usd_per_million_tokens"]).all()
    assert set(res.placements["trial"].to_list()) >= set(feas["trial"].to_list())
    assert not res.pareto.is_empty()
    assert (out / "tiny-study" / "spec.json").exists() and (out / "tiny-study" / "study.db").exists()


def test_the_same_seed_gives_the_same_results(tiny_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    first, _ = tiny_run
    again = Study.load(TINY).run(out=tmp_path)
    cols = ["trial", "p_topology", "p_decode_shape", "p_max_batch", "objective_usd_per_million_tokens"]
    assert again.trials.select(cols).equals(first.trials.select(cols))


def test_exports_read_back_with_duckdb(tiny_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    res, _ = tiny_run
    paths = res.export(tmp_path / "exports")
    assert {p.parent.parent.name for p in paths} == {
        "trials",
        "pareto",
        "placements",
        "kv_tiers",
        "sim_timeseries",
    }
    glob = str(tmp_path / "exports" / "trials" / "*" / "*.parquet")
    rows = duckdb.sql(
        f"select study, count(*), min(usd_per_million_tokens) filter (where feasible) "
        f"from read_parquet('{glob}', hive_partitioning=true) group by study"
    ).fetchall()
    assert rows[0][0] == "tiny-study" and rows[0][1] == 12
    assert rows[0][2] == pytest.approx(
        res.trials.filter(res.trials["feasible"])["usd_per_million_tokens"].min()
    )
    meta = dict(
        (k.decode(), v.decode())
        for _, k, v in duckdb.sql(f"select * from parquet_kv_metadata('{glob}')").fetchall()
    )
    assert meta["dse.schema_version"] == str(SCHEMA_VERSION)
    assert '"name": "tiny-study"' in meta["dse.study_spec"]
    ts = duckdb.sql(f"select typeof(started_utc) from read_parquet('{glob}') limit 1").fetchall()[0][0]
    assert ts == "TIMESTAMP WITH TIME ZONE"
    assert not list((tmp_path / "exports").rglob("*.tmp"))


def test_python_api_with_a_custom_objective(tmp_path: Path) -> None:
    def usd_per_user(m):  # type: ignore[no-untyped-def]
        return m["usd_per_hour"] / max(m["tokens_per_s_per_user"], 1e-9)

    res = Study.load(TINY).with_objective("usd_per_user_speed", usd_per_user).run(trials=6, out=tmp_path)
    t = res.trials
    assert "objective_usd_per_user_speed" in t.columns and t.height == 6
    feas = t.filter(t["feasible"])
    expected = feas["usd_per_hour"] / feas["tokens_per_s_per_user"]
    assert (feas["objective_usd_per_user_speed"] - expected).abs().max() < 1e-9


@pytest.mark.e2e
def test_an_interrupted_run_resumes_without_losing_or_repeating_trials(
    tmp_path: Path, clean_env: dict[str, str], cli: Cli
) -> None:
    db = tmp_path / "tiny-study" / "study.db"
    proc = subprocess.Popen(
        dse_cmd("study", "run", str(TINY), "--out", str(tmp_path), "--trials", "40", "--no-export"),
        env=clean_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    done = 0
    while time.time() < deadline and done < 5:
        time.sleep(0.3)
        if db.exists():
            try:
                with sqlite3.connect(db) as con:
                    done = con.execute("select count(*) from trials where state = 'COMPLETE'").fetchone()[0]
            except sqlite3.OperationalError:
                pass
    sampler = _children(proc.pid)  # the sampler's process, which stores the trials
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 5 <= done < 40, done
    assert len(sampler) == 1
    gone = time.time() + 30  # orphaned, it stores what it was told and exits
    while time.time() < gone and Path(f"/proc/{sampler[0]}").exists():
        time.sleep(0.1)
    assert not Path(f"/proc/{sampler[0]}").exists()
    with sqlite3.connect(db) as con:
        before = {r[0] for r in con.execute("select number from trials where state = 'COMPLETE'")}
    again = cli("study", "run", TINY, "--out", tmp_path, "--trials", "40", "--no-export")  # in process
    assert again.code == 0, again.err
    with sqlite3.connect(db) as con:
        states = con.execute("select state, count(*) from trials group by state").fetchall()
        numbers = [r[0] for r in con.execute("select number from trials where state = 'COMPLETE'")]
    counts = dict(states)
    assert counts["COMPLETE"] == 40 and "RUNNING" not in counts
    assert before <= set(numbers) and len(numbers) == len(set(numbers))


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            kids += [int(c) for c in (Path(f"/proc/{pid}/task") / task / "children").read_text().split()]
        except FileNotFoundError:  # a thread (a heartbeat, a pool worker) that ended meanwhile
            continue
    return kids


def test_a_failure_in_the_sampler_process_reaches_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sampler's process stores the trials; a write it cannot make stops the run with its error."""

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(proposer, "write_finished", full)  # the forked child inherits it
    with pytest.raises(OSError, match="No space left"):
        Study.load(TINY).run(out=tmp_path, trials=6)


@pytest.mark.e2e
def test_study_commands_end_to_end(tmp_path: Path, cli: Cli, tiny_cli_run: Result) -> None:
    listed = cli("study", "list")
    assert listed.code == 0 and "deepseek-v3-blackwell" in listed.out
    ran = tiny_cli_run  # dse study run TINY --out tmp_path --trials 8
    assert ran.code == 0, ran.err
    assert "8 trials run" in ran.out and "wrote 5 Parquet tables" in ran.out
    report = (tmp_path / "tiny-study" / "report" / "report.md").read_text()
    assert "## Best designs" in report and "## Binding constraints" in report
    trials = pl.read_parquet(tmp_path / "tiny-study" / "exports" / "trials" / "*" / "*.parquet")
    best = (
        trials.filter(pl.col("feasible"))
        .sort("usd_per_million_tokens")
        .unique("design", keep="first", maintain_order=True)
        .head(5)
    )
    lines = ran.out.splitlines()
    table = lines[lines.index(next(x for x in lines if x.startswith("trial  trials"))) + 2 :][: best.height]
    shown = [tuple(int(v) for v in x.split()[:2]) for x in table]  # each design once, with its trial count
    assert shown == list(zip(best["trial"], best["design_trials"], strict=True))
    # the settings that tell apart rows of the same pools: the chunk and the decode instance's cap,
    # whole sequences down, as `dse deploy` launches it (right-aligned under their headers)
    header = lines[lines.index(table[0]) - 2]
    cells = [
        tuple(int(x[: header.index(h) + len(h)].split()[-1].replace(",", "")) for h in ("chunk", "batch cap"))
        for x in table
    ]
    assert cells == [
        (r["p_chunk_tokens"], int(r["decode_batch_sequences"] + 1e-6)) for r in best.iter_rows(named=True)
    ]
    (tmp_path / "tiny-study" / "exports").rename(tmp_path / "old-exports")
    again = cli("export", TINY, "--out", tmp_path)
    assert again.code == 0, again.err
    assert (tmp_path / "tiny-study" / "exports" / "trials" / "study=tiny-study" / "part-0.parquet").exists()
    rep = cli("report", TINY, "--out", tmp_path)
    assert rep.code == 0 and rep.out.strip().endswith("report.md")
    no_storage = cli("worker", TINY)
    assert no_storage.code == 2 and "--storage: is required" in no_storage.err


def test_a_dense_model_s_study_searches_the_shapes_it_runs_and_a_model_alias_resumes(
    tmp_path: Path, cli: Cli
) -> None:
    """A study that writes no shapes searches the default ones its model runs: a dense model's had
    been refused for a default shape it never wrote ("EP 8 exceeds llama-3.1-70b's 1 experts"),
    and now gets the tensor-parallel shapes `dse place` tries. A model's alias is the model, as a
    hardware alias is the hardware: it had made a resumed run another study."""
    dense = tmp_path / "dense.toml"
    dense.write_text(
        'name = "dense"\nmodel = "llama3-70b"\nhardware = ["b200"]\ntrials = 2\n\n'
        "[workload]\nrequests_per_s = 10.0\ninput_tokens = 2000.0\noutput_tokens = 400.0\n\n"
        "[slo]\nttft_s = 2.0\ntpot_s = 0.06\n\n[simulate]\nhorizon_s = 600.0\nwarmup_s = 120.0\n"
    )
    shown = cli("study", "show", dense)
    assert shown.code == 0, shown.err
    spec = json.loads(shown.out)
    assert spec["model"] == "llama-3.1-70b"
    search = spec["search"]
    assert search["prefill"]["shapes"] == search["decode"]["shapes"] == ["4gpu-tp4-ep1", "8gpu-tp8-ep1"]
    ran = cli("study", "run", dense, "--out", tmp_path, "--no-export")
    assert ran.code == 0, ran.err
    dense.write_text(dense.read_text().replace('"llama3-70b"', '"llama-3.1-70b"'))
    by_id = cli("study", "run", dense, "--out", tmp_path, "--trials", "3", "--no-export")
    assert by_id.code == 0 and "(2 before)" in by_id.out, by_id.err
    # fp4 quantizes routed experts: a dense model's study had run fp8's figures under an fp4 label
    fp4 = tmp_path / "fp4" / "dense.toml"
    fp4.parent.mkdir()
    fp4.write_text(dense.read_text().replace("trials = 2\n", 'trials = 2\nprecision = "fp4"\n'))
    refused = cli("study", "show", fp4)
    assert (
        refused.code == 2
        and "precision = 'fp4': quantizes the routed experts, and llama-3.1-70b" in refused.err
    )


def test_a_study_left_without_a_precision_takes_its_models_serving_one(tmp_path: Path, cli: Cli) -> None:
    """A study file without ``precision`` had been priced at fp8 whatever its model, where dse
    place and the Python API take the model's serving precision: Kimi K3's fp4 checkpoint at fp8's
    weights. It now takes the model's; given, it is kept; a grid whose swept models serve at two
    precisions must say which it prices, in one line."""
    base = TINY.read_text()
    kimi = tmp_path / "kimi.toml"
    kimi.write_text(
        base.replace('name = "tiny-study"', 'name = "kimi"').replace('"deepseek-v3"', '"kimi-k3"')
    )
    shown = cli("study", "show", kimi)
    assert shown.code == 0, shown.err
    assert json.loads(shown.out)["precision"] == "fp4"
    assert json.loads(cli("study", "show", TINY).out)["precision"] == "fp8"
    kimi.write_text(kimi.read_text().replace("seed = 3\n", 'seed = 3\nprecision = "fp8"\n'))
    assert json.loads(cli("study", "show", kimi).out)["precision"] == "fp8"
    both = tmp_path / "both.toml"
    both.write_text(
        base.replace('name = "tiny-study"', 'name = "both"').replace("trials = 12\n", "")
        + '\n[sweep]\nmodel = ["deepseek-v3", "kimi-k3"]\n'
    )
    refused = cli("study", "show", both)
    assert refused.code == 2 and refused.err.count("\n") == 1, refused.err
    assert (
        f"{both}: precision: must be given: the swept models serve at different precisions "
        "(deepseek-v3 fp8, kimi-k3 fp4)" in refused.err
    )


def test_a_study_stored_with_a_model_alias_resumes_and_reads(tmp_path: Path, cli: Cli) -> None:
    """A run before 2026-12-07 stored its model as written (an alias); runs now store the id, and
    that study had become "another study's" to resume and to read."""
    ran = cli("study", "run", TINY, "--out", tmp_path, "--trials", "2", "--no-export")
    assert ran.code == 0, ran.err
    url = f"sqlite:///{tmp_path / 'tiny-study' / 'study.db'}"
    study = optuna.load_study(study_name="tiny-study", storage=url)
    spec = study.user_attrs["spec"]
    assert spec["model"] == "deepseek-v3"
    with contextlib.closing(sqlite3.connect(tmp_path / "tiny-study" / "study.db")) as con:
        con.execute(
            "update study_user_attributes set value_json = ? where key = 'spec'",
            (json.dumps({**spec, "model": "dsv3"}),),
        )
        con.commit()
    aliased = tmp_path / "tiny-study.toml"
    aliased.write_text(TINY.read_text().replace('model = "deepseek-v3"', 'model = "dsv3"'))
    again = cli("study", "run", aliased, "--out", tmp_path, "--trials", "3", "--no-export")
    assert again.code == 0 and "(2 before)" in again.out, again.err
    assert cli("export", TINY, "--out", tmp_path).code == 0


def test_study_db_alone_holds_every_trial(tmp_path: Path, cli: Cli, tiny_cli_run: Result) -> None:
    """The file to copy or share is the whole study: a CLI run had left every trial in study.db-wal
    (its process ends without closing SQLite), and a copied study.db held none."""
    assert tiny_cli_run.code == 0, tiny_cli_run.err
    shared = tmp_path / "shared" / "tiny-study"
    shared.mkdir(parents=True)
    for name in ("study.db", "spec.json"):
        shutil.copy(tmp_path / "tiny-study" / name, shared / name)
    with contextlib.closing(sqlite3.connect(shared / "study.db")) as con:
        assert con.execute("select count(*) from trials where state = 'COMPLETE'").fetchone()[0] == 8
    exported = cli("export", TINY, "--out", tmp_path / "shared")
    assert exported.code == 0, exported.err
    trials = pl.read_parquet(shared / "exports" / "trials" / "*" / "*.parquet")
    assert trials.height == 8


@pytest.mark.e2e
def test_a_terminal_shows_a_progress_bar(tmp_path: Path, clean_env: dict[str, str], cli: Cli) -> None:
    import pty

    master, slave = pty.openpty()
    ran = subprocess.run(
        dse_cmd("study", "run", str(TINY), "--out", str(tmp_path), "--trials", "4", "--no-export"),
        stdout=subprocess.PIPE,
        stderr=slave,
        env=clean_env,
        timeout=300,
    )
    os.close(slave)
    chunks = []
    with contextlib.suppress(OSError):  # EIO once the terminal's last writer is gone
        while data := os.read(master, 4096):
            chunks.append(data)
    os.close(master)
    bar = b"".join(chunks).decode()
    assert ran.returncode == 0
    assert "] 4/4 trials," in bar and "best $" in bar and "/M tok" in bar
    piped = cli("study", "run", TINY, "--out", tmp_path / "again", "--trials", "2")  # not a terminal: no bar
    assert piped.code == 0 and "trials," not in piped.err


def test_the_progress_bar_follows_the_first_objective(capsys: pytest.CaptureFixture[str]) -> None:
    from dse.study.runner import _Progress

    bar = _Progress(10, 0, ("tokens_per_s_per_gpu", "maximize"))
    bar.update(1, True, 900.0)
    bar.update(2, False, 5000.0)  # infeasible: not the best
    bar.update(3, True, 1250.0)
    bar.update(4, True, 1000.0)
    last = capsys.readouterr().err.split("\r")[-1]
    assert "4/10 trials" in last and "best tokens_per_s_per_gpu 1,250 tokens/s/GPU" in last
    low = _Progress(2, 0, ("ttft_p99_s", "minimize"))
    low.update(1, True, 0.8)
    low.update(2, True, 1.2)
    assert "best ttft_p99_s 0.8 s" in capsys.readouterr().err.split("\r")[-1]


def test_two_objectives_give_a_pareto_front(tmp_path: Path) -> None:
    study = (
        Study.load(TINY)
        .with_objective("tokens_per_s_per_gpu", direction="maximize")
        .with_objective("tokens_per_s_per_user", direction="maximize", replace_all=False)
    )
    res = study.run(trials=12, out=tmp_path)
    front = res.pareto
    assert not front.is_empty()
    feas = res.trials.filter(res.trials["feasible"])
    a, b = "objective_tokens_per_s_per_gpu", "objective_tokens_per_s_per_user"
    for row in front.iter_rows(named=True):  # nothing feasible beats a front member on both
        better = feas.filter(
            (feas[a] >= row[a]) & (feas[b] >= row[b]) & ((feas[a] > row[a]) | (feas[b] > row[b]))
        )
        assert better.is_empty()
    assert front["design"].n_unique() == front.height  # each design once, as its first front trial
    off = feas.join(front.select("design"), on="design", how="anti")
    for row in off.iter_rows(named=True):  # every other design is beaten by someone on the front
        assert not front.filter((front[a] >= row[a]) & (front[b] >= row[b])).is_empty()


def test_a_resumed_run_does_not_replay_the_first_proposals(tmp_path: Path) -> None:
    from dataclasses import replace

    base = Study.load(TINY)
    study = replace(base, spec=replace(base.spec, search=replace(base.spec.search, sampler="random")))
    first = study.run(trials=4, out=tmp_path)
    resumed = study.run(trials=8, out=tmp_path)
    cols = [c for c in resumed.trials.columns if c.startswith("p_")]
    old = first.trials.select(cols).rows()
    new = resumed.trials.filter(resumed.trials["trial"] >= 4).select(cols).rows()
    assert len(new) == 4 and new != old


def test_storage_urls_hide_passwords_and_pick_the_shipped_driver() -> None:
    from dse.study.storage import driver_url as _driver_url
    from dse.study.storage import redact as _redact

    assert _redact("postgresql://bob:s3cret@db:5432/dse") == "postgresql://bob:***@db:5432/dse"
    assert _redact("postgresql//bob:s3cret@db/dse") == "postgresql//bob:***@db/dse"
    assert _redact("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    assert _driver_url("postgresql://bob@db/dse") == "postgresql+psycopg2://bob@db/dse"
    assert _driver_url("postgresql+psycopg2://bob@db/dse") == "postgresql+psycopg2://bob@db/dse"


def test_no_piece_of_a_password_with_an_at_and_a_colon_is_printed(tmp_path: Path, cli: Cli) -> None:
    """The driver reads 'Ab@Cd:Ef12' unescaped as password 'Ab', host 'Cd' and a port of
    'Ef12@127.0.0.1:55439', and its error had quoted the tail of the password as that port."""
    url = "postgresql://dse:Ab@Cd:Ef12@127.0.0.1:55439/study6"
    for command in ("run", "export"):
        out = cli("study", command, TINY, "--storage", url, "--out", tmp_path / "out")
        assert out.code == 2 and out.err.count("\n") == 1, out.err
        assert "postgresql://dse:***@127.0.0.1:55439/study6" in out.err, out.err
        assert not any(piece in out.err for piece in ("Ab", "Cd", "Ef12")), out.err
    assert not (tmp_path / "out").exists()


def test_reading_a_study_writes_nothing_to_its_storage(
    tmp_path: Path, cli: Cli, tiny_cli_run: Result, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Export and report load a stored study; they had created it again (Optuna's create_study,
    an insert), which a study.db on read-only media refused, so it could not be exported at all.
    A database without Optuna's tables is left as it was: export had created all eleven in it
    before saying it held no study."""
    assert tiny_cli_run.code == 0, tiny_cli_run.err

    def no_create(*args: object, **kwargs: object) -> None:
        raise AssertionError("a reader created the study")

    monkeypatch.setattr(optuna, "create_study", no_create)
    for command in ("export", "report"):
        out = cli(command, TINY, "--out", tmp_path)
        assert out.code == 0, out.err
    other = tmp_path / "notes.db"
    with contextlib.closing(sqlite3.connect(other)) as con:
        con.execute("create table notes (x)")
        con.commit()
    refused = cli("export", TINY, "--out", tmp_path / "o", "--storage", f"sqlite:///{other}")
    assert refused.code == 2 and "is not stored here (it holds none): run the study first" in refused.err
    with contextlib.closing(sqlite3.connect(other)) as con:
        assert [r[0] for r in con.execute("select name from sqlite_master where type = 'table'")] == ["notes"]


def test_export_of_a_study_never_run_is_bad_input(tmp_path: Path, cli: Cli) -> None:
    out = cli("export", TINY, "--out", tmp_path)
    assert out.code == 2 and "study.db: does not exist: run the study first" in out.err
    assert not (tmp_path / "tiny-study" / "study.db").exists()


def test_a_storage_file_that_does_not_exist_is_named_as_given(tmp_path: Path, cli: Cli) -> None:
    """`--storage sqlite:///FILE` of a file that is not there: the error names that URL and its
    file, not the run folder's study.db, which the command never read (it had said
    `OUT/NAME: study.db: does not exist`, a file the user had not named); nothing is created."""
    url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    for command in ("export", "report"):
        out = cli(command, TINY, "--out", tmp_path / "out", "--storage", url)
        assert out.code == 2 and out.err.count("\n") == 1, out.err
        want = f"names a SQLite file that does not exist ({tmp_path / 'elsewhere.db'}): run the study first"
        assert "--storage: url = 'sqlite:///" in out.err and want in out.err, out.err
        assert "study.db" not in out.err, out.err  # (a long URL is shortened; the file is named whole)
    assert not (tmp_path / "elsewhere.db").exists() and not (tmp_path / "out").exists()


def test_an_export_blocked_at_one_table_writes_none(tmp_path: Path, cli: Cli, tiny_cli_run: Result) -> None:
    """A file where a table's folder goes, or a folder where its file goes, is refused before any
    table is written: the trials table had been written before the blocked pareto one refused (and
    a folder in its file's place had been a traceback)."""
    assert tiny_cli_run.code == 0, tiny_cli_run.err
    exports = tmp_path / "tiny-study" / "exports"
    for blocked in (exports / "pareto", exports / "pareto" / "study=tiny-study" / "part-0.parquet"):
        shutil.rmtree(exports)
        if blocked.name == "pareto":
            exports.mkdir()
            blocked.write_text("x")
            rule = "must be a folder: a file has its name"
        else:
            blocked.mkdir(parents=True)
            rule = "must be a file: a folder has its name"
        out = cli("export", TINY, "--out", tmp_path)
        assert out.code == 2 and out.err == f"dse: error: {blocked}: {rule}\n", out.err
        assert sorted(p.relative_to(exports).as_posix() for p in exports.rglob("*.parquet")) == (
            ["pareto/study=tiny-study/part-0.parquet"] if blocked.name != "pareto" else []
        )


def test_ttft_percentile_is_the_quantile_of_a_shifted_exponential_of_that_mean_and_p99() -> None:
    """The fluid model's TTFT at a study's percentile, from its mean and p99: the quantile of a
    shift plus an exponential tail at every percentile, the median below the mean (it had read
    the mean below p63, so a p50 target was held to the mean under the median's name)."""
    import numpy as np

    from dse.evaluation import ttft_at_percentile

    x = 0.4 + np.random.default_rng(7).exponential(0.25, 2_000_000)  # TTFT: 0.4 s + a 0.25 s tail
    mean, p99 = float(x.mean()), float(np.percentile(x, 99.0))
    for q in (10.0, 50.0, 63.0, 90.0, 99.0):
        assert ttft_at_percentile(mean, p99, q) == pytest.approx(float(np.percentile(x, q)), rel=2e-3), q
    assert ttft_at_percentile(mean, p99, 50.0) < mean
    assert ttft_at_percentile(1.0, 1.0, 50.0) == ttft_at_percentile(1.0, 0.9, 99.0) == 1.0  # no tail
    assert ttft_at_percentile(0.1, 5.0, 10.0) == 0.0  # never below 0


def test_a_write_that_fails_is_not_made_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampler's process writes a told trial once: a write that failed may have been committed
    (its answer lost), so the process stops with the error rather than write it again."""
    log = tmp_path / "writes.log"

    def failing(stored: object, trial: object, *args: object) -> None:
        with log.open("a") as f:
            f.write(f"{trial.number}\n")  # type: ignore[attr-defined]
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(proposer, "write_finished", failing)  # the forked child inherits it
    with pytest.raises(OSError, match="Input/output error"):
        Study.load(TINY).run(out=tmp_path / "run", trials=6)
    assert log.read_text().split() == ["0"]


def test_a_failure_of_the_last_write_reaches_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last trial's write fails after the run's loop is over: closing the sampler's process raises it."""
    real, calls = proposer.write_finished, []

    def full_at_last(*args: object, **kwargs: object) -> None:
        calls.append(1)
        if len(calls) == 4:
            raise OSError(28, "No space left on device")
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(proposer, "write_finished", full_at_last)  # the forked child inherits it
    with pytest.raises(OSError, match="No space left"):
        Study.load(TINY).run(out=tmp_path, trials=4)


def _log_asks_and_writes(monkeypatch: pytest.MonkeyPatch, log: Path, write_s: float = 0.0) -> None:
    """The sampler's process logs each proposal (``ask NUMBER UNWRITTEN``: the told trials it has
    not written yet) and each write (``write NUMBER 0``), a write taking ``write_s`` longer."""
    real_ask, real_write = proposer._Sampling.ask, proposer.write_finished

    def ask(self: proposer._Sampling) -> proposer.Proposal:
        got = real_ask(self)
        with log.open("a") as f:
            f.write(f"ask {got.number} {len(self.unstored)}\n")
        return got

    def write(stored: object, trial: object, *args: object) -> None:
        time.sleep(write_s)
        with log.open("a") as f:
            f.write(f"write {trial.number} 0\n")  # type: ignore[attr-defined]
        real_write(stored, trial, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(proposer._Sampling, "ask", ask)  # the forked child inherits both
    monkeypatch.setattr(proposer, "write_finished", write)


def _as_in_one_process(monkeypatch: pytest.MonkeyPatch, out: Path, trials: int, forked: pl.DataFrame) -> None:
    """The run's trials are those of the same run in one process (a daemon's, which has no child)."""
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "daemon", property(lambda self: True))
    alone = Study.load(TINY).run(out=out, trials=trials).trials
    assert alone.select("p_topology", "p_max_batch").equals(forked.select("p_topology", "p_max_batch"))


def test_the_sampler_process_proposes_before_it_writes_what_it_was_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Told trial k, the sampler's process sends the proposal the parent asked for with it (trial
    k + 2) before it writes trial k, so the parent, evaluating k + 1, does not wait for the write;
    every trial is still written, in order, and the run's trials are those of a run in one process."""
    log = tmp_path / "order.log"
    _log_asks_and_writes(monkeypatch, log)
    forked = Study.load(TINY).run(out=tmp_path / "forked", trials=6).trials
    events = [tuple(e.split()[:2]) for e in log.read_text().splitlines()]
    assert [int(n) for kind, n in events if kind == "write"] == list(range(6))
    for k in range(4):  # trial k + 2 is asked for with trial k's tell, and goes out first
        assert events.index(("ask", str(k + 2))) < events.index(("write", str(k))), events
    _as_in_one_process(monkeypatch, tmp_path / "alone", 6, forked)


def test_the_sampler_process_answers_a_waiting_tell_before_it_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the parent's next message is already waiting (its trial was quicker than the child's
    write), the child proposes first and writes after, at most UNSTORED_MAX trials behind: slow
    writes (0.2 s) and quick trials leave several told trials unwritten at once, every trial is
    written, in order, and the trials are those of a run in one process."""
    log = tmp_path / "order.log"
    monkeypatch.setattr(proposer, "UNSTORED_MAX", 3)
    _log_asks_and_writes(monkeypatch, log, write_s=0.2)
    forked = Study.load(TINY).run(out=tmp_path / "forked", trials=12).trials
    events = [e.split() for e in log.read_text().splitlines()]
    assert [int(n) for kind, n, _ in events if kind == "write"] == list(range(12))
    waiting = [int(u) for kind, _, u in events if kind == "ask"]  # told, unwritten, at each ask
    # proposals went out ahead of writes (one told trial waits at each ask when every write comes
    # first), and no further than 3: how far, the two processes' speeds decide
    assert 2 <= max(waiting) <= 3, events
    _as_in_one_process(monkeypatch, tmp_path / "alone", 12, forked)


@pytest.mark.e2e
def test_an_orphaned_sampler_process_stores_every_trial_it_was_told(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """The parent dies with trials told but not yet stored (slow writes) and a proposal unread:
    the child stores all six, quietly, and exits."""
    db = tmp_path / "s.db"
    parent = subprocess.run(
        [sys.executable, str(DATA / "orphan_parent.py"), str(db)],
        env=clean_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert parent.returncode == 0, parent.stderr
    child = Path(f"/proc/{int(parent.stdout.split()[0])}")
    gone = time.time() + 30
    while time.time() < gone and child.exists():
        time.sleep(0.1)
    assert not child.exists()
    with sqlite3.connect(db) as con:
        assert con.execute("select count(*) from trials where state = 'COMPLETE'").fetchone()[0] == 6
    assert "Traceback" not in parent.stderr


def _pool_run(out: str) -> list[dict[str, object]]:
    return Study.load(TINY).run(out=Path(out), trials=8).trials.select("p_topology", "p_max_batch").to_dicts()


@pytest.mark.e2e
def test_a_run_inside_a_pool_worker_samples_in_its_own_process_with_the_same_trials(tmp_path: Path) -> None:
    """A multiprocessing.Pool worker is a daemon and may not start the sampler's process. (Spawned:
    a worker forked from this process, whose polars threads hold locks, can hang in polars.)"""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        inside = pool.apply(_pool_run, (str(tmp_path / "pool"),))
    assert inside == _pool_run(str(tmp_path / "alone"))


def test_an_input_error_in_the_sampler_process_reaches_the_run_as_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(url: str, *args: object) -> None:
        raise InputError("--storage", "url", "cannot be opened (too many clients)", url)

    monkeypatch.setattr(proposer, "open_storage", refused)  # the forked child inherits it
    with pytest.raises(InputError, match="too many clients") as got:
        Study.load(TINY).run(out=tmp_path, trials=3)
    assert got.value.field == "url" and got.value.exit_code == 2


def test_closing_raises_when_the_sampler_process_cannot_finish_its_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stuck(*args: object, **kwargs: object) -> None:
        time.sleep(30)

    monkeypatch.setattr(proposer, "write_finished", stuck)
    monkeypatch.setattr(proposer, "CLOSE_WAIT_S", 0.5)
    with pytest.raises(RuntimeError, match="had not stored every finished trial"):
        Study.load(TINY).run(out=tmp_path, trials=1)


def test_a_killed_sampler_process_stops_the_run_with_one_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def killed(*args: object, **kwargs: object) -> None:
        os.kill(os.getpid(), signal.SIGKILL)  # in the child: as the out-of-memory killer would

    monkeypatch.setattr(proposer, "write_finished", killed)
    with pytest.raises(RuntimeError, match=r"the sampler process ended \(exit code -9\)"):
        Study.load(TINY).run(out=tmp_path, trials=5)


def test_a_study_decodes_with_its_own_mtp_settings(tmp_path: Path) -> None:
    """`mtp_draft_tokens` and `mtp_accept_rate` reach the placement: one draft accepted 87.5% of
    the time (DeepSeek's) packs more sequences per decode GPU at the same TPOT than the engine
    profile's three at the fitted rate; without `mtp = true` they are refused."""
    from dse.catalog import load_catalog
    from dse.perf.params import load_params, with_mtp
    from dse.placement.plan import place
    from dse.placement.request import PlacementRequest, Topology, UnitOptions
    from dse.study.spec import load_study
    from dse.workload import Slo, Workload
    from formulations.placement_data import Objective, Role

    profile = load_params().engine("sglang")
    own = with_mtp(profile, 1, 0.875)
    assert (own.mtp_draft_tokens, own.mtp_accept_rate) == (1, 0.875)
    assert with_mtp(profile, None, None) is profile

    def decode_batch(**mtp: object) -> float:
        req = PlacementRequest(
            model="deepseek-v3", hardware=("h800-sxm",), workload=Workload(50.0, 4000.0, 1000.0),
            slo=Slo(30.0, 0.05), topology=Topology.DISAGGREGATED, objective=Objective.GPUS,
            engine="sglang", mtp=True, **mtp,
            # one decode shape, so the batches compare at the same instance
            options=UnitOptions(decode_shapes=("32gpu-dpa-ep32",), prefill_shapes=("16gpu-dpa-ep16",)),
        )  # fmt: skip
        best = place(req, catalog=load_catalog(use_env=False)).best
        assert best is not None
        return max(p.unit.decode_batch for p in best.pools if p.unit.role is Role.DECODE)

    assert decode_batch(mtp_draft_tokens=1, mtp_accept_rate=0.875) > 1.1 * decode_batch()
    spec = load_study("deepseek-production")
    assert (spec.mtp, spec.mtp_draft_tokens, spec.mtp_accept_rate) == (True, 1, 0.875)
    text = (Path(__file__).parent.parent / "studies" / "deepseek-production.toml").read_text()
    bad = tmp_path / "deepseek-production.toml"
    bad.write_text(text.replace("mtp = true", "mtp = false"))
    with pytest.raises(InputError, match="mtp_draft_tokens = 1: needs mtp = true"):
        load_study(bad)


def test_a_study_with_no_design_exports_typed_tables_duckdb_reads(tmp_path: Path) -> None:
    """A budget that buys nothing: every trial fails. Each table is still written with its
    columns and types (a Parquet file without columns is one DuckDB refuses; metric columns were
    Null-typed), and a maximised objective's missing value is null, not a number that ranks."""
    spec = tmp_path / "tiny-study.toml"
    spec.write_text(TINY.read_text() + "\n[limits]\nbudget_usd_hour = 0.001\n")
    res = Study.load(spec).run(trials=4, out=tmp_path / "runs")
    assert not res.trials["feasible"].any() and res.placements.is_empty()
    assert res.trials.schema["usd_per_million_tokens"] == pl.Float64
    assert res.trials["objective_usd_per_million_tokens"].null_count() == 4
    res.export(tmp_path / "exports")
    for table in ("trials", "placements", "kv_tiers", "sim_timeseries"):
        glob = str(tmp_path / "exports" / table / "*" / "*.parquet")
        cols = duckdb.sql(f"select * from read_parquet('{glob}', hive_partitioning=true)").columns
        assert "trial" in cols, (table, cols)
    glob = str(tmp_path / "exports" / "placements" / "*" / "*.parquet")
    assert duckdb.sql(f"select count(*) from read_parquet('{glob}')").fetchall() == [(0,)]


def test_a_resumed_study_warns_when_its_objective_function_is_other_code(tmp_path: Path) -> None:
    """A function of the same name but other code had resumed in silence: its values (-24,000 and
    below) ranked beside the stored ones (1.4-6.1). The same code resumes without a word."""
    import warnings as w

    def per_user(m):  # type: ignore[no-untyped-def]
        return m["usd_per_hour"] / m["tokens_per_s_per_user"]

    Study.load(TINY).with_objective("speed_cost", per_user).run(trials=2, out=tmp_path)
    with w.catch_warnings():
        w.simplefilter("error", ObjectiveWarning)
        Study.load(TINY).with_objective("speed_cost", per_user).run(trials=3, out=tmp_path)
    with pytest.warns(ObjectiveWarning, match="objective speed_cost: its function's code is not the one"):
        Study.load(TINY).with_objective("speed_cost", lambda m: -1000.0 * m["gpus"]).run(
            trials=4, out=tmp_path
        )


def test_a_maximised_objective_without_a_value_ranks_last(tmp_path: Path) -> None:
    """An objective that gives nan once stored 0, which beat every negative value it is maximised
    over: the trial came out best."""

    def neg_cost(m):  # type: ignore[no-untyped-def]
        return float("nan") if m["gpus"] > 16 else -m["usd_per_million_tokens"]

    study = Study.load(TINY).with_objective("neg_cost", neg_cost, "maximize")
    with pytest.warns(ObjectiveWarning, match="objective neg_cost: returned nan for trial"):
        res = study.run(trials=12, out=tmp_path)
    best = res.best_trial()
    assert best is not None
    row = res.trials.filter(pl.col("trial") == best)
    assert row["gpus"][0] <= 16 and row["objective_neg_cost"][0] < 0
    nan_rows = res.trials.filter(pl.col("feasible") & (pl.col("gpus") > 16))
    assert nan_rows["objective_neg_cost"].null_count() == nan_rows.height


def test_a_changed_study_does_not_resume_into_the_stored_one(tmp_path: Path, cli: Cli) -> None:
    """Trials of 10 requests/s and of 20 would mix in one study, the best of them reported for
    the file's traffic; a new budget or seed resumes."""
    spec = tmp_path / "tiny-study.toml"
    spec.write_text(TINY.read_text())
    out = tmp_path / "runs"
    assert cli("study", "run", str(spec), "--trials", "3", "--out", str(out)).code == 0
    spec.write_text(TINY.read_text().replace("requests_per_s = 10.0", "requests_per_s = 20.0"))
    for cmd in (["run", str(spec), "--trials", "5"], ["export", str(spec)]):
        refused = cli("study", *cmd, "--out", str(out))
        assert refused.code == 2, refused.err
        assert "spec.workload.requests_per_s = 20.0: the stored study's trials ran with 10.0" in refused.err
    spec.write_text(TINY.read_text().replace("trials = 12", "trials = 20").replace("seed = 3", "seed = 4"))
    resumed = cli("study", "run", str(spec), "--trials", "5", "--out", str(out))
    assert resumed.code == 0 and "(3 before)" in resumed.out, resumed.err


def test_reading_a_study_from_a_database_that_does_not_hold_it_is_bad_input(tiny_run, cli: Cli) -> None:  # type: ignore[no-untyped-def]
    """It once created an empty study of that name there and reported success."""
    _, out = tiny_run
    url = f"sqlite:///{out / 'tiny-study' / 'study.db'}"
    other = cli("study", "export", "agentic-kv-tiering", "--storage", url, "--out", str(out / "x"))
    assert other.code == 2
    assert "study = 'agentic-kv-tiering': is not stored here (it holds tiny-study)" in other.err
    assert optuna_names(url) == ["tiny-study"]


def optuna_names(url: str) -> list[str]:
    import optuna

    return optuna.study.get_all_study_names(storage=url)


def test_an_in_memory_storage_is_refused(tmp_path: Path, cli: Cli) -> None:
    for url in ("sqlite://", "sqlite:///:memory:"):
        out = cli("study", "run", str(TINY), "--trials", "2", "--out", str(tmp_path), "--storage", url)
        assert out.code == 2 and "must name a database file or server" in out.err, out.err
    assert not list(tmp_path.iterdir())


def test_hardware_aliases_are_the_catalog_ids_in_every_table(tmp_path: Path) -> None:
    spec = tmp_path / "tiny-study.toml"
    aliases = TINY.read_text().replace('hardware = ["b200", "h200-sxm"]', 'hardware = ["dgx-b200", "H200"]')
    spec.write_text(aliases)
    res = Study.load(spec).run(trials=6, out=tmp_path / "runs")
    named = set(res.trials["p_prefill_hardware"]) | set(res.trials["p_decode_hardware"])
    assert named <= {"b200", "h200-sxm"} and set(res.placements["hardware"]) <= {"b200", "h200-sxm"}


def test_a_study_of_no_trials_says_so_not_that_a_budget_binds() -> None:
    """A study with no completed trial (interrupted before its first) is no feasible design of
    reason "trials"; it had been "budget", the $/hour cap's reason, in a study with no budget."""
    from types import SimpleNamespace

    import polars as pl

    from dse.cli.study_cmd import _no_feasible

    none = _no_feasible(SimpleNamespace(trials=pl.DataFrame()))  # type: ignore[arg-type]
    assert (none.binding, none.detail) == ("trials", "no trial completed")


def test_an_objective_that_is_no_metric_or_gives_no_number_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="name = 'nope': must be a metric with a direction: e2e_s, gpus"):
        Study.load(TINY).with_objective("nope")
    words = Study.load(TINY).with_objective("words", lambda m: "cheap")
    with pytest.raises(InputError, match="objective: words = 'cheap': must return a number"):
        words.run(trials=2, out=tmp_path)
    # an int past float's range had raised a bare OverflowError and left the study's folder
    huge = Study.load(TINY).with_objective("huge", lambda m: 10**400)
    with pytest.raises(
        InputError, match="objective: huge = 'an int near 10\\^400': must return a number within"
    ):
        huge.run(trials=2, out=tmp_path / "huge")
    assert not (tmp_path / "huge" / "tiny-study").exists()


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # a heartbeat without optimize(): the worker here
def test_a_lone_run_does_not_fail_the_trials_a_worker_is_running(tmp_path: Path, cli: Cli) -> None:
    """A lone run marks every running trial failed (a lone run's own, left by a kill); a worker's,
    beating now, it once failed under the worker (UpdateFinishedTrialError there) and ran its own
    budget beside it. It is refused, saying how many trials run and how old their latest heartbeat
    is, and the trial keeps running."""
    import optuna

    from dse.study.storage import open_storage

    out = tmp_path / "runs"
    assert cli("study", "run", str(TINY), "--trials", "2", "--out", str(out)).code == 0
    url = f"sqlite:///{out / 'tiny-study' / 'study.db'}"
    storage = open_storage(url, stale_after_s=120.0)  # as a worker opens it: with heartbeats
    study = optuna.load_study(study_name="tiny-study", storage=storage)
    trial = study.ask()
    storage.record_heartbeat(trial._trial_id)
    lone = cli("study", "run", str(TINY), "--trials", "4", "--out", str(out))
    assert lone.code == 2, lone.err
    said = rf"in use by a worker \(1 running trial, the latest heartbeat trial {trial.number}'s, \d+ s ago\)"
    assert re.search(said, lone.err), lone.err
    # a killed or frozen worker's trial holds the storage until it is silent for 120 s: the line says
    # so, and when (it had said "run once the workers are done", which a dead worker never is)
    assert re.search(r"a trial silent for 120 s is a dead \(killed or frozen\) worker's, which a run fails: "
                     r"in 1[12]\d s, if they died", lone.err), lone.err  # fmt: skip
    assert lone.err.count("\n") == 1
    assert study.get_trials(deepcopy=False)[trial.number].state is optuna.trial.TrialState.RUNNING


def test_a_worker_that_ends_stores_the_best_trials_shadow_prices(tmp_path: Path, cli: Cli) -> None:
    """Only a lone run stored them: after workers, the report said "No shadow prices"."""
    import optuna

    from dse.study.best import PRICES_ATTR

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    done = cli("worker", str(TINY), "--storage", url, "--trials", "4", "--out", str(tmp_path))
    assert done.code == 0, done.err
    stored = optuna.load_study(study_name="tiny-study", storage=url).user_attrs[PRICES_ATTR]
    assert stored["prices"] and isinstance(stored["trial"], int)
    report = cli("study", "report", str(TINY), "--storage", url, "--out", str(tmp_path))
    assert report.code == 0, report.err
    assert "No shadow prices" not in (tmp_path / "tiny-study" / "report" / "report.md").read_text()


def test_an_objective_cannot_pass_for_another(tmp_path: Path) -> None:
    """A function under a built-in metric's name would store its values as the metric's; a metric
    keeps its own direction; a stored study is not resumed to optimise the other way."""
    base = Study.load(TINY)
    with pytest.raises(InputError, match="usd_per_million_tokens.*built-in metric's name"):
        base.with_objective("usd_per_million_tokens", lambda m: -m["gpus"])
    with pytest.raises(InputError, match="direction.*minimized by its metric's definition, not maximized"):
        base.with_objective("usd_per_million_tokens", direction="maximize")
    for bad in ("", "cost per user", "kostenén"):
        with pytest.raises(InputError, match="ASCII letters, digits"):
            base.with_objective(bad, lambda m: 1.0)
    base.with_objective("cost-per-user.v2", lambda m: 1.0)  # a name older studies may carry
    with pytest.raises(InputError, match="already an objective"):
        base.with_objective("gpus_used", lambda m: m["gpus"]).with_objective(
            "gpus_used", lambda m: m["gpus"], replace_all=False
        )
    base.with_objective("gpus_used", lambda m: m["gpus"]).run(trials=2, out=tmp_path)
    again = base.with_objective("gpus_used", lambda m: m["gpus"], "maximize")
    with pytest.raises(InputError, match="the stored study minimizes them; .* to maximize them"):
        again.run(trials=3, out=tmp_path)


def test_an_objective_reading_an_exported_column_name_is_told_the_metric(tmp_path: Path) -> None:
    study = Study.load(TINY).with_objective("mean_ttft", lambda m: m["ttft_mean_s"])
    with pytest.raises(InputError, match="the exported column 'ttft_mean_s' is the metric 'ttft_s' here"):
        study.run(trials=2, out=tmp_path)


def test_a_study_whose_first_trial_failed_on_its_objective_starts_over(tmp_path: Path) -> None:
    """The failed run stored no trial, and leaves nothing behind: another objective runs in the
    same folder (it was refused: the empty study still optimised the failed objective)."""
    with pytest.raises(InputError, match="must return a number.*; nothing was stored"):
        Study.load(TINY).with_objective("words", lambda m: "cheap").run(trials=2, out=tmp_path)
    assert not list(tmp_path.iterdir())
    study = Study.load(TINY).with_objective("gpus_used", lambda m: m["gpus"], "maximize")
    assert study.run(trials=2, out=tmp_path).trials.height == 2


def test_a_study_stored_before_the_shape_rule_is_still_read(tmp_path: Path, cli: Cli) -> None:
    """The shape rule guards runs, not stored results: a study whose spec holds a shape refused
    today (as one stored before the rule would) still reports and exports."""
    import optuna

    from dse.plain import plain
    from dse.study.spec import load_study

    Study.load(TINY).run(trials=2, out=tmp_path)
    text = TINY.read_text()
    old = tmp_path / "tiny-study.toml"
    old.write_text(text.replace('"8gpu-tp8-ep8"', '"8gpu-tp8-ep16"', 1))
    db = f"sqlite:///{tmp_path / 'tiny-study' / 'study.db'}"
    optuna.load_study(study_name="tiny-study", storage=db).set_user_attr(
        "spec", plain(load_study(old).served_by(load_catalog()))
    )  # as a run stores it
    assert cli("study", "report", old, "--out", tmp_path).code == 0
    refused = cli("study", "run", old, "--out", tmp_path, "--trials", "3")
    assert refused.code == 2 and "search.prefill.shapes[0] = '8gpu-tp8-ep16'" in refused.err


def test_a_search_study_takes_its_sampler_keys(tmp_path: Path) -> None:
    """The keys a grid refuses are a search's own: NSGA-II with its population, no warm start."""
    text = TINY.read_text().replace(
        "[search]\n", '[search]\nsampler = "nsga2"\npopulation = 8\nwarm_start = false\n'
    )
    good = tmp_path / "tiny-study.toml"
    good.write_text(text)
    search = load_study(good).search
    assert (search.sampler, search.population, search.warm_start) == ("nsga2", 8, False)


def test_a_study_stored_before_a_no_effect_rule_is_still_read(tmp_path: Path, cli: Cli) -> None:
    """The rules that refuse settings no trial would use guard new runs, not stored results: a
    run made before them (returning_share = 0 beside a cached prefix, a what-if variant no trial
    runs on) reports, exports and reads from Python, each setting named in a warning, and is not
    resumed. Without this it could not be read at all: the file refused, and with the key edited
    out the stored study's spec differs (``spec.workload.cached_prefix_tokens``)."""
    from dataclasses import replace

    import optuna

    from dse.plain import plain
    from dse.study.spec import Variant

    Study.load(TINY).run(trials=2, out=tmp_path)
    variant = '\n[[variants]]\nid = "b200-bw2"\nbase = "b200"\nhbm_bandwidth_scale = 2.0\n'
    old = tmp_path / "tiny-study.toml"
    old.write_text(TINY.read_text().replace("returning_share = 0.3", "returning_share = 0.0") + variant)
    spec = load_study(TINY).served_by(load_catalog())  # the spec as a dse before the rules stored it
    spec = replace(
        spec,
        workload=replace(spec.workload, returning_share=0.0),
        variants=(Variant(id="b200-bw2", base="b200", hbm_bandwidth_scale=2.0),),
    )
    db = f"sqlite:///{tmp_path / 'tiny-study' / 'study.db'}"
    optuna.load_study(study_name="tiny-study", storage=db).set_user_attr("spec", plain(spec))
    idle = f"{old}: workload.cached_prefix_tokens = 8000.0: needs returning_share > 0"
    unused = f"{old}: variants[0].id = 'b200-bw2': must be named in hardware"
    for command in ("report", "export"):
        read = cli("study", command, old, "--out", tmp_path)
        assert read.code == 0, read.err
        warnings = read.err.splitlines()
        assert len(warnings) == 2 and all(w.startswith("dse: warning: ") for w in warnings), read.err
        assert idle in warnings[0] and unused in warnings[1] and "read as stored" in warnings[0]
    res = Study.load(old).results(out=tmp_path)
    assert res.trials.height == 2 and [e.field for e in res.idle] == [
        "workload.cached_prefix_tokens",
        "variants[0].id",
    ]
    refused = cli("study", "run", old, "--out", tmp_path, "--trials", "3")
    assert refused.code == 2 and refused.err.count("\n") == 1 and idle in refused.err, refused.err
    with pytest.raises(InputError, match="workload.cached_prefix_tokens = 8000.0: needs returning_share"):
        Study.load(old).run(trials=3, out=tmp_path)
    assert Study.load(old).results(out=tmp_path).trials.height == 2  # no trial added by the refusals


def test_a_midfill_shape_no_hardware_runs_is_refused_before_trials(tmp_path: Path, cli: Cli) -> None:
    """`[search.midfill] shapes` (a four-stage study's midfill pool) is checked as the prefill and
    decode shapes are, naming its own field."""
    text = TINY.read_text().replace('"disaggregated"]', '"disaggregated", "four-stage"]')
    text += '\n[search.midfill]\nshapes = ["8gpu-tp8-ep9"]\n'
    bad = tmp_path / "tiny-study.toml"
    bad.write_text(text)
    out = cli("study", "run", bad, "--out", tmp_path / "runs")
    assert out.code == 2 and out.err.count("\n") == 1, out.err
    assert f"{bad}: search.midfill.shapes[0] = '8gpu-tp8-ep9': no hardware of the study can run it" in out.err
    assert not (tmp_path / "runs").exists()


def test_every_output_tail_keeps_the_workloads_mean_output() -> None:
    """A study's simulated output lengths (none, long, heavy) serve the workload's mean output:
    the long tail's body had sat at 1/2.8 of the mean, so every search study simulated 12.9% fewer
    output tokens than its workload (a design's TPOT, stability and end-to-end figures light)."""
    from dse.study.spec import OUTPUT_TAILS, load_study
    from dse.study.trial import output_lengths, scenario_for

    for tail in OUTPUT_TAILS:
        lengths = output_lengths(800.0, tail)
        assert lengths.mean == pytest.approx(800.0, rel=1e-12), tail
        assert sum(lengths.shares) == pytest.approx(1.0)
    long = output_lengths(800.0, "long")
    assert long.means == pytest.approx((400.0, 4400.0)) and long.shares == pytest.approx((0.9, 0.1))
    spec = load_study("deepseek-v3-blackwell")
    assert scenario_for(spec).lengths.mean == pytest.approx(spec.workload.output_tokens)


def test_mtp_on_a_model_without_mtp_layers_is_refused_before_trials(tmp_path: Path, cli: Cli) -> None:
    """Every engine drafts MTP tokens with the checkpoint's own MTP layers: a study with `mtp =
    true` on a model without them (Qwen3-235B) had run and priced drafts no engine launches (only
    `dse deploy` refused them afterwards)."""
    text = TINY.read_text().replace('model = "deepseek-v3"', 'model = "qwen3-235b-a22b"')
    bad = tmp_path / "tiny-study.toml"
    bad.write_text(text.replace("seed = 3\n", "seed = 3\nmtp = true\n", 1))
    rule = "needs a model with MTP layers to draft with (qwen3-235b-a22b has none: mtp_layers = 0)"
    for args in (("show", bad), ("run", bad, "--out", tmp_path / "runs")):
        out = cli("study", *args)
        assert out.code == 2, out.err
        assert out.err == f"dse: error: {bad}: mtp = true: {rule}\n"
    assert not (tmp_path / "runs").exists()
    bad.write_text(text)
    assert cli("study", "show", bad).code == 0
