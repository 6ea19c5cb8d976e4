"""`dse predict`: serving figures of one deployment from flags, or of a CSV of deployments.

The performance model is imported inside :func:`run`: building the parser must stay cheap."""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from dse.catalog import Catalog
from dse.cli.flags import add_precision, note_given, number, path_arg
from dse.cli.table import format_table
from dse.errors import InputError, NoFeasibleDesign, Written
from dse.perf.frameworks import FRAMEWORK_ENGINE
from dse.typed_data import Rule, check_number, non_negative, positive
from dse.units import counted, percentile_label, share_of

if TYPE_CHECKING:
    from dse.perf.benchmark_rows import BenchRow
    from dse.perf.latency import Latency
    from dse.perf.latency_inputs import Lengths, Load
    from dse.perf.params import PerfParams
    from dse.perf.serving import ServingResult

SRC = "dse predict"
NUMBERS: dict[str, Rule] = {
    "isl": positive, "osl": positive, "conc": positive, "tp": positive, "ep": non_negative,
    "prefill_tp": positive, "prefill_ep": non_negative, "prefill_workers": non_negative,
    "prefill_gpus": positive, "decode_workers": non_negative, "decode_gpus": positive,
    "ffn_gpus": positive, "ffn_workers": non_negative, "ffn_ep": non_negative,
}  # fmt: skip


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("predict", help="predict what a deployment serves (closed-loop load)")
    p.add_argument(
        "--batch",
        type=path_arg,
        metavar="IN.csv",
        help="CSV with the columns of inferencex_calibration.csv; needs --out",
    )
    p.add_argument("--out", type=path_arg, metavar="OUT.csv", help="where --batch writes its rows")
    p.add_argument(
        "--recipe-settings",
        action="store_true",
        help="with --batch: add the engine settings of the InferenceX runs the rows name (every input "
        "column and the date equal; dse/perf/recipe_settings.csv) where a row has none, and no warm-up "
        "to single-node rows dated before InferenceX's harness sent one, as dse calibrate does; "
        "written beside the predictions",
    )
    p.add_argument("--model", default="deepseek-v3", help="model id or alias (dse catalog list models)")
    p.add_argument("--hardware", help="hardware id or alias (b200, gb200, h100, mi355x, ...)")
    p.add_argument(
        "--framework",
        default="sglang",
        metavar="NAME",
        help="serving framework: "
        + ", ".join(FRAMEWORK_ENGINE)
        + " (each prices as its engine profile: "
        + ", ".join(f"{f} as {e}" for f, e in FRAMEWORK_ENGINE.items() if f != e)
        + ")",
    )
    add_precision(p)
    p.add_argument("--mtp", action="store_true", help="multi-token prediction (speculative)")
    p.add_argument("--isl", type=number, default=1024.0, help="nominal input tokens")
    p.add_argument("--osl", type=number, default=1024.0, help="nominal output tokens")
    p.add_argument("--conc", type=number, default=64.0, help="requests in flight")
    _add_pools(p)
    _add_engine_settings(p)
    p.add_argument(
        "--afd",
        action="store_true",
        help="attention-FFN disaggregated decode (implies --disagg): --tp/--dp-attention/--decode-* "
        "describe the attention pool, --ffn-* the expert pool",
    )
    # the pools' flags default to None, "left out", so that one typed at its default value is
    # still seen as given (and refused where it does not apply); POOL_DEFAULTS fills them in
    p.add_argument("--ffn-gpus", type=int, help="GPUs of the whole expert pool (--afd; default 8)")
    p.add_argument("--ffn-workers", type=int, help="expert-pool instances (--afd; default 1)")
    p.add_argument("--ffn-ep", type=int, help="expert parallel per instance (--afd; default 0: all its GPUs)")
    _add_load_arguments(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    # every flag of one deployment, with its default: --batch refuses any given (each row names its own)
    batch_own = {"batch", "out", "recipe_settings", "help", "catalog_dir"}
    one = {
        a.dest: (a.option_strings[0], a.default)
        for a in p._actions
        if a.option_strings and a.dest not in batch_own
    }
    for a in p._actions:
        if a.dest in one:
            note_given(a)  # typed at its default value too: --batch refuses it
    p.set_defaults(one_deployment=one, given=frozenset())


def _add_pools(p: argparse.ArgumentParser) -> None:
    """The instances' shapes: an aggregated instance's (--tp, --ep), or each pool's (--disagg)."""
    p.add_argument(
        "--tp",
        type=int,
        default=None,
        help="tensor parallel (GPUs of an aggregated instance; default 8, or a disaggregated decode "
        "instance's GPUs up to 8)",
    )
    p.add_argument(
        "--ep", type=int, help="expert parallel (default 0: each GPU of the instance; fewer split experts)"
    )
    p.add_argument("--dp-attention", action="store_true", help="data-parallel attention")
    p.add_argument("--disagg", action="store_true", help="separate prefill and decode pools")
    p.add_argument(
        "--prefill-tp",
        type=int,
        default=None,
        help="tensor parallel of a prefill instance (--disagg; default: its GPUs up to 8)",
    )
    p.add_argument(
        "--prefill-ep", type=int, help="expert parallel of a prefill instance (--disagg; default 0: all)"
    )
    p.add_argument(
        "--prefill-dp-attention", action="store_true", help="data-parallel attention in prefill (--disagg)"
    )
    p.add_argument("--prefill-workers", type=int, help="prefill instances (--disagg; default 1)")
    p.add_argument("--prefill-gpus", type=int, help="GPUs of the whole prefill pool (--disagg; default 8)")
    p.add_argument("--decode-workers", type=int, help="decode instances (--disagg; default 1)")
    p.add_argument("--decode-gpus", type=int, help="GPUs of the whole decode pool (--disagg; default 8)")


def _add_engine_settings(p: argparse.ArgumentParser) -> None:
    """The engine settings a row of the reference file may carry (its optional engine columns)."""
    p.add_argument(
        "--decode-max-running-requests",
        default=None,
        metavar="N",
        help="the engine's cap on requests one decode instance (aggregated: one instance) runs at "
        "once, e.g. SGLang's --max-running-requests; the rest wait; 'none': only the KV cache caps "
        "them (default: the engine's own, each attention-DP rank's: SGLang with MTP 48 an "
        "instance, as it sets an unset flag; vLLM 1024 a rank (256 under 70 GiB or on an A100); "
        "TRT-LLM 2048 a rank; ATOM 512 a rank; SGLang without MTP only the KV cache)",
    )
    p.add_argument(
        "--mtp-draft-tokens",
        type=int,
        default=None,
        metavar="N",
        help="draft tokens per speculative step with --mtp (TRT-LLM's num_nextn_predict_layers, "
        "SGLang's --speculative-num-steps; default: the engine profile's)",
    )
    p.add_argument(
        "--scheduler-recv-interval",
        type=int,
        default=None,
        metavar="N",
        help="SGLang's --scheduler-recv-interval: an aggregated instance looks for new requests every "
        "N decode steps (and after each prefill forward); default 1, every step",
    )
    p.add_argument(
        "--adp-balance-timeout-iters",
        type=int,
        default=None,
        metavar="N",
        help="TensorRT-LLM's attention_dp_config with enable_balance: an aggregated attention-DP "
        "instance lets context requests in once every rank has one, or after N iterations "
        "(timeout_iters; default: no balancing)",
    )
    p.add_argument(
        "--kv-cache-dtype",
        choices=["bf16", "fp8", "fp4"],
        default=None,
        help="precision of the KV cache (default: the engine profile's)",
    )


LOADS = ("closed", "poisson", "bursty", "trace")
DEFAULT_BURSTINESS = 0.5  # --load bursty: gamma gaps of shape 0.5, a squared coefficient of variation of 2
MAX_TAIL_SIGMA = 3.0  # --long-tail: sigma of the log-normal lengths


def _add_load_arguments(p: argparse.ArgumentParser) -> None:
    """The load the latency simulation applies (the closed-form figures are always closed loop)."""
    g = p.add_argument_group("latency simulation (TTFT, TPOT and end-to-end percentiles)")
    g.add_argument(
        "--load",
        choices=LOADS,
        default="closed",
        help="closed: --conc clients, each sending its next request when its last completes (as "
        "benchmark_serving and InferenceX measure); poisson or bursty: --rate requests/s; "
        "trace: replay --trace",
    )
    g.add_argument(
        "--rate", type=number, default=None, metavar="R", help="requests/s (--load poisson or bursty)"
    )
    g.add_argument(
        "--burstiness",
        type=number,
        default=None,
        metavar="K",
        help=f"--load bursty: gamma-distributed gaps of shape K (1 is Poisson; smaller is burstier; "
        f"default {DEFAULT_BURSTINESS:g})",
    )
    g.add_argument(
        "--trace",
        type=path_arg,
        default=None,
        metavar="FILE.csv",
        help="--load trace: CSV with arrival_s, input_tokens, output_tokens per request",
    )
    g.add_argument(
        "--requests",
        type=int,
        default=None,
        metavar="N",
        help="requests to simulate (default: 10 per client in a closed loop, as InferenceX; open loop "
        "2,000, or ten times the requests in flight where that is more)",
    )
    g.add_argument(
        "--warm-server",
        action="store_true",
        help="closed loop: the engine starts with the clients (default: a fresh server, whose first "
        "wave waits the engine's fitted cold start, as the measured benchmarks ran)",
    )
    g.add_argument(
        "--benchmark-warmup",
        choices=("none", "one-prompt", "random"),
        help="what the benchmark sent the fresh server before its measured requests, which sets the "
        "first wave's wait: nothing, copies of one prompt, or a run of random prompts (default: "
        "InferenceX's harness, random with --disagg and one-prompt without)",
    )
    g.add_argument(
        "--long-tail",
        type=number,
        default=0.0,
        metavar="SIGMA",
        help="log-normal lengths of this sigma with the same mean (default 0: uniform on 80-100%% of "
        "--isl and --osl, as benchmark_serving's random dataset at range ratio 0.8)",
    )
    g.add_argument(
        "--percentiles",
        default="50,90,99",
        metavar="P,P,...",
        help="percentiles to report, each in (0, 100); shown once each, in ascending order",
    )
    g.add_argument("--seed", type=int, default=0, help="random seed of arrivals, lengths and MTP acceptance")


def run(args: argparse.Namespace, catalog: Catalog) -> int:
    from dse.cli.predict_batch import run_batch
    from dse.perf.benchmark_rows import evaluate, kernel_sources, latency_of, settings_of
    from dse.perf.expected_error import changed_since_fit, defaults_note, expected_error, unmeasured_reason
    from dse.perf.kernel_data import problems
    from dse.perf.params import load_params

    params = load_params()
    if (lacks := defaults_note(params)) is not None:  # (the trust line's figures are the fit's)
        print(f"dse: warning: {lacks}", file=sys.stderr)
    if args.batch is not None or args.recipe_settings:
        _batch_alone(args)
        return run_batch(args.batch, args.out, catalog, params, recipes=args.recipe_settings)
    _one_deployment(args)
    load, lengths, percentiles = _load_of(args, _context_of(args.model, catalog))
    _expert_flags(args, catalog)
    row, bench = _deployment(args, catalog)
    res = evaluate([bench], catalog, params)
    if not math.isfinite(float(res.tput_per_gpu[0])):  # nothing to predict: say why, not a table of NaN
        raise _unfit(res, args, bench, catalog, params)
    figures = _closed_form(res)
    engine = params.engine(bench.engine)
    kv, drafts = settings_of(bench, engine)
    assumed = {  # the engine settings the prediction took, given or the engine profile's
        "kv_cache_dtype": kv.value,
        "mtp_draft_tokens": int(drafts),
        "mtp_tokens_per_step": round(float(engine.accept_tokens(drafts)), 4),
        # requests a decode instance runs at once; null: only the KV cache caps them
        "decode_max_running_requests": int(cap) if math.isfinite(cap := bench.decode_max_running) else None,
    }
    changed = changed_since_fit(params, catalog)
    error = expected_error(params, bench.hardware, bench.model, bench.engine, changed)
    unknown = unmeasured_reason(params, bench.hardware, changed) if error is None else None
    fresh = not args.warm_server
    lat = latency_of(bench, catalog, params, load, lengths, args.requests or 0, args.seed, fresh=fresh)
    pools = kernel_sources(bench, catalog, params)
    kernels = {"tier": params.kernels, "pools": pools, "problems": problems()}
    if args.json:
        out = {
            "deployment": {k: _typed(v) for k, v in row.items()},
            "assumed": assumed,
            "prediction": {k: _finite(v) for k, v in figures.items()},
            "latency": _latency_json(lat, load, lengths, percentiles, args, bench),
            "kernels": kernels,
            "expected_error": None if error is None else asdict(error),
        }
        print(json.dumps(out, indent=2, allow_nan=False))
        if unknown is not None:
            print(f"dse: warning: {unknown}", file=sys.stderr)
        _warn(lat, load, percentiles)  # in the JSON too, and on stderr where a pipe to a JSON reader sees it
        return 0
    per_step = assumed["mtp_tokens_per_step"]
    plural = "" if drafts == 1 else "s"
    mtp = f", MTP {drafts:g} draft{plural} ({per_step:.2f} tokens per step)" if bench.mtp else ""
    looks = _settings_words(bench, row)
    # the lengths and clients as numbers (a default had shown as 1024.0), one client in the singular
    isl, osl, conc = (float(row[k]) for k in ("isl", "osl", "conc"))
    print(
        f"{bench.model} on {bench.hardware} ({bench.topology}, "
        f"{row['framework']}, {row['precision']}{mtp}, KV {assumed['kv_cache_dtype']}{looks}), "
        f"ISL {isl:.15g} OSL {osl:.15g}, {counted(conc, 'request')} in flight"
        + ("" if load.kind == "closed" else f" (the figures; the latency below runs {load.describe()})")
    )
    # the steady state the throughput fit was calibrated on; the simulation's figures follow
    print(format_table(["closed form", "value"], [[k, v] for k, v in figures.items()]))
    _print_latency(lat, load, lengths, percentiles, args, bench)
    if (apart := _apart(figures["output_tput_per_decode_gpu"], lat, load, bench)) is not None:
        print(apart)
    print(_kernels_text(kernels))
    if error is not None:
        print(error.describe())
    elif unknown is not None:
        print(unknown)
    return 0


def _settings_words(bench: BenchRow, row: dict[str, str]) -> str:
    """What the first line adds to the deployment's engine settings: the scheduler's looks, the
    attention groups of a --tp below the instance's GPUs, the engine's own cap where it binds."""
    from dse.perf.benchmark_rows import engine_cap_words

    every = bench.recv_interval
    looks = f", new requests looked for every {every:g} decode steps" if every > 1 else ""
    if bench.adp_balance:
        looks += f", context requests held up to {bench.adp_balance:g} iterations for every attention-DP rank"
    for side, pool in (("prefill", bench.prefill), ("decode", bench.decode)):
        if pool is not None and 1 < pool.attn_tp < pool.gpus:  # --tp below the instance's GPUs
            looks += (f", {side} attention TP {pool.attn_tp:g} in {pool.gpus / pool.attn_tp:g} "
                      f"data-parallel groups of its {pool.gpus:g} GPUs")  # fmt: skip
    # the engine's own cap, where the clients reach it (--json's ``assumed`` has it always)
    per_instance = float(row["conc"]) / max(bench.decode.instances, 1.0)
    if not row["decode_max_running_requests"] and bench.decode_max_running < per_instance:
        looks += f", {bench.decode_max_running:g} running at most ({engine_cap_words(bench)})"
    return looks


def _closed_form(res: ServingResult) -> dict[str, float | str]:
    """The closed form's figures of the one deployment ``res`` holds, by their JSON names."""
    return {
        "tput_per_gpu": float(res.tput_per_gpu[0]),
        "input_tput_per_prefill_gpu": float(res.input_tput_per_prefill_gpu[0]),
        "output_tput_per_decode_gpu": float(res.output_tput_per_decode_gpu[0]),
        "intvty_tok_s_user": float(res.intvty_tok_s_user[0]),
        "tpot_mean_ms": float(res.tpot_s[0]) * 1e3,
        "ttft_mean_s": float(res.ttft_s[0]),
        "decode_batch_per_instance": float(res.decode_batch[0]),
        "hbm_peak_gb_per_gpu": float(res.hbm_peak_bytes_per_gpu[0]) / 1e9,
        "decode_step_ms": float(res.decode_step_s[0]) * 1e3,
        **_step_breakdown(res),
        "prefill_one_prompt_s": float(res.prefill_s[0]),
        "prefill_utilization": float(res.prefill_utilization[0]),
        "binding_regime": str(res.regime[0]),
    }


APART = 0.25  # the closed form and the simulation this far apart on output tokens/s/GPU: say so


def _apart(closed: object, lat: Latency, load: Load, bench: BenchRow) -> str | None:
    """A note when the closed form's output tokens/s per decode GPU (``closed``, the table's
    ``output_tput_per_decode_gpu``) and the closed-loop simulation's differ by more than
    :data:`APART` (short answers, long prompts: the steady state and the request-by-request run
    part ways), rather than two answers side by side as equals."""
    if load.kind != "closed" or not isinstance(closed, float) or not closed > 0:
        return None
    sim = _per_decode_gpu(lat, bench)
    if abs(sim - closed) <= APART * closed:
        return None
    return (
        f"note: the closed form and the simulation differ by {abs(sim / closed - 1):.0%} on output "
        f"tokens/s per decode GPU ({closed:.4g} against {sim:.4g}); both are calibrated on runs of "
        "1k-8k-token prompts and answers, the closed form on their throughput, the simulation on their "
        "latency"
    )


def _one_deployment(args: argparse.Namespace) -> None:
    """The flags of one deployment, checked; ``--afd`` implies ``--disagg``."""
    if args.out is not None:
        raise InputError(SRC, "--out", "needs --batch (one deployment prints its prediction)")
    if not args.hardware:
        raise InputError(SRC, "--hardware", "is required (or use --batch)")
    _pool_flags(args)
    _tensor_parallel(args)
    for name, check in NUMBERS.items():  # each flag, whether or not this topology reads it
        if (value := getattr(args, name)) is not None:  # None: left out, and not read (--prefill-tp)
            check_number(value, source=SRC, key="--" + name.replace("_", "-"), check=check)
    if args.load == "closed" and not float(args.conc).is_integer():  # the simulation runs whole clients
        raise InputError(SRC, "--conc", "must be a whole number of clients in a closed loop", args.conc)
    if args.mtp_draft_tokens is not None and not args.mtp:  # flag words, not a batch row's spec_method
        rule = "needs --mtp (the drafts of its speculative steps)"
        raise InputError(SRC, "--mtp-draft-tokens", rule, args.mtp_draft_tokens)
    args.disagg = args.disagg or args.afd
    if args.disagg and args.scheduler_recv_interval is not None:  # it had been said applied, and ignored
        rule = "applies to an aggregated deployment only (a disaggregated one is simulated without it)"
        raise InputError(SRC, "--scheduler-recv-interval", rule, args.scheduler_recv_interval)


def _pool_flags(args: argparse.Namespace) -> None:
    """The separate pools' flags: refused without the topology that reads them (``--afd`` for the
    expert pool's, ``--disagg`` or ``--afd`` for the others), even typed at their default value (an
    aggregated ``--prefill-gpus 8`` had been ignored in silence); then those left out get
    :data:`POOL_DEFAULTS`."""
    if not args.afd:  # the expert pool's flags mean nothing without one
        for flag in ("ffn_gpus", "ffn_workers", "ffn_ep"):
            if getattr(args, flag) is not None:
                raise InputError(SRC, "--" + flag.replace("_", "-"), "needs --afd", getattr(args, flag))
    if args.afd and args.ep is not None:  # the attention pool holds no experts: it had been echoed, unread
        rule = (
            "does not apply with --afd: its attention pool holds no experts (--ffn-ep sets the expert pool's)"
        )
        raise InputError(SRC, "--ep", rule, args.ep)
    if not (args.disagg or args.afd):  # nor the separate pools' flags without them
        for flag, unset in DISAGG_FLAGS.items():
            if getattr(args, flag) != unset:
                raise InputError(SRC, "--" + flag.replace("_", "-"), "needs --disagg", getattr(args, flag))
    for flag, default in POOL_DEFAULTS.items():
        if getattr(args, flag) is None:
            setattr(args, flag, default)


def _expert_flags(args: argparse.Namespace, catalog: Catalog) -> None:
    """Expert parallelism over more than one rank asked of a model without routed experts (a dense
    Llama) is refused: it had been taken and ignored, the figures those of the flag left out. So is
    ``--afd``, which had priced an expert pool of its dense FFNs."""
    try:
        model = catalog.model(args.model)
    except InputError:  # an unknown id: the deployment's check names it
        return
    if model.moe is not None:
        return
    if args.afd:
        rule = f"needs a model with routed experts to split from attention ({model.id} has none)"
        raise InputError(SRC, "--afd", rule)
    if args.precision == "fp4" and (why := model.fp4_problem()) is not None:
        raise InputError(SRC, "--precision", why, "fp4")
    for flag in ("ep", "prefill_ep", "ffn_ep"):  # 0 (each GPU) and 1 (no expert parallelism) say nothing
        if getattr(args, flag) > 1:
            rule = f"must be 0 or 1 for a model without routed experts ({model.id} has none)"
            raise InputError(SRC, "--" + flag.replace("_", "-"), rule, getattr(args, flag))


def _tensor_parallel(args: argparse.Namespace) -> None:
    """``--tp`` and ``--prefill-tp`` as the deployment runs them: left out, 8 (a disaggregated
    instance's GPUs where it has fewer); typed, at most a disaggregated instance's GPUs (a larger
    one had been capped in silence, and the JSON echoed it)."""
    disagg = args.disagg or args.afd
    sides = (
        ("tp", args.decode_gpus, args.decode_workers, "--decode-gpus over --decode-workers"),
        ("prefill_tp", args.prefill_gpus, args.prefill_workers, "--prefill-gpus over --prefill-workers"),
    )
    for dest, gpus, workers, how in sides:  # fmt: skip
        if dest == "prefill_tp" and not disagg:
            continue  # an aggregated instance's prefill is its own (--tp); the flag is refused below
        ok = disagg and all(isinstance(v, int) and v >= 1 for v in (gpus, workers)) and gpus % workers == 0
        per = gpus // workers if ok else None
        value = getattr(args, dest)
        if value is None:
            setattr(args, dest, min(8, per) if per else 8)
            args.tp_defaulted = (*getattr(args, "tp_defaulted", ()), dest)
        elif per is not None and value > per:
            flag = "--" + dest.replace("_", "-")
            raise InputError(SRC, flag, f"must be at most the instance's {per} GPUs ({how})", value)


# flags of a disaggregated deployment's pools, as the parser leaves them when left out (an aggregated
# deployment reads --tp)
DISAGG_FLAGS: dict[str, int | bool | None] = {
    "prefill_tp": None, "prefill_ep": None, "prefill_dp_attention": False, "prefill_workers": None,
    "prefill_gpus": None, "decode_workers": None, "decode_gpus": None,
}  # fmt: skip
# the pools' flags left out (--prefill-tp and --tp: :func:`_tensor_parallel`)
POOL_DEFAULTS: dict[str, int] = {
    "ep": 0, "prefill_ep": 0, "prefill_workers": 1, "prefill_gpus": 8, "decode_workers": 1, "decode_gpus": 8,
    "ffn_gpus": 8, "ffn_workers": 1, "ffn_ep": 0,
}  # fmt: skip


def _batch_alone(args: argparse.Namespace) -> None:
    """``--batch`` with no flag of one deployment: each row names its own, so a flag given beside
    it would be silently ignored and read as applied."""
    if args.batch is None:
        return
    given: frozenset[str] = getattr(args, "given", frozenset())
    for dest, (flag, default) in args.one_deployment.items():
        # typed at its default value too: --framework sglang beside --batch had been ignored in silence
        if getattr(args, dest) != default or dest in given:
            raise InputError(SRC, flag, "does not apply to --batch (each row names its deployment)")


def _kernels_text(kernels: dict[str, Any]) -> str:
    """One line per pool naming which source priced its ops, ops that share a source together."""
    lines = [f"ops priced by ({kernels['tier']} tier):"]
    for pool, ops in kernels["pools"].items():
        by_source: dict[str, list[str]] = {}
        for op, source in ops.items():
            by_source.setdefault(source, []).append(op.replace("_", " "))
        lines.append(f"  {pool}: " + "; ".join(f"{', '.join(o)}: {s}" for s, o in by_source.items()))
    lines += [f"  note: {p}" for p in kernels["problems"]]
    return "\n".join(lines)


def _unfit(
    res: ServingResult, args: argparse.Namespace, bench: BenchRow, catalog: Catalog, params: PerfParams
) -> NoFeasibleDesign:
    """Why the deployment serves nothing: what its weights need against the GPU's memory, and a
    wider instance that holds them where there is one."""
    from dse.perf.benchmark_rows import unfit_reason
    from dse.units import GIB

    hbm = catalog.hardware(bench.hardware).hbm.usable_gib  # GiB, as datasheets' figures are
    usable = hbm * GIB * (1.0 - params.hbm_reserve_fraction) / 1e9  # GB, as every figure printed
    why = (
        f"{unfit_reason(res, 0)} but {bench.hardware} offers {usable:.1f} GB after the "
        f"{params.hbm_reserve_fraction:.0%} runtime reserve"
    )
    return NoFeasibleDesign(str(res.regime[0]), why + _wider_that_fits(args, catalog, params))


def _wider_that_fits(args: argparse.Namespace, catalog: Catalog, params: PerfParams) -> str:
    """For an aggregated instance whose weights do not fit: the smallest instance of 2, 4 or 8
    times its GPUs (tensor and expert parallelism scaled alike) whose weights do, as the flags that
    ask for it (expert parallelism only where there is some); "" if none does or the deployment is
    disaggregated."""
    from dse.perf.benchmark_rows import evaluate

    if args.disagg:
        return ""
    for times in (2, 4, 8):
        ep = args.ep * times if args.ep > 1 else args.ep
        wider = argparse.Namespace(**{**vars(args), "tp": args.tp * times, "ep": ep})
        try:
            res = evaluate([_deployment(wider, catalog)[1]], catalog, params)
        except InputError:  # wider than the model allows (heads, experts)
            return ""
        if math.isfinite(float(res.tput_per_gpu[0])):
            flags = f"--tp {wider.tp}" + (f" --ep {wider.ep}" if wider.ep else "")
            return f" (the weights fit on {wider.tp} GPUs: {flags})"
    return ""


def _deployment(args: argparse.Namespace, catalog: Catalog) -> tuple[dict[str, str], BenchRow]:
    """The flags as a measured-run row, and that row parsed; a bad value names its flag."""
    from dse.perf.benchmark_rows import parse_row

    row = _row_from_flags(args)
    try:
        bench = parse_row(row, catalog, source=SRC, ep_as_given=True)
    except InputError as exc:  # the row's column names are not what the user typed: name the flag
        flag = _flag_of(exc.field, args.disagg)
        rule = exc.rule
        dest = flag.removeprefix("--").replace("-", "_")
        if dest in getattr(args, "tp_defaulted", ()):
            rule += f" ({flag} left out: the instance's GPUs up to 8)"
        elif dest in ("ep", "prefill_ep", "ffn_ep") and getattr(args, dest) == 0:
            rule += f" ({flag} 0, the default: every GPU of the instance; fewer split each expert)"
        raise InputError(SRC, flag, rule, exc.value) from None
    # as run: the catalog's ids (an alias typed, gb200, is gb200-nvl72, as the first line says), the
    # model's precision if none was given; under DP attention, --ep 1 over the instance
    ran = {"hardware": bench.hardware, "model": bench.model,
           "precision": bench.weight_precision.value, "decode_ep": f"{bench.decode.ep:g}",
           "prefill_ep": f"{(bench.prefill or bench.decode).ep:g}"}  # fmt: skip
    return {**row, **ran}, bench


def _load_of(args: argparse.Namespace, context: float) -> tuple[Load, Lengths, tuple[float, ...]]:
    """The simulation's load, lengths and percentiles from the flags, a request's context within
    the model's ``context``; bad values exit 2."""
    from dse.perf.latency import MAX_REQUESTS
    from dse.perf.latency_inputs import Lengths, Load, read_trace, trace_lengths

    percentiles: list[float] = []
    for part in str(args.percentiles).split(","):
        try:
            q = float(part)
        except ValueError:
            q = math.nan
        if not 0.0 < q < 100.0:
            raise InputError(SRC, "--percentiles", "each must be a number in (0, 100)", Written(part.strip()))
        if q not in percentiles:
            percentiles.append(q)
    percentiles.sort()  # a table reads up its tail (99,50 had printed p99 above p50)
    if args.seed < 0:
        raise InputError(SRC, "--seed", "must be >= 0", args.seed)
    if args.requests is not None:
        check_number(args.requests, source=SRC, key="--requests", check=positive)
    if (args.requests or 0) > MAX_REQUESTS:
        raise InputError(SRC, "--requests", f"must be at most {MAX_REQUESTS:,}", args.requests)
    check_number(args.long_tail, source=SRC, key="--long-tail", check=non_negative)
    if args.long_tail > MAX_TAIL_SIGMA:
        raise InputError(
            SRC, "--long-tail", f"must be at most {MAX_TAIL_SIGMA:g} (a wider log-normal keeps its mean "
            "only in a few requests longer than any context)", args.long_tail,
        )  # fmt: skip
    open_loop = args.load in ("poisson", "bursty")
    if args.rate is not None and not open_loop:
        raise InputError(SRC, "--rate", "needs --load poisson or bursty", args.rate)
    if args.burstiness is not None and args.load != "bursty":
        raise InputError(SRC, "--burstiness", "needs --load bursty", args.burstiness)
    if args.trace is not None and args.load != "trace":
        raise InputError(SRC, "--trace", "needs --load trace", str(args.trace))
    if args.warm_server and args.load != "closed":
        raise InputError(SRC, "--warm-server", "needs --load closed (an open loop has no first wave)")
    if args.benchmark_warmup is not None and (args.load != "closed" or args.warm_server):
        rule = "needs --load closed on a fresh server (what a benchmark sent first sets its first wave)"
        raise InputError(SRC, "--benchmark-warmup", rule, args.benchmark_warmup)
    lengths = Lengths(args.isl, args.osl, tail_sigma=args.long_tail, limit=context)
    if args.load == "closed":
        return Load("closed", concurrency=args.conc), lengths, tuple(percentiles)
    if args.load == "trace":
        if args.trace is None:
            raise InputError(SRC, "--trace", "is required with --load trace")
        for flag, value in (("--requests", args.requests), ("--long-tail", args.long_tail or None)):
            if value is not None:  # a replay's requests and lengths are the trace's own
                rule_ = "does not apply to --load trace (the trace's requests are replayed)"
                raise InputError(SRC, flag, rule_, value)
        trace = read_trace(args.trace, context)
        if len(trace.isl) > MAX_REQUESTS:  # the window's cap, as --requests has it
            rule_ = f"must hold at most {MAX_REQUESTS:,} requests (a window's cap)"
            raise InputError(str(args.trace), "--trace", rule_, f"{len(trace.isl):,} rows")
        return Load("trace", trace=trace), trace_lengths(trace), tuple(percentiles)
    if args.rate is None:
        raise InputError(SRC, "--rate", f"is required with --load {args.load}")
    check_number(args.rate, source=SRC, key="--rate", check=positive)
    burstiness = DEFAULT_BURSTINESS if args.burstiness is None else args.burstiness
    check_number(burstiness, source=SRC, key="--burstiness", check=positive)
    return Load(args.load, rate=args.rate, burstiness=burstiness), lengths, tuple(percentiles)


def _latency_rows(lat: Latency, percentiles: tuple[float, ...]) -> list[list[object]]:
    return [
        [
            percentile_label(q),
            lat.percentile("ttft", q),
            lat.percentile("tpot", q) * 1e3,
            lat.percentile("e2el", q),
        ]
        for q in percentiles
    ]


def _print_latency(
    lat: Latency,
    load: Load,
    lengths: Lengths,
    percentiles: tuple[float, ...],
    args: argparse.Namespace,
    bench: BenchRow,
) -> None:
    warmup = bench.warmup
    print()
    cold = (
        f"; the first wave waits {lat.cold_start_s:.3g} s (a fresh server, warm-up: {warmup})"
        if lat.cold_start_s
        else ""
    )
    print(
        f"latency, simulated: {load.describe()}{cold}; "
        # a trace's load says its count
        + ("" if load.kind == "trace" else f"{counted(len(lat.ttft_s), 'request')}, ")
        + f"{_lengths_text(lengths, load)}, seed {args.seed}"
    )
    print(format_table(["percentile", "ttft_s", "tpot_ms", "e2el_s"], _latency_rows(lat, percentiles)))
    decode, total = _gpus(bench)
    per_decode = "" if decode == total else f" ({_per_decode_gpu(lat, bench):.4g} per decode GPU)"
    # overloaded, the rate it serves is its capacity, and what arrives beside it says by how much,
    # with the KV cache the load's lengths would hold (which may be what says so)
    over = ""
    if lat.overloaded:
        # (arrivals bunched at one instant have no rate: "of the nan arriving" had been printed)
        offered = lat.offered_requests_per_s
        over = f" of the {offered:.4g} arriving (overloaded" if math.isfinite(offered) else " (overloaded"
        if lat.kv_held_share >= 1.0:
            over += f": its lengths hold {share_of(lat.kv_held_share)} the KV cache"
        over += ")"
    print(
        f"served {lat.requests_per_s:.4g} requests/s{over}, "
        f"{lat.output_tokens_per_s_per_gpu:.4g} output tokens/s/GPU{per_decode}; "
        f"{lat.preempted} preempted"
    )
    _warn(lat, load, percentiles)


def _gpus(bench: BenchRow) -> tuple[float, float]:
    """(the GPUs that decode, all the deployment's GPUs): an aggregated instance's GPUs do both;
    attention-FFN disaggregated, the attention and the expert pools decode."""
    decode = bench.decode.gpus * bench.decode.instances
    if bench.ffn is not None:
        decode += bench.ffn.gpus * bench.ffn.instances
    prefill = 0.0 if bench.prefill is None else bench.prefill.gpus * bench.prefill.instances
    return decode, decode + prefill


def _per_decode_gpu(lat: Latency, bench: BenchRow) -> float:
    """The simulation's output tokens/s per decode GPU, as the closed form's
    ``output_tput_per_decode_gpu`` counts them (the simulation counts all the GPUs)."""
    decode, total = _gpus(bench)
    return lat.output_tokens_per_s_per_gpu * total / decode


def _warn(lat: Latency, load: Load, percentiles: tuple[float, ...] = ()) -> None:
    """A window too short for a steady state, or for the finest percentile asked, said on stderr
    (with or without --json)."""
    if lat.warning:
        print(f"dse: warning: {lat.warning}", file=sys.stderr)
    if (beyond := unresolved(len(lat.ttft_s), percentiles, trace=load.kind == "trace")) is not None:
        print(f"dse: warning: {beyond}", file=sys.stderr)


UNRESOLVED_SHARE = 0.1
"""A percentile is said to be past what a window resolves where fewer than this many of its
requests (a tenth of one) lie beyond it: p99.999 of 80. The benchmarks' own p99 of ten requests a
client (1 at 1 client, 0.8 at 8) is not."""


def unresolved(n: int, percentiles: tuple[float, ...], *, trace: bool = False) -> str | None:
    """The finest of ``percentiles`` that ``n`` requests cannot resolve (:data:`UNRESOLVED_SHARE`),
    in words with the window that would (a longer trace where they are a ``trace``'s, which
    ``--requests`` does not apply to); None when each can be."""
    if n <= 0 or not percentiles:
        return None
    q = min(percentiles, key=lambda p: min(p, 100.0 - p))
    tail = min(q, 100.0 - q) / 100.0  # the share of requests beyond the percentile
    if n * tail >= UNRESOLVED_SHARE:
        return None
    end = "slowest" if q > 50 else "quickest"
    need = math.ceil(1.0 / tail - 1e-9)
    how = "a longer trace" if trace else "--requests"
    return (
        f"{percentile_label(q)} of {counted(n, 'request')} is no more than their {end}: {need:,} requests "
        f"or more resolve it ({how})"
    )


def _context_of(model: str, catalog: Catalog) -> float:
    """The model's context in tokens (unbounded for an unknown id: the deployment's check names it)."""
    try:
        return float(catalog.model(model).max_context)
    except InputError:
        return math.inf


def _lengths_text(lengths: Lengths, load: Load) -> str:
    if load.kind == "trace":
        return "the trace's lengths"
    if lengths.tail_sigma > 0:
        return f"log-normal lengths (sigma {lengths.tail_sigma:g})"
    return f"lengths {lengths.low:.0%}-100% of nominal"


def _finite(v: object) -> object:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _latency_json(
    lat: Latency,
    load: Load,
    lengths: Lengths,
    percentiles: tuple[float, ...],
    args: argparse.Namespace,
    bench: BenchRow,
) -> dict[str, object]:
    rows = _latency_rows(lat, percentiles)
    warmup = bench.warmup
    return {
        "load": load.describe(),
        "cold_start_s": lat.cold_start_s,
        "benchmark_warmup": warmup if load.kind == "closed" and not args.warm_server else None,
        "requests": len(lat.ttft_s),
        "lengths": _lengths_text(lengths, load),
        "seed": args.seed,
        "percentiles": {
            str(r[0]): {"ttft_s": _finite(r[1]), "tpot_ms": _finite(r[2]), "e2el_s": _finite(r[3])}
            for r in rows
        },
        "requests_per_s": _finite(lat.requests_per_s),
        # an open loop's arrivals per second over the interval requests_per_s counts (null closed)
        "offered_requests_per_s": _finite(lat.offered_requests_per_s),
        "overloaded": lat.overloaded,
        # the KV its lengths hold at once on average, a share of the cache (null closed)
        "kv_held_share": _finite(lat.kv_held_share),
        "output_tokens_per_s_per_gpu": _finite(lat.output_tokens_per_s_per_gpu),
        "output_tokens_per_s_per_decode_gpu": _finite(_per_decode_gpu(lat, bench)),
        "preempted": lat.preempted,
        "warning": lat.warning,
    }


def _step_breakdown(res: ServingResult) -> dict[str, float | str]:
    """What a decode step spends its time on, in ms. Attention-FFN disaggregated, ``decode_*`` is
    the attention pool's pass and ``expert_*`` the expert pool's, beside the hidden states'
    transfer; the slowest of the three paces the step."""
    if res.afd is None:
        return {
            "decode_gemm_ms": float(res.decode_gemm_s[0]) * 1e3,
            "decode_attention_ms": float(res.decode_attention_s[0]) * 1e3,
            "decode_comm_ms": float(res.decode_comm_s[0]) * 1e3,
            "decode_overhead_ms": float(res.decode_overhead_s[0]) * 1e3,
        }
    att, ex = res.afd.attention, res.afd.experts
    return {
        "decode_gemm_ms": float(att.gemm_s[0]) * 1e3,
        "decode_attention_ms": float(att.attention_s[0]) * 1e3,
        "decode_comm_ms": float(att.comm_s[0]) * 1e3,
        "decode_overhead_ms": float(att.overhead_s[0]) * 1e3,
        "expert_gemm_ms": float(ex.gemm_s[0]) * 1e3,
        "expert_comm_ms": float(ex.comm_s[0]) * 1e3,
        "expert_overhead_ms": float(ex.overhead_s[0]) * 1e3,
        "afd_transfer_ms": float(res.afd.transfer_s[0]) * 1e3,
        "afd_transfer_link": "nvlink" if bool(res.afd.in_domain[0]) else "nic",
        "decode_paced_by": str(res.afd.paced_by()[0]),
    }


def _typed(text: str) -> object:
    """A deployment value as JSON types it: a bool, a number, null for a setting left to the engine."""
    if text in ("True", "False"):
        return text == "True"
    if text == "":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _flag_of(column: str, disagg: bool) -> str:
    """The flag that set a column of the row :func:`_row_from_flags` builds."""
    fixed = {
        "hardware": "--hardware", "framework": "--framework", "model": "--model",
        "precision": "--precision", "spec_method": "--mtp", "disagg": "--disagg", "isl": "--isl",
        "osl": "--osl", "conc": "--conc", "decode_tp": "--tp", "decode_ep": "--ep",
        "decode_dp_attention": "--dp-attention", "prefill_num_workers": "--prefill-workers",
        "num_prefill_gpu": "--prefill-gpus", "decode_num_workers": "--decode-workers",
        "num_decode_gpu": "--decode-gpus" if disagg else "--tp",
        "num_ffn_gpu": "--ffn-gpus", "ffn_num_workers": "--ffn-workers", "ffn_ep": "--ffn-ep",
        "decode_max_running_requests": "--decode-max-running-requests",
        "mtp_draft_tokens": "--mtp-draft-tokens",
        "kv_cache_dtype": "--kv-cache-dtype",
        "scheduler_recv_interval": "--scheduler-recv-interval",
        "adp_balance_timeout_iters": "--adp-balance-timeout-iters",
        "benchmark_warmup": "--benchmark-warmup",
    }  # fmt: skip
    if column in fixed:
        return fixed[column]
    if column.startswith("prefill_"):  # aggregated rows take the prefill side from --tp/--ep
        return "--" + (column if disagg else column.removeprefix("prefill_")).replace("_", "-")
    return column


def _row_from_flags(a: argparse.Namespace) -> dict[str, str]:
    dec_gpus = a.decode_gpus if a.disagg else a.tp
    # --ep 0: every GPU of an instance holds experts of its own
    dec_ep = a.ep or (a.decode_gpus // max(a.decode_workers, 1) if a.disagg else a.tp)
    pf_ep = (a.prefill_ep or a.prefill_gpus // max(a.prefill_workers, 1)) if a.disagg else dec_ep
    return {
        "hardware": a.hardware,
        "framework": a.framework,
        "model": a.model,
        "precision": a.precision or "",  # blank: the model's serving precision
        "spec_method": "mtp" if a.mtp else "none",
        "disagg": str(a.disagg),
        "isl": repr(a.isl),
        "osl": repr(a.osl),
        "conc": repr(a.conc),
        "prefill_tp": str(a.prefill_tp if a.disagg else a.tp),
        "prefill_ep": str(pf_ep),
        "prefill_dp_attention": str(a.prefill_dp_attention if a.disagg else a.dp_attention),
        "prefill_num_workers": str(a.prefill_workers),
        "num_prefill_gpu": str(a.prefill_gpus if a.disagg else a.tp),  # aggregated: the one instance's
        "decode_tp": str(a.tp),
        "decode_ep": str(dec_ep),
        "decode_dp_attention": str(a.dp_attention),
        "decode_num_workers": str(a.decode_workers),
        "num_decode_gpu": str(dec_gpus),
        "decode_max_running_requests": a.decode_max_running_requests or "",
        "mtp_draft_tokens": "" if a.mtp_draft_tokens is None else str(a.mtp_draft_tokens),
        "kv_cache_dtype": a.kv_cache_dtype or "",
        "scheduler_recv_interval": ""
        if a.scheduler_recv_interval is None
        else str(a.scheduler_recv_interval),
        "adp_balance_timeout_iters": ""
        if a.adp_balance_timeout_iters is None
        else str(a.adp_balance_timeout_iters),
        "benchmark_warmup": a.benchmark_warmup or "",
        **(
            {
                "num_ffn_gpu": str(a.ffn_gpus),
                "ffn_num_workers": str(a.ffn_workers),
                "ffn_ep": str(a.ffn_ep or ""),
            }
            if a.afd
            else {}
        ),
    }
