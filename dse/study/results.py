"""A study's trials as flat tables (polars): trials, Pareto front, placements, KV tiers, and the
simulated time series of the front. Column names carry their units. :data:`SCHEMA_VERSION`
changes whenever a column is renamed, removed or changes meaning.

Many trials of a search land on the same design: a batch cap above what the load fills, or a
chunk that changes nothing, gives the same hardware, shapes and outcome. :func:`with_designs`
names each trial's design by the first trial that delivered it, so the front, the report and the
run's summary show each design once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import optuna
import polars as pl

from dse.catalog import Catalog
from dse.metrics import CONSTRAINTS, METRIC_COLUMNS, METRICS, column
from dse.perf.params import PerfParams
from dse.placement.request import Topology
from dse.sim.kv_tiers import TIER_NAMES
from dse.sim.simulation import TRAJECTORY_COLUMNS, trajectories_frame
from dse.sim.stored import simulate_stored
from dse.study.choice import SPLIT_DECODE, choice_from_params, choice_record
from dse.study.objectives import NO_VALUE, NO_VALUE_KEY

SCHEMA_VERSION = 6  # docs/schema.md's version history
PARAM_COLUMNS = (
    "topology",
    "kv_policy",
    "prefill_hardware",
    "prefill_shape",
    "decode_hardware",
    "decode_shape",
    "chunk_tokens",
    "max_batch",
    "prefill_share",
    "ffn_tokens_per_gpu",
    "midfill_hardware",
    "midfill_shape",
)
CHOICE_COLUMNS = tuple(
    f"p_{k}"
    for k in (
        "topology",
        "kv_policy",
        "prefill_hardware",
        "prefill_shape",
        "decode_hardware",
        "decode_shape",
        "midfill_hardware",
        "midfill_shape",
    )
)
NOT_OUTCOME = ("decode_batch_sequences", "milp_solve_s")  # a setting and a timing, not what a design delivers
# compared exactly: a node more is another design; the constraints' verdict, not their margins
EXACT_COLUMNS = ("gpus", "feasible")
# outcomes within 0.1% are the same design: far below the model's error, and the tables show 3-4 figures
DESIGN_RTOL, DESIGN_ATOL = 1e-3, 1e-6
# percentiles of the engine-level simulation's window (and the figures taken from them) carry its
# sampling error, a few percent: a chunk size that changes nothing else moves them by that much;
# so does it the power at load (the share of a prefill forward its kernels take), a fitted estimate
# whose own error is larger (8% median on the measured runs: docs/accuracy.md)
SAMPLED_COLUMNS = (
    "ttft_pct_s", "ttft_p99_s", "engine_ttft_pct_s", "engine_tpot_pct_s", "engine_ttft_p99_s",
    "power_kw", "kwh_per_million_tokens", "energy_usd_per_hour",
)  # fmt: skip
SAMPLED_RTOL = 0.03
# the fluid simulation's queues (requests) and backlog growth (requests/s) near empty: a thousandth
# of a request, or of a request per second, is none; the solver's last digits had left 1.2e-6
# requests where another trial of the same design had 3.5e-13, and counted the two as two designs
# (deepseek-production's one-design front as two)
QUEUE_COLUMNS = (
    "sim_backlog_growth_per_s", "queue_peak_prefill_requests", "queue_peak_buffer_requests",
    "swing_prefill_queue_requests",
)  # fmt: skip
QUEUE_ATOL = 1e-3


# each exported table's columns and types where no row says them (a study with no trial, no
# design or no returning traffic writes its tables with every column, typed, and no row: a
# Parquet file without columns is one that DuckDB refuses to read)
TRIALS_SCHEMA: dict[str, Any] = {
    "study": pl.String, "trial": pl.Int64, "state": pl.String,
    "started_utc": pl.Datetime("us", "UTC"), "finished_utc": pl.Datetime("us", "UTC"),
    "duration_s": pl.Float64, "warm_start": pl.Boolean,
    # a choice no trial made (no four-stage trial: no midfill) is still its type, not Null, so
    # that two studies' tables read together
    **{f"p_{k}": pl.Float64 if k in ("prefill_share", "ffn_tokens_per_gpu") else
       pl.Int64 if k in ("chunk_tokens", "max_batch") else pl.String for k in PARAM_COLUMNS},
    **{column(m): pl.Int64 if METRICS[m].whole else pl.Float64 for m in METRICS},
    "slo_percentile": pl.Float64,
    **{f"c_{k}": pl.Float64 for k in CONSTRAINTS},
    "feasible": pl.Boolean, "binding": pl.String,
}  # fmt: skip
PLACEMENTS_SCHEMA: dict[str, Any] = {
    "study": pl.String, "trial": pl.Int64, "pool": pl.Int64, "role": pl.String, "hardware": pl.String,
    "shape": pl.String, "instances": pl.Int64, "gpus": pl.Int64, "decode_batch_sequences": pl.Float64,
    "prefill_share": pl.Float64, "hbm_gb_per_gpu": pl.Float64, "working_gb_per_gpu": pl.Float64,
    "weights_gb_per_gpu": pl.Float64, "requests_per_s": pl.Float64, "output_tokens_per_s": pl.Float64,
    "usd_per_hour": pl.Float64, "resting_dram_gb": pl.Float64, "resting_nvme_gb": pl.Float64,
    "resting_network_gb": pl.Float64, "kv_gpus": pl.Int64,
}  # fmt: skip
KV_TIERS_SCHEMA: dict[str, Any] = {
    "study": pl.String, "trial": pl.Int64, "kv_class": pl.String, "returning_per_s": pl.Float64,
    "dwell_s": pl.Float64, "gb_per_session": pl.Float64, "tier": pl.String, "share": pl.Float64,
    "stored_gb": pl.Float64,
}  # fmt: skip
SIM_TIMESERIES_SCHEMA: dict[str, Any] = {
    "t_s": pl.Float64,
    **{col: pl.Float64 for col in TRAJECTORY_COLUMNS.values()},
    **{f"resting_kv_{tier}_gb": pl.Float64 for tier in TIER_NAMES},
    "study": pl.String, "trial": pl.Int64,
}  # fmt: skip


def _utc(dt: Any) -> Any:
    """A trial's time in UTC: Optuna gives naive local time (it stores naive UTC)."""
    return None if dt is None else dt.astimezone(UTC)


def choice_columns(choice: dict[str, Any]) -> dict[str, Any]:
    """The trial's ``p_*`` columns; a choice its topology does not make (the prefill share of
    anything but an aggregated unit, the expert-side batch of anything but attention-FFN) is
    null, not the 0 the record holds for it."""
    out = {f"p_{k}": choice.get(k) for k in PARAM_COLUMNS}
    topology = choice.get("topology")
    if topology != Topology.AGGREGATED.value:
        out["p_prefill_share"] = None
    if topology not in SPLIT_DECODE:
        out["p_ffn_tokens_per_gpu"] = None
    return out


def _constraints(cons: dict[str, Any]) -> dict[str, float | None]:
    """The trial's ``c_*`` columns: each recorded margin; one never checked because the trial
    stopped first (no placement, over its wall-clock cap) is null, else 0 (a cap the study does
    not set, a wall clock not reached)."""
    stopped = float(cons.get("placement", 0.0)) > 0 or float(cons.get("wall_clock", 0.0)) > 0
    return {f"c_{k}": float(cons[k]) if k in cons else None if stopped else 0.0 for k in CONSTRAINTS}


def _value(metric: str, v: Any) -> Any:
    """A metric's value in its column's type: a count (``gpus``) as an integer; None stays null."""
    if v is None or not METRICS[metric].whole:
        return v
    return int(v) if math.isfinite(v) else None


def recorded_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """A trial's recorded metrics in today's names. A trial recorded before schema 6 has one
    ``oscillation_amplitude``, the swing of prefill servers where the planner moved them after the
    warm-up, else of the prefill queue's requests: it is the queue's where the planner moved no
    instance in the whole run; else which signal it measured is not recorded, and both are null."""
    if "oscillation_amplitude" not in metrics or "swing_prefill_servers" in metrics:
        return metrics
    out = {k: v for k, v in metrics.items() if k != "oscillation_amplitude"}
    queue = out.get("planner_moves") == 0
    out["swing_prefill_servers"] = None
    out["swing_prefill_queue_requests"] = metrics["oscillation_amplitude"] if queue else None
    return out


class TrialsRead:
    """A study's trials as read once, at ``read_utc``, with its name: what every table of one
    export or report is built from, so that they hold the same trials while workers still add
    theirs (each table had read the storage again: a trial finished between two reads was in the
    placements and not in the trials). Takes the place of the study in the ``*_frame`` functions."""

    def __init__(self, study: optuna.Study) -> None:
        self.study_name: str = study.study_name
        self.trials: tuple[optuna.trial.FrozenTrial, ...] = tuple(study.get_trials(deepcopy=False))
        self.read_utc: datetime = datetime.now(UTC)

    def get_trials(
        self, deepcopy: bool = False, states: Sequence[optuna.trial.TrialState] | None = None
    ) -> list[optuna.trial.FrozenTrial]:
        """As ``Study.get_trials`` (never copied: the trials are read-only here)."""
        return [t for t in self.trials if states is None or t.state in states]

    def unfinished(self) -> dict[str, int]:
        """The trials not finished when read, by state name (``running``: in a worker now, or
        left by a dead one; ``waiting``: queued), those there are."""
        states = (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)
        return {s.name.lower(): n for s in states if (n := sum(t.state is s for t in self.trials))}

    def note(self, it: str = "it") -> str | None:
        """What a table or report read from these trials (``it``, as the sentence names it) holds
        and leaves out, in words; None when every trial was finished."""
        left = self.unfinished()
        if not left:
            return None
        done = [t.number for t in self.get_trials(states=(optuna.trial.TrialState.COMPLETE,))]
        n = sum(left.values())
        said = " and ".join(f"{k} {s}" for s, k in left.items())
        held = f"the {len(done)} complete trials (the last, trial {max(done)})" if done else "no trial"
        were = "trials were" if n > 1 else "trial was"
        return (
            f"read at {self.read_utc:%Y-%m-%d %H:%M:%S} UTC, while {said} {were} not "
            f"finished (workers still at {'them' if n > 1 else 'it'}, or a dead one's): {held} are in {it}, "
            "not those; write it again once they finish"
        )


def _records(study: TrialsRead) -> list[tuple[optuna.trial.FrozenTrial, dict[str, Any]]]:
    return [
        (t, t.user_attrs.get("record", {}))
        for t in study.get_trials(deepcopy=False)
        if t.state is optuna.trial.TrialState.COMPLETE
    ]


def _objective_values(names: list[str], values: list[float] | None, rec: dict[str, Any]) -> dict[str, Any]:
    """A trial's ``objective_<name>`` columns: null for an objective its record lists without a
    value (told as the worst value; a function's real values of 1e12 and more had read as none
    too); a record from before that list was kept: null at the worst value's magnitude."""
    none = rec.get(NO_VALUE_KEY)
    row: dict[str, Any] = {}
    for name, v in zip(names, values or [], strict=False):
        missing = v is None or (name in none if isinstance(none, list) else abs(v) >= NO_VALUE)
        row[f"objective_{name}"] = None if missing else v
    return row


def point_columns(axes: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
    """A grid study's ``x_<axis>`` columns and their types, from its axes (``Sweep.axes()``): an
    axis of names is a string, one of numbers Float64 (an axis of whole numbers too, as the study
    file reads it), whether or not a trial has finished."""
    names = {k for k, values in axes.items() if all(isinstance(v, str) for v in values)}
    return {f"x_{k}": pl.String if k in names else pl.Float64 for k in axes}


def trials_schema(objectives: list[str], axes: Mapping[str, Sequence[Any]] | None = None) -> dict[str, Any]:
    """The ``trials`` table's columns and types in their order: :data:`TRIALS_SCHEMA` with a grid
    study's point right after ``warm_start`` (as its rows have it), then an ``objective_<name>``
    per objective, ``design`` and ``design_trials``."""
    out: dict[str, Any] = {}
    for name, dtype in TRIALS_SCHEMA.items():
        out[name] = dtype
        if name == "warm_start":
            out.update(point_columns(axes or {}))
    out.update({f"objective_{name}": pl.Float64 for name in objectives})
    return out | {"design": pl.Int64, "design_trials": pl.Int64}


def trials_frame(
    study: TrialsRead,
    objectives: list[str],
    percentile: float | None = None,
    axes: Mapping[str, Sequence[Any]] | None = None,
) -> pl.DataFrame:
    """One row per finished trial; ``percentile``: the study's TTFT target's (``slo.percentile``),
    which its ``*_pct_s`` columns and ``c_ttft_s`` are taken at, in a column of its own so that
    studies of different percentiles read together tell them apart; ``axes``: a grid study's
    (``spec.sweep.axes()``), whose ``x_<axis>`` columns a table without a finished trial has too
    (it had none: a dashboard of the grid's points broke on its empty table)."""
    rows = []
    for t, rec in _records(study):
        choice = rec.get("choice") or _capped_choice(rec)
        metrics = recorded_metrics(rec.get("metrics", {}))
        cons = rec.get("constraints", {})
        row: dict[str, Any] = {
            "study": study.study_name,
            "trial": t.number,
            "state": t.state.name.lower(),
            "started_utc": _utc(t.datetime_start),
            "finished_utc": _utc(t.datetime_complete),
            # between the instants (naive local times differ by the hour a daylight-saving switch
            # repeats: a 60-s trial across it had lasted -3,540 s)
            "duration_s": (_utc(t.datetime_complete) - _utc(t.datetime_start)).total_seconds()
            if t.datetime_complete and t.datetime_start
            else None,
            # enqueued from the full placement (dse.study.warm_start) rather than sampled
            "warm_start": "fixed_params" in t.system_attrs,
        }
        row.update({f"x_{k}": v for k, v in rec.get("point", {}).items()})  # grid studies
        row.update(choice_columns(choice))
        row.update({col: _value(m, metrics.get(m)) for m, col in METRIC_COLUMNS.items()})
        row["slo_percentile"] = percentile
        row.update(_constraints(cons))
        row["feasible"] = all(float(v) <= 0 for v in cons.values()) and bool(cons)
        row["binding"] = rec.get("binding") or None  # a feasible trial: nothing binds
        row.update(_objective_values(objectives, t.values, rec))
        rows.append(row)
    schema = trials_schema(objectives, axes)
    if not rows:  # with the columns with_designs adds to rows
        return pl.DataFrame(schema=schema)
    # a column no trial filled (a study whose every trial failed) is still its type, not Null
    return with_designs(without_nan(pl.DataFrame(rows, schema_overrides=schema, infer_schema_length=None)))


def _capped_choice(rec: dict[str, Any]) -> dict[str, Any]:
    """A search trial stopped at its wall-clock cap by a run before 2026-12-07 holds its Optuna
    parameters alone: its choice from them (none where they do not make one)."""
    params = rec.get("params")
    if not isinstance(params, dict):
        return {}
    try:
        return choice_record(choice_from_params(params))
    except (KeyError, TypeError, ValueError):
        return {}


def with_designs(trials: pl.DataFrame) -> pl.DataFrame:
    """``trials`` (which must have ``trial``) with ``design``, the first trial with the same
    design, and ``design_trials``, how many trials have it; a table that has ``design`` already
    (e.g. one filtered from a table that got it) is returned as it is.

    The same design: the same grid point, topology, KV policy, hardware, shapes, GPUs and
    feasibility, exactly, and the same outcome, every other metric but the decode batch and the
    solve time, and every objective, within :data:`DESIGN_RTOL` of the design's first trial
    (:data:`SAMPLED_RTOL` for the simulated percentiles; :data:`DESIGN_ATOL` near zero,
    :data:`QUEUE_ATOL` for the simulated queues; missing matches missing): the simulator's last digits move
    with settings that change nothing else. In trial order, a trial joins the first design whose
    first trial it matches, else starts its own. Columns the table lacks are left out."""
    if trials.is_empty() or "design" in trials.columns:
        return trials
    outcome = set(METRIC_COLUMNS.values()) - set(NOT_OUTCOME) - set(EXACT_COLUMNS)
    keys = [c for c in trials.columns if c.startswith("x_") or c in CHOICE_COLUMNS or c in EXACT_COLUMNS]
    values = [c for c in trials.columns if c in outcome or c.startswith("objective_")]
    numbers = trials["trial"].to_list()
    key_rows = trials.select(keys).rows() if keys else [()] * trials.height
    x = (
        trials.select(pl.col(c).cast(pl.Float64) for c in values).to_numpy().astype(float)
        if values
        else np.zeros((trials.height, 0))
    )
    rtol = np.array([SAMPLED_RTOL if c in SAMPLED_COLUMNS else DESIGN_RTOL for c in values])
    atol = np.array([QUEUE_ATOL if c in QUEUE_COLUMNS else DESIGN_ATOL for c in values])
    groups: dict[tuple[Any, ...], list[int]] = {}  # choice -> its rows in trial order
    for i in np.argsort(numbers, kind="stable"):
        groups.setdefault(key_rows[i], []).append(int(i))
    design = np.empty(trials.height, dtype=np.int64)
    for rows in groups.values():
        starts = np.empty((len(rows), x.shape[1]))  # the outcome of each design begun so far
        first: list[int] = []  # and its trial
        for i in rows:
            same = np.isclose(starts[: len(first)], x[i], rtol=rtol, atol=atol, equal_nan=True)
            hit = np.flatnonzero(same.all(axis=1))
            if hit.size:
                design[i] = first[hit[0]]
            else:
                starts[len(first)] = x[i]
                first.append(numbers[i])
                design[i] = numbers[i]
    out = trials.with_columns(design=pl.Series(design))
    return out.with_columns(design_trials=pl.len().over("design").cast(pl.Int64))


def batch_cap(batch: float | None) -> int | None:
    """A decode instance's running-request cap from the batch its pool was sized at (a trial's or
    a pool's ``decode_batch_sequences``): whole sequences down, at least one; None where there is
    none. What `dse deploy` launches and the tables show."""
    if batch is None or not math.isfinite(batch) or batch <= 0:
        return None
    return max(1, math.floor(batch + 1e-6))


def distinct_designs(df: pl.DataFrame) -> pl.DataFrame:
    """The first row of each design, in the table's order."""
    if df.is_empty():
        return df
    return with_designs(df).unique(subset="design", keep="first", maintain_order=True)


TIE_BREAK = (("usd_per_million_tokens", "minimize"), ("tokens_per_s_per_gpu", "maximize"))
"""Among trials equal on every objective a study ranks by (the GPUs of a fleet sized to its
traffic, a whole rack): the cheaper per token first, as the placement MILP breaks its own ties
on GPUs (``formulations/placement.py``: a cost term of weight 1e-6 under the GPU objective),
then the more tokens per GPU, then the earlier trial."""


def order_of_equals(objectives: Sequence[tuple[str, str]]) -> list[str]:
    """How :func:`ranked` orders trials equal on the first of ``objectives``, in words: the later
    objectives, then :data:`TIE_BREAK`'s columns that are none of them, then trial order."""
    named = {n for n, _ in objectives}
    later = [f"{n} ({d})" for n, d in objectives[1:]]
    return [*later, *(f"{c} ({d})" for c, d in TIE_BREAK if c not in named), "trial order"]


def ranked(df: pl.DataFrame, objective: tuple[str, str], *then: tuple[str, str]) -> pl.DataFrame:
    """``df`` best first on one objective (its ``objective_<name>`` column; ``(name, direction)``),
    missing values last, equals best first on the objectives ``then`` (a study's later ones: of two
    designs with the same GPUs the faster per user is the better, where trial order had put the
    other first), then by :data:`TIE_BREAK` (where its columns are there), then in trial order; as
    it is when the column is missing."""
    col = f"objective_{objective[0]}"
    if df.is_empty() or col not in df.columns:
        return df
    named = [objective[0], *(n for n, _ in then)]
    order = [(col, objective[1])] + [(f"objective_{n}", d) for n, d in then if f"objective_{n}" in df.columns]
    order += [(c, d) for c, d in TIE_BREAK if c in df.columns and c not in named]
    order += [("trial", "minimize")] if "trial" in df.columns else []
    return df.sort([c for c, _ in order], descending=[d == "maximize" for _, d in order], nulls_last=True)


def speed_front(df: pl.DataFrame, x: str, y: str) -> pl.DataFrame:
    """Rows no other row beats on both ``x`` and ``y`` (both maximised, rows missing either
    left out), by ``x``: the frontier of throughput against speed, whatever the objectives."""
    df = df.drop_nulls([x, y])
    keep = non_dominated(-np.column_stack([df[x].to_numpy(), df[y].to_numpy()]))
    return df.filter(pl.Series(keep)).sort(x)


# values within this share of each other are equal to the front: a design 16% cheaper had left a
# dearer one on it, ahead by 5e-10 in tokens/s per user (the simulation's rounding)
FRONT_EQUAL = 1e-6


def non_dominated(vals: np.ndarray) -> np.ndarray:
    """Which rows of ``vals`` (a column per objective, smaller better) no other row beats: as good
    on every column and better on one, within :data:`FRONT_EQUAL`. A row missing a value (nan) is
    on no front and beats no row: nan compares false both ways, so it once beat nothing and
    nothing beat it."""
    vals = np.asarray(vals, dtype=float)
    valued = ~np.isnan(vals).any(axis=1)
    rows = vals[valued]
    keep = np.zeros(len(vals), dtype=bool)

    def beaten(v: np.ndarray) -> bool:
        tol = FRONT_EQUAL * np.abs(v)
        return bool(np.any(np.all(rows <= v + tol, axis=1) & np.any(rows < v - tol, axis=1)))

    keep[valued] = [not beaten(v) for v in rows]
    return keep


def best_of(trials: pl.DataFrame, objective: tuple[str, str], *then: tuple[str, str]) -> int | None:
    """The feasible trial best on one objective (``(name, direction)``) among those with a value
    for it (equals as :func:`ranked` orders them); None when there is none."""
    col = f"objective_{objective[0]}"
    if trials.is_empty() or col not in trials.columns:
        return None
    valued = trials.filter(pl.col("feasible") & pl.col(col).is_not_null() & pl.col(col).is_not_nan())
    return None if valued.is_empty() else int(ranked(valued, objective, *then)["trial"][0])


def pareto_frame(trials: pl.DataFrame, objectives: list[str], directions: list[str]) -> pl.DataFrame:
    """Feasible trials with a value for every objective that no other such trial beats on every
    objective, best first on the first objective, each design (:func:`with_designs`) once: its
    best trial on the front (the first, among equals). A trial whose objective gave no value (a
    function's None, nan or infinity; stored as null) is on no front."""
    if trials.is_empty():
        return trials
    cols = [f"objective_{o}" for o in objectives]
    valued = [pl.col(c).is_not_null() & pl.col(c).is_not_nan() for c in cols]
    feas = trials.filter(pl.col("feasible"), *valued)
    if feas.is_empty():
        return feas
    vals = np.column_stack(
        [
            feas[f"objective_{o}"].to_numpy() * (1.0 if d == "minimize" else -1.0)
            for o, d in zip(objectives, directions, strict=True)
        ]
    )
    keep = non_dominated(vals)
    return distinct_designs(ranked(feas.filter(pl.Series(keep)), *zip(objectives, directions, strict=True)))


# a pool's figure that only pools of some roles have: null on the others, not the 0 the record
# holds for it (a prefill pool decodes no batch; only an aggregated pool splits its time)
POOL_ROLE_FIGURES = {
    "decode_batch_sequences": ("decode", "mixed", "attention", "ffn"),
    "prefill_share": ("mixed",),
}


def placements_frame(study: TrialsRead) -> pl.DataFrame:
    """One row per trial and pool; a pool's requests/s the traffic it is sent, where a grid point's
    headroom sized it for more (its record keeps what it was sized for, which ``deploy`` sizes the
    router by: a prefill pool sized for 50 requests/s with headroom 0.25 had read 50 here, where
    it serves 40)."""
    rows = [
        {"study": study.study_name, "trial": t.number, "pool": i, **p, **sent_load(p, rec)}
        for t, rec in _records(study)
        for i, p in enumerate(rec.get("pools", []))
    ]
    if not rows:
        return pl.DataFrame(schema=PLACEMENTS_SCHEMA)
    df = pl.DataFrame(rows, infer_schema_length=None).rename(_units_pools())
    df = df.cast({k: v for k, v in PLACEMENTS_SCHEMA.items() if k in df.columns})
    return without_nan(
        df.with_columns(
            pl.when(pl.col("role").is_in(roles)).then(pl.col(c)).otherwise(None).alias(c)
            for c, roles in POOL_ROLE_FIGURES.items()
            if c in df.columns
        )
    )


def _served(rec: dict[str, Any]) -> float:
    """The share of what its pools are sized for that a trial serves: 1 / (1 + its grid point's headroom)."""
    return 1.0 / (1.0 + float((rec.get("point") or {}).get("headroom") or 0.0))


def sent_load(pool: dict[str, Any], rec: dict[str, Any]) -> dict[str, Any]:
    """The pool's requests/s at its grid point's own traffic (pools sized for 1 + headroom times it)."""
    sized, served = pool.get("requests_per_s"), _served(rec)
    return {} if sized is None or served == 1.0 else {"requests_per_s": float(sized) * served}


def served_tiers(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The record's KV classes at its grid point's own traffic: returns/s and the GB stored in each
    tier scaled from the 1 + headroom times it the pools are sized for."""
    served = _served(rec)
    scaled = ("returning_per_s", *(f"stored_{t}_gb" for t in TIER_NAMES))
    return [
        {k: v * served if k in scaled and v is not None else v for k, v in c.items()}
        for c in rec.get("tiers", [])
    ]


def without_nan(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with nan in its float columns as null: a value the model could not give (a pool of
    hardware without a price in the study's tier) is missing, as in ``trials``; BI tools and SQL
    aggregate nan as a number (DuckDB's max is nan, its avg nan)."""
    floats = [c for c, t in df.schema.items() if t.is_float()]
    return df.with_columns(pl.col(floats).fill_nan(None)) if floats else df


def _units_pools() -> dict[str, str]:
    return {
        "decode_batch": "decode_batch_sequences",
        "requests_per_s": "requests_per_s",
        "output_tokens_per_s": "output_tokens_per_s",
    }


def kv_tiers_frame(study: TrialsRead) -> pl.DataFrame:
    """One row per trial, KV class and tier, at the traffic the trial serves: a grid point with
    headroom is sized for 1 + headroom times it (as :func:`sent_load`; it had read 16.8 returns/s
    and 2,017 GB resting in DRAM where the point's traffic rests 1,374)."""
    rows = []
    for t, rec in _records(study):
        for c in served_tiers(rec):
            for tier in ("hbm", "dram", "nvme", "network", "drop"):
                rows.append(
                    {
                        "study": study.study_name,
                        "trial": t.number,
                        "kv_class": c["kv_class"],
                        "returning_per_s": c["returning_per_s"],
                        "dwell_s": c["dwell_s"],
                        "gb_per_session": c["gb_per_session"],
                        "tier": tier,
                        "share": c.get(f"share_{tier}", 0.0),
                        "stored_gb": c.get(f"stored_{tier}_gb", 0.0),
                    }
                )
    return without_nan(pl.DataFrame(rows, schema=KV_TIERS_SCHEMA))


def designed_trials(study: TrialsRead) -> set[int]:
    """The complete trials whose record keeps a design to simulate again (a trial the MILP
    placed nothing for has none, nor one stored before records kept their designs)."""
    return {t.number for t, rec in _records(study) if rec.get("simulation")}


def sim_timeseries_frame(
    study: TrialsRead,
    trial_numbers: list[int],
    catalog: Catalog,
    params: PerfParams,
    every_s: float = 10.0,
) -> pl.DataFrame:
    """The fluid trajectories of the given trials, one row per trial and sample, every whole
    number of simulation steps nearest ``every_s`` seconds (9 s for 10 at a 3-s step: ``t_s``
    says): each trial's stored design simulated again in its stored scenario (deterministic;
    nothing is solved). Trials stored before records kept their design have none."""
    frames = []
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    for n in trial_numbers:
        sim = simulate_stored(by_number[n].user_attrs.get("record", {}).get("simulation"), catalog, params)
        if sim is None:
            continue
        df = trajectories_frame(sim).filter(pl.col("simulator") == "fluid")
        step = (
            max(int(round(every_s / max(float(df["t_s"][1] - df["t_s"][0]), 1e-9))), 1)
            if df.height > 1
            else 1
        )
        # the rows at whole multiples of the spacing (10, 20, ... s: a fluid row holds its step's end)
        df = df.filter((pl.int_range(pl.len()) + 1) % step == 0).drop("simulator", "config")
        frames.append(
            df.with_columns(pl.lit(study.study_name).alias("study"), pl.lit(n, dtype=pl.Int64).alias("trial"))
        )
    return without_nan(pl.concat(frames)) if frames else pl.DataFrame(schema=SIM_TIMESERIES_SCHEMA)
