"""How an attention-FFN deployment prices its communication (dse.perf.afd): which terms each pool
prices, and totals against a hand computation from the model's sizes and the catalog's links.

As MegaScale-Infer (arXiv 2504.02263, M2N) and Step-3 (arXiv 2507.19427, StepMesh) route tokens,
the attention pool sends each token to the expert nodes holding its experts and they send back: the
expert pool runs no all-to-all over its NICs of its own, and attention's tensor-parallel all-reduce is once a
layer (after the output projection; the FFN's reduction is the combine back). The dense FFN layers
run on the expert pool (vLLM's AFD DeepSeek adaptation), so their hidden states cross too.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dse.catalog import Catalog
from dse.perf.afd import SIDE_SHARE, afd_bytes_per_token, attention_side, ffn_side
from dse.perf.params import load_params
from dse.perf.pool import build_pool
from dse.perf.serving import Deployment, _decode_step
from dse.perf.stages import forward_cost, pool_terms
from dse.units import GB, Precision

MODEL, HW = "deepseek-r1", "h200"


def _pool(catalog: Catalog, gpus: float, attn_tp: float, ep: float, hw: str = HW, engines=None):  # type: ignore[no-untyped-def]
    return build_pool(
        catalog.model(MODEL), [catalog.hardware(hw)], gpus=[gpus], attn_tp=[attn_tp], ep=[ep],
        weight_precision=[Precision.FP8], kv_precision=[Precision.BF16], engines=engines,
    )  # fmt: skip


def _decode(pool, tokens: float):  # type: ignore[no-untyped-def]
    t = np.array([tokens])
    return forward_cost(
        pool, load_params(), tokens=t, sequences=t, context=t * 0.0, prefill=False, speed=t * 0 + 1
    )


def test_the_expert_pool_runs_no_all_to_all_over_its_nics(catalog: Catalog) -> None:
    """A 16-GPU expert instance at EP 16 spans two 8-GPU H200 nodes: as a whole-model instance
    with DP attention it dispatches and combines across them over the NICs (an RDMA latency each,
    2 x MoE layers of them), but as an expert pool the attention pool's transfer brings each token
    to every node holding its experts: the pool only forwards its copies over NVLink, the k routed
    experts' copies to the other GPUs of the node at NVLink bandwidth and latency."""
    p = load_params()
    m, h = catalog.model(MODEL), catalog.hardware(HW)
    assert m.moe is not None
    whole = _pool(catalog, 16, 1, 16)
    assert pool_terms(whole, p).dispatch[0]  # the whole-model instance does dispatch
    assert pool_terms(whole, p).latency_s[0] == pytest.approx(2 * m.moe_layers * p.nic_a2a_latency_us * 1e-6)
    ffn = ffn_side(whole)
    t = pool_terms(ffn, p)
    node = h.scale_up.domain_gpus
    wait = 2 * m.moe_layers * p.collective_latency_us * (node - 1) * 1e-6  # NVLink, once per peer of the node
    assert t.latency_s[0] == pytest.approx(wait)
    tokens = 2048.0
    link = h.scale_up.gb_per_s_per_dir * GB * p.link_eff
    fwd = m.moe_layers * tokens / 16 * m.hidden * 3.0 * m.moe.experts_per_token * (1 - 1 / 16) / link
    assert _decode(ffn, tokens).comm_s[0] == pytest.approx(fwd * (1.0 - p.comm_overlap) + wait)


def test_tensor_parallel_attention_pool_all_reduces_once_a_layer(catalog: Catalog) -> None:
    """TP-8 attention on one H200 node: the attention pool all-reduces after each layer's output
    projection only (a whole-model instance also after each FFN): its communication is one ring
    all-reduce of the hidden state a layer over NVLink, hand-computed from the catalog's link."""
    p = load_params()
    m, h = catalog.model(MODEL), catalog.hardware(HW)
    tokens, tp = 256.0, 8.0
    att = attention_side(_pool(catalog, 8, tp, 8))
    link = h.scale_up.gb_per_s_per_dir * GB * p.link_eff  # TP 8 inside the 8-GPU NVLink domain
    ring = 2.0 * (tp - 1) / tp * tokens * m.hidden * 2.0  # bf16 hidden states, one ring all-reduce
    once = m.layers * ring / link * (1.0 - p.comm_overlap) + m.layers * p.collective_latency_us * 1e-6
    assert pool_terms(att, p).latency_s[0] == pytest.approx(m.layers * p.collective_latency_us * 1e-6)
    assert _decode(att, tokens).comm_s[0] == pytest.approx(once)
    whole = _decode(_pool(catalog, 8, tp, 8), tokens).comm_s[0]
    assert whole == pytest.approx(2.0 * once)  # the whole model's: after attention and after the FFN
    # data-parallel attention all-reduces nothing
    assert _decode(attention_side(_pool(catalog, 8, 1, 8)), tokens).comm_s[0] == 0.0


def test_transfer_fans_out_to_the_expert_nodes_in_every_ffn_layer(catalog: Catalog) -> None:
    """A token's hidden state crosses the NICs to each of the two 8-GPU H200 nodes of a 16-GPU
    expert instance its 8 routed experts land on (2 (1 - (1/2)^8) of them) in each of the 58 MoE
    layers, and to both in each of the 3 dense FFN layers the expert pool also runs, fp8 out and
    bf16 back, whatever the instance's EP; an instance inside one node takes one copy a layer."""
    m = catalog.model(MODEL)
    assert m.moe is not None
    k, dense = m.moe.experts_per_token, m.layers - m.moe_layers
    assert dense > 0  # DeepSeek's first dense layers: the case that was left out
    per_copy = m.hidden * (1.0 + 2.0)
    nodes = 16 / catalog.hardware(HW).scale_up.domain_gpus
    hit = nodes * (1.0 - (1.0 - 1.0 / nodes) ** k)
    want = (m.moe_layers * hit + dense * nodes) * per_copy
    for ep in (16, 8):
        assert afd_bytes_per_token(ffn_side(_pool(catalog, 16, 1, ep)))[0] == pytest.approx(want)
    assert afd_bytes_per_token(ffn_side(_pool(catalog, 8, 1, 8)))[0] == pytest.approx(m.layers * per_copy)


def test_afd_step_transfer_is_the_fanned_out_bytes_over_the_nics_plus_the_rdma_waits(
    catalog: Catalog,
) -> None:
    """Two 8-GPU DP-attention instances, one 16-GPU EP-16 expert instance, 128 sequences each:
    the transfer is the slower of the attention instance's NICs sending its tokens' fanned-out
    hidden states and the expert instance's receiving both instances', plus a dispatch and a
    combine's RDMA wait in each of the 61 layers; the attention pool (DP) communicates nothing."""
    from dse.perf.afd import afd_transfer_latency_s

    p = load_params()
    m, h = catalog.model(MODEL), catalog.hardware(HW)
    att, ffn = attention_side(_pool(catalog, 8, 1, 8)), ffn_side(_pool(catalog, 16, 1, 16))
    one = np.ones(1)
    d = Deployment(
        prefill=None, decode=att, prefill_instances=one, decode_instances=2 * one, isl=1024 * one,
        osl=1024 * one, speed=one, draft_tokens=0 * one, accept_tokens=one, ffn=ffn, ffn_instances=one,
    )  # fmt: skip
    b = 128.0
    cost, _ = _decode_step(d, p, b * one)
    assert cost.afd is not None
    nic = h.scale_out.nic_gb_per_s_per_gpu * GB * p.nic_eff
    assert m.moe is not None
    nodes = 16.0 / h.scale_up.domain_gpus
    fan = nodes * (1.0 - (1.0 - 1.0 / nodes) ** m.moe.experts_per_token)
    sent = b * (m.moe_layers * fan + (m.layers - m.moe_layers) * nodes) * m.hidden * 3.0
    bw = max(sent / (nic * 8.0), 2.0 * sent / (nic * 16.0))  # the expert instance receives both
    wait = 2.0 * m.layers * p.nic_a2a_latency_us * 1e-6
    assert afd_transfer_latency_s(ffn, p)[0] == pytest.approx(wait)
    assert cost.afd.transfer_s[0] == pytest.approx((bw + wait) / SIDE_SHARE)
    assert cost.afd.attention.comm_s[0] == 0.0


def _unit_step(catalog: Catalog, hw: str, attention: int, p, b: float = 128.0, att_gpus: int = 8):  # type: ignore[no-untyped-def]
    """``attention`` DP-attention instances of ``att_gpus`` GPUs and one 16-GPU EP-16 expert
    instance of DeepSeek-R1 on ``hw``, ``b`` sequences each: the decode step (its cost, with the
    split) and the two pools."""
    engines = p.kernel_engines(["sglang"])
    att = attention_side(_pool(catalog, att_gpus, 1, att_gpus, hw, engines))
    ffn = ffn_side(_pool(catalog, 16, 1, 16, hw, engines))
    one = np.ones(1)
    d = Deployment(
        prefill=None, decode=att, prefill_instances=one, decode_instances=attention * one, isl=1024 * one,
        osl=1024 * one, speed=one, draft_tokens=0 * one, accept_tokens=one, ffn=ffn, ffn_instances=one,
    )  # fmt: skip
    cost, _ = _decode_step(d, p, b * one)
    assert cost.afd is not None
    return cost, att, ffn


@pytest.mark.parametrize("tier", ["datasheet", "measured"])
def test_a_unit_inside_one_nvl72_rack_sends_its_hidden_states_over_nvlink(
    catalog: Catalog, tier: str
) -> None:
    """Two 8-GPU attention instances and the 16-GPU expert instance they feed make a 32-GPU unit,
    inside one 72-GPU GB200 NVL72 rack: the hidden states cross NVLink (900 GB/s a direction at
    the fitted ``link_eff``) and each crossing waits as an NVLink all-to-all over the unit's 32
    GPUs does (the collective latency once per peer), not on RDMA. The same rule in both kernel
    tiers (the transfer is no measured kernel). DeepSeek-R1 at 128 sequences per attention
    instance, datasheet tier: the transfer 45.9 -> 6.2 ms a step, the step (TPOT) 45.9 -> 34.7 ms,
    now paced by the expert pool instead of the transfer."""
    from dse.perf.stages import nvlink_a2a_latency_us

    p = replace(load_params(), kernels=tier)
    m, h = catalog.model(MODEL), catalog.hardware("gb200")
    assert h.scale_up.domain_gpus == 72
    cost, _, ffn = _unit_step(catalog, "gb200", 2, p)
    assert cost.afd is not None and bool(cost.afd.in_domain[0])
    sent = 128.0 * afd_bytes_per_token(ffn)[0]  # one copy a layer: the expert instance is in one rack
    assert afd_bytes_per_token(ffn)[0] == pytest.approx(m.layers * m.hidden * 3.0)
    link = h.scale_up.gb_per_s_per_dir * GB * p.link_eff
    bw = max(sent / (link * 8.0), 2.0 * sent / (link * 16.0))
    wait = 2.0 * m.layers * float(nvlink_a2a_latency_us(32.0, p)) * 1e-6
    assert cost.afd.transfer_s[0] == pytest.approx((bw + wait) / SIDE_SHARE)
    nic = 2.0 * m.layers * p.nic_a2a_latency_us * 1e-6
    assert cost.afd.transfer_s[0] < nic / SIDE_SHARE / 3  # under a third of the RDMA waits alone
    if tier == "datasheet":
        assert cost.afd.transfer_s[0] * 1e3 == pytest.approx(6.22, abs=0.01)
        assert cost.total_s[0] * 1e3 == pytest.approx(34.74, abs=0.01)
        assert str(cost.afd.paced_by()[0]) == "expert pool"


@pytest.mark.parametrize(("hw", "att_gpus"), [("h200", 8), ("gb200", 16)])
def test_a_unit_that_spans_domains_keeps_the_nics_bit_for_bit(
    catalog: Catalog, hw: str, att_gpus: int
) -> None:
    """A unit wider than its scale-up domain keeps the NICs and the RDMA waits, computed as before,
    bit for bit: on 8-GPU H200 nodes two 8-GPU attention instances and a 16-GPU expert instance
    (32 GPUs over four nodes); on GB200 NVL72 racks four 16-GPU attention instances and a 16-GPU
    expert instance (80 GPUs, over the 72 of a rack)."""
    p = load_params()
    m = catalog.model(MODEL)
    attention = 32 // att_gpus + (2 if hw == "gb200" else 0)  # 2 on H200, 4 on GB200
    cost, att, ffn = _unit_step(catalog, hw, attention, p, att_gpus=att_gpus)
    assert cost.afd is not None and not bool(cost.afd.in_domain[0])
    one = np.ones(1)
    sent = afd_bytes_per_token(ffn) * (128.0 * one)
    # the operations of the transfer as they were priced before units in one domain were told apart
    xfer = np.maximum(
        sent / (att.nic_bytes_per_s * p.nic_eff * att.gpus),
        sent * (attention * one) / one / (ffn.nic_bytes_per_s * p.nic_eff * ffn.gpus),
    ) + np.full_like(ffn.gpus, 2.0 * m.layers * p.nic_a2a_latency_us * 1e-6)
    assert cost.afd.transfer_s[0] == (xfer * (1.0 / SIDE_SHARE))[0]  # bit for bit


def test_attention_and_experts_on_different_hardware_never_share_a_domain(catalog: Catalog) -> None:
    """The rule needs both pools on one hardware: an attention pool on GB200 NVL72 racks and an
    expert pool on other racks of another kind share no NVLink domain, however few their GPUs."""
    from dse.perf.afd import afd_in_domain, afd_unit_gpus

    att = attention_side(_pool(catalog, 8, 1, 8, "gb200"))
    ffn = ffn_side(_pool(catalog, 16, 1, 16, "gb200"))
    assert afd_unit_gpus(att, ffn, 2.0)[0] == 32.0
    assert afd_unit_gpus(att, ffn, 0.5)[0] == 8.0 + 2 * 16.0  # an attention instance over two expert ones
    assert afd_unit_gpus(att, ffn, 2.5)[0] == 3 * 8.0 + 16.0  # dealt whole: the most any gets
    assert bool(afd_in_domain(att, ffn, 2.0, True)[0]) and not bool(afd_in_domain(att, ffn, 2.0, False)[0])
    assert not bool(afd_in_domain(att, ffn, 8.0, True)[0])  # 80 GPUs
