"""`dse calibrate`: refit the performance model to the measured runs and write the result."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from dse.atomic import probe_writable, write_text
from dse.catalog import Catalog
from dse.cli.flags import path_arg
from dse.errors import InputError, output_error
from dse.paths import CALIBRATION_FILE, MEASURED_RUNS, PUBLISHED_POINTS, calibration_file

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from dse.calibration.fit import ErrorStats, Measured
    from dse.calibration.latency import LatencyFit
    from dse.calibration.power import PowerFit
    from dse.calibration.published import StagePoint
    from dse.perf.params import PerfParams


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("calibrate", help="fit the performance model to measured serving runs")
    p.add_argument(
        "--data",
        type=path_arg,
        default=MEASURED_RUNS,
        help="measured runs (columns of inferencex_calibration.csv)",
    )
    p.add_argument(
        "--points",
        type=path_arg,
        default=PUBLISHED_POINTS,
        help="published stage-level measurements fitted beside the runs (columns of "
        "published_points.csv; default: the shipped file)",
    )
    p.add_argument("--no-points", action="store_true", help="fit the runs alone, without stage points")
    p.add_argument(
        "--out",
        type=path_arg,
        default=None,
        help="where to write the fitted values (default: the file the engine loads, $DSE_CALIBRATION "
        "or the shipped one)",
    )
    p.add_argument(
        "--kernels",
        choices=("datasheet", "measured"),
        default="datasheet",
        help="price ops from the datasheet roofline, or from AIConfigurator's measured kernel tables "
        "where they cover the GPU and engine (the other ops and GPUs from the datasheet); the "
        "file records which, and every command then prices with it (default: %(default)s, which "
        "predicts the runs it did not see better: docs/accuracy.md)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="leave-one-hardware-out folds fitted at once, each in its own process (default: the "
        "CPUs this process may use); the result is the same whatever N",
    )
    p.add_argument(
        "--no-cross-validation",
        action="store_true",
        help="skip the leave-one-hardware-out refits (about 50 s of the 61 the whole fit takes on two "
        "cores); the file then carries the in-sample error only",
    )


def _check_flags(args: argparse.Namespace, catalog: Catalog) -> None:
    """The defaults that depend on the machine, and one line for a flag out of its range."""
    from dse.calibration.folds import default_jobs

    # (DSE_CALIBRATION may name the shipped file by another path; a catalog folder's edited
    # entries make the fit another one too: --catalog-dir with a B200 at 9 TB/s had replaced it)
    shipped = (args.out or calibration_file()).resolve() == CALIBRATION_FILE.resolve()
    if shipped and (_own(args) or catalog.edited):
        rule = (
            "is needed where the runs, points or catalog entries are not the shipped ones: without it "
            f"the fit would replace the shipped calibration every command loads ({CALIBRATION_FILE.name}); "
            "write it elsewhere and point DSE_CALIBRATION at it"
        )
        raise InputError("dse calibrate", "--out", rule)
    args.out = args.out or calibration_file()
    if args.jobs is None:
        args.jobs = default_jobs()
    elif args.jobs < 1:
        raise InputError("dse calibrate", "--jobs", "must be at least 1", args.jobs)
    if not args.data.is_file():
        raise InputError(str(args.data), "--data", "must be an existing CSV file")
    if args.no_points and args.points != PUBLISHED_POINTS:
        raise InputError("dse calibrate", "--points", "does not apply with --no-points", str(args.points))
    if not args.no_points and not args.points.is_file():
        raise InputError(str(args.points), "--points", "must be an existing CSV file (or --no-points)")
    if args.out.is_dir():  # found before the fit, not after it
        raise InputError(str(args.out), "--out", "must be a file to write, not a folder")
    for flag, read in (("--data", args.data), ("--points", None if args.no_points else args.points)):
        if read is not None and (args.out.resolve() == read.resolve() or _same_file(args.out, read)):
            # the fit had written its JSON over the runs it read (exit 0, the runs gone)
            rule = f"must not be the {flag} file ({read}): the input would be overwritten"
            raise InputError("dse calibrate", "--out", rule)
    try:
        probe_writable(args.out)
    except OSError as exc:
        raise output_error(exc, "dse calibrate", "--out", args.out) from None


def _same_file(a: Path, b: Path) -> bool:
    return a.exists() and b.exists() and a.samefile(b)


def _own(args: argparse.Namespace) -> bool:
    """The fit reads runs or stage points other than the shipped ones (a user's own)."""
    points = PUBLISHED_POINTS if args.no_points else args.points
    return args.data.resolve() != MEASURED_RUNS.resolve() or points.resolve() != PUBLISHED_POINTS.resolve()


def _few_rows(n: int, no_cross_validation: bool, gpu_types: int) -> str:
    """What a fit of fewer than :data:`~dse.perf.expected_error.FEW_ROWS` rows says before it runs."""
    from dse.perf.expected_error import FEW_ROWS  # numpy: not for the parser's import

    if gpu_types < 2:  # no fold to fit, with or without the flag: there is no such error to read
        check = (
            "its runs are of one GPU type, so no leave-one-hardware-out error can be measured; check it "
            "against runs it did not see"
        )
    elif no_cross_validation:  # a fit without the cross-validation stores no such error to read
        check = "fit with the cross-validation and read its leave-one-hardware-out error"
    else:
        check = "read its leave-one-hardware-out error"
    return f"{n} rows to fit {FEW_ROWS} or so values: the fit is poorly determined; {check} before using it"


FEW_POWER_RUNS = 5
"""Below this many runs that report their power, the power fit's two values are said to be poorly
determined (10 of the shipped runs report it)."""


def _rerun(args: argparse.Namespace, seeds: tuple[int, ...]) -> dict[str, object]:
    """The provenance's stage points (what the fit took beside the runs) and how to rerun the fit:
    the command, the hashes of the files it read, the commit and the ``seeds`` of the latency
    replays (the throughput and power fits draw nothing; :func:`dse.calibration.fit.recipe`)."""
    from dse.calibration.fit import recipe
    from dse.catalog.loader import CATALOG_ENV

    points = None if args.no_points else args.points
    env = [Path(d) for d in os.environ.get(CATALOG_ENV, "").split(os.pathsep) if d]
    dirs = [*env, *(Path(d) for d in getattr(args, "catalog_dir", None) or ())]
    rerun = recipe(args.data, points, args.kernels, not args.no_cross_validation, seeds, catalog_dirs=dirs)
    return {"stage_points": None if points is None else points.name, **rerun}


def _fitted(
    data: Sequence[Measured],
    catalog: Catalog,
    start: PerfParams,
    points: Sequence[StagePoint],
    values: Sequence[float],
) -> PerfParams:
    """The throughput fit; a fit that stopped before converging says so on stderr."""
    from dse.calibration import fit as cal

    notes: list[str] = []
    fitted = cal.fit(data, catalog, start, points, values, notes)
    for note in notes:
        print(f"dse: warning: {note}", file=sys.stderr)
    return fitted


def run(args: argparse.Namespace, catalog: Catalog) -> int:
    from dse.calibration import fit as cal
    from dse.calibration.latency import SEED, fit_latency
    from dse.calibration.power import fit_power, per_gpu_power
    from dse.calibration.published import POINTS, measured_per_gpu
    from dse.perf.expected_error import FEW_ROWS, fitted_entries
    from dse.perf.params import default_params, params_to_json
    from dse.quantiles import known_median

    _check_flags(args, catalog)
    data, skipped = cal.read_measured(args.data, catalog)
    if not data:
        first = f" (the first: {skipped[0]})" if skipped else ""
        raise InputError(str(args.data), "", f"holds no row the model can describe{first}")
    gpus = sorted({m.row.hardware for m in data})
    if len(data) < FEW_ROWS:
        print(f"dse: warning: {_few_rows(len(data), args.no_cross_validation, len(gpus))}", file=sys.stderr)
    points: tuple[StagePoint, ...] = ()
    values: tuple[float, ...] = ()
    if not args.no_points:
        measured = measured_per_gpu(args.points)
        points, values = POINTS, tuple(measured[p.id] for p in POINTS)
    start = replace(default_params(), kernels=args.kernels)
    fitted = _fitted(data, catalog, start, points, values)
    tput, intv = cal.predict_measured(data, catalog, fitted)
    stats = cal.error_stats(data, tput, intv)
    ttft = cal.ttft_errors(data, catalog, fitted)
    loho = None
    folds: dict[str, PerfParams] | None = None
    if not args.no_cross_validation and len(gpus) < 2:  # a fold would be fitted on no measured run
        print(f"cross-validation skipped: it leaves one GPU type out at a time, and the runs are all "
              f"{gpus[0]}'s; no leave-one-hardware-out error is stored", file=sys.stderr)  # fmt: skip
    elif not args.no_cross_validation:
        folds = {}
        t_lo, i_lo = cal.leave_one_hardware_out(data, catalog, start, points, values, folds, args.jobs)
        loho = cal.error_stats(data, t_lo, i_lo)
    latency = fit_latency(data, catalog, fitted, folds, args.jobs, (SEED,))  # the draw _rerun records
    prov = cal.provenance(args.data, data, len(skipped), stats, ttft, loho, args.kernels)
    prov |= _rerun(args, (SEED,))
    # the numbers of the entries it fitted (a fit of a catalog folder's B200 at 9 TB/s had recorded
    # only the command, and a prediction with the shipped 8 TB/s called B200 in-sample)
    prov["catalog"] = fitted_entries(catalog, gpus, sorted({m.row.model for m in data}))
    prov["latency"] = {"in_sample_median_ape": latency.in_sample, "loho_median_ape": latency.loho,
                       "loho_median_ape_by_hardware": latency.loho_by_hardware}  # fmt: skip
    power = fit_power(data, catalog, fitted)
    if power is not None and power.rows < FEW_POWER_RUNS:  # (one run had read "in-sample error 0%")
        print(f"dse: warning: power: its two values (idle, full) fitted to {power.rows} run"
              f"{'' if power.rows == 1 else 's'} that report it: a poorly determined fit, whose in-sample "
              f"error says little (fewer than {FEW_POWER_RUNS})", file=sys.stderr)  # fmt: skip
    if power is not None:
        prov["power"] = {
            "rows": power.rows,
            "hardware": list(power.hardware),
            "in_sample_median_ape": power.median_ape,
        }
        fitted = replace(fitted, power=power.params)
    fitted = replace(fitted, latency=latency.params, provenance=prov)
    try:
        write_text(args.out, params_to_json(fitted) + "\n")
    except OSError as exc:
        raise output_error(exc, "dse calibrate", "--out", args.out) from None
    _, power_notes = per_gpu_power(data, catalog)
    _say_fit(args, data, skipped, len(points), (stats, loho), latency, known_median(ttft), power, power_notes)
    return 0


def _say_fit(
    args: argparse.Namespace,
    data: Sequence[Measured],
    skipped: Sequence[str],
    n_points: int,
    errors: tuple[ErrorStats, ErrorStats | None],
    latency: LatencyFit,
    ttft_median: float | None,
    power: PowerFit | None,
    power_notes: Sequence[str] = (),
) -> None:
    """What the fit wrote: its rows and file, the rows skipped and the figures not measured (and
    ``power_notes``, the powers no GPU's), its in-sample and leave-one-hardware-out errors, its
    latency and power fits."""
    from dse.calibration import fit as cal

    stats, loho = errors
    print(
        f"fitted {len(data)} rows ({len(skipped)} skipped) and {n_points} stage points, "
        f"{args.kernels} kernels -> {args.out}"
    )
    unmeasured = [f"not a measurement: {m}" for m in (*cal.unmeasured_figures(data), *power_notes)]
    for msg in [*(f"skipped: {m}" for m in skipped), *unmeasured]:
        print(f"  {msg}")
    for label, s in (("in-sample", stats), ("leave-one-hardware-out", loho)):
        if s is not None:
            print(
                f"{label} abs error, median / p75: tokens/s/GPU {s.tput_median_ape:.1%} / "
                f"{s.tput_p75_ape:.1%}, tokens/s/user {s.intvty_median_ape:.1%} / {s.intvty_p75_ape:.1%}"
            )
    print(_latency_line(latency, ttft_median))
    if power is not None:
        print(
            f"power: {power.params.idle:.0%} of TDP idle, {power.params.full:.0%} with kernels running all "
            f"the time; {power.rows} runs ({', '.join(power.hardware)}), in-sample median abs error "
            f"{power.median_ape:.0%}; other GPUs assumed alike"
        )
    for label, errs in (("in-sample", latency.in_sample), ("leave-one-hardware-out", latency.loho)):
        if errs is not None:
            shown = ", ".join(f"{k.replace('_', ' ')} {'not measured' if v is None else f'{v:.0%}'}"
                              for k, v in errs.items())  # fmt: skip
            print(f"{label} abs error of the simulated percentiles, median: {shown}")


def _latency_line(latency: LatencyFit, closed_form: float | None) -> str:
    """The closed form's in-sample TTFT error (``closed_form``) in a line, then the latency fit's
    values in one (or that there was nothing to fit them to)."""
    shown = "not measured (no row has a median TTFT)" if closed_form is None else f"{closed_form:.0%}"
    lp = latency.params
    colds = ", ".join(f"{k} {v:g} s" for k, v in lp.cold_start_s.items())
    kept = all(v is None for v in latency.in_sample.values())
    head = "latency: "
    if kept:
        head = "latency, not fitted (no row measures a TTFT or TPOT percentile; the defaults stand): "
    return (
        f"in-sample median abs error of the median TTFT (closed form): {shown}\n"
        f"{head}front end {lp.frontend_s * 1e3:.0f} ms, disaggregated hand-off {lp.handoff_s * 1e3:.0f} "
        f"ms per request; a fresh server's first wave waits {colds or 'nothing'}; attention-DP prefill "
        f"forwards where the engine slows them (SGLang) take {lp.dp_prefill_slowdown:g} times the step "
        f"costs' forward, aggregated prefill forwards {lp.agg_prefill_factor:g} times"
    )
