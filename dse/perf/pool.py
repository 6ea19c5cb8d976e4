"""A pool of identical serving instances as arrays: one element per candidate.

Everything the stage cost functions need is here as numpy arrays of one length, so a single call
evaluates many candidates (different hardware, parallelism, precision, lengths) at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from dse.catalog import Hardware, Model
from dse.catalog.model import AttentionKind
from dse.errors import InputError
from dse.perf.kernel_data import ENGINE_DIRS, has_system
from dse.perf.kernels import SIDES, KernelKey, MeasuredCurves, measured_curves
from dse.perf.memo import Memo
from dse.units import GB, GIB, TB, Precision

Array = np.ndarray

HBM_GB_BYTES = float(GIB)
"""Bytes in one "GB" of a datasheet HBM capacity. Vendors count HBM in binary units (stacks of
16, 24 or 36 GiB): nvidia-smi reports 81,559 MiB on an "80 GB" H100, 143,771 MiB on a "141 GB"
H200 and 183,359 MiB on a "180 GB" B200, each the quoted figure in GiB within 0.5%. Read as
10^9 bytes, the KV room left beside the weights came out too small (DeepSeek-R1 fp8 on 4 x
B200: about 5 GB per GPU instead of 18), and capacity-bound runs were under-predicted by 2x."""


@dataclass(frozen=True)
class ModelTerms:
    """Per-model scalars the cost functions use (counts, not bytes)."""

    layers: float
    full_layers: float
    moe_layers: float
    hidden: float
    q_heads: float
    kv_heads: float  # GQA KV heads; 1 for MLA
    experts: float
    experts_per_token: float
    params_dense_active: float  # attention, dense FFN, shared experts, router, output embedding
    params_attention: float  # the attention share of params_dense_active
    params_routed_total: float
    decode_qk_dim: float  # per head, absorbed MLA form in decode
    decode_v_dim: float
    prefill_qk_dim: float
    prefill_v_dim: float
    # heads a request's fixed state splits by: a linear-attention layer's (its recurrent state is
    # one matrix per head, split over tensor-parallel ranks by head: vLLM's KDA layer holds
    # num_heads / tp_size of them), else the KV heads of the sliding-window layers
    state_heads: float = 1.0
    # DeepSeek sparse attention: each query reads only the top-k tokens an indexer picks, and the
    # indexer scores every token of the context with its own small keys (inf: dense attention)
    sparse_top_k: float = math.inf
    index_bytes_per_token: float = 0.0  # the indexer's key cache, over all full layers
    index_dim: float = 0.0  # indexer heads x head dim: its score costs 2 x this FLOPs a token pair
    # tensor-parallel all-reduces per layer: after attention's output projection and after the
    # FFN's (one on an attention-FFN deployment's attention pool, whose FFNs run elsewhere)
    tp_allreduces_per_layer: float = 2.0
    # whether the MoE layers' all-to-all crosses scale-up domains over the NICs (not on an
    # attention-FFN deployment's expert pool: the transfer from the attention pool brings each
    # token to every domain holding its experts, :func:`dse.perf.afd.afd_fan_out`, and the domain
    # forwards it over NVLink to its experts' GPUs, at NVLink latency)
    a2a_over_nic: bool = True

    @classmethod
    def of(cls, m: Model) -> ModelTerms:
        g = m.param_groups()
        a = m.attention
        if a.kind is AttentionKind.MLA:
            assert a.mla is not None
            dqk_dec = a.mla.kv_lora_rank + a.mla.qk_rope_dim
            dv_dec = float(a.mla.kv_lora_rank)
            dqk_pf = a.mla.qk_nope_dim + a.mla.qk_rope_dim
            dv_pf = float(a.mla.v_head_dim)
            kv_heads = 1.0  # one latent shared by all heads: tensor parallelism replicates it
        else:
            assert a.head_dim is not None and a.kv_heads is not None
            dqk_dec = dqk_pf = a.head_dim
            dv_dec = dv_pf = float(a.head_dim)
            kv_heads = float(a.kv_heads)
        dense = sum(v for k, v in g.items() if k not in ("routed_experts", "input_embedding"))
        moe = m.moe
        ix = a.sparse_indexer
        return cls(
            layers=m.layers,
            full_layers=m.full_attention_layers,
            moe_layers=m.moe_layers,
            hidden=m.hidden,
            q_heads=a.q_heads,
            kv_heads=kv_heads,
            experts=moe.routed_experts if moe else 1.0,
            experts_per_token=moe.experts_per_token if moe else 0.0,
            params_dense_active=dense,
            params_attention=g["attention"],
            params_routed_total=g["routed_experts"],
            decode_qk_dim=dqk_dec,
            decode_v_dim=dv_dec,
            prefill_qk_dim=dqk_pf,
            prefill_v_dim=dv_pf,
            state_heads=float(a.linear.heads) if a.linear is not None else kv_heads,
            sparse_top_k=float(ix.top_k_tokens) if ix is not None else math.inf,
            index_bytes_per_token=m.index_bytes_per_token(),
            index_dim=float(ix.heads * ix.head_dim) if ix is not None else 0.0,
        )


@dataclass(frozen=True)
class Pool:
    """One serving instance per element: its hardware, parallelism, precision and model."""

    gpus: Array  # GPUs per instance
    attn_tp: Array  # attention tensor-parallel degree (1 with DP attention)
    ep: Array  # expert-parallel degree (experts tensor-split over gpus / ep inside)
    # hardware (per GPU)
    dense_tflops: Array  # peak for the non-expert GEMMs
    expert_tflops: Array  # peak for the routed-expert GEMMs
    attn_tflops: Array  # peak for attention (bf16 tensor cores)
    hbm_bytes_per_s: Array
    hbm_bytes: Array
    scaleup_bytes_per_s: Array
    domain_gpus: Array
    nic_bytes_per_s: Array
    # precision-dependent sizes
    attn_weight_bytes: Array  # one copy; data-parallel attention ranks each hold one
    dense_weight_bytes: Array  # other non-expert weights (dense FFN, shared experts, embeddings)
    expert_weight_bytes: Array
    kv_bytes_per_token: Array
    state_bytes: Array  # per request whatever its context: linear-attention state, sliding-window KV
    act_bytes: Array  # bytes per element of the all-to-all dispatch (fp8 = 1)
    model: ModelTerms
    # measured kernel speed (dse.perf.kernels) where the engine's tables cover the GPU; None: all
    # ops priced from the datasheet
    kernels: MeasuredCurves | None = None

    @property
    def attn_dp(self) -> Array:
        return self.gpus / self.attn_tp

    @property
    def seq_shard(self) -> Array:
        """GPUs that split one sequence's KV: the useful head split of the attention rank it runs
        on (1 for MLA's latent KV, which every GPU of the rank holds whole)."""
        return np.minimum(self.attn_tp, self.model.kv_heads)

    @property
    def kv_shard(self) -> Array:
        """GPUs that split one copy of the KV cache: DP ranks times the useful head split."""
        return self.attn_dp * self.seq_shard

    @property
    def state_shard(self) -> Array:
        """GPUs that split one request's fixed state: DP ranks times its useful head split (a
        linear-attention state splits over tensor-parallel ranks, which MLA's latent KV does not)."""
        return self.attn_dp * np.minimum(self.attn_tp, self.model.state_heads)

    @property
    def state_in_kv_shards(self) -> Array:
        """A request's fixed state counted as if the KV's shards split it: (its KV + this) over
        :attr:`kv_shard` is what one GPU holds, the state split over :attr:`state_shard`."""
        return self.state_bytes * self.kv_shard / self.state_shard

    @property
    def expert_bytes_per_gpu(self) -> Array:
        """Routed-expert weight bytes on the fullest GPU. Experts that do not divide evenly over
        the ``ep`` groups leave some groups one more: vLLM's ``determine_expert_map`` gives the
        first ``experts % ep`` ranks one more each, and SGLang's and TensorRT-LLM's expert load
        balancers fill the other groups up to the same count with redundant copies. Either way the
        fullest group's GPUs, whose memory runs out first, hold ``ceil(experts / ep)`` of them,
        split over its ``gpus / ep`` GPUs: GLM-4.6's 160 over EP 64 is 3 a GPU, not 2.5. (A decode
        step still reads the average share, :class:`~dse.perf.stages.PoolTerms`: the calibration
        was fitted so, and one measured run, DeepSeek-R1 over EP 48 on GB200, would move it.)"""
        e = self.model.experts
        return self.expert_weight_bytes * np.ceil(e / self.ep) * self.ep / (e * self.gpus)

    def seq_bytes_per_gpu(self, context: Array | float) -> Array:
        """HBM one request of ``context`` tokens holds on each GPU of its instance: its KV over the
        GPUs that split it, its fixed state over those that split that."""
        return (context * self.kv_bytes_per_token + self.state_in_kv_shards) / self.kv_shard


def _peak(hw: Hardware, p: Precision, asked: Precision | None = None) -> float:
    v = hw.compute.tflops(p)
    if v is None:
        # refuse to extrapolate: a precision the hardware lacks falls back to the next wider one
        wider = {Precision.FP4: Precision.FP8, Precision.FP8: Precision.BF16}.get(p)
        if wider is None:  # (a GPU of fp4 alone had read "is required to serve bf16", no more)
            rule = (
                f"is required: {hw.id} has no figure for {(asked or p).value}"
                + ("" if asked in (None, p) else " or a wider format")
                + ", and a format a GPU lacks runs in the next wider one (the dense layers and "
                "attention run in fp8 where the GPU has an fp8 figure, else in bf16)"
            )
            raise InputError(hw.id, "compute.bf16_dense_tflops", rule)
        return _peak(hw, wider, asked or p)
    return v


def build_pool(
    model: Model,
    hardware: Sequence[Hardware],
    *,
    gpus: Sequence[float] | Array,
    attn_tp: Sequence[float] | Array,
    ep: Sequence[float] | Array,
    weight_precision: Sequence[Precision],
    kv_precision: Sequence[Precision],
    engines: Sequence[str] | None = None,
    engine_versions: Sequence[str | None] | None = None,
) -> Pool:
    """Arrays for ``len(hardware)`` candidates of one model.

    ``weight_precision`` is the routed-expert precision (fp4, fp8 or bf16 checkpoints); the other
    GEMMs run at fp8 when the hardware has it and the deployment is not bf16, else bf16, and
    attention at bf16. The per-GPU figures are
    worked out once per distinct (hardware, weight precision, KV precision): a study's pools hold
    hundreds of candidates on a few GPUs.

    ``engines`` (engine profile per candidate, with the engine version each runs where known)
    brings in the measured kernel tables of :mod:`dse.perf.kernels` where they cover the GPU;
    without it every op is priced from the datasheet.

    A datasheet pool of a few candidates is built once per process (:mod:`dse.perf.memo`): a
    study's trials build the same ones again and again. The measured tier's pools are built each
    time, as the tables they read may be reloaded (a test's other data folder).
    """
    if engines is None and 0 < len(hardware) <= MEMO_MAX_CANDIDATES:
        # the shape as arrays of the pool's own, never views of the caller's
        g, tp, e = (np.array(a, dtype=float).ravel() for a in (gpus, attn_tp, ep))
        return _POOLS.get(
            _pool_key(model, hardware, (g, tp, e), weight_precision, kv_precision),
            (model, tuple(hardware)),
            lambda: _build(model, hardware, g, tp, e, weight_precision, kv_precision, None, None),
        )
    return _build(
        model, hardware, gpus, attn_tp, ep, weight_precision, kv_precision, engines, engine_versions
    )


def _pool_key(
    model: Model,
    hardware: Sequence[Hardware],
    shape: tuple[Array, ...],
    weight_precision: Sequence[Precision],
    kv_precision: Sequence[Precision],
) -> tuple[object, ...]:
    """The memo's key: every candidate's inputs, or, when all are alike (the simulator's
    decode-step table: one unit at up to 257 batches), the first one's and their count."""
    h0, w0, k0 = hardware[0], weight_precision[0], kv_precision[0]
    if (
        all(h is h0 for h in hardware)
        and all(w is w0 for w in weight_precision)
        and all(k is k0 for k in kv_precision)
        and all(bool((a == a[0]).all()) for a in shape)
    ):
        return (id(model), len(hardware), id(h0), *(float(a[0]) for a in shape), w0, k0)
    parts = (tuple(id(h) for h in hardware), *(tuple(a.tolist()) for a in shape))
    return (id(model), *parts, tuple(weight_precision), tuple(kv_precision))


def memoised(pool: Pool) -> bool:
    """Whether ``pool`` came from :func:`build_pool`'s memo (shared, read-only, long-lived)."""
    return _POOLS.holds(pool)


MEMO_MAX_CANDIDATES = 257  # the simulator's decode-step table; a placement's every shape rarely repeats
_POOLS = Memo()


def _build(
    model: Model,
    hardware: Sequence[Hardware],
    gpus: Sequence[float] | Array,
    attn_tp: Sequence[float] | Array,
    ep: Sequence[float] | Array,
    weight_precision: Sequence[Precision],
    kv_precision: Sequence[Precision],
    engines: Sequence[str] | None,
    engine_versions: Sequence[str | None] | None,
) -> Pool:
    terms = ModelTerms.of(model)
    g = model.param_groups()
    attn = g["attention"]
    nonexp = sum(v for k, v in g.items() if k not in ("routed_experts", "attention"))
    index: dict[tuple[int, Precision, Precision], int] = {}
    kinds: list[tuple[Hardware, Precision, Precision]] = []
    of = np.empty(len(hardware), dtype=np.intp)
    for i, (h, wp, kp) in enumerate(zip(hardware, weight_precision, kv_precision, strict=True)):
        j = index.setdefault((id(h), wp, kp), len(kinds))
        if j == len(kinds):
            kinds.append((h, wp, kp))
        of[i] = j

    def per_kind(fn: Callable[[Hardware, Precision, Precision], float]) -> Array:
        return np.array([fn(h, wp, kp) for h, wp, kp in kinds], dtype=float)[of]

    kernels = None
    if engines is not None:
        kernels = _measured(model, terms, hardware, engines, engine_versions, weight_precision, kv_precision,
                            (gpus, attn_tp, ep))  # fmt: skip
    return Pool(
        gpus=np.asarray(gpus, dtype=float),
        attn_tp=np.asarray(attn_tp, dtype=float),
        ep=np.asarray(ep, dtype=float),
        dense_tflops=per_kind(lambda h, wp, kp: _peak(h, _dense_precision(h, wp))) * 1e12,
        expert_tflops=per_kind(lambda h, wp, kp: _peak(h, wp)) * 1e12,
        # attention runs in bf16; hardware that publishes no bf16 figure (Rubin) runs it in fp8
        attn_tflops=per_kind(lambda h, wp, kp: h.compute.bf16_dense_tflops or _peak(h, Precision.FP8)) * 1e12,
        hbm_bytes_per_s=per_kind(lambda h, wp, kp: h.hbm.bandwidth_tb_per_s) * TB,
        hbm_bytes=per_kind(lambda h, wp, kp: h.hbm.usable_gib) * HBM_GB_BYTES,
        scaleup_bytes_per_s=per_kind(lambda h, wp, kp: h.scale_up.gb_per_s_per_dir) * GB,
        domain_gpus=per_kind(lambda h, wp, kp: h.scale_up.domain_gpus),
        nic_bytes_per_s=per_kind(lambda h, wp, kp: h.scale_out.nic_gb_per_s_per_gpu) * GB,
        attn_weight_bytes=per_kind(lambda h, wp, kp: attn * _dense_precision(h, wp).bytes_per_element),
        dense_weight_bytes=per_kind(lambda h, wp, kp: nonexp * _dense_precision(h, wp).bytes_per_element),
        expert_weight_bytes=per_kind(lambda h, wp, kp: g["routed_experts"] * wp.bytes_per_element),
        kv_bytes_per_token=per_kind(lambda h, wp, kp: model.kv_bytes_per_token(kp)),
        state_bytes=per_kind(lambda h, wp, kp: model.fixed_state_bytes_per_request(kp)),
        act_bytes=np.ones(len(hardware)),
        model=terms,
        kernels=kernels,
    )


def _measured(
    model: Model,
    terms: ModelTerms,
    hardware: Sequence[Hardware],
    engines: Sequence[str],
    engine_versions: Sequence[str | None] | None,
    weight_precision: Sequence[Precision],
    kv_precision: Sequence[Precision],
    shape: tuple[Sequence[float] | Array, Sequence[float] | Array, Sequence[float] | Array],
) -> MeasuredCurves | None:
    """The measured curves of each candidate (:func:`kernel_key` per distinct candidate)."""
    n = len(hardware)
    versions = engine_versions if engine_versions is not None else [None] * n
    gpus, attn_tp, ep = (np.broadcast_to(np.asarray(a, dtype=float), n) for a in shape)
    made: dict[tuple[object, ...], tuple[KernelKey | None, dict[str, KernelKey | None]]] = {}

    def key_of(h: Hardware, *rest: object) -> tuple[KernelKey | None, dict[str, KernelKey | None]]:
        k = (id(h), *rest)
        if k not in made:
            key = kernel_key(model, terms, h, *rest)  # type: ignore[arg-type]
            made[k] = key, {name: None if key is None else side_key(model, key, name) for name in SIDES}
        return made[k]

    both = [
        key_of(h, e, v, wp, kp, float(gg), float(tp), float(ee))
        for h, e, v, wp, kp, gg, tp, ee in zip(
            hardware, engines, versions, weight_precision, kv_precision, gpus, attn_tp, ep, strict=True
        )
    ]
    kernels = measured_curves([k for k, _ in both], {name: [s[name] for _, s in both] for name in SIDES})
    if kernels is None:
        return None
    return replace(kernels, variants=any(h.measured_hbm_tb_per_s is not None for h in hardware))


def _dense_precision(h: Hardware, wp: Precision) -> Precision:
    """The non-expert GEMMs' precision: fp8 where the hardware has it, bf16 on hardware without
    fp8 and in a bf16 deployment (whose checkpoint is bf16 throughout; an fp8 or fp4 one keeps
    attention and the dense layers in fp8)."""
    return Precision.FP8 if h.compute.fp8_dense_tflops and wp is not Precision.BF16 else Precision.BF16


_GEMM_DTYPE = {Precision.FP8: "fp8_block", Precision.BF16: "bfloat16", Precision.FP4: "nvfp4"}
_KV_DTYPE = {Precision.FP8: "fp8", Precision.BF16: "bfloat16", Precision.FP4: "fp8"}


def gemm_shapes(model: Model, attn_tp: float, part: str = "whole") -> tuple[tuple[float, float, float], ...]:
    """The dense GEMMs one attention rank runs in a forward pass, as (n, k, count): attention's
    projections, the dense and shared-expert FFNs and the router in each layer that has them, and
    the output head. Tensor parallelism splits each projection's heads or width; under data-parallel
    attention (``attn_tp`` 1) every rank runs them whole on its own tokens, as SGLang and TRT-LLM
    do. Routed experts are the MoE kernel's (:func:`dse.perf.kernels.measured_curves`).

    ``part`` ``attention`` keeps attention's projections only, ``ffn`` the rest: the GEMMs of an
    attention-FFN deployment's attention and expert pools (:mod:`dse.perf.afd`), split as the
    fitted tier splits their parameters (``params_attention`` and the rest of
    ``params_dense_active``)."""
    if part not in ("whole", "attention", "ffn"):
        raise ValueError(f"gemm_shapes: part {part!r} is none of whole, attention, ffn")
    h, tp, a = float(model.hidden), float(attn_tp), model.attention
    full = float(model.layers - model.linear_layers)
    out: list[tuple[float, float, float]] = []
    if a.kind is AttentionKind.MLA:
        assert a.mla is not None
        ml = a.mla
        qk = float(ml.qk_nope_dim + ml.qk_rope_dim)
        if ml.q_lora_rank:
            out += [(ml.q_lora_rank, h, full), (a.q_heads * qk / tp, ml.q_lora_rank, full)]
        else:
            out.append((a.q_heads * qk / tp, h, full))
        out.append((ml.kv_lora_rank + ml.qk_rope_dim, h, full))
        out.append((a.q_heads * (ml.qk_nope_dim + ml.v_head_dim) / tp, ml.kv_lora_rank, full))
        out.append((h, a.q_heads * ml.v_head_dim / tp, full))
    elif a.head_dim is not None and a.kv_heads is not None:
        qkv = (a.q_heads + 2.0 * a.kv_heads) * a.head_dim / tp
        out += [(qkv, h, full), (h, a.q_heads * a.head_dim / tp, full)]
    else:  # any other attention: its weights as one projection in and one out
        width = model.attention_params_per_layer() / h / 2.0 / tp
        out += [(width, h, full), (h, width, full)]
    if model.linear_layers:
        width = model.linear_params_per_layer() / h / 2.0 / tp
        out += [(width, h, float(model.linear_layers)), (h, width, float(model.linear_layers))]
    if part == "ffn":
        out = []
    elif part == "attention":
        return tuple((max(n, 1.0), max(k, 1.0), c) for n, k, c in out)
    if model.dense_layers and model.dense_ffn_dim:
        f = float(model.dense_ffn_dim)
        out += [(2.0 * f / tp, h, float(model.dense_layers)), (h, f / tp, float(model.dense_layers))]
    if model.moe is not None:
        moe, layers = model.moe, float(model.moe_layers)
        if moe.shared_experts:
            f = float(moe.expert_ffn_dim * moe.shared_experts)
            out += [(2.0 * f / tp, h, layers), (h, f / tp, layers)]
        out.append((float(moe.routed_experts), h, layers))
    out.append((model.vocab / tp, h, 1.0))
    return tuple((max(n, 1.0), max(k, 1.0), c) for n, k, c in out)


def side_key(model: Model, key: KernelKey, side: str) -> KernelKey:
    """The key of one side of an attention-FFN deployment (:mod:`dse.perf.afd`) of an instance
    whose key is ``key``: the attention pool's, attention's projections at its tensor parallelism
    and no experts; the expert pool's, the other dense GEMMs and the routed experts, no attention,
    run as :func:`~dse.perf.afd.ffn_side` runs them (no tensor-parallel attention: each GPU its
    own tokens)."""
    if side == "attention":
        return replace(key, gemm_shapes=gemm_shapes(model, key.attn_tp, "attention"), experts_per_token=0.0)
    return replace(key, gemm_shapes=gemm_shapes(model, 1.0, "ffn"), attn_tp=1.0, mla=False)


def kernel_key(
    model: Model,
    terms: ModelTerms,
    h: Hardware,
    engine: str,
    version: str | None,
    wp: Precision,
    kp: Precision,
    gpus: float,
    attn_tp: float,
    ep: float,
) -> KernelKey | None:
    """What a candidate's measured curves depend on; None where no tables cover it."""
    if not h.measured_kernels or engine not in ENGINE_DIRS or not has_system(h.measured_kernels, h.id):
        return None
    dp = _dense_precision(h, wp)
    mla = model.attention.kind is AttentionKind.MLA
    return KernelKey(
        system=h.measured_kernels,
        engine=engine,
        version=version,
        hidden=terms.hidden,
        expert_inter=terms.params_routed_total / max(terms.experts, 1.0) / (3.0 * terms.hidden),
        experts=terms.experts,
        experts_per_token=terms.experts_per_token,
        q_heads=terms.q_heads,
        mla=mla,
        decode_qk=terms.decode_qk_dim,
        decode_v=terms.decode_v_dim,
        prefill_qk=terms.prefill_qk_dim,
        prefill_v=terms.prefill_v_dim,
        kv_bytes_per_token_layer=(model.kv_bytes_per_token(kp) - terms.index_bytes_per_token)
        / max(terms.full_layers, 1.0),
        gemm_shapes=gemm_shapes(model, attn_tp),
        gemm_dtype=_GEMM_DTYPE[dp],
        moe_dtype=_GEMM_DTYPE[wp],
        kv_dtype=_KV_DTYPE[kp],
        weight_bytes=wp.bytes_per_element,
        dense_bytes=dp.bytes_per_element,
        dense_peak=_peak(h, dp) * 1e12,
        expert_peak=_peak(h, wp) * 1e12,
        attn_peak=(h.compute.bf16_dense_tflops or _peak(h, Precision.FP8)) * 1e12,
        hbm=(h.measured_hbm_tb_per_s or h.hbm.bandwidth_tb_per_s) * TB,
        gpus=float(gpus),
        attn_tp=float(attn_tp),
        ep=float(ep),
    )
