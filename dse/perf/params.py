"""Efficiency factors of the performance model, and the file the calibration writes them to.

The numbers here are *fitted*, never hand-tuned: ``dse calibrate`` fits them to the measured runs in
``reference/`` and writes ``dse/perf/calibration.json`` with its provenance. The defaults
below are only the starting point of that fit.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from dse.errors import InputError
from dse.paths import CALIBRATION_ENV, CALIBRATION_FILE, calibration_file
from dse.units import Precision


@dataclass(frozen=True)
class EngineProfile:
    """What differs between serving engines (TRT-LLM, SGLang, vLLM/ATOM) and their disaggregated
    variants. ``speed`` multiplies kernel time; the MTP figures describe speculative decoding."""

    name: str
    kv_precision: Precision
    mtp_draft_tokens: int  # the engine's default draft depth; a deployment may set its own
    speed: float = 1.0
    # chance that a draft token is accepted, given the ones before it were (fitted per engine)
    mtp_accept_rate: float = 0.6
    # SGLang divides --chunked-prefill-size by the DP size under DP attention (server_args.py:
    # ``chunked_prefill_size // dp_size``), so its chunk is a budget for the whole instance;
    # TRT-LLM and ATOM batch up to their token budget on every attention-DP rank.
    prefill_chunk_per_instance: bool = False

    def accept_tokens(self, draft_tokens: Any) -> Any:
        """Tokens a verification step emits with ``draft_tokens`` drafts (1 without MTP)."""
        return mtp_tokens_per_step(self.mtp_accept_rate, draft_tokens)

    @property
    def mtp_accept_tokens(self) -> float:
        """Tokens per step at the engine's default draft depth."""
        return float(self.accept_tokens(self.mtp_draft_tokens))


def with_mtp(engine: EngineProfile, draft_tokens: int | None, accept_rate: float | None) -> EngineProfile:
    """The engine profile with a deployment's own speculative-decoding settings: its draft depth
    and the rate its drafts are accepted at (None: the profile's, fitted on the measured runs)."""
    if draft_tokens is None and accept_rate is None:
        return engine
    return replace(
        engine,
        mtp_draft_tokens=engine.mtp_draft_tokens if draft_tokens is None else int(draft_tokens),
        mtp_accept_rate=engine.mtp_accept_rate if accept_rate is None else float(accept_rate),
    )


def mtp_tokens_per_step(accept_rate: Any, draft_tokens: Any) -> Any:
    """Expected tokens per speculative step: the accepted prefix of ``draft_tokens`` drafts, each
    accepted with probability ``accept_rate`` once the ones before it were, plus the token the
    verification pass itself produces: ``(1 - a^(n+1)) / (1 - a)`` (Leviathan et al. 2023,
    "Fast Inference from Transformers via Speculative Decoding", eq. 1). 1 with no drafts, and
    it grows ever more slowly with the depth, so a deeper draft only pays while acceptance is high."""
    a = np.minimum(np.asarray(accept_rate, dtype=float), 1.0 - 1e-9)
    n = np.asarray(draft_tokens, dtype=float)
    return (1.0 - np.power(a, n + 1.0)) / (1.0 - a)


@dataclass(frozen=True)
class LatencyParams:
    """What the engine-level latency simulation (:mod:`dse.perf.latency`) adds to the step costs,
    fitted on measured TTFT and TPOT percentiles (:mod:`dse.calibration.latency`)."""

    # seconds a request spends outside the engine's forwards before its first token reaches the
    # client: HTTP, tokenisation, the scheduler's hand-off, detokenising and streaming the token
    frontend_s: float = 0.0
    # disaggregated only: seconds between a prompt's last prefill forward and its first token at
    # the client beyond the KV transfer itself (the prefill and decode servers' hand-shake, the
    # transfer's set-up, the decode server's admission and its stream)
    handoff_s: float = 0.0
    # closed loop only: seconds the first wave of a benchmark (every client's first request, sent
    # at once) waits before the engine serves it, per "engine/vendor/warm-up", e.g.
    # ``sglang/amd/one-prompt`` (the warm-up is what the benchmark sent the fresh server first,
    # :data:`~dse.perf.benchmark_rows.WARMUPS`): the burst's batch shapes are new to a fresh
    # server, whose kernels compile or tune for them (benchmark_serving's warm-up repeats one
    # prompt, which the prefix cache serves). In the measured runs that wave is a tenth of the
    # requests, so it sets the TTFT p99 at low load.
    cold_start_s: dict[str, float] = field(default_factory=dict)
    # disaggregated only: how many times the step costs' forward an attention-DP prefill server
    # takes, where its engine's rule says the balanced pool the step costs price is not what it
    # runs (:attr:`~dse.perf.latency_tables.EngineRules.dp_prefill_slowed`: SGLang). Fitted on the
    # measured TTFT percentiles of the runs it reaches (:mod:`dse.calibration.latency`); 1 is none.
    dp_prefill_slowdown: float = 1.0
    # aggregated only: how many times the step costs' prefill forward an aggregated instance's
    # prefill takes. The throughput fit prices a tensor-parallel instance's prefill mostly as
    # all-reduce traffic at the bandwidth its decode steps' small messages reach (80% of an
    # 8k-token forward on H200 TP8), which large messages beat; from 1k- to 8k-token prompts at
    # 1-16 clients the measured median TTFT rises 0.5-0.75 times as fast as priced on B200
    # TensorRT-LLM, H200 and MI355X SGLang (0.94-2.6 on H200 TensorRT-LLM, MI355X ATOM, MI300X:
    # benchmarks/latency_accuracy.py). Fitted on the measured TTFT and TPOT percentiles, since
    # these forwards also stall the decode steps (:mod:`dse.calibration.latency`); 1 is none.
    agg_prefill_factor: float = 1.0

    def cold_start(self, engine: str, vendor: str, warmup: str) -> float:
        """The first wave's wait for ``engine`` on ``vendor``'s GPUs after the benchmark's
        ``warmup``; a file fitted before warm-ups were told apart keys it by engine and vendor
        alone. 0 where no run measured it (left out of every fit, no guess did better: AMD's ATOM
        measures none, and taking AMD SGLang's 2-3 s for it put ATOM's p99 at twice the measured)."""
        waits = self.cold_start_s
        return waits.get(f"{engine}/{vendor}/{warmup}", waits.get(f"{engine}/{vendor}", 0.0))


@dataclass(frozen=True)
class PowerParams:
    """Power a GPU draws as a share of its TDP: ``idle`` with no kernel running, rising linearly
    to ``full`` when kernels run all the time (:func:`dse.perf.power.gpu_power_w`). Fitted on
    the measured runs' average power (:mod:`dse.calibration.power`); the defaults are the fit's
    starting point."""

    idle: float = 0.3
    full: float = 0.8


@dataclass(frozen=True)
class PerfParams:
    """Global efficiencies (fractions of datasheet peaks) and overheads."""

    gemm_eff: float = 0.55
    prefill_gemm_eff: float = 0.45
    attn_eff: float = 0.35
    hbm_eff: float = 0.75
    link_eff: float = 0.6
    nic_eff: float = 0.6
    step_overhead_ms: float = 2.0
    layer_overhead_us: float = 10.0
    # NVLink latency of one all-reduce, and of one all-to-all per peer (stages.nvlink_a2a_latency_us)
    collective_latency_us: float = 12.0
    comm_overlap: float = 0.5
    prefill_queue_factor: float = 1.0
    # HBM held back for the runtime and activations. Not fitted: bounded by the measured runs,
    # since InferenceX serves DeepSeek-R1 fp8 on 4 x B200 (about 168 GB of weights per GPU of
    # 180 GiB, 193 GB: pool.HBM_GB_BYTES), so the reserve must stay below about 13%; 4% leaves
    # room for the KV cache of its 32 concurrent requests there.
    hbm_reserve_fraction: float = 0.04
    # No vendor factor: AMD GPUs run at the same efficiencies of their datasheet peaks. A fitted
    # one was learnt from whichever AMD generation was in the fit and misled the other (fitted
    # without MI355X it was 0.75 and under-predicted MI355X by 25%; with only MI355X the
    # datasheet alone predicts it within 1% in-sample).
    # Latency of one expert-parallel dispatch or combine whose peers span scale-up domains. Such
    # an all-to-all goes GPU-initiated over RDMA (DeepEP low-latency / MoRI-EP kernels: IBGDA
    # puts, a completion flag per peer, and the wait on the slowest remote rank). DeepEP's README
    # (H800, CX7 400 Gb/s, 128 tokens per rank) measures 118 us dispatch / 195 us combine at EP16
    # and 155-194 / 273-369 us at EP32-256, an order of magnitude above an NVLink-only call.
    # The model charged such calls 3x the NVLink latency; the fit gives 150-180 us. Fitted, global,
    # bounded.
    nic_a2a_latency_us: float = 40.0
    # The same for a tensor-parallel all-reduce spanning scale-up domains (NCCL over RDMA:
    # reduce-scatter inside the domain, an exchange across it, all-gather inside; tens of us
    # for small messages); the fits give 38-59 us. Fitted, global, bounded.
    nic_allreduce_latency_us: float = 40.0
    # measured kernel time (dse.perf.kernels) per second the engine's forward spends on those
    # kernels: below 1 where CUDA graphs, fused epilogues and overlapped streams save what the
    # kernels measured one by one pay (their launches, their separate passes). Fitted, global.
    measured_scale: float = 1.0
    # microseconds of each measured kernel call that an engine's CUDA graph does not pay: the
    # tables time kernels one launch at a time (about 5-20 us floors), a captured forward replays
    # them back to back. Fitted, global, bounded by the floors.
    launch_saving_us: float = 0.0
    engines: dict[str, EngineProfile] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    latency: LatencyParams = field(default_factory=LatencyParams)
    power: PowerParams = field(default_factory=PowerParams)
    # "datasheet": every op from the datasheet roofline; "measured": ops the measured kernel
    # tables cover priced from them (dse.perf.kernels). The calibration records which tier its
    # figures were fitted with (dse calibrate --kernels); a file from before the tier existed
    # is "datasheet".
    kernels: str = "datasheet"
    # what the calibration file lacked, which the uncalibrated defaults stand in for (a file of an
    # older dse, or an edited one): ``params.hbm_eff``, ``latency``, ...
    defaulted: tuple[str, ...] = ()

    def engine(self, name: str) -> EngineProfile:
        try:
            return self.engines[name]
        except KeyError:
            raise InputError(
                "performance model",
                "engine",
                f"unknown engine; valid engines: {', '.join(sorted(self.engines))}",
                name,
            ) from None

    def kernel_engines(self, names: list[str]) -> list[str] | None:
        """``names`` (an engine profile per pool element) when this calibration prices ops from the
        measured kernel tables (:attr:`kernels`), None when from the datasheet: what
        :func:`~dse.perf.pool.build_pool` takes as ``engines``."""
        return names if self.kernels == "measured" else None

    def with_values(self, **values: Any) -> PerfParams:
        return replace(self, **values)


DEFAULT_ENGINES = {
    # kv precision: TRT-LLM and ATOM serve DeepSeek with an fp8 KV cache, SGLang with bf16 by default.
    "trt": EngineProfile("trt", Precision.FP8, mtp_draft_tokens=3),
    "sglang": EngineProfile("sglang", Precision.BF16, mtp_draft_tokens=3, prefill_chunk_per_instance=True),
    "atom": EngineProfile("atom", Precision.FP8, mtp_draft_tokens=3),
    # vLLM on NVIDIA GPUs: no measured run, so `dse calibrate` gives it the fitted engines' mean
    # speed (1) and MTP acceptance. KV at the model's dtype (vLLM's --kv-cache-dtype auto), one
    # MTP draft (vLLM's DeepSeek MTP proposes num_speculative_tokens drafts, recipes use 1).
    "vllm": EngineProfile("vllm", Precision.BF16, mtp_draft_tokens=1),
}

FITTED_SCALARS = (
    "gemm_eff",
    "prefill_gemm_eff",
    "attn_eff",
    "hbm_eff",
    "link_eff",
    "nic_eff",
    "step_overhead_ms",
    "layer_overhead_us",
    "collective_latency_us",
    "comm_overlap",
    "prefill_queue_factor",
    "nic_a2a_latency_us",
    "nic_allreduce_latency_us",
    "measured_scale",
    "launch_saving_us",
)


def default_params() -> PerfParams:
    return PerfParams(engines=dict(DEFAULT_ENGINES))


KERNEL_TIERS = ("datasheet", "measured")
POINTS_ENGINE = "sglang"
"""The engine profile the stage points (published_points.csv) are priced with, and fit the speed of."""


def load_params(path: Path | None = None) -> PerfParams:
    """The calibrated parameters (``path``, default :func:`~dse.paths.calibration_file`); the
    uncalibrated defaults if the shipped calibration was not written yet."""
    if path is None:
        path = calibration_file()
        if path != CALIBRATION_FILE and not path.is_file():
            raise InputError(CALIBRATION_ENV, "", "must name an existing calibration file", str(path))
    if not path.exists():
        return default_params()
    try:
        raw = json.loads(path.read_text())
    except ValueError as e:
        rule = f"must be a calibration file written by dse calibrate ({e})"
        raise InputError(str(path), "", rule) from None
    return params_from_dict(raw, str(path))


def params_from_dict(raw: Any, where: str) -> PerfParams:
    """The parameters a calibration file's JSON holds (``raw``, as :func:`params_to_dict` writes
    it); bad values are named by ``where`` (the file, or the study that stored them)."""
    if not isinstance(raw, dict):
        raise InputError(where, "", "must be a calibration file written by dse calibrate (not a table)")
    kernels = str(raw.get("kernels", "datasheet"))
    if kernels not in KERNEL_TIERS:
        raise InputError(where, "kernels", f"must be one of {', '.join(KERNEL_TIERS)}", kernels)
    for section in ("params", "engines", "latency", "power", "provenance"):
        if section in raw and not isinstance(raw[section], dict):
            raise InputError(where, section, "must be a table of values (not a file dse calibrate wrote)")
    for section in ("params", "engines"):
        if section not in raw:
            raise InputError(where, section, "is missing (not a file dse calibrate wrote)")
    engines = {name: _engine(name, e, where) for name, e in raw["engines"].items()}
    for name, profile in DEFAULT_ENGINES.items():  # a profile newer than the file: its defaults
        engines.setdefault(name, profile)
    scalars = _scalars(raw["params"], where)
    latency = _latency_params(raw.get("latency", {}), where)
    power = PowerParams(**_scalars(raw.get("power", {}), where, "power", {"idle", "full"}))
    return PerfParams(
        **scalars,
        engines=engines,
        provenance=_provenance(raw.get("provenance", {}), where),
        latency=latency,
        power=power,
        kernels=kernels,
        defaulted=_defaulted(raw),
    )


def _defaulted(raw: dict[str, Any]) -> tuple[str, ...]:
    """The values a calibration file lacks, by section (a whole section once): each takes its
    uncalibrated default beside the fitted ones, which moved a B200 prediction 15% for a missing
    ``hbm_eff``, unsaid."""
    out = [f"params.{k}" for k in sorted(SCALARS - raw["params"].keys())]
    for section, known in (("latency", {f.name for f in fields(LatencyParams)}), ("power", {"idle", "full"})):
        held = raw.get(section)
        if held is None:
            out.append(section)
        else:
            out += [f"{section}.{k}" for k in sorted(known - held.keys())]
    return tuple(out)


SECTIONS = ("engines", "provenance", "latency", "power", "kernels", "defaulted")
"""PerfParams' fields that are not fitted scalars of a calibration file's ``params``."""
SCALARS = frozenset(f.name for f in fields(PerfParams)) - set(SECTIONS)


def _scalars(
    raw: dict[str, Any], path: str, section: str = "params", known: set[str] | None = None
) -> dict[str, float]:
    """A section's numbers (the fitted scalars, the power fractions): each a field the model has,
    a finite number >= 0, and a fraction (``*_eff``, of a datasheet peak; power, of the TDP) in
    (0, 1]."""
    known = known if known is not None else set(SCALARS)
    out = {}
    for k, v in raw.items():
        if k not in known:
            raise InputError(path, f"{section}.{k}", "is not a parameter of the performance model")
        fraction = k.endswith("_eff") or section == "power"
        number = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
        if not number or (fraction and not 0 < v <= 1):
            rule = "must be a number >= 0"
            if fraction:
                of = "the TDP" if section == "power" else "the datasheet peak"
                rule = f"must be a fraction of {of} in (0, 1]"
            raise InputError(path, f"{section}.{k}", rule, v)
        out[k] = float(v)
    return out


def _engine(name: str, e: Any, path: str) -> EngineProfile:
    """One engine profile of the file: its KV precision, draft depth, relative speed (> 0) and
    MTP acceptance; a newer file's own keys beside them are ignored."""
    where = f"engines.{name}"
    if not isinstance(e, dict):
        raise InputError(path, where, "must be a table of values (not a file dse calibrate wrote)")
    for key in ("kv_precision", "mtp_draft_tokens", "speed"):
        if key not in e:
            raise InputError(path, f"{where}.{key}", "is missing (not a file dse calibrate wrote)")
    speed = e["speed"]
    number = isinstance(speed, int | float) and not isinstance(speed, bool)
    if not (number and math.isfinite(speed) and speed > 0):
        raise InputError(path, f"{where}.speed", "must be a number > 0", speed)
    drafts = e["mtp_draft_tokens"]
    if not (isinstance(drafts, int) and not isinstance(drafts, bool) and 1 <= drafts <= 16):
        rule = "must be a whole number from 1 to 16"  # as a deployment's (MAX_DRAFT_TOKENS)
        raise InputError(path, f"{where}.mtp_draft_tokens", rule, drafts)
    default_chunk = name in DEFAULT_ENGINES and DEFAULT_ENGINES[name].prefill_chunk_per_instance
    per_instance = e.get("prefill_chunk_per_instance", default_chunk)
    if not isinstance(per_instance, bool):
        raise InputError(path, f"{where}.prefill_chunk_per_instance", "must be true or false", per_instance)
    try:
        profile = EngineProfile(
            name=name,
            kv_precision=Precision(e["kv_precision"]),
            mtp_draft_tokens=drafts,
            speed=float(speed),
            mtp_accept_rate=_accept_rate(e),
            prefill_chunk_per_instance=per_instance,
        )
    except (KeyError, ValueError, TypeError) as exc:
        rule = f"must be a profile dse calibrate wrote ({exc})"
        raise InputError(path, where, rule) from None
    if not 0.0 <= profile.mtp_accept_rate <= 1.0:  # (NaN too) a chance a draft is accepted
        rule = "must be a chance from 0 to 1"
        raise InputError(path, f"{where}.mtp_accept_rate", rule, e.get("mtp_accept_rate"))
    return profile


FITTED_IDS = ("hardware_fitted", "engines_fitted", "models_fitted")
"""The provenance's lists of the ids a calibration measured (what a prediction's expected error reads)."""
THROUGHPUT_ERRORS = tuple(
    f"{basis}_{k}"
    for basis in ("in_sample", "loho")
    for k in ("tput_median_ape", "tput_p75_ape", "intvty_median_ape", "intvty_p75_ape")
)
"""The provenance's throughput errors: numbers where present (every fit measures them)."""
LATENCY_ERRORS = ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99")
"""The simulated percentiles whose median errors the provenance's ``latency`` holds per basis."""


def _provenance(raw: dict[str, Any], path: str) -> dict[str, Any]:
    """The provenance as :func:`~dse.perf.expected_error.expected_error` reads it: its lists of
    fitted ids lists of strings, each error figure (``*_ape``) a number >= 0 or null (a figure no
    run measured), and ``latency`` a table of such figures per basis. Other keys pass as written."""
    for key in FITTED_IDS:
        ids = raw.get(key, [])
        if not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
            raise InputError(path, f"provenance.{key}", "must be a list of ids", ids)
    for key, value in raw.items():
        if key.endswith("_ape"):
            _error_figure(value, path, f"provenance.{key}", nullable=key not in THROUGHPUT_ERRORS)
    rows = raw.get("rows_fitted")  # a prediction's trust line says when they were few
    if rows is not None and not (isinstance(rows, int) and not isinstance(rows, bool) and rows >= 1):
        raise InputError(path, "provenance.rows_fitted", "must be a whole number >= 1", rows)
    latency = raw.get("latency", {})
    if not isinstance(latency, dict):
        raise InputError(path, "provenance.latency", "must be a table of values", latency)
    for basis in ("in_sample_median_ape", "loho_median_ape"):
        figures = latency.get(basis)
        if figures is None:
            continue
        if not (isinstance(figures, dict) and all(k in figures for k in LATENCY_ERRORS)):
            rule = f"must be a table of {', '.join(LATENCY_ERRORS)}"
            raise InputError(path, f"provenance.latency.{basis}", rule, figures)
        for k, value in figures.items():
            _error_figure(value, path, f"provenance.latency.{basis}.{k}")
    return raw


def _error_figure(value: object, path: str, key: str, nullable: bool = True) -> None:
    """A median or p75 error of the provenance: a finite number >= 0 (or null where unmeasured,
    where ``nullable``)."""
    if value is None and nullable:
        return
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return
    rule = "must be a relative error >= 0" + (", or null where unmeasured" if nullable else "")
    raise InputError(path, key, rule, value)


FORWARD_FACTORS = ("dp_prefill_slowdown", "agg_prefill_factor")  # LatencyParams' multiples of a forward


def _latency_params(raw: dict[str, Any], path: str) -> LatencyParams:
    """The file's latency section; a key an older file has and this one lacks is ignored, and a
    file without ``cold_start_s`` (written before there was one) has no first-wave wait."""
    known = {f.name for f in fields(LatencyParams)} - {"cold_start_s"}
    scalars = {}
    for k, v in raw.items():
        if k not in known:
            continue
        factor = k in FORWARD_FACTORS  # a multiple of a forward; the rest are seconds
        number = isinstance(v, int | float) and not isinstance(v, bool) and v < float("inf")
        if not (number and (v > 0.0 if factor else v >= 0.0)):
            rule = "must be a number > 0" if factor else "must be seconds >= 0"
            raise InputError(path, f"latency.{k}", rule, json.dumps(v)[:80])
        scalars[k] = float(v)
    waits = raw.get("cold_start_s", {})
    ok = isinstance(waits, dict) and all(
        isinstance(v, int | float) and not isinstance(v, bool) and 0.0 <= v < float("inf")
        for v in waits.values()
    )
    if not ok:
        rule = "must map engine/vendor/warm-up to seconds >= 0"
        raise InputError(path, "latency.cold_start_s", rule, json.dumps(waits)[:80])
    return LatencyParams(**scalars, cold_start_s={str(k): float(v) for k, v in waits.items()})


def _accept_rate(engine: dict[str, Any]) -> float:
    """The engine's acceptance rate; a file written before there was one (it held the tokens per
    step at the default depth, ``mtp_accept_tokens``) gives the rate that reproduces them."""
    if "mtp_accept_rate" in engine:
        return float(engine["mtp_accept_rate"])
    tokens, drafts = float(engine["mtp_accept_tokens"]), float(engine["mtp_draft_tokens"])
    lo, hi = 0.0, 1.0
    for _ in range(60):  # tokens per step grow with the rate: bisect
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mtp_tokens_per_step(mid, drafts) < tokens else (lo, mid)
    return 0.5 * (lo + hi)


def params_to_json(params: PerfParams) -> str:
    """The calibration file's text (strict JSON: a figure no run measured is null)."""
    return json.dumps(params_to_dict(params), indent=2, allow_nan=False)


def params_to_dict(params: PerfParams) -> dict[str, Any]:
    """What a calibration file holds, as JSON values: :func:`params_from_dict` reads it back."""
    scalars = {k: v for k, v in asdict(params).items() if k not in SECTIONS}
    engines = {
        n: {
            "kv_precision": e.kv_precision.value,
            "mtp_draft_tokens": e.mtp_draft_tokens,
            "speed": e.speed,
            "mtp_accept_rate": e.mtp_accept_rate,
            "prefill_chunk_per_instance": e.prefill_chunk_per_instance,
        }
        for n, e in params.engines.items()
    }
    latency = asdict(params.latency)
    out = {
        "params": scalars,
        "kernels": params.kernels,
        "engines": engines,
        "latency": latency,
        "power": asdict(params.power),
        "provenance": params.provenance,
    }
    return out
