"""Attention-FFN disaggregated decode: the attention half and the expert half of one decode step.

In an attention-FFN disaggregated deployment (MegaScale-Infer, arXiv 2504.02263; Step-3, arXiv
2507.19427) one pool runs attention and holds the KV cache; another runs the routed and shared
experts and dense FFNs. Every layer sends each token's hidden state from attention to the FFNs
(fp8 dispatch) and back (bf16 combine). Both halves reuse
:func:`~dse.perf.stages.forward_cost` on a pool that carries only their share of the model, so the
roofline, overheads and calibration are those of the whole-model path.

Communication, as those systems route it:

- The attention pool sends each token straight to the expert pool's nodes that hold its routed
  experts, and they send the outputs back (MegaScale-Infer's M2N library between M attention and
  N expert GPUs; Step-3's StepMesh): the transfer fans out to those scale-up domains
  (:func:`afd_fan_out`), and the expert pool runs no all-to-all over its NICs of its own, which
  had priced a second dispatch and combine, with their RDMA latency, on top of the transfer; it
  only forwards each token over NVLink to its experts' GPUs in the domain
  (``ModelTerms.a2a_over_nic``).
- Attention's tensor-parallel all-reduce follows its output projection, once a layer: the FFN's
  reduction is the combine back from the expert pool (``ModelTerms.tp_allreduces_per_layer``).
- The dense FFN layers (DeepSeek's first three) run on the expert pool with the shared experts,
  as vLLM's attention-FFN DeepSeek adaptation builds them (vllm-project/vllm PR #29772: every
  layer's MLP on the FFN server, the attention output sent every layer), so their hidden states
  cross too: to every GPU of the expert instance, which splits them.
- Each crossing waits on RDMA completions as an expert-parallel all-to-all across scale-up
  domains does: :attr:`~dse.perf.params.PerfParams.nic_a2a_latency_us` per direction and layer
  (:func:`afd_transfer_latency_s`), paid by the transfer, which runs beside both pools.
- Where an attention-FFN *unit*, an expert instance and the attention instances that feed it
  (:func:`afd_unit_gpus`), fits in one scale-up domain of one hardware (a GB200 NVL72 rack holds
  72 GPUs, an H200 node 8), the transfer stays on NVLink, as NVIDIA's rack-scale deployments and
  MegaScale-Infer's M2N inside a node run it (:func:`afd_in_domain`): the same bytes over the
  NVLink ports at the fitted ``link_eff``, and each crossing waits as an NVLink all-to-all over
  the unit's GPUs does (:func:`~dse.perf.stages.nvlink_a2a_latency_us`), not on RDMA. A unit
  that does not fit keeps the NICs.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from dse.perf.kernels import side_curves
from dse.perf.params import PerfParams
from dse.perf.pool import Array, Pool
from dse.perf.stages import nvlink_a2a_latency_us

DOMAIN_UNIT = "/nvlink"
"""The name's part that marks an attention or FFN unit the placement keeps in one scale-up domain
with its partner (``dse.placement.afd_units``' domain units): its hidden states cross NVLink."""


def domain_unit(name: str) -> bool:
    """Whether a unit's name marks it as kept in one scale-up domain (:data:`DOMAIN_UNIT`)."""
    return DOMAIN_UNIT + "/" in name + "/"


SIDE_SHARE = 0.5
"""Share of a decode step each side may take: two micro-batches in ping-pong, each side runs one
while the other runs the other, so each side's whole step must fit in half of it."""


def attention_side(pool: Pool) -> Pool:
    """The pool as it runs attention only: attention weights and the KV cache, no experts."""
    m = replace(
        pool.model,
        params_dense_active=pool.model.params_attention,
        params_routed_total=0.0,
        experts_per_token=0.0,
        moe_layers=0.0,
        tp_allreduces_per_layer=1.0,  # after the output projection: the FFN's is the combine
    )
    zero = np.zeros_like(pool.gpus)
    return replace(
        pool,
        model=m,
        dense_weight_bytes=zero,
        expert_weight_bytes=zero,
        ep=np.ones_like(pool.gpus),
        kernels=side_curves(pool.kernels, "attention"),
    )


def ffn_side(pool: Pool) -> Pool:
    """The pool as it runs the FFN half only: dense FFNs, shared and routed experts, no KV."""
    m = replace(
        pool.model,
        params_dense_active=pool.model.params_dense_active - pool.model.params_attention,
        params_attention=0.0,
        full_layers=0.0,
        q_heads=0.0,
        index_bytes_per_token=0.0,
        index_dim=0.0,
        a2a_over_nic=False,  # the transfer brings each token to every domain its experts are in
    )
    zero = np.zeros_like(pool.gpus)
    # no attention, so no tensor-parallel all-reduce of attention outputs
    return replace(
        pool,
        model=m,
        attn_weight_bytes=zero,
        kv_bytes_per_token=zero,
        state_bytes=zero,
        attn_tp=np.ones_like(pool.gpus),
        kernels=side_curves(pool.kernels, "ffn"),
    )


def afd_fan_out(pool: Pool) -> tuple[Array, Array]:
    """Scale-up domains of an expert instance of ``pool``'s shape that one token's hidden state
    crosses the NICs to (and back from) in a MoE layer, and in a dense FFN layer. A MoE layer: the
    distinct domains among the instance's ``D`` its ``k`` routed experts land on,
    ``D (1 - (1 - 1/D)^k)`` under uniform routing; a dense FFN layer, which the instance splits
    over all its GPUs: every domain. Each domain takes one copy and forwards it over NVLink to the
    GPUs holding the token's experts there (the expert pool's pass prices that,
    ``ModelTerms.a2a_over_nic``), as DeepEP's internode kernels send one RDMA copy per node and
    MegaScale-Infer places one expert per node; an instance inside one domain takes one copy."""
    m = pool.model
    domains = np.maximum(np.maximum(pool.gpus, pool.ep) / pool.domain_gpus, 1.0)
    hit = domains * (1.0 - np.power(1.0 - 1.0 / domains, m.experts_per_token))
    return hit, domains


def afd_bytes_per_token(pool: Pool) -> Array:
    """Bytes one decoded token moves over the NICs between the attention pool and an expert
    instance of ``pool``'s shape per step, both ways: fp8 dispatch plus bf16 combine of the hidden
    state, to and from each scale-up domain it fans out to (:func:`afd_fan_out`), in every layer
    whose FFN runs there (the MoE layers and the dense FFN layers)."""
    m = pool.model
    moe, dense = afd_fan_out(pool)
    copies = m.moe_layers * moe + (m.layers - m.moe_layers) * dense
    return copies * m.hidden * (pool.act_bytes + 2.0)


def afd_transfer_latency_s(
    pool: Pool, p: PerfParams, in_domain: Array | bool = False, unit_gpus: Array | float = 0.0
) -> Array:
    """Fixed seconds of one step's transfers to an expert instance of ``pool``'s shape: a dispatch
    and a combine in every FFN layer, each waiting on RDMA completions as a cross-domain
    all-to-all does (``nic_a2a_latency_us``); where the unit is ``in_domain``, as an NVLink
    all-to-all over its ``unit_gpus`` does (the NVLink collective latency once per peer)."""
    nic = np.full_like(pool.gpus, 2.0 * pool.model.layers * p.nic_a2a_latency_us * 1e-6)
    if not np.any(in_domain):
        return nic
    nvlink = 2.0 * pool.model.layers * nvlink_a2a_latency_us(np.asarray(unit_gpus, dtype=float), p) * 1e-6
    return np.where(in_domain, nvlink, nic)


def afd_unit_gpus(attention: Pool, experts: Pool, fan_in: Array | float) -> Array:
    """GPUs of one attention-FFN unit: the attention instances of ``attention`` and the expert
    instances of ``experts`` that send to one another, with ``fan_in`` attention instances per
    expert instance. At ``fan_in`` 1 or more, an expert instance and the attention instances that
    feed it; below 1, an attention instance and the expert instances its tokens are shared over.
    A fraction is rounded up: the most any instance gets, instances being dealt whole."""
    f = np.asarray(fan_in, dtype=float)
    per_expert = np.ceil(f - 1e-9)
    per_attention = np.ceil(1.0 / np.maximum(f, 1e-300) - 1e-9)
    return per_expert * attention.gpus + per_attention * experts.gpus


def afd_in_domain(
    attention: Pool, experts: Pool, fan_in: Array | float, same_hardware: Array | bool
) -> Array:
    """Where an attention-FFN unit (:func:`afd_unit_gpus`) fits in one scale-up domain of its
    hardware, so that its hidden states cross NVLink and never the NICs: both pools on the same
    hardware (``same_hardware``) and the unit's GPUs within the domain (72 on a GB200 or GB300
    NVL72 rack, 8 on an H200 or B200 node). Several such units each keep to a domain of their own
    (or share one whole): none straddles two."""
    fits = afd_unit_gpus(attention, experts, fan_in) <= experts.domain_gpus
    return np.asarray(same_hardware, dtype=bool) & fits


def afd_transfer_s(
    attention: Pool,
    experts: Pool,
    p: PerfParams,
    sent: Array,
    received: Array,
    fan_in: Array | float,
    in_domain: Array | bool,
) -> Array:
    """Seconds of one step's hidden-state transfers between an attention instance that sends
    ``sent`` bytes and the expert instance that receives ``received`` (``fan_in`` attention
    instances' worth): the slower of the two sides' links, plus the fixed waits
    (:func:`afd_transfer_latency_s`). Over the NICs (at ``nic_eff``) or, where the unit is
    ``in_domain`` (:func:`afd_in_domain`), over the NVLink ports (at ``link_eff``)."""
    if np.any(in_domain):
        att_bw = np.where(
            in_domain, attention.scaleup_bytes_per_s * p.link_eff, attention.nic_bytes_per_s * p.nic_eff
        )
        exp_bw = np.where(
            in_domain, experts.scaleup_bytes_per_s * p.link_eff, experts.nic_bytes_per_s * p.nic_eff
        )
    else:  # the NICs, as every unit had been priced (the same operations, bit for bit)
        att_bw, exp_bw = attention.nic_bytes_per_s * p.nic_eff, experts.nic_bytes_per_s * p.nic_eff
    wait = afd_transfer_latency_s(experts, p, in_domain, afd_unit_gpus(attention, experts, fan_in))
    return np.maximum(sent / (att_bw * attention.gpus), received / (exp_bw * experts.gpus)) + wait
