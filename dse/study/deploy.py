"""Launch files for a study's design: `dse deploy NAME --engine {sglang,trtllm,vllm,dynamo}`.

For the best design of a study's run (or a trial's), one launch script per pool with the engine's
own flags (tensor, expert and data-parallel attention sizes, the running-request cap, the chunked
prefill budget, MTP drafts, the KV-cache precision), the instance counts, a Dynamo graph for
Dynamo, and a README stating what was assumed. The flag names come from
``dse/study/engine_flags.toml``, which cites the engine source each was read from.

A grid study's trial launches the model of its own point (its ``x_model``); a design on the
study's what-if hardware (``[[variants]]``) is refused, as no such GPU exists to launch it on.
Each decode instance is capped at the batch its pool was sized at: the most sequences it may run
and still meet the TPOT target, which is what the study priced (the search's ``max_batch`` only
bounds it).
"""

from __future__ import annotations

import json
import math
import shlex
import tomllib
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dse.catalog import Catalog
from dse.errors import InputError, NoFeasibleDesign
from dse.perf.params import PerfParams
from dse.placement.parallel import Parallel
from dse.study.api import StudyResults
from dse.study.spec import StudySpec
from dse.units import Precision

FLAGS_FILE = Path(__file__).with_name("engine_flags.toml")
ENGINES = ("sglang", "trtllm", "vllm", "dynamo")
BACKEND_OF_PROFILE = {"sglang": "sglang", "trt": "trtllm", "atom": "vllm", "vllm": "vllm"}
"""The engine a study's engine profile (its calibration) stands for, as Dynamo's backend."""
PORT = 8000  # the first pool's first server; pool k's instances from PORT + 100 k, one port each on a host
BOOTSTRAP_PORT = 9000  # SGLang prefill servers' KV bootstrap ports, likewise
# vLLM's data-parallel RPC ports, likewise: its default (ParallelConfig.data_parallel_rpc_port,
# vllm-project/vllm:vllm/config/parallel.py) for pool 0's first instance on a host
DP_RPC_PORT = 29550
ROUTER_PORT = 30000
SRC = "dse deploy"


def engine_flags() -> dict[str, dict[str, str]]:
    with open(FLAGS_FILE, "rb") as fh:
        return tomllib.load(fh)


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
    def per_host(self) -> int:
        """Instances that share one host (1 where an instance fills a host or more)."""
        return max(1, self.gpus_per_host // self.gpus)


def named_pools(pools: tuple[PoolLaunch, ...]) -> tuple[PoolLaunch, ...]:
    """``pools`` with a name each of its own, for its script, options file and Dynamo service: a
    role one pool has keeps its name (``decode``); pools sharing one add their hardware
    (``decode-b200``, ``decode-h200-sxm``), and a number where that is shared too."""
    if len({p.name for p in pools}) == len(pools):
        return pools
    shared = Counter(p.name for p in pools)
    names = [f"{p.name}-{p.hardware}" if shared[p.name] > 1 else p.name for p in pools]
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

    def __post_init__(self) -> None:
        object.__setattr__(self, "pools", named_pools(tuple(self.pools)))
        if self.chunk_per_instance is None:
            object.__setattr__(self, "chunk_per_instance", self.profile == "sglang")


def design_of_run(res: StudyResults, trial: int | None, params: PerfParams) -> Design:
    """The design of trial ``trial`` of a study's run, or of its best trial."""
    from dse.study.grid import point_of

    number = res.best_trial() if trial is None else trial
    if number is None:
        raise NoFeasibleDesign("study", f"{res.spec.name} has no feasible trial to deploy")
    found = next((t for t in res.study.get_trials(deepcopy=False) if t.number == number), None)
    record = None if found is None else found.user_attrs.get("record")
    if found is None or not record or not record.get("pools"):
        raise InputError(SRC, "--trial", f"must name a feasible trial of {res.spec.name}", number)
    # a grid trial's point, as its record or else its parameters hold it
    record = {**record, "point": {**point_of(found.params), **(record.get("point") or {})}}
    catalog = res._cat()
    variant = _what_if(res.spec, record, catalog)
    if variant is not None:
        other = _best_launchable(res, catalog)
        hint = (
            f"; trial {other} is the best on hardware that exists (--trial {other})"
            if other is not None
            else "; no feasible trial of the study runs on hardware that exists"
        )
        field_name = "--trial" if trial is not None else "best trial"
        raise InputError(SRC, field_name, _what_if_rule(res.spec, *variant) + hint, number)
    return design_of(res.spec, number, record, catalog, params)


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
    """The feasible trial best on the study's first objective whose pools all run on hardware
    that exists."""
    import polars as pl

    from dse.study.results import ranked

    trials = res.trials
    if trials.is_empty() or "feasible" not in trials.columns:
        return None
    o = res.objectives[0]
    records = {t.number: t.user_attrs.get("record") for t in res.study.get_trials(deepcopy=False)}
    for number in ranked(trials.filter(pl.col("feasible")), (o.name, o.direction))["trial"].to_list():
        record = records.get(int(number))
        if record and record.get("pools") and _what_if(res.spec, record, catalog) is None:
            return int(number)
    return None


def design_of(
    spec: StudySpec, trial: int, record: dict[str, Any], catalog: Catalog, params: PerfParams
) -> Design:
    """The design a trial's record holds (pools, shapes, the engine settings it was priced with);
    a grid trial's at its own point (``record["point"]``: its model)."""
    from dse.placement.shapes import parse_shape
    from dse.study.grid import spec_at

    choice = record.get("choice", {})
    topology = str(choice.get("topology", ""))
    if topology in ("afd", "four-stage"):
        raise InputError(
            SRC, "--trial", "is an attention-FFN disaggregated design, which no engine here launches", trial
        )
    variant = _what_if(spec, record, catalog)
    if variant is not None:
        raise InputError(SRC, "--trial", _what_if_rule(spec, *variant), trial)
    point = dict(record.get("point") or {})
    spec = spec_at(spec, point) if point else spec
    engine = params.engine(spec.engine)
    drafts = 0
    if spec.mtp:
        drafts = int(spec.mtp_draft_tokens if spec.mtp_draft_tokens is not None else engine.mtp_draft_tokens)
    pools = []
    for p in record.get("pools", []):
        par = parse_shape(str(p["shape"]))
        hw = catalog.hardware(str(p["hardware"]))
        role = str(p["role"])
        pools.append(
            PoolLaunch(
                role=role,
                hardware=hw.id,
                gpus=par.gpus,
                attn_tp=par.attn_tp,
                ep=par.ep,
                pp=par.pp,
                instances=int(p["instances"]),
                gpus_per_host=hw.gpus_per_host,
                max_running=running_cap(role, p, choice),
                # the prefill chunk budget; a decode pool keeps its engine's default
                chunk_tokens=int(choice["chunk_tokens"])
                if role != "decode" and choice.get("chunk_tokens")
                else None,
            )
        )
    model = catalog.model(spec.model)
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
    )


def running_cap(role: str, pool: dict[str, Any], choice: dict[str, Any]) -> int | None:
    """A decode (or aggregated) instance's running-request cap: the batch the study sized its pool
    at, the most sequences it runs and still meets the TPOT target (what the study priced and the
    simulator ran as the engine's cap; at most the trial's ``max_batch``, the search's bound), whole
    sequences down; the trial's ``max_batch`` where the record has no such batch. None for a
    prefill pool."""
    if role not in ("decode", "mixed"):
        return None
    bound = choice.get("max_batch")
    sized = float(pool.get("decode_batch") or 0.0)
    if sized > 0 and math.isfinite(sized):
        cap = max(1, math.floor(sized + 1e-6))
        return min(cap, int(bound)) if bound else cap
    return int(bound) if bound else None


def deploy_command(
    name: str, engine: str, *, out: Path | None = None, trial: int | None = None, storage: str | None = None
) -> str:
    """The `dse deploy` command line that writes these files: the study as it was named (a path
    stays a path), and the flags that chose the run and the trial."""
    words = ["dse", "deploy", str(name)]
    if out is not None and out != Path("runs"):
        words += ["--out", str(out)]
    if storage:
        from dse.study.storage import redact

        words += ["--storage", redact(storage)]
    words += ["--engine", engine]
    if trial is not None:
        words += ["--trial", str(trial)]
    return " ".join(shlex.quote(w) for w in words)


def launch_files(
    design: Design, engine: str, flags: dict[str, dict[str, str]] | None = None, *, command: str | None = None
) -> dict[str, str]:
    """File name -> contents of the deployment of ``design`` on ``engine``; ``command`` is the
    command line the README says wrote them (default: `dse deploy STUDY --engine ENGINE`)."""
    flags = flags or engine_flags()
    disagg = any(p.role == "prefill" for p in design.pools)
    check_launchable(design, engine)
    files: dict[str, str] = {}
    for k, pool in enumerate(design.pools):
        mode = pool.role if disagg else None
        if engine == "sglang":
            cmd = sglang_args(pool, design, flags["sglang"], mode)
        elif engine == "vllm":
            cmd = vllm_args(pool, design, flags["vllm"])
        elif engine == "trtllm":
            cmd = trtllm_args(pool, design, flags["trtllm"], f"{pool.name}.yaml")
            files[f"{pool.name}.yaml"] = _yaml(trtllm_options(pool, design, flags["trtllm"]))
        else:
            cmd, extra = dynamo_args(pool, design, flags, mode)
            files.update(extra)
        unwired = f"dynamo.{backend_of(design, engine)}" if engine == "dynamo" else ""
        unwired = "" if unwired == "dynamo.sglang" else unwired
        dp_rpc = engine == "vllm" and pool.dp > 1
        files[f"{pool.name}.sh"] = _script(pool, design, cmd, unwired, k, dp_rpc)
    if engine == "dynamo":
        files["frontend.sh"] = _script(
            None, design, [*flags["dynamo"]["frontend"].split(), flags["dynamo"]["http_port"], str(PORT)]
        )
        files["graph.yaml"] = _yaml(dynamo_graph(design, files, flags))
    router = None
    if engine == "sglang":
        router = router_script(design, flags["sglang"])
    elif engine in ("vllm", "trtllm"):
        router = http_router_script(design, flags["vllm_router"], engine)
    if router is not None:
        files["router.sh"] = router
    files["instances.json"] = json.dumps(_instances(design), indent=2) + "\n"
    files["README.md"] = _readme(design, engine, flags, command or deploy_command(design.study, engine))
    return files


def backend_of(design: Design, engine: str) -> str:
    """The engine that runs the workers: Dynamo's the study's profile stands for."""
    return BACKEND_OF_PROFILE[design.profile] if engine == "dynamo" else engine


def check_launchable(design: Design, engine: str) -> None:
    """Refuses, in one line, a design ``engine`` cannot launch as the study priced it."""
    if engine not in ENGINES:
        raise InputError(SRC, "--engine", f"must be one of {', '.join(ENGINES)}", engine)
    backend = backend_of(design, engine)
    on = f"on {backend}" if engine != "dynamo" else f"on Dynamo's {backend} workers"
    if any(p.role == "prefill" for p in design.pools) and engine in ("trtllm", "vllm"):
        why = f"launches one aggregated server; this {design.topology} design needs sglang or dynamo"
        raise InputError(SRC, "--engine", why, engine)
    for p in design.pools:
        shape = Parallel(p.gpus, p.attn_tp, p.ep, p.pp).label()
        if p.pp > 1 and backend != "sglang":
            why = (
                f"has no pipeline-parallel launch here: the {p.name} pool runs {p.pp} stages "
                "(SGLang's --pp-size launches it: --engine sglang, or dynamo on SGLang)"
            )
            raise InputError(SRC, "--engine", why, engine)
        if engine in ("vllm", "trtllm") and p.hosts > 1:
            why = (
                f"cannot launch the {p.name} pool: an instance's {p.gpus} GPUs span {p.hosts} hosts of "
                f"{p.gpus_per_host} GPUs, and dse writes no multi-host launch for {engine} "
                "(--engine sglang, or dynamo, whose operator wires the hosts)"
            )
            raise InputError(SRC, "--engine", why, engine)
        if backend == "trtllm" and 1 < p.attn_tp < p.gpus:
            why = (
                f"cannot launch the {p.name} pool's shape {shape} {on}: its attention DP runs attention "
                f"TP 1 only, not TP{p.attn_tp} x DP{p.dp}"
            )
            raise InputError(SRC, "--engine", why, engine)
        if backend == "vllm" and 1 < p.ep < p.tp:
            why = (
                f"cannot launch the {p.name} pool's shape {shape} {on}: its expert-parallel group is "
                f"all {p.tp} GPUs of an instance (DP x TP), not EP{p.ep}"
            )
            raise InputError(SRC, "--engine", why, engine)


def _kv(design: Design, table: dict[str, str]) -> str:
    return table["kv_fp8"] if design.kv_dtype is Precision.FP8 else table["kv_bf16"]


def sglang_dp(pool: PoolLaunch) -> int:
    """SGLang's --dp-size under --enable-dp-attention: the attention-DP ranks (its TP size over
    the attention TP, ``tp / attn_tp``, whenever attention TP is smaller than the TP size), else 1."""
    return pool.dp


def trtllm_dp(pool: PoolLaunch) -> int:
    """TRT-LLM's attention-DP ranks: every GPU of an instance with enable_attention_dp, else 1."""
    return pool.gpus if pool.attn_tp == 1 and pool.gpus > 1 else 1


def sglang_cap(pool: PoolLaunch) -> int | None:
    """The --max-running-requests SGLang gets: it floors it per attention-DP rank
    (``max_running_requests // dp_size``, and refuses a zero), so a multiple of its DP size, the
    largest not above the sized batch, and at least one per rank."""
    if pool.max_running is None:
        return None
    dp = sglang_dp(pool)
    return max(dp, pool.max_running // dp * dp)


def per_rank_cap(pool: PoolLaunch, dp: int) -> int | None:
    """The running-request cap of each of ``dp`` ranks of an engine that caps per rank: the
    instance's split, whole sequences down, at least one."""
    return None if pool.max_running is None else max(1, pool.max_running // dp)


def _per_rank_caps(pool: PoolLaunch, design: Design, dp: int, cap_flag: str, chunk_flag: str) -> list[str]:
    """The running-request cap as an engine that caps each of its ``dp`` data-parallel ranks takes
    it (the instance's split), and the prefill chunk, where the design sets them."""
    out = []
    cap = per_rank_cap(pool, dp)
    if cap is not None:
        out += [cap_flag, str(cap)]
    if pool.chunk_tokens is not None:
        out += [chunk_flag, str(per_rank_chunk(pool, design, dp))]
    return out


def per_rank_chunk(pool: PoolLaunch, design: Design, dp: int) -> int:
    """The token budget of each of ``dp`` ranks of an engine that budgets per rank (vLLM,
    TRT-LLM): the design's chunk, split where its profile priced it for the whole instance."""
    chunk = int(pool.chunk_tokens or 0)
    return max(1, chunk // dp) if design.chunk_per_instance else chunk


def sglang_chunk(pool: PoolLaunch, design: Design) -> int:
    """SGLang's --chunked-prefill-size: it divides it by --dp-size under DP attention, so a
    chunk priced per attention-DP rank is passed times the ranks."""
    chunk = int(pool.chunk_tokens or 0)
    return chunk if design.chunk_per_instance else chunk * sglang_dp(pool)


def sglang_args(pool: PoolLaunch, design: Design, f: dict[str, str], mode: str | None) -> list[str]:
    """SGLang: the instance's GPUs are its TP size; data-parallel attention splits them into
    ``dp`` attention ranks. Its running-request cap and chunk are for the whole instance."""
    args = [*f["launch"].split(), f["model"], "$MODEL", f["tp"], str(pool.tp)]
    args += _sglang_body(pool, design, f, mode)
    return [*args, f["host"], "0.0.0.0", f["port"], "$PORT", f["trust"]]


def _sglang_body(pool: PoolLaunch, design: Design, f: dict[str, str], mode: str | None) -> list[str]:
    args: list[str] = []
    if pool.pp > 1:
        args += [f["pp"], str(pool.pp)]
    if pool.ep > 1:
        args += [f["ep"], str(pool.ep)]
    if sglang_dp(pool) > 1:
        args += [f["dp_attention"], f["dp"], str(sglang_dp(pool))]
    cap = sglang_cap(pool)
    if cap is not None:
        args += [f["max_running"], str(cap)]
    if pool.chunk_tokens is not None:
        args += [f["chunk"], str(sglang_chunk(pool, design))]
    args += [f["kv_dtype"], _kv(design, f)]
    if design.mtp_drafts:
        d = design.mtp_drafts
        args += [f["spec_algorithm"], f["spec_algorithm_mtp"], f["spec_steps"], str(d), f["spec_topk"], "1"]
        args += [f["spec_draft_tokens"], str(d + 1)]
    if mode is not None:
        args += [f["disagg_mode"], mode, f["disagg_backend"], f["disagg_backend_value"]]
    if mode == "prefill":
        args += [f["bootstrap_port"], "$BOOTSTRAP_PORT"]
    if pool.hosts > 1:
        args += [f["nnodes"], str(pool.hosts), f["node_rank"], "$NODE_RANK", f["dist_init"], "$HEAD_ADDR"]
    return args


def vllm_args(pool: PoolLaunch, design: Design, f: dict[str, str]) -> list[str]:
    """vLLM: tensor parallelism inside an attention rank, data parallelism across ranks, each
    rank an engine with its own running-request cap (the instance's, split)."""
    args = [*f["launch"].split(), "$MODEL", f["tp"], str(pool.attn_tp), f["dp"], str(pool.dp)]
    if pool.ep > 1:
        args.append(f["ep"])
    args += _per_rank_caps(pool, design, pool.dp, f["max_running"], f["chunk"])
    args += [f["kv_dtype"], _kv(design, f)]
    if design.mtp_drafts:
        spec = json.dumps({"method": f["spec_method"], "num_speculative_tokens": design.mtp_drafts})
        args += [f["spec_config"], spec]
    # with its server's port, each instance's own data-parallel RPC port (``_placement``); after
    # --host, so that Dynamo's vLLM worker, which takes the flags before it, goes without
    rpc = [f["dp_rpc_port"], "$DP_RPC_PORT"] if pool.dp > 1 else []
    return [*args, f["host"], "0.0.0.0", f["port"], "$PORT", *rpc, f["trust"]]


def trtllm_args(pool: PoolLaunch, design: Design, f: dict[str, str], options: str) -> list[str]:
    """TRT-LLM: the instance's GPUs are its TP size; its batch cap is per attention-DP rank."""
    args = [f["launch"], "$MODEL", f["tp"], str(pool.gpus), f["ep"], str(pool.ep)]
    args += _per_rank_caps(pool, design, trtllm_dp(pool), f["max_running"], f["chunk"])
    return [*args, f["options"], f"$HERE/{options}", f["host"], "0.0.0.0", f["port"], "$PORT", f["trust"]]


def trtllm_options(
    pool: PoolLaunch, design: Design, f: dict[str, str], mode: str | None = None
) -> dict[str, Any]:
    """A TRT-LLM options YAML: attention DP, the KV cache, MTP; chunked prefill where the pool has
    a chunk (off by default, and a prompt longer than max_num_tokens is then refused); the longest
    sequence the workload reaches; and, for a disaggregated worker (``mode``), the KV cache
    transceiver (the prefill worker without the overlap scheduler), as Dynamo's examples have them."""
    out: dict[str, Any] = {
        f["yaml_dp_attention"]: pool.attn_tp == 1 and pool.gpus > 1,
        f["yaml_kv"]: {f["yaml_kv_dtype"]: _kv(design, f)},
    }
    if pool.chunk_tokens is not None:
        out[f["yaml_chunked_prefill"]] = True
    if design.context_tokens:
        out[f["yaml_max_seq_len"]] = design.context_tokens
    if design.mtp_drafts:
        out[f["yaml_spec"]] = {
            f["yaml_spec_type"]: f["yaml_spec_type_mtp"],
            f["yaml_spec_layers"]: design.mtp_drafts,
        }
    if mode is not None:
        transceiver: dict[str, Any] = {f["yaml_ct_backend"]: f["yaml_ct_backend_value"]}
        if design.prompt_tokens:
            transceiver[f["yaml_ct_max_tokens"]] = design.prompt_tokens
        out[f["yaml_ct"]] = transceiver
        if mode == "prefill":
            out[f["yaml_no_overlap"]] = True
    return out


def dynamo_args(
    pool: PoolLaunch, design: Design, flags: dict[str, dict[str, str]], mode: str | None
) -> tuple[list[str], dict[str, str]]:
    """A Dynamo worker of the study's engine: its backend's own flags, and its role."""
    d = flags["dynamo"]
    backend = BACKEND_OF_PROFILE[design.profile]
    role = mode or ("prefill_and_decode" if backend == "trtllm" else "agg")
    if backend == "sglang":
        args = [
            *d["sglang_worker"].split(),
            flags["sglang"]["model"],
            "$MODEL",
            flags["sglang"]["tp"],
            str(pool.tp),
        ]
        body = _sglang_body(pool, design, flags["sglang"], None)
        mode_args = [d["sglang_mode"], mode, flags["sglang"]["disagg_backend"], "nixl"] if mode else []
        if mode == "prefill":
            mode_args += [flags["sglang"]["bootstrap_port"], "$BOOTSTRAP_PORT"]
        return [*args, *body, *mode_args, flags["sglang"]["trust"]], {}
    if backend == "vllm":
        v = vllm_args(pool, design, flags["vllm"])
        body = v[len(flags["vllm"]["launch"].split()) + 1 : v.index(flags["vllm"]["host"])]
        return [*d["vllm_worker"].split(), d["vllm_model"], "$MODEL", d["vllm_mode"], role, *body], {}
    options = f"{pool.name}.yaml"
    args = [*d["trtllm_worker"].split(), d["trtllm_model"], "$MODEL", d["trtllm_mode"], role]
    args += [d["trtllm_tp"], str(pool.gpus), d["trtllm_ep"], str(pool.ep)]
    if pool.attn_tp == 1 and pool.gpus > 1:
        args.append(d["trtllm_dp_attention"])
    args += _per_rank_caps(pool, design, trtllm_dp(pool), d["trtllm_max_running"], d["trtllm_chunk"])
    args += [d["trtllm_options"], f"$HERE/{options}"]
    return args, {options: _yaml(trtllm_options(pool, design, flags["trtllm"], mode))}


def dynamo_graph(design: Design, files: dict[str, str], flags: dict[str, dict[str, str]]) -> dict[str, Any]:
    """A DynamoGraphDeployment: the frontend and one worker service per pool, replicas = its
    instances (one replica per host where an instance spans several)."""
    d = flags["dynamo"]
    services: dict[str, Any] = {"Frontend": {"componentType": "frontend", "replicas": 1}}
    for pool in design.pools:
        line = _command_line(files[f"{pool.name}.sh"])
        words = shlex.split(line.replace("$MODEL", design.model_repo or "MODEL").replace("$HERE/", ""))
        words = _without_node_wiring(words, flags["sglang"])
        words = [str(BOOTSTRAP_PORT) if w == "$BOOTSTRAP_PORT" else w for w in words]  # a pod's own
        service: dict[str, Any] = {
            "componentType": "worker",
            "replicas": pool.instances,
            "resources": {"limits": {"gpu": str(min(pool.gpus, pool.gpus_per_host))}},
            "extraPodSpec": {"mainContainer": {"command": words[:3], "args": words[3:]}},
        }
        if pool.role in ("prefill", "decode"):
            service["subComponentType"] = pool.role
        if pool.hosts > 1:
            service["multinode"] = {"nodeCount": pool.hosts}
        services[pool.name] = service
    return {
        "apiVersion": d["api_version"],
        "kind": d["kind"],
        "metadata": {"name": f"{design.study}-trial-{design.trial}"},
        "spec": {"services": services},
    }


def _without_node_wiring(words: list[str], f: dict[str, str]) -> list[str]:
    """A worker's words without the flags that wire an instance across hosts (--nnodes,
    --node-rank, --dist-init-addr) and their values: the operator injects them for a multinode
    service, and Kubernetes would not expand the scripts' $NODE_RANK and $HEAD_ADDR."""
    wiring = {f["nnodes"], f["node_rank"], f["dist_init"]}
    out: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
        elif w in wiring:
            skip = True
        else:
            out.append(w)
    return out


def _command_line(script: str) -> str:
    return next(line for line in script.splitlines() if line.startswith("exec ")).removeprefix("exec ")


def _script(
    pool: PoolLaunch | None,
    design: Design,
    args: list[str],
    unwired: str = "",
    k: int = 0,
    dp_rpc: bool = False,
) -> str:
    """A launch script of the ``k``-th pool; ``unwired``: the Dynamo worker whose multi-host
    instance only graph.yaml launches (the script says so and exits 2); ``dp_rpc``: it sets
    ``DP_RPC_PORT``, a vLLM instance's data-parallel RPC port."""
    head = [
        "#!/usr/bin/env bash",
        f"# {design.study}, trial {design.trial}: " + (_pool_text(pool) if pool else "the Dynamo frontend"),
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "$0")" && pwd)"',
        f'MODEL="${{MODEL:-{design.model_repo}}}"'
        if design.model_repo
        else ': "${MODEL:?set MODEL to the checkpoint}"',
    ]
    head += _placement(pool, k, dp_rpc)
    if pool is not None and pool.hosts > 1 and unwired:
        return "\n".join([
            *head,
            f"# one instance spans {pool.hosts} hosts, which this script does not wire for {unwired}:",
            "# deploy graph.yaml, whose multinode service the Dynamo operator wires across them",
            "echo " + shlex.quote(f"{pool.name}.sh: an instance spans {pool.hosts} hosts; deploy graph.yaml")
            + " >&2",
            "exit 2",
            "exec " + " ".join(_quote(a) for a in args),
        ]) + "\n"  # fmt: skip
    if pool is not None and pool.hosts > 1:
        head += [
            f"# one instance spans {pool.hosts} hosts: run this on each with NODE_RANK 0..{pool.hosts - 1}",
            'NODE_RANK="${NODE_RANK:?set NODE_RANK}"',
            'HEAD_ADDR="${HEAD_ADDR:?set HEAD_ADDR to host:port of rank 0}"',
        ]
    return "\n".join([*head, "exec " + " ".join(_quote(a) for a in args)]) + "\n"


def _placement(pool: PoolLaunch | None, k: int, dp_rpc: bool = False) -> list[str]:
    """Where an instance of the ``k``-th pool runs on its host: its GPUs (``INSTANCE``'s share
    where instances share a host), its server port and its KV bootstrap port, each its own; with
    ``dp_rpc``, its vLLM data-parallel RPC port too.

    vLLM's ``--data-parallel-rpc-port`` (default 29550, the same for every ``vllm serve``) "is only
    used when there are remote data parallel engines, otherwise the local IPC transport is used"
    (vllm-project/vllm:vllm/engine/arg_utils.py @ 99d7eb5d), and the ranks' process group takes
    free ports the OS gives (``ParallelConfig.__post_init__``: ``get_open_ports_list``, no flag;
    vllm/config/parallel.py @ 00193b82). The single-host instances written here would not
    collide on it today; each gets its own all the same, so that none does where vLLM uses it."""
    if pool is None:
        return []
    port, boot, rpc = PORT + 100 * k, BOOTSTRAP_PORT + 100 * k, DP_RPC_PORT + 100 * k
    if pool.per_host == 1:
        return [f"PORT={port}", f"BOOTSTRAP_PORT={boot}", *([f"DP_RPC_PORT={rpc}"] if dp_rpc else [])]
    g = pool.gpus
    return [
        f"# {pool.per_host} instances share a host: INSTANCE (0..{pool.instances - 1}) picks this one's "
        "GPUs and ports",
        'INSTANCE="${INSTANCE:?set INSTANCE to the number of this instance in its pool}"',
        f"SLOT=$((INSTANCE % {pool.per_host}))",
        f'export CUDA_VISIBLE_DEVICES="$(seq -s, $((SLOT * {g})) $((SLOT * {g} + {g - 1})))"',
        f"PORT=$(({port} + SLOT))",
        f"BOOTSTRAP_PORT=$(({boot} + SLOT))",
        *([f"DP_RPC_PORT=$(({rpc} + SLOT))"] if dp_rpc else []),
    ]


def router_script(design: Design, f: dict[str, str]) -> str | None:
    """SGLang's router in front of the design's servers (prefill ones with their bootstrap ports,
    for PD disaggregation), each at ``<POOL>_<i>``, the host of the pool's instance i: None for
    one aggregated instance."""
    disagg = _disagg(design)
    if not _needs_router(design):
        return None
    args = [*f["router"].split(), *([f["router_pd"]] if disagg else [])]
    urls: list[str] = []
    for k, p in enumerate(design.pools):
        for i in range(p.instances):
            url = _instance_url(p, k, i)
            if not disagg:
                urls.append(url)
            elif p.role == "prefill":
                args += [f["router_prefill"], url, str(_port(p, k, i, BOOTSTRAP_PORT))]
            else:
                args += [f["router_decode"], url]
    if urls:
        args += [f["router_workers"], *urls]
    args += [f["host"], "0.0.0.0", f["port"], str(ROUTER_PORT)]
    return _router_file(design, "SGLang's router", args)


def http_router_script(design: Design, r: dict[str, str], engine: str) -> str | None:
    """vLLM's router (the ``vllm-router`` package) in front of several vLLM or TRT-LLM servers, each
    at ``<POOL>_<i>``, in its regular mode: it waits for a server's ``/health`` and forwards each
    OpenAI request to the server its cache-aware policy picks, both of which ``vllm serve`` and
    ``trtllm-serve`` serve (vllm-project/router:src/routers/http/router.rs; TensorRT-LLM's
    tensorrt_llm/serve/openai_server.py). None for one instance (these engines launch no
    disaggregated design here)."""
    if not _needs_router(design):
        return None
    urls = [_instance_url(p, k, i) for k, p in enumerate(design.pools) for i in range(p.instances)]
    args = [*r["launch"].split(), r["workers"], *urls, r["policy"], r["policy_value"]]
    args += [r["host"], "0.0.0.0", r["port"], str(ROUTER_PORT)]
    return _router_file(design, f"vLLM's router (`{r['package']}`, {engine} servers behind it)", args)


def _instance_url(pool: PoolLaunch, k: int, i: int) -> str:
    """The URL of instance ``i`` of the ``k``-th pool, double-quoted, its host ``<POOL>_<i>`` (the
    script stops where that is unset)."""
    var = _host_var(pool, i)
    who = f"instance {i}" if pool.name == "instance" else f"{pool.name} instance {i}"  # an aggregated pool's
    return f'"http://${{{var}:?set {var} to the host of {who}}}:{_port(pool, k, i)}"'


def _host_var(pool: PoolLaunch, i: int) -> str:
    """The router script's variable for the host of instance ``i`` of ``pool``: ``DECODE_B200_0``."""
    return f"{pool.name.upper().replace('-', '_')}_{i}"


def _router_file(design: Design, router: str, args: list[str]) -> str:
    """A router's script: its command line, the instances' URLs left for bash to expand."""
    head = [
        "#!/usr/bin/env bash",
        f"# {design.study}, trial {design.trial}: {router} in front of every instance; set each "
        "<POOL>_<i> to the host instance i of that pool runs on (its NODE_RANK 0 host)",
        "set -euo pipefail",
    ]
    words = " ".join(a if a.startswith('"') else shlex.quote(a) for a in args)
    return "\n".join([*head, "exec " + words]) + "\n"


def _port(pool: PoolLaunch, k: int, i: int, base: int = PORT) -> int:
    """The port of instance ``i`` of the ``k``-th pool (``base``: its server's or bootstrap's)."""
    return base + 100 * k + i % pool.per_host


def _quote(arg: str) -> str:
    """Shell words; the script's own variables stay expandable."""
    return f'"{arg}"' if arg.startswith("$") else shlex.quote(arg)


def _pool_text(pool: PoolLaunch) -> str:
    attn = (
        f"TP{pool.attn_tp} attention" if pool.attn_tp > 1 else f"data-parallel attention over {pool.dp} ranks"
    )
    if 1 < pool.attn_tp < pool.tp:
        attn = f"data-parallel attention over {pool.dp} ranks of TP{pool.attn_tp}"
    stages = f"{pool.pp} pipeline stages of {pool.tp} GPUs, each with " if pool.pp > 1 else ""
    return (
        f"{pool.instances} x {pool.role} instance of {pool.gpus} {pool.hardware} GPUs "
        f"({stages}{attn}, EP{pool.ep}), this script starts one"
    )


def _instances(design: Design) -> dict[str, Any]:
    return {
        "study": design.study,
        "trial": design.trial,
        "model": design.model,
        **({"point": design.point} if design.point else {}),
        "topology": design.topology,
        "pools": [
            {
                "name": p.name,
                "role": p.role,
                "hardware": p.hardware,
                "instances": p.instances,
                "gpus_per_instance": p.gpus,
                "hosts_per_instance": p.hosts,
                "gpus": p.instances * p.gpus,
                "pp": p.pp,
                "attn_tp": p.attn_tp,
                "attn_dp": p.dp,
                "ep": p.ep,
                "max_running_requests": p.max_running,
                "chunk_tokens": p.chunk_tokens,
            }
            for p in design.pools
        ],
    }


def _readme(design: Design, engine: str, flags: dict[str, dict[str, str]], command: str) -> str:
    table = flags[engine]
    at = ", ".join(f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}" for k, v in design.point.items())
    lines = [
        f"# {design.study}: trial {design.trial} on {engine}",
        "",
        f"Written by `{command}`. The {design.topology} design the study chose for {design.model}"
        + (f" at its grid point {at}:" if at else ":"),
        "",
        "| file | pool | instances | GPUs per instance | hosts per instance | running requests (cap) |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| `{p.name}.sh` | {p.role} on {p.hardware} | {p.instances} | {p.gpus} | {p.hosts} | "
        f"{p.max_running if p.max_running is not None else 'engine default'} |"
        for p in design.pools
    ]
    m = design.metrics
    usd = m.get("usd_per_million_tokens")
    lines += [
        "",
        "Run each pool's script once per instance (on each of its hosts where an instance spans several,"
        " with `NODE_RANK` and `HEAD_ADDR` set)"
        + (
            ", and `frontend.sh` once; `graph.yaml` is the same"
            " deployment for the Dynamo Kubernetes operator."
            if engine == "dynamo"
            else "."
        ),
        "",
        "What it assumed:",
        f"- the checkpoint: `MODEL` (default `{design.model_repo or 'none: set MODEL'}`), "
        f"{design.precision} routed experts as the study priced them"
        + (
            f" (the default checkpoint's are {design.native_precision}: "
            f"set `MODEL` to a {design.precision} one);"
            if design.precision != design.native_precision
            else ";"
        ),
        f"- the KV cache in {design.kv_dtype.value}, the study's engine profile `{design.profile}`'s;",
        f"- MTP with {design.mtp_drafts} draft tokens per step;"
        if design.mtp_drafts
        else "- no speculative decoding;",
        "- each decode instance's running-request cap is the batch the study sized its pool at: the most "
        "sequences it may run and still meet the TPOT target (the report's `batch cap`, at most the "
        "trial's `max_batch`); above it the engine would batch more and miss the TPOT the study priced. "
        "An engine that caps per data-parallel rank gets the instance's cap split, whole sequences "
        "down and at least one per rank;",
        f"- the prefill chunk is the trial's (`instances.json`), which the profile `{design.profile}` "
        + (
            "priced for a whole instance: vLLM and TRT-LLM, which budget each attention-DP rank, get it "
            "split over the ranks;"
            if design.chunk_per_instance
            else "priced per attention-DP rank: SGLang, which divides `--chunked-prefill-size` by "
            "`--dp-size`, gets it times the ranks;"
        ),
        *_cap_notes(design, engine),
        *_buffer_note(design, engine),
        f"- the flags of {engine} {table['version']} as read from `{table['source']}` "
        "(`dse/study/engine_flags.toml`): check them against the version you run;",
        *_minimum_versions(design, engine, flags),
        f"- ports: pool k's servers listen on {PORT} + 100 k (SGLang prefill servers' KV bootstrap on "
        f"{BOOTSTRAP_PORT} + 100 k), plus the instance's slot on its host where instances share one; "
        "there each script takes `INSTANCE` (its number in the pool, 0..n-1), which picks its GPUs "
        "(`CUDA_VISIBLE_DEVICES`) and ports; a disaggregated design's KV moves over NIXL.",
        *_router_notes(design, engine, flags),
    ]
    wide = [f"`{p.name}.sh`" for p in design.pools if p.hosts > 1]
    if engine == "dynamo" and backend_of(design, engine) != "sglang" and wide:
        lines.append(f"- {', '.join(wide)} launch instances wider than a host, which the scripts do not "
                     f"wire for dynamo.{backend_of(design, engine)}: they exit 2, and `graph.yaml` "
                     "(whose multinode services the operator wires) launches them;")  # fmt: skip
    if engine == "dynamo":
        lines.append("- `graph.yaml`'s workers read their options files (`*.yaml`) from their working "
                     "directory: mount them there (a ConfigMap).")  # fmt: skip
    if usd is not None:
        lines += ["", f"The study priced this design at ${usd:.4f} per million tokens."]
    return "\n".join(lines) + "\n"


def _minimum_versions(design: Design, engine: str, flags: dict[str, dict[str, str]]) -> list[str]:
    """The oldest engine releases the scripts need, where they use a flag's newer name: vLLM's
    MTP method, Dynamo's vLLM worker role flag."""
    backend = backend_of(design, engine)
    out = []
    if backend == "vllm" and design.mtp_drafts and "minimum" in flags["vllm"]:
        out.append(f"- it needs {flags['vllm']['minimum']};")
    if engine == "dynamo" and backend == "vllm" and _disagg(design) and "minimum" in flags["dynamo"]:
        out.append(f"- it needs {flags['dynamo']['minimum']};")
    return out


def _router_notes(design: Design, engine: str, flags: dict[str, dict[str, str]]) -> list[str]:
    """What fronts the instances: SGLang's router or, for several vLLM or TRT-LLM instances, vLLM's
    (``router.sh``), or Dynamo's frontend; and vLLM's data-parallel RPC ports."""
    if engine == "dynamo" or not _needs_router(design):
        return _rpc_note(design, engine)
    example = _host_var(design.pools[0], 0)
    where = f": set `<POOL>_<i>` (`{example}`, ...) to the host instance i of that pool runs on;"
    if engine == "sglang":
        return [
            f"- `router.sh` starts SGLang's router (the `sglang-router` package) on port {ROUTER_PORT}, "
            "in front of every server"
            + (" (prefill ones with their bootstrap ports)" if _disagg(design) else "")
            + where
        ]
    r = flags["vllm_router"]
    trt = (
        " in front of TRT-LLM, this mode only checks each server's `/health` and forwards the OpenAI "
        "requests (`/v1/completions`, `/v1/chat/completions`), all of which `trtllm-serve` serves; "
        "NVIDIA's own front for several TRT-LLM servers is Dynamo's (`--engine dynamo`);"
        if engine == "trtllm"
        else ""
    )
    return [
        f"- `router.sh` starts vLLM's router (the `{r['package']}` package {r['version']}.x, its flags as "
        f"read from `{r['source']}`) on port {ROUTER_PORT} in front of every instance, in its regular "
        f"mode with the policy `{r['policy_value']}`: a request goes to the instance whose earlier "
        "prompts share the longest prefix with it, so that a conversation's returning turns find their "
        "cached prefix, unless the instances' loads drift apart, when it goes to the least loaded one "
        "(the study priced every request routed to the least loaded instance)" + where + trt,
        *_rpc_note(design, engine),
    ]


def _rpc_note(design: Design, engine: str) -> list[str]:
    """A README line where the vLLM scripts set data-parallel RPC ports (``_placement`` says why)."""
    if engine != "vllm" or not any(p.dp > 1 for p in design.pools):
        return []
    return [
        f"- vLLM's data-parallel RPC port (`--data-parallel-rpc-port`): pool k's instances take "
        f"{DP_RPC_PORT} + 100 k, plus the slot where they share a host, each its own. vLLM uses it only "
        "where data-parallel engines run on other hosts (one host's ranks talk over local IPC, their "
        "process group on free ports vLLM picks), so these single-host instances would not collide on "
        "it today; it is set so that none does where vLLM uses it;"
    ]


def _disagg(design: Design) -> bool:
    return any(p.role == "prefill" for p in design.pools)


def _needs_router(design: Design) -> bool:
    return _disagg(design) or sum(p.instances for p in design.pools) > 1


def _buffer_note(design: Design, engine: str) -> list[str]:
    """A README line where TRT-LLM's KV cache transceiver is configured: its buffer's size is an
    assumption (the study knows mean lengths only)."""
    if engine != "dynamo" or backend_of(design, engine) != "trtllm":
        return []
    if design.topology == "aggregated" or not design.prompt_tokens:
        return []
    return [
        f"- the KV cache transceiver's buffer (`max_tokens_in_buffer` in the options files) holds "
        f"{design.prompt_tokens:,} tokens, {PROMPT_ROOM:g} times the study's longest mean prompt: raise it "
        "if your prompts run longer;"
    ]


def _cap_notes(design: Design, engine: str) -> list[str]:
    """A README line per pool whose engine runs another cap than the batch it was sized at."""
    backend = backend_of(design, engine)
    out = []
    for p in design.pools:
        if p.max_running is None:
            continue
        if backend == "sglang":
            dp, eff = sglang_dp(p), sglang_cap(p) or 0
            how = (
                "SGLang floors `--max-running-requests` per attention-DP rank "
                f"(`// --dp-size {dp}`): it gets {eff}"
            )
        else:
            dp = p.dp if backend == "vllm" else trtllm_dp(p)
            per = per_rank_cap(p, dp) or 0
            eff = per * dp
            how = f"each of its {dp} data-parallel ranks is capped at {per} ({p.max_running} // {dp}, min 1)"
        if eff == p.max_running:
            continue
        over = f"; its {dp} ranks outnumber that batch, one request each" if dp > p.max_running else ""
        out.append(
            f"- the {p.name} pool: {how}, so an instance runs at most {eff} requests, "
            f"not the {p.max_running} its pool was sized at{over};"
        )
    return out


def _yaml(data: Any, indent: int = 0) -> str:
    """YAML for plain dicts, lists, strings, numbers and booleans (JSON-style strings)."""
    pad = "  " * indent
    out = []
    if isinstance(data, dict):
        for k, v in data.items():
            if isinstance(v, dict | list) and v:
                out.append(f"{pad}{k}:\n{_yaml(v, indent + 1)}")
            else:
                out.append(f"{pad}{k}: {_scalar(v)}")
    else:
        for v in data:
            if isinstance(v, dict | list) and v:
                inner = _yaml(v, indent + 1).lstrip()
                out.append(f"{pad}- {inner}")
            else:
                out.append(f"{pad}- {_scalar(v)}")
    return "\n".join(out) + ("\n" if indent == 0 else "")


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    if v in ({}, []):
        return json.dumps(v)
    return json.dumps(str(v))


def write_deploy(files: dict[str, str], folder: Path) -> list[Path]:
    """The files under ``folder``, replaced whole: written in a sibling folder first and swapped
    in, so an earlier deployment's files never mix with these and a failed write leaves the
    earlier one as it was."""
    import os
    import shutil

    folder.parent.mkdir(parents=True, exist_ok=True)
    fresh = folder.with_name(f".{folder.name}.{os.getpid()}.new")
    old = folder.with_name(f".{folder.name}.{os.getpid()}.old")
    shutil.rmtree(fresh, ignore_errors=True)
    try:
        fresh.mkdir()
        for name, text in files.items():
            (fresh / name).write_text(text, encoding="utf-8")
            if name.endswith(".sh"):
                (fresh / name).chmod(0o755)
        if folder.exists():
            folder.rename(old)
        fresh.rename(folder)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return [folder / name for name in files]
