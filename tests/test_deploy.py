"""`dse deploy`: launch files for a study's design, each flag one the engine's table names."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import Cli, Result

from dse.study.deploy import Design, PoolLaunch, engine_flags, launch_files
from dse.units import Precision

TINY = str(Path(__file__).parent / "data" / "tiny-study.toml")
FLAGS = engine_flags()


def _design(topology: str = "disaggregated", drafts: int = 2) -> Design:
    wide = PoolLaunch("decode", "b200", 16, 1, 16, 3, 8, max_running=1000, chunk_tokens=None)
    pools = (
        (PoolLaunch("prefill", "b200", 8, 8, 8, 2, 8, max_running=None, chunk_tokens=8192), wide)
        if topology == "disaggregated"
        else (PoolLaunch("mixed", "gb200-nvl72", 8, 1, 8, 4, 4, max_running=256, chunk_tokens=4096),)
    )
    return Design(
        study="s", trial=7, model="deepseek-v3", model_repo="deepseek-ai/DeepSeek-V3", native_precision="fp8",
        topology=topology, precision="fp4", kv_dtype=Precision.FP8, mtp_drafts=drafts, profile="trt",
        pools=pools, metrics={"usd_per_million_tokens": 0.5},
    )  # fmt: skip


def _command(script: str) -> list[str]:
    line = next(x for x in script.splitlines() if x.startswith("exec "))
    return shlex.split(line.removeprefix("exec "))


def _flags_of(words: list[str]) -> set[str]:
    return {w for w in words if w.startswith("--")}


def _values(*tables: str) -> set[str]:
    return {v for t in tables for v in FLAGS[t].values() if isinstance(v, str)}


@pytest.mark.parametrize(
    ("engine", "topology", "tables"),
    [
        ("sglang", "disaggregated", ("sglang",)),
        ("dynamo", "disaggregated", ("dynamo", "trtllm")),
        ("sglang", "aggregated", ("sglang",)),
        ("vllm", "aggregated", ("vllm",)),
        ("trtllm", "aggregated", ("trtllm",)),
    ],
)
def test_every_flag_written_is_the_engines_own(engine: str, topology: str, tables: tuple[str, ...]) -> None:
    files = launch_files(_design(topology), engine)
    known = _values(*tables)
    for name, text in files.items():
        if name.endswith(".sh"):
            words = _command(text)
            assert _flags_of(words) <= known, (name, _flags_of(words) - known)
    assert json.loads(files["instances.json"])["trial"] == 7
    assert "What it assumed" in files["README.md"]


def test_sglang_gets_each_setting_of_the_design() -> None:
    f = FLAGS["sglang"]
    files = launch_files(_design(), "sglang")
    decode = _command(files["decode.sh"])
    assert decode[:3] == f["launch"].split()
    pairs = dict(zip(decode, decode[1:], strict=False))
    assert pairs[f["tp"]] == "16" and pairs[f["ep"]] == "16" and pairs[f["dp"]] == "16"
    assert f["dp_attention"] in decode and pairs[f["max_running"]] == "1000"
    assert pairs[f["kv_dtype"]] == f["kv_fp8"] and pairs[f["disagg_mode"]] == "decode"
    assert pairs[f["spec_algorithm"]] == f["spec_algorithm_mtp"] and pairs[f["spec_steps"]] == "2"
    assert pairs[f["spec_draft_tokens"]] == "3"
    assert f["chunk"] not in decode  # a decode pool keeps the engine's default chunk
    # one decode instance spans two 8-GPU hosts: rank and head address from the environment
    assert pairs[f["nnodes"]] == "2" and pairs[f["node_rank"]] == "$NODE_RANK"
    assert 'NODE_RANK="${NODE_RANK:?set NODE_RANK}"' in files["decode.sh"]
    words = _command(files["prefill.sh"])  # the prefill pool: TP8 attention, its chunk
    assert f["dp_attention"] not in words and words[words.index(f["chunk"]) + 1] == "8192"


def test_engines_that_cap_per_rank_get_the_instances_cap_split() -> None:
    design = _design("aggregated")  # 8 GPUs, data-parallel attention over 8 ranks, cap 256
    vllm = _command(launch_files(design, "vllm")["instance.sh"])
    v = FLAGS["vllm"]
    assert vllm[vllm.index(v["max_running"]) + 1] == "32" and vllm[vllm.index(v["dp"]) + 1] == "8"
    assert json.loads(vllm[vllm.index(v["spec_config"]) + 1]) == {
        "method": v["spec_method"],
        "num_speculative_tokens": 2,
    }
    files = launch_files(design, "trtllm")
    trt = _command(files["instance.sh"])
    t = FLAGS["trtllm"]
    assert trt[trt.index(t["max_running"]) + 1] == "32"
    yaml = files["instance.yaml"]
    assert f"{t['yaml_dp_attention']}: true" in yaml and f'{t["yaml_kv_dtype"]}: "{t["kv_fp8"]}"' in yaml
    assert (
        f'{t["yaml_spec_type"]}: "{t["yaml_spec_type_mtp"]}"' in yaml
        and f"{t['yaml_spec_layers']}: 2" in yaml
    )
    assert "set `MODEL` to a fp4 one" in files["README.md"]


def test_a_design_no_engine_launches_is_refused() -> None:
    from dse.errors import InputError

    with pytest.raises(InputError, match="needs sglang or dynamo"):
        launch_files(_design(), "vllm")
    with pytest.raises(InputError, match="must be one of"):
        launch_files(_design(), "tgi")


def test_dynamo_runs_workers_of_the_studys_engine() -> None:
    from dataclasses import replace

    for profile, worker in (("vllm", "vllm_worker"), ("sglang", "sglang_worker"), ("trt", "trtllm_worker")):
        files = launch_files(replace(_design(), profile=profile), "dynamo")
        assert _command(files["decode.sh"])[:3] == FLAGS["dynamo"][worker].split(), profile


def test_dynamo_writes_a_graph_of_its_workers() -> None:
    files = launch_files(_design(), "dynamo")
    graph = files["graph.yaml"]
    assert graph.startswith(
        f'apiVersion: "{FLAGS["dynamo"]["api_version"]}"\nkind: "{FLAGS["dynamo"]["kind"]}"'
    )
    assert 'subComponentType: "decode"' in graph and "replicas: 3" in graph and "nodeCount: 2" in graph
    assert _command(files["frontend.sh"])[:3] == FLAGS["dynamo"]["frontend"].split()


def test_deploy_writes_the_best_design_of_a_run(cli: Cli, tiny_cli_run: Result, tmp_path: Path) -> None:
    """On a study's run: the files land under RUN/NAME/deploy/, the scripts are executable bash,
    the instances are the best trial's pools, and a second deploy replaces the first whole."""
    assert tiny_cli_run.code == 0, tiny_cli_run.err
    proc = cli("deploy", TINY, "--out", tmp_path, "--engine", "dynamo")
    assert proc.code == 0, proc.err
    folder = tmp_path / "tiny-study" / "deploy"
    assert {Path(p).name for p in proc.out.split()} == {p.name for p in folder.iterdir()}
    from dse.study.api import Study

    res = Study.load(TINY).results(out=tmp_path)
    best = next(t for t in res.study.get_trials() if t.number == res.best_trial())
    instances = json.loads((folder / "instances.json").read_text())
    assert instances["trial"] == best.number
    want = [(p["role"], p["hardware"], p["instances"], p["gpus"]) for p in best.user_attrs["record"]["pools"]]
    assert [(p["role"], p["hardware"], p["instances"], p["gpus"]) for p in instances["pools"]] == want
    for script in folder.glob("*.sh"):
        assert script.stat().st_mode & 0o111
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    assert (folder / "graph.yaml").exists()
    proc = cli("deploy", TINY, "--out", tmp_path, "--engine", "sglang")
    assert proc.code == 0, proc.err
    assert not (folder / "graph.yaml").exists() and not (folder / "frontend.sh").exists()
    proc = cli("deploy", TINY, "--out", tmp_path, "--engine", "sglang", "--trial", "999")
    assert proc.code == 2 and "--trial = 999: must name a feasible trial of tiny-study" in proc.err
    assert (folder / "instances.json").exists()  # a refused deploy leaves the last one as it was


def test_a_pipelined_prefill_pool_launches_its_stages_on_sglang_only() -> None:
    """A 16-GPU prefill instance in two stages of TP8: SGLang's TP size is a stage's GPUs and
    --pp-size the stages, over two hosts; engines dse writes no pipeline launch for refuse it."""
    from dataclasses import replace

    from dse.errors import InputError

    design = _design()
    staged = PoolLaunch("prefill", "h100-sxm", 16, 8, 8, 2, 8, max_running=None, chunk_tokens=8192, pp=2)
    design = replace(design, pools=(staged, design.pools[1]), profile="sglang")
    f = FLAGS["sglang"]
    files = launch_files(design, "sglang")
    words = _command(files["prefill.sh"])
    pairs = dict(zip(words, words[1:], strict=False))
    assert pairs[f["tp"]] == "8" and pairs[f["pp"]] == "2" and pairs[f["nnodes"]] == "2"
    assert _flags_of(words) <= _values("sglang")
    assert "2 pipeline stages of 8 GPUs" in files["prefill.sh"]
    assert json.loads(files["instances.json"])["pools"][0]["pp"] == 2
    dynamo = _command(launch_files(design, "dynamo")["prefill.sh"])
    assert dynamo[dynamo.index(f["pp"]) + 1] == "2"
    with pytest.raises(InputError, match="no pipeline-parallel launch here: the prefill pool runs 2 stages"):
        launch_files(replace(design, profile="trt"), "dynamo")
