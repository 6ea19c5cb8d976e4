"""The one registry of what an evaluation measures: each metric's name (the key an evaluation
records and an objective names), unit, Parquet column and description, and the constraints with
theirs. The trials table, the study-file check of objectives, the report's units and the schema
table of ``docs/schema.md`` (:func:`markdown_table`; a test keeps the page in step) derive from it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    unit: str
    direction: str | None  # "minimize", "maximize", or None (recorded only)
    doc: str
    column: str = ""  # the Parquet column, when it is not the metric's name (a unit in the name)
    whole: bool = False  # a count: an integer column in the trials table
    # a latency's statistic as a label says it (``TTFT mean``, ``TTFT p99``; ``{pct}``: the
    # study's percentile), "" for a metric that is no latency: :func:`statistic`
    stat: str = ""


METRICS = {
    "usd_per_million_tokens": Metric(
        "$/M tokens",
        "minimize",
        "cost per million prompt + output tokens: GPU-hours, and energy where the study prices it ([energy])",
    ),
    "usd_per_hour": Metric(
        "$/h",
        "minimize",
        "GPUs bought, at the study's price tier, and the host DRAM, NVMe and network store the resting KV"
        " fills where [storage] prices them",
    ),
    "storage_usd_per_hour": Metric(
        "$/h",
        None,
        "of usd_per_hour, the host DRAM, NVMe and network store the resting KV fills where [storage]"
        " prices them (0 where it prices none)",
    ),
    "gpus": Metric("GPUs", "minimize", "GPUs bought, in whole nodes or racks", whole=True),
    "tokens_per_s_per_gpu": Metric("tokens/s/GPU", "maximize", "prompt + output tokens per GPU bought"),
    "tokens_per_s_per_user": Metric("tokens/s", "maximize", "decode speed one user sees (1 / mean TPOT)"),
    "output_tokens_per_s_per_decode_gpu": Metric("tokens/s/GPU", "maximize", "output tokens per decode GPU"),
    "ttft_s": Metric("s", "minimize", "mean time to first token, simulated", "ttft_mean_s", stat="TTFT mean"),
    "ttft_pct_s": Metric(
        "s",
        "minimize",
        "TTFT at the study's percentile: the worse of the engine-level simulation's and the fluid"
        " model's (the quantile of a shift plus an exponential tail of its mean and p99: below its"
        " mean under p63, its median 0.31 of the tail's scale below)",
        stat="TTFT p{pct}",
    ),
    "tpot_s": Metric(
        "s", "minimize", "mean time per output token, simulated", "tpot_mean_s", stat="TPOT mean"
    ),
    "engine_ttft_pct_s": Metric(
        "s",
        None,
        "TTFT at the study's percentile, engine-level simulation (Poisson at the scenario's mean rate)",
        stat="TTFT p{pct}",
    ),
    "engine_tpot_pct_s": Metric(
        "s", None, "TPOT at the study's percentile, engine-level simulation", stat="TPOT p{pct}"
    ),
    "engine_ttft_p99_s": Metric("s", None, "99th-percentile TTFT, engine-level simulation", stat="TTFT p99"),
    "e2e_s": Metric("s", "minimize", "mean end-to-end latency, simulated", "e2e_mean_s", stat="E2E mean"),
    "power_kw": Metric(
        "kW", "minimize", "power the design's GPUs draw at its load, times the site's PUE ([energy])"
    ),
    "kwh_per_million_tokens": Metric("kWh/M tokens", "minimize", "energy per million prompt + output tokens"),
    "energy_usd_per_hour": Metric(
        "$/h", None, "energy at the study's price per kWh (0 when the GPU-hour rate holds it)"
    ),
    "hbm_peak_gb_per_gpu": Metric("GB", "minimize", "largest HBM residency of any pool"),
    "decode_batch": Metric(
        "sequences",
        None,
        "sequences a decode instance is sized to run at once (its batch cap; where the experts run"
        " apart, an attention instance's, not the tokens an expert step takes)",
        "decode_batch_sequences",
    ),
    "milp_solve_s": Metric(
        "s", None, "MILP solve time (0 where the run had solved the same MILP, the same numbers, before)"
    ),
    "sim_backlog_growth_per_s": Metric(
        "requests/s",
        None,
        "backlog growth over the simulation's last third (over its last two periods where it swings"
        " with one); the fluid's: of its own queues, without the prompts in prefill or the"
        " stationary waits",
    ),
    "ttft_p99_s": Metric(
        "s",
        "minimize",
        "99th-percentile time to first token: the worse of the fluid and the engine-level simulations",
        stat="TTFT p99",
    ),
    "queue_peak_prefill_requests": Metric(
        "requests", None, "most requests waiting for or in prefill (incl. reload, handoff), simulated"
    ),
    "queue_peak_buffer_requests": Metric(
        "requests", None, "most prefilled requests waiting for a decode slot"
    ),
    "planner_moves": Metric(
        "moves", None, "instances the planner moved between prefill and decode", whole=True
    ),
    # one column per signal the oscillation detector watches (dse.sim.outputs.verdicts), each in
    # its own unit: one `oscillation_amplitude` had held either, and no column said which
    "swing_prefill_servers": Metric(
        "servers",
        None,
        "swing (half the 5-95% range after the warm-up, oscillating or not) of the fluid's prefill"
        " servers (`sim_timeseries.prefill_servers`) where the planner moved them after the warm-up,"
        " the signal the oscillation is then judged on; null where it moved none",
    ),
    "swing_prefill_queue_requests": Metric(
        "requests",
        None,
        "swing (half the 5-95% range after the warm-up, oscillating or not) of the requests waiting"
        " for or in prefill (`sim_timeseries.prefill_queue_requests`) where the planner moved no"
        " prefill server after the warm-up, the signal the oscillation is then judged on; null where it did",
    ),
    "hbm_bandwidth_usd_per_tbps_gpu_hour": Metric(
        "$/h per TB/s per GPU",
        None,
        "shadow price of HBM bandwidth, decode hardware (grid studies)",
    ),
    "hbm_capacity_usd_per_gb_gpu_hour": Metric(
        "$/h per GB per GPU",
        None,
        "shadow price of HBM capacity, decode hardware (grid studies)",
    ),
    "milp_resolves": Metric(
        "solves",
        None,
        "times the design's topology was solved again before the simulations held it (grid studies;"
        " 0: the MILP's first design)",
        whole=True,
    ),
    "milp_topology_rank": Metric(
        "rank",
        None,
        "the design's topology's place in the MILP's ranking of the point's topologies by its objective"
        " (grid studies; 0: the MILP's cheapest; more: a cheaper topology's design failed the"
        " simulations, or cost more once solved again)",
        whole=True,
    ),
}


def column(name: str) -> str:
    """The Parquet column of metric ``name``."""
    return METRICS[name].column or name


METRIC_COLUMNS = {name: column(name) for name in METRICS}
"""Metric -> column, in registry order: the metric columns of the trials table."""

OBJECTIVES = sorted(name for name, m in METRICS.items() if m.direction is not None)
"""The metrics an objective may name: those with a direction (each under its metric's name, which
is not always its column's: ``tpot_s`` is exported as ``tpot_mean_s``)."""


def metric_of_column(col: str) -> str | None:
    """The metric whose exported column is ``col`` under another name (``tpot_mean_s``:
    ``tpot_s``), else None."""
    return next((m for m, c in METRIC_COLUMNS.items() if c == col and m != col), None)


def statistic(name: str, percentile: float) -> str:
    """What the latency metric ``name`` (or the trials column ``name``: ``tpot_mean_s``) is, as
    every label of it says: ``TTFT p99``, ``TPOT mean``, a ``*_pct_s`` at the study's
    ``percentile``; "" for a metric that is no latency, or a name the registry does not hold."""
    metric = METRICS.get(name) or METRICS.get(metric_of_column(name) or "")
    return metric.stat.format(pct=f"{percentile:g}") if metric is not None else ""


def unit_label(name: str, percentile: float) -> str:
    """`` (TTFT p99, s)``, `` ($/M tokens)``: what a column or axis of metric (or column) ``name``
    holds, its statistic where it is a latency whose name does not say it (``ttft_pct_s``,
    ``tpot_s``; not ``ttft_p99_s`` or ``tpot_mean_s``), then its unit; "" when it has neither."""
    metric = METRICS.get(name) or METRICS.get(metric_of_column(name) or "")
    stat = statistic(name, percentile)
    stat = "" if stat and stat.split()[-1] in name.split("_") else stat  # the name says it
    said = [x for x in (stat, metric.unit if metric else "") if x]
    return f" ({', '.join(said)})" if said else ""


def objective_rule(name: str) -> str | None:
    """Why ``name`` names no objective (one line's rule), or None when it does."""
    metric = METRICS.get(name)
    if metric is not None and metric.direction is not None:
        return None
    listed = f"must be a metric with a direction: {', '.join(OBJECTIVES)}"
    of = metric_of_column(name)
    if of is not None and METRICS[of].direction is not None:
        return f"{name!r} is the exported column of objective {of!r}: name the objective {of!r}"
    if of is not None:
        return f"{name!r} is the exported column of metric {of!r}, recorded only (no direction); {listed}"
    if metric is not None:
        return f"is recorded only (no direction); {listed}"
    return listed


@dataclass(frozen=True)
class Constraint:
    unit: str
    doc: str


CONSTRAINTS = {
    "placement": Constraint("", "1 when the MILP found no placement, else 0"),
    "ttft_s": Constraint("s", "TTFT at the study's percentile minus its target"),
    "tpot_s": Constraint("s", "mean TPOT minus its target"),
    "stability": Constraint("requests/s", "backlog growth of an unstable design, else 0"),
    "gpus": Constraint("GPUs", "GPUs minus the study's cap (when it has one)"),
    "wall_clock": Constraint("", "1 when the trial ran over its wall-clock cap, else 0"),
}
"""What a trial is checked against, as numbers where <= 0 is feasible (the ``c_<name>`` columns)."""


def markdown_table() -> str:
    """The metric and constraint columns of the trials table, for ``docs/schema.md``: per metric
    column the objective that names it (the metric's name, with its direction), where it may be one,
    and for a recorded-only metric whose column is named otherwise, the name a function reads it by."""
    rows = ["| column | objective | unit | what |", "|---|---|---|---|"]
    for n, m in METRICS.items():
        objective = f"`{n}` ({m.direction})" if m.direction is not None else "recorded only"
        if m.direction is None and column(n) != n:  # the name a Python objective reads it by
            objective += f' (`m["{n}"]`)'
        rows.append(f"| `{column(n)}` | {objective} | {m.unit} | {m.doc} |")
    rows += [f"| `c_{n}` | | {c.unit} | {c.doc} (`<= 0` feasible) |" for n, c in CONSTRAINTS.items()]
    return "\n".join(rows)
