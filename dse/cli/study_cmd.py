"""`dse study list|show|run`, `dse worker`, `dse export`, `dse report`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dse.catalog import Catalog
from dse.cli.table import format_table
from dse.errors import InputError
from dse.placement.serialize import plain
from dse.study import Study, StudyResults
from dse.study.faults import StudyInterrupted
from dse.study.results import distinct_designs, ranked
from dse.study.spec import StudySpec, load_study, study_files, study_path
from dse.study.storage import STALE_AFTER_S, redact
from dse.study.variants import study_catalog


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    study = sub.add_parser("study", help="named studies: list, show, run")
    ssub = study.add_subparsers(dest="study_command", required=True)
    ssub.add_parser("list", help="the studies in studies/")
    show = ssub.add_parser("show", help="a study's resolved spec")
    show.add_argument("name", help="study name or path to a .toml file")
    runp = ssub.add_parser("run", help="run or resume a study, then export its tables and report")
    _common(runp)
    runp.add_argument("--trials", type=int, help="total trials to reach (default: the study's budget)")
    runp.add_argument("--seed", type=int, help="sampler seed (default: the study's)")
    runp.add_argument("--no-progress", action="store_true")
    runp.add_argument("--no-export", action="store_true", help="skip the Parquet tables and the report")
    worker = sub.add_parser(
        "worker", help="run trials of a study on a shared storage until its budget is reached"
    )
    _common(worker)
    worker.add_argument("--trials", type=int, help="the study's total budget (default: the spec's)")
    worker.add_argument(
        "--stale-after",
        type=float,
        default=STALE_AFTER_S,
        metavar="S",
        help="a trial whose worker sent no heartbeat for S seconds is marked failed and run again "
        f"(default {STALE_AFTER_S:g})",
    )
    export = sub.add_parser("export", help="write a study's Parquet tables")
    _common(export)
    report = sub.add_parser("report", help="write a study's Markdown report and plots")
    _common(report)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="study name or path to a .toml file")
    p.add_argument("--out", type=Path, default=Path("runs"), help="run folder (default: runs/)")
    p.add_argument("--storage", help="Optuna storage URL (default: sqlite in the run folder)")


def run(args: argparse.Namespace, catalog: Catalog) -> int:
    if args.command == "study":
        return {"list": _list, "show": _show, "run": _run}[args.study_command](args, catalog)
    return {"worker": _worker, "export": _export, "report": _report}[args.command](args, catalog)


def _list(args: argparse.Namespace, catalog: Catalog) -> int:
    rows = []
    for name, path in study_files().items():
        spec = load_study(path)
        rows.append(
            [
                name,
                spec.model,
                ", ".join(spec.hardware),
                spec.trials,
                ", ".join(spec.objectives.names),
                spec.description[:60],
            ]
        )
    print(format_table(["study", "model", "hardware", "trials", "objectives", "description"], rows))
    return 0


def _show(args: argparse.Namespace, catalog: Catalog) -> int:
    spec = load_study(args.name)
    _check_ids(spec, catalog, args.name)
    json.dump(plain(spec), sys.stdout, indent=2)
    print()
    return 0


def _check_ids(spec: StudySpec, catalog: Catalog, name: str) -> None:
    """Unknown model, hardware or variant-base ids fail here, naming the study file, before any
    trial runs."""
    study_catalog(spec, catalog, source=str(study_path(name)))


def _run(args: argparse.Namespace, catalog: Catalog) -> int:
    study = Study.load(args.name)
    _check_ids(study.spec, catalog, args.name)
    res = study.run(
        trials=args.trials,
        out=args.out,
        storage=args.storage,
        seed=args.seed,
        progress=not args.no_progress and sys.stderr.isatty(),
        catalog=catalog,
    )
    assert res.stats is not None
    s = res.stats
    print(
        f"{study.spec.name}: {s.ran} trials run in {s.seconds:.1f} s ({s.completed_before} before"
        + (f", {s.stale_failed} left running by an interrupted run marked failed" if s.stale_failed else "")
        + f"); {res.trials.height} complete, {int(res.trials['feasible'].sum()) if res.trials.height else 0} "
        "feasible"
    )
    print(summary(res))
    if not args.no_export:
        try:
            _write_all(res, args.out)
        except KeyboardInterrupt:
            where = redact(args.storage) if args.storage else str(args.out / res.spec.name / "study.db")
            n = res.trials.height
            raise StudyInterrupted(n, n, where, "exports and report") from None
    return 0


def summary(res: StudyResults, top: int = 5) -> str:
    """The best ``top`` designs on the first objective, each once (its best trial)."""
    t = res.trials
    if t.is_empty() or not t["feasible"].any():
        return "no feasible design: " + (t["binding"].mode()[0] if not t.is_empty() else "no trials")
    o = res.objectives[0]
    best = ranked(t.filter(t["feasible"]), (o.name, o.direction))
    axes = list(res.spec.sweep.axes())  # a grid study shows each row's point
    rows: list[list[object]] = [
        [
            r["trial"],
            r["design_trials"],
            *(r[f"x_{a}"] for a in axes),
            r["p_topology"],
            f"{r['p_prefill_hardware']}/{r['p_prefill_shape']}",
            f"{r['p_decode_hardware']}/{r['p_decode_shape']}",
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
            "prefill",
            "decode",
            "GPUs",
            "$/M tok",
            "tok/s/GPU",
            "tok/s/user",
            "TTFT pct s",
            "TPOT ms",
            "HBM GB/GPU",
        ],
        rows,
    )


def _write_all(res: StudyResults, out: Path) -> None:
    folder = out / res.spec.name
    paths = res.export(folder / "exports")
    print(f"wrote {len(paths)} Parquet tables under {folder / 'exports'}")
    path = _write_report(res, folder)
    print(f"wrote {path}")


def _write_report(res: StudyResults, folder: Path) -> Path:
    from dse.study.best import best_design
    from dse.study.report import write_report

    best = best_design(res)
    return write_report(
        folder / "report",
        spec=res.spec,
        objectives=[(o.name, o.direction) for o in res.objectives],
        tables=res.tables(),
        best=best,
    )


def _worker(args: argparse.Namespace, catalog: Catalog) -> int:
    if not args.storage:
        raise InputError(
            "dse worker", "--storage", "is required: workers share a database (postgresql://...)"
        )
    from dse.study.runner import run as run_trials

    study = Study.load(args.name)
    _check_ids(study.spec, catalog, args.name)
    if not args.stale_after > 0:
        raise InputError("dse worker", "--stale-after", "must be > 0", args.stale_after)
    _, stats = run_trials(
        study.spec,
        out=args.out,
        storage=args.storage,
        trials=args.trials,
        shared=True,
        objectives=list(study.objectives),
        catalog=catalog,
        stale_after_s=args.stale_after,
    )
    print(
        f"worker: {stats.ran} trials in {stats.seconds:.1f} s"
        + (f"; {stats.stale_failed} stale trials of dead workers marked failed" if stats.stale_failed else "")
    )
    return 0


def _export(args: argparse.Namespace, catalog: Catalog) -> int:
    res = Study.load(args.name).results(out=args.out, storage=args.storage)
    paths = res.export(args.out / res.spec.name / "exports")
    for p in paths:
        print(p)
    return 0


def _report(args: argparse.Namespace, catalog: Catalog) -> int:
    res = Study.load(args.name).results(out=args.out, storage=args.storage)
    print(_write_report(res, args.out / res.spec.name))
    return 0
