"""Study files (``studies/*.toml``) as typed, validated specs: one table per concern.

```toml
name = "deepseek-v3-blackwell"      # must equal the file stem
model = "deepseek-v3"
hardware = ["b200", "gb200-nvl72"]
trials = 200
seed = 7

[workload]   # dse.workload.Workload
[slo]        # dse.workload.Slo
[search]     # topologies, kv policies, sampler, warm_start
[search.prefill]   shapes, chunk_tokens
[search.midfill]   shapes                   # four-stage; default: the prefill shapes
[search.decode]    shapes, max_batch = [low, high]
[search.aggregated] prefill_share = [low, high]
[search.afd]        ffn_tokens_per_gpu = [..]
[objectives]  names = [...]          # metrics with a direction (dse.metrics.OBJECTIVES)
[limits]      budget_usd_hour, power_kw, max_gpus
[energy]      usd_per_kwh, pue                      # energy priced on top of the GPU-hour rate
[storage]     dram_usd_per_tb, nvme_usd_per_tb, network_usd_per_tb, years   # capex of resting KV
[simulate]    horizon_s, arrivals, burst_factor, ...
[[variants]]  id, base, hbm_bandwidth_scale, hbm_capacity_scale   # what-if hardware
[sweep]       axes (lists) of a grid study: model, hardware, input_tokens, tpot_s, burst_factor, ...
```

A study with a ``[sweep]`` table is a grid study: every point of the grid is one trial, answered
by the full placement (every listed shape and topology at once) and checked by the simulator.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.errors import InputError, UnknownIdError
from dse.metrics import objective_rule
from dse.paths import STUDIES_DIR
from dse.perf.frameworks import ENGINES
from dse.placement.request import KV_POLICIES, PRICE_TIERS, Topology
from dse.placement.shapes import parse_shape
from dse.plain import plain
from dse.sim.kinds import MAX_STEPS, MIN_MEASURED_STEPS, substeps
from dse.typed_data import (
    Rule,
    acceptance,
    at_least_one,
    build,
    draft_depth,
    lower_id,
    non_empty,
    non_negative,
    positive,
    read_toml,
    rule,
)
from dse.workload import Slo, Workload, at_least_min_rate, tpot_target, ttft_target

if TYPE_CHECKING:
    from dse.catalog import Catalog


def _shapes(value: tuple[str, ...]) -> str | None:
    if not value:
        return "must list at least one shape"
    seen: dict[str, str] = {}
    for label in value:
        if label != label.strip():  # the exports would carry the spaces, and joins on shape break
            return f"has {label!r}, with spaces around the shape"
        try:
            canonical = parse_shape(label).label()
        except InputError:
            return f"has {label!r}, not a shape like 8gpu-tp8-ep8 or 16gpu-dpa-ep16"
        if canonical in seen:
            also = "" if seen[canonical] == label else f" (as {seen[canonical]!r} too)"
            return f"has {label!r} twice{also}"
        seen[canonical] = label
    return None


def _shapes_or_none(value: tuple[str, ...]) -> str | None:
    return _shapes(value) if value else None


def _decode_shapes(value: tuple[str, ...]) -> str | None:
    """Shapes, none of them pipelined: decode steps do not pipeline here."""
    bad = _shapes(value)
    if bad is not None:
        return bad
    staged = [label for label in value if parse_shape(label).pp > 1]
    return f"has {staged[0]!r}: pipeline stages are for prefill shapes only" if staged else None


def _range(value: tuple[float, ...]) -> str | None:
    if len(value) != 2 or not 0 < value[0] <= value[1]:
        return "must be [low, high] with 0 < low <= high"
    return None


def _positive_list(value: tuple[float, ...]) -> str | None:
    if not value or any(v <= 0 for v in value):
        return "must list positive numbers"
    return None


MAX_SEED = 2**32 - 1  # numpy's seeds


def seed_rule(value: int) -> str | None:
    return None if 0 <= value <= MAX_SEED else f"must be between 0 and {MAX_SEED}"


def folder_name(value: str) -> str | None:
    """A study's name names its run folder: one plain folder name, nothing that leaves ``--out``."""
    bad = value in ("", ".", "..") or value != value.strip() or any(c in value for c in "/\\\0")
    if bad:
        return "must be a plain folder name (no path separators, not '.' or '..')"
    if "=" in value:  # runs/a=b/exports/...: polars reads the folder as a column a, holding b
        return "must not hold '=': hive readers of the exports take a folder named key=value as a column"
    if value == "__HIVE_DEFAULT_PARTITION__":  # every reader reads the exports' study column as null
        return "must not be the name hive readers of the exports read as a missing value"
    return None


def _optional_positives(value: tuple[float, ...]) -> str | None:
    return _positive_list(value) if value else None


def _each(check: Rule) -> Rule:
    """A rule for a list: the first of its values ``check`` refuses says why."""
    return lambda values: next((check(v) for v in values if check(v)), None)


_tpot_targets = _each(tpot_target)
_ttft_targets = _each(ttft_target)
_rates = _each(at_least_min_rate)


def _token_counts(value: tuple[float, ...]) -> str | None:
    """Token budgets: whole numbers of at least 1 (a chunk of 0.5 token is none)."""
    if not value or any(v < 1 or not float(v).is_integer() for v in value):
        return "must list whole numbers of tokens >= 1"
    return _repeated(value)


def _repeated(value: tuple[Any, ...]) -> str | None:
    """A list of choices that names one twice (as ``[sweep]`` refuses too)."""
    twice = next((v for i, v in enumerate(value) if v in value[:i]), None)
    if twice is None:
        return None
    return f"must not repeat a value ({f'{twice:g}' if isinstance(twice, float) else repr(twice)} twice)"


def _positive_choices(value: tuple[float, ...]) -> str | None:
    """Positive values to choose among, each once (``ffn_tokens_per_gpu = [8, 8]`` had passed,
    where ``chunk_tokens`` refused a repeat)."""
    return _positive_list(value) or _repeated(value)


def _choices(value: tuple[Any, ...]) -> str | None:
    return non_empty(value) or _repeated(value)


def _batch_range(value: tuple[float, ...]) -> str | None:
    """Sequences per decode instance, searched on a log scale: whole numbers from 1."""
    bad = _range(value)
    if bad is None and (value[0] < 1 or not all(float(v).is_integer() for v in value)):
        # (1.5 had been searched as 1: a sequence is run whole)
        return "must be [low, high], whole numbers with 1 <= low <= high (sequences per instance)"
    return bad


def _gpu_cap(value: float) -> str | None:
    """GPUs are bought whole: a cap of 0.5 had made every trial infeasible, 12.5 meant 12."""
    return None if value >= 1 and float(value).is_integer() else "must be a whole number of GPUs, at least 1"


def _non_negatives(value: tuple[float, ...]) -> str | None:
    return "must list numbers >= 0" if any(v < 0 for v in value) else None


def _token_lengths(value: tuple[float, ...]) -> str | None:
    """Mean prompt or output lengths: at least 1 token each, as ``[workload]`` has them (0.5 had
    passed ``study show`` and failed the run, naming neither the file nor the axis)."""
    return "must list numbers of tokens >= 1" if any(v < 1 for v in value) else None


MAX_HEADROOM = 10.0
"""The most ``headroom`` a grid may size pools with: a fractional margin on the point's traffic
(0.25: pools for 25% more), so 10 is pools for 11 times the traffic, far past any burst a study
simulates; the fleet grows with it, and ``1e9`` had sized one the simulators cannot hold (22 GB
allocated, then a MemoryError, with the run's study.db left behind)."""


def _headrooms(value: tuple[float, ...]) -> str | None:
    if any(not 0 <= v <= MAX_HEADROOM for v in value):
        times = f"{MAX_HEADROOM:g} is {1 + MAX_HEADROOM:g} times it"
        return f"must list numbers from 0 to {MAX_HEADROOM:g} (a margin on the traffic: {times})"
    return None


@dataclass(frozen=True)
class PrefillSearch:
    shapes: tuple[str, ...] = field(
        default=("8gpu-tp8-ep8", "8gpu-dpa-ep8", "16gpu-dpa-ep16"), metadata=rule(_shapes)
    )
    chunk_tokens: tuple[float, ...] = field(default=(4096.0, 8192.0, 16384.0), metadata=rule(_token_counts))


@dataclass(frozen=True)
class MidfillSearch:
    """A four-stage design's midfill shapes (none listed: the prefill shapes)."""

    shapes: tuple[str, ...] = field(default=(), metadata=rule(_shapes_or_none))


@dataclass(frozen=True)
class DecodeSearch:
    shapes: tuple[str, ...] = field(
        default=("8gpu-dpa-ep8", "16gpu-dpa-ep16", "32gpu-dpa-ep32"), metadata=rule(_decode_shapes)
    )
    max_batch: tuple[float, ...] = field(default=(16.0, 4096.0), metadata=rule(_batch_range))


@dataclass(frozen=True)
class AggregatedSearch:
    prefill_share: tuple[float, ...] = field(default=(0.05, 0.6), metadata=rule(_range))

    def problem(self) -> tuple[str, str, Any] | None:
        if self.prefill_share[1] >= 1.0:
            return (
                "prefill_share",
                "must stay below 1 (decode needs some of the time)",
                list(self.prefill_share),
            )
        return None


@dataclass(frozen=True)
class AfdSearch:
    ffn_tokens_per_gpu: tuple[float, ...] = field(
        default=(16.0, 64.0, 256.0), metadata=rule(_positive_choices)
    )


@dataclass(frozen=True)
class Search:
    topologies: tuple[str, ...] = field(default=("aggregated", "disaggregated"), metadata=rule(_choices))
    kv_policies: tuple[str, ...] = field(default=("tiered",), metadata=rule(_choices))
    sampler: str = "tpe"  # tpe (multivariate), nsga2 (cheap per trial at large budgets), random
    population: int = field(default=50, metadata=rule(positive))  # nsga2
    warm_start: bool = True  # first trials: the full placement's designs (dse.study.warm_start)
    prefill: PrefillSearch = PrefillSearch()
    midfill: MidfillSearch = MidfillSearch()
    decode: DecodeSearch = DecodeSearch()
    aggregated: AggregatedSearch = AggregatedSearch()
    afd: AfdSearch = AfdSearch()

    def problem(self) -> tuple[str, str, Any] | None:
        valid = [t.value for t in Topology if t is not Topology.AUTO]
        for t in self.topologies:
            if t not in valid:
                return ("topologies", f"must be among {', '.join(valid)}", t)
        for k in self.kv_policies:
            if k not in KV_POLICIES:
                return ("kv_policies", f"must be among {', '.join(KV_POLICIES)}", k)
        if self.sampler not in ("tpe", "nsga2", "random"):
            return ("sampler", "must be tpe, nsga2 or random", self.sampler)
        if self.sampler == "nsga2" and self.population < 2:
            return ("population", "must be at least 2 (NSGA-II breeds pairs)", self.population)
        return None


@dataclass(frozen=True)
class Objectives:
    names: tuple[str, ...] = field(default=("usd_per_million_tokens",), metadata=rule(non_empty))

    def problem(self) -> tuple[str, str, Any] | None:
        for n in self.names:
            why = objective_rule(n)
            if why is not None:
                return ("names", why, n)
        if len(set(self.names)) != len(self.names):
            return ("names", "must not repeat a metric", list(self.names))
        return None


@dataclass(frozen=True)
class StudyEnergy:
    """``[energy]``: the site's price per kWh, priced on top of the GPU-hour rate (0: the price
    tier's rate includes power, as the shipped ones do), and its PUE."""

    usd_per_kwh: float = field(default=0.0, metadata=rule(non_negative))
    pue: float = field(default=1.0, metadata=rule(at_least_one))


@dataclass(frozen=True)
class StudyStorage:
    """``[storage]``: capex per TB of the host DRAM, local NVMe and network storage resting KV
    fills, spread over ``years`` (0: no sourced price; the node prices hold the hosts' own)."""

    dram_usd_per_tb: float = field(default=0.0, metadata=rule(non_negative))
    nvme_usd_per_tb: float = field(default=0.0, metadata=rule(non_negative))
    network_usd_per_tb: float = field(default=0.0, metadata=rule(non_negative))
    years: float = field(default=4.0, metadata=rule(positive))


@dataclass(frozen=True)
class StudyLimits:
    budget_usd_hour: float | None = field(default=None, metadata=rule(positive))
    power_kw: float | None = field(default=None, metadata=rule(positive))
    max_gpus: float | None = field(default=None, metadata=rule(_gpu_cap))  # a constraint on each design


COARSEST_STEP_S = 2.0
"""A fluid step this long or as long as the TTFT target gives a study's trials the answers of a
finer one (the headline study, TTFT 2 s: 30 trials alike at steps of 0.5, 2 and 4 s, one of them
infeasible at 8 s and eight at 20 s; TTFT 0.4 s: 40 trials alike at 0.4 and 2 s, 2026-12-05)."""


WARMUP_S = 300.0  # a study's default warm-up, left out of its trials' measured window


@dataclass(frozen=True)
class SimulateSpec:
    horizon_s: float = field(default=1800.0, metadata=rule(positive))
    warmup_s: float = WARMUP_S
    dt_s: float = field(default=2.0, metadata=rule(positive))
    arrivals: str = "constant"
    burst_factor: float = field(default=1.5, metadata=rule(positive))
    burst_start_s: float = 600.0
    burst_s: float = 300.0
    long_tail: bool = True  # 10% of requests at 5.5x the mean length, 90% at half of it: the same mean

    def problem(self) -> tuple[str, str, Any] | None:
        if self.arrivals not in ("constant", "burst"):
            return ("arrivals", "must be constant or burst", self.arrivals)
        if self.warmup_s == WARMUP_S and self.horizon_s <= WARMUP_S:  # the default's: the horizon broke it
            rule_ = f"must be longer than warmup_s ({WARMUP_S:g} s, its default)"
            return ("horizon_s", rule_, self.horizon_s)
        if not 0 <= self.warmup_s < self.horizon_s:
            return ("warmup_s", "must be at least 0 and below horizon_s", self.warmup_s)
        if self.dt_s > (self.horizon_s - self.warmup_s) / MIN_MEASURED_STEPS:
            rule_ = f"must be at most horizon_s less warmup_s over {MIN_MEASURED_STEPS} (steps measured)"
            return ("dt_s", rule_, self.dt_s)
        # as dse simulate's --horizon and --dt (a study of 1e9 steps had run out of memory in its
        # first trial, and left a study of no trial that the corrected file could not resume)
        if self.horizon_s / self.dt_s > MAX_STEPS:
            return (
                "dt_s",
                f"must give at most {MAX_STEPS:g} steps over horizon_s ({self.horizon_s:g} s)",
                self.dt_s,
            )
        step = self.dt_s / substeps(self.dt_s)  # (a longer dt_s is integrated in sub-steps)
        if self.horizon_s / step > MAX_STEPS:
            rule_ = f"must be at most {MAX_STEPS * step:g} s: {MAX_STEPS:g} fluid steps of {step:g} s"
            return ("horizon_s", rule_, self.horizon_s)
        if self.arrivals == "burst":
            return self.burst_problem()
        return None

    def burst_problem(self) -> tuple[str, str, Any] | None:
        """Where the burst falls, for a study that has one (``arrivals = "burst"``, or a grid that
        sweeps ``burst_factor``): one outside the measured window is never seen."""
        if self.burst_s <= 0:
            return ("burst_s", "must be > 0 with arrivals = burst", self.burst_s)
        if not 0 <= self.burst_start_s < self.horizon_s:
            return ("burst_start_s", f"must be at least 0 and below horizon_s ({self.horizon_s:g})",
                    self.burst_start_s)  # fmt: skip
        if self.burst_start_s + self.burst_s <= self.warmup_s:
            rule_ = f"with burst_s must end after warmup_s ({self.warmup_s:g}; a burst in it is not measured)"
            return ("burst_start_s", rule_, self.burst_start_s)
        return None


OUTPUT_TAILS = ("none", "long", "heavy")  # output-length mixtures of dse.study.trial.output_lengths
PLANNERS = ("none", "reactive", "hysteresis", "predictive")
MAX_GRID = 5000


@dataclass(frozen=True)
class Variant:
    """A what-if hardware: ``base`` with its HBM bandwidth and capacity scaled (same price)."""

    id: str = field(metadata=rule(lower_id))
    base: str = field(metadata=rule(non_empty))
    hbm_bandwidth_scale: float = field(default=1.0, metadata=rule(positive))
    hbm_capacity_scale: float = field(default=1.0, metadata=rule(positive))


@dataclass(frozen=True)
class Sweep:
    """The axes of a grid study; an empty axis is not swept (the study's own value holds).

    Placement axes (each point is placed anew): ``model``, ``hardware`` (the point may use only
    that hardware), ``requests_per_s``, ``input_tokens``, ``output_tokens``,
    ``cached_prefix_tokens``, ``ttft_s``, ``tpot_s``, ``kv_policy`` and ``headroom`` (pools
    sized for ``(1 + headroom)`` times the traffic). Dynamics axes (the same placement, simulated anew):
    ``burst_factor``, ``output_tail`` (none, long, heavy), ``planner``, ``planner_period_s``,
    ``planner_delay_s`` (age of the measurements it acts on) and ``buffer_requests`` (prefilled
    requests that may wait for a decode slot)."""

    model: tuple[str, ...] = ()
    hardware: tuple[str, ...] = ()
    requests_per_s: tuple[float, ...] = field(default=(), metadata=rule(_rates))
    input_tokens: tuple[float, ...] = field(default=(), metadata=rule(_token_lengths))
    output_tokens: tuple[float, ...] = field(default=(), metadata=rule(_token_lengths))
    cached_prefix_tokens: tuple[float, ...] = field(default=(), metadata=rule(_optional_positives))
    ttft_s: tuple[float, ...] = field(default=(), metadata=rule(_ttft_targets))
    tpot_s: tuple[float, ...] = field(default=(), metadata=rule(_tpot_targets))
    headroom: tuple[float, ...] = field(default=(), metadata=rule(_headrooms))
    burst_factor: tuple[float, ...] = field(default=(), metadata=rule(_optional_positives))
    output_tail: tuple[str, ...] = ()
    planner: tuple[str, ...] = ()
    planner_period_s: tuple[float, ...] = field(default=(), metadata=rule(_optional_positives))
    planner_delay_s: tuple[float, ...] = field(default=(), metadata=rule(_non_negatives))
    buffer_requests: tuple[float, ...] = field(default=(), metadata=rule(_optional_positives))
    kv_policy: tuple[str, ...] = ()

    def axes(self) -> dict[str, tuple[Any, ...]]:
        """The swept axes in the order this class lists them (not the file's), each with its values."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name)}

    def size(self) -> int:
        return math.prod(len(v) for v in self.axes().values()) if self.axes() else 0

    def problem(self) -> tuple[str, str, Any] | None:
        for name, values in self.axes().items():
            if len(set(values)) != len(values):
                return (name, "must not repeat a value", list(values))
        for t in self.output_tail:
            if t not in OUTPUT_TAILS:
                return ("output_tail", f"must be among {', '.join(OUTPUT_TAILS)}", t)
        for k in self.kv_policy:
            if k not in KV_POLICIES:
                return ("kv_policy", f"must be among {', '.join(KV_POLICIES)}", k)
        for k in self.planner:
            if k not in PLANNERS:
                return ("planner", f"must be among {', '.join(PLANNERS)}", k)
        for name in ("planner_period_s", "planner_delay_s"):
            if getattr(self, name) and not self.planner:
                return (name, "needs the planner axis (a planner to run with it)", ...)
        if self.size() > MAX_GRID:
            return ("", f"has {self.size()} points; a grid study may have at most {MAX_GRID}", ...)
        return None


@dataclass(frozen=True)
class StudySpec:
    name: str = field(metadata=rule(folder_name))
    model: str = field(metadata=rule(non_empty))
    hardware: tuple[str, ...] = field(metadata=rule(_choices))
    workload: Workload
    slo: Slo
    description: str = ""
    price_tier: str = "own_hyperscaler"
    # left out, what dse place takes: the engine that runs on every hardware the study may place
    # (trt on NVIDIA's alone, else sglang) and the model's serving precision, filled in by
    # dse.study.variants.with_catalog_ids as a run stores the spec (they had been trt and fp8
    # whatever the hardware and the model: a study on MI355X was refused until it named an engine)
    engine: str = None  # type: ignore[assignment]
    precision: str = None  # type: ignore[assignment]
    mtp: bool = False
    # the deployment's own draft depth and acceptance rate with MTP (default: the engine profile's)
    mtp_draft_tokens: int | None = field(default=None, metadata=rule(draft_depth))
    mtp_accept_rate: float | None = field(default=None, metadata=rule(acceptance))
    trials: int = field(default=100, metadata=rule(positive))
    seed: int = field(default=0, metadata=rule(seed_rule))
    search: Search = Search()
    objectives: Objectives = Objectives()
    limits: StudyLimits = StudyLimits()
    energy: StudyEnergy = StudyEnergy()
    storage: StudyStorage = StudyStorage()
    simulate: SimulateSpec = SimulateSpec()
    variants: tuple[Variant, ...] = ()
    sweep: Sweep = Sweep()

    @property
    def is_grid(self) -> bool:
        return self.sweep.size() > 0

    def budget(self, trials: int | None = None) -> int:
        """Trials to run: ``trials`` if given, else every grid point of a grid study, else ``trials``
        of the file."""
        if trials is not None:
            return trials
        return self.sweep.size() if self.is_grid else self.trials

    def led_by(self, names: Sequence[str]) -> StudySpec:
        """This spec with the objectives a run optimises, ``names``, where the first is a metric:
        the MILP sizes pools for it and a grid's report ranks by it. A study given its objectives
        in Python (:meth:`dse.study.Study.with_objective`) keeps the file's in its spec, which the
        stored study is compared by: ``gpus`` set so had been sized for cost (7 of 20 trials other
        than the file's ``names = ["gpus"]``). A function first leaves the spec as it is."""
        metrics = tuple(n for n in names if objective_rule(n) is None)
        if not names or objective_rule(names[0]) is not None or metrics == self.objectives.names:
            return self
        return replace(self, objectives=replace(self.objectives, names=metrics))

    def served_by(self, catalog: Catalog) -> StudySpec:
        """This spec with the engine and the precision it leaves out filled in as ``dse place``
        takes them: the engine that runs on every hardware the study may place (TensorRT-LLM's on
        NVIDIA's alone, else SGLang's) and its models' serving precision (the first model's: a grid
        whose swept models serve at two is refused, :func:`dse.study.variants.study_catalog`)."""
        if self.engine is not None and self.precision is not None:
            return self
        from dse.perf.frameworks import default_engine

        vendors = {catalog.hardware(h).vendor for h in (*self.hardware, *self.sweep.hardware)}
        model = catalog.model((self.sweep.model or (self.model,))[0])
        return replace(
            self,
            engine=self.engine or default_engine(vendors),
            precision=self.precision or model.serving_precision.value,
        )

    def problem(self) -> tuple[str, str, Any] | None:
        if self.price_tier not in PRICE_TIERS:
            return ("price_tier", f"must be one of {', '.join(PRICE_TIERS)}", self.price_tier)
        if self.precision is not None and self.precision not in ("fp4", "fp8", "bf16"):
            return ("precision", "must be fp4, fp8 or bf16", self.precision)
        if self.engine is not None and self.engine not in ENGINES:
            return ("engine", f"must be one of {', '.join(ENGINES)}", self.engine)
        ids = [v.id for v in self.variants]
        if len(set(ids)) != len(ids):
            return ("variants", "must not repeat an id", ids)
        tightest = min((self.slo.ttft_s, *self.sweep.ttft_s))
        if self.simulate.dt_s > max(tightest, COARSEST_STEP_S):  # a longer step blurs the waits
            rule_ = (
                f"must be at most the TTFT target ({tightest:g} s) or {COARSEST_STEP_S:g} s, whichever is "
                "longer: a longer step blurs the waits the target is set on"
            )
            return ("simulate.dt_s", rule_, self.simulate.dt_s)
        if self.sweep.burst_factor and self.simulate.arrivals != "burst":  # each point is a burst
            burst = self.simulate.burst_problem()  # (a burst past the horizon had left 3x as 1x)
            if burst is not None:
                key, rule_, value = burst
                return (f"simulate.{key}", f"{rule_} (the grid sweeps burst_factor)", value)
        return None

    def _idle_mtp(self) -> tuple[str, str, Any] | None:
        """MTP's own draft depth and acceptance rate are read by MTP only."""
        if not self.mtp and (self.mtp_draft_tokens is not None or self.mtp_accept_rate is not None):
            key = "mtp_draft_tokens" if self.mtp_draft_tokens is not None else "mtp_accept_rate"
            return (key, "needs mtp = true", getattr(self, key))
        return None

    def _idle_returning_turns(self) -> tuple[str, str, Any] | None:
        """Returning turns' settings without returning turns are refused, not ignored: a cached
        prefix with ``returning_share = 0`` reaches no request (a grid sweeping it had given every
        point the same design and figures)."""
        w = self.workload
        if w.returning_share > 0:
            return None
        if self.sweep.cached_prefix_tokens:
            rule_ = (
                "needs workload.returning_share > 0: no request returns to a cached prefix, "
                "so every point is alike"
            )
            return ("sweep.cached_prefix_tokens", rule_, list(self.sweep.cached_prefix_tokens))
        written = {"cached_prefix_tokens": w.cached_prefix_tokens, "suffix_tokens": w.suffix_tokens}
        key = next((k for k, v in written.items() if v > 0), "think" if w.think else None)
        if key is not None:
            value = written.get(key, [(b.share, b.dwell_s) for b in w.think])
            return (
                f"workload.{key}",
                "needs returning_share > 0: without returning turns it is ignored",
                value,
            )
        # a KV policy places the KV that rests between turns: without any, every policy is the
        # same design (two had spent the warm start's trials and two of the best rows on one)
        why = "a policy places the KV that rests between turns, and none does"
        if len(self.search.kv_policies) > 1:
            rule_ = f"must list one policy without returning turns (workload.returning_share = 0): {why}"
            return ("search.kv_policies", rule_, list(self.search.kv_policies))
        if self.sweep.kv_policy:
            return (
                "sweep.kv_policy",
                f"needs workload.returning_share > 0: {why}",
                list(self.sweep.kv_policy),
            )
        return None

    def _grid_kv_policies(self) -> tuple[str, str, Any] | None:
        """A grid point is placed with one KV policy (the ``kv_policy`` axis's, else the search's
        only one): a second listed had been ignored, the first answering every point."""
        if not self.is_grid or self.sweep.kv_policy or len(self.search.kv_policies) < 2:
            return None
        rule_ = (
            "must list one policy in a grid study (each point is placed with one): "
            "sweep them as [sweep] kv_policy"
        )
        return ("search.kv_policies", rule_, list(self.search.kv_policies))


def spec_record(spec: StudySpec) -> dict[str, Any]:
    """The resolved spec as a study shows and records it for people and BI tools (``dse study
    show``, ``spec.json``, each export's ``dse.study_spec``): a grid study's budget is its points
    and its sampler the grid, where the search's defaults it never uses had been shown (100 trials
    of TPE for a grid of 6 points). The stored study keeps every field as the spec holds it (what a
    resumed run compares)."""
    out: dict[str, Any] = plain(spec)
    if spec.is_grid:
        out["trials"] = spec.sweep.size()
        out["search"] = {**out["search"], "sampler": "grid", "population": None, "warm_start": None}
    return out


def read_study(path: Path, *, idle: list[InputError] | None = None) -> StudySpec:
    """A study file, validated; ids are checked against the catalog by :func:`check_ids`. A
    setting no trial would use (:func:`idle_settings`) is refused; given ``idle``, a list, such
    settings are added to it instead, for reading a stored run (:meth:`dse.study.Study.load`)."""
    data = read_toml(path)
    sweep = data.get("sweep")
    if isinstance(sweep, dict) and not sweep:  # a grid meant, none written: it had run as a search
        rule = "must name at least one axis (leave the table out for a sampled search)"
        raise InputError(str(path), "sweep", rule)
    if isinstance(sweep, dict):  # an axis left out is not swept; one written empty is a slip
        empty = next((k for k, v in sweep.items() if isinstance(v, list) and not v), None)
        if empty is not None:
            raise InputError(
                str(path),
                f"sweep.{empty}",
                "must list at least one value (leave the axis out not to sweep it)",
                [],
            )
    spec = build(StudySpec, data, source=str(path))
    found = idle_settings(spec, data, str(path))
    if idle is None and found:
        raise found[0]
    if idle is not None:
        idle.extend(found)
    if spec.name != path.stem:
        raise InputError(str(path), "name", f"must equal the file name {path.stem!r}", spec.name)
    return spec


def idle_settings(spec: StudySpec, data: dict[str, Any], source: str) -> list[InputError]:
    """The settings of a study file that no trial would use, each as the refusal that names it:
    returning turns' keys without returning turns, a burst's keys without a burst, MTP's without
    MTP, several KV policies or prefill chunks in a grid, the sampler's keys and a budget in a
    grid, a population without NSGA-II, a topology's own keys without that topology. (A ``[[variants]]``
    entry no trial runs on needs the catalog: :func:`dse.study.variants.unused_variant`.) They
    guard new trials, not the reading of stored ones: a run made before a rule was added is still
    read, the setting named in a warning."""
    found = [
        spec._idle_returning_turns(),
        spec._grid_kv_policies(),
        spec._idle_mtp(),
        _idle_burst(spec, data),
        _grid_chunks(spec, data),
        _grid_search_keys(spec, data),
        _grid_trials(spec, data),
        _idle_population(spec, data),
        _idle_topology_keys(spec, data),
    ]
    return [InputError(source, key, rule_, value) for key, rule_, value in filter(None, found)]


BURST_KEYS = ("burst_factor", "burst_start_s", "burst_s")


def _idle_burst(spec: StudySpec, data: dict[str, Any]) -> tuple[str, str, Any] | None:
    """A burst's settings in a study without a burst (constant arrivals, no ``burst_factor``
    axis) are refused, not ignored: ``burst_factor = 3`` alone had simulated constant traffic."""
    written = data.get("simulate")
    if not isinstance(written, dict) or spec.simulate.arrivals == "burst" or spec.sweep.burst_factor:
        return None
    key = next((k for k in BURST_KEYS if k in written), None)
    if key is None:
        return None
    rule_ = 'needs arrivals = "burst" (or a [sweep] of burst_factor): constant arrivals have no burst'
    return (f"simulate.{key}", rule_, written[key])


def _written_search(data: dict[str, Any]) -> dict[str, Any]:
    search = data.get("search")
    return search if isinstance(search, dict) else {}


def _grid_chunks(spec: StudySpec, data: dict[str, Any]) -> tuple[str, str, Any] | None:
    """A grid point is placed with one prefill chunk, the first listed: a file listing more is
    refused (``[4096, 16384]`` had placed every point at 4096). The default list is the search's,
    of which a grid takes the first."""
    prefill = _written_search(data).get("prefill")
    written = prefill.get("chunk_tokens") if isinstance(prefill, dict) else None
    if spec.is_grid and isinstance(written, list) and len(written) > 1:
        rule_ = "must list one chunk in a grid study (each point is placed with one)"
        return ("search.prefill.chunk_tokens", rule_, written)
    return None


SAMPLER_KEYS = ("sampler", "population", "warm_start")  # [search] keys only a sampled search reads


def _grid_search_keys(spec: StudySpec, data: dict[str, Any]) -> tuple[str, str, Any] | None:
    """A grid study runs its points, each once: the sampler, its population and the warm start
    (the full placement's designs as a search's first trials) are not read, and written there
    are refused (``sampler = "nsga2"`` in a grid had run the grid as without it)."""
    written = _written_search(data)
    key = next((k for k in SAMPLER_KEYS if k in written), None)
    if not spec.is_grid or key is None:
        return None
    rule_ = "must be left out of a grid study: a grid enumerates its points, no sampler runs"
    return (f"search.{key}", rule_, written[key])


def _grid_trials(spec: StudySpec, data: dict[str, Any]) -> tuple[str, str, Any] | None:
    """A grid runs each of its points once: a ``trials`` budget in its file is not read (3 and 50
    had both run all 8 points in silence; ``--trials`` runs fewer)."""
    if not spec.is_grid or "trials" not in data:
        return None
    rule_ = "must be left out of a grid study: a grid runs each of its points once (--trials runs fewer)"
    return ("trials", rule_, data["trials"])


def _idle_population(spec: StudySpec, data: dict[str, Any]) -> tuple[str, str, Any] | None:
    """A population is NSGA-II's: with TPE or random sampling it is not read, and is refused."""
    written = _written_search(data)
    if spec.is_grid or "population" not in written or spec.search.sampler == "nsga2":
        return None
    rule_ = f'needs sampler = "nsga2": {spec.search.sampler} sampling has no population, so it is ignored'
    return ("search.population", rule_, written["population"])


TOPOLOGY_KEYS = (  # [search] table, its key, the topologies that read it
    ("aggregated", "prefill_share", (Topology.AGGREGATED,)),
    ("afd", "ffn_tokens_per_gpu", (Topology.AFD, Topology.FOUR_STAGE)),
    ("midfill", "shapes", (Topology.FOUR_STAGE,)),
)


def _idle_topology_keys(spec: StudySpec, data: dict[str, Any]) -> tuple[str, str, Any] | None:
    """A topology's own settings in a study that searches none of the topologies reading them are
    refused, not ignored: a ``prefill_share`` with only disaggregated designs, FFN batches without
    attention-FFN ones, midfill shapes without four-stage ones had been kept and never read."""
    search = _written_search(data)
    for table, key, readers in TOPOLOGY_KEYS:
        written = search.get(table)
        if not isinstance(written, dict) or key not in written:
            continue
        if not any(t.value in spec.search.topologies for t in readers):
            names = " or ".join(repr(t.value) for t in readers)
            rule_ = f"needs {names} in search.topologies: no other topology reads it, so it is ignored"
            return (f"search.{table}.{key}", rule_, written[key])
    return None


def study_files(extra: Path | None = None) -> dict[str, Path]:
    """Named studies: the shipped folder, then ``extra`` (which overrides by name)."""
    out = {p.stem: p for p in sorted(STUDIES_DIR.glob("*.toml"))}
    if extra is not None and extra.is_dir():
        out.update({p.stem: p for p in sorted(extra.glob("*.toml"))})
    return out


def study_path(name_or_path: str | Path) -> Path:
    """The file of a study given by name (``studies/NAME.toml``) or by path."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.is_file():  # a folder of that name is a run's, not the study
        return path
    files = study_files()
    if str(name_or_path) not in files:
        raise UnknownIdError("study", str(name_or_path), list(files), source="studies")
    return files[str(name_or_path)]


def load_study(name_or_path: str | Path) -> StudySpec:
    """By name (``studies/NAME.toml``) or by path to a TOML file."""
    return read_study(study_path(name_or_path))
