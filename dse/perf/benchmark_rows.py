"""Benchmark-style deployments described by the columns of ``inferencex_calibration.csv``.

The normalisation rules of that file (its ``gpus_used_for_normalization_note`` column):

* aggregated rows use ``TP`` GPUs (the ``num_*_gpu`` columns there hold TP x EP and are ignored);
* disaggregated rows use prefill + decode GPUs; input throughput is per prefill GPU, output per
  decode GPU; ``*_num_workers`` instances of ``num_*_gpu / workers`` GPUs each. Rows with 0
  workers are refused: their per-pool throughputs do not add up to their total under any split;
* ``isl``/``osl`` are nominal: each request's lengths are uniform on 80-100% of nominal, so the
  means are 0.9 x nominal;
* interactivity is 1 / TPOT.

Beyond that file, a disaggregated row may describe attention-FFN disaggregated decode with the
optional columns ``num_ffn_gpu``, ``ffn_num_workers`` and ``ffn_ep`` (:data:`AFD_COLUMNS`): the
decode columns then describe the attention pool, and these the expert pool. Output throughput is
per decode GPU of both pools.

Five engine settings are optional columns (:data:`ENGINE_COLUMNS`); empty means the default:

* ``decode_max_running_requests``: the engine's cap on the requests one decode instance (one
  instance in an aggregated row) runs at once (SGLang's ``--max-running-requests``, vLLM's
  ``--max-num-seqs``, TRT-LLM's ``max_batch_size``); by default the engine's own
  (:func:`engine_running_cap`): SGLang with MTP runs 48 an instance, vLLM 1,024 a data-parallel
  rank (256 on a GPU under 70 GiB or an A100), TRT-LLM 2,048 an attention-DP rank, ATOM 512 a
  data-parallel rank; SGLang without MTP only the KV cache caps. Requests beyond it wait for a slot;
* ``mtp_draft_tokens``: draft tokens per speculative step in an MTP row (TRT-LLM's
  ``num_nextn_predict_layers``, SGLang's ``--speculative-num-steps``); by default the engine
  profile's depth. Tokens accepted per step follow from the engine's fitted acceptance rate
  (:func:`~dse.perf.params.mtp_tokens_per_step`);
* ``kv_cache_dtype``: ``bf16``, ``fp8`` or ``fp4``, the KV cache's precision (TRT-LLM's
  ``kv_cache_config.dtype``, SGLang's ``--kv-cache-dtype``); by default the engine profile's;
* ``scheduler_recv_interval``: SGLang's ``--scheduler-recv-interval``, the decode steps between
  two looks of an aggregated instance's scheduler for new requests (it looks after every prefill
  forward and when idle too); by default 1, every step. Disaggregated rows carry it as their
  recipes set it; the simulation applies it to aggregated instances only;
* ``adp_balance_timeout_iters``: TensorRT-LLM's ``attention_dp_config`` with ``enable_balance:
  true``, its ``timeout_iters``: an aggregated attention-DP instance lets context requests into a
  forward once every rank has one, or some rank has none decoding, or after that many
  iterations (``batching_wait_iters`` is taken as 0, as every InferenceX script sets it); by
  default no balancing. Aggregated TensorRT-LLM rows with attention DP only.

:data:`RECIPE_SETTINGS` holds these settings for the InferenceX runs, read from their launch
scripts and recipes; :func:`with_recipe_settings` adds them to the rows they belong to. It also
holds, as ``launched_<column>`` for the columns of :data:`PARALLEL_COLUMNS`, the parallelism a
run's script launched where the reference file's columns record another: InferenceX's configs of
its December 2025 Dynamo-SGLang GB200 runs carry tp, ep and dp-attn as metadata the launch scripts
ignore ("tp, ep, and dp-attn do nothing because they are hardcoded", ``nvidia-master.yaml``), and
the low-latency scripts those runs ran serve tensor-parallel attention and MoE on the 4 GPUs of an
instance (``--tensor-parallel-size 4 --expert-parallel-size 1``, no ``--enable-dp-attention``)
where the rows say attention data parallelism. These replace the row's cells.

One optional column describes the benchmark rather than the deployment, ``benchmark_warmup``
(:data:`WARMUPS`): what the benchmark sent a fresh server before the requests it measured, which
sets how long its first wave waits (:meth:`~dse.perf.params.LatencyParams.cold_start`):

* ``none``: nothing (InferenceX's single-node harness before 2026-01-21);
* ``one-prompt``: ``2 x conc`` copies of one prompt, which the prefix cache serves after the
  first, so the batch shapes of real traffic stay new (its ``benchmark_serving.py
  --num-warmups``, since InferenceX commit d053ae24e of 2026-01-21); the default aggregated;
* ``random``: a whole run of ``2 x conc`` random prompts at the benchmark's concurrency
  (srt-slurm's ``sa-bench``, which InferenceX's multi-node runs use); the default disaggregated.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dse.catalog import Catalog, Hardware, Model
from dse.errors import DseError, InputError, UnknownIdError, Written
from dse.perf.afd import attention_side, ffn_side
from dse.perf.frameworks import (
    ATOM_MAX_NUM_SEQS,
    FRAMEWORK_ENGINE,
    FRAMEWORK_VENDORS,
    SGLANG_SPECULATIVE_RUNNING,
    TRTLLM_MAX_BATCH_SIZE,
    VLLM_LARGE_GPU_GIB,
    VLLM_MAX_NUM_SEQS,
    VLLM_MAX_NUM_SEQS_SMALL_GPU,
)
from dse.perf.kernel_data import image_version
from dse.perf.kernels import OPS
from dse.perf.latency import Latency, simulate_latency
from dse.perf.latency_inputs import Lengths, Load
from dse.perf.latency_tables import EngineTables, tables_of
from dse.perf.params import EngineProfile, PerfParams
from dse.perf.pool import Pool, build_pool
from dse.perf.serving import Deployment, ServingResult, closed_loop
from dse.typed_data import MAX_MAGNITUDE, plausible, row_shape_problem
from dse.units import Precision

INPUT_COLUMNS = (
    "hardware",
    "framework",
    "model",
    "precision",
    "spec_method",
    "disagg",
    "isl",
    "osl",
    "conc",
    "prefill_tp",
    "prefill_ep",
    "prefill_dp_attention",
    "prefill_num_workers",
    "num_prefill_gpu",
    "decode_tp",
    "decode_ep",
    "decode_dp_attention",
    "decode_num_workers",
    "num_decode_gpu",
)
AFD_COLUMNS = ("num_ffn_gpu", "ffn_num_workers", "ffn_ep")  # optional: attention-FFN disaggregation
ENGINE_COLUMNS = (  # optional
    "decode_max_running_requests",
    "mtp_draft_tokens",
    "kv_cache_dtype",
    "scheduler_recv_interval",
    "adp_balance_timeout_iters",
)
# the parallelism columns a run's launch script may contradict (see the module's docstring)
PARALLEL_COLUMNS = tuple(
    f"{side}_{c}" for side in ("prefill", "decode") for c in ("tp", "ep", "dp_attention")
)
LAUNCHED = "launched_"  # RECIPE_SETTINGS's prefix of PARALLEL_COLUMNS as the run launched them
WARMUP_COLUMN = "benchmark_warmup"  # optional: see the module's docstring
WARMUPS = ("none", "one-prompt", "random")
# InferenceX's single-node harness sends warm-up requests from this date (commit d053ae24e)
HARNESS_WARMUP_SINCE = "2026-01-21"
MAX_RECV_INTERVAL = 1000
MAX_DRAFT_TOKENS = 16
RECIPE_SETTINGS = Path(__file__).with_name("recipe_settings.csv")
RECIPE_KEY = (*INPUT_COLUMNS, "date")  # what names a run of the reference file
OUTPUT_COLUMNS = (
    "pred_tput_per_gpu",
    "pred_input_tput_per_gpu",
    "pred_output_tput_per_gpu",
    "pred_intvty_tok_s_user",
    "pred_tpot_mean_ms",
    "pred_ttft_mean_s",
    "pred_hbm_peak_gb_per_gpu",
    "pred_binding_regime",
    # the engine-level simulation of the row's closed loop (dse.perf.latency)
    "pred_ttft_p50_s",
    "pred_ttft_p90_s",
    "pred_ttft_p99_s",
    "pred_tpot_p50_ms",
    "pred_tpot_p99_ms",
    "pred_e2el_p50_s",
    # what the simulation says of its window where it cannot show a steady state (empty: nothing)
    "pred_latency_warning",
    "pred_error",
)
LENGTH_MEAN_OF_NOMINAL = 0.9


@dataclass(frozen=True)
class PoolSpec:
    gpus: float
    attn_tp: float
    ep: float
    instances: float


@dataclass(frozen=True)
class BenchRow:
    """One parsed row: a deployment under a closed-loop load."""

    hardware: str
    model: str
    engine: str
    weight_precision: Precision
    mtp: bool
    disagg: bool
    isl: float
    osl: float
    conc: float
    prefill: PoolSpec | None
    decode: PoolSpec  # the attention pool when ``ffn`` is set
    ffn: PoolSpec | None = None  # attention-FFN disaggregated decode: the expert pool
    decode_max_running: float = float("inf")  # requests one decode instance runs at once
    mtp_draft: float | None = None  # draft tokens per step (MTP rows); None: the engine's default
    kv_precision: Precision | None = None  # the KV cache's precision; None: the engine's
    engine_version: str | None = None  # from the run's ``image``; None: the newest measured
    recv_interval: float = 1.0  # decode steps between the scheduler's looks for new requests
    adp_balance: float = 0.0  # iterations context requests may wait for every attention-DP rank to have one
    warmup: str = "one-prompt"  # what the benchmark sent a fresh server first (:data:`WARMUPS`)

    @property
    def topology(self) -> str:
        return "afd" if self.ffn is not None else "disaggregated" if self.disagg else "aggregated"


def _cell(row: Mapping[str, str], key: str) -> Written:
    """The row's ``key`` as written (a message shows ``7``, not the ``7.0`` it was read as)."""
    return Written(str(row.get(key, "")).strip())


def _num(row: Mapping[str, str], key: str, source: str, *, above_zero: bool = False) -> float:
    """A number cell: finite and >= 0, or > 0 where ``above_zero`` (the rule said is the one that
    holds: a conc of -4 had been told ">= 0", and 0 then "> 0")."""
    raw = str(row.get(key, "")).strip()
    try:
        value = float(raw)
    except ValueError:
        raise InputError(source, key, "must be a number", Written(raw)) from None
    if not np.isfinite(value) or value < 0 or (above_zero and value == 0):
        rule = f"must be a finite number {'>' if above_zero else '>='} 0"
        raise InputError(source, key, rule, Written(raw))
    broken = plausible(value)
    if broken:
        raise InputError(source, key, broken, Written(raw))
    return value


def _cell_value(raw: str) -> object:
    """A cell as the row's parser reads it, to compare two cells by what they say: ``8`` and
    ``8.0``, ``True`` and ``1`` alike (an aggregated row had been refused for saying its prefill
    shape so); a cell no parser takes stays its text, which the parser then refuses."""
    text = raw.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    try:
        return float(text)
    except ValueError:
        return text


def _flag(row: Mapping[str, str], key: str, source: str) -> bool:
    raw = str(row.get(key, "")).strip().lower()
    if raw not in ("true", "false", "1", "0"):
        raise InputError(source, key, "must be True or False", raw)
    return raw in ("true", "1")


def _pool(row: Mapping[str, str], side: str, disagg: bool, source: str, ep_as_given: bool) -> PoolSpec:
    tp = _num(row, f"{side}_tp", source)
    ep = _num(row, f"{side}_ep", source) or 1.0
    dpa = _flag(row, f"{side}_dp_attention", source)
    if tp < 1:
        raise InputError(source, f"{side}_tp", "must be >= 1", _cell(row, f"{side}_tp"))
    if not disagg:
        gpus, instances = tp, 1.0
    else:
        # 0 workers: such rows' per-pool figures do not add up to their total under any split
        why = "must be >= 1 in a disaggregated row (the GPU split between pools is unknown)"
        gpus, instances = _instances(row, side, why, source)
    if tp > gpus:  # (had been read as the instance's GPUs, where the flag is refused)
        raise InputError(
            source, f"{side}_tp", f"must be at most the instance's {gpus:g} GPUs", _cell(row, f"{side}_tp")
        )
    attn_tp = 1.0 if dpa else tp
    if gpus % attn_tp:
        raise InputError(
            source, f"{side}_tp", f"must divide the instance's {gpus:g} GPUs", _cell(row, f"{side}_tp")
        )
    if ep > gpus:  # (had been read as the instance's GPUs, where the flag is refused)
        raise InputError(
            source, f"{side}_ep", f"must be at most the instance's {gpus:g} GPUs", _cell(row, f"{side}_ep")
        )
    if attn_tp < gpus and ep < gpus and not (ep_as_given and ep > 1):
        # attention data-parallel over the instance: a measured run's experts are spread over all
        # its GPUs and every token must reach them (dispatch/combine), whatever its ep column says
        # (some record 1, or one node's); an ep asked for (`dse predict --ep`) is taken as given
        ep = gpus
    ep = min(ep, gpus)
    if gpus % ep:
        raise InputError(
            source, f"{side}_ep", f"must divide the instance's {gpus:g} GPUs", _cell(row, f"{side}_ep")
        )
    return PoolSpec(gpus=gpus, attn_tp=attn_tp, ep=ep, instances=instances)


def _framework(row: Mapping[str, str], hw: Hardware, source: str) -> str:
    """The row's framework, one dse knows that runs on ``hw``'s GPU vendor (:data:`FRAMEWORK_VENDORS`)."""
    fw = str(row.get("framework", "")).strip().lower()
    if fw not in FRAMEWORK_ENGINE:
        raise InputError(source, "framework", f"must be one of {', '.join(sorted(FRAMEWORK_ENGINE))}", fw)
    vendors = FRAMEWORK_VENDORS.get(fw)
    if vendors is not None and hw.vendor not in vendors:
        names = " or ".join({"nvidia": "NVIDIA", "amd": "AMD"}.get(v, v) for v in vendors)
        raise InputError(source, "framework", f"runs on {names} GPUs only, not {hw.id} ({hw.vendor})", fw)
    return fw


def parse_row(
    row: Mapping[str, str], catalog: Catalog, source: str = "row", *, ep_as_given: bool = False
) -> BenchRow:
    """The deployment a row describes. Under data-parallel attention a row's ep is read as the
    measured runs record it (the experts over every GPU of the instance) unless ``ep_as_given``
    (flags that name it: fewer expert ranks than GPUs split each expert)."""
    try:
        hw = catalog.hardware(str(row.get("hardware", "")))
        model = catalog.model(str(row.get("model", "")))
    except UnknownIdError as exc:  # the row names the id: say so, not just "catalog"
        raise UnknownIdError(exc.field, str(exc.value), exc.valid, source=source) from None
    fw = _framework(row, hw, source)
    _check_date(row, source)
    prec_raw = str(row.get("precision", "")).strip().lower() or model.serving_precision.value
    if prec_raw not in ("fp4", "fp8", "bf16"):
        raise InputError(source, "precision", "must be one of fp4, fp8, bf16", prec_raw)
    if prec_raw == "fp4" and (why := model.fp4_problem()) is not None:  # as dse predict refuses it
        raise InputError(source, "precision", why, prec_raw)
    spec = str(row.get("spec_method", "none")).strip().lower() or "none"
    if spec not in ("mtp", "none"):
        raise InputError(source, "spec_method", "must be mtp or none", spec)
    if spec == "mtp" and (why := model.no_mtp()) is not None:
        raise InputError(source, "spec_method", why, spec)
    disagg = _flag(row, "disagg", source)
    isl, osl, conc = (_num(row, k, source, above_zero=True) for k in ("isl", "osl", "conc"))
    for key, tokens in (("isl", isl), ("osl", osl)):  # the simulation runs whole tokens, one at least:
        if tokens < 1:  # a fraction had been priced so by the closed form and as one token simulated
            raise InputError(source, key, "must be at least 1 (tokens)", _cell(row, key))
    if not float(conc).is_integer():  # the benchmark's clients, each a whole request in flight
        raise InputError(source, "conc", "must be a whole number of clients", _cell(row, "conc"))
    if isl + osl > model.max_context:  # the larger names the field (an --osl of 1e9 had named --isl)
        longer, other, tokens = ("osl", "isl", isl) if osl > isl else ("isl", "osl", osl)
        fit = f"with {other} ({tokens:g}) must fit {model.id}'s context of {model.max_context:,} tokens"
        raise InputError(source, longer, fit, _cell(row, longer))
    if not disagg:  # one instance prefills and decodes: the prefill columns must describe it too
        for col in ("tp", "ep", "dp_attention"):
            pre, dec = str(row.get(f"prefill_{col}", "")).strip(), str(row.get(f"decode_{col}", "")).strip()
            if pre:  # a cell no parser takes is said so first (banana had been told to equal True)
                (_flag if col == "dp_attention" else _num)(row, f"prefill_{col}", source)
            if pre and _cell_value(pre) != _cell_value(dec):
                same = f"must equal decode_{col} ({dec}) in an aggregated row"
                raise InputError(source, f"prefill_{col}", same, Written(pre))
    decode = _pool(row, "decode", disagg, source, ep_as_given)
    if not disagg:
        _check_replicas(row, decode.gpus, source)
    prefill = _pool(row, "prefill", disagg, source, ep_as_given) if disagg else None
    for side, pool in (("decode", decode), ("prefill", prefill)):
        if pool is not None and (rule := model.tp_problem(pool.attn_tp)) is not None:
            asked = _num(row, f"{side}_tp", source)  # as given: the instance may cap it
            if pool.attn_tp < asked:
                rule = f"is capped at the instance's {pool.gpus:g} GPUs, and {pool.attn_tp:g} {rule}"
            raise InputError(source, f"{side}_tp", rule, _cell(row, f"{side}_tp"))
    ffn = _ffn_pool(row, disagg, model, source)
    for side, pool in (("decode", decode), ("prefill", prefill), ("ffn", ffn)):
        _check_expert_groups(row, side, pool, model, source)
    return BenchRow(
        hardware=hw.id,
        model=model.id,
        engine=FRAMEWORK_ENGINE[fw],
        weight_precision=Precision(prec_raw),
        mtp=spec == "mtp",
        disagg=disagg,
        isl=isl * LENGTH_MEAN_OF_NOMINAL,
        osl=osl * LENGTH_MEAN_OF_NOMINAL,
        conc=conc,
        prefill=prefill,
        decode=decode,
        ffn=ffn,
        decode_max_running=_running_cap(row, source, FRAMEWORK_ENGINE[fw], spec == "mtp", decode, hw),
        mtp_draft=_draft_tokens(row, spec == "mtp", source),
        kv_precision=_kv_dtype(row, source),
        engine_version=image_version(str(row.get("image") or "")),
        recv_interval=_recv_interval(row, FRAMEWORK_ENGINE[fw], source),
        adp_balance=_adp_balance(row, FRAMEWORK_ENGINE[fw], disagg, decode, source),
        warmup=_warmup(row, disagg, source),
    )


def _warmup(row: Mapping[str, str], disagg: bool, source: str) -> str:
    """``benchmark_warmup``: one of :data:`WARMUPS`, or empty (``random`` disaggregated, as
    InferenceX's multi-node harness; ``one-prompt`` aggregated, as its single-node one)."""
    raw = str(row.get(WARMUP_COLUMN) or "").strip().lower()
    if not raw:
        return "random" if disagg else "one-prompt"
    if raw not in WARMUPS:
        raise InputError(source, WARMUP_COLUMN, f"must be one of {', '.join(WARMUPS)} (or empty)", raw)
    return raw


def _recv_interval(row: Mapping[str, str], engine: str, source: str) -> float:
    """``scheduler_recv_interval``: a whole number from 1 to :data:`MAX_RECV_INTERVAL` in an SGLang
    row, or empty (1). TensorRT-LLM, vLLM and ATOM have no such setting: it had slowed a TensorRT-LLM
    prediction's TTFT from 0.15 to 0.50 s."""
    raw = str(row.get(ENGINE_COLUMNS[3]) or "").strip()
    if raw and engine != "sglang":
        rule = f"is SGLang's setting alone: the {engine} engine has none (leave it out)"
        raise InputError(source, ENGINE_COLUMNS[3], rule, Written(raw))
    return _steps(raw, ENGINE_COLUMNS[3], "decode steps", source) if raw else 1.0


def _steps(raw: str, key: str, unit: str, source: str) -> float:
    """``raw`` as a whole number of steps from 1 to :data:`MAX_RECV_INTERVAL`, or one line naming ``key``."""
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (np.isfinite(value) and value == int(value) and 1 <= value <= MAX_RECV_INTERVAL):
        raise InputError(
            source, key, f"must be a whole number from 1 to {MAX_RECV_INTERVAL} ({unit})", Written(raw)
        )
    return value


def _adp_balance(row: Mapping[str, str], engine: str, disagg: bool, decode: PoolSpec, source: str) -> float:
    """``adp_balance_timeout_iters``: a whole number from 1 to :data:`MAX_RECV_INTERVAL` in an
    aggregated TensorRT-LLM row with attention DP, or empty (no balancing, 0)."""
    key = ENGINE_COLUMNS[4]
    raw = str(row.get(key) or "").strip()
    if not raw:
        return 0.0
    if engine != "trt" or disagg or decode.attn_tp >= decode.gpus:
        rule = "only an aggregated TensorRT-LLM (trt) row with attention DP balances its ranks"
        raise InputError(source, key, rule, Written(raw))
    return _steps(raw, key, "iterations", source)


def _kv_dtype(row: Mapping[str, str], source: str) -> Precision | None:
    """``kv_cache_dtype``: bf16, fp8 or fp4, or empty (the engine's)."""
    key = ENGINE_COLUMNS[2]
    raw = str(row.get(key) or "").strip().lower()
    if not raw:
        return None
    try:
        return Precision(raw)
    except ValueError:
        raise InputError(source, key, "must be bf16, fp8 or fp4 (or empty: the engine's)", raw) from None


def _check_date(row: Mapping[str, str], source: str) -> None:
    """A row's ``date``, empty or a calendar date written YYYY-MM-DD: it is compared as text with
    :data:`HARNESS_WARMUP_SINCE` and is a key of the recipe settings ("yesterday" had been read as
    after it and the row fitted, "12/01/2025" as before it)."""
    text = str(row.get("date") or "").strip()
    if not text:
        return
    try:
        ok = bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", text)) and bool(dt.date.fromisoformat(text))
    except ValueError:
        ok = False
    if not ok:
        raise InputError(source, "date", "must be a date YYYY-MM-DD (empty where not known)", text)


def with_recipe_settings(
    rows: Sequence[Mapping[str, str]], path: Path = RECIPE_SETTINGS
) -> list[dict[str, str]]:
    """``rows`` (of ``inferencex_calibration.csv``) with the engine settings their runs used:
    :data:`ENGINE_COLUMNS` from ``path`` where a row of it names the same run (every input
    column and the date equal); and with ``benchmark_warmup`` ``none`` where the run is
    aggregated (InferenceX's single-node harness) and dated before :data:`HARNESS_WARMUP_SINCE`.
    Cells the row has already are kept, but for :data:`PARALLEL_COLUMNS`: where ``path`` says
    what the run's script launched (``launched_<column>``), that replaces the row's cell. A run
    ``path`` does not name, SGLang with MTP, has an empty cap read as ``none`` (only the KV cache
    caps it), not as the engine's default of 48: a launch that is not known may well have set one
    (every multi-node SGLang recipe with MTP found sets it, and the runs at 1,024 clients on one
    decode instance finish in 24 s where 48 at a time would take minutes)."""
    with open(path, newline="", encoding="utf-8") as fh:
        known = {tuple(r[c] for c in RECIPE_KEY): r for r in csv.DictReader(fh)}
    out = []
    for row in rows:
        settings = known.get(tuple(str(row.get(c, "")) for c in RECIPE_KEY), {})
        extra = {c: settings[c] for c in ENGINE_COLUMNS if settings.get(c) and not str(row.get(c) or "")}
        if not settings and not str(row.get(ENGINE_COLUMNS[0]) or "") and _speculative_sglang(row):
            extra[ENGINE_COLUMNS[0]] = NO_CAP  # a launch not known: its cap neither (not the engine's own)
        single_node = str(row.get("disagg", "")).strip().lower() in ("false", "0")
        date = str(row.get("date") or "")
        if single_node and date and date < HARNESS_WARMUP_SINCE and not row.get(WARMUP_COLUMN):
            extra[WARMUP_COLUMN] = "none"
        launched = {c: settings[LAUNCHED + c] for c in PARALLEL_COLUMNS if settings.get(LAUNCHED + c)}
        out.append({**row, **extra, **launched})
    return out


def _speculative_sglang(row: Mapping[str, str]) -> bool:
    """An SGLang row with MTP: the one whose empty cap the engine's own default fills
    (:func:`engine_running_cap`)."""
    engine = FRAMEWORK_ENGINE.get(str(row.get("framework", "")).strip().lower())
    return engine == "sglang" and str(row.get("spec_method", "")).strip().lower() == "mtp"


def _draft_tokens(row: Mapping[str, str], mtp: bool, source: str) -> float | None:
    """``mtp_draft_tokens``: a whole number from 1 to :data:`MAX_DRAFT_TOKENS` in an MTP row,
    empty (the engine's default) or 0 in a row without MTP."""
    key = ENGINE_COLUMNS[1]
    raw = str(row.get(key) or "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not mtp:
        if value != 0:
            raise InputError(
                source, key, "must be empty or 0 in a row without MTP (spec_method none)", Written(raw)
            )
        return None
    if not (np.isfinite(value) and value == int(value) and 1 <= value <= MAX_DRAFT_TOKENS):
        raise InputError(
            source, key, f"must be a whole number from 1 to {MAX_DRAFT_TOKENS} with MTP", Written(raw)
        )
    return value


def engine_running_cap(engine: str, mtp: bool, decode: PoolSpec, hardware: Hardware) -> float:
    """The requests one decode instance runs at once when its launch sets no cap, as the engine
    caps them on its own (:func:`engine_cap_per_rank`, a whole share or a whole cap per
    attention-DP rank); inf: only the KV cache does (SGLang without speculative decoding)."""
    per_rank = engine_cap_per_rank(engine, mtp, decode, hardware)
    return float("inf") if per_rank is None else float(per_rank * _ranks(decode))


def engine_cap_per_rank(engine: str, mtp: bool, decode: PoolSpec, hardware: Hardware) -> int | None:
    """Each attention-DP rank's running-request cap where the launch sets none; None: only the KV
    cache caps. SGLang with speculative decoding shares :data:`SGLANG_SPECULATIVE_RUNNING` among
    the ranks (a whole share each, at least one); vLLM, TRT-LLM and ATOM run a scheduler a rank,
    each with the whole default (:data:`VLLM_MAX_NUM_SEQS`, :data:`TRTLLM_MAX_BATCH_SIZE`,
    :data:`ATOM_MAX_NUM_SEQS`)."""
    if engine == "sglang":
        return max(1, SGLANG_SPECULATIVE_RUNNING // _ranks(decode)) if mtp else None
    if engine == "vllm":
        return vllm_max_num_seqs(hardware)
    return {"trt": TRTLLM_MAX_BATCH_SIZE, "atom": ATOM_MAX_NUM_SEQS}.get(engine)


def vllm_max_num_seqs(hardware: Hardware) -> int:
    """vLLM's ``--max-num-seqs`` where not given on ``hardware``: :data:`VLLM_MAX_NUM_SEQS` on a GPU
    of :data:`VLLM_LARGE_GPU_GIB` or more (the memory the engine sees) other than an A100 (its
    catalog id standing for the device name vLLM reads), else :data:`VLLM_MAX_NUM_SEQS_SMALL_GPU`."""
    large = hardware.hbm.usable_gib >= VLLM_LARGE_GPU_GIB and "a100" not in hardware.id.lower()
    return VLLM_MAX_NUM_SEQS if large else VLLM_MAX_NUM_SEQS_SMALL_GPU


ENGINE_CAP_NAMES = {
    "sglang": "SGLang's own cap with MTP",
    "vllm": "vLLM's own --max-num-seqs",
    "trt": "TensorRT-LLM's own max_batch_size",
    "atom": "ATOM's own --max-num-seqs",
}
"""What :func:`engine_running_cap` takes for each engine, as ``dse predict`` names it."""


def engine_cap_words(bench: BenchRow) -> str:
    """How a prediction names the cap :func:`engine_running_cap` gave ``bench``: the engine's
    setting, and where the instance has several attention-DP ranks, what each rank runs."""
    name = ENGINE_CAP_NAMES.get(bench.engine, f"{bench.engine}'s own cap")
    ranks = _ranks(bench.decode)
    if ranks == 1:
        return name
    return f"{name}, {bench.decode_max_running / ranks:g} on each of {ranks} attention-DP ranks"


def _ranks(decode: PoolSpec) -> int:
    """The attention-DP ranks of one decode instance (1 without attention DP)."""
    return max(1, round(decode.gpus / decode.attn_tp))


NO_CAP = "none"
"""``decode_max_running_requests`` of a launch that sets a cap only its KV cache reaches (or, in
:func:`with_recipe_settings`, one whose cap is not known)."""


def _running_cap(
    row: Mapping[str, str], source: str, engine: str, mtp: bool, decode: PoolSpec, hardware: Hardware
) -> float:
    """``decode_max_running_requests``: a whole number from 1 to 1e12, ``none`` (only the KV
    cache caps), or empty (the engine's own, :func:`engine_running_cap`)."""
    key = ENGINE_COLUMNS[0]
    raw = str(row.get(key) or "").strip()
    if not raw:
        return engine_running_cap(engine, mtp, decode, hardware)
    if raw.lower() == NO_CAP:
        return float("inf")
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (np.isfinite(value) and value >= 1 and value == int(value)) or plausible(value):
        raise InputError(
            source,
            key,
            f"must be a whole number from 1 to {MAX_MAGNITUDE:g} (requests per instance), or {NO_CAP}",
            Written(raw),
        )
    return value


def _check_replicas(row: Mapping[str, str], gpus: float, source: str) -> None:
    """An aggregated row's GPUs (``num_decode_gpu``, where given) are whole replicas of its
    ``gpus``-GPU instance (the measured runs have 8, 16 and 64 of 4- and 8-GPU instances), and
    its ``decode_num_workers``, where not 0 (the runs' own), count those replicas: a row of 0
    GPUs, or 3 workers on one TP8 instance's 8, had been predicted as if neither were written."""
    cell = str(row.get("num_decode_gpu", "")).strip()
    if not cell:
        return
    total = _num(row, "num_decode_gpu", source)
    if total < gpus or total % gpus:
        rule = f"must be a whole multiple of the instance's {gpus:g} GPUs (decode_tp) in an aggregated row"
        raise InputError(source, "num_decode_gpu", rule, _cell(row, "num_decode_gpu"))
    if str(row.get("decode_num_workers", "")).strip():
        workers = _num(row, "decode_num_workers", source)
        if workers and workers * gpus != total:
            rule = f"must be 0 or the replicas of the instance ({total / gpus:g}) in an aggregated row"
            raise InputError(source, "decode_num_workers", rule, _cell(row, "decode_num_workers"))


def _instances(row: Mapping[str, str], side: str, no_workers: str, source: str) -> tuple[float, float]:
    """(GPUs per instance, instances) of a pool: ``num_<side>_gpu`` split into
    ``<side>_num_workers`` whole instances; ``no_workers`` is the rule when there are none."""
    total = _num(row, f"num_{side}_gpu", source)
    workers = _num(row, f"{side}_num_workers", source)
    if workers < 1:
        raise InputError(source, f"{side}_num_workers", no_workers, _cell(row, f"{side}_num_workers"))
    gpus = total / workers
    if gpus < 1 or gpus != int(gpus):
        raise InputError(
            source,
            f"num_{side}_gpu",
            f"must split into {workers:g} whole instances",
            _cell(row, f"num_{side}_gpu"),
        )
    return gpus, workers


def _check_expert_groups(
    row: Mapping[str, str], side: str, pool: PoolSpec | None, model: Model, source: str
) -> None:
    """An expert group per routed expert at most: more expert-parallel ranks than experts leave
    ranks without one (Mixtral's 8 over 16 GPUs of data-parallel attention), which no engine runs
    (an expert over several GPUs is expert TP: fewer groups, ``--ep 8`` on those 16 GPUs)."""
    if pool is None or model.moe is None or pool.ep <= model.moe.routed_experts:
        return
    written = _cell(row, f"{side}_ep")
    shown = written if _cell_value(written) == pool.ep else Written(f"{pool.ep:g}")  # as run
    rule = f"must be at most {model.id}'s {model.moe.routed_experts} routed experts"
    if shown is not written:  # the row's ep was read as every GPU of the instance
        rule += f" (the expert groups of its {pool.gpus:g} GPUs under data-parallel attention)"
    raise InputError(source, f"{side}_ep", rule, shown)


def _ffn_pool(row: Mapping[str, str], disagg: bool, model: Model, source: str) -> PoolSpec | None:
    """The expert pool of an attention-FFN disaggregated row, or None (no or empty AFD columns);
    refused for a model without routed experts (it had been priced on the dense FFNs)."""
    if not str(row.get("num_ffn_gpu") or "").strip() or _num(row, "num_ffn_gpu", source) == 0:
        return None
    if not disagg:
        raise InputError(
            source, "num_ffn_gpu", "needs a disaggregated row (disagg True)", _cell(row, "num_ffn_gpu")
        )
    if model.moe is None:
        rule = f"needs a model with routed experts to split from attention ({model.id} has none)"
        raise InputError(source, "num_ffn_gpu", rule, _cell(row, "num_ffn_gpu"))
    gpus, workers = _instances(row, "ffn", "must be >= 1 with num_ffn_gpu", source)
    ep = _num(row, "ffn_ep", source) if str(row.get("ffn_ep") or "").strip() else gpus
    if not 1 <= ep <= gpus or gpus % ep:
        raise InputError(
            source,
            "ffn_ep",
            f"must divide the instance's {gpus:g} GPUs",
            _cell(row, "ffn_ep") or Written(f"{ep:g}"),
        )
    return PoolSpec(gpus=gpus, attn_tp=1.0, ep=ep, instances=workers)


def evaluate(rows: Sequence[BenchRow], catalog: Catalog, params: PerfParams) -> ServingResult:
    """Serving figures for rows of one model and one topology (:attr:`BenchRow.topology`)."""
    return closed_loop(deployment_of(rows, catalog, params), params, np.array([r.conc for r in rows]))


def settings_of(row: BenchRow, engine: EngineProfile) -> tuple[Precision, float]:
    """(KV precision, draft tokens per step) the row runs with: its own, else the engine's."""
    kv = engine.kv_precision if row.kv_precision is None else row.kv_precision
    if not row.mtp:
        return kv, 0.0
    return kv, float(engine.mtp_draft_tokens if row.mtp_draft is None else row.mtp_draft)


def deployment_of(rows: Sequence[BenchRow], catalog: Catalog, params: PerfParams) -> Deployment:
    """The deployments of rows of one model and one topology, one element per row."""
    model = catalog.model(rows[0].model)
    hws = [catalog.hardware(r.hardware) for r in rows]
    engines = [params.engine(r.engine) for r in rows]
    settings = [settings_of(r, e) for r, e in zip(rows, engines, strict=True)]
    kvp = [kv for kv, _ in settings]
    wp = [r.weight_precision for r in rows]

    def pool(specs: Sequence[PoolSpec]):  # type: ignore[no-untyped-def]
        return build_pool(
            model,
            hws,
            gpus=[s.gpus for s in specs],
            attn_tp=[s.attn_tp for s in specs],
            ep=[s.ep for s in specs],
            weight_precision=wp,
            kv_precision=kvp,
            engines=params.kernel_engines([r.engine for r in rows]),
            engine_versions=[r.engine_version for r in rows],
        )

    disagg = rows[0].disagg
    draft = np.array([n for _, n in settings])
    pre = [r.prefill for r in rows] if disagg else None
    ffn = [r.ffn for r in rows] if rows[0].ffn is not None else None
    decode = pool([r.decode for r in rows])
    return Deployment(
        prefill=pool(pre) if pre else None,  # type: ignore[arg-type]
        decode=attention_side(decode) if ffn else decode,
        prefill_instances=np.array([r.prefill.instances if r.prefill else 1.0 for r in rows]),
        decode_instances=np.array([r.decode.instances for r in rows]),
        isl=np.array([r.isl for r in rows]),
        osl=np.array([r.osl for r in rows]),
        speed=np.array([e.speed for e in engines]),
        draft_tokens=draft,
        accept_tokens=np.array([e.accept_tokens(n) for e, n in zip(engines, draft, strict=True)]),
        chunk_per_instance=np.array([e.prefill_chunk_per_instance for e in engines]),
        ffn=ffn_side(pool(ffn)) if ffn else None,  # type: ignore[arg-type]
        ffn_instances=np.array([f.instances for f in ffn]) if ffn else None,  # type: ignore[union-attr]
        max_batch=np.array([r.decode_max_running for r in rows]),
        recv_interval=np.array([r.recv_interval for r in rows]),
        adp_balance=np.array([r.adp_balance for r in rows]),
    )


def kernel_sources(row: BenchRow, catalog: Catalog, params: PerfParams) -> dict[str, dict[str, str]]:
    """Which source priced each op of each of the row's pools: ``measured <GPU tables> <engine>
    <version>`` or ``datasheet``, by pool (prefill, decode, ffn; an aggregated row's one pool is
    ``instance``) and op (:data:`~dse.perf.kernels.OPS`), the ops the pool runs only
    (:func:`_ops_run`)."""
    d = deployment_of([row], catalog, params)
    out = {}
    decode = "decode" if d.prefill is not None else "instance"  # an aggregated instance runs both
    for name, pool in (("prefill", d.prefill), (decode, d.decode), ("ffn", d.ffn)):
        if pool is not None:
            k = pool.kernels if params.kernels == "measured" else None
            source = k.sources[0] if k is not None else {op: "datasheet" for op in OPS}
            out[name] = {op: source[op] for op in _ops_run(pool, name)}
    return out


def _ops_run(pool: Pool, name: str) -> tuple[str, ...]:
    """The ops of :data:`~dse.perf.kernels.OPS` a pool ``name`` runs: the dense GEMMs always; the
    routed-expert MoE where it holds experts (not a dense model, nor an attention-FFN deployment's
    attention pool); attention where it holds attention (not the expert pool), of its phase: a
    prefill pool's prefill, a decode pool's decode, an aggregated instance's both."""
    m = pool.model
    phases = {"prefill": ("prefill_attention",), "decode": ("decode_attention",)}
    attention = phases.get(name, ("decode_attention", "prefill_attention")) if m.q_heads > 0 else ()
    return ("gemm",) + (("moe",) if m.experts_per_token > 0 else ()) + attention


def predict_rows(
    rows: Sequence[Mapping[str, str]],
    catalog: Catalog,
    params: PerfParams,
    source: str = "input",
    lines: Sequence[int] | None = None,
) -> list[dict[str, object]]:
    """Each input row with the ``pred_*`` columns added; a row that cannot be modelled gets
    empty predictions and a ``pred_error`` message naming it: ``<source> line <L>`` with the
    file's ``lines`` (:func:`~dse.typed_data.read_csv`), else ``<source> row <i>`` from 1."""
    out: list[dict[str, object]] = [dict(r) for r in rows]
    parsed: dict[tuple[str, str], list[tuple[int, BenchRow]]] = {}
    where_of: dict[int, str] = {}
    for i, row in enumerate(rows):
        for col in OUTPUT_COLUMNS:
            out[i][col] = ""
        where = where_of[i] = f"{source} row {i + 1}" if lines is None else f"{source} line {lines[i]}"
        shape = row_shape_problem(row)
        if shape:
            out[i]["pred_error"] = f"{where}: {shape}"
            continue
        try:
            br = parse_row(row, catalog, source=where)
        except DseError as exc:
            out[i]["pred_error"] = str(exc)
            continue
        parsed.setdefault((br.model, br.topology), []).append((i, br))
    for group in parsed.values():
        try:
            _fill(out, group, evaluate([b for _, b in group], catalog, params), where_of)
        except DseError:
            for i, b in group:  # find the rows that cannot be evaluated, keep the others
                try:
                    _fill(out, [(i, b)], evaluate([b], catalog, params), where_of)
                except DseError as exc:
                    out[i]["pred_error"] = str(exc)
        _fill_latency(out, group, catalog, params, where_of)
    return out


def benchmark_lengths(row: BenchRow) -> Lengths:
    """The row's request lengths as its benchmark drew them: uniform on 80-100% of nominal."""
    return Lengths(row.isl / LENGTH_MEAN_OF_NOMINAL, row.osl / LENGTH_MEAN_OF_NOMINAL)


def latency_of(
    row: BenchRow,
    catalog: Catalog,
    params: PerfParams,
    load: Load | None = None,
    lengths: Lengths | None = None,
    requests: int = 0,
    seed: int = 0,
    fresh: bool = True,
    loop_s: float | None = None,
) -> Latency:
    """The row's deployment simulated request by request (:mod:`dse.perf.latency`); by default
    under its benchmark's load: a closed loop at its concurrency with its lengths, on a fresh
    server (``fresh``: its first wave waits the engine's cold start on the row's GPUs); ``loop_s``:
    :func:`~dse.perf.latency.simulate_latency`'s."""
    lengths = benchmark_lengths(row) if lengths is None else lengths
    load = Load("closed", concurrency=row.conc) if load is None else load
    tables = latency_tables_of(row, catalog, params, lengths)
    cold = cold_start_of(row, catalog, params) if fresh else 0.0
    return simulate_latency(
        tables, load, lengths, requests=requests, seed=seed, cold_start_s=cold, loop_s=loop_s
    )


def latency_tables_of(
    row: BenchRow, catalog: Catalog, params: PerfParams, lengths: Lengths | None = None
) -> EngineTables:
    """The row's deployment as the latency simulation reads it, for its benchmark's lengths by default."""
    lengths = benchmark_lengths(row) if lengths is None else lengths
    return tables_of(deployment_of([row], catalog, params), params, [row.engine], [lengths])[0]


def cold_start_of(row: BenchRow, catalog: Catalog, params: PerfParams) -> float:
    """Seconds a closed loop's first wave waits on a fresh server of the row's engine and GPUs
    (:attr:`~dse.perf.params.LatencyParams.cold_start_s`)."""
    return params.latency.cold_start(row.engine, catalog.hardware(row.hardware).vendor, row.warmup)


def _fill_latency(
    out: list[dict[str, object]],
    group: Sequence[tuple[int, BenchRow]],
    catalog: Catalog,
    params: PerfParams,
    where_of: Mapping[int, str],
) -> None:
    for i, row in group:
        if out[i]["pred_error"]:
            continue
        lat = latency_of(row, catalog, params)
        s = lat.summary()
        # (the warning dse predict prints for the same row had been dropped: a row at 10 million
        # clients read 2,109 s of TTFT p50 with nothing said)
        out[i]["pred_latency_warning"] = f"{where_of[i]}: {lat.warning}" if lat.warning else ""
        figures = (("ttft_p50_s", 4), ("ttft_p90_s", 4), ("ttft_p99_s", 4), ("tpot_p50_ms", 3),
                   ("tpot_p99_ms", 3), ("e2el_p50_s", 3))  # fmt: skip
        # none where there is none (a TPOT of one-token answers): empty, as JSON's null and text's "-"
        out[i].update({f"pred_{k}": round(s[k], d) if math.isfinite(s[k]) else "" for k, d in figures})


def unfit_reason(res: ServingResult, j: int) -> str:
    """Why deployment ``j`` serves nothing (its throughput is NaN): what its weights need."""
    return f"weights need {res.hbm_peak_bytes_per_gpu[j] / 1e9:.1f} GB per GPU"


def _fill(
    out: list[dict[str, object]],
    group: Sequence[tuple[int, BenchRow]],
    res: ServingResult,
    where_of: Mapping[int, str],
) -> None:
    for j, (i, _) in enumerate(group):
        if not np.isfinite(res.tput_per_gpu[j]):  # no predictions, the reason named by its line
            out[i]["pred_error"] = f"{where_of[i]}: {res.regime[j]}: {unfit_reason(res, j)}"
            continue
        out[i].update(
            {
                "pred_tput_per_gpu": round(float(res.tput_per_gpu[j]), 3),
                "pred_input_tput_per_gpu": round(float(res.input_tput_per_prefill_gpu[j]), 3),
                "pred_output_tput_per_gpu": round(float(res.output_tput_per_decode_gpu[j]), 3),
                "pred_intvty_tok_s_user": round(float(res.intvty_tok_s_user[j]), 3),
                "pred_tpot_mean_ms": round(float(res.tpot_s[j]) * 1e3, 3),
                "pred_ttft_mean_s": round(float(res.ttft_s[j]), 4),
                "pred_hbm_peak_gb_per_gpu": round(float(res.hbm_peak_bytes_per_gpu[j]) / 1e9, 2),
                "pred_binding_regime": str(res.regime[j]),
            }
        )
