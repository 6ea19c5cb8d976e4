"""A model dse does not ship, sized from a user's catalog: its file, what dse derives from it, and
the shapes that cannot split its heads or experts, refused with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import Cli

from dse.catalog import Catalog, load_catalog
from dse.perf.params import load_params
from dse.perf.pool import build_pool
from dse.perf.stages import weight_bytes_per_gpu
from dse.placement.request import PlacementRequest
from dse.placement.shapes import Shapes
from dse.units import Precision
from dse.workload import Slo, Workload

# mistralai/Mixtral-8x22B-v0.1 config.json; Mistral's announcement: 141B total, 39B active. Eight
# routed experts and 8 KV heads: fewer experts than the GPUs of a node's data-parallel attention,
# and KV heads that 6 tensor-parallel ranks cannot share out.
MIXTRAL = """\
id = "mixtral-8x22b"
name = "Mixtral 8x22B"
status = "released"
sources = ["mistralai/Mixtral-8x22B-v0.1 config.json"]
layers = 56
hidden = 6144
vocab = 32000
max_context = 65536
native_weight_precision = "bf16"

[published]
params_total_b = 141.0
params_active_b = 39.0
kv_bytes_per_token_bf16 = 229376

[attention]
kind = "gqa"
q_heads = 48
kv_heads = 8
head_dim = 128

[moe]
routed_experts = 8
experts_per_token = 2
shared_experts = 0
expert_ffn_dim = 16384
"""


@pytest.fixture
def mixtral(tmp_path: Path) -> Path:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mixtral-8x22b.toml").write_text(MIXTRAL)
    return tmp_path


def test_a_user_model_derives_its_published_figures(mixtral: Path) -> None:
    """Parameters within 0.5% of the published 141B / 39B, KV bytes as config.json gives them
    (56 layers x 2 x 8 KV heads x 128 x 2 bytes), half of it in fp8."""
    m = load_catalog([mixtral], use_env=False).model("mixtral-8x22b")
    assert m.params_total() / 1e9 == pytest.approx(141.0, rel=0.005)
    assert m.params_active() / 1e9 == pytest.approx(39.0, rel=0.005)
    assert m.kv_bytes_per_token(Precision.BF16) == 56 * 2 * 8 * 128 * 2
    assert m.kv_bytes_per_token(Precision.FP8) == 56 * 2 * 8 * 128


def test_tp_that_splits_a_kv_head_is_refused(cli: Cli, mixtral: Path) -> None:
    """TP 6 divides Mixtral's 48 query heads, but not its 8 KV heads, nor they it: vLLM and SGLang
    refuse the model so. It had been predicted, each GPU holding 8/6 KV heads."""
    res = cli("--catalog-dir", mixtral, "predict", "--model", "mixtral-8x22b", "--hardware", "h200",
              "--tp", "6")  # fmt: skip
    assert res.code == 2 and res.err == (
        "dse: error: dse predict: --tp = 6: must divide mixtral-8x22b's 8 KV heads or be a multiple of "
        "them (each rank holds whole KV heads: 8 over 6 ranks splits one)\n"
    ), res.err
    # and in a shape the placement is given
    shape = cli("--catalog-dir", mixtral, "place", "--model", "mixtral-8x22b", "--hardware", "h200",
                "--rate", "1", "--ttft", "2", "--tpot", "0.05", "--shapes", "6gpu-tp6-ep6")  # fmt: skip
    assert shape.code == 2 and shape.err.count("\n") == 1, shape.err
    assert "attention TP 6 must divide mixtral-8x22b's 8 KV heads or be a multiple of them" in shape.err
    # TP 8 and 16 share them out whole, 16 as two copies: one KV head a GPU either way
    for tp in ("8", "16"):
        ok = cli("--catalog-dir", mixtral, "predict", "--model", "mixtral-8x22b", "--hardware", "gb200",
                 "--tp", tp, "--ep", "8")  # fmt: skip
        assert ok.code == 0, ok.err
    cat = load_catalog([mixtral], use_env=False)
    fp8 = [Precision.FP8] * 2
    pool = build_pool(cat.model("mixtral-8x22b"), [cat.hardware("gb200")] * 2, gpus=[8, 16], attn_tp=[8, 16],
                      ep=[8, 8], weight_precision=fp8, kv_precision=fp8)  # fmt: skip
    assert pool.kv_shard.tolist() == [8, 8]


def test_more_expert_groups_than_experts_are_refused(cli: Cli, mixtral: Path) -> None:
    """Data-parallel attention over 16 GPUs puts an expert group on each by default: 16 groups of
    Mixtral's 8 experts, which no engine runs. It had been predicted; `dse place` refused the same
    shape. --ep 8 splits each expert over two GPUs and runs."""
    base = ("--catalog-dir", mixtral, "predict", "--model", "mixtral-8x22b", "--hardware", "gb200",
            "--tp", "16", "--dp-attention")  # fmt: skip
    res = cli(*base)
    assert res.code == 2 and res.err == (
        "dse: error: dse predict: --ep = 16: must be at most mixtral-8x22b's 8 routed experts "
        "(--ep 0, the default: every GPU of the instance; fewer split each expert)\n"
    ), res.err
    assert cli(*base, "--ep", "8").code == 0


def test_the_fullest_gpu_holds_the_experts_that_do_not_divide_evenly(catalog: Catalog) -> None:
    """GLM-4.6's 160 routed experts over 64 expert groups: 32 groups hold 3 (vLLM's expert map; an
    expert load balancer fills the others to 3 with redundant copies), and those GPUs' memory is
    the one that runs out; 2.5 a GPU had been counted. Over 32 groups, 5 each, as before."""
    glm = catalog.model("glm-4.6")
    assert glm.moe is not None
    per_expert = glm.param_groups()["routed_experts"] / glm.moe.routed_experts  # fp8: a byte each
    gb200 = catalog.hardware("gb200")
    pool = build_pool(glm, [gb200, gb200], gpus=[64, 32], attn_tp=[1, 1], ep=[64, 32],
                      weight_precision=[Precision.FP8] * 2, kv_precision=[Precision.FP8] * 2)  # fmt: skip
    others = pool.attn_weight_bytes + pool.dense_weight_bytes / pool.gpus
    np.testing.assert_allclose(weight_bytes_per_gpu(pool) - others, [3 * per_expert, 5 * per_expert])


def test_a_model_one_gpu_holds_is_placed_on_instances_that_small(cli: Cli) -> None:
    """gpt-oss-120b (about 61 GB at its MXFP4 experts) fits one H200. The generated shapes had
    started at 4 GPUs, and 120 requests/s of 4,000-token prompts bought 24 H200s ($33.84/hour);
    with 1- and 2-GPU instances where they hold the weights, 16 ($22.56/hour). A model they cannot
    hold (DeepSeek-V3 at fp8) gets none."""
    res = cli("place", "--model", "gpt-oss-120b", "--hardware", "h200", "--rate", "120", "--isl", "4000",
              "--osl", "1000", "--ttft", "2", "--tpot", "0.05", "--topology", "aggregated",
              "--no-shadow-prices", "--json")  # fmt: skip
    assert res.code == 0, res.err
    best = json.loads(res.out)["best"]
    assert (best["gpus"], best["usd_per_hour"]) == (16, pytest.approx(22.56))
    # small instances carry it (which of the equally priced mixes fills the second node is HiGHS's
    # choice: after the refit of 3ee08fc, 2-GPU instances beside one 8-GPU one)
    assert any(int(p["unit"]["name"].split("/")[2].split("gpu")[0]) < 4 for p in best["pools"]), best["pools"]
    # the shapes tried: 1 and 2 GPUs for gpt-oss; DeepSeek-V3 at fp8 (671 GB) from 4 GPUs, as before
    catalog = load_catalog(use_env=False)
    h200 = [catalog.hardware("h200")]
    work = Workload(requests_per_s=120.0, input_tokens=4000.0, output_tokens=1000.0)
    smallest = {}
    for model in ("gpt-oss-120b", "deepseek-v3"):
        req = PlacementRequest(model=model, hardware=("h200-sxm",), workload=work, slo=Slo(2.0, 0.05))
        smallest[model] = min(q.gpus for q in Shapes(req, catalog.model(model), h200, load_params()).par)
    assert smallest == {"gpt-oss-120b": 1, "deepseek-v3": 4}
