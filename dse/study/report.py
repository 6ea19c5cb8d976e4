"""A study's report: one Markdown file (``report.md``) with plain tables, and PNG figures beside it.

:func:`write_report` reads the polars tables of :mod:`dse.study.results` and, when given, the
:class:`BestDesign` re-evaluated in full. Tables may be empty (a study without finished trials); the
report then says so, and a figure without data is skipped with a line saying why. Every file is
written atomically.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dse.atomic import atomic_folder
from dse.metrics import METRIC_COLUMNS, METRICS, unit_label
from dse.study.faults import writing
from dse.study.markdown import COST_SPEC, fmt, md_table
from dse.study.report_figures import (
    H100_GB,
    HBM_LINE_GB,
    HERE,
    Drawer,
    Figure,
    floats_of,
    hbm_png,
    pareto_png,
    stage_names,
    stage_png,
    trajectory_png,
)
from dse.study.report_grid import (
    Side,
    effects_section,
    grid_figures,
    grid_section,
    side_cell,
    side_pools,
    sides_of,
    stage_memory_section,
    whatif_section,
)
from dse.study.results import batch_cap, distinct_designs, order_of_equals, ranked, with_designs
from dse.study.spec import StudySpec

TOP_N = 5  # rows of the best-designs table
# binding texts are grouped with their numbers out; a number inside a name (b200, 16gpu-dpa-ep16) stays
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w-])")


@dataclass(frozen=True)
class BestDesign:
    """The study's best trial re-evaluated in full, as plain values (built by :mod:`dse.study.best`)."""

    trial: int
    pools: list[dict[str, Any]]  # rows like placements_frame: role, hardware, shape, instances, gpus, ...
    metrics: dict[str, float | None]  # keys of METRICS
    shadow_prices: list[dict[str, Any]]  # hardware, resource, unit, usd_per_hour, usd_per_gpu_hour
    sim: dict[str, Any]  # stable, oscillating, oscillation_period_s, ttft_*_s, tpot_mean_s, e2e_mean_s, ...
    stage_ms: dict[str, dict[str, float]]  # pool label -> stage -> ms of one step
    settings: dict[str, Any] = field(default_factory=dict)  # engine settings, as labelled values
    tiers: list[dict[str, Any]] = field(default_factory=list)  # KV placement per class (kv_tiers rows)
    # the plan's resting KV run as a live LRU cache: outcome (tier or drop) -> (planned, simulated)
    kv_cache: dict[str, tuple[float, float]] = field(default_factory=dict)


# (header with unit, column, format spec, scale) of the trial tables
Column = tuple[str, str, str, float]


def write_report(
    folder: Path,
    *,
    spec: StudySpec,
    objectives: list[tuple[str, str]],
    tables: dict[str, pl.DataFrame],
    best: BestDesign | None,
    drawer: Drawer = HERE,
    unfinished: str | None = None,
) -> Path:
    """Write ``folder/report.md`` and its PNGs, all or nothing; return the Markdown path.

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
    drawer
        Where the figures are drawn: in this process unless given processes that draw them
        (:class:`dse.study.figure_workers.FigureWorkers`) while the Markdown is written.
    unfinished
        What the tables leave out, trials not finished when they were read
        (:meth:`dse.study.results.TrialsRead.note`): said under the trials count.

    Returns
    -------
    Path
        ``folder/report.md``.
    """
    with writing(folder), atomic_folder(folder) as tmp:
        try:
            _write(
                tmp,
                spec=spec.led_by([name for name, _ in objectives]),  # (a grid's ranks by the first)
                objectives=objectives,
                tables=tables,
                best=best,
                drawer=drawer,
                unfinished=unfinished,
            )
        except BaseException:  # the figures handed out are done before the folder is removed
            with contextlib.suppress(Exception):
                drawer.finish()
            raise
        drawer.finish()  # every figure written before the folder moves in
    return folder / "report.md"


def _write(
    folder: Path,
    *,
    spec: StudySpec,
    objectives: list[tuple[str, str]],
    tables: dict[str, pl.DataFrame],
    best: BestDesign | None,
    drawer: Drawer,
    unfinished: str | None = None,
) -> None:
    trials = tables.get("trials", pl.DataFrame())
    placements = tables.get("placements", pl.DataFrame())
    pools = side_pools(placements)  # a design's midfill and FFN pools are named from these
    feasible = feasible_trials(trials)
    pareto = distinct_designs(tables.get("pareto", pl.DataFrame()))
    sim_trial, sim = trajectory_of(tables.get("sim_timeseries", pl.DataFrame()), best)
    tail_figures = [
        stage_png(folder / "stage_breakdown.png", best, drawer),
        trajectory_png(folder / "sim_trajectory.png", sim_trial, sim, drawer),
    ]
    if spec.is_grid:  # a grid has no Pareto front: its points are the answer
        figures = grid_figures(folder, spec, trials, drawer) + tail_figures
        sections = [
            _overview(spec, objectives, trials, feasible, unfinished),
            effects_section(spec, trials),
            whatif_section(spec, trials),
            stage_memory_section(spec, trials, placements),
            _binding_section(trials),
            _detail_section(best, spec, objectives, trials),
            _figures_section(figures),
            grid_section(spec, trials, placements),  # last: one row per point
        ]
    else:
        figures = [
            pareto_png(folder / "pareto.png", spec.name, feasible, pareto, drawer),
            hbm_png(folder / "hbm_residency.png", feasible, drawer),
            *tail_figures,
        ]
        sections = [
            _overview(spec, objectives, trials, feasible, unfinished),
            _best_designs(spec, objectives, feasible, pools),
            _pareto_section(spec, objectives, pareto, pools, feasible),
            _binding_section(trials),
            _detail_section(best, spec, objectives, trials),
            _hbm_section(feasible, pareto),
            _figures_section(figures),
        ]
    (folder / "report.md").write_text("\n\n".join(sections) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# table selection


def feasible_trials(trials: pl.DataFrame) -> pl.DataFrame:
    """The feasible rows of the trials table (empty when it has none or no ``feasible`` column)."""
    if trials.is_empty() or "feasible" not in trials.columns:
        return pl.DataFrame()
    return trials.filter(pl.col("feasible").fill_null(False))


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


def _s(n: int) -> str:
    """The plural ending of a count's noun."""
    return "" if n == 1 else "s"


def _pair(row: dict[str, Any], a: str, b: str) -> str:
    """``x`` when both sides agree (aggregated units), else ``prefill / decode``."""
    x, y = row.get(a), row.get(b)
    return fmt(x) if x == y else f"{fmt(x)} / {fmt(y)}"


def _trial_columns(spec: StudySpec) -> list[Column]:
    pct = f"p{spec.slo.percentile:g}"
    return [
        ("GPUs", "gpus", ",.0f", 1.0),
        ("$/M tokens", "usd_per_million_tokens", COST_SPEC, 1.0),
        ("tokens/s/GPU", "tokens_per_s_per_gpu", ",.0f", 1.0),
        ("tokens/s/user", "tokens_per_s_per_user", ".1f", 1.0),
        ("TTFT mean (s)", "ttft_mean_s", ".2f", 1.0),
        (f"TTFT {pct} (s)", "ttft_pct_s", ".2f", 1.0),
        ("TPOT mean (ms)", "tpot_mean_s", ".1f", 1e3),
        ("peak HBM (GB/GPU)", "hbm_peak_gb_per_gpu", ".1f", 1.0),
    ]


_ALIKE = (
    'Each design shows once, as its best trial (the first, among equals); "trials" counts the'
    " trials that found it (the same hardware, shapes and outcome, differing only in settings"
    " that changed nothing, such as a batch cap above the load)."
)


SIDE_NOTE = (
    "A design with a midfill or an FFN (expert) pool names it after its prefill / decode pair "
    '("+ midfill", "+ ffn"); an attention-FFN design\'s decode pool is its attention pool.'
)


def _design_table(df: pl.DataFrame, columns: list[Column], pools: dict[int, list[Side]]) -> str:
    """Trial, how many trials found its design, topology, KV policy, hardware and shapes (its
    midfill and FFN pools' after the prefill / decode pair, ``pools`` from
    :func:`~dse.study.report_grid.side_pools`), then ``columns``; :data:`SIDE_NOTE` under it
    when a design has such a pool."""
    headers = [
        "trial",
        "trials",
        "topology",
        "KV policy",
        "hardware (prefill / decode)",
        "shape (prefill / decode)",
        "prefill chunk (tokens)",
        "decode batch cap (sequences)",
    ]
    rows, sided = [], False
    for r in df.iter_rows(named=True):
        sides = sides_of(r, pools)
        sided = sided or bool(sides)
        rows.append(
            [
                fmt(r.get("trial")),
                fmt(r.get("design_trials")),
                fmt(r.get("p_topology")),
                fmt(r.get("p_kv_policy")),
                _pair(r, "p_prefill_hardware", "p_decode_hardware") + side_cell(sides, 1),
                _pair(r, "p_prefill_shape", "p_decode_shape") + side_cell(sides, 2),
                fmt(r.get("p_chunk_tokens"), ",.0f"),
                fmt(batch_cap(r.get("decode_batch_sequences")), ",.0f"),
            ]
            + [fmt(r.get(col), spec, scale) for _, col, spec, scale in columns]
        )
    numeric = [True, True, False, False, False, False, True, True] + [True] * len(columns)
    table = md_table(headers + [h for h, *_ in columns], rows, numeric)
    return f"{table}\n\n{SIDE_NOTE}" if sided else table


def _objective_label(name: str, direction: str, percentile: float) -> str:
    """``ttft_pct_s (TTFT p99, s, minimize)``: the objective, what it holds (a latency's statistic
    at the study's ``percentile``, its unit) and its direction."""
    said = unit_label(name, percentile)
    return f"{name} ({said[2:-1]}, {direction})" if said else f"{name} ({direction})"


def _overview(
    spec: StudySpec,
    objectives: list[tuple[str, str]],
    trials: pl.DataFrame,
    feasible: pl.DataFrame,
    unfinished: str | None = None,
) -> str:
    w, slo = spec.workload, spec.slo

    def of(axis: str, value: Any, spec_: str, unit: str) -> str:  # a grid's values where it sweeps it
        return by_point(spec, axis, value, lambda v: format(v, spec_), unit)

    traffic = (
        f"{of('requests_per_s', w.requests_per_s, 'g', 'requests/s')}; fresh prompts of "
        f"{of('input_tokens', w.input_tokens, ',.0f', 'tokens')}, "
        f"{of('output_tokens', w.output_tokens, ',.0f', 'output tokens')}"
    )
    if w.returning_share > 0:
        think = ", ".join(f"{b.share:.0%} after {b.dwell_s:g} s" for b in w.think)
        traffic += (
            f"; {w.returning_share:.0%} returning turns reusing "
            f"{of('cached_prefix_tokens', w.cached_prefix_tokens, ',.0f', 'cached tokens')} "
            f"plus {w.suffix_tokens:,.0f} new ones ({think})"
        )
    ttft = of("ttft_s", slo.ttft_s, "g", "s")
    tpot = by_point(spec, "tpot_s", slo.tpot_s, lambda v: f"{v * 1e3:g}", "ms")
    model = by_point(spec, "model", spec.model, str, "")
    hardware = by_point(spec, "hardware", ", ".join(spec.hardware), str, "")
    n, ok = trials.height, feasible.height
    said = [_objective_label(o, d, slo.percentile) for o, d in objectives]
    lines = [
        f"# Study report: {spec.name}",
        "",
        spec.description or "(no description)",
        "",
        f"- **Model:** {model} ({spec.precision}, engine {spec.engine}{', MTP' if spec.mtp else ''})",
        f"- **Hardware:** {hardware} (prices: {spec.price_tier})",
        f"- **Traffic:** {traffic}",
        f"- **Targets:** TTFT at p{slo.percentile:g} <= {ttft}, TPOT mean <= {tpot}",
        f"- **Objectives:** {', '.join(said) or '(none)'}",
        *_costs_and_caps(spec),
        f"- **Trials:** {n} finished: {ok} feasible, {n - ok} infeasible",
    ]
    warm = int(trials["warm_start"].sum()) if "warm_start" in trials.columns else 0
    if warm:
        lines[-1] += f"; {warm} of them are the full placement's designs (the warm start), the rest sampled"
    if unfinished is not None:  # workers were still at it: which trials this report holds
        lines.append(f"- **Unfinished:** this report was {unfinished}")
    return "\n".join(lines)


def _costs_and_caps(spec: StudySpec) -> list[str]:
    """The overview's lines for what the study prices beyond the GPU-hour and the caps on each
    design, where it sets them (each moves the figures: energy is in $/M tokens, a cap makes
    designs infeasible): they had been left out of "the spec in words"."""
    e, st, lim = spec.energy, spec.storage, spec.limits
    priced = []
    if e.usd_per_kwh > 0:
        priced.append(f"energy ${e.usd_per_kwh:g}/kWh at PUE {e.pue:g}")
    tiers = (
        ("host DRAM", st.dram_usd_per_tb),
        ("NVMe", st.nvme_usd_per_tb),
        ("network", st.network_usd_per_tb),
    )
    stored = [f"{name} ${usd:,.0f}/TB" for name, usd in tiers if usd > 0]
    if stored:
        priced.append(f"resting KV's {', '.join(stored)} over {st.years:g} years")
    caps = [
        f"{label} {value}"
        for label, value in (
            ("budget", None if lim.budget_usd_hour is None else f"${lim.budget_usd_hour:,.2f}/hour"),
            ("power", None if lim.power_kw is None else f"{lim.power_kw:g} kW"),
            ("GPUs", None if lim.max_gpus is None else f"{lim.max_gpus:g}"),
        )
        if value is not None
    ]
    lines = [f"- **Priced too:** {'; '.join(priced)}"] if priced else []
    return lines + ([f"- **Caps on each design:** {', '.join(caps)}"] if caps else [])


def by_point(spec: StudySpec, axis: str, value: Any, show: Callable[[Any], str], unit: str) -> str:
    """``value`` shown with its ``unit``, or where the grid sweeps ``axis``, its values and that
    they vary by grid point."""
    values = [show(v) for v in spec.sweep.axes().get(axis, ())]
    if not values:
        return f"{show(value)} {unit}".rstrip()
    listed = values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"
    return f"{listed} {unit}".rstrip() + " by grid point"


def _best_designs(
    spec: StudySpec, objectives: list[tuple[str, str]], feasible: pl.DataFrame, pools: dict[int, list[Side]]
) -> str:
    head = "## Best designs"
    if feasible.is_empty():
        return f"{head}\n\nNo feasible designs."
    if not objectives:
        return f"{head}\n\nNo objective to rank by; the first {TOP_N} feasible designs.\n\n" + _design_table(
            distinct_designs(feasible).head(TOP_N), _trial_columns(spec), pools
        )
    name, direction = objectives[0]
    designs = distinct_designs(ranked(feasible, *objectives))
    top = designs.head(TOP_N)
    intro = (
        f"The {top.height} best of {designs.height} distinct design{_s(designs.height)} ({feasible.height}"
        f" feasible trial{_s(feasible.height)}) by {name} ({direction}){_equals_by(objectives)}. {_ALIKE}"
    )
    if (why := unvalued(feasible, objectives[:1])) is not None:  # (it had claimed a ranking by it)
        intro += f" But {why}: they are ordered by the rest alone."
    intro += _warm_start_verdict(feasible, objectives)
    return f"{head}\n\n{intro}\n\n{_design_table(top, _trial_columns(spec), pools)}"


def _equals_by(objectives: list[tuple[str, str]]) -> str:
    """How designs equal on the first objective are ordered (:func:`order_of_equals`)."""
    return f", equals by {', then '.join(order_of_equals(objectives))}"


def _first_among(objectives: list[tuple[str, str]]) -> str:
    """Which of the designs tied on the first objective a study calls its best."""
    *by, _ = order_of_equals(objectives)
    return f"the best of them by {', then '.join(by)} (then the first in trial order)"


def _warm_start_verdict(feasible: pl.DataFrame, objectives: list[tuple[str, str]]) -> str:
    """What the sampler added to the warm start on the first objective, as a sentence (trials
    whose objective is missing or not a number do not count)."""
    objective = objectives[0]
    col = f"objective_{objective[0]}"
    if "warm_start" not in feasible.columns or col not in feasible.columns:
        return ""
    valid = feasible.filter(pl.col(col).is_not_null() & pl.col(col).cast(pl.Float64).is_finite())
    warm = ranked(valid.filter(pl.col("warm_start")), *objectives)
    searched = ranked(valid.filter(~pl.col("warm_start")), *objectives)
    if warm.is_empty():
        return ""
    w, trial = float(warm[col][0]), warm["trial"][0]
    best = ranked(valid, *objectives)  # as the study's best is chosen: equals by its later objectives
    if bool(best["warm_start"][0]):
        return (
            f" The best is a warm-start trial (the full placement's design, trial {trial}); "
            "no sampled trial beat it."
        )
    s = float(searched[col][0])
    if s == w:  # level on the first objective: a sampled trial is the best by what orders equals
        return (
            f" The best is a sampled trial (trial {best['trial'][0]}), level on {objective[0]} with the "
            f"best warm-start trial (the full placement's design, trial {trial}: {w:.4g}) and first of "
            f"the equals by {', then '.join(order_of_equals(objectives))}."
        )
    # a ratio where both are of one sign and the warm one is not zero, else the difference
    pct = abs(s / w - 1) * 100 if w * s > 0 else math.nan  # "0.0%" for 0.02398 against 0.02399
    by = (f"{pct:.1f}%" if pct >= 0.1 else f"{pct:.2g}%") if w * s > 0 else f"{abs(s - w):.4g}"
    return (
        f" The sampled trials beat the best warm-start trial (the full placement's design, trial "
        f"{trial}: {w:.4g}) by {by}."
    )


def unvalued(feasible: pl.DataFrame, objectives: list[tuple[str, str]]) -> str | None:
    """The objectives none of the feasible trials has a value for (a function's None, nan or
    infinity), in words; None when each has one somewhere."""

    def valued(name: str) -> bool:
        col = f"objective_{name}"
        return col in feasible.columns and bool(feasible[col].cast(pl.Float64).is_finite().any())

    missing = " or ".join(n for n, _ in objectives if not valued(n))
    if not missing:
        return None
    if feasible.height == 1:
        return f"the feasible trial has no value for {missing}"
    return f"none of the {feasible.height} feasible trials has a value for {missing}"


def _pareto_section(
    spec: StudySpec,
    objectives: list[tuple[str, str]],
    pareto: pl.DataFrame,
    pools: dict[int, list[Side]],
    feasible: pl.DataFrame,
) -> str:
    head = "## Pareto front"
    if pareto.is_empty() and not feasible.is_empty() and objectives:
        # (it had said there were no feasible designs, beside a count of them)
        each = ", ".join(n for n, _ in objectives)
        why = unvalued(feasible, objectives) or f"no feasible trial has a value for every objective ({each})"
        return f"{head}\n\nNo Pareto front: {why}."
    if pareto.is_empty():
        return f"{head}\n\nNo Pareto front: there are no feasible designs."
    gpus = _trial_columns(spec)[0]
    cols = [gpus] + [
        (_objective_label(o, d, spec.slo.percentile), f"objective_{o}", "", 1.0)
        for o, d in objectives
        if f"objective_{o}" in pareto.columns
    ]
    plural = "s" if pareto.height != 1 else ""
    intro = f"{pareto.height} non-dominated design{plural}. {_ALIKE}"
    return f"{head}\n\n{intro}\n\n{_design_table(pareto, cols, pools)}"


def _binding_section(trials: pl.DataFrame) -> str:
    head = "## Binding constraints"
    if trials.is_empty() or "feasible" not in trials.columns:
        return f"{head}\n\nNo trials."
    bad = trials.filter(~pl.col("feasible").fill_null(False))
    if bad.is_empty():
        return f"{head}\n\nnone: all {trials.height} trials are feasible."
    texts = bad["binding"].fill_null("").to_list() if "binding" in bad.columns else [""] * bad.height
    groups: dict[str, list[str]] = {}
    for t in texts:  # the same constraint at other numbers is one group; its first line stands for it
        groups.setdefault(_NUMBER.sub("#", t), []).append(t)
    ordered = sorted(groups.values(), key=lambda g: (-len(g), g[0]))
    rows = [[fmt(g[0] or "(not recorded)"), fmt(len(g)), f"{len(g) / bad.height:.0%}"] for g in ordered]
    intro = (
        f"{bad.height} of {trials.height} trials are infeasible; what bound them (trials whose "
        "constraint differs only in its numbers are counted together, shown by the first one's):"
    )
    table = md_table(["binding constraint", "trials", "share of infeasible"], rows, [False, True, True])
    return f"{head}\n\n{intro}\n\n{table}"


POOL_COLUMNS = (  # key, header with unit, format spec
    ("role", "role", ""),
    ("hardware", "hardware", ""),
    ("shape", "shape", ""),
    ("instances", "instances", ",.0f"),
    ("gpus", "GPUs", ",.0f"),
    ("decode_batch_sequences", "decode batch cap (sequences)", ",.0f"),
    ("decode_batch", "decode batch cap (sequences)", ",.0f"),
    ("prefill_share", "prefill share", ".2f"),
    ("hbm_gb_per_gpu", "HBM (GB/GPU)", ".1f"),
    ("weights_gb_per_gpu", "weights (GB/GPU)", ".1f"),
    ("requests_per_s", "requests/s (load)", ",.2f"),
    ("output_tokens_per_s", "output tokens/s (capacity)", ",.0f"),
    ("usd_per_hour", "$/hour", ",.2f"),
)


# a stage's figure a pool of another role does not have (a prefill pool's decode batch, a decode
# pool's requests prefilled) is 0 in the placements table and "-" here, as `dse place` shows it
ROLE_FIGURES = (
    "decode_batch_sequences", "decode_batch", "prefill_share", "requests_per_s", "output_tokens_per_s",
)  # fmt: skip


def _pools_table(pools: list[dict[str, Any]]) -> str:
    present = [c for c in POOL_COLUMNS if any(c[0] in p for p in pools)]
    rows = [
        [fmt((p.get(key) or None) if key in ROLE_FIGURES else p.get(key), spec) for key, _, spec in present]
        for p in pools
    ]
    return md_table([h for _, h, _ in present], rows, [bool(spec) for *_, spec in present])


POOLS_NOTE = (
    "requests/s (load) is what the placement sends each pool at the study's request rate; output "
    "tokens/s (capacity) is what its instances serve at their decode batch cap, the most sequences an "
    "instance runs within the TPOT target (the simulated trajectory shows the batch the load fills). "
    "HBM figures are GB of 10^9 bytes, and a datasheet's HBM capacity is in GiB: B200's \"180 GB\" "
    "holds 193.3 GB, so a pool may show more than the datasheet's number."
)
KV_NOTE = (
    "Where each class of returning conversation's KV rests between its turns: the share of the "
    "class in each tier, and what the fleet stores there (TB, 10^12 bytes)."
)
_TIERS = ("hbm", "dram", "nvme", "network")
KV_CACHE_NOTE = (
    "The placement splits each class among tiers as flows (Little's law). A serving cache does not "
    "choose per class: here each tier gets the capacity the plan rests there, a session's KV enters "
    "HBM when its turn ends, the longest-resting entry moves down when a tier is full (least "
    "recently used) and off the last tier it is dropped. Where returning turns found their KV, "
    "planned and in that cache (`dse simulate` runs the same, and `--kv-eviction think`)."
)


def _kv_cache_table(cache: dict[str, tuple[float, float]]) -> str:
    rows = [
        # (rounded first, and + 0.0: a difference of -0.02 points had read "-0.0")
        [
            outcome,
            fmt(planned, ".1%"),
            fmt(simulated, ".1%"),
            fmt(round(100.0 * (simulated - planned), 1) + 0.0, "+.1f"),
        ]
        for outcome, (planned, simulated) in cache.items()
    ]
    return md_table(
        ["found in", "planned", "live cache (LRU)", "difference (points)"], rows, [False, True, True, True]
    )


def _settings_table(settings: dict[str, Any]) -> str:
    return md_table(["setting", "value"], [[k, fmt(v)] for k, v in settings.items()], [False, False])


def _tiers_table(tiers: list[dict[str, Any]]) -> str:
    rows = [
        [
            fmt(t.get("kv_class")),
            fmt(t.get("returning_per_s"), ",.2f"),
            fmt(t.get("dwell_s"), ",.0f"),
            *(fmt(t.get(f"share_{x}"), ".0%") for x in (*_TIERS, "drop")),
            *(fmt(t.get(f"stored_{x}_gb"), ",.3f", 1e-3) for x in _TIERS),
        ]
        for t in tiers
    ]
    heads = ["class", "returning/s", "dwell (s)", *(f"in {x}" for x in _TIERS), "dropped"]
    heads += [f"stored in {x} (TB)" for x in _TIERS]
    return md_table(heads, rows, [False, True, True] + [True] * 9)


METRICS_NOTE = (
    "Each metric under the name of its column in the trials export (`exports/trials`, columns in "
    "dse's docs/schema.md), to join with the Parquet tables, and what it measures (a latency says "
    "its statistic: mean, or the percentile)."
)


def _metrics_table(metrics: dict[str, float | None], percentile: float) -> str:
    """The best trial's metrics, named as the trials export's columns (``ttft_mean_s``, not the
    recorded ``ttft_s``), with what each measures: "the study's percentile" named (p90)."""
    pct = f"p{percentile:g}"

    def what(name: str) -> str:
        doc = METRICS[name].doc if name in METRICS else ""
        return fmt(doc.replace("the study's percentile", f"the study's percentile ({pct})"))

    rows = [
        [METRIC_COLUMNS.get(name, name), fmt(v), METRICS[name].unit if name in METRICS else "", what(name)]
        for name, v in metrics.items()
    ]
    return md_table(["column", "value", "unit", "what"], rows, [False, True, False, False])


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
        # the fluid model over the scenario's time: the trials' ttft_p99_s is the worse of its p99
        # and the engine-level simulation's
        f"- TTFT mean (fluid model): {fmt(sim.get('ttft_mean_s'), '.2f')} s, p99: "
        f"{fmt(sim.get('ttft_p99_s'), '.2f')} s",
        f"- TPOT mean (fluid model): {fmt(sim.get('tpot_mean_s'), '.1f', 1e3)} ms",
        f"- end-to-end mean (fluid model): {fmt(sim.get('e2e_mean_s'), '.1f')} s",
    ]
    return "\n".join(lines)


STAGE_NOTE = (
    "One step of each pool at its operating point, in ms: a decode pool's at its batch cap (the "
    "step the TPOT target bounds), a prefill pool's one full forward; an aggregated pool's without "
    "the prefill chunks interleaved with it."
)


def _stage_table(stage_ms: dict[str, dict[str, float]]) -> str:
    stages = stage_names(stage_ms)
    rows = [
        [fmt(pool)] + [fmt(v.get(s), ".2f") for s in stages] + [fmt(sum(v.values()), ".2f")]
        for pool, v in stage_ms.items()
    ]
    return md_table(
        ["pool", *(f"{s} (ms)" for s in stages), "total (ms)"], rows, [False] + [True] * (len(stages) + 1)
    )


def best_sentence(
    best: BestDesign, spec: StudySpec, objectives: list[tuple[str, str]], trials: pl.DataFrame
) -> str:
    """Which trial the detail is of and why: the first objective it is best on, a grid's point,
    and how many other designs (points) tie with it there, and by what it stands for them."""
    what = "point" if spec.is_grid else "design"
    row = trials.filter(pl.col("trial") == best.trial) if "trial" in trials.columns else pl.DataFrame()
    if not objectives or row.is_empty():
        return f"Trial {best.trial}."
    name, direction = objectives[0]
    text = f"Trial {best.trial}, the feasible {what} best by {name} ({direction})"
    axes = list(spec.sweep.axes())
    if axes:
        text += ": " + ", ".join(f"{a} = {fmt(row['x_' + a][0])}" for a in axes if "x_" + a in row.columns)
    col = f"objective_{name}"
    value = row[col][0] if col in row.columns else None
    if value is None or not math.isfinite(value):
        return text + "."
    feasible = with_designs(feasible_trials(trials))
    if feasible.filter(pl.col("trial") == best.trial).is_empty():
        return text + "."
    own = feasible.filter(pl.col("trial") == best.trial)["design"][0]
    tied = pl.col(col).cast(pl.Float64).is_close(value, rel_tol=1e-9, abs_tol=1e-12)
    others = feasible.filter(tied & (pl.col("design") != own))["design"].n_unique()
    if others:
        text += (
            f". {others} other feasible {what}{_s(others)} {'ties' if others == 1 else 'tie'} with it at "
            f"{fmt(value)}; it is {_first_among(objectives)}"
        )
    return text + "."


def _detail_section(
    best: BestDesign | None, spec: StudySpec, objectives: list[tuple[str, str]], trials: pl.DataFrame
) -> str:
    head = "## Best design detail"
    feasible = feasible_trials(trials)
    if best is None and objectives and not feasible.is_empty():
        # the best is best on the first objective (it had said nothing of why, as with no feasible trial)
        if (why := unvalued(feasible, objectives[:1])) is not None:
            return f"{head}\n\nNo best design to detail: {why}."
    if best is None:
        return f"{head}\n\nNo best design to detail."
    parts = [head, best_sentence(best, spec, objectives, trials)]
    parts += ["### Pools", _pools_table(best.pools) if best.pools else "No pools recorded.", POOLS_NOTE]
    if best.settings:
        parts += ["### Engine settings", _settings_table(best.settings)]
    if best.tiers:
        parts += ["### KV placement", KV_NOTE, _tiers_table(best.tiers)]
    if best.kv_cache:
        parts += ["### KV placement as a live cache", KV_CACHE_NOTE, _kv_cache_table(best.kv_cache)]
    if best.metrics:
        parts += ["### Metrics", METRICS_NOTE, _metrics_table(best.metrics, spec.slo.percentile)]
    parts += [
        "### Shadow prices",
        "Value of +1 unit per GPU of each resource, in $/hour saved for the fleet and per GPU.",
    ]
    parts += [_prices_table(best.shadow_prices) if best.shadow_prices else "No shadow prices."]
    parts += ["### Simulator verdicts", _sim_lines(best.sim) if best.sim else "Not simulated."]
    parts += [
        "### Stage times of one step",
        STAGE_NOTE,
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
        _hbm_row("feasible trials", floats_of(feasible, col)),
        _hbm_row("Pareto front designs", floats_of(pareto, col)),
    ]
    intro = (
        f"Largest HBM residency of any pool of a design, in GB per GPU: over the feasible trials (a "
        f"design found by several trials counts each time) and over the Pareto front's designs, and "
        f"the share below {HBM_LINE_GB:g} GB, the design brief's line (not an H100's capacity: its "
        f'"80 GB" is 80 GiB, {H100_GB:.1f} GB).'
    )
    table = md_table(
        ["of", "count", f"below {HBM_LINE_GB:g} GB", "median (GB/GPU)", "max (GB/GPU)"],
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
