"""`dse study list|show|run|export|report|worker|deploy` (``dse export``, ``dse report``,
``dse worker`` and ``dse deploy`` are aliases of the last four).

Optuna, polars and the engine are imported inside the commands: building the parser must stay cheap.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.catalog import Catalog
from dse.cli.flags import number, path_arg
from dse.cli.table import format_table
from dse.errors import DseError, InputError, NoFeasibleDesign, UnknownIdError
from dse.study.timeouts import STALE_AFTER_S

if TYPE_CHECKING:
    import polars as pl

    from dse.study.api import StudyResults
    from dse.study.report_figures import Drawer
    from dse.study.spec import StudySpec

ALIASES = ("export", "report", "worker", "deploy")
"""Commands of `dse study` that also stand at the top level (`dse export` is `dse study export`)."""


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    study = sub.add_parser("study", help="named studies: list, show, run, export, report, worker, deploy")
    ssub = study.add_subparsers(dest="study_command", required=True, metavar="COMMAND")
    lp = ssub.add_parser("list", help="the studies in studies/")
    lp.add_argument("--json", action="store_true", help="machine-readable output")
    show = ssub.add_parser("show", help="a study's resolved spec (JSON)")
    show.add_argument("name", help="study name or path to a .toml file")
    # every listing command takes --json (README); this one's output is JSON already
    show.add_argument("--json", action="store_true", help="machine-readable output (its output is JSON)")
    runp = ssub.add_parser("run", help="run or resume a study, then export its tables and report")
    _common(runp)
    runp.add_argument("--trials", type=int, help="total trials to reach (default: the study's budget)")
    runp.add_argument("--seed", type=int, help="sampler seed (default: the study's)")
    runp.add_argument("--no-progress", action="store_true", help="no progress bar on a terminal")
    runp.add_argument("--no-export", action="store_true", help="skip the Parquet tables and the report")
    for name in ALIASES:
        _ALIAS_BUILDERS[name](ssub, name)
        _ALIAS_BUILDERS[name](sub, name, alias=True)


def _add_worker(sub: argparse._SubParsersAction, name: str, alias: bool = False) -> None:  # type: ignore[type-arg]
    worker = sub.add_parser(
        name, help=_help("run trials of a study on a shared storage until its budget is reached", alias, name)
    )
    _common(worker, storage_help=WORKER_STORAGE)
    worker.add_argument("--trials", type=int, help="the study's total budget (default: the spec's)")
    worker.add_argument(
        "--stale-after",
        type=number,
        default=STALE_AFTER_S,
        metavar="S",
        help="a trial whose worker sent no heartbeat for S seconds is marked failed and run again",
    )


def _add_export(sub: argparse._SubParsersAction, name: str, alias: bool = False) -> None:  # type: ignore[type-arg]
    _common(sub.add_parser(name, help=_help("write a study's Parquet tables", alias, name)))


def _add_report(sub: argparse._SubParsersAction, name: str, alias: bool = False) -> None:  # type: ignore[type-arg]
    _common(sub.add_parser(name, help=_help("write a study's Markdown report and plots", alias, name)))


def _add_deploy(sub: argparse._SubParsersAction, name: str, alias: bool = False) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        name, help=_help("write launch files for a study's best design (or a trial's)", alias, name)
    )
    _common(p)
    p.add_argument(
        "--engine",
        required=True,
        choices=("sglang", "trtllm", "vllm", "dynamo"),
        help="the serving engine to launch; dynamo runs workers of the study's engine profile",
    )
    p.add_argument("--trial", type=int, help="this trial's design instead of the best one")
    p.add_argument(
        "--image",
        help="the container image of every service of Dynamo's graph.yaml (--engine dynamo; default: "
        "NVIDIA's Dynamo runtime image of the workers' engine, as dse/deploy/engine_flags.toml names it)",
    )


_ALIAS_BUILDERS = {"export": _add_export, "report": _add_report, "worker": _add_worker, "deploy": _add_deploy}


def _help(text: str, alias: bool, name: str) -> str:
    return f"same as `dse study {name}`" if alias else text


WORKER_STORAGE = (
    "Optuna storage URL the workers share, required: sqlite:///PATH (workers on one machine, e.g. "
    "a run's study.db) or postgresql://user@host/db"
)


def _common(p: argparse.ArgumentParser, storage_help: str = "") -> None:
    p.add_argument("name", help="study name or path to a .toml file")
    p.add_argument("--out", type=path_arg, default=Path("runs"), help="run folder")
    p.add_argument("--storage", help=storage_help or "Optuna storage URL (default: sqlite in the run folder)")


def _said(args: argparse.Namespace) -> str:
    """The command as typed: ``study export``, or its top-level alias ``export``."""
    return f"study {args.study_command}" if args.command == "study" else str(args.command)


def run(args: argparse.Namespace, catalog: Catalog) -> int:
    command = args.study_command if args.command == "study" else args.command
    commands = {
        "list": _list,
        "show": _show,
        "run": _run,
        "worker": _worker,
        "export": _export,
        "report": _report,
        "deploy": _deploy,
    }
    try:
        return commands[command](args, catalog)
    except InputError as exc:  # the engine names the arguments of its Python API; here they are flags
        source, rule = _flags(exc.source, whole=True), _flags(exc.rule)
        if (source, rule) == (exc.source, exc.rule):
            raise
        raise InputError(source, exc.field, rule, exc.value) from None
    except _storage_errors() as exc:  # a damaged or locked database met outside a run's own guard
        from dse.study.faults import storage_fault

        fault = storage_fault(exc, _storage_of(args))
        if fault is None:
            raise
        raise fault from None


def _storage_of(args: argparse.Namespace) -> str:
    """The storage a study command used, as its errors name it (a password left out)."""
    from dse.study.api import Study
    from dse.study.storage import default_storage, redact

    if getattr(args, "storage", None):
        return redact(args.storage)
    try:
        return redact(default_storage(args.out, Study.load(args.name).spec))  # as a run names it
    except (DseError, AttributeError):  # (no study named: a command without one)
        return "the study's storage"


def _storage_errors() -> tuple[type[BaseException], ...]:
    """What a database refusal raises (imported only when an error propagates)."""
    from dse.study.faults import STORAGE_ERRORS

    return STORAGE_ERRORS


FLAG_OF = {"trials": "--trials", "out": "--out", "storage": "--storage", "seed": "--seed"}
"""The study runner's arguments (what its errors name) and the flags that set them."""
_ARGUMENT = re.compile(r"(?<![\w./-])(" + "|".join(FLAG_OF) + r")=(?!\w)")  # `out=` in a sentence


def _flags(text: str, whole: bool = False) -> str:
    """``text`` with the runner's argument names as flags: a whole source (``out``; a study file's
    own keys, such as its ``trials``, are fields and stay), or ``out=`` inside a sentence."""
    if whole:
        return FLAG_OF.get(text, text)
    return _ARGUMENT.sub(lambda m: FLAG_OF[m.group(1)], text)


def _list(args: argparse.Namespace, catalog: Catalog) -> int:
    from dse.study.spec import load_study, study_files

    specs = {name: load_study(path) for name, path in study_files().items()}
    if args.json:
        out = [
            {
                "study": name,
                "model": spec.model,
                "hardware": list(spec.hardware),
                "trials": spec.budget(),  # a grid study runs every point, whatever its `trials`
                "objectives": list(spec.objectives.names),
                "description": spec.description,
            }
            for name, spec in specs.items()
        ]
        print(json.dumps(out, indent=2))
        return 0
    rows = [
        [
            name,
            spec.model,
            ", ".join(spec.hardware),
            spec.budget(),
            ", ".join(spec.objectives.names),
            spec.description[:60],
        ]
        for name, spec in specs.items()
    ]
    print(format_table(["study", "model", "hardware", "trials", "objectives", "description"], rows))
    return 0


def _show(args: argparse.Namespace, catalog: Catalog) -> int:
    """The spec as a run resolves and checks it, but for the settings a run refuses as having no
    effect (:attr:`Study.idle`, a variant no trial runs on): shown, each named in a warning, as
    reading a stored run names them; `show` is how one inspects the file a run refuses."""
    from dse.study.api import Study
    from dse.study.spec import spec_record
    from dse.study.variants import with_catalog_ids

    study = Study.load(args.name)
    idle = list(study.idle)
    ours = _check_ids(study.spec, catalog, args.name, unused=idle)
    for setting in idle:
        print(f"dse: warning: {setting}; shown as written (a run refuses it)", file=sys.stderr)
    spec = with_catalog_ids(study.spec, ours)  # the hardware as a run stores it
    json.dump(spec_record(spec), sys.stdout, indent=2)
    print()
    return 0


def _check_ids(
    spec: StudySpec, catalog: Catalog, name: str, *, unused: list[InputError] | None = None
) -> Catalog:
    """Unknown model, hardware or variant-base ids fail here, naming the study file, before any
    trial runs; and a search shape no hardware of the study can run, or a topology its model
    cannot. A what-if variant no trial runs on is refused; given ``unused``, a list, it is added
    to it instead (``dse study show``). The study's catalog (with its variants)."""
    from dse.study.spec import study_path
    from dse.study.variants import runnable_shapes, runnable_topologies, study_catalog, unused_variant

    source = str(study_path(name))
    ours = study_catalog(spec, catalog, source=source)
    if (variant := unused_variant(spec, ours, source)) is not None:
        if unused is None:
            raise variant
        unused.append(variant)
    runnable_shapes(spec, ours, source)
    runnable_topologies(spec, ours, source)
    return ours


def _run(args: argparse.Namespace, catalog: Catalog) -> int:
    from dse.study.figure_workers import WORKERS, FigureWorkers

    # first, while this process has one thread: they ready matplotlib as the engine loads
    with FigureWorkers(0 if args.no_export else WORKERS) as drawer:
        return _run_drawing(args, catalog, drawer)


def _run_drawing(args: argparse.Namespace, catalog: Catalog, drawer: Drawer) -> int:
    from dse.cli.place_cmd import say_calibration
    from dse.perf.params import load_params
    from dse.study.api import Study
    from dse.study.faults import StudyInterrupted
    from dse.study.storage import default_storage, redact

    study = Study.load(args.name)
    study.refuse_idle()  # (as study.run would, but before the ids)
    _check_ids(study.spec, catalog, args.name)
    say_calibration(load_params())
    wrote: list[str] = []

    def exports(res: StudyResults) -> None:
        """Before anything is printed (a reader that stops early, `| head`, loses none), and while
        the run holds the study (another run's trials would otherwise miss this run's report)."""
        try:
            wrote.extend(_write_all(res, args.out, drawer))
        except KeyboardInterrupt:
            where = redact(args.storage or default_storage(args.out, res.spec))  # as the trials' line says
            n = res.trials.height
            raise StudyInterrupted(n, n, where, "exports and report") from None

    res = study.run(
        trials=args.trials,
        out=args.out,
        storage=args.storage,
        seed=args.seed,
        progress=not args.no_progress and sys.stderr.isatty(),
        catalog=catalog,
        then=None if args.no_export else exports,
    )
    assert res.stats is not None
    s = res.stats
    print(
        f"{study.spec.name}: {s.ran} trials run in {s.seconds:.1f} s ({s.completed_before} before"
        + (
            f", {s.stale_failed} left running or waiting by an interrupted run or workers marked failed"
            if s.stale_failed
            else ""
        )
        + f"); {res.trials.height} complete, {int(res.trials['feasible'].sum()) if res.trials.height else 0} "
        "feasible"
    )
    print(summary(res))
    if (best := best_block(res)) is not None:
        print()
        print(best)
    for line in wrote:
        print(line)
    if res.trials.is_empty() or not res.trials["feasible"].any():
        raise _no_feasible(res)
    return 0


def _no_feasible(res: StudyResults) -> NoFeasibleDesign:
    """The most frequent reason the trials failed, as the commonest reason of it one trial gave
    whole, each with its count: that count had been the family's (every "no decode unit"), beside
    one trial's figures that fewer trials gave."""
    t = res.trials
    if t.is_empty():
        # (named "budget" until 2026-12-07, which is the $/hour cap's reason: a study of none read
        # as over its budget)
        return NoFeasibleDesign("trials", "no trial completed")
    said = t["binding"].drop_nulls()  # (null: a trial that recorded no reason)
    said = said.filter(said != "")
    if said.is_empty():
        return NoFeasibleDesign("unknown", f"no trial recorded why ({t.height} of {t.height} trials)")
    family = said.str.split(": ").list.first()
    common = family.mode().sort()[0]
    of_it = said.filter(family == common).to_list()
    detail, times = Counter(of_it).most_common(1)[0]  # (the first among equals)
    share = f"{times} of {t.height} trials"
    if len(of_it) > times:
        share += f"; {len(of_it)} of {t.height} gave {common}"
    return NoFeasibleDesign(common, f"{detail.partition(': ')[2] or detail} ({share})")


def summary(res: StudyResults, top: int = 5) -> str:
    """The best ``top`` designs on the first objective, each once (its best trial)."""
    from dse.study.results import batch_cap, distinct_designs, ranked

    t = res.trials
    if t.is_empty() or not t["feasible"].any():
        return str(_no_feasible(res))  # what the error line says too
    best = ranked(t.filter(t["feasible"]), *res.ranking)
    axes = list(res.spec.sweep.axes())  # a grid study shows each row's point
    rows: list[list[object]] = [
        [
            r["trial"],
            r["design_trials"],
            *(r[f"x_{a}"] for a in axes),
            r["p_topology"],
            r["p_kv_policy"],  # two designs alike but for where KV rests differ here
            f"{r['p_prefill_hardware']}/{r['p_prefill_shape']}",
            f"{r['p_decode_hardware']}/{r['p_decode_shape']}",
            _whole(r["p_chunk_tokens"]),
            _whole(batch_cap(r["decode_batch_sequences"])),
            r["gpus"],
            r["usd_per_million_tokens"],
            r["tokens_per_s_per_gpu"],
            r["tokens_per_s_per_user"],
            r["ttft_pct_s"],
            1e3 * r["tpot_mean_s"],
            r["hbm_peak_gb_per_gpu"],
        ]
        for r in distinct_designs(best).head(top).iter_rows(named=True)
    ]
    return format_table(
        [
            "trial",
            "trials",
            *axes,
            "topology",
            "KV",
            "prefill",
            "decode",
            "chunk",
            "batch cap",
            "GPUs",
            "$/M tok",
            "tok/s/GPU",
            "tok/s/user",
            f"TTFT p{res.spec.slo.percentile:g} s",
            "TPOT mean ms",
            "HBM GB/GPU",
        ],
        rows,
    )


def _whole(n: int | None) -> float | None:
    """A count as the table writes it with thousands separators (1,581): format_table writes
    floats so and ints bare, as trial numbers are."""
    return None if n is None else float(n)


def _price(r: dict[str, Any], tier: str, storage: float = 0.0) -> str:
    """What the design costs, or that the catalog has no price for its hardware at ``tier``; where
    the study prices energy, its $/hour beside the hardware's (the $ per million tokens holds both);
    where it prices the resting KV's storage (``storage``, $/hour), that part of the cost said."""
    if r["usd_per_hour"] is None or r["usd_per_million_tokens"] is None:
        return f"no {tier} price in the catalog"
    energy = r.get("energy_usd_per_hour") or 0.0
    # the cost had read as the GPUs' alone beside pools that sum to less (24 B200 at $46.80 and
    # $48.45/hour: $1.65 of NVMe for the resting KV)
    held = f"; ${storage:,.2f} of it the resting KV's storage" if storage > 0.005 else ""
    per_hour = f"${r['usd_per_hour']:,.2f}/hour ({tier}{held})"
    if energy > 0:
        per_hour += f" + ${energy:,.2f}/hour of energy"
    return f"{per_hour}, ${r['usd_per_million_tokens']:.4f} per million tokens"


DECODE_SIDES = (("decode", "mixed", "attention"), ("ffn",))
"""Roles whose pools run the decoding sequences between them: the pools that hold them, and the
expert pools of an attention-FFN design, every sequence's tokens passing through one of each."""


def running_per_instance(pools: list[dict[str, Any]], in_flight: float) -> list[float | None]:
    """Sequences one instance of each pool runs when ``in_flight`` decode at once (None: a pool
    that decodes none). Each side (:data:`DECODE_SIDES`) carries them all, split among its pools by
    the output each serves: an aggregated (mixed) pool decodes the requests the placement sends it
    (its requests/s), pools that decode what others prefilled share it by their output tokens/s
    at the TPOT target (as the simulators split it); then per instance."""
    out: list[float | None] = [None] * len(pools)
    for roles in DECODE_SIDES:
        side = [i for i, p in enumerate(pools) if p["role"] in roles and p["output_tokens_per_s"]]
        served = [float(pools[i]["requests_per_s"] or 0.0) for i in side]
        if not all(pools[i]["role"] == "mixed" for i in side) or sum(served) <= 0:
            served = [float(pools[i]["output_tokens_per_s"]) for i in side]
        total = sum(served)
        for i, x in zip(side, served, strict=True):
            out[i] = in_flight * x / total / pools[i]["instances"]
    return out


def point_spec(res: StudyResults, row: dict[str, Any]) -> StudySpec:
    """The study as the trial ``row`` saw it: a grid study's at the trial's point (its traffic and
    targets where the grid sweeps them), any other study's own."""
    from dse.study.grid import spec_at

    axes = res.spec.sweep.axes()
    point = {a: row[f"x_{a}"] for a in axes if row.get(f"x_{a}") is not None}
    return spec_at(res.spec, point) if point else res.spec


def best_block(res: StudyResults) -> str | None:
    """The best design read out: its pools (for decode, the batch one instance may run within the
    TPOT target and the output tokens/s that gives, against the batch it runs in the simulation,
    by Little's law), the requests each is given, HBM and cost; where its KV rests between turns;
    and what the simulator saw of it under the study's traffic. None without a feasible design."""
    import polars as pl

    from formulations.placement_data import TIERS

    number = res.best_trial()
    if number is None:
        return None
    r = res.trials.filter(pl.col("trial") == number).row(0, named=True)
    at = point_spec(res, r)  # a grid point's own traffic and targets where the grid sweeps them
    w, slo, sim = at.workload, at.slo, at.simulate
    in_flight = w.requests_per_s * w.output_tokens * r["tpot_mean_s"]  # decoding at once (Little's law)

    def pool_row(p: dict[str, Any], running: float | None) -> list[object]:
        return [p["role"], p["hardware"], p["shape"], p["instances"], p["gpus"], p["requests_per_s"] or None,
                p["decode_batch_sequences"] or None, running, p["output_tokens_per_s"] or None,
                p["hbm_gb_per_gpu"], p["usd_per_hour"]]  # fmt: skip

    def of_best(table: pl.DataFrame) -> pl.DataFrame:  # a study with no such rows has no columns either
        return table.filter(pl.col("trial") == number) if "trial" in table.columns else table

    placed = list(of_best(res.placements).iter_rows(named=True))
    running = running_per_instance(placed, in_flight)
    pools = [pool_row(p, n) for p, n in zip(placed, running, strict=True)]
    head = ["pool", "hardware", "shape", "inst", "GPUs", "req/s", "batch cap", "batch run", "out tok/s cap"]
    name, direction = res.ranking[0]
    # the pools run in fewer GPUs than the nodes or racks bought hold (64 of a 72-GPU rack): said,
    # where the pools' GPUs and $/hour had been left to add up short of the headline's in silence
    idle = int(r["gpus"]) - sum(int(p["gpus"]) for p in placed)
    spare = f" ({idle} of them idle in the nodes or racks bought)" if idle > 0 else ""
    lines = [
        f"best design by {name} ({direction}), trial {number}: {r['p_topology']}, {int(r['gpus'])} GPUs"
        f"{spare}, " + _price(r, res.spec.price_tier, r.get("storage_usd_per_hour") or 0.0),
        format_table([*head, "HBM GB/GPU", "$/hour"], pools),
    ]
    tiers = of_best(res.kv_tiers)
    if not tiers.is_empty():
        rows = []
        for (kv_class,), g in tiers.group_by("kv_class", maintain_order=True):
            share = dict(zip(g["tier"], g["share"], strict=True))
            first = g.row(0, named=True)
            shares = [round(share.get(k, 0.0), 3) for k in TIERS]
            rows.append([kv_class, first["returning_per_s"], first["gb_per_session"], *shares,
                         float(g["stored_gb"].sum()) / 1e3])  # fmt: skip
        lines += [
            "",
            format_table(["KV between turns", "returns/s", "GB/session", *TIERS, "resting TB"], rows),
        ]
    stable = "stable" if r["c_stability"] <= 0 else "NOT stable"
    p99 = max(r["ttft_p99_s"], r.get("engine_ttft_p99_s") or 0.0)  # the fluid's or the engine-level's
    lines += [
        "",
        f"simulated {sim.horizon_s:g} s of the traffic: {stable}; TTFT p{slo.percentile:g} "
        f"{r['ttft_pct_s']:.3g} s{'' if slo.percentile == 99 else f' (p99 {p99:.3g} s)'} against "
        f"{slo.ttft_s:g} s; TPOT mean "
        f"{1e3 * r['tpot_mean_s']:.3g} ms against {1e3 * slo.tpot_s:g} ms; prefill queue at most "
        f"{r['queue_peak_prefill_requests']:.3g} requests",
    ]
    return "\n".join(lines)


def _write_all(res: StudyResults, out: Path, drawer: Drawer | None = None) -> list[str]:
    """The Parquet tables and the report; what was written, as lines to print."""
    folder = out / res.spec.name
    paths = res.export(folder / "exports")
    path = _write_report(res, folder, drawer)
    return [f"wrote {len(paths)} Parquet tables under {folder / 'exports'}", f"wrote {path}"]


def _write_report(res: StudyResults, folder: Path, drawer: Drawer | None = None) -> Path:
    from dse.study.best import best_design
    from dse.study.report import write_report
    from dse.study.report_figures import HERE

    best = best_design(res)
    note = res.read.note()
    if note is not None:  # workers still at it: which trials the report holds
        print(f"dse: note: {res.spec.name}: the report was {note}", file=sys.stderr)
    return write_report(
        folder / "report",
        spec=res.spec,
        objectives=[(o.name, o.direction) for o in res.objectives],
        tables=res.tables(),
        best=best,
        drawer=drawer or HERE,
        unfinished=note,
    )


MIN_STALE_AFTER_S = 4.0
"""The shortest ``--stale-after``: four heartbeats (one a second) a trial may miss before it is
taken for a dead worker's."""


def _worker(args: argparse.Namespace, catalog: Catalog) -> int:
    if not args.storage:
        raise InputError(
            "dse worker",
            "--storage",
            "is required: workers share a database (sqlite:///PATH on one machine, "
            "postgresql://user@host/db across machines)",
        )
    from dse.study.api import Study, StudyResults, priced, storage_arg
    from dse.study.runner import run as run_trials
    from dse.study.storage import redact
    from dse.study.variants import with_catalog_ids

    storage_arg(args.storage)  # a path, not a URL: said as a run says it
    study = Study.load(args.name)
    study.refuse_idle()
    ours = _check_ids(study.spec, catalog, args.name)
    if not (math.isfinite(args.stale_after) and args.stale_after > 0):  # inf had been a traceback
        rule = "must be a finite number of seconds > 0"
        raise InputError("dse worker", "--stale-after", rule, args.stale_after)
    if args.stale_after < MIN_STALE_AFTER_S:  # 1 s had failed live workers' trials as dead ones'
        rule = (
            f"must be at least {MIN_STALE_AFTER_S:g} seconds: a running trial's heartbeats come every "
            "second (every quarter of it above that), and a shorter wait takes a live worker's trial "
            "for a dead one's"
        )
        raise InputError("dse worker", "--stale-after", rule, args.stale_after)
    stored, stats = run_trials(
        study.spec,
        out=args.out,
        storage=args.storage,
        trials=args.trials,
        shared=True,
        objectives=list(study.objectives),
        catalog=catalog,
        stale_after_s=args.stale_after,
    )
    # the study holds its budget: the best trial's shadow prices, as a lone run stores them (the
    # report had none after workers); each worker that ends tries, the first one stores them
    # (with the spec as the run stored it: ids for aliases, its engine and precision filled in)
    spec = with_catalog_ids(study.spec, ours)
    priced(StudyResults(spec, study.objectives, stored, stats, catalog), where=redact(args.storage))
    print(
        f"worker: {stats.ran} trials in {stats.seconds:.1f} s"
        + (f"; {stats.stale_failed} stale trials of dead workers marked failed" if stats.stale_failed else "")
    )
    return 0


def _stored_results(args: argparse.Namespace, catalog: Catalog) -> StudyResults:
    """The results a run stored, read with the objectives the study stored (a study run from
    Python with an objective function has its own: :meth:`Study.with_stored_objectives`), and a
    warning when this catalog's numbers are not theirs, and one per setting of the study file no
    trial used (a run made before the rule that refuses it: :attr:`StudyResults.idle`)."""
    from dse.study.api import Study

    try:
        loaded = Study.load(args.name)
    except UnknownIdError as exc:  # a run of the user's own study file, named as the folder is
        stored = Path(args.out) / str(args.name) / "spec.json"
        if not stored.is_file():
            raise
        rule = (
            f"is not a shipped study; {stored} is a run of a study file: name the file, as the run "
            f"did (dse {_said(args)} path/to/{args.name}.toml --out {args.out})"
        )
        raise InputError("study", "", rule, args.name) from exc
    study = loaded.with_stored_objectives(out=args.out, storage=args.storage)
    res = study.results(out=args.out, storage=args.storage, catalog=catalog)
    if res.catalog_note:
        print(f"dse: warning: {res.spec.name}: {res.catalog_note}", file=sys.stderr)
    if res.calibration_note:
        print(f"dse: note: {res.spec.name}: {res.calibration_note}", file=sys.stderr)
    for idle in res.idle:  # a run made before the rule: read as it is stored
        print(f"dse: warning: {idle}; read as stored (a run refuses it)", file=sys.stderr)
    return res


def _export(args: argparse.Namespace, catalog: Catalog) -> int:

    res = _stored_results(args, catalog)
    paths = res.export(args.out / res.spec.name / "exports")
    note = res.read.note("them")
    if note is not None:  # workers still at it: which trials the tables hold
        print(f"dse: note: {res.spec.name}: the tables were {note}", file=sys.stderr)
    for p in paths:
        print(p)
    _say_if_none_feasible(res)
    return 0


def _say_if_none_feasible(res: StudyResults) -> None:
    """A note on stderr where no stored trial is feasible, naming what bound them as the run's error
    line does: `export` and `report` still write their tables and report (exit 0), and had said
    nothing of it, the tables' and the report's emptiness left to be found."""
    t = res.trials
    if t.is_empty() or not t["feasible"].any():
        print(f"dse: note: {res.spec.name}: {_no_feasible(res)}", file=sys.stderr)


def _deploy(args: argparse.Namespace, catalog: Catalog) -> int:
    from dse.deploy.design import design_of_run
    from dse.deploy.files import deploy_command, launch_files, write_deploy
    from dse.deploy.readme import cap_warnings
    from dse.study.faults import writing

    res = _stored_results(args, catalog)
    design = design_of_run(res, args.trial, res.params)
    folder = args.out / res.spec.name / "deploy"
    command = deploy_command(
        args.name, args.engine, out=args.out, trial=args.trial, storage=args.storage, image=args.image
    )
    files = launch_files(design, args.engine, command=command, image=args.image)
    for said in cap_warnings(design, args.engine):
        print(f"dse: warning: {said}", file=sys.stderr)
    with writing(folder):  # a folder no file can be written in is one line, as for export and report
        written = write_deploy(files, folder)
    for path in written:
        print(path)
    return 0


def _report(args: argparse.Namespace, catalog: Catalog) -> int:
    from dse.study.figure_workers import FigureWorkers

    with FigureWorkers() as drawer:  # (first: see _run)
        res = _stored_results(args, catalog)
        print(_write_report(res, args.out / res.spec.name, drawer))
    _say_if_none_feasible(res)
    return 0
