"""The measured-kernel tier: per-GPU, per-engine kernel times from AIConfigurator's microbenchmarks.

For a GPU, engine and version the tables cover (:mod:`dse.perf.kernel_data`), each op of a
forward pass is priced from what the kernel measured rather than from a fitted fraction of the
datasheet peak. The measurement is kept as a *speed-of-light ratio*: the measured time of the op at
the measured shape over its roofline time on the measured GPU's datasheet figures, as a function of
the op's size (tokens, batch, context). An op is then priced as that ratio times its own roofline:

- at a measured shape this is exactly the measured time;
- for a model whose shapes were not measured, it is the nearest measured shape's efficiency;
- for a what-if variant (``[[variants]]``, e.g. +50% HBM bandwidth), it is the measured time
  scaled by the ratio of the datasheet figures, since the roofline moves with them.

AIConfigurator itself transfers measurements between precisions the same way (its MoE "achieved
util" levels). Four ops are measured: the dense GEMMs, the routed-expert MoE, and MLA attention in
decode and in prefill. Communication, per-step overheads and MTP acceptance stay on the fitted
model (``dse calibrate`` refits them); GPUs without tables (AMD, the projected VR200) and
attention that is not MLA keep the datasheet path for every op.

Ratios are precomputed on fixed log2 grids when a pool is built (:func:`measured_curves`), one row
per distinct (GPU, engine, version, precisions, parallelism), so a prediction only interpolates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from dse.perf import kernel_data

if TYPE_CHECKING:  # polars loads when a curve is first built, not when dse starts
    import polars as pl

Array = np.ndarray

STEP_1D = 0.25  # octaves between grid points of tokens (GEMM rows, MoE tokens)
GRID_1D = np.exp2(np.arange(0.0, 17.0 + 1e-9, STEP_1D))  # 1 .. 131,072
GRID_BATCH = np.exp2(np.arange(0.0, 10.0 + 1e-9, 1.0))  # sequences per attention rank, 1 .. 1,024
GRID_CTX = np.exp2(np.arange(0.0, 17.0 + 1e-9, 1.0))  # tokens attended to, 1 .. 131,072
OPS = ("gemm", "moe", "decode_attention", "prefill_attention")
SIDES = ("attention", "ffn")  # an attention-FFN deployment's pools (dse.perf.afd)


@dataclass(frozen=True)
class KernelKey:
    """What one pool element's measured curves depend on (hashable: curves are cached per key)."""

    system: str  # the tables' GPU folder, e.g. h200_sxm
    engine: str  # dse engine profile: trt, sglang
    version: str | None  # the engine version wanted (a run's image), None: the newest measured
    # model shapes
    hidden: float
    expert_inter: float  # routed-expert intermediate size
    experts: float
    experts_per_token: float
    q_heads: float
    mla: bool
    decode_qk: float
    decode_v: float
    prefill_qk: float
    prefill_v: float
    kv_bytes_per_token_layer: float
    # the dense GEMMs one attention rank runs in a forward pass: (n, k, how many per pass)
    gemm_shapes: tuple[tuple[float, float, float], ...]
    # precisions as the tables name them
    gemm_dtype: str
    moe_dtype: str
    kv_dtype: str
    weight_bytes: float  # per routed-expert weight element
    dense_bytes: float  # per dense weight element
    # the measured GPU's datasheet (FLOP/s, bytes/s), whatever variant is priced
    dense_peak: float
    expert_peak: float
    attn_peak: float
    hbm: float
    # parallelism
    gpus: float
    attn_tp: float
    ep: float


@dataclass(frozen=True)
class KernelRow:
    """One key's measured curves (None: that op is not measured) and the versions used: the dense
    GEMMs' seconds per pass, the other ops' speed-of-light ratios."""

    gemm: Array | None
    moe: Array | None
    decode_attention: Array | None
    prefill_attention: Array | None
    versions: tuple[tuple[str, str], ...]  # (op, "engine version") for each measured op

    def source(self, key: KernelKey) -> dict[str, str]:
        used = dict(self.versions)
        return {op: (f"measured {key.system} {used[op]}" if op in used else "datasheet") for op in OPS}


@dataclass(frozen=True, eq=False)
class MeasuredCurves:
    """The measured curves of a pool: one row per distinct key (row 0: no tables, ratio 1),
    ``row_of`` each element's; per element, whether each op is measured and which source priced it."""

    row_of: Array  # (n,) intp: each element's row of the arrays below
    gemm: Array  # (rows, len(GRID_1D)): seconds of the dense GEMMs per pass on the measured GPU
    gemm_flops_per_row: Array  # (rows,): their FLOPs per row and their weight bytes: the roofline
    gemm_weight_bytes: Array  # that scales them to a what-if variant's datasheet
    gemm_calls: Array  # (rows,): GEMM kernels per pass
    basis_dense_peak: Array  # (rows,): the measured GPU's dense FLOP/s and HBM bytes/s
    basis_hbm: Array
    moe: Array  # (rows, len(GRID_1D)): speed-of-light ratio
    decode_attention: Array  # (rows, len(GRID_BATCH), len(GRID_CTX)): speed-of-light ratio
    prefill_attention: Array
    has: dict[str, Array]  # op -> bool (n,)
    # per element: op -> "measured <GPU folder> <engine> <version>" or "datasheet"
    sources: tuple[dict[str, str], ...]
    # whether any element is a what-if variant of the GPU its tables measured (build_pool sets it)
    variants: bool = True
    # per side of an attention-FFN deployment (SIDES), each row's key as that side runs it (row 0:
    # None): :func:`side_curves` builds the side's own curves from them
    sides: Mapping[str, tuple[KernelKey | None, ...]] = field(default_factory=dict)


def lookup_1d(curves: Array, row_of: Array, x: Array) -> Array:
    """Each element's curve (row ``row_of`` of ``curves``) at ``x``, whose last axis runs over
    the elements: piecewise linear in log2 x between grid points, flat beyond the grid."""
    width = curves.shape[1]
    u = np.log2(np.maximum(x, 1.0)) * (1.0 / STEP_1D)
    np.minimum(u, width - 1.000001, out=u)
    i = u.astype(np.intp)
    flat = row_of * width + i
    c = curves.ravel()
    lo = c[flat]
    return lo + (c[flat + 1] - lo) * (u - i)


def lookup_2d(curves: Array, row_of: Array, batch: Array, ctx: Array) -> Array:
    """Bilinear in (log2 batch, log2 context) on :data:`GRID_BATCH` x :data:`GRID_CTX`."""
    nb, nc = curves.shape[1], curves.shape[2]
    ub = np.log2(np.maximum(batch, 1.0))
    np.minimum(ub, nb - 1.000001, out=ub)
    uc = np.log2(np.maximum(ctx, 1.0))
    np.minimum(uc, nc - 1.000001, out=uc)
    ib, ic = ub.astype(np.intp), uc.astype(np.intp)
    ub -= ib  # now the weights
    uc -= ic
    flat = row_of * nb + ib
    flat *= nc
    flat += ic
    c = curves.ravel()
    lo = c[flat]
    lo += (c[flat + 1] - lo) * uc
    flat += nc
    hi = c[flat]
    hi += (c[flat + 1] - hi) * uc
    hi -= lo
    hi *= ub
    return lo + hi


def measured_curves(
    keys: Sequence[KernelKey | None], sides: Mapping[str, Sequence[KernelKey | None]] | None = None
) -> MeasuredCurves | None:
    """The curves of each pool element (None: an element without tables); None if no element has
    any measured op. ``sides``: each element's key on each side of an attention-FFN deployment
    (:func:`side_curves`), kept, not built."""
    distinct: dict[KernelKey, int] = {}
    row_of = np.array(
        [0 if k is None else distinct.setdefault(k, len(distinct) + 1) for k in keys], dtype=np.intp
    )
    ordered = list(distinct)
    first = {row: i for i, row in reversed(list(enumerate(row_of.tolist())))}  # each row's first element
    rows = [kernel_row(k) for k in ordered]
    if all(getattr(r, op) is None for r in rows for op in OPS):
        return None

    def stack(op: str, shape: tuple[int, ...]) -> tuple[Array, Array]:
        out = np.ones((len(rows) + 1, *shape))
        has = np.zeros(len(rows) + 1, dtype=bool)
        for i, r in enumerate(rows, start=1):
            v = getattr(r, op)
            if v is not None:
                out[i], has[i] = v, True
        return out, has[row_of]

    def per_key(fn: Callable[[KernelKey], float]) -> Array:
        return np.array([1.0] + [fn(k) for k in ordered], dtype=float)

    g, hg = stack("gemm", GRID_1D.shape)
    m, hm = stack("moe", GRID_1D.shape)
    d, hd = stack("decode_attention", (len(GRID_BATCH), len(GRID_CTX)))
    p, hp = stack("prefill_attention", (len(GRID_BATCH), len(GRID_CTX)))
    by_row = [{op: "datasheet" for op in OPS}] + [r.source(k) for r, k in zip(rows, ordered, strict=True)]
    return MeasuredCurves(
        row_of=row_of,
        gemm=g,
        gemm_flops_per_row=per_key(lambda k: sum(2.0 * n * kk * c for n, kk, c in k.gemm_shapes)),
        gemm_weight_bytes=per_key(lambda k: sum(n * kk * c for n, kk, c in k.gemm_shapes) * k.dense_bytes),
        gemm_calls=per_key(lambda k: sum(c for _, _, c in k.gemm_shapes)),
        basis_dense_peak=per_key(lambda k: k.dense_peak),
        basis_hbm=per_key(lambda k: k.hbm),
        moe=m,
        decode_attention=d,
        prefill_attention=p,
        has={"gemm": hg, "moe": hm, "decode_attention": hd, "prefill_attention": hp},
        sources=tuple(by_row[i] for i in row_of),
        sides={
            name: (None, *(side[first[r]] for r in range(1, len(ordered) + 1)))
            for name, side in (sides or {}).items()
        },
    )


def side_curves(curves: MeasuredCurves | None, side: str) -> MeasuredCurves | None:
    """The measured curves of one side (:data:`SIDES`) of an attention-FFN deployment of the pool
    whose curves are ``curves``: each pool prices the GEMMs it runs, attention's projections on
    the attention pool and the other dense GEMMs with the routed experts on the expert pool, not
    the whole model's on both. None where ``curves`` is, or holds no keys for that side."""
    if curves is None or side not in curves.sides:
        return None
    keys = curves.sides[side]
    out = measured_curves([keys[r] for r in curves.row_of.tolist()])
    return None if out is None else replace(out, variants=curves.variants)


@lru_cache(maxsize=4096)
def kernel_row(key: KernelKey) -> KernelRow:
    engine_dir = kernel_data.ENGINE_DIRS[key.engine]
    used: dict[str, str] = {}

    def curve(
        op: str, folder: str, table: str, build: Callable[[pl.DataFrame, tuple[str, ...]], Array | None]
    ) -> Array | None:
        """The first version (closest to the wanted one) whose table covers the key's shapes;
        ``build`` gets the table and what names it (system, folder, engine, version, table)."""
        found = kernel_data.table_versions(key.system, folder, engine_dir, table)
        for v in kernel_data.preferred_versions(found, key.version):
            df = kernel_data.read_table(key.system, folder, engine_dir, v, table)
            out = None if df is None else build(df, (key.system, folder, engine_dir, v, table))
            if out is not None:
                used[op] = f"{engine_dir} {v}"
                return out
        return None

    gemm = curve("gemm", "gemm", "gemm_perf", lambda df, source: _gemm_curve(key, df, source))
    moe = dec = pre = None
    if key.experts_per_token > 0:
        moe = curve("moe", "moe", "moe_perf", lambda df, _: _moe_curve(key, df))
    if key.mla:
        dec = curve(
            "decode_attention",
            "mla",
            "generation_mla_perf",
            lambda df, _: _attention_curve(key, df, prefill=False),
        )
        pre = curve(
            "prefill_attention",
            "mla",
            "context_mla_perf",
            lambda df, _: _attention_curve(key, df, prefill=True),
        )
    return KernelRow(gemm, moe, dec, pre, tuple(used.items()))


def _nearest(values: Sequence[float], target: float) -> float:
    """The value closest to ``target`` on a log scale."""
    vals = np.asarray(sorted(set(values)), dtype=float)
    return float(vals[np.argmin(np.abs(np.log(vals) - np.log(max(target, 1e-9))))])


def _ratio_on_grid(xs: Array, measured: Array, roof: Array, grid: Array, roof_grid: Array) -> Array:
    """Speed-of-light ratios on ``grid`` from seconds ``measured`` at sizes ``xs`` (``roof``: their
    rooflines; ``roof_grid``: the grid's). Between two measured sizes the time is interpolated
    linearly in (log size, log time), so it stays between the two measurements; beyond the
    measured range the ratio of the nearest end holds (the time follows the roofline)."""
    order = np.argsort(xs)
    xs, measured, roof = xs[order], measured[order], roof[order]
    lg, lx = np.log(grid), np.log(xs)
    inside = (grid >= xs[0]) & (grid <= xs[-1])
    between = np.exp(np.interp(lg, lx, np.log(measured))) / roof_grid
    return np.where(inside, between, np.interp(lg, lx, measured / roof))


def _gemm_curve(key: KernelKey, df: pl.DataFrame, source: tuple[str, ...]) -> Array | None:
    """Seconds of one forward pass's dense GEMMs on one attention rank, by its rows (tokens per
    rank): each of the model's GEMM shapes (:attr:`KernelKey.gemm_shapes`) at the measured
    efficiency of the table's nearest shape, summed over the layers that run it."""
    total = np.zeros_like(GRID_1D)
    for n, k, count in key.gemm_shapes:
        ratio = _gemm_ratio(df, source, key.gemm_dtype, n, k, key.dense_peak, key.dense_bytes, key.hbm)
        if ratio is None:
            return None
        total += count * ratio * _gemm_roofline(GRID_1D, n, k, key.dense_peak, key.dense_bytes, key.hbm)
    return total


_gemm_cache: dict[tuple[object, ...], Array | None] = {}


def _gemm_ratio(
    df: pl.DataFrame,
    source: tuple[str, ...],
    dtype: str,
    n: float,
    k: float,
    peak: float,
    nbytes: float,
    hbm: float,
) -> Array | None:
    """The speed-of-light ratio on :data:`GRID_1D` of the table's shape nearest (n, k) in
    ``dtype``; cached per table (``source`` names it) and shape: a pool's keys share most shapes."""
    import polars as pl

    ckey = (source, dtype, n, k, peak, nbytes, hbm)
    if ckey in _gemm_cache:
        return _gemm_cache[ckey]
    d = df.filter(pl.col("gemm_dtype") == dtype)
    out = None
    if not d.is_empty():
        tn, tk = _nearest(d["n"].unique().to_list(), n), _nearest(d["k"].unique().to_list(), k)
        rows = d.filter((pl.col("n") == tn) & (pl.col("k") == tk)).group_by("m").agg(pl.col("latency").min())
        if not rows.is_empty():
            m = rows["m"].to_numpy().astype(float)
            roof = _gemm_roofline(m, tn, tk, peak, nbytes, hbm)
            grid_roof = _gemm_roofline(GRID_1D, tn, tk, peak, nbytes, hbm)
            out = _ratio_on_grid(m, rows["latency"].to_numpy() * 1e-3, roof, GRID_1D, grid_roof)
    _gemm_cache[ckey] = out
    return out


def _gemm_roofline(m: Array, n: float, k: float, peak: float, nbytes: float, hbm: float) -> Array:
    return np.maximum(2.0 * m * n * k / peak, n * k * nbytes / hbm)


def _moe_curve(key: KernelKey, df: pl.DataFrame) -> Array | None:
    """The routed experts' ratio by the tokens entering the MoE layer of the instance (the tables'
    ``num_tokens``: the whole expert-parallel group's), for the nearest measured model shape and
    (expert TP, EP), with balanced routing (dse adds its own expert-load imbalance)."""
    import polars as pl

    df = df.filter((pl.col("moe_dtype") == key.moe_dtype) & (pl.col("distribution") == "balanced"))
    if df.is_empty():
        return None
    h = _nearest(df["hidden_size"].unique().to_list(), key.hidden)
    df = df.filter(pl.col("hidden_size") == h)
    inter = _nearest(df["inter_size"].unique().to_list(), key.expert_inter)
    df = df.filter(pl.col("inter_size") == inter)
    e = _nearest(df["num_experts"].unique().to_list(), key.experts)
    df = df.filter(pl.col("num_experts") == e)
    k = _nearest(df["topk"].unique().to_list(), key.experts_per_token)
    df = df.filter(pl.col("topk") == k)
    combos = df.select("moe_tp_size", "moe_ep_size").unique().to_numpy().astype(float)
    want = np.log([max(key.gpus / key.ep, 1.0), key.ep])
    tp, ep = combos[np.argmin(np.abs(np.log(combos) - want).sum(axis=1))]
    rows = (
        df.filter((pl.col("moe_tp_size") == tp) & (pl.col("moe_ep_size") == ep))
        .group_by("num_tokens")
        .agg(pl.col("latency").min())
        .sort("num_tokens")
    )
    t = rows["num_tokens"].to_numpy().astype(float)
    measured = rows["latency"].to_numpy() * 1e-3

    def roofline(tokens: Array) -> Array:
        flops = 2.0 * tokens * k * 3.0 * h * inter / (tp * ep)
        active = 1.0 - np.power(1.0 - k / e, tokens)
        weights = active * e * 3.0 * h * inter * key.weight_bytes / (tp * ep)
        return np.maximum(flops / key.expert_peak, weights / key.hbm)

    return _ratio_on_grid(t, measured, roofline(t), GRID_1D, roofline(GRID_1D))


def _attention_curve(key: KernelKey, df: pl.DataFrame, *, prefill: bool) -> Array | None:
    """MLA attention's ratio by (sequences per attention rank, context) at the nearest measured
    heads per GPU: the decode kernel over ``step`` cached tokens, the prefill kernel over ``isl``
    new ones (causal)."""
    import polars as pl

    df = df.filter(pl.col("kv_cache_dtype") == key.kv_dtype)
    if df.is_empty():
        return None
    heads = _nearest(df["num_heads"].unique().to_list(), key.q_heads / key.attn_tp)
    ctx_col = "isl" if prefill else "step"
    rows = (
        df.filter(pl.col("num_heads") == heads).group_by("batch_size", ctx_col).agg(pl.col("latency").mean())
    )
    b = rows["batch_size"].to_numpy().astype(float)
    c = np.maximum(rows[ctx_col].to_numpy().astype(float), 1.0)
    measured = rows["latency"].to_numpy() * 1e-3

    def roofline(batch: Array, ctx: Array) -> Array:
        if prefill:  # causal: each new token attends to half the prompt on average
            flops = 2.0 * batch * ctx * heads * (0.5 * ctx) * (key.prefill_qk + key.prefill_v)
        else:
            flops = 2.0 * batch * heads * ctx * (key.decode_qk + key.decode_v)
        return np.maximum(flops / key.attn_peak, batch * ctx * key.kv_bytes_per_token_layer / key.hbm)

    # along the context for each measured batch, then along the batch for each grid context
    batches = np.unique(b)
    by_batch = np.empty((len(batches), len(GRID_CTX)))
    for j, bb in enumerate(batches):
        sel = b == bb
        by_batch[j] = _ratio_on_grid(
            c[sel], measured[sel], roofline(bb, c[sel]), GRID_CTX, roofline(bb, GRID_CTX)
        )
    out = np.empty((len(GRID_BATCH), len(GRID_CTX)))
    for col, ctx in enumerate(GRID_CTX):
        seconds = by_batch[:, col] * roofline(batches, ctx)
        out[:, col] = _ratio_on_grid(
            batches, seconds, roofline(batches, ctx), GRID_BATCH, roofline(GRID_BATCH, ctx)
        )
    return out
