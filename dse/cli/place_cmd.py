"""`dse place`: pools, counts and KV tiers for a traffic and its latency targets.

The solver and the performance model are imported inside the functions that use them: building
the parser must stay cheap."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from dse.catalog import Catalog, Hardware, Model
from dse.cli.flags import add_precision, number
from dse.cli.table import format_table
from dse.errors import InputError, NoFeasibleDesign, UnknownIdError
from dse.perf.frameworks import ENGINES
from dse.placement.request import (
    PRICE_TIERS,
    Energy,
    Limits,
    PlacementRequest,
    Storage,
    Topology,
    UnitOptions,
)
from dse.typed_data import Rule, at_least_one, build, check_number, gap_rule, non_negative, positive
from dse.units import Precision
from dse.workload import Slo, Workload
from formulations.placement_data import TIERS, Objective, Role

if TYPE_CHECKING:
    from dse.evaluation import EngineCheck
    from dse.perf.params import PerfParams
    from dse.placement.candidates import UnitInfo
    from dse.placement.plan import PlacementReport, TopologyOutcome


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("place", help="size pools and place KV tiers for a traffic (MILP)")
    add_request_arguments(p, required=True)
    p.add_argument(
        "--no-shadow-prices", action="store_true", help="skip the LP that prices bandwidth and capacity"
    )
    p.add_argument(
        "--confirm",
        action="store_true",
        help="run each topology's design through the engine-level simulation (every request through "
        "the engines' schedulers, Poisson at the mean traffic) and answer with the cheapest whose "
        "TTFT holds at its percentile",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


ENGINE_HELP = (
    "engine profile: " + ", ".join(ENGINES) + " (default: trt where every candidate GPU is NVIDIA's, "
    "else sglang for every pool: one engine prices them all, so listing an AMD GPU beside NVIDIA ones "
    "prices the NVIDIA pools as SGLang too)"
)


def add_request_arguments(p: argparse.ArgumentParser, *, required: bool) -> None:
    """The flags that describe a placement request (shared with `dse simulate`)."""
    p.add_argument("--model", default="deepseek-v3", help="model id or alias (dse catalog list models)")
    p.add_argument("--hardware", required=required, help="comma-separated hardware ids or aliases")
    p.add_argument(
        "--rate",
        type=number,
        help="requests per second"
        + (
            " (required; with --objective goodput, default 1)"
            if required
            else " (required without --placement, unless --objective goodput: default 1)"
        ),
    )
    p.add_argument("--isl", type=number, default=4096.0, help="mean input tokens of a fresh request")
    p.add_argument("--osl", type=number, default=1024.0, help="mean output tokens")
    p.add_argument(
        "--returning-share",
        type=number,
        default=0.0,
        help="fraction of requests that are later turns with a cached prefix",
    )
    p.add_argument("--prefix", type=number, default=0.0, help="cached prefix tokens of a returning turn")
    p.add_argument("--suffix", type=number, default=0.0, help="new tokens of a returning turn (1 at least)")
    p.add_argument(
        "--think",
        default="",
        metavar="SHARE:SECONDS,...",
        help="think-time bins of returning turns, e.g. 0.6:30,0.3:600,0.1:3600",
    )
    p.add_argument("--ttft", type=number, required=required, help="TTFT target, seconds")
    p.add_argument("--tpot", type=number, required=required, help="TPOT target, seconds")
    p.add_argument("--percentile", type=number, default=50.0, help="TTFT percentile the target applies to")
    p.add_argument(
        "--topology",
        default="auto",
        choices=[t.value for t in Topology],
        help="aggregated (prefill and decode share GPUs), disaggregated, afd (decode attention and "
        "experts apart too), four-stage (afd, and a midfill pool for returning turns where one pays), "
        "or auto (solve aggregated, disaggregated and afd, keep the best)",
    )
    p.add_argument(
        "--objective",
        default="cost",
        choices=[o.value for o in Objective],
        help="cost ($/hour), gpus, or goodput (the most traffic the caps allow: --budget, --power-kw, "
        "or an --inventory of every --hardware)",
    )
    p.add_argument(
        "--price-tier", default="own_hyperscaler", choices=PRICE_TIERS, help="cost basis of a GPU-hour"
    )
    p.add_argument("--engine", metavar="NAME", help=ENGINE_HELP)
    add_precision(p)
    p.add_argument("--mtp", action="store_true", help="multi-token prediction (speculative decoding)")
    p.add_argument(
        "--budget",
        type=number,
        help="cap in $/hour (--objective goodput needs it, --power-kw or an --inventory of every --hardware)",
    )
    p.add_argument("--power-kw", type=number, help="cap on GPU power, kW")
    _add_energy_and_shapes(p)
    p.add_argument("--network-kv-tb", type=number, help="capacity of the network KV store, TB")
    p.add_argument(
        "--network-kv-usd-per-tb-hour",
        type=number,
        default=0.0,
        help="price of the network KV store, $/TB-hour",
    )
    p.add_argument(
        "--latency-usd-per-s",
        type=number,
        default=0.0,
        help="value of one request-second of reload wait (trades tiers against latency)",
    )
    p.add_argument("--time-limit", type=number, default=30.0, help="seconds per MILP solve")
    p.add_argument("--gap", type=number, default=1e-4, help="relative MIP gap")


FLAG_OF = {
    "requests_per_s": "--rate",
    "input_tokens": "--isl",
    "output_tokens": "--osl",
    "returning_share": "--returning-share",
    "cached_prefix_tokens": "--prefix",
    "suffix_tokens": "--suffix",
    "think": "--think",
    "ttft_s": "--ttft",
    "tpot_s": "--tpot",
    "percentile": "--percentile",
}
"""Flag of each field of the workload and the SLO, so an error names what the user typed."""


OPTIONAL_NUMBERS: dict[str, Rule] = {
    "budget": positive,
    "power_kw": positive,
    "network_kv_tb": non_negative,
    "network_kv_usd_per_tb_hour": non_negative,
    "latency_usd_per_s": non_negative,
    "time_limit": positive,
    "gap": gap_rule,
    "usd_per_kwh": non_negative,
    "pue": at_least_one,
    "dram_usd_per_tb": non_negative,
    "nvme_usd_per_tb": non_negative,
    "network_usd_per_tb": non_negative,
    "storage_years": positive,
}
"""Numeric flags outside the workload and the SLO, with their rules."""

T = TypeVar("T")


def _add_energy_and_shapes(p: argparse.ArgumentParser) -> None:
    """The site's energy terms, the GPU inventory and the instance shapes (part of the request)."""
    p.add_argument(
        "--usd-per-kwh",
        type=number,
        default=0.0,
        help="the site's energy price: the design is chosen with each GPU's full-draw energy on its "
        "hour, and the best line prints the energy at load and $/M tokens with it (the tables' $/hour "
        "are the GPUs'); 0: the rate holds power, as the shipped price tiers do",
    )
    p.add_argument(
        "--pue", type=number, default=1.0, help="the site's PUE: facility watts per watt of IT load"
    )
    for tier, what in (("dram", "host DRAM"), ("nvme", "local NVMe"), ("network", "network storage")):
        p.add_argument(
            f"--{tier}-usd-per-tb",
            type=number,
            default=0.0,
            help=f"capex of a TB of {what} that resting KV fills, over --storage-years (0: none)",
        )
    p.add_argument("--storage-years", type=number, default=4.0, help="years the storage capex is spread over")
    p.add_argument("--inventory", default="", metavar="HW=GPUS,...", help="GPUs available per hardware")
    p.add_argument(
        "--shapes",
        default=None,
        metavar="LABEL,...",
        help="instance shapes to consider, instead of the default ones: GPUs, pipeline stages (ppS, "
        "prefill only, optional), attention tensor parallelism (tpN, or dpa for data-parallel "
        "attention) and expert parallelism dividing the GPUs, e.g. 8gpu-tp8-ep4 (experts split 2-way "
        "inside each of 4 expert groups), 16gpu-dpa-ep16, 16gpu-pp2-tp8-ep8",
    )
    for role in ("prefill", "midfill"):
        p.add_argument(
            f"--{role}-shapes",
            default=None,
            metavar="LABEL,...",
            help=f"{'four-stage: ' if role == 'midfill' else ''}the shapes {role} units may use, "
            "spelled as --shapes (default: those of --shapes, or the default ones)",
        )


GAP_SHOWN = 1e-6  # a MIP gap below this is rounding (HiGHS reports 1e-16 for a proven optimum): 0


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def _by_flag(src: str, flag_name: str, lookup: Callable[[str], T], name: str) -> T:
    """A catalog or engine lookup whose error names the flag instead of the catalog."""
    try:
        return lookup(name)
    except UnknownIdError as exc:
        raise InputError(src, flag_name, exc.rule, name) from None
    except InputError as exc:
        raise InputError(src, flag_name, exc.rule, exc.value) from None


def _rate_of(args: argparse.Namespace, src: str) -> float:
    """The traffic, in requests/s; under goodput only the unit its multiples are counted in."""
    if args.rate is not None:
        return args.rate  # a number as typed: "--rate = 2e12" in a refusal, not 2000000000000.0
    if args.objective == Objective.GOODPUT.value:
        return 1.0
    raise InputError(src, "--rate", "is required (requests per second), unless --objective goodput")


def _limits_of(args: argparse.Namespace, catalog: Catalog, src: str) -> Limits:
    """The caps: budget, power, the GPUs available per hardware, the network KV store's size."""
    inventory = {}
    for part in filter(None, (s.strip() for s in args.inventory.split(","))):
        key, _, value = part.partition("=")
        try:
            count = float(value)
        except ValueError:
            raise InputError(src, "--inventory", "must be HW=GPUS pairs separated by commas", part) from None
        if not count.is_integer():  # 16.0 and 1e3 count whole GPUs; 12.5 does not
            raise InputError(src, "--inventory", f"must count whole GPUs ({value.strip()} is not)", part)
        gpus = int(count)
        check_number(gpus, source=src, key="--inventory", check=non_negative)
        hw = _by_flag(src, "--inventory", catalog.hardware, key.strip()).id
        if hw in inventory:  # the later count had silently replaced the earlier
            raise InputError(src, "--inventory", f"must name each hardware once ({hw} twice)", args.inventory)
        inventory[hw] = gpus
    return Limits(
        budget_usd_hour=args.budget,
        power_kw=args.power_kw,
        inventory_gpus=inventory,
        network_kv_capacity_tb=args.network_kv_tb,
    )


def _shapes_of(
    text: str | None, src: str, model: Model, hardware: list[Hardware], flag: str = "--shapes"
) -> tuple[str, ...] | None:
    """``flag`` (``--shapes``) as labels (None, the flag not given: the default shapes), each one
    some candidate can run; given, it names one at least."""
    from dse.placement.shapes import parse_shape, unrunnable

    if text is None:
        return None
    labels = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    if not labels:
        raise InputError(
            src, flag, "must name one shape at least (leave the flag out for the default ones)", text
        )
    for label in labels:
        try:
            par = parse_shape(label)
        except InputError as exc:
            raise InputError(src, flag, exc.rule, label) from None
        if (why := unrunnable(par, hardware, model)) is not None:
            raise InputError(src, flag, f"no candidate hardware can run it: {why}", label)
    return labels or None


def _built(cls: type[T], data: dict[str, object], src: str) -> T:
    """A workload or SLO from flags; a broken rule names the flag (``think[0].share`` is ``--think``)."""
    try:
        return build(cls, data, source=src)
    except InputError as exc:
        head = exc.field.split(".")[0].split("[")[0]
        typed = data.get(exc.field, exc.value)  # a number flag's value as typed, not as read
        value = typed if isinstance(typed, float) and typed == exc.value else exc.value
        raise InputError(src, FLAG_OF.get(head, exc.field), exc.rule, value) from None


def _think_of(args: argparse.Namespace, src: str) -> list[dict[str, float]]:
    """``--think``'s bins; a returning turn's flags without returning turns are refused, not ignored."""
    think = []
    for part in filter(None, (s.strip() for s in args.think.split(","))):
        try:
            share, dwell = (float(v) for v in part.split(":"))
        except ValueError:
            raise InputError(
                src, "--think", "must be SHARE:SECONDS pairs separated by commas", part
            ) from None
        think.append({"share": share, "dwell_s": dwell})
    if not args.returning_share:
        for flag, value in (("--prefix", args.prefix), ("--suffix", args.suffix), ("--think", args.think)):
            if value:
                raise InputError(src, flag, "needs --returning-share above 0 (no request returns)", value)
        # the resting KV's store, its prices and the value of a reload's wait: none rests (they had
        # been taken and done nothing)
        tiers = ("network_kv_tb", "network_kv_usd_per_tb_hour", "latency_usd_per_s",
                 "dram_usd_per_tb", "nvme_usd_per_tb", "network_usd_per_tb")  # fmt: skip
        for name in tiers:
            if getattr(args, name, None):
                rule = "needs --returning-share above 0 (no KV rests between turns to store or price)"
                raise InputError(src, flag_of(name), rule, getattr(args, name))
    return think


def _engine_of(named: str | None, hardware: tuple[str, ...], catalog: Catalog, src: str) -> str:
    """The engine profile ``--engine`` names, or the one that runs on the GPUs of ``hardware``
    (:func:`~dse.perf.frameworks.default_engine`); one that cannot run on them is refused (TensorRT-LLM
    on an MI355X had been priced without a word)."""
    from dse.perf.frameworks import default_engine, engine_vendor_problem
    from dse.perf.params import load_params

    vendors = {h: catalog.hardware(h).vendor for h in hardware}
    if named is None:
        return default_engine(set(vendors.values()))
    _by_flag(src, "--engine", load_params().engine, named)
    why = engine_vendor_problem(named, vendors)
    if why is not None:
        raise InputError(src, "--engine", f"cannot price this hardware: {why}", named)
    return named


def request_from_args(args: argparse.Namespace, catalog: Catalog, src: str = "dse place") -> PlacementRequest:
    for name, check in OPTIONAL_NUMBERS.items():
        if getattr(args, name) is not None:
            check_number(getattr(args, name), source=src, key=flag_of(name), check=check)
    hardware = tuple(
        _by_flag(src, "--hardware", catalog.hardware, h.strip()).id
        for h in args.hardware.split(",")
        if h.strip()
    )
    if not hardware:
        raise InputError(src, "--hardware", "must name at least one hardware id", args.hardware)

    model = _by_flag(src, "--model", catalog.model, args.model).id
    engine = _engine_of(args.engine, hardware, catalog, src)
    think = _think_of(args, src)
    workload = _built(
        Workload,
        {
            "requests_per_s": _rate_of(args, src),
            "input_tokens": args.isl,
            "output_tokens": args.osl,
            "returning_share": args.returning_share,
            "cached_prefix_tokens": args.prefix,
            "suffix_tokens": args.suffix,
            "think": think,
        },
        src,
    )
    slo = _built(Slo, {"ttft_s": args.ttft, "tpot_s": args.tpot, "percentile": args.percentile}, src)
    m = catalog.model(model)
    broken = workload.context_problem(m.max_context, m.id)
    if broken is not None:  # the flags name it here; the placement would name the request's field
        flag = FLAG_OF[broken[0]]  # its value as typed (``200000``, not the ``200000.0`` it was read as)
        raise InputError(src, flag, broken[1], getattr(args, flag[2:].replace("-", "_"), broken[2]))
    limits = _limits_of(args, catalog, src)
    if args.objective == Objective.GOODPUT.value and not limits.bounds(hardware):
        rule = (
            "is required by --objective goodput (the most traffic a budget serves), unless --power-kw "
            "or an --inventory of every --hardware bounds it"
        )
        raise InputError(src, "--budget", rule)
    stray = next((h for h in limits.inventory_gpus if h not in hardware), None)
    if stray is not None:  # the placement would name the request's field, not the flag
        rule = f"names hardware that is not a candidate (--hardware {','.join(dict.fromkeys(hardware))})"
        raise InputError(src, "--inventory", rule, stray)
    hws = [catalog.hardware(h) for h in hardware]
    from dse.placement.shapes import parse_shape

    shapes = _shapes_of(args.shapes, src, m, hws)
    if shapes is not None and all(parse_shape(s).pp > 1 for s in shapes):  # decode takes --shapes
        rule = "must name a shape without pipeline stages for decode (pipeline stages run prefill only)"
        raise InputError(src, "--shapes", rule, args.shapes)
    prefill = _shapes_of(args.prefill_shapes, src, m, hws, "--prefill-shapes") or shapes
    midfill = _shapes_of(args.midfill_shapes, src, m, hws, "--midfill-shapes") or shapes
    _topology_refusals(args, src, m)
    if args.precision == "fp4" and (why := m.fp4_problem()) is not None:
        raise InputError(src, "--precision", why, "fp4")
    return PlacementRequest(
        model=model,
        hardware=hardware,
        options=UnitOptions(prefill_shapes=prefill, decode_shapes=shapes, midfill_shapes=midfill),
        workload=workload,
        slo=slo,
        topology=Topology(args.topology),
        objective=Objective(args.objective),
        price_tier=args.price_tier,
        engine=engine,
        weight_precision=Precision(args.precision) if args.precision else m.serving_precision,
        mtp=args.mtp,
        limits=limits,
        network_kv_usd_per_tb_hour=args.network_kv_usd_per_tb_hour,
        energy=Energy(usd_per_kwh=args.usd_per_kwh, pue=args.pue),
        storage=Storage(
            args.dram_usd_per_tb, args.nvme_usd_per_tb, args.network_usd_per_tb, args.storage_years
        ),
        latency_usd_per_s=args.latency_usd_per_s,
        time_limit_s=args.time_limit,
        mip_rel_gap=args.gap,
    )


def _topology_refusals(args: argparse.Namespace, src: str, model: Model) -> None:
    """A topology the model cannot be served in, MTP drafts it has no layers for, and shapes of
    units the topology has not: refused, not ignored. (``auto`` on a model without routed experts
    solves afd too: an infeasible answer that says why, :func:`dse.placement.candidates.build_candidates`.)"""
    if Topology(args.topology).splits_experts and model.moe is None:
        rule = f"needs a model with routed experts to split from attention ({model.id} has none)"
        raise InputError(src, "--topology", rule, args.topology)
    if args.mtp and (why := model.no_mtp()) is not None:
        raise InputError(src, "--mtp", why)
    if args.midfill_shapes is not None and args.topology != Topology.FOUR_STAGE.value:
        rule = "needs --topology four-stage (the only topology with midfill units)"
        raise InputError(src, "--midfill-shapes", rule, args.midfill_shapes)
    if args.prefill_shapes is not None and args.topology == Topology.AGGREGATED.value:
        rule = "does not apply to --topology aggregated (its units prefill and decode at one shape: --shapes)"
        raise InputError(src, "--prefill-shapes", rule, args.prefill_shapes)


def say_calibration(params: PerfParams) -> None:
    """One line on stderr where the command prices with a calibration other than the shipped one
    (:func:`~dse.perf.expected_error.calibration_note`)."""
    from dse.perf.expected_error import calibration_note, defaults_note

    if (note := calibration_note(params)) is not None:
        print(f"dse: note: {note}", file=sys.stderr)
    if (lacks := defaults_note(params)) is not None:
        print(f"dse: warning: {lacks}", file=sys.stderr)


def run(args: argparse.Namespace, catalog: Catalog) -> int:
    from dse.perf.params import load_params
    from dse.placement.plan import place
    from dse.placement.serialize import report_to_dict

    req = request_from_args(args, catalog)
    params = load_params()
    say_calibration(params)
    report = place(req, catalog=catalog, params=params, with_shadow_prices=not args.no_shadow_prices)
    checks: tuple[EngineCheck, ...] = ()
    if args.confirm:
        from dse.context import Context
        from dse.evaluation import confirmed, engine_checks
        from formulations.solve import PlacementSolver

        checks = engine_checks(report, Context(catalog, params, PlacementSolver()))
        report = confirmed(report, checks)
    energy = best_energy(report, catalog, params)
    failure = _no_design(report, checks)
    if args.json:
        doc = {**report_to_dict(report), "best_energy": energy}
        # the error line's facts, for a reader of the JSON alone (null when there is a design)
        doc["infeasibility"] = (
            None if failure is None else {"binding": failure.binding, "detail": failure.detail}
        )
        # the catalog entries it was placed with: `dse simulate --placement` checks its own match
        doc["catalog"] = catalog.numbers(req.model, req.hardware)
        if args.confirm:
            doc["engine_check"] = [
                {"topology": c.topology.value, "ttft_pct_s": c.ttft_s, "tpot_pct_s": c.tpot_s,
                 "tpot_mean_s": c.tpot_mean_s, "percentile": c.percentile, "holds": c.holds,
                 "unsimulated": c.unsimulated or None,
                 "milp_ttft_target_s": c.sized_ttft_s, "first_ttft_pct_s": c.first_ttft_s,
                 "all_requests_ttft_pct_s": c.all_ttft_s}
                for c in checks
            ]  # fmt: skip
        from dse.plain import plain  # numpy: not for the parser

        json.dump(plain(doc), sys.stdout, indent=2, allow_nan=False)  # strict JSON: nan is null
        print()
    else:
        print(render(report, energy, checks, priced=not args.no_shadow_prices))
    if failure is not None:
        raise failure
    return 0


def _no_design(report: PlacementReport, checks: tuple[EngineCheck, ...]) -> NoFeasibleDesign | None:
    """Why there is no answer (None: there is one): no design held in the engine-level check, or
    the topology nearest to feasible says why."""
    if report.best is not None:
        return None
    if checks:  # named for what missed (a TPOT alone had been called a TTFT miss)
        missed = [k for k, held in (("TTFT", "ttft_holds"), ("TPOT", "tpot_holds"))
                  if any(not getattr(c, held) for c in checks)]  # fmt: skip
        binding = f"engine-level {' and '.join(missed) or 'check'}"
        return NoFeasibleDesign(binding, "; ".join(c.describe() for c in checks))
    why = report.why_none()
    if why is None:
        return NoFeasibleDesign("solver", "no topology returned a solution")
    return NoFeasibleDesign(why.binding, why.detail)


def best_energy(
    report: PlacementReport, catalog: Catalog, params: PerfParams
) -> dict[str, float | None] | None:
    """Power at load, energy per token and, where the request prices energy, its cost, of the best
    design (:func:`dse.design_power.power_metrics`)."""
    from dse.context import Context
    from dse.design_power import power_metrics, stage_split
    from formulations.solve import PlacementSolver

    best = report.best
    if best is None:
        return None
    ctx = Context(catalog, params, PlacementSolver())
    out = power_metrics(report.request, best, stage_split(report.request, best.pools, ctx), ctx)
    out.setdefault("usd_per_million_tokens", best.usd_per_million_tokens)
    return out


def render(
    report: PlacementReport,
    energy: dict[str, float | None] | None = None,
    checks: tuple[EngineCheck, ...] = (),
    *,
    priced: bool = True,
) -> str:
    """The text of `dse place`: the request, a table of the topologies and why any is infeasible,
    the engine-level check of each design (``--confirm``); then, when one is feasible, the best
    one's pools, KV tiers and shadow prices."""
    lines = [_request_line(report.request), "", _outcomes_table(report)]
    for o in report.outcomes:
        if o.infeasibility is not None:
            lines.append(f"  {o.topology.value}: {o.infeasibility.binding}: {o.infeasibility.detail}")
    if checks:
        lines += ["", "engine-level check (Poisson at the mean traffic, requests through the schedulers):"]
        lines += [f"  {c.describe()}" for c in checks]
    best = report.best
    if best is None:
        return "\n".join(lines)
    lines += [
        "",
        f"best: {best.topology.value}, {best.requests_per_s:g} req/s, "
        f"{_rate(best.tokens_per_s)} tokens/s "
        f"({_rate(_output_per_gpu(best, report.request))} output tokens/s per GPU), "
        + (
            f"${best.usd_per_hour:,.2f}/hour"
            if best.usd_per_hour == best.usd_per_hour
            else f"no {report.request.price_tier} price in the catalog"
        ),
    ]
    if energy is not None:
        lines.append(_energy_line(report.request, energy))
    lines += ["", _pools_table(best, report.request.slo)]
    if (note := _rows_note(best)) is not None:
        lines.append(note)
    if best.tiers:
        lines += ["", _tiers_table(best)]
    if report.shadow_prices:
        lines += [
            "",
            "shadow prices (LP over the chosen units, counts relaxed): $/hour saved",
            _shadow_prices_table(report),
        ]
    elif report.shadow_prices_note:
        lines += ["", f"shadow prices: none ({report.shadow_prices_note})"]
    elif priced and not math.isfinite(best.usd_per_hour):  # they are $/hour saved: none without a price
        # the pools' hardware without a price, not every pool's (a priced one beside it has one)
        hw = {p.unit.hardware for p in best.pools}
        unpriced = sorted({p.unit.hardware for p in best.pools if not math.isfinite(p.usd_per_hour)} or hw)
        lines += ["", f"shadow prices: none ({', '.join(unpriced)}: no {report.request.price_tier} price, "
                  "so no $/hour to save)"]  # fmt: skip
    return "\n".join(lines)


def _rows_note(best: TopologyOutcome) -> str | None:
    """What the ``idle`` rows are, and what the rows add up to against the design's $/hour when
    that holds more than the pools (the idle GPUs of whole nodes or racks, the storage resting KV
    fills where it is priced); None when the pools are the whole of it."""
    rows = sum(p.usd_per_hour for p in best.pools) + sum(i.usd_per_hour for i in best.idle)
    known = math.isfinite(rows) and math.isfinite(best.usd_per_hour)  # else a price the catalog lacks
    rest = best.storage_usd_per_hour if known else 0.0
    parts = []
    if best.idle:
        units = "; ".join(f"{i.hardware}: {i.sale_unit_gpus} GPUs" for i in best.idle)
        parts.append(f"idle: GPUs bought with a whole node or rack ({units}) that no pool runs on")
    if known and (best.idle or rest > 0.005):
        storage = f", and ${rest:,.2f}/hour of storage for resting KV" if rest > 0.005 else ""
        parts.append(f"the rows sum to ${rows:,.2f}/hour{storage}")
    return "; ".join(parts) or None


def _energy_line(req: PlacementRequest, e: dict[str, float | None]) -> str:
    kw, kwh = e["power_kw"] or 0.0, e["kwh_per_million_tokens"]
    line = f"power at load: {kw:,.1f} kW (PUE {req.energy.pue:g}), {kwh or float('nan'):.3g} kWh/M tokens"
    if req.energy.usd_per_kwh > 0:
        # none where a GPU has no price at the tier ("$nan" had been printed)
        with_it = e["usd_per_million_tokens"]
        line += (
            f"; energy ${e['energy_usd_per_hour'] or 0.0:,.2f}/hour at ${req.energy.usd_per_kwh:g}/kWh"
            + (
                f", ${with_it:.4f} per million tokens with it"
                if with_it is not None and math.isfinite(with_it)
                else f" (no $/M tokens with it: a GPU has no {req.price_tier} price)"
            )
        )
    return line


def _rate(value: float) -> str:
    """A token rate: whole tokens from 100 up (``1,250``), three figures below, where whole ones
    had read ``0 output tokens/s per GPU`` for a design that serves 0.001 requests/s."""
    return f"{value:,.0f}" if abs(value) >= 99.5 else f"{value:.3g}"


def _output_per_gpu(best: TopologyOutcome, req: PlacementRequest) -> float:
    """Output tokens/s per GPU of the design, over every GPU it buys (AIConfigurator's
    ``tokens/s/gpu_cluster`` when the design takes the whole cluster)."""
    return best.requests_per_s * req.workload.output_tokens / best.gpus if best.gpus else float("nan")


def _request_line(req: PlacementRequest) -> str:
    w, slo = req.workload, req.slo
    traffic = f"{w.requests_per_s:g} req/s"
    if req.objective is Objective.GOODPUT:  # the rate only sets the unit the caps buy multiples of
        lim = req.limits
        caps = [f"${lim.budget_usd_hour:,.2f}/hour"] if lim.budget_usd_hour is not None else []
        caps += [f"{lim.power_kw:g} kW"] if lim.power_kw is not None else []
        caps += [", ".join(f"{n} {h}" for h, n in lim.inventory_gpus.items())] if lim.inventory_gpus else []
        traffic = f"the most traffic {' and '.join(caps)} serve{'s' if len(caps) == 1 else ''}"
    return (
        f"{req.model}: {traffic} ({w.returning_share:.0%} returning), "
        f"TTFT <= {slo.ttft_s:g} s (p{slo.percentile:g}), TPOT <= {slo.tpot_s * 1e3:g} ms; "
        f"hardware {', '.join(req.hardware)}; engine {req.engine}, precision {req.weight_precision.value}"
        f"{', MTP' if req.mtp else ''}; objective {req.objective.value} "
        f"({req.price_tier})"
    )


def _outcomes_table(report: PlacementReport) -> str:
    """One row per topology solved: status, cost, GPUs, gap, solve time, units and the checker."""
    rows = []
    for o in report.outcomes:
        star = "*" if report.best is o else ""
        r = o.result
        checked = (
            (f"{o.check.rows} rows hold" if o.check.ok else f"{len(o.check.violations)} VIOLATED")
            if o.check
            else "-"
        )
        # the goodput objective's optimum may serve nothing: solved, yet no design
        status = "infeasible" if o.infeasibility is not None and r.has_solution else r.termination.value
        rows.append(
            [
                o.topology.value + star,
                status,
                o.usd_per_hour if o.feasible else None,
                o.gpus if o.feasible else None,
                o.usd_per_million_tokens if o.feasible else None,
                (0.0 if 0.0 <= r.gap <= GAP_SHOWN else r.gap) if o.feasible else None,  # nan: unknown
                round(1e3 * (r.build_s + r.solve_s), 1),
                o.candidates,
                checked,
            ]
        )
    return format_table(
        ["topology", "status", "$/hour", "GPUs", "$/M tokens", "gap", "ms", "units", "checker"], rows
    )


PACED = (Role.MIXED, Role.ATTENTION, Role.FFN)  # units dse place also sizes for tighter paces


def _pools_table(best: TopologyOutcome, slo: Slo) -> str:
    """One row per pool of the best topology; its TTFT is the one the unit holds at the target's
    percentile (a prefill unit's is the target it is sized for). An aggregated, attention or FFN
    unit sized for a pace tighter than the TPOT target says it after its shape (``@126.5ms``; a
    decode unit's TPOT is its batch's own step, not a pace it was sized for)."""

    def pace(u: UnitInfo) -> str:
        paced = u.role in PACED and u.tpot_s == u.tpot_s and u.tpot_s < slo.tpot_s * (1.0 - 1e-9)
        return f" @{u.tpot_s * 1e3:g}ms" if paced else ""

    def label(u: UnitInfo, told_apart: bool) -> str:
        """The shape, what tells the unit apart where another of its role, hardware and shape is
        shown (its pace's own part left to the pace after it: ``4gpu-dpa-ep2
        @167.1ms/b1024/tpot167.1ms`` had said it twice), then its pace."""
        rest = "/".join(part for part in _variant(u).split("/") if part and not part.startswith("tpot"))
        return u.parallel.label() + (f"/{rest}" if told_apart and rest else "") + pace(u)

    shown = [(p.unit.role, p.unit.hardware, label(p.unit, False)) for p in best.pools]
    rows = [
        [
            p.unit.role.name.lower(),
            p.unit.hardware,
            label(p.unit, shown.count((p.unit.role, p.unit.hardware, plain)) > 1),
            p.instances,
            p.gpus,
            p.unit.decode_batch or None,
            p.unit.prefill_share or None,
            p.requests_per_s or None,
            p.output_tokens_per_s or None,
            p.hbm_gb_per_gpu,
            p.unit.ttft_s if p.unit.ttft_s == p.unit.ttft_s else None,
            p.usd_per_hour,
        ]
        for p, (_, _, plain) in zip(best.pools, shown, strict=True)
    ]
    # the GPUs of whole nodes or racks bought that no pool runs on: in the design's $/hour too
    rows += [["idle", i.hardware, None, None, i.gpus, *[None] * 6, i.usd_per_hour] for i in best.idle]
    return format_table(
        [
            "role",
            "hardware",
            "shape",
            "inst",
            "GPUs",
            "batch cap",
            "pf share",
            "req/s",
            "out tok/s cap",
            "HBM GB/GPU",
            f"MILP TTFT p{slo.percentile:g} s",
            "$/hour",
        ],
        rows,
    )


def _variant(u: UnitInfo) -> str:
    """What tells apart units of one role, hardware and shape that the other columns may not: the
    rest of the unit's name (``--json``'s ``unit.name``) after its shape, a prefill unit's
    ``/to-dram`` (its load held low enough that a returning turn's KV back from DRAM, or slower
    tiers up to it, meets TTFT) or ``/fresh`` (fresh prompts only); empty for the plain one."""
    head = f"{u.hardware}/{u.role.name.lower()}/{u.parallel.label()}"
    return u.name.removeprefix(head) if u.name.startswith(head) else ""


def _tiers_table(best: TopologyOutcome) -> str:
    """One row per KV class: where its resting KV waits, how much, and the reload bandwidth."""
    rows = [
        [t.kv_class, t.returning_per_s, t.gb_per_session]
        + [round(t.share[k], 3) for k in TIERS]
        + [sum(t.stored_gb.values()) / 1e3, sum(t.reload_gb_s.values())]
        for t in best.tiers
    ]
    return format_table(["KV class", "returns/s", "GB/session", *TIERS, "resting TB", "reload GB/s"], rows)


def _shadow_prices_table(report: PlacementReport) -> str:
    rows = [
        [s.hardware, s.resource, f"+1 {s.unit}/GPU", s.usd_per_hour, s.usd_per_gpu_hour]
        for s in report.shadow_prices
    ]
    return format_table(["hardware", "resource", "change", "fleet $/h", "$/GPU-h"], rows)
