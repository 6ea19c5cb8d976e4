"""`dse simulate`: does a placement hold up over time? Verdicts, trajectories and a plot.

The simulators, the solver and polars are imported inside the functions that use them: building
the parser must stay cheap."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dse import interrupt
from dse.atomic import atomic_path, write_text
from dse.catalog import Catalog
from dse.cli.flags import note_given, number, path_arg
from dse.cli.place_cmd import add_request_arguments, flag_of, request_from_args, say_calibration
from dse.cli.table import format_table
from dse.errors import InputError, NoFeasibleDesign, UnknownIdError, output_error
from dse.sim.kinds import MAX_STEPS, MAX_SUBSTEP_S, MIN_MEASURED_STEPS, ArrivalKind, PlannerKind, substeps
from dse.typed_data import Rule, check_number, fraction, non_negative, positive, read_csv, row_shape_problem

if TYPE_CHECKING:
    from dse.catalog import Hardware, Model
    from dse.perf.params import PerfParams
    from dse.placement.parallel import Parallel
    from dse.sim.engine_latency import DesignLatency
    from dse.sim.from_placement import SimDesign, SimPool
    from dse.sim.kv_cache import KvCacheReport
    from dse.sim.kv_tiers import RestingClass
    from dse.sim.outputs import Summary
    from dse.sim.scenario import Pipeline, Scenario
    from dse.sim.simulation import SimulationReport
    from dse.study.report_figures import Drawer
    from dse.units import Precision
    from dse.workload import Slo, Workload

SRC = "dse simulate"
T = TypeVar("T")
MAX_DES_REQUESTS = 2e6
"""Requests the discrete-event reference may simulate one by one (peak rate x --horizon)."""
SCENARIO_NUMBERS: dict[str, Rule | None] = {
    "rate_scale": None,  # None: the sign rules sit in scenario_from_args
    "burst_factor": None,
    "burst_start": None,
    "burst_s": None,
    "amplitude": fraction,  # a swing above 1 would make the rate negative
    "period": None,
    "planner_period": None,
    "planner_delay": None,
    "switch_s": None,
    "horizon": None,
    "warmup": None,
    "dt": None,
}


# each kind of arrivals' and the planner's own flags: (flag, type, default, help); refused without
# their kind, at any value (note_given, check_scenario_flags)
_KIND_ARGS: tuple[tuple[str, Any, float | None, str], ...] = (
    ("--burst-factor", number, 2.0, "rate multiple during the burst"),
    ("--burst-start", number, 600.0, "seconds"),
    ("--burst-s", number, 300.0, "burst length, seconds"),
    ("--amplitude", number, 0.5, "diurnal swing, fraction of the rate"),
    ("--period", number, 3600.0, "diurnal period, seconds"),
    ("--trace", path_arg, None, "columns t_s,rate_per_s (piecewise constant)"),
)
_PLANNER_ARGS: tuple[tuple[str, Any, float, str], ...] = (
    ("--planner-period", number, 60.0, "seconds between planner decisions"),
    ("--planner-delay", number, 60.0, "age of the measurements it acts on, s"),
    ("--switch-s", number, 30.0, "seconds a moved instance reloads"),
)


def _add_kind_flags(g: argparse._ArgumentGroup, planner: bool = False) -> None:
    for flag, kind, default, text in _PLANNER_ARGS if planner else _KIND_ARGS:
        metavar = "RATES.csv" if flag == "--trace" else None
        note_given(g.add_argument(flag, type=kind, default=default, help=text, metavar=metavar))


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("simulate", help="check a placement over time (fluid model, discrete-event reference)")
    p.add_argument(
        "--placement",
        type=path_arg,
        metavar="PLACE.json",
        help="output of `dse place --json`; without it, the placement flags below are solved first",
    )
    before = {id(a) for a in p._actions}
    add_request_arguments(p, required=False)
    # the request's flags and defaults: a --placement carries its own request, and refuses them,
    # given at any value (each notes that it was given, as the scenario's own flags do)
    added = [a for a in p._actions if id(a) not in before]
    for a in added:
        note_given(a)
    p.set_defaults(request_flags={a.dest: (a.option_strings[0], a.default) for a in added})
    g = p.add_argument_group("scenario")
    g.add_argument(
        "--arrivals",
        default="constant",
        choices=[a.value for a in ArrivalKind],
        help="constant, burst (--burst-*), diurnal (--amplitude, --period) or trace (--trace)",
    )
    g.add_argument("--rate-scale", type=number, default=1.0, help="multiplies the placement's request rate")
    _add_kind_flags(g)
    g.add_argument(
        "--lengths",
        default="",
        metavar="SHARE:MEAN,...",
        help="output-length classes (exponential each); default one class at the workload mean",
    )
    g.add_argument(
        "--buffer", type=number, default=float("inf"), help="requests the prefill->decode buffer holds"
    )
    g.add_argument(
        "--planner",
        default="none",
        choices=[k.value for k in PlannerKind],
        help="the slow loop that moves instances between prefill and decode",
    )
    _add_kind_flags(g, planner=True)
    g.add_argument("--horizon", type=number, default=3600.0, help="simulated seconds")
    note_given(
        g.add_argument("--warmup", type=number, default=300.0, help="seconds left out of the statistics")
    )
    step = f"the trajectories' time step, seconds (integrated in steps of at most {MAX_SUBSTEP_S:g} s)"
    g.add_argument("--dt", type=number, default=1.0, help=step)
    g.add_argument("--des", action="store_true", help="also run the discrete-event reference")
    g.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the runs that draw requests: the discrete-event reference, the engine-level "
        "simulation and the live KV cache",
    )
    g.add_argument(
        "--kv-eviction",
        choices=("lru", "think"),
        default="lru",
        help="the live KV cache's eviction: the longest-resting entry (lru), or first the class with "
        "the longest mean think time (think)",
    )
    p.add_argument(
        "--out",
        type=path_arg,
        metavar="DIR",
        help="write trajectories.parquet, trajectories.png and summary.json here",
    )
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    p.set_defaults(given=frozenset())


def _same_catalog(doc: dict[str, Any], catalog: Catalog, source: str) -> None:
    """The catalog entries a placement was made with (``dse place --json`` records each one's
    numbers) are this catalog's: the simulation rebuilds the design from them, so another GPU or
    model of the same id would answer for a design it did not place (a file without the record,
    from before it, is taken as it is). The first number that differs is named."""
    from dse.study.storage import catalog_difference

    placed, request = doc.get("catalog"), doc.get("request")
    if not isinstance(placed, dict) or not isinstance(request, dict):
        return
    model = str(request.get("model"))
    if model not in placed:  # an edited request: its other entries had been looked up as hardware
        rule = f"is not the model the placement was made with (its catalog record holds {', '.join(placed)})"
        raise InputError(source, "request.model", rule, model)
    for entry in placed:  # an entry of the user's folder the placement was made with, not passed here
        kind = "model" if entry == model else "hardware"
        if entry not in (catalog.models_by_id if entry == model else catalog.hardware_by_id):
            rule = (
                f"was placed with {kind} '{entry}', which this catalog lacks: "
                "simulate with the --catalog-dir it was placed with"
            )
            raise InputError(source, f"catalog.{entry}", rule, entry)
    changed = catalog_difference(placed, catalog.numbers(model, [e for e in placed if e != model]))
    if changed is not None:
        key, then, now = changed
        entry, _, number = key.removeprefix("catalog.").partition(".")
        rule = (
            f"was placed with another entry for {entry} than this catalog's ({catalog.file_of(entry)}; "
            f"{number} {now!r} here): simulate with the --catalog-dir it was placed with"
        )
        raise InputError(source, f"catalog.{entry}", rule, f"{number} {then!r}")


TOPOLOGY_ROLES = {
    "aggregated": ("mixed",),
    "disaggregated": ("prefill", "decode"),
    "afd": ("prefill", "attention", "ffn"),
    "four-stage": ("prefill", "midfill", "attention", "ffn"),
}
"""The pools' roles each topology's designs have (:func:`dse.placement.candidates.build_candidates`)."""


def _runnable(
    doc: dict[str, Any], design: SimDesign, catalog: Catalog, params: PerfParams, source: str
) -> None:
    """The placement's topology, model, engine and precision are ones dse knows, and each pool's
    unit one its hardware can run, by the rules ``dse place`` builds units with
    (:func:`~dse.placement.shapes.unit_problem`), its name the shape it runs: a hand-edited 671 GB
    model on one B200, attention TP 16 in an 8-GPU domain or a made-up topology had simulated with
    exit 0, and an unknown hardware id had been refused as the catalog's, naming no file."""
    from dse.placement.parallel import Parallel, canonical_shape
    from dse.placement.request import Topology
    from dse.placement.shapes import unit_problem
    from dse.units import Precision

    known = [t.value for t in Topology if t is not Topology.AUTO]
    if design.topology not in known:
        raise InputError(source, "best.topology", f"must be one of {', '.join(known)}", design.topology)
    model = _entry(catalog.model, design.model, source, "request.model")
    try:
        kv = design.engine_of(params).kv_precision
    except InputError as exc:  # had named the performance model, not the file
        raise InputError(source, "request.engine", exc.rule, exc.value) from None
    precisions = [p.value for p in Precision]
    if design.weight_precision not in precisions:
        rule = f"must be one of {', '.join(precisions)}"
        raise InputError(source, "request.weight_precision", rule, design.weight_precision)
    precision = (Precision(design.weight_precision), kv)
    roles = TOPOLOGY_ROLES[design.topology]
    asked = [
        _entry(catalog.hardware, str(h), source, "request.hardware").id for h in doc["request"]["hardware"]
    ]
    for i, pool in enumerate(doc["best"]["pools"]):  # (their numbers read by design_from_doc)
        where, unit = f"best.pools[{i}].unit", pool["unit"]
        if unit["role"] not in roles:  # an afd design relabelled disaggregated had simulated
            rule = f"must be one of {', '.join(roles)} (best.topology is {design.topology})"
            raise InputError(source, f"{where}.role", rule, unit["role"])
        hw = _entry(catalog.hardware, str(unit["hardware"]), source, f"{where}.hardware")
        if hw.id not in asked:  # its prices and HBM figures are the hardware's it was placed on
            rule = f"must be one of the request's hardware ({', '.join(asked)})"
            raise InputError(source, f"{where}.hardware", rule, unit["hardware"])
        par = unit["parallel"]
        shape = Parallel(*(int(float(par.get(k, 1))) for k in ("gpus", "attn_tp", "ep", "pp")))
        if (why := unit_problem(shape, str(unit["role"]), hw, model, precision, params)) is not None:
            raise InputError(source, f"{where}.parallel", why, shape.label())
        _batch_fits(design, unit, shape, hw, model, precision, params, source, where)
        parts = str(unit.get("name", "")).split("/")
        try:
            named = canonical_shape(parts[2]) if len(parts) > 2 else None
        except InputError:  # a name of the user's own
            named = None
        if named not in (None, shape.label()):
            rule = f"must name the shape its parallel holds, {shape.label()}"
            raise InputError(source, f"{where}.name", rule, unit["name"])


def _batch_fits(
    design: SimDesign, unit: dict[str, Any], shape: Parallel, hw: Hardware, model: Model,
    precision: tuple[Precision, Precision], params: PerfParams, source: str, where: str,
) -> None:  # fmt: skip
    """A unit's decode batch within what its instance's KV cache holds of sequences as long as
    the mean prompt (fewer than ``dse place`` sizes it for, which counts their output too): a
    hand-edited batch of 1e9 had hung the simulation building a table of a billion slots."""
    import numpy as np

    from dse.perf.pool import build_pool
    from dse.perf.stages import kv_capacity_sequences

    batch = unit.get("decode_batch")
    if batch is None or not batch or shape.pp > 1 or unit["role"] not in ("decode", "mixed", "attention"):
        return
    pool = build_pool(
        model, [hw], gpus=[shape.gpus], attn_tp=[shape.attn_tp], ep=[shape.ep],
        weight_precision=[precision[0]], kv_precision=[precision[1]],
        engines=params.kernel_engines([design.engine]),
    )  # fmt: skip
    prompt = max(design.workload.mean_prompt_tokens(), 1.0)
    if unit["role"] == "attention":  # no experts on it: bounded by its HBM with no weights at all
        room = pool.hbm_bytes * (1.0 - params.hbm_reserve_fraction)
        most = float((room / pool.seq_bytes_per_gpu(np.array([prompt])))[0])
    else:
        most = float(kv_capacity_sequences(pool, params, np.array([prompt]))[0])
    if float(batch) > max(most, 1.0):
        rule = f"must be at most the {most:,.0f} sequences of {prompt:,.0f} tokens its KV cache holds"
        raise InputError(source, f"{where}.decode_batch", rule, batch)


def _entry(lookup: Callable[[str], T], wanted: str, source: str, field: str) -> T:
    """``lookup(wanted)``, a catalog entry; an unknown id names the placement file and its field."""
    try:
        return lookup(wanted)
    except UnknownIdError as exc:
        raise InputError(source, field, exc.rule, wanted) from None


def _design(
    args: argparse.Namespace, catalog: Catalog, params: PerfParams, flags: ScenarioFlags
) -> SimDesign:
    """The design to simulate: from ``--placement`` (validated at this edge), or solved here
    (``--lengths`` checked against the request's model before the solve)."""
    from dse.evaluation import design_of
    from dse.placement.serialize import SCHEMA_VERSION
    from dse.sim.from_placement import design_from_doc

    if args.placement is not None:
        given: frozenset[str] = getattr(args, "given", frozenset())
        for dest, (flag, default) in args.request_flags.items():
            # silently ignored, it would read as simulated (at its default value too: `--isl 4096`)
            if getattr(args, dest) != default or dest in given:
                rule = "does not apply with --placement, which holds its request (--rate-scale scales it)"
                raise InputError(SRC, flag, rule, getattr(args, dest))
        try:
            doc = json.loads(args.placement.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputError(str(args.placement), "", f"cannot be read ({exc.strerror})") from None
        except UnicodeDecodeError as exc:
            raise InputError(str(args.placement), "", f"must be UTF-8 text ({exc.reason})") from None
        except json.JSONDecodeError as exc:
            raise InputError(
                str(args.placement), "", f"is not JSON ({exc.msg} at line {exc.lineno})"
            ) from None
        except RecursionError:
            raise InputError(
                str(args.placement), "", "must not nest arrays or objects hundreds deep"
            ) from None
        except ValueError as exc:  # Python's own limits: an int of 4300+ digits
            raise InputError(str(args.placement), "", f"is not JSON ({str(exc).split(';')[0]})") from None
        if not isinstance(doc, dict):
            raise InputError(str(args.placement), "", "must hold a JSON object from `dse place --json`")
        # another version's file had been read as this one's (left out: read as this one's)
        version = doc.get("schema_version", SCHEMA_VERSION)
        if type(version) is not int or version != SCHEMA_VERSION:
            rule = f"must be {SCHEMA_VERSION}, the version this dse reads (write it with `dse place --json`)"
            raise InputError(str(args.placement), "schema_version", rule, version)
        design = design_from_doc(doc, str(args.placement))
        _same_catalog(doc, catalog, str(args.placement))
        _runnable(doc, design, catalog, params, str(args.placement))
        return design
    needed = ["hardware", "rate", "ttft", "tpot"]
    if args.objective == "goodput":  # the rate only sets the mix, default 1, as `dse place` has it
        needed.remove("rate")
    missing = [f for f in needed if getattr(args, f) is None]
    if missing:
        raise InputError(SRC, f"--{missing[0]}", "is required without --placement")
    from dse.placement.plan import place

    req = request_from_args(args, catalog, SRC)
    _lengths_fit(args, flags, req.workload, catalog.model(req.model))
    report = place(req, catalog=catalog, with_shadow_prices=False)
    if report.best is None:
        why = report.why_none()  # the topology nearest to feasible, as `dse place` quotes it
        raise NoFeasibleDesign(why.binding if why else "solver", why.detail if why else "no solution")
    return design_of(report.request, report.best)


def _pairs(text: str, flag_name: str) -> list[tuple[float, float]]:
    out = []
    for part in filter(None, (s.strip() for s in text.split(","))):
        try:
            a, b = (float(v) for v in part.split(":"))
        except ValueError:
            raise InputError(SRC, flag_name, "must be SHARE:MEAN pairs separated by commas", part) from None
        out.append(
            (
                check_number(a, source=SRC, key=flag_name, check=positive),
                check_number(b, source=SRC, key=flag_name, check=positive),
            )
        )
    return out


KIND_FLAGS: dict[str, tuple[str, ...]] = {  # each kind of arrivals' own flags
    "burst": ("burst_factor", "burst_start", "burst_s"),
    "diurnal": ("amplitude", "period"),
    "trace": ("trace",),
}
PLANNER_FLAGS = ("planner_period", "planner_delay", "switch_s")


def check_scenario_flags(args: argparse.Namespace) -> None:
    """Every number of the scenario flags finite and plausible; the rules no other check has."""
    for name, check in SCENARIO_NUMBERS.items():
        check_number(getattr(args, name), source=SRC, key=flag_of(name), check=check)
    if args.buffer != float("inf"):  # the default: an unbounded buffer
        check_number(args.buffer, source=SRC, key="--buffer")
    given: frozenset[str] = getattr(args, "given", frozenset())
    for kind, flags in KIND_FLAGS.items():  # a shape of another kind of arrivals would be ignored
        for dest in flags:
            value = getattr(args, dest)
            if args.arrivals != kind and dest in given:
                shown = value if isinstance(value, float) else str(value)  # a number as typed, a path as text
                raise InputError(SRC, flag_of(dest), f"needs --arrivals {kind}", shown)
    if args.planner == "none":
        for dest in PLANNER_FLAGS:
            if dest in given:
                raise InputError(SRC, flag_of(dest), "needs --planner", getattr(args, dest))
    check_number(args.seed, source=SRC, key="--seed", check=non_negative)


def _check_steps(args: argparse.Namespace) -> None:
    """At most :data:`MAX_STEPS` fluid steps: the integration's, so a --dt longer than its sub-step
    (``dse.sim.kinds.MAX_SUBSTEP_S``) counts its sub-steps."""
    if args.horizon / args.dt > MAX_STEPS:
        raise InputError(
            SRC, "--dt", f"must give at most {MAX_STEPS:g} steps over --horizon ({args.horizon:g} s)", args.dt
        )
    step = args.dt / substeps(args.dt)
    if args.horizon / step > MAX_STEPS:
        rule = (
            f"must be at most {MAX_STEPS * step:g} s: {MAX_STEPS:g} fluid steps of {step:g} s, the sub-step "
            f"--dt {args.dt:g} is integrated in"
        )
        raise InputError(SRC, "--horizon", rule, args.horizon)


@dataclass(frozen=True)
class ScenarioFlags:
    """What the scenario flags decide on their own, checked (:func:`scenario_flags`): a trace's
    rows and the output-length classes (empty: one class at the design's mean)."""

    trace_t: tuple[float, ...]
    trace_r: tuple[float, ...]
    pairs: tuple[tuple[float, float], ...]


def _lengths_fit(args: argparse.Namespace, flags: ScenarioFlags, workload: Workload, model: Model) -> None:
    """``--lengths``' longest mean answer fits the model's context after the design's prompts, as
    ``--osl`` must: ``--lengths 1:200000`` had run for minutes (a TTFT of 106,402 s) and
    ``1:1e8`` past SIGTERM and SIGINT."""
    if not flags.pairs:
        return
    longest = replace(workload, output_tokens=max(b for _, b in flags.pairs))
    if (broken := longest.context_problem(model.max_context, model.id)) is not None:
        raise InputError(SRC, "--lengths", f"its longest mean answer {broken[1]}", args.lengths)


def scenario_flags(args: argparse.Namespace) -> ScenarioFlags:
    """Every refusal of the scenario flags that needs no design: run before any placement is
    solved, so a bad flag costs no solve (it had been refused only after the MILP)."""
    kind = ArrivalKind(args.arrivals)
    trace_t: tuple[float, ...] = ()
    trace_r: tuple[float, ...] = ()
    if kind is ArrivalKind.TRACE:
        if args.trace is None:
            raise InputError(SRC, "--trace", "is required with --arrivals trace")
        trace_t, trace_r = _read_trace(args.trace)
    check_scenario_flags(args)
    pairs = _pairs(args.lengths, "--lengths")
    if pairs and (abs(sum(a for a, _ in pairs) - 1.0) > 1e-6 or any(a <= 0 or b <= 0 for a, b in pairs)):
        raise InputError(
            SRC, "--lengths", "shares must be positive and sum to 1, means positive", args.lengths
        )
    for flag in (
        "horizon",
        "dt",
        "rate_scale",
        "burst_factor",
        "burst_s",
        "buffer",
        "period",
        "planner_period",
    ):
        if getattr(args, flag) <= 0:
            raise InputError(SRC, f"--{flag.replace('_', '-')}", "must be positive", getattr(args, flag))
    for flag in ("burst_start", "planner_delay", "switch_s"):  # (a burst of 0 s had run as none)
        if getattr(args, flag) < 0:
            raise InputError(SRC, f"--{flag.replace('_', '-')}", "must not be negative", getattr(args, flag))
    if not 0 <= args.warmup < args.horizon:
        if "warmup" not in getattr(args, "given", frozenset()):  # the default's: the horizon broke it
            rule = f"must be longer than --warmup's default of {args.warmup:g} s (or give --warmup)"
            raise InputError(SRC, "--horizon", rule, args.horizon)
        raise InputError(SRC, "--warmup", "must be at least 0 and below --horizon", args.warmup)
    measured = args.horizon - args.warmup
    if args.dt > measured / MIN_MEASURED_STEPS:
        # fewer steps had given no sample after the warm-up (a traceback), or a stability verdict
        # of too few samples, which reads as stable: 1.5 times capacity was 'stable: yes' at --dt 300
        rule = (
            f"must be at most --horizon less --warmup over {MIN_MEASURED_STEPS} (steps measured): "
            f"{measured / MIN_MEASURED_STEPS:g} s"
        )
        raise InputError(SRC, "--dt", rule, args.dt)
    if kind is ArrivalKind.BURST and args.burst_start >= args.horizon:  # a burst the run never sees
        raise InputError(
            SRC, "--burst-start", f"must be below --horizon ({args.horizon:g} s)", args.burst_start
        )
    _check_steps(args)
    in_run = (r for t, r in zip(trace_t, trace_r, strict=True) if t < args.horizon)
    if kind is ArrivalKind.TRACE and not any(r > 0 for r in in_run):
        # its traffic starts after the run ends: no request would arrive, as in a trace of zeros
        rule = f"must be positive in one row at least that starts before --horizon ({args.horizon:g} s)"
        raise InputError(str(args.trace), "rate_per_s", rule, 0.0)
    return ScenarioFlags(trace_t, trace_r, tuple(pairs))


def scenario_from_args(
    args: argparse.Namespace, rate: float, mean_output: float, flags: ScenarioFlags | None = None
) -> Scenario:
    """The scenario the flags describe around a design's ``rate`` and mean output; ``flags``, the
    flags already checked (:func:`scenario_flags`), else checked here."""
    from dse.sim.scenario import Arrivals, OutputLengths, Planner, Scenario

    f = scenario_flags(args) if flags is None else flags
    pairs = f.pairs or ((1.0, mean_output),)
    scenario = Scenario(
        arrivals=Arrivals(
            ArrivalKind(args.arrivals),
            rate * args.rate_scale,
            burst_factor=args.burst_factor,
            burst_start_s=args.burst_start,
            burst_s=args.burst_s,
            amplitude=args.amplitude,
            period_s=args.period,
            trace_times_s=f.trace_t,
            trace_rates=tuple(r * args.rate_scale for r in f.trace_r),
        ),
        lengths=OutputLengths(tuple(a for a, _ in pairs), tuple(b for _, b in pairs)),
        planner=Planner(
            PlannerKind(args.planner),
            period_s=args.planner_period,
            delay_s=args.planner_delay,
            switch_s=args.switch_s,
        ),
        horizon_s=args.horizon,
        warmup_s=args.warmup,
    )
    if args.des:
        requests = scenario.arrivals.max_rate(args.horizon) * args.horizon
        if requests > MAX_DES_REQUESTS:
            raise InputError(
                SRC,
                "--des",
                f"simulates request by request: at most {MAX_DES_REQUESTS:g} requests "
                "(peak rate x --horizon); shorten --horizon",
                round(requests),
            )
    return scenario


def _read_trace(path: Path) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The rates of ``--trace``: CSV ``t_s,rate_per_s``, a row per step of a piecewise-constant
    rate, times increasing. The path is the file it names (polars' reader had expanded ``*`` and
    ``[1]`` as a glob and read a folder's files as one table); a bad row is named by its line."""
    header, rows, lines = read_csv(path, "--trace")
    for col in ("t_s", "rate_per_s"):
        if col not in header:
            raise InputError(str(path), col, "is a required column")
    if not rows:
        raise InputError(str(path), "t_s", "needs at least one row")
    t: list[float] = []
    r: list[float] = []
    for row, line in zip(rows, lines, strict=True):
        where = f"{path} line {line}"
        if shape := row_shape_problem(row):
            raise InputError(where, "", shape)
        t.append(_trace_number(row["t_s"], where, "t_s"))
        r.append(_trace_number(row["rate_per_s"], where, "rate_per_s"))
        if len(t) > 1 and t[-1] <= t[-2]:
            raise InputError(where, "t_s", "must increase from row to row", row["t_s"])
    if not any(v > 0 for v in r):  # no request would arrive: nothing to simulate
        raise InputError(str(path), "rate_per_s", "must be positive in one row at least", 0.0)
    return tuple(t), tuple(r)


def _trace_number(text: str | None, where: str, col: str) -> float:
    """A cell of ``--trace``: a finite, plausible number >= 0."""
    try:
        value = float(text or "")
    except ValueError:
        raise InputError(where, col, "must be a number", text) from None
    return check_number(value, source=where, key=col, check=non_negative)


def run(args: argparse.Namespace, catalog: Catalog) -> int:
    from dse.study.figure_workers import FigureWorkers

    # first, while this process has one thread: a worker readies matplotlib as the engine loads
    with FigureWorkers(1 if args.out is not None else 0, ready=_ready_figure) as drawer:
        return _run_drawing(args, catalog, drawer)


def _ready_figure() -> None:
    """The figure worker's imports: the trajectories' figure, and matplotlib warmed."""
    from dse.sim import plot  # noqa: F401
    from dse.study.figure_workers import warm

    warm()


def _run_drawing(args: argparse.Namespace, catalog: Catalog, drawer: Drawer) -> int:
    from dse.perf.params import load_params
    from dse.sim.engine_latency import design_latency
    from dse.sim.from_placement import at_rate, pipeline_of
    from dse.sim.kv_cache import planned_capacity_gb, simulate_kv_cache
    from dse.sim.simulation import simulate

    params = load_params()
    say_calibration(params)
    # the refusals the flags decide alone come before the design, whose solve may take seconds
    flags = scenario_flags(args)
    if args.placement is None:
        _refuse_planner(args, args.topology)  # --topology aggregated: no solve will make it two pools
        if args.objective != "goodput" and args.rate is not None:  # the design runs at --rate, --osl
            scenario_from_args(args, args.rate, args.osl, flags)  # (--des's cap on requests)
    if args.out is not None:
        _refuse_taken(args.out)
    design = _design(args, catalog, params, flags)
    _refuse_planner(args, design.topology)  # (--topology auto may pick an aggregated design)
    _refuse_idle(args, design)
    _lengths_fit(args, flags, design.workload, catalog.model(design.model))
    source = str(args.placement) if args.placement else SRC
    pipe, kv_gb = pipeline_of(design, catalog, params, buffer_max=args.buffer, source=source)
    workload, slo = design.workload, design.slo
    scenario = scenario_from_args(args, workload.requests_per_s, workload.output_tokens, flags)
    report = simulate(
        pipe,
        scenario,
        reference=args.des,
        seed=args.seed,
        dt=args.dt,
        kv_gb_per_seq=kv_gb,
        resting=design.resting,
    )
    summary = _summary_dict(report, slo.ttft_s, slo.tpot_s, slo.percentile)
    summary["window_warning"] = _window_warning(scenario, report)
    if summary["window_warning"]:
        print(f"dse: warning: {summary['window_warning']}", file=sys.stderr)
    # the scenario's mean traffic (a --rate-scale, a burst, a trace), not the placement's
    rate = scenario.arrivals.mean_rate(scenario.horizon_s)
    # --lengths reach the engine-level run as they reach the fluid and the reference; without it,
    # the placement's lengths (uniform on 80-100% of nominal, as the studies check them)
    mix = tuple(zip(scenario.lengths.shares, scenario.lengths.means, strict=True)) if args.lengths else ()
    engine = (
        design_latency(at_rate(design, rate), catalog, params, seed=args.seed, output_mix=mix)
        if rate > 0
        else None
    )
    summary["engine"] = _engine_dict(engine, slo, rate)
    cache = None
    if design.resting and rate > 0:
        placed = planned_capacity_gb(design.resting, workload.requests_per_s)  # the plan's, at its rate
        cache = simulate_kv_cache(
            design.resting, rate, capacity_gb=placed, eviction=args.kv_eviction, seed=args.seed
        )
    summary["kv_cache"] = None if cache is None else _cache_dict(cache)
    summary["resting_kv_gb"] = _resting_dict(report, design.resting, rate)
    if args.out is not None:
        _write_outputs(args.out, report, summary, title=_design_line(design), drawer=drawer)
    if args.json:
        from dse.plain import plain  # numpy: not for the parser

        json.dump(plain(summary), sys.stdout, indent=2, allow_nan=False)  # strict JSON: nan, inf are null
        print()
    else:
        print(_design_line(design))
        steady = (summary["resting_kv_gb"] or {}).get("steady")
        print(render(report, slo.ttft_s, slo.tpot_s, steady_kv_gb=steady))
        print(_engine_line(engine, slo, rate, design))
        if cache is not None:
            print(_cache_line(cache, args.kv_eviction))
        if args.out is not None:
            print(f"\nwrote {args.out}/trajectories.parquet, trajectories.png, summary.json")
    return 0


def _window_warning(scenario: Scenario, report: SimulationReport) -> str | None:
    """Where the longest class of answers decodes for longer than the warm-up or a third of the
    window measured: the requests still decoding at either end are left out, and they are the long
    ones (--lengths 0.9:300,0.1:7000 at 44 ms a token: 305 s an answer against the 300 s warm-up;
    the fluid and the reference then read 12% apart on throughput, and agree over 2 hours)."""
    import numpy as np

    tpot = float(np.nanmax(report.fluid.tpot_mean_s))
    longest = max(scenario.lengths.means)
    lasts = longest * tpot
    warmup, measured = scenario.warmup_s, scenario.horizon_s - scenario.warmup_s
    over = [f"the {warmup:g} s warm-up"] if 0 < warmup < lasts else []  # (none: nothing left out)
    over += [f"a third of the {measured:g} s measured"] if lasts > measured / 3.0 else []
    if not math.isfinite(lasts) or not over:
        return None
    return (
        f"the longest answers ({longest:,.0f} tokens on average) decode for about {lasts:.0f} s at "
        f"{tpot * 1e3:.3g} ms a token, longer than {' and '.join(over)}: the requests still decoding "
        f"at either end are left out, so the figures undercount them; a --warmup and --horizon "
        f"several times {lasts:.0f} s measure them"
    )


def _resting_dict(
    report: SimulationReport, resting: tuple[RestingClass, ...], rate: float
) -> dict[str, dict[str, float]] | None:
    """GB of KV resting between turns per tier: the fluid run's at its end, and the steady state
    the plan rests at the scenario's mean rate (Little's law); None without returning turns."""
    from dse.sim.kv_cache import planned_capacity_gb

    if not report.resting_kv_gb or not resting:
        return None
    end = {k: float(v[-1]) for k, v in report.resting_kv_gb.items()}
    return {"end": end, "steady": planned_capacity_gb(resting, rate)}


def _cache_dict(cache: KvCacheReport) -> dict[str, Any]:
    return {
        "capacity_gb": cache.capacity_gb,
        "returns": cache.returns,
        "simulated": cache.simulated["all"],
        "planned": cache.planned["all"],
        "difference": cache.difference(),
        "eviction": cache.eviction,
        "by_class": {
            k: {"simulated": v, "planned": cache.planned[k]} for k, v in cache.simulated.items() if k != "all"
        },
    }


EVICTION_TEXT = {"lru": "least recently used", "think": "longest think time first"}


def _cache_line(cache: KvCacheReport, eviction: str) -> str:
    """Where returning turns found their KV in the live cache, beside the plan's shares."""
    sim, plan = cache.simulated["all"], cache.planned["all"]
    parts = [
        f"{'recomputed' if o == 'drop' else o} {sim[o]:.1%} (plan {plan[o]:.1%})"
        for o in sim
        if sim[o] > 0 or plan[o] > 0
    ]
    return (
        f"KV cache ({EVICTION_TEXT[eviction]} over the plan's tier capacities, exponential think times; "
        f"{cache.returns:,} returning turns): " + ", ".join(parts)
    )


def _engine_dict(engine: DesignLatency | None, slo: Slo, rate: float) -> dict[str, Any] | None:
    """The engine-level simulation's percentiles (None where the design mixes hardware in a role)."""
    if engine is None:
        return None
    qs = sorted({50.0, slo.percentile, 99.0})
    out: dict[str, Any] = {f"ttft_p{q:g}_s": engine.percentile("ttft", q) for q in qs}
    out |= {f"tpot_p{q:g}_s": engine.percentile("tpot", q) for q in qs}
    # every pool's requests meet the target, not their mix (DesignLatency.worst)
    worst = out[f"ttft_p{slo.percentile:g}_worst_pool_s"] = engine.worst("ttft", slo.percentile)
    out["meets_ttft_at_percentile"] = bool(worst <= slo.ttft_s)
    out["warning"] = engine.warning
    out["requests_per_s"] = rate  # the scenario's mean traffic, Poisson
    return out


def _arrivals_text(scenario: Scenario) -> str:
    """The arrivals as the scenario runs them: a burst's factor and window, a swing's amplitude
    and period, a trace's own mean (its rates, not the placement's)."""
    a = scenario.arrivals
    kind = a.kind.value
    if kind == "burst":
        end = a.burst_start_s + a.burst_s
        return f"at {a.rate_per_s:g} req/s, x{a.burst_factor:g} from {a.burst_start_s:g} to {end:g} s"
    if kind == "diurnal":
        return f"at {a.rate_per_s:g} req/s, swinging {a.amplitude:.0%} over {a.period_s:g} s"
    if kind == "trace":
        return f"from the trace, {a.mean_rate(scenario.horizon_s):.3g} req/s on average over the horizon"
    return f"{kind} at {a.rate_per_s:g} req/s"


def _engine_line(engine: DesignLatency | None, slo: Slo, rate: float, design: SimDesign) -> str:
    """What the engine-level simulation says of the design's TTFT at the target's percentile."""
    if engine is None and rate <= 0:
        return "engine-level: not simulated (no traffic on average over the horizon)"
    if engine is None:
        from dse.sim.engine_latency import unsimulated

        return f"engine-level: not simulated ({unsimulated(design)}); the fluid figures stand"
    q = slo.percentile
    worst = engine.worst("ttft", q)  # every pool's requests meet the target, not their mix
    verdict = "met" if worst <= slo.ttft_s else "MISSED"
    if f"{worst:.3g}" != f"{engine.percentile('ttft', q):.3g}":  # apart at the figures shown
        verdict += f" (the worst pool's requests: p{q:g} {worst:.3g} s)"
    qs = sorted({50.0, q, 99.0})
    ttfts = ", ".join(f"p{x:g} {engine.percentile('ttft', x):.3g} s" for x in qs)
    tpots = ", ".join(f"p{x:g} {1e3 * engine.percentile('tpot', x):.3g} ms" for x in qs)
    line = (
        f"engine-level (Poisson at the scenario's mean rate, {rate:.4g} requests/s, every request "
        f"through the schedulers): TTFT {ttfts}; "
        f"TPOT {tpots}; TTFT target {slo.ttft_s:g} s at p{q:g}: {verdict}"
    )
    return line + (f"\nengine-level warning: {engine.warning}" if engine.warning else "")


def _judged(f: Summary) -> str:
    """What the stability verdict read: the slope over the run's last third, or the mean and peak
    backlog of its last whole periods against the ones before (``dse.sim.statistics.backlog_growth``)."""
    w = float(f.growth_window_s[0])
    if not math.isfinite(w):
        return "over the last third"
    return f"over whole periods: the mean and peak backlog of the last {w:.0f} s against the {w:.0f} s before"


def _queue_growth(report: SimulationReport) -> tuple[float, float] | None:
    """Which queue the fluid's backlog grows in: the prefill queue's and the prefill-to-decode
    buffer's growth (requests/s, least-squares slopes over the run's last third, as the stability
    verdict's), None where that verdict read whole periods instead. An overloaded design had been
    told unstable with its backlog's growth alone, not which side of the pipeline falls behind."""
    import numpy as np

    from dse.sim.statistics import backlog_growth

    if math.isfinite(float(report.fluid.growth_window_s[0])):
        return None
    traj = report.fluid_trajectories
    # the state's own queues, as the verdict's growth (traj.queued) is judged on: the stationary
    # waits beside them had been counted in its parts, which then did not add up to it
    if traj.queued is not None and traj.queued_buffer is not None:
        parts = np.stack([traj.queued[0] - traj.queued_buffer[0], traj.queued_buffer[0]])
    else:
        parts = np.stack([traj.prefill_queue[0], traj.buffer[0]])
    _, slope, _ = backlog_growth(traj.t, parts, 1.0)
    prefill, buffer = (float(x) if abs(x) > 1e-9 else 0.0 for x in slope)  # (a fit's rounding: none)
    return prefill, buffer


def _summary_dict(report: SimulationReport, ttft: float, tpot: float, percentile: float) -> dict[str, Any]:
    """The summary ``--json`` prints and ``--out`` writes: the targets, with the percentile the TTFT
    target holds at (the TPOT target is a mean's), then each simulator's figures."""
    import numpy as np

    from dse.plain import plain

    def one(s: Any) -> dict[str, Any]:
        return {k: plain(np.asarray(v).reshape(-1)[0]) for k, v in plain_fields(s).items()}

    out: dict[str, Any] = {
        "targets": {"ttft_s": ttft, "percentile": percentile, "tpot_s": tpot},
        "fluid": one(report.fluid),
        "fluid_wall_s": report.fluid_s,
    }
    split = _queue_growth(report)
    out["fluid"]["prefill_queue_growth_per_s"] = None if split is None else split[0]
    out["fluid"]["buffer_growth_per_s"] = None if split is None else split[1]
    if report.reference is not None:
        out["des"] = one(report.reference)
        out["des_wall_s"] = report.reference_s
    return out


def plain_fields(s: Any) -> dict[str, Any]:
    return {k: getattr(s, k) for k in s.__dataclass_fields__}


OUTPUT_FILES = ("trajectories.parquet", "trajectories.png", "summary.json")


def _refuse_planner(args: argparse.Namespace, topology: str) -> None:
    """``--planner`` on an aggregated design: it would move nothing, refused."""
    if args.planner != "none" and topology == "aggregated":
        rule = (
            "does not apply to an aggregated design (its instances prefill and decode both: there is "
            "no prefill or decode pool to move them between)"
        )
        raise InputError(SRC, "--planner", rule, args.planner)


def _refuse_idle(args: argparse.Namespace, design: SimDesign) -> None:
    """Flags the design gives nothing to act on, refused as ``--planner`` on an aggregated one is
    (each had run, exit 0, and done nothing): ``--buffer`` where no buffer stands between prefill
    and decode (an aggregated instance), ``--kv-eviction`` where no KV rests between turns."""
    if args.buffer != float("inf") and design.topology == "aggregated":
        rule = (
            "does not apply to an aggregated design (its instances prefill and decode both: no buffer "
            "between)"
        )
        raise InputError(SRC, "--buffer", rule, args.buffer)
    if args.kv_eviction != "lru" and not design.resting:
        rule = "needs KV resting between turns to evict (the design has no returning turns)"
        raise InputError(SRC, "--kv-eviction", rule, args.kv_eviction)


def _refuse_taken(out: Path) -> None:
    """All or none: an output name already taken by a folder (or a device) is found before any
    file moves; a file where the folder goes, before any run."""
    if out.exists() and not out.is_dir():
        raise output_error(NotADirectoryError(20, "Not a directory"), SRC, "--out", out)
    taken = next((out / n for n in OUTPUT_FILES if (out / n).exists() and not (out / n).is_file()), None)
    if taken is not None:
        rule = f"cannot be written ({taken.name} is not a file it may replace)"
        raise InputError(SRC, "--out", rule, str(out))


def _write_outputs(
    out: Path, report: SimulationReport, summary: dict[str, Any], *, title: str, drawer: Drawer | None = None
) -> None:
    """The three files, all or none (the PNG titled ``title``, the design simulated, drawn by
    ``drawer``: a figure worker, or this process): written into a temporary folder beside
    ``out``, then moved in (a new ``out`` is the renamed folder), so a failure leaves no
    half-written output."""
    from dse.plain import plain
    from dse.sim.plot import trajectories_figure
    from dse.sim.simulation import trajectories_frame
    from dse.study.report_figures import HERE

    drawer = drawer or HERE

    # everything that can fail before the first write; strict JSON (nan and inf are null)
    text = json.dumps(plain(summary), indent=2, allow_nan=False) + "\n"
    frame = trajectories_frame(report)
    runs = {"fluid": report.fluid_trajectories}
    if report.reference_trajectories is not None:
        runs["des"] = report.reference_trajectories
    _refuse_taken(out)  # again: the folder may have changed while the runs ran
    try:
        if out.exists() and not out.is_dir():
            raise NotADirectoryError(20, "Not a directory")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; a new `out` is an ordinary folder
    except OSError as exc:
        raise output_error(exc, SRC, "--out", out) from None
    try:
        drawer.draw(tmp / "trajectories.png", trajectories_figure, (runs, title, report.resting_kv_gb))
        with atomic_path(tmp / "trajectories.parquet") as part:
            frame.write_parquet(part, compression="zstd")
        write_text(tmp / "summary.json", text)
        drawer.finish()  # the figure written before the folder moves in
        with interrupt.deferred():  # a Ctrl-C among the renames waits for the last (all or none)
            if not out.exists():
                os.rename(tmp, out)
            else:
                for name in OUTPUT_FILES:
                    os.replace(tmp / name, out / name)
    except OSError as exc:
        raise output_error(exc, SRC, "--out", out) from None
    finally:
        with contextlib.suppress(Exception):  # a figure still being drawn, done before the folder goes
            drawer.finish()
        shutil.rmtree(tmp, ignore_errors=True)


def _design_line(design: SimDesign) -> str:
    """What is simulated: the model, the topology and each pool's instances of hardware/shape."""

    def shape(p: SimPool) -> str:  # the unit's name is hardware/role/shape[/variant]
        parts = p.name.split("/")
        return parts[2] if len(parts) > 2 else f"{p.gpus:g}gpu"

    # a pipelined pool as placed: its instances, not the stages the simulators run as instances
    pools = ", ".join(f"{p.role} {p.instances / p.stages:g} x {p.hardware}/{shape(p)}" for p in design.pools)
    return f"{design.model}, {design.topology}: {pools}"


def _decode_text(p: Pipeline) -> str:
    """The decode instances and their slots: one pool's, or each pool's (the fluid model runs them
    as one kind of instance of their summed capacity; :func:`dse.sim.scenario.pooled_decode`)."""
    x, slots = p.arrays("decode_pool_instances")[0], p.arrays("decode_pool_slots")[0]
    if len(x) == 1:
        n = p.decode_instances[0]
        return f"{n:g} decode instance{'' if n == 1 else 's'} x {p.slots[0]:g} slots"
    pools = " + ".join(f"{n:g} x {c:g}" for n, c in zip(x, slots, strict=True))
    return f"{p.decode_instances[0]:g} decode instances ({pools} slots)"


def _prefill_text(p: Pipeline) -> str:
    """The prefill servers and their service time: a fresh prompt's and, where returning turns
    come back, theirs (a midfill: the reload and the suffix), which the capacity mixes."""
    text = f"{p.prefill_instances[0]:g} prefill servers x {p.prefill_s[0]:.3g} s"
    share = float(p.arrays("midfill_share")[0])
    if share <= 0.0:
        return text
    back = float(p.arrays("midfill_s")[0])
    return text + f" per fresh prompt, {back:.3g} s per returning turn ({share:.0%})"


def _resting_text(report: SimulationReport, steady_kv_gb: dict[str, float] | None) -> str:
    """The KV resting per tier at the end of the run, beside the steady state the plan sizes
    (Little's law at the mean rate): the run starts with none resting, and a class fills over its
    think time, so a horizon not much longer than the longest one ends short of it."""
    final = ", ".join(f"{k} {v[-1] / 1e3:.3g} TB" for k, v in report.resting_kv_gb.items() if v[-1] > 0)
    line = f"KV resting between turns at the end: {final or 'none'}"
    if steady_kv_gb and any(v > 0 for v in steady_kv_gb.values()):
        plan = ", ".join(f"{k} {v / 1e3:.3g} TB" for k, v in steady_kv_gb.items() if v > 0)
        line += f" (steady state, the plan's tier shares at the mean rate: {plan}; the run starts with none)"
    return line


def _swing_text(s: Summary) -> str:
    """The swing the oscillation was judged on, with its unit: the summary's column of that
    signal (:func:`dse.sim.outputs.swings`; the other is nan): prefill servers where a planner
    moved them after the warm-up, else requests in the prefill queue."""
    servers = float(s.swing_prefill_servers[0])
    if math.isfinite(servers):
        return f"{servers:.3g} prefill servers"
    return f"{float(s.swing_prefill_queue_requests[0]):.3g} requests in the prefill queue"


def render(
    report: SimulationReport, ttft: float, tpot: float, *, steady_kv_gb: dict[str, float] | None = None
) -> str:
    """The pipeline line, the simulators' table and the fluid's verdicts; ``steady_kv_gb``, the
    plan's resting KV per tier at the mean rate, goes beside the resting KV at the end."""
    rows = []
    sims = [("fluid", report.fluid, report.fluid_s)]
    if report.reference is not None:
        sims.append(("discrete-event", report.reference, report.reference_s))
    for name, s, wall in sims:
        rows.append(
            [
                name,
                float(s.requests_per_s[0]),
                float(s.output_tokens_per_s[0]),
                float(s.ttft_mean_s[0]),
                float(s.ttft_p99_s[0]),
                1e3 * float(s.tpot_mean_s[0]),
                1e3 * float(s.tpot_p99_s[0]),
                float(s.e2e_mean_s[0]),
                float(s.e2e_p99_s[0]),
                round(wall, 3),
            ]
        )
    p = report.pipeline
    lines = [
        f"pipeline: {_prefill_text(p)}, "
        f"{_decode_text(p)}; "
        f"capacity {p.prefill_capacity()[0]:.3g} req/s prefill, "
        f"{p.decode_capacity(report.scenario.lengths)[0]:.3g} req/s decode; "
        f"arrivals {_arrivals_text(report.scenario)}",
        "",
        format_table(
            [
                "simulator",
                "req/s",
                "out tok/s",
                "TTFT mean s",
                "TTFT p99 s",
                "TPOT mean ms",
                "TPOT p99 ms",
                "E2E mean s",
                "E2E p99 s",
                "wall s",
            ],
            rows,
        ),
        "",
    ]
    f = report.fluid
    growth = float(f.backlog_growth_per_s[0])
    growth = growth if abs(growth) > 1e-9 else 0.0  # a fit's rounding, not a backlog
    verdict = "yes" if f.stable[0] else "NO"
    split = _queue_growth(report) if not f.stable[0] else None
    where = (
        ""
        if split is None
        else f": the prefill queue {split[0]:+.3g} req/s, the decode buffer {split[1]:+.3g} req/s"
    )
    # beside a discrete-event run, each verdict is said for both: they had been the fluid's alone,
    # under a table whose discrete-event row missed the TTFT target the next line called met
    ref = report.reference
    des = "" if ref is None else f"; discrete-event: {'yes' if ref.stable[0] else 'NO'}"
    lines.append(f"stable: {verdict} (backlog growth {growth:+.3g} req/s {_judged(f)}{where}){des}")
    if f.oscillating[0]:
        lines.append(f"oscillation: period {f.oscillation_period_s[0]:.0f} s, amplitude {_swing_text(f)}")
    else:
        lines.append("oscillation: none detected")
    said = [("fluid", f)] + ([] if ref is None else [("discrete-event", ref)])
    verdicts = [
        ("met" if s.ttft_mean_s[0] <= ttft and s.tpot_mean_s[0] <= tpot else "MISSED")
        + (f" ({name})" if ref else "")
        for name, s in said
    ]
    lines.append(f"targets (TTFT {ttft:g} s, TPOT {tpot * 1e3:g} ms) on average: {', '.join(verdicts)}")
    if f.near_capacity[0]:
        lines.append("near capacity: the percentiles are low-confidence")
    if report.resting_kv_gb:
        lines.append(_resting_text(report, steady_kv_gb))
    return "\n".join(lines)
