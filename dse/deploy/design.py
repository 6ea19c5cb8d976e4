"""What the launch files need of a study's design: its pools as engines launch them
(:class:`PoolLaunch`), the engine settings the study priced them with (:class:`Design`), read from
a trial's record.

A grid study's trial launches the model of its own point (its ``x_model``); a design on the
study's what-if hardware (``[[variants]]``) is refused, as no such GPU exists to launch it on.
Each decode instance is capped at the batch its pool was sized at: the most sequences it may run
and still meet the TPOT target, which is what the study priced (the search's ``max_batch`` only
bounds it).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from dse.catalog import Catalog
from dse.errors import DseError, InputError, NoBestDesign, NoFeasibleDesign
from dse.perf.params import PerfParams
from dse.study.api import StudyResults
from dse.study.best import running_cap
from dse.study.spec import StudySpec
from dse.units import GB, GIB, Precision

SRC = "dse deploy"

# the KV transfer buffer holds prompts up to this many times the workload's longest mean prompt
# (the study knows means only: the README says so, and where to raise it for longer prompts)
PROMPT_ROOM = 2.0


@dataclass(frozen=True)
class PoolLaunch:
    """One pool of the design as an engine launches it."""

    role: str  # prefill, decode or mixed
    hardware: str
    gpus: int  # per instance
    attn_tp: int  # 1: data-parallel attention over all the instance's GPUs
    ep: int
    instances: int
    gpus_per_host: int
    max_running: int | None  # per instance; None: the engine's default
    chunk_tokens: int | None
    pp: int = 1  # pipeline stages (prefill), each of gpus / pp GPUs with attn_tp and ep inside
    label: str = ""  # its files' name; "": the role's (Design gives pools sharing one their own)
    vendor: str = "nvidia"  # the GPU's maker, as the hardware catalog names it
    # the KV one instance rests between turns below HBM, GB: in its hosts' DRAM, on their NVMe, in
    # the network store (the trial's pool figures over its instances; 0: none there)
    kv_dram_gb: float = 0.0
    kv_nvme_gb: float = 0.0
    kv_network_gb: float = 0.0
    # the GPUs of an instance that hold distinct shares of its KV (attention-DP ranks times the
    # useful head split, stages too); each of the others holds a copy (0: every GPU a share)
    kv_gpus: int = 0
    # GB of a GPU's HBM its engine's KV pool may take at most (its HBM less the weights): what a
    # host tier that mirrors the GPU's pool must hold beside the resting KV (0: not known)
    hbm_kv_gb: float = 0.0
    host_gb_per_gpu: float = 0.0  # the DRAM a GPU's host has for it (the hardware catalog's; 0: not known)

    @property
    def tp(self) -> int:
        """The engine's TP size: a stage's GPUs."""
        return self.gpus // self.pp

    @property
    def dp(self) -> int:
        return self.tp // self.attn_tp

    @property
    def hosts(self) -> int:
        """Hosts one instance spans."""
        return max(1, math.ceil(self.gpus / self.gpus_per_host))

    @property
    def name(self) -> str:
        return self.label or {"mixed": "instance"}.get(self.role, self.role)

    @property
    def dram_gb_per_gpu(self) -> float:
        """GB of resting KV each GPU's host tier holds: an instance's over the GPUs holding
        distinct shares, since a GPU holding a copy holds it in its host tier too (the engines
        keep one per rank)."""
        return self.kv_dram_gb / (self.kv_gpus or self.gpus)

    @property
    def tiered(self) -> bool:
        """Whether the pool rests KV below HBM between turns."""
        return self.kv_dram_gb > 0 or self.kv_nvme_gb > 0 or self.kv_network_gb > 0

    @property
    def per_host(self) -> int:
        """Instances that share one host (1 where an instance fills a host or more, or the pool
        has one: a lone 4-GPU instance's script had asked for an ``INSTANCE`` of 0..0)."""
        return max(1, min(self.gpus_per_host // self.gpus, self.instances))


def named_pools(pools: tuple[PoolLaunch, ...]) -> tuple[PoolLaunch, ...]:
    """``pools`` with a name each of its own, for its script, options file and Dynamo service: a
    role one pool has keeps its name (``decode``); pools sharing one add their hardware
    (``decode-b200``, ``decode-h200-sxm``), and a number where that is shared too."""
    if len({p.name for p in pools}) == len(pools):
        return pools
    shared = Counter(p.name for p in pools)
    # (the hardware as a file, a bash variable and a Kubernetes service take it: b200.v2 had
    # named a Dynamo service and a variable neither takes)
    names = [f"{p.name}-{re.sub(r'[^a-z0-9-]+', '-', p.hardware.lower())}" if shared[p.name] > 1 else p.name
             for p in pools]  # fmt: skip
    again = Counter(names)
    seen: Counter[str] = Counter()
    for i, n in enumerate(names):
        if again[n] > 1:
            seen[n] += 1
            names[i] = f"{n}-{seen[n]}"
    if len(set(names)) < len(names):  # a given label met a made one: number them all
        names = [f"{n}-{i + 1}" for i, n in enumerate(names)]
    return tuple(replace(p, label=n) for p, n in zip(pools, names, strict=True))


@dataclass(frozen=True)
class Design:
    """What the launch files need of a study's design."""

    study: str
    trial: int
    model: str
    model_repo: str
    native_precision: str  # the checkpoint's expert precision
    topology: str
    precision: str
    kv_dtype: Precision
    mtp_drafts: int  # 0 without MTP
    profile: str  # the study's engine profile (trt, sglang, atom)
    pools: tuple[PoolLaunch, ...]
    metrics: dict[str, Any]
    point: dict[str, Any] = field(default_factory=dict)  # a grid study's point: axis -> value
    # the profile prices the prefill chunk for the whole instance (SGLang's way) rather than per
    # attention-DP rank (TRT-LLM's, ATOM's); None: as the profile's name says (only sglang's is)
    chunk_per_instance: bool | None = None
    # the longest prompt the KV transfer buffer is sized for (PROMPT_ROOM times the workload's
    # longest mean prompt: a fresh one, or a returning turn's cached prefix and suffix, within the
    # model's context) and the longest sequence an instance admits (the model's context: a prompt
    # longer than the study's mean must not be refused), in tokens; 0: not known
    prompt_tokens: int = 0
    context_tokens: int = 0
    # the requests a second the design was sized for, each through the router (what the trial's
    # prefill or aggregated pools prefill), and the seconds one spends at that traffic before a
    # running slot of a decode or aggregated instance holds it (``before_decode_s``); 0: not known
    requests_per_s: float = 0.0
    before_decode_s: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "pools", named_pools(tuple(self.pools)))
        if self.chunk_per_instance is None:
            object.__setattr__(self, "chunk_per_instance", self.profile == "sglang")


def design_of_run(res: StudyResults, trial: int | None, params: PerfParams) -> Design:
    """The design of trial ``trial`` of a study's run, or of its best trial."""
    from dse.study.grid import point_of

    number = res.best_trial() if trial is None else trial
    if number is None:
        raise _no_best(res)
    found = next((t for t in res.study.get_trials(deepcopy=False) if t.number == number), None)
    record = None if found is None else found.user_attrs.get("record")
    if found is None or not record or not record.get("pools"):
        raise InputError(SRC, "--trial", f"must name a feasible trial of {res.spec.name}", number)
    missed = [k for k, v in (record.get("constraints") or {}).items() if v is not None and v > 0]
    if missed:  # a placed design that failed its checks had been deployed, its README calling it chosen
        why = record.get("binding") or ", ".join(missed)
        rule = f"must name a feasible trial of {res.spec.name}: trial {number} is infeasible ({why})"
        raise InputError(SRC, "--trial", rule, number)
    # a grid trial's point, as its record or else its parameters hold it
    record = {**record, "point": {**point_of(found.params), **(record.get("point") or {})}}
    catalog = res._cat()
    named = "--trial" if trial is not None else "best trial"  # (it had named a --trial never given)
    variant = _what_if(res.spec, record, catalog)
    if variant is not None:
        other = _best_launchable(res, catalog)
        hint = (
            f"; trial {other} is the best on hardware that exists (--trial {other})"
            if other is not None
            else "; no feasible trial of the study runs on hardware that exists"
        )
        raise InputError(SRC, named, _what_if_rule(res.spec, *variant) + hint, number)
    return design_of(res.spec, number, record, catalog, params, named)


def _no_best(res: StudyResults) -> DseError:
    """Why a run has no best trial to deploy: none is feasible, or none of the feasible ones has a
    value for the first objective (an objective function that gave None each time: that had been
    said as no feasible trial)."""
    from dse.study.report import feasible_trials, unvalued

    feasible = feasible_trials(res.trials)
    why = unvalued(feasible, res.ranking[:1]) if res.ranking and not feasible.is_empty() else None
    if why is None:
        return NoFeasibleDesign("study", f"{res.spec.name} has no feasible trial to deploy")
    first = int(feasible["trial"][0])
    return NoBestDesign(
        f"study {res.spec.name}",
        f"{why}, by which the best is picked; name one with --trial (as --trial {first})",
    )


def _what_if(spec: StudySpec, record: dict[str, Any], catalog: Catalog) -> tuple[str, str] | None:
    """(variant id, its base hardware id) of the first pool of ``record`` on the study's what-if
    hardware, or None when every pool runs on hardware that exists."""
    variants = {v.id.lower(): v for v in spec.variants}
    for p in record.get("pools", []):
        hw = str(p.get("hardware", ""))
        v = variants.get(hw.lower())
        if v is None:
            try:
                v = variants.get(catalog.hardware(hw).id.lower())
            except InputError:
                continue
        if v is not None:
            try:
                base = catalog.hardware(v.base).id
            except InputError:
                base = v.base
            return v.id, base
    return None


def _what_if_rule(spec: StudySpec, variant: str, base: str) -> str:
    return (
        f"runs on what-if hardware {variant} ({spec.name}'s [[variants]] entry: {base} with its HBM "
        "scaled), which no engine can launch"
    )


def _best_launchable(res: StudyResults, catalog: Catalog) -> int | None:
    """The feasible trial best on the study's objectives (the first, its equals by the later ones:
    :meth:`~dse.study.api.StudyResults.best_trial`'s order) whose pools all run on hardware that
    exists."""
    import polars as pl

    from dse.study.results import ranked

    trials = res.trials
    if trials.is_empty() or "feasible" not in trials.columns:
        return None
    records = {t.number: t.user_attrs.get("record") for t in res.study.get_trials(deepcopy=False)}
    for number in ranked(trials.filter(pl.col("feasible")), *res.ranking)["trial"].to_list():
        record = records.get(int(number))
        if record and record.get("pools") and _what_if(res.spec, record, catalog) is None:
            return int(number)
    return None


def design_of(
    spec: StudySpec,
    trial: int,
    record: dict[str, Any],
    catalog: Catalog,
    params: PerfParams,
    named: str = "--trial",
) -> Design:
    """The design a trial's record holds (pools, shapes, the engine settings it was priced with);
    a grid trial's at its own point (``record["point"]``: its model); an attention-FFN one is
    refused naming the trial as ``named`` (``best trial`` where no ``--trial`` was given)."""
    from dse.study.grid import spec_at

    choice = record.get("choice", {})
    topology = str(choice.get("topology", ""))
    if topology in ("afd", "four-stage"):
        raise InputError(
            SRC, named, "is an attention-FFN disaggregated design, which no engine here launches", trial
        )
    point = dict(record.get("point") or {})
    spec = (spec_at(spec, point) if point else spec).served_by(catalog)  # (a run's is already)
    engine = params.engine(spec.engine)
    drafts = 0
    if spec.mtp:
        drafts = int(spec.mtp_draft_tokens if spec.mtp_draft_tokens is not None else engine.mtp_draft_tokens)
    model = catalog.model(spec.model)
    pools = [
        _pool_launch(p, rest, choice, catalog, params.hbm_reserve_fraction)
        for p, rest in zip(record.get("pools", []), resting_by_pool(record), strict=True)
    ]
    if drafts and model.no_mtp() is not None:  # (a run stored before studies refused it)
        why = (
            f"prices MTP ({spec.name}'s mtp = true, {drafts} draft tokens) on {model.id}, whose "
            "catalog entry has no MTP layers (mtp_layers = 0): no engine launches its drafts"
        )
        raise InputError(SRC, "--trial", why, trial)
    return Design(
        study=spec.name,
        trial=trial,
        model=model.id,
        model_repo=model.checkpoint,
        native_precision=(model.expert_weight_precision or model.native_weight_precision).value,
        topology=topology,
        precision=spec.precision,
        kv_dtype=engine.kv_precision,
        mtp_drafts=drafts,
        profile=spec.engine,
        pools=tuple(pools),
        metrics=dict(record.get("metrics", {})),
        point=point,
        chunk_per_instance=engine.prefill_chunk_per_instance,
        prompt_tokens=min(
            model.max_context,
            math.ceil(PROMPT_ROOM * (spec.workload.longest_context_tokens() - spec.workload.output_tokens)),
        ),
        context_tokens=model.max_context,
        requests_per_s=sized_rate(record, spec),
        before_decode_s=before_decode_s(record, spec),
    )


def _pool_launch(
    p: dict[str, Any],
    rest: dict[str, float],
    choice: dict[str, Any],
    catalog: Catalog,
    reserve: float,
) -> PoolLaunch:
    """One pool of a trial's record as engines launch it; ``rest``: the GB it rests below HBM by
    tier (:func:`resting_by_pool`), ``reserve``:
    the share of HBM the runtime keeps (:attr:`~dse.perf.params.PerfParams.hbm_reserve_fraction`)."""
    from dse.placement.shapes import parse_shape

    par = parse_shape(str(p["shape"]))
    hw = catalog.hardware(str(p["hardware"]))
    role = str(p["role"])
    instances = max(int(p["instances"]), 1)
    return PoolLaunch(
        role=role,
        hardware=hw.id,
        gpus=par.gpus,
        attn_tp=par.attn_tp,
        ep=par.ep,
        pp=par.pp,
        instances=int(p["instances"]),
        gpus_per_host=hw.gpus_per_host,
        vendor=hw.vendor,
        max_running=running_cap(role, p, choice),
        # the prefill chunk budget; a decode pool keeps its engine's default
        chunk_tokens=int(choice["chunk_tokens"]) if role != "decode" and choice.get("chunk_tokens") else None,
        kv_dram_gb=rest["dram"] / instances,
        kv_nvme_gb=rest["nvme"] / instances,
        kv_network_gb=rest["network"] / instances,
        # the GPUs holding distinct shares, as the placement counted them; a run stored before
        # pools recorded them priced its host tiers over every GPU (0)
        kv_gpus=int(p.get("kv_gpus") or 0),
        # the HBM an engine sizes against (GiB), less the runtime's reserve and the weights, as the
        # placement priced it (dse.placement.shapes.Shapes.usable_gb)
        hbm_kv_gb=max(
            hw.hbm.usable_gib * GIB / GB * (1.0 - reserve) - float(p.get("weights_gb_per_gpu") or 0.0), 0.0
        ),
        host_gb_per_gpu=float(hw.host.dram_gb_per_gpu),
    )


RESTING_TIERS = ("dram", "nvme", "network")


def resting_by_pool(record: dict[str, Any]) -> list[dict[str, float]]:
    """GB of KV each pool of a trial's record rests between turns in DRAM, on NVMe and in the
    network store: its ``resting_<tier>_gb``; a record stored before pools had them splits its
    KV classes' ``stored_<tier>_gb`` over the pools that prefill (those its returning turns come
    back to) by the requests each prefills."""
    pools = record.get("pools", [])
    if any(f"resting_{t}_gb" in p for p in pools for t in RESTING_TIERS):
        return [{t: float(p.get(f"resting_{t}_gb") or 0.0) for t in RESTING_TIERS} for p in pools]
    total = {
        t: sum(float(c.get(f"stored_{t}_gb") or 0.0) for c in record.get("tiers", [])) for t in RESTING_TIERS
    }
    rates = [float(p.get("requests_per_s") or 0.0) if p.get("role") != "decode" else 0.0 for p in pools]
    whole = sum(rates)
    return [{t: total[t] * r / whole if whole > 0 else 0.0 for t in RESTING_TIERS} for r in rates]


def sized_rate(record: dict[str, Any], spec: StudySpec) -> float:
    """The requests a second the trial's pools were sized for: what its prefill and aggregated
    pools prefill (each request is prefilled once, wherever its decode runs), or the study's
    traffic where the record has no such figure."""
    pools = record.get("pools", [])
    rate = sum(float(p.get("requests_per_s") or 0.0) for p in pools if p.get("role") != "decode")
    return rate if rate > 0 else float(spec.workload.requests_per_s)


def before_decode_s(record: dict[str, Any], spec: StudySpec) -> float:
    """The seconds a request spends before a decode slot holds it, at the design's traffic: queued
    for and in prefill (and, disaggregated, its KV's transfer), which its TTFT spans. The larger of
    the study's TTFT target and the trial's simulated mean TTFT: Little's law counts the requests
    in flight before decode as the rate times their mean time there, which the recorded mean is;
    the target is the time a request may take there (a feasible design meets it at the SLO's
    percentile; at p50 the mean may exceed it): where each takes at most that, those there arrived
    within it, the rate times it on average whatever the distribution."""
    mean = float((record.get("metrics") or {}).get("ttft_s") or 0.0)
    return max(float(spec.slo.ttft_s), mean)
