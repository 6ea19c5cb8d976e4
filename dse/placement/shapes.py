"""Instance shapes tried per hardware, and everything the performance model says about them.

One :class:`Shapes` evaluates every (hardware, parallelism) shape of a request as one vectorised
pool: weights and free HBM per GPU, the prefill cost of a fresh prompt, of a midfill (suffix against
a reloaded prefix) and of a full recompute, the KV handoff time, and the tier reload bandwidths.
The role builders in :mod:`dse.placement.candidates` turn these into operating points.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dse.catalog import Hardware, Model
from dse.perf.afd import attention_side, ffn_side
from dse.perf.latency_tables import ENGINE_RULES
from dse.perf.memo import Memo
from dse.perf.params import PerfParams, with_mtp
from dse.perf.pool import Array, Pool, build_pool
from dse.perf.serving import PREFILL_TOKENS_PER_RANK, prefill_batch_tokens
from dse.perf.stages import forward_cost, kv_capacity_sequences, weight_bytes_per_gpu
from dse.placement.parallel import Parallel, parse_shape
from dse.placement.request import PlacementRequest
from dse.units import GB, Precision
from dse.workload import Workload
from formulations.placement_data import TIERS


def parallel_grid(hw: Hardware, model: Model, extra: set[str] | None = None) -> list[Parallel]:
    """Instance shapes tried per hardware: tensor-parallel attention inside a node, and
    data-parallel attention with expert parallelism that grows across nodes (or across the
    rack on NVL72). Tensor parallelism never leaves the scale-up domain. ``extra`` labels add
    shapes (a study may ask for others) where they are valid on ``hw``."""
    grid = _default_grid(hw, model)
    have = {p.label() for p in grid}
    for label in sorted(extra or ()):
        par = parse_shape(label)
        if par.label() not in have and shape_problem(par, hw, model) is None:
            grid.append(par)
    return grid


def shape_problem(par: Parallel, hw: Hardware, model: Model) -> str | None:
    """Why ``hw`` cannot run ``model`` in shape ``par`` (None: it can): tensor parallelism stays
    in the scale-up domain and divides the instance and the attention heads (and the KV heads, or
    is a multiple of them: :meth:`~dse.catalog.Model.tp_problem`); expert parallelism has an
    expert per group at least and divides the instance (experts that do not divide evenly over
    the groups are spread unevenly, as engines place them with redundant copies: 256 over EP 72
    on an NVL72 rack, whose fullest GPUs hold 4: :attr:`~dse.perf.pool.Pool.expert_bytes_per_gpu`)."""
    experts = model.moe.routed_experts if model.moe is not None else 1
    if par.pp > 1 and (par.gpus % par.pp or par.pp > model.layers):
        return (
            f"{par.pp} pipeline stages must divide the {par.gpus} GPUs "
            f"and not outnumber {model.id}'s {model.layers} layers"
        )
    staged = par.pp > 1
    if staged:  # the checks below are a stage's
        par = Parallel(par.stage_gpus, par.attn_tp, par.ep)
    if par.attn_tp > hw.scale_up.domain_gpus:
        return f"attention TP {par.attn_tp} leaves {hw.id}'s {hw.scale_up.domain_gpus}-GPU scale-up domain"
    if par.gpus % par.attn_tp or model.attention.q_heads % par.attn_tp:
        return (
            f"attention TP {par.attn_tp} must divide the {par.gpus} GPUs and {model.attention.q_heads} heads"
        )
    if (why := model.tp_problem(par.attn_tp)) is not None:  # the KV heads (or linear-attention ones)
        return f"attention TP {par.attn_tp} {why}"
    if par.ep > 1 and model.moe is None:  # ("exceeds llama-3.1-70b's 1 experts")
        return f"EP {par.ep} needs routed experts, and {model.id} has none (a dense model: EP 1)"
    if par.attn_tp < par.gpus and model.moe is None:
        # dse prices the MLP split over the instance; vLLM and TensorRT-LLM run a dense model's
        # whole on every attention-DP rank, and SGLang's dense models shard attention over the
        # whole TP size: no engine launches it as priced (4gpu-dpa-ep1 had been priced at 26.7 GB
        # of Llama 3.1 70B's weights a GPU, where vLLM holds 70.6)
        return f"data-parallel attention needs routed experts, and {model.id} has none (a dense model: tpN)"
    if par.ep > max(experts, 1):
        return f"EP {par.ep} exceeds {model.id}'s {experts} experts"
    if par.gpus % par.ep:  # an instance holds its experts: EP spans its GPUs (a stage's), or a part
        return f"EP {par.ep} must divide the {par.gpus} GPUs of {'a stage' if staged else 'the instance'}"
    return None


def unrunnable(par: Parallel, hardware: Sequence[Hardware], model: Model) -> str | None:
    """Why no GPU of ``hardware`` can run ``model`` in shape ``par`` (the first one's reason), or
    None where one can: what ``dse place --shapes``, ``place()`` and a study's shapes are held to."""
    problems = [shape_problem(par, h, model) for h in hardware]
    return problems[0] if problems and all(problems) else None


def unit_problem(
    par: Parallel,
    role: str,
    hw: Hardware,
    model: Model,
    precision: tuple[Precision, Precision],
    params: PerfParams,
) -> str | None:
    """Why ``hw`` cannot run a ``role`` unit (``prefill``, ``decode``, ... as a placement names it)
    of ``model`` in shape ``par`` at ``precision`` (weights, KV) (None: it can), by the rules
    ``dse place`` builds its units with: the shape's (:func:`shape_problem`), pipeline stages for
    prefill alone, and the weights a GPU holds (an attention-FFN unit its side's, each stage its
    layers') within its HBM after the runtime reserve (:class:`Shapes`' ``weights_gb`` and
    ``usable_gb``). What ``dse simulate --placement`` holds a hand-edited file's units to."""
    if (why := shape_problem(par, hw, model)) is not None:
        return why
    if par.pp > 1 and role not in ("prefill", "midfill"):
        return "pipeline stages run prefill only"
    pool = build_pool(
        model,
        [hw],
        gpus=[par.stage_gpus],
        attn_tp=[par.attn_tp],
        ep=[par.ep],
        weight_precision=[precision[0]],
        kv_precision=[precision[1]],
    )
    side = attention_side(pool) if role == "attention" else ffn_side(pool) if role == "ffn" else pool
    need = float(weight_bytes_per_gpu(side)[0]) / GB / par.pp
    usable = float(pool.hbm_bytes[0]) * (1.0 - params.hbm_reserve_fraction) / GB
    if need > usable:
        return (
            f"weights need {need:.1f} GB per GPU but {hw.id} offers {usable:.1f} GB after the "
            f"{params.hbm_reserve_fraction:.0%} runtime reserve"
        )
    return None


def _default_grid(hw: Hardware, model: Model, start: int = 4) -> list[Parallel]:
    """Shapes generated from the model and the scale-up domain, powers of two from ``start`` GPUs
    (4; smaller instances are tried where they hold the weights, :func:`_small`):

    * tensor-parallel attention over the whole instance while it stays within 8 GPUs and the
      domain, with every expert on its own GPU group (EP = GPUs) or split 2-way (EP = GPUs / 2:
      expert TP 2 inside the TP group, as TensorRT-LLM's TEP runs);
    * data-parallel attention with expert parallelism over the instance, or over half of it (each
      expert split 2-way), from 4 GPUs up to the experts: 64 GPUs at most in a 64-GPU domain or
      larger, 32 across the nodes of a smaller one (the all-to-all then crosses the network).

    Shapes whose weights do not fit are dropped later, with the sizes said
    (:class:`dse.placement.candidates.Exclusion`). A dense model gets the tensor-parallel ones."""
    domain = hw.scale_up.domain_gpus
    experts = model.moe.routed_experts if model.moe is not None else 0
    top = min(max(experts, 8), 64 if domain >= 64 else 32) if experts else min(domain, 8)
    out: list[Parallel] = []
    # a domain below ``start`` (an H100 NVL's NVLink pairs) starts at its own size: a dense model
    # had been given no shape at all there (an IndexError), and pipelined ones build on these
    g = start if top >= start else 1 << (max(top, 1).bit_length() - 1)
    while g <= top:
        eps = (g, g // 2) if experts >= g and g > 1 else (1,)
        if g <= min(8, domain):
            out += [Parallel(g, g, ep) for ep in eps]
        if experts:
            out += [Parallel(g, 1, ep) for ep in eps]
        g *= 2
    return [p for p in out if shape_problem(p, hw, model) is None]


@dataclass(frozen=True)
class PrefillCost:
    """Per shape: seconds of one request alone, busy seconds per request when batched, and
    seconds of one full batch (what a queued request waits behind)."""

    one_s: Array
    busy_s: Array
    batch_s: Array


def prefill_costs(
    pool: Pool,
    p: PerfParams,
    speed: Array,
    cases: list[tuple[float, float]],
    chunk_tokens: float = PREFILL_TOKENS_PER_RANK,
    per_instance: bool = False,
) -> list[PrefillCost]:
    """Per case ``(new, cached)``: prefilling ``new`` tokens of a request against ``cached`` ones
    already in HBM, in forwards of :func:`~dse.perf.serving.prefill_batch_tokens`. Every case,
    alone and batched, is one vectorised evaluation (cases along a leading axis)."""
    ones = np.ones_like(pool.gpus)
    new = np.array([max(c[0], 1.0) for c in cases])[:, None] * ones  # (cases, shapes)
    cached = np.array([c[1] for c in cases])[:, None]
    batch = prefill_batch_tokens(pool, new, chunk_tokens, per_instance)
    total = forward_cost(
        pool,
        p,
        tokens=np.concatenate([new, batch]),
        sequences=np.concatenate([np.ones_like(new), batch / new]),
        context=np.concatenate([new, new]),
        prefill=True,
        speed=speed,
        cached=np.concatenate([cached, cached]),
    ).total_s
    one, full = total[: len(cases)], total[len(cases) :]
    return [PrefillCost(one[i], full[i] * new[i] / batch[i], full[i]) for i in range(len(cases))]


def prefill_cases(w: Workload) -> list[tuple[float, float]]:
    """``(new, cached)`` tokens of a fresh prompt, a returning turn's suffix against its reloaded
    prefix (a midfill), and a returning turn recomputed whole."""
    return [
        (w.input_tokens, 0.0),
        (w.suffix_tokens, w.cached_prefix_tokens),
        (w.returning_context_tokens, 0.0),
    ]


BATCH_POINTS = 7  # prompts per forward tabulated from one to a full batch, geometric


def batched_busy(
    pool: Pool,
    p: PerfParams,
    speed: Array,
    cases: list[tuple[float, float]],
    chunk_tokens: float,
    per_instance: bool,
) -> tuple[Array, Array]:
    """Per case ``(new, cached)`` and shape: the most prompts one forward batches, ``(cases,
    shapes)``, and the busy seconds per prompt of a forward of ``most ** u`` prompts for ``u`` on
    ``BATCH_POINTS`` even steps from 0 to 1, ``(cases, BATCH_POINTS, shapes)``. A forward of a
    few prompts costs more per prompt than a full one: it reads the weights all the same."""
    ones = np.ones_like(pool.gpus)
    new = np.array([max(c[0], 1.0) for c in cases])[:, None] * ones  # (cases, shapes)
    most = prefill_batch_tokens(pool, new, chunk_tokens, per_instance) / new
    b = most[:, None, :] ** np.linspace(0.0, 1.0, BATCH_POINTS)[None, :, None]  # (cases, K, shapes)
    flat = (len(cases) * BATCH_POINTS, len(ones))
    cached = np.repeat(np.array([c[1] for c in cases]), BATCH_POINTS)[:, None]
    total = forward_cost(
        pool,
        p,
        tokens=(new[:, None, :] * b).reshape(flat),
        sequences=b.reshape(flat),
        context=np.repeat(new, BATCH_POINTS, axis=0),
        prefill=True,
        speed=speed,
        cached=cached,
    ).total_s
    return most, total.reshape(b.shape) / b


def _shape_list(
    req: PlacementRequest, model: Model, hws: list[Hardware], params: PerfParams, kv: Precision
) -> tuple[list[int], list[Parallel], list[bool]]:
    """(hardware index, shape) of every shape tried: the options' named shapes, and, where a
    role names none (decode, or prefill, which midfill follows unless named), the generated grid
    of each hardware with its pipelined prefill shapes as well. Each role then takes its own
    (:meth:`~dse.placement.candidates._Builder.shapes`): naming one role's shapes restricts that
    role alone. Third, whether each shape is one of the default grid's."""
    opts = req.options
    named = set().union(*(v or () for v in (opts.prefill_shapes, opts.decode_shapes, opts.midfill_shapes)))
    every = opts.prefill_shapes is None or opts.decode_shapes is None  # a role takes the default grid
    hw_of: list[int] = []
    par: list[Parallel] = []
    default: list[bool] = []
    for i, hw in enumerate(hws):
        grid = parallel_grid(hw, model)
        grid = (_small(hw, model, req, kv, params) if every else []) + grid
        grid += _pipelined(grid, hw, model, req, kv, params) if every else []
        base = {q.label() for q in grid}
        for q in grid + [q for q in parallel_grid(hw, model, extra=named) if q.label() not in base]:
            if every or q.label() in named:
                hw_of.append(i)
                par.append(q)
                default.append(q.label() in base)
    if not par and every:  # no shape at all (a dense model whose heads no TP of 4 or 8 divides, its
        # weights past 1-2 GPUs): those of 1-2 GPUs, whose weights the answer then says it needs
        # (the empty arrays had been an IndexError)
        for i, hw in enumerate(hws):
            small = list({q.label(): q for q in _default_grid(hw, model, start=1) if q.gpus < 4}.values())
            hw_of += [i] * len(small)
            par += small
            default += [True] * len(small)
    return hw_of, par, default


def _small(
    hw: Hardware, model: Model, req: PlacementRequest, kv: Precision, params: PerfParams
) -> list[Parallel]:
    """Instances of 1 and 2 GPUs, where they hold the weights at the request's precision: a model
    that fits one or two GPUs (gpt-oss-120b, Qwen3-30B-A3B, Llama 3.1 70B at fp8) serves more
    tokens per GPU from more, smaller instances, with less tensor-parallel traffic and fewer GPUs
    reading each weight (gpt-oss-120b on H200 at 120 requests/s: 16 GPUs where the 4-GPU floor
    of :func:`_default_grid` had bought 24). A model they cannot hold gets none, so its shapes
    are the grid's as before."""
    shapes = list({q.label(): q for q in _default_grid(hw, model, start=1) if q.gpus < 4}.values())
    if not shapes:
        return []
    room = _room(shapes, hw, model, req, kv, params)
    return [q for q, r in zip(shapes, room, strict=True) if r > 0]


def _room(
    shapes: list[Parallel],
    hw: Hardware,
    model: Model,
    req: PlacementRequest,
    kv: Precision,
    params: PerfParams,
) -> np.ndarray:
    """HBM bytes a GPU of each shape has left once it holds its weights (negative: they do not fit)."""
    pool = build_pool(
        model, [hw] * len(shapes), gpus=[q.gpus for q in shapes], attn_tp=[q.attn_tp for q in shapes],
        ep=[q.ep for q in shapes], weight_precision=[req.weight_precision] * len(shapes),
        kv_precision=[kv] * len(shapes),
    )  # fmt: skip
    return np.asarray(pool.hbm_bytes * (1.0 - params.hbm_reserve_fraction) - weight_bytes_per_gpu(pool))


def _pipelined(
    grid: list[Parallel], hw: Hardware, model: Model, req: PlacementRequest, kv: Precision, params: PerfParams
) -> list[Parallel]:
    """Two pipeline stages of each scale-up-domain-sized shape, where no shape within the domain
    holds the weights (DeepSeek-V3 at fp8 on 8 x 80 GB H100): prefill over two nodes with TP and
    EP inside each node, where the alternative is a TP or expert all-to-all across the network."""
    domain = hw.scale_up.domain_gpus
    inside = [q for q in grid if q.gpus <= domain]
    if not inside:
        return []
    if (_room(inside, hw, model, req, kv, params) > 0).any():
        return []
    widest = max(q.gpus for q in inside)
    out = [Parallel(2 * q.gpus, q.attn_tp, q.ep, pp=2) for q in inside if q.gpus == widest]
    return [q for q in out if shape_problem(q, hw, model) is None]


def _staged(c: PrefillCost, pp: Array, pool: Pool, tokens: float, hidden: float) -> PrefillCost:
    """A prefill cost of one stage's GPUs running every layer, made a pipeline's: a prompt takes
    the same time through the stages plus the activations' hops between them (over the stage's
    NICs), and ``pp`` prompts are in flight, so the busy time per prompt is a ``pp``-th."""
    hop = tokens * hidden * 2.0 / (pool.nic_bytes_per_s * pool.gpus)  # bf16 activations
    lag = (pp - 1.0) * hop
    return PrefillCost(c.one_s + lag, c.busy_s / pp, c.batch_s + lag)


def held_past_prompt(req: PlacementRequest, handed: bool) -> float:
    """Tokens past its prompt the KV of a decoding sequence holds: half its output (its mean
    context), or more where the engine's admission reserves more (TensorRT-LLM's
    GUARANTEED_NO_EVICT: all of it; SGLang's disaggregated decode server, ``handed`` its requests
    by a prefill pool, a fixed 512 tokens), as the engine-level simulation admits
    (:data:`dse.perf.latency_tables.ENGINE_RULES`)."""
    rules, osl = ENGINE_RULES[req.engine], req.workload.output_tokens
    if handed and rules.decode_reserve_tokens > 0:
        return max(0.5 * osl, rules.decode_reserve_tokens)
    return max(0.5, rules.reserve) * osl


def shapes_of(
    req: PlacementRequest, model: Model, hws: list[Hardware], params: PerfParams, handed: bool = False
) -> Shapes:
    """:class:`Shapes` of ``req`` on ``hws``, built once per process for the same inputs: a study's
    trials ask for the same few (its hardware's named shapes at a chunk) again and again, and
    differ mostly in what the shapes do not read (the decode cap, the prefill share, the KV
    policy). Keyed by the identities of the model, the hardware and the parameters and by every
    field of the request :class:`Shapes` reads (:data:`SHAPE_FIELDS`); the arrays of what it
    returns are read-only, as it is shared. The measured-kernel tier is built each time, as the
    pools are (its tables may be reloaded)."""
    if params.kernel_engines([req.engine]) is not None:
        return Shapes(req, model, hws, params, handed)
    o = req.options
    key = (
        id(model),
        tuple(id(h) for h in hws),
        id(params),
        handed,
        *(getattr(req, f) for f in SHAPE_FIELDS),
        *(getattr(o, f) for f in SHAPE_OPTIONS),
    )
    keep = (model, tuple(hws), params)
    return _SHAPES.get(key, keep, lambda: Shapes(req, model, hws, params, handed).frozen())


def shared_shapes(s: Shapes) -> bool:
    """Whether ``s`` came from :func:`shapes_of`'s memo (shared, read-only, long-lived)."""
    return _SHAPES.holds(s)


# what :class:`Shapes` reads of a request and of its options: the memo's key (a test reads the
# fields a build touches and checks they are all here)
SHAPE_FIELDS = ("workload", "engine", "weight_precision", "mtp", "mtp_draft_tokens", "mtp_accept_rate")
SHAPE_OPTIONS = ("prefill_shapes", "decode_shapes", "midfill_shapes", "prefill_chunk_tokens")
_SHAPES = Memo(256)


class Shapes:
    """Every shape of a request on its hardware, evaluated once."""

    def __init__(
        self,
        req: PlacementRequest,
        model: Model,
        hws: list[Hardware],
        params: PerfParams,
        handed: bool = False,
    ) -> None:
        """``handed``: the decoding units take their requests handed over by a prefill pool
        (disaggregated, attention-FFN), whose admission may reserve otherwise."""
        engine = with_mtp(params.engine(req.engine), req.mtp_draft_tokens, req.mtp_accept_rate)
        self.hws = hws
        self.hw_of, self.par, self.default = _shape_list(req, model, hws, params, engine.kv_precision)
        opts = req.options
        n = len(self.par)
        # a pipelined instance is priced as one stage's GPUs running every layer (the same work
        # per GPU and the same latency a prompt takes through all stages), then corrected below
        pool = build_pool(
            model,
            [hws[i] for i in self.hw_of],
            gpus=[q.stage_gpus for q in self.par],
            attn_tp=[q.attn_tp for q in self.par],
            ep=[q.ep for q in self.par],
            weight_precision=[req.weight_precision] * n,
            kv_precision=[engine.kv_precision] * n,
            engines=params.kernel_engines([req.engine] * n),
        )
        self.pool, self.params = pool, params
        self.pp = np.array([float(q.pp) for q in self.par])
        self.speed = np.full(n, engine.speed)
        self.draft = np.full(n, float(engine.mtp_draft_tokens if req.mtp else 0))
        self.accept = np.full(n, engine.mtp_accept_tokens if req.mtp else 1.0)
        w = self.workload = req.workload
        self.decode_ctx = np.full(n, w.mean_prompt_tokens() + 0.5 * w.output_tokens)
        self.kv_ctx = np.full(n, w.mean_prompt_tokens() + held_past_prompt(req, handed))
        kv_gb = float(pool.kv_bytes_per_token[0] / GB)  # one KV precision per request
        state_gb = float(pool.state_bytes[0]) / GB  # one KV precision per request
        # unique KV of one decoding sequence in the KV's shards (the placement divides by them)
        self.per_seq_gb = self.kv_ctx * kv_gb + pool.state_in_kv_shards / GB
        chunk = float(opts.prefill_chunk_tokens)
        per_instance = engine.prefill_chunk_per_instance
        self.prefill_ws_gb = prefill_batch_tokens(pool, w.input_tokens, chunk, per_instance) * kv_gb

        p, pp = params, self.pp
        self.cap_seq = kv_capacity_sequences(pool, p, self.kv_ctx)
        self.weights_gb = weight_bytes_per_gpu(pool) / GB / pp  # each stage holds its layers
        self.usable_gb = pool.hbm_bytes * (1.0 - p.hbm_reserve_fraction) / GB
        # KV room over the whole instance: each stage keeps its layers' share of a sequence's KV
        self.free_unique_gb = np.maximum(self.usable_gb - self.weights_gb, 0.0) * pool.kv_shard * pp
        staged = pp > 1
        self.cap_seq = np.where(staged, np.floor(self.free_unique_gb / self.per_seq_gb), self.cap_seq)
        self.fits = self.cap_seq > 0

        self.fresh, self.midfill, self.recompute = self._prefill_costs(w, model, chunk, per_instance)
        self._chunk, self._per_instance = chunk, per_instance
        self.instance_gpus = pool.gpus * pp
        self.nic_gb_s = pool.nic_bytes_per_s * p.nic_eff * self.instance_gpus / GB  # one instance
        # one request's KV leaves over the NICs of the GPUs that hold its shards (every stage's)
        kv_nics = pool.nic_bytes_per_s * p.nic_eff * np.minimum(pool.gpus, pool.kv_shard) * pp / GB
        self.fresh_handoff_gb = w.input_tokens * kv_gb + state_gb
        self.resting_gb = w.cached_prefix_tokens * kv_gb + state_gb  # a session between turns
        # what a prefill instance holds of a returning turn: its prefix back and its suffix
        self.session_gb = (w.cached_prefix_tokens + w.suffix_tokens) * kv_gb + state_gb
        self.prompt_gb = w.input_tokens * kv_gb + state_gb  # one fresh prompt's
        self.returning_handoff_gb = w.returning_context_tokens * kv_gb + state_gb
        self.fresh_handoff_s = self.fresh_handoff_gb / kv_nics
        self.returning_handoff_s = self.returning_handoff_gb / kv_nics
        self.tier_gb_s = tier_bandwidth(hws)  # (H, T) per GPU

    def _prefill_costs(
        self, w: Workload, model: Model, chunk: float, per_instance: bool
    ) -> tuple[PrefillCost, PrefillCost, PrefillCost]:
        """A fresh prompt's, a returning turn's suffix's and a recompute's prefill cost on every
        shape, a pipelined one's as its stages run it."""
        pool, pp = self.pool, self.pp
        cases = prefill_cases(w)
        costs = prefill_costs(pool, self.params, self.speed, cases, chunk, per_instance)
        if (pp > 1).any():
            news = [new for new, _ in cases]
            costs = [_staged(c, pp, pool, new, model.hidden) for c, new in zip(costs, news, strict=True)]
        fresh, midfill, recompute = costs
        return fresh, midfill, recompute

    @cached_property
    def _batched(self) -> tuple[Array, Array]:
        """:func:`batched_busy` of a fresh prompt, a midfill and a recompute (a pipelined shape's
        one stage running every layer), computed when a unit first asks (read-only: a shared
        :class:`Shapes` keeps them)."""
        cases = prefill_cases(self.workload)
        most, busy = batched_busy(self.pool, self.params, self.speed, cases, self._chunk, self._per_instance)
        most.flags.writeable = busy.flags.writeable = False
        return most, busy

    def busy_at(self, i: int, prompts: float | Array) -> Array:
        """Busy seconds per prompt of shape ``i`` (one stage's, pipelined) when each forward
        batches ``prompts`` prompts, at least one and at most a full batch: a fresh prompt's, a
        midfill's and a recompute's, ``(3,)``, or ``(3, K)`` for ``K`` batches."""
        most, busy = self._batched
        top = most[:, i].reshape((-1,) + (1,) * np.ndim(prompts))
        b = np.clip(prompts, 1.0, top)
        u = np.log(b) / np.log(np.maximum(top, 1.0 + 1e-12))  # where on each case's grid
        x = u * (BATCH_POINTS - 1)
        k = np.minimum(x.astype(int), BATCH_POINTS - 2)
        rows = np.arange(len(top)).reshape(top.shape)
        lo, hi = busy[rows, k, i], busy[rows, k + 1, i]
        return np.asarray(lo + (x - k) * (hi - lo))

    def most_prompts(self, i: int, case: int = 0) -> float:
        """Prompts one forward of shape ``i`` batches at most (one stage's, pipelined): fresh
        prompts (``case`` 0), midfills (1) or recomputes (2)."""
        return max(float(self._batched[0][case, i]), 1.0)

    def budget_tokens(self, i: int) -> float:
        """Prompt tokens one prefill forward of shape ``i`` may take: the engine's chunk on every
        attention-DP rank, or once for the whole instance (:func:`prefill_batch_tokens`)."""
        return float(self._chunk * (1.0 if self._per_instance else self.pool.attn_dp[i]))

    def __len__(self) -> int:
        return len(self.par)

    def frozen(self) -> Shapes:
        """``self`` with its arrays read-only (in place), its prefill costs' too: what
        :func:`shapes_of` shares."""
        for v in vars(self).values():
            for a in vars(v).values() if isinstance(v, PrefillCost) else (v,):
                if isinstance(a, np.ndarray):
                    a.flags.writeable = False
        return self

    def hw(self, i: int) -> Hardware:
        return self.hws[self.hw_of[i]]

    def reload_s(self, i: int, tier: str) -> float:
        """Seconds to bring one resting session's KV back from ``tier`` into shape ``i``: each GPU
        that holds a share of it (:attr:`~dse.perf.pool.Pool.seq_shard`, every stage's) reads its
        share over its own link, and a GPU that holds a copy (MLA's latent KV on every GPU of an
        attention TP group; each attention-DP rank's sessions on its own GPUs) reads all of it:
        the engines keep a host tier per rank (SGLang's ``HostKVCache`` in each scheduler
        process, vLLM's CPU offloading and TensorRT-LLM's ``host_cache_size`` per worker), so a
        session's reload is not spread over the instance's other GPUs."""
        if tier in ("hbm", "drop"):
            return 0.0
        split = float(self.pool.seq_shard[i] * self.pp[i])
        bw = self.tier_gb_s[self.hw_of[i], TIERS.index(tier)] * split
        return float(self.resting_gb / bw)


def tier_bandwidth(hws: list[Hardware]) -> Array:
    """(H, T) GB/s per GPU at which a tier's KV comes back: the host link's per-GPU share for
    DRAM, the local NVMe read rate, the network KV store's read rate."""
    out = np.zeros((len(hws), len(TIERS)))
    for h, hw in enumerate(hws):
        out[h, TIERS.index("dram")] = hw.host.link_gb_per_s_per_dir
        out[h, TIERS.index("nvme")] = hw.storage.local_nvme.read_gb_per_s_per_gpu
        out[h, TIERS.index("network")] = hw.storage.network_kv.read_gb_per_s_per_gpu
    return out


def tier_capacity(hws: list[Hardware]) -> Array:
    """(H, T) GB per GPU a tier can hold (DRAM and NVMe; HBM room depends on the unit)."""
    out = np.zeros((len(hws), len(TIERS)))
    for h, hw in enumerate(hws):
        out[h, TIERS.index("dram")] = hw.host.dram_gb_per_gpu
        out[h, TIERS.index("nvme")] = hw.storage.local_nvme.capacity_tb_per_gpu * 1e3
    return out
