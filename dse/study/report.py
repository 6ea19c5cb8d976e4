"""A study's report: one Markdown file (``report.md``) with plain tables, and PNG figures beside it.

:func:`write_report` reads the polars tables of :mod:`dse.study.results` and, when given, the
:class:`BestDesign` re-evaluated in full. Tables may be empty (a study without finished trials); the
report then says so, and a figure without data is skipped with a line saying why. Every file is
written atomically.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dse.atomic import atomic_path
from dse.study.metrics import METRICS
from dse.study.spec import StudySpec

TOP_N = 5  # rows of the best-designs table
HBM_LINE_GB = 80.0  # the HBM of an H100/H200-class GPU: designs below it fit more hardware
BINDING_CHARS = 80  # binding texts are grouped on their first characters (the numbers vary after)
STAGES = ("gemm", "attention", "communication", "overhead")
PNG_DPI = 110


@dataclass(frozen=True)
class BestDesign:
    """The study's best trial re-evaluated in full, as plain values (built by :mod:`dse.study.best`)."""

    trial: int
    pools: list[dict[str, Any]]  # rows like placements_frame: role, hardware, shape, instances, gpus, ...
    metrics: dict[str, float | None]  # keys of METRICS
    shadow_prices: list[dict[str, Any]]  # hardware, resource, unit, usd_per_hour, usd_per_gpu_hour
    sim: dict[str, Any]  # stable, oscillating, oscillation_period_s, ttft_*_s, tpot_mean_s, e2e_mean_s, ...
    stage_ms: dict[str, dict[str, float]]  # pool label -> stage -> ms of one step


@dataclass(frozen=True)
class Figure:
    """A PNG of the report: drawn, or skipped for the reason given."""

    file: str
    caption: str
    skipped: str = ""  # why it was not drawn; "" when it was


# (header with unit, column, format spec, scale) of the trial tables
Column = tuple[str, str, str, float]


def write_report(
    folder: Path,
    *,
    spec: StudySpec,
    objectives: list[tuple[str, str]],
    tables: dict[str, pl.DataFrame],
    best: BestDesign | None,
) -> Path:
    """Write ``folder/report.md`` and its PNGs; return the Markdown path.

    Parameters
    ----------
    folder
        Where the report goes (created if missing).
    spec
        The study, for its description, traffic and targets.
    objectives
        ``(name, direction)`` pairs; the first ranks the best designs.
    tables
        ``trials``, ``pareto``, ``placements``, ``kv_tiers`` and ``sim_timeseries`` as built by
        :mod:`dse.study.results`; a missing or column-less table counts as empty.
    best
        The best design in full, or None when there is none.

    Returns
    -------
    Path
        ``folder/report.md``.
    """
    trials = tables.get("trials", pl.DataFrame())
    feasible = feasible_trials(trials)
    pareto = unique_designs(tables.get("pareto", pl.DataFrame()))
    sim_trial, sim = trajectory_of(tables.get("sim_timeseries", pl.DataFrame()), best)
    figures = [
        _pareto_png(folder / "pareto.png", spec.name, feasible, pareto),
        _stage_png(folder / "stage_breakdown.png", best),
        _hbm_png(folder / "hbm_residency.png", feasible),
        _trajectory_png(folder / "sim_trajectory.png", sim_trial, sim),
    ]
    sections = [
        _overview(spec, objectives, trials, feasible),
        _best_designs(spec, objectives, feasible),
        _pareto_section(spec, objectives, pareto),
        _binding_section(trials),
        _detail_section(best),
        _hbm_section(feasible, pareto),
        _figures_section(figures),
    ]
    path = folder / "report.md"
    with atomic_path(path) as tmp:
        tmp.write_text("\n\n".join(sections) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# table selection


def feasible_trials(trials: pl.DataFrame) -> pl.DataFrame:
    """The feasible rows of the trials table (empty when it has none or no ``feasible`` column)."""
    if trials.is_empty() or "feasible" not in trials.columns:
        return pl.DataFrame()
    return trials.filter(pl.col("feasible").fill_null(False))


def unique_designs(df: pl.DataFrame) -> pl.DataFrame:
    """Rows with distinct parameter sets (``p_*`` columns), first occurrence kept, order kept."""
    params = [c for c in df.columns if c.startswith("p_")]
    if df.is_empty() or not params:
        return df
    return df.unique(subset=params, keep="first", maintain_order=True)


def ranked(feasible: pl.DataFrame, objective: tuple[str, str]) -> pl.DataFrame:
    """Feasible trials, best first on one objective (its ``objective_<name>`` column); unranked
    (trial order) when the column is missing."""
    col = f"objective_{objective[0]}"
    if feasible.is_empty() or col not in feasible.columns:
        return feasible
    return feasible.sort(col, descending=objective[1] == "maximize", nulls_last=True)


def trajectory_of(sim: pl.DataFrame, best: BestDesign | None) -> tuple[int | None, pl.DataFrame]:
    """The simulated time series of the best trial, or of the first trial the table holds."""
    if sim.is_empty() or "trial" not in sim.columns or "t_s" not in sim.columns:
        return None, pl.DataFrame()
    numbers = sim["trial"].unique(maintain_order=True).to_list()
    trial = best.trial if best is not None and best.trial in numbers else numbers[0]
    return trial, sim.filter(pl.col("trial") == trial).sort("t_s")


def below_share(values: np.ndarray, limit: float) -> tuple[int, int]:
    """How many finite values lie strictly below ``limit``, and how many finite values there are."""
    finite = values[np.isfinite(values)]
    return int(np.count_nonzero(finite < limit)), int(finite.size)


def _floats(df: pl.DataFrame, col: str) -> np.ndarray:
    if df.is_empty() or col not in df.columns:
        return np.empty(0)
    return df[col].cast(pl.Float64).drop_nulls().to_numpy()


# ---------------------------------------------------------------------------------------------
# Markdown


def fmt(value: Any, spec: str = "", scale: float = 1.0) -> str:
    """One table cell: ``-`` for missing or non-finite numbers, yes/no for booleans, numbers
    with ``spec`` (or four significant digits), text with Markdown pipes escaped."""
    if value is None:
        return "-"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | float | np.integer | np.floating):
        x = float(value) * scale
        if not math.isfinite(x):
            return "-"
        if spec:
            return format(x, spec)
        if isinstance(value, int | np.integer) and scale == 1.0:
            return f"{int(value):,}"
        if abs(x) < 1e-9:  # solver and integration noise around zero
            return "0"
        return f"{x:,.4g}" if abs(x) < 1e4 else f"{x:,.0f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool] = ()) -> str:
    """A Markdown table of formatted cells; ``numeric`` columns are right-aligned."""
    align = [("---:" if i < len(numeric) and numeric[i] else "---") for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _pair(row: dict[str, Any], a: str, b: str) -> str:
    """``x`` when both sides agree (aggregated units), else ``prefill / decode``."""
    x, y = row.get(a), row.get(b)
    return fmt(x) if x == y else f"{fmt(x)} / {fmt(y)}"


def _trial_columns(spec: StudySpec) -> list[Column]:
    pct = f"p{spec.slo.percentile:g}"
    return [
        ("GPUs", "gpus", ",.0f", 1.0),
        ("$/M tokens", "usd_per_million_tokens", ".3f", 1.0),
        ("tokens/s/GPU", "tokens_per_s_per_gpu", ",.0f", 1.0),
        ("tokens/s/user", "tokens_per_s_per_user", ".1f", 1.0),
        ("TTFT mean (s)", "ttft_mean_s", ".2f", 1.0),
        (f"TTFT {pct} (s)", "ttft_pct_s", ".2f", 1.0),
        ("TPOT (ms)", "tpot_mean_s", ".1f", 1e3),
        ("peak HBM (GB/GPU)", "hbm_peak_gb_per_gpu", ".1f", 1.0),
    ]


def _design_table(df: pl.DataFrame, columns: list[Column]) -> str:
    """Trial, topology, KV policy, hardware and shapes, then ``columns``."""
    headers = ["trial", "topology", "KV policy", "hardware (prefill / decode)", "shape (prefill / decode)"]
    rows = [
        [
            fmt(r.get("trial")),
            fmt(r.get("p_topology")),
            fmt(r.get("p_kv_policy")),
            _pair(r, "p_prefill_hardware", "p_decode_hardware"),
            _pair(r, "p_prefill_shape", "p_decode_shape"),
        ]
        + [fmt(r.get(col), spec, scale) for _, col, spec, scale in columns]
        for r in df.iter_rows(named=True)
    ]
    numeric = [True, False, False, False, False] + [True] * len(columns)
    return md_table(headers + [h for h, *_ in columns], rows, numeric)


def _objective_label(name: str, direction: str) -> str:
    unit = METRICS[name].unit if name in METRICS else ""
    return f"{name} ({unit}, {direction})" if unit else f"{name} ({direction})"


def _overview(
    spec: StudySpec, objectives: list[tuple[str, str]], trials: pl.DataFrame, feasible: pl.DataFrame
) -> str:
    w, slo = spec.workload, spec.slo
    traffic = (
        f"{w.requests_per_s:g} requests/s; fresh prompts of {w.input_tokens:,.0f} tokens, "
        f"{w.output_tokens:,.0f} output tokens"
    )
    if w.returning_share > 0:
        traffic += (
            f"; {w.returning_share:.0%} returning turns reusing {w.cached_prefix_tokens:,.0f} cached "
            f"tokens plus {w.suffix_tokens:,.0f} new ones"
        )
    n, ok = trials.height, feasible.height
    lines = [
        f"# Study report: {spec.name}",
        "",
        spec.description or "(no description)",
        "",
        f"- **Model:** {spec.model} ({spec.precision}, engine {spec.engine}{', MTP' if spec.mtp else ''})",
        f"- **Hardware:** {', '.join(spec.hardware)} (prices: {spec.price_tier})",
        f"- **Traffic:** {traffic}",
        f"- **Targets:** TTFT at p{slo.percentile:g} <= {slo.ttft_s:g} s, TPOT <= {slo.tpot_s * 1e3:g} ms",
        f"- **Objectives:** {', '.join(_objective_label(o, d) for o, d in objectives) or '(none)'}",
        f"- **Trials:** {n} finished: {ok} feasible, {n - ok} infeasible",
    ]
    return "\n".join(lines)


def _best_designs(spec: StudySpec, objectives: list[tuple[str, str]], feasible: pl.DataFrame) -> str:
    head = "## Best designs"
    if feasible.is_empty():
        return f"{head}\n\nNo feasible designs."
    if not objectives:
        return f"{head}\n\nNo objective to rank by; first {TOP_N} feasible trials.\n\n" + _design_table(
            feasible.head(TOP_N), _trial_columns(spec)
        )
    name, direction = objectives[0]
    top = ranked(feasible, objectives[0]).head(TOP_N)
    intro = f"The {top.height} best of {feasible.height} feasible trials by {name} ({direction})."
    return f"{head}\n\n{intro}\n\n{_design_table(top, _trial_columns(spec))}"


def _pareto_section(spec: StudySpec, objectives: list[tuple[str, str]], pareto: pl.DataFrame) -> str:
    head = "## Pareto front"
    if pareto.is_empty():
        return f"{head}\n\nNo Pareto front: there are no feasible designs."
    gpus = _trial_columns(spec)[0]
    cols = [gpus] + [
        (_objective_label(o, d), f"objective_{o}", "", 1.0)
        for o, d in objectives
        if f"objective_{o}" in pareto.columns
    ]
    plural = "s" if pareto.height != 1 else ""
    intro = f"{pareto.height} non-dominated design{plural} (distinct parameter sets)."
    return f"{head}\n\n{intro}\n\n{_design_table(pareto, cols)}"


def _binding_section(trials: pl.DataFrame) -> str:
    head = "## Binding constraints"
    if trials.is_empty() or "feasible" not in trials.columns:
        return f"{head}\n\nNo trials."
    bad = trials.filter(~pl.col("feasible").fill_null(False))
    if bad.is_empty():
        return f"{head}\n\nnone: all {trials.height} trials are feasible."
    text = (
        pl.col("binding").fill_null("").str.slice(0, BINDING_CHARS)
        if "binding" in bad.columns
        else pl.lit("")
    )
    counts = (
        bad.select(text.alias("binding"))
        .group_by("binding")
        .len()
        .sort(["len", "binding"], descending=[True, False])
    )
    rows = [[fmt(b or "(not recorded)"), fmt(k), f"{k / bad.height:.0%}"] for b, k in counts.iter_rows()]
    intro = f"{bad.height} of {trials.height} trials are infeasible; what bound them:"
    table = md_table(
        ["binding constraint (first 80 characters)", "trials", "share of infeasible"],
        rows,
        [False, True, True],
    )
    return f"{head}\n\n{intro}\n\n{table}"


POOL_COLUMNS = (  # key, header with unit, format spec
    ("role", "role", ""),
    ("hardware", "hardware", ""),
    ("shape", "shape", ""),
    ("instances", "instances", ",.0f"),
    ("gpus", "GPUs", ",.0f"),
    ("decode_batch_sequences", "decode batch (sequences)", ",.0f"),
    ("decode_batch", "decode batch (sequences)", ",.0f"),
    ("prefill_share", "prefill share", ".2f"),
    ("hbm_gb_per_gpu", "HBM (GB/GPU)", ".1f"),
    ("weights_gb_per_gpu", "weights (GB/GPU)", ".1f"),
    ("requests_per_s", "requests/s", ",.2f"),
    ("output_tokens_per_s", "output tokens/s", ",.0f"),
    ("usd_per_hour", "$/hour", ",.2f"),
)


def _pools_table(pools: list[dict[str, Any]]) -> str:
    present = [c for c in POOL_COLUMNS if any(c[0] in p for p in pools)]
    rows = [[fmt(p.get(key), spec) for key, _, spec in present] for p in pools]
    return md_table([h for _, h, _ in present], rows, [bool(spec) for *_, spec in present])


def _metrics_table(metrics: dict[str, float | None]) -> str:
    rows = [[name, fmt(v), METRICS[name].unit if name in METRICS else ""] for name, v in metrics.items()]
    return md_table(["metric", "value", "unit"], rows, [False, True, False])


def _prices_table(prices: list[dict[str, Any]]) -> str:
    rows = [
        [
            fmt(p.get("hardware")),
            fmt(p.get("resource")),
            f"+1 {fmt(p.get('unit'))}/GPU",
            fmt(p.get("usd_per_hour"), ",.2f"),
            fmt(p.get("usd_per_gpu_hour"), ",.4f"),
        ]
        for p in prices
    ]
    return md_table(
        ["hardware", "resource", "change", "fleet ($/hour)", "per GPU ($/GPU-hour)"],
        rows,
        [False, False, False, True, True],
    )


def _sim_lines(sim: dict[str, Any]) -> str:
    period = sim.get("oscillation_period_s")
    osc = fmt(sim.get("oscillating"))
    if sim.get("oscillating") and period is not None and math.isfinite(float(period)) and period > 0:
        osc += f" (period {float(period):,.0f} s)"
    lines = [
        f"- stable: {fmt(sim.get('stable'))}",
        f"- oscillating: {osc}",
        f"- near capacity: {fmt(sim.get('near_capacity'))}",
        f"- TTFT mean: {fmt(sim.get('ttft_mean_s'), '.2f')} s, p99: {fmt(sim.get('ttft_p99_s'), '.2f')} s",
        f"- TPOT mean: {fmt(sim.get('tpot_mean_s'), '.1f', 1e3)} ms",
        f"- end-to-end mean: {fmt(sim.get('e2e_mean_s'), '.1f')} s",
    ]
    return "\n".join(lines)


def _stage_names(stage_ms: dict[str, dict[str, float]]) -> list[str]:
    """The known stages in their order, then any others in order of first appearance."""
    seen = list(dict.fromkeys(k for v in stage_ms.values() for k in v))
    return [s for s in STAGES if s in seen] + [s for s in seen if s not in STAGES]


def _stage_table(stage_ms: dict[str, dict[str, float]]) -> str:
    stages = _stage_names(stage_ms)
    rows = [
        [fmt(pool)] + [fmt(v.get(s), ".2f") for s in stages] + [fmt(sum(v.values()), ".2f")]
        for pool, v in stage_ms.items()
    ]
    return md_table(
        ["pool", *(f"{s} (ms)" for s in stages), "total (ms)"], rows, [False] + [True] * (len(stages) + 1)
    )


def _detail_section(best: BestDesign | None) -> str:
    head = "## Best design detail"
    if best is None:
        return f"{head}\n\nNo best design to detail."
    parts = [head, f"Trial {best.trial}."]
    parts += ["### Pools", _pools_table(best.pools) if best.pools else "No pools recorded."]
    if best.metrics:
        parts += ["### Metrics", _metrics_table(best.metrics)]
    parts += [
        "### Shadow prices",
        "Value of +1 unit per GPU of each resource, in $/hour saved for the fleet and per GPU.",
    ]
    parts += [_prices_table(best.shadow_prices) if best.shadow_prices else "No shadow prices."]
    parts += ["### Simulator verdicts", _sim_lines(best.sim) if best.sim else "Not simulated."]
    parts += [
        "### Stage times of one step",
        _stage_table(best.stage_ms) if best.stage_ms else "No stage breakdown.",
    ]
    return "\n\n".join(parts)


def _hbm_row(label: str, values: np.ndarray) -> list[str]:
    below, n = below_share(values, HBM_LINE_GB)
    if n == 0:
        return [label, "0", "-", "-", "-"]
    finite = values[np.isfinite(values)]
    share = f"{below / n:.0%} ({below} of {n})"
    return [label, str(n), share, f"{np.median(finite):.1f}", f"{finite.max():.1f}"]


def _hbm_section(feasible: pl.DataFrame, pareto: pl.DataFrame) -> str:
    head = "## Peak HBM residency"
    if feasible.is_empty():
        return f"{head}\n\nNo feasible designs."
    col = "hbm_peak_gb_per_gpu"
    rows = [
        _hbm_row("feasible trials", _floats(feasible, col)),
        _hbm_row("Pareto front", _floats(pareto, col)),
    ]
    intro = (
        f"Largest HBM residency of any pool of a design, in GB per GPU, and the share of designs "
        f"below {HBM_LINE_GB:g} GB."
    )
    table = md_table(
        ["designs", "trials", f"below {HBM_LINE_GB:g} GB", "median (GB/GPU)", "max (GB/GPU)"],
        rows,
        [False, True, True, True, True],
    )
    return f"{head}\n\n{intro}\n\n{table}"


def _figures_section(figures: list[Figure]) -> str:
    parts = ["## Figures"]
    parts += [
        f"{f.caption}: not drawn ({f.skipped})." if f.skipped else f"![{f.caption}]({f.file})"
        for f in figures
    ]
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------------------------
# figures (matplotlib with the Agg backend, imported only when a figure is drawn)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=PNG_DPI)
    _pyplot().close(fig)


def _draw(path: Path, caption: str, skipped: str, draw: Callable[[], Any]) -> Figure:
    """Draw and save a figure unless there is a reason to skip it."""
    if skipped:
        return Figure(path.name, caption, skipped)
    _save(draw(), path)
    return Figure(path.name, caption)


def _pareto_png(path: Path, study: str, feasible: pl.DataFrame, pareto: pl.DataFrame) -> Figure:
    x, y = "tokens_per_s_per_user", "tokens_per_s_per_gpu"

    def points(df: pl.DataFrame) -> pl.DataFrame:
        if df.is_empty() or x not in df.columns or y not in df.columns:
            return pl.DataFrame()
        return df.drop_nulls([x, y])

    pts, front = points(feasible), points(pareto)

    def draw() -> Any:
        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(8, 5.5))
        keys = [c for c in ("p_decode_hardware", "p_topology") if c in pts.columns]
        groups = pts.partition_by(keys, maintain_order=True, as_dict=True) if keys else {("all",): pts}
        markers = "osD^vP*Xh<>"
        for i, (key, g) in enumerate(groups.items()):
            ax.scatter(
                g[x].to_numpy(),
                g[y].to_numpy(),
                s=22,
                alpha=0.75,
                marker=markers[i % len(markers)],
                color=plt.get_cmap("tab10")(i % 10),
                label=", ".join(str(k) for k in key),
            )
        if not front.is_empty():  # rings, not a line: the front is over the objectives, not these axes
            ax.scatter(
                front[x].to_numpy(),
                front[y].to_numpy(),
                s=110,
                facecolors="none",
                edgecolors="black",
                linewidths=1.4,
                label="Pareto front",
            )
        ax.set_xlabel("tokens/s per user (1 / TPOT)")
        ax.set_ylabel("tokens/s per GPU")
        ax.set_title(f"{study}: {pts.height} feasible designs")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, title="decode hardware, topology", title_fontsize=7)
        fig.tight_layout()
        return fig

    return _draw(
        path,
        "Throughput per GPU against speed per user",
        "" if not pts.is_empty() else "no feasible trials with both speeds",
        draw,
    )


def _stage_png(path: Path, best: BestDesign | None) -> Figure:
    caption = "Stage times of one step of each pool of the best design"
    stage_ms = best.stage_ms if best is not None else {}

    def draw() -> Any:
        plt = _pyplot()
        labels = list(stage_ms)
        fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(labels) + 2.5), 4.5))
        bottom = np.zeros(len(labels))
        for stage in _stage_names(stage_ms):
            ms = np.array([stage_ms[p].get(stage, 0.0) for p in labels])
            ax.bar(labels, ms, bottom=bottom, label=stage)
            bottom += ms
        ax.set_ylabel("ms per step")
        ax.set_title(f"trial {best.trial if best else '-'}: one step per pool", fontsize=10)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        return fig

    return _draw(path, caption, "" if stage_ms else "no best design with a stage breakdown", draw)


def _hbm_png(path: Path, feasible: pl.DataFrame) -> Figure:
    values = _floats(feasible, "hbm_peak_gb_per_gpu")
    values = values[np.isfinite(values)]

    def draw() -> Any:
        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(7, 4.5))
        ax.hist(values, bins=min(30, max(5, values.size // 3)), color="tab:blue", alpha=0.8)
        ax.axvline(HBM_LINE_GB, color="tab:red", ls="--", label=f"{HBM_LINE_GB:g} GB")
        ax.set_xlabel("peak HBM residency, GB per GPU")
        ax.set_ylabel("feasible trials")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        return fig

    return _draw(
        path,
        "Peak HBM residency of feasible designs",
        "" if values.size else "no feasible trials with a peak HBM residency",
        draw,
    )


def _trajectory_png(path: Path, trial: int | None, sim: pl.DataFrame) -> Figure:
    caption = f"Simulated trajectory of trial {trial}" if trial is not None else "Simulated trajectory"
    panels = (
        ("requests/s", (("arrival_rate_per_s", "arrivals"), ("completions_per_s", "completions"))),
        ("requests", (("prefill_queue_requests", "prefill queue"), ("buffer_requests", "decode buffer"))),
        ("sequences / instance", (("decode_batch_per_instance", "decode batch"),)),
    )

    def draw() -> Any:
        plt = _pyplot()
        fig, axes = plt.subplots(len(panels), 1, figsize=(9, 8), sharex=True)
        minutes = sim["t_s"].to_numpy() / 60.0
        for ax, (ylabel, series) in zip(axes, panels, strict=True):
            for col, label in series:
                if col in sim.columns:
                    ax.plot(minutes, sim[col].cast(pl.Float64).to_numpy(), label=label, lw=1.0)
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="upper right")
        axes[-1].set_xlabel("minutes")
        fig.suptitle(f"trial {trial}: fluid simulation", fontsize=10)
        fig.tight_layout()
        return fig

    return _draw(path, caption, "" if not sim.is_empty() else "no simulated time series", draw)
