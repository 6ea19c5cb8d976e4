"""Attention-FFN disaggregated decode: the attention half and the expert half of one decode step.

In an attention-FFN disaggregated deployment (MegaScale-Infer, Step-3) one pool runs attention and
holds the KV cache; another runs the routed and shared experts and dense FFNs. Every MoE layer sends
each token's hidden state from attention to experts (fp8 dispatch) and back (bf16 combine). Both
halves reuse :func:`~dse.perf.stages.forward_cost` on a pool that carries only their share of the
model, so the roofline, overheads and calibration are those of the whole-model path.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from dse.perf.kernels import side_curves
from dse.perf.pool import Array, Pool

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


def afd_bytes_per_token(pool: Pool) -> Array:
    """Bytes one decoded token moves between the attention and FFN pools per step, both ways:
    fp8 dispatch plus bf16 combine of the hidden state in every MoE layer."""
    m = pool.model
    return np.full_like(pool.gpus, m.moe_layers * m.hidden * (pool.act_bytes + 2.0))
