"""The report sections of a grid study (``[sweep]``): the grid itself, what-if hardware against
its base at the same point, the fast memory each stage holds per GPU, and the dynamics axes.

Each section reads the ``trials`` and ``placements`` tables (``x_<axis>`` columns hold the point)
and returns Markdown; :func:`grid_figures` draws the PNGs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dse.metrics import METRIC_COLUMNS, METRICS, statistic, unit_label
from dse.study.grid import DYNAMICS_AXES
from dse.study.markdown import COST_SPEC, fmt, md_table
from dse.study.report_figures import HERE, Drawer, Figure, _draw, _pyplot
from dse.study.spec import StudySpec

ROLES = ("prefill", "midfill", "mixed", "decode", "attention", "ffn")
MAX_SERIES = 12  # lines of the grid figure
CLAIM_GB = (400.0, 500.0)  # "a single stage may need 400-500 GB of fast local memory"
SIDE_ROLES = ("midfill", "ffn")  # pools a design may have beside its prefill / decode pair
SPLIT_TOPOLOGIES = ("afd", "four-stage")  # designs with an FFN (expert) pool
Side = tuple[str, str, str]  # role, hardware, shape of a pool, as cells


def axes_of(spec: StudySpec) -> list[str]:
    return list(spec.sweep.axes())


def _label(row: dict[str, Any], axes: list[str]) -> str:
    return ", ".join(f"{a}={fmt(row.get('x_' + a))}" for a in axes)


def side_pools(placements: pl.DataFrame) -> dict[int, list[Side]]:
    """Each trial's pools in the ``placements`` table, as (role, hardware, shape) in pool order;
    trials without a recorded pool are left out."""
    need = ["trial", "role", "hardware", "shape"]
    if placements.is_empty() or not set(need) <= set(placements.columns):
        return {}
    df = placements.sort(["trial", "pool"]) if "pool" in placements.columns else placements
    out: dict[int, list[Side]] = {}
    for trial, role, hw, shape in df.select(need).iter_rows():
        out.setdefault(int(trial), []).append((str(role), fmt(hw), fmt(shape)))
    return out


def sides_of(row: dict[str, Any], pools: dict[int, list[Side]]) -> list[Side]:
    """The midfill and FFN (expert) pools of a trials row's design, distinct, midfill first: its
    placement's (``pools``, from :func:`side_pools`); where none is recorded, the row's own
    ``p_midfill_*``, and for an attention-FFN design the decode side's hardware and shape, which a
    search trial gives both halves (attention and FFN) of its decode side."""
    own = pools.get(row["trial"]) if row.get("trial") is not None else None
    if own is not None:
        found = [p for p in own if p[0] in SIDE_ROLES]
    else:
        found = []
        if row.get("p_midfill_hardware"):
            found.append(("midfill", fmt(row["p_midfill_hardware"]), fmt(row.get("p_midfill_shape"))))
        if row.get("p_topology") in SPLIT_TOPOLOGIES:
            found.append(("ffn", fmt(row.get("p_decode_hardware")), fmt(row.get("p_decode_shape"))))
    return sorted(dict.fromkeys(found), key=lambda p: SIDE_ROLES.index(p[0]))


def side_cell(sides: list[Side], part: int) -> str:
    """`` + midfill b200 + ffn b300``: each side pool role's distinct hardware (``part`` 1) or
    shapes (``part`` 2), to follow a design's prefill / decode pair; "" for a design without one."""
    text = ""
    for role in SIDE_ROLES:
        values = list(dict.fromkeys(p[part] for p in sides if p[0] == role))
        text += f" + {role} {', '.join(values)}" if values else ""
    return text


def grid_section(spec: StudySpec, trials: pl.DataFrame, placements: pl.DataFrame | None = None) -> str:
    head = "## Grid"
    axes = axes_of(spec)
    if trials.is_empty():
        return f"{head}\n\nNo finished points."
    dynamics = any(a in DYNAMICS_AXES for a in axes)
    pct = f"p{spec.slo.percentile:g}"
    cols: list[tuple[str, str, str, float]] = [
        ("GPUs", "gpus", ",.0f", 1.0),
        ("$/M tokens", "usd_per_million_tokens", COST_SPEC, 1.0),
        ("tokens/s/GPU", "tokens_per_s_per_gpu", ",.0f", 1.0),
        (f"TTFT {pct} (s)", "ttft_pct_s", ".2f", 1.0),
        ("TPOT mean (ms)", "tpot_mean_s", ".1f", 1e3),
        ("peak HBM (GB/GPU)", "hbm_peak_gb_per_gpu", ".0f", 1.0),
    ]
    if dynamics:
        cols += [("TTFT p99 (s)", "ttft_p99_s", ".2f", 1.0)] if spec.slo.percentile != 99 else []
        cols += [
            ("peak prefill queue", "queue_peak_prefill_requests", ",.0f", 1.0),
            ("peak decode buffer", "queue_peak_buffer_requests", ",.0f", 1.0),
            ("planner moves", "planner_moves", ",.0f", 1.0),
            ("swing (prefill servers)", "swing_prefill_servers", ".1f", 1.0),
            ("swing (prefill queue)", "swing_prefill_queue_requests", ".1f", 1.0),
        ]
    rows = []
    pools = side_pools(placements if placements is not None else pl.DataFrame())
    for r in trials.sort(["x_" + a for a in axes]).iter_rows(named=True):
        design = design_label(r, sides_of(r, pools))
        verdict = "ok" if r.get("feasible") else f"fails: {fmt(r.get('binding'))[:60]}"
        rows.append(
            [fmt(r.get("x_" + a)) for a in axes]
            + [design]
            + [fmt(r.get(c), s, k) for _, c, s, k in cols]
            + [verdict]
        )
    table = md_table(
        axes + ["design"] + [h for h, *_ in cols] + ["verdict"],
        rows,
        [False] * (len(axes) + 1) + [True] * len(cols) + [False],
    )
    intro = (
        f"{trials.height} of {spec.sweep.size()} points. Each point's design is the full placement's "
        "(every listed shape and topology, one MILP each): the cheapest by the MILP's objective that "
        "the simulators (fluid and engine-level) hold in the point's traffic and the study's own "
        "dynamics, a rejected topology solved again with the missed target tightened; where none "
        "holds, the MILP's best design, failing on what binds."
    )
    if "milp_resolves" in trials.columns:
        again = int((trials["milp_resolves"].fill_null(0) > 0).sum())
        intro += f" {again} of the points' designs were solved again before they held (`milp_resolves`)."
    if "milp_topology_rank" in trials.columns:
        other = int((trials["milp_topology_rank"].fill_null(0) > 0).sum())
        if other:
            intro += (
                f" {other} of the points are answered in a topology the MILP did not rank cheapest:"
                " the cheapest one's design failed the simulations, or cost more once solved again"
                " (`milp_topology_rank`)."
            )
    if dynamics:
        intro += (
            " Points that differ only in the dynamics axes share that design, checked in their own"
            " dynamics: a point that fails there is the answer, not sized anew."
        )
    return f"{head}\n\n{intro}\n\n{table}"


def design_label(row: dict[str, Any], sides: Sequence[Side] = ()) -> str:
    """``topology: hardware/shape`` of each side of a design; an aggregated design's one unit once;
    then its midfill and FFN (expert) pools (``sides``, from :func:`sides_of`), named by role."""
    if not row.get("p_topology"):
        return "-"
    prefill = f"{row.get('p_prefill_hardware')}/{row.get('p_prefill_shape')}"
    decode = f"{row.get('p_decode_hardware')}/{row.get('p_decode_shape')}"
    one = prefill == decode and row.get("p_topology") == "aggregated"
    extra = "".join(f" + {role} {hw}/{shape}" for role, hw, shape in sides)
    return f"{row.get('p_topology')}: {prefill if one else f'{prefill} + {decode}'}{extra}"


def effects_section(spec: StudySpec, trials: pl.DataFrame) -> str:
    """Each axis value against all points that share it: how many pass, and the medians."""
    head = "## Effect of each axis"
    if trials.is_empty():
        return f"{head}\n\nNo finished points."
    obj = objective_column(spec)
    cols = [(f"median {obj}{_unit(spec)}", obj, "median")]
    if any(a in DYNAMICS_AXES for a in axes_of(spec)):
        cols += [("median TTFT p99 (s)", "ttft_p99_s", "median")] if obj != "ttft_p99_s" else []
        cols += [
            ("max prefill queue", "queue_peak_prefill_requests", "max"),
            ("max decode buffer", "queue_peak_buffer_requests", "max"),
            ("median planner moves", "planner_moves", "median"),
            ("max swing (prefill servers)", "swing_prefill_servers", "max"),
            ("max swing (prefill queue)", "swing_prefill_queue_requests", "max"),
        ]
    cols = [c for c in cols if c[1] in trials.columns]
    rows = []
    for a in axes_of(spec):
        for (value,), g in trials.sort("x_" + a).group_by(["x_" + a], maintain_order=True):
            ok = int(g["feasible"].sum())
            stats = [getattr(g[c].cast(pl.Float64).drop_nulls(), how)() for _, c, how in cols]
            rows.append(
                [a, fmt(value), str(g.height), f"{ok} ({ok / g.height:.0%})"] + [fmt(v) for v in stats]
            )
    intro = "Each value of each axis, over every point that has it (the other axes vary)."
    table = md_table(
        ["axis", "value", "points", "feasible"] + [h for h, *_ in cols],
        rows,
        [False, False, True, True] + [True] * len(cols),
    )
    return f"{head}\n\n{intro}\n\n{table}"


def _unit(spec: StudySpec) -> str:
    """`` (TTFT p99, s)``: what the study's first objective holds (a latency's statistic at the
    study's percentile, its unit), or nothing when it says neither."""
    return unit_label(spec.objectives.names[0], spec.slo.percentile)


def _sign(spec: StudySpec) -> float:
    """+1 when the first objective is minimised, -1 when maximised: sign * change < 0 is better."""
    return -1.0 if METRICS[spec.objectives.names[0]].direction == "maximize" else 1.0


def objective_column(spec: StudySpec) -> str:
    """The trials column of the study's first objective (a recorded metric)."""
    return METRIC_COLUMNS.get(spec.objectives.names[0], "usd_per_million_tokens")


def whatif_frame(spec: StudySpec, trials: pl.DataFrame) -> pl.DataFrame:
    """One row per variant and point: the variant's first objective (cost, GPUs, ...) against its
    base's at the same values of the other axes (``change_pct`` < 0: the variant needs less)."""
    axes = axes_of(spec)
    cost = objective_column(spec)
    if not spec.variants or "hardware" not in axes or trials.is_empty() or cost not in trials.columns:
        return pl.DataFrame()
    others = ["x_" + a for a in axes if a != "hardware"]
    # a design without a price (hardware the study's tier does not price) has no price to save:
    # its shadow prices, recorded as 0, are missing here
    priced = pl.col("usd_per_hour").is_not_null() if "usd_per_hour" in trials.columns else pl.lit(True)
    ok = (
        trials.filter(pl.col("feasible"))
        .with_columns(pl.when(priced).then(pl.col(c)).otherwise(None).alias(c) for c in _prices(trials))
        .select(["x_hardware", *others, cost] + _prices(trials))
        .drop_nulls(cost)
    )
    frames = []
    for v in spec.variants:
        base = ok.filter(pl.col("x_hardware") == v.base).drop("x_hardware").rename({cost: "base_cost"})
        var = ok.filter(pl.col("x_hardware") == v.id).select(["x_hardware", *others, cost])
        if base.is_empty() or var.is_empty():
            continue
        j = var.join(base, on=others, how="inner") if others else var.join(base, how="cross")
        frames.append(
            j.with_columns(
                pl.lit(v.id).alias("variant"),
                pl.lit(v.base).alias("base"),
                pl.lit(v.hbm_bandwidth_scale).alias("bandwidth_scale"),
                pl.lit(v.hbm_capacity_scale).alias("capacity_scale"),
                ((pl.col(cost) / pl.col("base_cost") - 1.0) * 100.0).alias("change_pct"),
            )
        )
    return pl.concat(frames, how="diagonal") if frames else pl.DataFrame()


def _prices(trials: pl.DataFrame) -> list[str]:
    return [
        c
        for c in ("hbm_bandwidth_usd_per_tbps_gpu_hour", "hbm_capacity_usd_per_gb_gpu_hour")
        if c in trials.columns
    ]


def whatif_section(spec: StudySpec, trials: pl.DataFrame) -> str:
    head = "## What-if hardware"
    if not spec.variants:  # (it had said no feasible pair was found, as if variants had run)
        return f"{head}\n\nThe study has no what-if variants (`[[variants]]`)."
    wf = whatif_frame(spec, trials)
    if wf.is_empty():
        return f"{head}\n\nNo feasible pair of a variant and its base at the same point."
    others = [a for a in axes_of(spec) if a != "hardware"]
    col = objective_column(spec)
    lines = [
        f"The study's first objective, {col}{_unit(spec)}, of each what-if variant against its base at "
        "the same point (negative change: the variant needs less). Shadow prices are the base design's, per "
        "GPU-hour: what +1 TB/s or +1 GB of HBM per GPU would save (none without a price, nor where the "
        "design that held the point is not the MILP's first: a topology it ranked lower, "
        "`milp_topology_rank` > 0, whose prices are not solved)."
    ]
    for v in spec.variants:
        part = wf.filter(pl.col("variant") == v.id)
        if part.is_empty():
            continue
        raw = part["change_pct"].to_numpy()
        ch = _sign(spec) * raw  # < 0: better, whatever the direction
        lines.append(
            f"- **{v.id}** (bandwidth x{v.hbm_bandwidth_scale:g}, capacity x{v.hbm_capacity_scale:g}): "
            f"better at {int((ch < -0.05).sum())} of {ch.size} points; median change "
            f"{np.median(raw):+.1f}%, "
            f"range {raw.min():+.1f}% to {raw.max():+.1f}%{_one_side(trials, v.id, v.base, others)}"
        )
    lines += _head_to_head(spec, wf, others)
    rows = []
    for r in wf.sort(["x_" + a for a in others] + ["variant"]).iter_rows(named=True):
        rows.append(
            [fmt(r.get("x_" + a)) for a in others]
            + [
                r["variant"],
                fmt(r["base_cost"], ".4g"),
                fmt(r[col], ".4g"),
                fmt(r["change_pct"], "+.1f"),
                fmt(r.get("hbm_bandwidth_usd_per_tbps_gpu_hour"), ".3g"),
                fmt(r.get("hbm_capacity_usd_per_gb_gpu_hour"), ".3g"),
            ]
        )
    table = md_table(
        others
        + [
            "variant",
            f"base {col}{_unit(spec)}",
            f"variant {col}{_unit(spec)}",
            "change %",
            "BW $/h per TB/s/GPU",
            "HBM $/h per GB/GPU",
        ],
        rows,
        [False] * (len(others) + 1) + [True] * 5,
    )
    return f"{head}\n\n" + "\n".join(lines) + f"\n\n{table}"


def _one_side(trials: pl.DataFrame, variant: str, base: str, others: list[str]) -> str:
    """The points where only one of a variant and its base is feasible, which the comparison
    leaves out (a variant that makes a point feasible is no change in percent), as a clause."""
    keys = ["x_" + a for a in others]

    def side(hw: str, name: str) -> pl.DataFrame:
        return trials.filter(pl.col("x_hardware") == hw).select([*keys, pl.col("feasible").alias(name)])

    a, b = side(variant, "v"), side(base, "b")
    j = a.join(b, on=keys, how="inner") if keys else a.join(b, how="cross")
    only_v = j.filter(pl.col("v") & ~pl.col("b")).height
    only_b = j.filter(~pl.col("v") & pl.col("b")).height
    if not only_v and not only_b:
        return ""
    return (
        f"; not counted: {only_v} point{'s' if only_v != 1 else ''} feasible with the variant only, "
        f"{only_b} with the base only"
    )


def _head_to_head(spec: StudySpec, wf: pl.DataFrame, others: list[str]) -> list[str]:
    """Per base, each bandwidth-only variant against the capacity-only one of the same scale:
    which saves more, how often. Variants of unequal scales are not set against each other (the
    first of each had been: +50% bandwidth against +25% capacity, by the order of the file)."""
    out = []
    for v in spec.variants:
        if not (v.hbm_bandwidth_scale > 1 and v.hbm_capacity_scale == 1):
            continue
        scale = v.hbm_bandwidth_scale
        same = (
            c
            for c in spec.variants
            if c.base == v.base and (c.hbm_bandwidth_scale, c.hbm_capacity_scale) == (1, scale)
        )
        cap = next(same, None)
        if cap is None:
            continue
        keys = ["x_" + a for a in others]
        a = wf.filter(pl.col("variant") == v.id).select([*keys, pl.col("change_pct").alias("bw")])
        b = wf.filter(pl.col("variant") == cap.id).select([*keys, pl.col("change_pct").alias("cap")])
        j = a.join(b, on=keys, how="inner") if keys else a.join(b, how="cross")
        if j.is_empty():
            continue
        d = _sign(spec) * (j["bw"] - j["cap"]).to_numpy()  # < 0: bandwidth does better
        out.append(
            f"- **{v.base}: bandwidth against capacity, each x{v.hbm_bandwidth_scale:g}.** {v.id} improves "
            f"more than {cap.id} at {int((d < -0.05).sum())} of {d.size} points, less at "
            f"{int((d > 0.05).sum())}, the same (within 0.05 points) at {int((np.abs(d) <= 0.05).sum())}."
        )
    return out


def stage_memory_frame(spec: StudySpec, trials: pl.DataFrame, placements: pl.DataFrame) -> pl.DataFrame:
    """Per feasible point and role, the largest per-GPU HBM residency of its pools (GB): in all
    (``hbm_gb_per_gpu``), the working set (weights, KV of the work in flight, activations) and
    the weights alone."""
    need = {"hbm_gb_per_gpu", "working_gb_per_gpu", "weights_gb_per_gpu"}
    if trials.is_empty() or placements.is_empty() or not need <= set(placements.columns):
        return pl.DataFrame()
    xs = ["x_" + a for a in axes_of(spec)]
    ok = trials.filter(pl.col("feasible")).select(["trial", *xs])
    return (
        placements.join(ok, on="trial", how="inner")
        .group_by(["trial", *xs, "role"])
        .agg(pl.col(sorted(need)).max())
        .sort([*xs, "role"])
    )


def stage_memory_section(spec: StudySpec, trials: pl.DataFrame, placements: pl.DataFrame) -> str:
    head = "## Fast memory per stage"
    sm = stage_memory_frame(spec, trials, placements)
    if sm.is_empty():
        return f"{head}\n\nNo feasible points."
    axes = axes_of(spec)
    xs = ["x_" + a for a in axes]
    roles = [r for r in ROLES if r in set(sm["role"].to_list())]
    rows = []
    for _, g in sm.group_by(["trial"], maintain_order=True):
        first = g.row(0, named=True)
        by = {r["role"]: r for r in g.iter_rows(named=True)}
        cells = [_both(by[r]) if r in by else "-" for r in roles]
        rows.append([fmt(first.get(x)) for x in xs] + cells)
    total, working = sm["hbm_gb_per_gpu"].to_numpy(), sm["working_gb_per_gpu"].to_numpy()
    lo = CLAIM_GB[0]
    lines = [
        "Largest HBM residency per GPU of each stage's pools at the chosen design, in GB: all of it, "
        "and in brackets the working set (weights, KV of the requests in flight, activations); the "
        "rest is KV resting in HBM between a session's turns. A stage is held to its hardware's HBM; "
        "a what-if variant with more capacity shows what a stage uses when it has it.",
        f"- Largest residency: {total.max():.0f} GB per GPU; stage pools at or above {lo:g} GB: "
        f"{int((total >= lo).sum())} of {total.size}.",
        f"- Largest working set: {working.max():.0f} GB per GPU; at or above {lo:g} GB: "
        f"{int((working >= lo).sum())} of {working.size}.",
    ]
    table = md_table(axes + [f"{r} GB/GPU" for r in roles], rows, [False] * len(axes) + [True] * len(roles))
    return f"{head}\n\n" + "\n".join(lines) + f"\n\n{table}"


def _both(row: dict[str, Any]) -> str:
    return f"{fmt(row['hbm_gb_per_gpu'], '.0f')} ({fmt(row['working_gb_per_gpu'], '.0f')})"


def grid_figures(folder: Path, spec: StudySpec, trials: pl.DataFrame, drawer: Drawer = HERE) -> list[Figure]:
    return [
        _grid_png(folder / "grid.png", spec, trials, drawer),
        _whatif_png(folder / "whatif.png", spec, trials, drawer),
    ]


def _grid_png(path: Path, spec: StudySpec, trials: pl.DataFrame, drawer: Drawer) -> Figure:
    """The first objective across the first axis, one line per combination of the others."""
    axes = axes_of(spec)
    y = spec.objectives.names[0]
    col = objective_column(spec)
    ok = trials.filter(pl.col("feasible")) if not trials.is_empty() else trials
    skipped = "" if not ok.is_empty() and col in ok.columns and axes else "no feasible points"
    rest = ["x_" + a for a in axes[1:]]
    groups = _series(ok, rest) if rest and not skipped else {(): ok}
    caption = f"{y}{_unit(spec)} across {axes[0] if axes else 'the grid'}, feasible points only"
    if len(groups) > MAX_SERIES:
        caption += (
            f"; the first {MAX_SERIES} of the {len(groups)} combinations of "
            f"{', '.join(axes[1:])} (in the order of their values), the grid table has every point"
        )
    if skipped:
        return _draw(drawer, path, caption, skipped, grid_figure)
    x = "x_" + axes[0]
    shown = [g.select(x, col) for g in list(groups.values())[:MAX_SERIES]]  # what the figure reads
    keys = list(groups)[:MAX_SERIES]
    xs = list(dict.fromkeys(ok.sort(x)[x].to_list()))
    return _draw(
        drawer, path, caption, skipped, grid_figure, axes[0], rest, keys, shown, xs, col, y + _unit(spec)
    )


def grid_figure(
    x_axis: str,
    rest: list[str],
    keys: list[tuple[Any, ...]],
    shown: list[pl.DataFrame],
    xs: list[Any],
    col: str,
    ylabel: str,
) -> Any:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (key, g) in enumerate(zip(keys, shown, strict=True)):
        g = g.sort("x_" + x_axis)
        pos = [xs.index(v) for v in g["x_" + x_axis].to_list()]
        label = ", ".join(f"{a[2:]}={fmt(k)}" for a, k in zip(rest, key, strict=True)) or "all"
        ax.plot(pos, g[col].to_numpy(), marker="o", lw=1.0, label=label, color=plt.get_cmap("tab20")(i % 20))
    ax.set_xticks(range(len(xs)), [fmt(v) for v in xs], fontsize=8)  # as the tables write them (64,000)
    ax.set_xlabel(x_axis)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def _series(ok: pl.DataFrame, rest: list[str]) -> dict[tuple[Any, ...], pl.DataFrame]:
    """The rows of each combination of the ``rest`` columns (a line of the grid figure), in the
    order of their values (missing last)."""
    groups = ok.partition_by(rest, as_dict=True)
    return dict(sorted(groups.items(), key=lambda kv: [(k is None, k) for k in kv[0]]))


def _whatif_png(path: Path, spec: StudySpec, trials: pl.DataFrame, drawer: Drawer) -> Figure:
    wf = whatif_frame(spec, trials)
    others = ["x_" + a for a in axes_of(spec) if a != "hardware"]
    skipped = (
        ""
        if not wf.is_empty()
        else "the study has no what-if variants"
        if not spec.variants
        else "no what-if variants with a feasible base at the same point"
    )
    caption = "Each what-if variant against its base, per point"
    said = statistic(objective_column(spec), spec.slo.percentile)  # a latency's: TTFT p99
    column = objective_column(spec) + (f" ({said})" if said else "")
    return _draw(drawer, path, caption, skipped, whatif_figure, wf, others, column)


def whatif_figure(wf: pl.DataFrame, others: list[str], column: str) -> Any:
    plt = _pyplot()
    keys = wf.select(others).unique(maintain_order=True) if others else pl.DataFrame({"k": [0]})
    labels = [", ".join(fmt(v) for v in row) for row in keys.iter_rows()]  # as the tables write them: 64,000
    variants = list(dict.fromkeys(wf["variant"].to_list()))
    fig, ax = plt.subplots(figsize=(max(7.0, 0.45 * len(labels) * len(variants) + 2), 5))
    width = 0.8 / max(len(variants), 1)
    for i, v in enumerate(variants):
        part = wf.filter(pl.col("variant") == v)
        lookup = {tuple(r[:-1]): r[-1] for r in part.select([*others, "change_pct"]).iter_rows()}
        vals = (
            [lookup.get(tuple(row), np.nan) for row in keys.iter_rows()]
            if others
            else [part["change_pct"][0]]
        )
        ax.bar(np.arange(len(labels)) + i * width, vals, width, label=v)
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xticks(np.arange(len(labels)) + 0.4 - width / 2, labels, rotation=60, ha="right", fontsize=6)
    ax.set_ylabel(f"{column} change vs base, %")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
