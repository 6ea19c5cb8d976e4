"""The model catalog entry: one architecture, from its config.json.

Parameter counts and KV sizes are derived here from the architecture, so the catalog stores the
published figures only to check the derivation against: within :data:`PUBLISHED_RTOL`, or the
entry is refused where it is loaded (a layer count or a width typed wrong shows there).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from dse.typed_data import lower_id, non_empty, non_negative, positive, rule
from dse.units import Precision

PUBLISHED_RTOL = 0.03
"""How far a derived parameter count or KV size may sit from the published one (the shipped
models: within 1.3%)."""


class AttentionKind(enum.Enum):
    """The kind of the full (KV-bearing) attention layers."""

    MLA = "mla"
    GQA = "gqa"


class EmbeddingCount(enum.Enum):
    """Which embedding matrices the publisher counts in the active-parameter figure."""

    BOTH = "both"
    OUTPUT = "output"
    NONE = "none"


@dataclass(frozen=True)
class Mla:
    """Multi-head latent attention: the cache holds one latent plus a rope key per token."""

    kv_lora_rank: int = field(metadata=rule(positive))
    qk_rope_dim: int = field(metadata=rule(positive))
    qk_nope_dim: int = field(metadata=rule(positive))
    v_head_dim: int = field(metadata=rule(positive))
    q_lora_rank: int | None = field(default=None, metadata=rule(positive))
    # bytes a token's latent takes per layer in an fp8 cache whose layout carries its own scales
    # (FlashMLA's for sparse attention: 512 fp8 values, 4 fp32 scales, the 64 rope values in
    # bf16: 656); None: one byte per element, as the dense MLA engines store it
    fp8_cache_bytes_per_token_per_layer: int | None = field(default=None, metadata=rule(positive))


@dataclass(frozen=True)
class SparseIndexer:
    """DeepSeek sparse attention: a light indexer picks the top-k tokens each query reads."""

    heads: int = field(metadata=rule(positive))
    head_dim: int = field(metadata=rule(positive))
    top_k_tokens: int = field(metadata=rule(positive))
    # the indexer's key cache, kept in fp8 with a scale whatever the KV's precision (128 + 4)
    cache_bytes_per_token_per_layer: int = field(metadata=rule(positive))


@dataclass(frozen=True)
class LinearAttention:
    """Linear-attention layers (Kimi Delta Attention): a fixed recurrent state per request."""

    layers: int = field(metadata=rule(positive))
    heads: int = field(metadata=rule(positive))
    head_dim: int = field(metadata=rule(positive))
    state_bytes_per_element: float = field(default=4.0, metadata=rule(positive))


@dataclass(frozen=True)
class SlidingWindow:
    """Layers that attend only to the last ``window_tokens`` tokens."""

    layers: int = field(metadata=rule(positive))
    window_tokens: int = field(metadata=rule(positive))


@dataclass(frozen=True)
class Attention:
    kind: AttentionKind
    q_heads: int = field(metadata=rule(positive))
    kv_heads: int | None = field(default=None, metadata=rule(positive))
    head_dim: int | None = field(default=None, metadata=rule(positive))
    mla: Mla | None = None
    sparse_indexer: SparseIndexer | None = None
    linear: LinearAttention | None = None
    sliding_window: SlidingWindow | None = None

    def problem(self) -> tuple[str, str, object] | None:
        if self.kind is AttentionKind.MLA and self.mla is None:
            return ("mla", "is required when kind = 'mla'", ...)
        # a table of the other kind is read by nothing: it had loaded, and moved no figure
        if self.kind is AttentionKind.GQA and self.mla is not None:
            return ("mla", "is read only when kind = 'mla' (this attention is gqa)", ...)
        if self.kind is AttentionKind.MLA and self.kv_heads is not None:
            rule = "is read only when kind = 'gqa' (an MLA layer caches kv_lora_rank + qk_rope_dim a token)"
            return ("kv_heads", rule, self.kv_heads)
        if self.kind is AttentionKind.GQA and (self.kv_heads is None or self.head_dim is None):
            missing = "kv_heads" if self.kv_heads is None else "head_dim"
            return (missing, "is required when kind = 'gqa'", ...)
        if self.kv_heads is not None and self.q_heads % self.kv_heads:  # query heads grouped per KV head
            rule = f"must divide q_heads ({self.q_heads}): each KV head serves a group of them"
            return ("kv_heads", rule, self.kv_heads)
        return None


@dataclass(frozen=True)
class Moe:
    routed_experts: int = field(metadata=rule(positive))
    experts_per_token: int = field(metadata=rule(positive))
    shared_experts: int = field(metadata=rule(non_negative))
    expert_ffn_dim: int = field(metadata=rule(positive))
    expert_input_dim: int | None = field(default=None, metadata=rule(positive))
    """Width the routed experts run in when it differs from ``hidden`` (a latent)."""

    def problem(self) -> tuple[str, str, object] | None:
        if self.experts_per_token > self.routed_experts:
            return (
                "experts_per_token",
                f"must be <= routed_experts ({self.routed_experts})",
                self.experts_per_token,
            )
        return None


@dataclass(frozen=True)
class Published:
    """Figures as published, kept to check the derivations against."""

    params_total_b: float = field(metadata=rule(positive))
    params_active_b: float = field(metadata=rule(positive))
    kv_bytes_per_token_bf16: float = field(metadata=rule(positive))
    active_counts_embeddings: EmbeddingCount = EmbeddingCount.BOTH


@dataclass(frozen=True)
class Model:
    """One model architecture. Counts are element counts; bytes need a precision."""

    id: str = field(metadata=rule(lower_id))
    name: str = field(metadata=rule(non_empty))
    status: str = field(metadata=rule(non_empty))
    layers: int = field(metadata=rule(positive))
    hidden: int = field(metadata=rule(positive))
    vocab: int = field(metadata=rule(positive))
    max_context: int = field(metadata=rule(positive))
    attention: Attention
    native_weight_precision: Precision
    published: Published
    sources: tuple[str, ...] = field(metadata=rule(non_empty))
    expert_weight_precision: Precision | None = None
    dense_layers: int = field(default=0, metadata=rule(non_negative))
    dense_ffn_dim: int | None = field(default=None, metadata=rule(positive))
    moe: Moe | None = None
    mtp_layers: int = field(default=0, metadata=rule(non_negative))
    tied_embeddings: bool = False
    aliases: tuple[str, ...] = ()
    # the published checkpoint (a Hugging Face repository id) `dse deploy` launches; empty if none
    checkpoint: str = ""
    notes: str = ""

    def problem(self) -> tuple[str, str, object] | None:
        if self.dense_layers > self.layers:
            return ("dense_layers", f"must be <= layers ({self.layers})", self.dense_layers)
        if self.dense_layers > 0 and self.dense_ffn_dim is None:
            return ("dense_ffn_dim", "is required when dense_layers > 0", ...)
        if self.moe is None and self.dense_layers != self.layers:
            return ("moe", "is required unless every layer is dense", ...)
        if self.moe is not None and self.dense_layers == self.layers:  # (it had been read and ignored)
            rule = "must be left out where every layer is dense (its experts would sit in no layer)"
            return ("moe", rule, ...)
        # fp4 quantizes routed experts alone (attention and dense layers run in fp8): a dense model
        # at fp4 had loaded, then every command refused its serving precision, blaming a flag
        # nobody gave (and weighed its weights at fp8 when fp8 was given)
        for key in ("native_weight_precision", "expert_weight_precision"):
            if self.moe is None and getattr(self, key) is Precision.FP4:
                rule = (
                    "must not be fp4 for a model without routed experts: dse prices fp4 for routed "
                    "experts alone, a dense model's layers in fp8 (give fp8, or bf16)"
                )
                return (key, rule, "fp4")
        if self.linear_layers + self.sliding_layers >= self.layers:
            return (
                "attention",
                "linear and sliding-window layers must leave at least one full "
                f"attention layer of {self.layers}",
                self.linear_layers + self.sliding_layers,
            )
        return None

    # ---- how the model splits over GPUs ------------------------------------------------
    def tp_problem(self, tp: float) -> str | None:
        """Why attention tensor parallelism over ``tp`` ranks cannot split this model's heads, or
        None. Each rank takes a whole share of the query heads, and a whole share of the KV heads
        or, with more ranks than KV heads, a whole copy of one: vLLM's QKVParallelLinear
        (``vllm/model_executor/layers/linear.py``) divides the KV heads by the ranks, or the ranks
        by the KV heads, and refuses the model where neither divides (8 KV heads over 6 ranks), as
        SGLang's GQA attention layers (``LlamaAttention``, ``Qwen2MoeAttention``, ...) assert."""
        a = self.attention
        if tp < 1 or tp > a.q_heads or a.q_heads % tp:
            return f"must divide {self.id}'s {a.q_heads} attention heads"
        kv = a.kv_heads if a.kind is AttentionKind.GQA else None
        if kv is not None and kv % tp and tp % kv:
            return (
                f"must divide {self.id}'s {kv} KV heads or be a multiple of them "
                f"(each rank holds whole KV heads: {kv} over {tp:g} ranks splits one)"
            )
        lin = a.linear
        if lin is not None and lin.heads % tp:
            return f"must divide {self.id}'s {lin.heads} linear-attention heads"
        return None

    # ---- layer composition -------------------------------------------------------------
    def fp4_problem(self) -> str | None:
        """Why ``fp4`` says nothing of this model (None: it has routed experts): it quantizes the
        routed experts, and a dense model's layers run in fp8 under fp4 as under fp8 (it had been
        taken, the figures fp8's under an fp4 label)."""
        if self.moe is not None:
            return None
        return (
            f"quantizes the routed experts, and {self.id} has none: its dense layers and attention run "
            "in fp8 under fp4 as under fp8 (use fp8, or bf16)"
        )

    def no_mtp(self) -> str | None:
        """Why multi-token prediction cannot run on this model, or None: every engine's MTP drafts
        with the checkpoint's own MTP layers (SGLang's EAGLE on DeepSeek's NEXTN, vLLM's "mtp",
        TensorRT-LLM's num_nextn_predict_layers), and a model without them has none to draft with."""
        if self.mtp_layers > 0:
            return None
        return f"needs a model with MTP layers to draft with ({self.id} has none: mtp_layers = 0)"

    @property
    def linear_layers(self) -> int:
        lin = self.attention.linear
        return lin.layers if lin else 0

    @property
    def sliding_layers(self) -> int:
        sw = self.attention.sliding_window
        return sw.layers if sw else 0

    @property
    def full_attention_layers(self) -> int:
        """Layers that keep KV for every token of the context."""
        return self.layers - self.linear_layers - self.sliding_layers

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.moe else 0

    # ---- parameters ----------------------------------------------------------------
    def attention_params_per_layer(self) -> float:
        """Weights of one full-attention layer (projections only; norms are negligible)."""
        a, h = self.attention, self.hidden
        if a.kind is AttentionKind.MLA:
            m = a.mla
            assert m is not None
            qk = m.qk_nope_dim + m.qk_rope_dim
            q = h * m.q_lora_rank + m.q_lora_rank * a.q_heads * qk if m.q_lora_rank else (h * a.q_heads * qk)
            kv = h * (m.kv_lora_rank + m.qk_rope_dim) + m.kv_lora_rank * a.q_heads * (
                m.qk_nope_dim + m.v_head_dim
            )
            o = a.q_heads * m.v_head_dim * h
            idx = 0.0
            if a.sparse_indexer is not None:
                ix = a.sparse_indexer
                idx = (m.q_lora_rank or h) * ix.heads * ix.head_dim + h * ix.head_dim + h * ix.heads
            return float(q + kv + o + idx)
        assert a.kv_heads is not None and a.head_dim is not None
        return float(2 * h * a.q_heads * a.head_dim + 2 * h * a.kv_heads * a.head_dim)

    def linear_params_per_layer(self) -> float:
        """One linear-attention layer: q, k, v, output gate and output projections."""
        lin = self.attention.linear
        return 0.0 if lin is None else 5.0 * self.hidden * lin.heads * lin.head_dim

    def param_groups(self) -> dict[str, float]:
        """Total parameters by group (MTP layers excluded, as publishers count them)."""
        h = self.hidden
        dense_ffn = 3.0 * h * (self.dense_ffn_dim or 0) * self.dense_layers
        groups = {
            "attention": self.attention_params_per_layer() * (self.layers - self.linear_layers)
            + self.linear_params_per_layer() * self.linear_layers,
            "dense_ffn": dense_ffn,
            "shared_experts": 0.0,
            "routed_experts": 0.0,
            "moe_routing": 0.0,
            "input_embedding": float(self.vocab * h),
            "output_embedding": 0.0 if self.tied_embeddings else float(self.vocab * h),
        }
        if self.moe is not None:
            m = self.moe
            width = m.expert_input_dim or h
            groups["shared_experts"] = 3.0 * h * m.expert_ffn_dim * m.shared_experts * self.moe_layers
            groups["routed_experts"] = 3.0 * width * m.expert_ffn_dim * m.routed_experts * self.moe_layers
            latent = 2.0 * h * width if width != h else 0.0
            groups["moe_routing"] = (m.routed_experts * h + latent) * self.moe_layers
        return groups

    def params_total(self) -> float:
        return sum(self.param_groups().values())

    def published_gap(self) -> tuple[str, float, float] | None:
        """The first published figure (its key, its value, what the architecture gives) that the
        derivation misses by more than :data:`PUBLISHED_RTOL`; None when all agree."""
        p = self.published
        for key, published, derived in (
            ("params_total_b", p.params_total_b, self.params_total() / 1e9),
            ("params_active_b", p.params_active_b, self.params_active() / 1e9),
            ("kv_bytes_per_token_bf16", p.kv_bytes_per_token_bf16, self.kv_bytes_per_token(Precision.BF16)),
        ):
            if abs(derived - published) > PUBLISHED_RTOL * published:
                return key, published, derived
        return None

    def params_active(self) -> float:
        """Parameters touched per token, counting embeddings as the publisher does."""
        g = self.param_groups()
        routed = 0.0
        if self.moe is not None:
            routed = g["routed_experts"] * self.moe.experts_per_token / self.moe.routed_experts
        emb = {
            EmbeddingCount.BOTH: g["input_embedding"] + g["output_embedding"],
            EmbeddingCount.OUTPUT: g["output_embedding"] or g["input_embedding"],
            EmbeddingCount.NONE: 0.0,
        }[self.published.active_counts_embeddings]
        return g["attention"] + g["dense_ffn"] + g["shared_experts"] + g["moe_routing"] + routed + emb

    # ---- KV cache and fixed per-request state ---------------------------------------
    def kv_elements_per_token_per_layer(self) -> int:
        """The attention's own KV values a token adds to one layer (the sparse indexer's keys
        aside: :meth:`index_bytes_per_token`)."""
        a = self.attention
        if a.kind is AttentionKind.MLA:
            assert a.mla is not None
            return a.mla.kv_lora_rank + a.mla.qk_rope_dim
        assert a.kv_heads is not None and a.head_dim is not None
        return 2 * a.kv_heads * a.head_dim

    def index_bytes_per_token(self) -> float:
        """The sparse indexer's key cache one more token adds, over all full-attention layers
        (fp8 whatever the KV's precision); 0 without sparse attention."""
        ix = self.attention.sparse_indexer
        return 0.0 if ix is None else float(ix.cache_bytes_per_token_per_layer * self.full_attention_layers)

    def kv_bytes_per_token(self, precision: Precision) -> float:
        """KV bytes one more token of context adds, over all full-attention layers: the
        attention's own (in an fp8 layout with scales where the model's kernels use one) and the
        sparse indexer's keys."""
        mla = self.attention.mla
        if precision is Precision.FP8 and mla is not None and mla.fp8_cache_bytes_per_token_per_layer:
            per_layer = float(mla.fp8_cache_bytes_per_token_per_layer)
        else:
            per_layer = self.kv_elements_per_token_per_layer() * precision.bytes_per_element
        return per_layer * self.full_attention_layers + self.index_bytes_per_token()

    def fixed_state_bytes_per_request(self, precision: Precision) -> float:
        """State a running request holds whatever its context: linear-attention state (kept in
        its own precision) plus the sliding-window layers' capped KV."""
        total = 0.0
        lin = self.attention.linear
        if lin is not None:
            total += lin.layers * lin.heads * lin.head_dim**2 * lin.state_bytes_per_element
        sw = self.attention.sliding_window
        if sw is not None:
            total += (
                sw.layers
                * sw.window_tokens
                * self.kv_elements_per_token_per_layer()
                * precision.bytes_per_element
            )
        return total

    def kv_bytes_per_request(self, context_tokens: float, precision: Precision) -> float:
        """All cache a request of ``context_tokens`` holds: per-token KV plus fixed state.

        Sliding-window layers hold ``min(context, window)`` tokens; for contexts shorter than the
        window this overcounts by at most one window, which is negligible at serving lengths.
        """
        return context_tokens * self.kv_bytes_per_token(precision) + (
            self.fixed_state_bytes_per_request(precision)
        )

    # ---- weights -------------------------------------------------------------------
    @property
    def serving_precision(self) -> Precision:
        """The routed-expert precision a deployment runs when none is named: the checkpoint's own
        where it ships narrower than fp8 (gpt-oss's MXFP4, Kimi K3's FP4 experts), else fp8 (a bf16
        checkpoint served quantized, as the engines' recipes for these models do)."""
        expert = self.expert_weight_precision or self.native_weight_precision
        return expert if expert.bytes_per_element < Precision.FP8.bytes_per_element else Precision.FP8

    def weight_bytes(self, precision: Precision | None = None) -> float:
        """Bytes of all weights: routed experts at the expert precision, the rest at
        ``precision`` (default: the native precision)."""
        base = precision or self.native_weight_precision
        expert = self.expert_weight_precision or base
        if precision is not None and precision.bytes_per_element < expert.bytes_per_element:
            expert = precision
        g = self.param_groups()
        return (
            g["routed_experts"] * expert.bytes_per_element
            + (sum(g.values()) - g["routed_experts"]) * base.bytes_per_element
        )
