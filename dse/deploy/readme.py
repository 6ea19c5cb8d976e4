"""The README of a design's launch files: what the files launch and what they assumed (the
checkpoint, the KV cache, MTP, the caps and chunks each engine gets, the flags' versions, ports and
the router)."""

from __future__ import annotations

from dse.deploy.design import PROMPT_ROOM, Design, PoolLaunch
from dse.deploy.engines import (
    DEFAULT_TOKEN_BUDGET,
    SGLANG_UNSET_PER_WORKER,
    backend_of,
    batch_tokens,
    per_rank_cap,
    per_rank_chunk,
    router_admits,
    running_slots,
    sglang_cap,
    sglang_dp,
    sglang_running,
    token_budget,
    trtllm_dp,
    vllm_graph_tokens,
)
from dse.deploy.host_cache import host_cache_notes, vllm_offload_gib
from dse.deploy.scripts import (
    BOOTSTRAP_OFFSET,
    DIST_INIT_OFFSET,
    DP_RPC_OFFSET,
    NIXL_OFFSET,
    PORT,
    ROUTER_PORT,
    SLOT_STRIDE,
    disaggregated,
    host_var,
    needs_router,
    pool_hosts,
)
from dse.perf.frameworks import SGLANG_SPECULATIVE_RUNNING


def readme(
    design: Design, engine: str, flags: dict[str, dict[str, str]], command: str, image: str | None = None
) -> str:
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
        f"{_cap_cell(p, design, engine)} |"
        for p in design.pools
    ]
    m = design.metrics
    usd = m.get("usd_per_million_tokens")
    lines += [
        "",
        "Run each pool's script once per instance (on each of its hosts where an instance spans several,"
        " with `NODE_RANK` and `HEAD_HOST` set)"
        + (
            ", and `frontend.sh` once; `graph.yaml` is the same"
            " deployment for the Dynamo Kubernetes operator."
            if engine == "dynamo"
            else "."
        ),
        "",
        "What it assumed:",
        f"- the checkpoint: `MODEL` ({_checkpoint_words(design, engine)}), "
        f"{design.precision} routed experts as the study priced them"
        + (
            f" (the default checkpoint's are {design.native_precision}: "
            f"set `MODEL` to a {design.precision} one);"
            if design.precision != design.native_precision
            else ";"
        ),
        f"- the KV cache in {design.kv_dtype.value}, the study's engine profile `{design.profile}`'s;",
        f"- MTP with {design.mtp_drafts} draft token{'' if design.mtp_drafts == 1 else 's'} per step;"
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
        *_setting_notes(design, engine, flags),
        f"- the flags of {engine} {table['version']} as read from `{table['source']}` "
        "(`dse/deploy/engine_flags.toml`): check them against the version you run;",
        *_minimum_versions(design, engine, flags),
        _hosts_note(design),
        *_head_note(design, engine),
        _ports_note(),
        *_router_notes(design, engine, flags),
    ]
    lines += _dynamo_notes(design, engine, flags, image)
    if usd is not None:
        lines += ["", f"The study priced this design at ${usd:.4f} per million tokens."]
    return "\n".join(lines) + "\n"


def _checkpoint_words(design: Design, engine: str) -> str:
    """What `MODEL` defaults to: the catalog's checkpoint, or none (it had read "default `none: set
    MODEL`"), and where a Dynamo graph names it too."""
    if design.model_repo:
        return f"default `{design.model_repo}`"
    graph = "; `graph.yaml` names it `MODEL` too, which Kubernetes does not expand: replace it there"
    return "no default: the catalog names none; set it" + (graph if engine == "dynamo" else "")


def _dynamo_notes(
    design: Design, engine: str, flags: dict[str, dict[str, str]], image: str | None
) -> list[str]:
    """Dynamo's: the scripts that exit 2 for graph.yaml, the graph's container, its options files
    (TRT-LLM's workers alone have any), the scripts' etcd."""
    if engine != "dynamo":
        return []
    backend = backend_of(design, engine)
    lines = []
    wide = [f"`{p.name}.sh`" for p in design.pools if p.hosts > 1]
    if backend != "sglang" and wide:
        lines.append(f"- {', '.join(wide)} launch instances wider than a host, which the scripts do not "
                     f"wire for dynamo.{backend}: they exit 2, and `graph.yaml` "
                     "(whose multinode services the operator wires) launches them;")  # fmt: skip
    default = flags["dynamo"][f"image_{backend}"]
    chosen = image or default
    whose = (
        f"NVIDIA's Dynamo runtime image for {backend}, as Dynamo's own example graphs have it "
        "(`dse/deploy/engine_flags.toml`): `--image` runs another, whose engine must take these flags"
        if chosen == default
        else f"given by `--image` (the default is `{default}`)"
    )
    lines.append(f"- every service of `graph.yaml` runs in `{chosen}`, {whose};")
    if backend == "trtllm":  # only dynamo.trtllm workers read options files
        lines.append("- `graph.yaml`'s workers read their options files (`*.yaml`) from their working "
                     "directory: mount them there (a ConfigMap);")  # fmt: skip
    etcd = flags["dynamo"]["discovery_env"]
    lines.append(f"- the scripts' workers and frontend find each other through etcd (`graph.yaml`'s, "
                 "through Kubernetes, which the operator sets): run one that every host reaches and "
                 f"set `{etcd}` to it on every host, whose default, `http://localhost:2379`, is each "
                 "host's own;")  # fmt: skip
    secret = flags["dynamo"]["hf_secret"]
    lines.append(f"- `graph.yaml`'s workers take their environment from the secret `{secret}` "
                 "(`HF_TOKEN`, which a gated checkpoint needs), and no pod starts without it: create it "
                 f"first, `kubectl create secret generic {secret} --from-literal=HF_TOKEN=...` "
                 "in the graph's namespace.")  # fmt: skip
    return lines


def _hosts_note(design: Design) -> str:
    """Where each pool's instances run: hosts of its own, instance i on host i // k of them."""
    shared = [p for p in design.pools if p.per_host > 1]
    where = (
        "; where k instances share a host ("
        + ", ".join(f"`{p.name}.sh` {p.per_host}" for p in shared)
        + "), instance i runs on host i // k of its pool's, on the GPUs `INSTANCE` picks"
        if shared
        else ""
    )
    return (
        "- hosts: each pool runs on hosts of its own (`instances.json` gives each pool's `hosts`); no "
        "host runs instances of two pools, even of one GPU type, as each pool's scripts number its "
        f"GPUs from 0 on every host{where}{_beyond_priced(design)};"
    )


def _beyond_priced(design: Design) -> str:
    """Where hosts of its own per pool take more GPUs than the study priced (the placement buys a
    hardware's GPUs for all its pools together, in whole nodes: a 4-GPU prefill and a 4-GPU decode
    instance on B200 are one 8-GPU node there, two hosts here), a sentence saying so; else ""."""
    priced = design.metrics.get("gpus")
    taken = sum(pool_hosts(p) * p.gpus_per_host for p in design.pools)
    if not isinstance(priced, (int, float)) or taken <= priced:
        return ""
    return (
        f"; so these pools take {taken:,} GPUs' hosts where the study priced {priced:,.0f} GPUs (its "
        "pools' GPUs of one type together, in whole nodes): price the extra hosts, or share hosts "
        "between pools by giving one pool's instances the GPUs the other leaves (`CUDA_VISIBLE_DEVICES`)"
    )


def _head_note(design: Design, engine: str) -> list[str]:
    """Where an SGLang instance spans hosts: the head's address its scripts take, and its port."""
    wide = [p for p in design.pools if p.hosts > 1]
    if not wide or backend_of(design, engine) != "sglang":
        return []
    return [
        "- an instance over several hosts: set `HEAD_HOST` to the host its `NODE_RANK` 0 runs on; the "
        f"script passes `--dist-init-addr HEAD_HOST:P + {DIST_INIT_OFFSET}` (P its server port), from "
        "which SGLang derives the ports its rank 0 binds (that port and, under data-parallel attention, "
        "the next six and the one 13 above it), all among the instance's own;"
        + (" Dynamo's operator wires `graph.yaml`'s hosts itself;" if engine == "dynamo" else "")
    ]


def _ports_note() -> str:
    return (
        f"- ports: each instance on a host owns the {SLOT_STRIDE} ports from its server port P = {PORT} + "
        f"{SLOT_STRIDE} times its slot (a pool's slots on a host follow the previous pools'), which hold "
        f"every port it binds: SGLang prefill servers' KV bootstrap port P + {BOOTSTRAP_OFFSET}, and "
        "SGLang under data-parallel attention P + 13 and P + 233 to P + 239, and Dynamo's disaggregated "
        f"vLLM workers sharing a host their NIXL side channel from P + {NIXL_OFFSET} "
        "(`VLLM_NIXL_SIDE_CHANNEL_PORT`, 5600 for every worker by default); where instances share a "
        "host each script takes `INSTANCE` (its number in the pool, 0..n-1), which picks its GPUs "
        "(`CUDA_VISIBLE_DEVICES`) and ports; a disaggregated design's KV moves over NIXL."
    )


def _minimum_versions(design: Design, engine: str, flags: dict[str, dict[str, str]]) -> list[str]:
    """The oldest engine releases the scripts need, where they use a flag's newer name: vLLM's
    MTP method, Dynamo's vLLM worker role flag."""
    backend = backend_of(design, engine)
    out = []
    if backend == "vllm" and design.mtp_drafts and "minimum" in flags["vllm"]:
        out.append(f"- it needs {flags['vllm']['minimum']};")
    graphs = backend == "vllm" and any(vllm_graph_tokens(p, design) is not None for p in design.pools)
    if graphs and "minimum_cuda_graph" in flags["vllm"]:
        out.append(f"- it needs {flags['vllm']['minimum_cuda_graph']};")
    offload = backend == "vllm" and any(vllm_offload_gib(p) is not None for p in design.pools)
    if offload and "minimum_offload" in flags["vllm"]:
        out.append(f"- it needs {flags['vllm']['minimum_offload']};")
    if engine == "dynamo" and backend == "vllm" and disaggregated(design) and "minimum" in flags["dynamo"]:
        out.append(f"- it needs {flags['dynamo']['minimum']};")
    return out


def _router_notes(design: Design, engine: str, flags: dict[str, dict[str, str]]) -> list[str]:
    """What fronts the instances: SGLang's router or, for several vLLM or TRT-LLM instances, vLLM's
    (``router.sh``), or Dynamo's frontend; and vLLM's data-parallel RPC ports."""
    if engine == "dynamo" or not needs_router(design):
        return _rpc_note(design, engine)
    example = host_var(design.pools[0], 0)
    where = f": set `<POOL>_<i>` (`{example}`, ...) to the host instance i of that pool runs on;"
    admits = _admits_note(design, engine)
    if engine == "sglang":
        return [
            f"- `router.sh` starts SGLang's router (the `sglang-router` package) on port {ROUTER_PORT}, "
            "in front of every server"
            + (" (prefill ones with their bootstrap ports)" if disaggregated(design) else "")
            + where,
            admits,
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
        admits,
        *_rpc_note(design, engine),
    ]


def _admits_note(design: Design, engine: str) -> str:
    """How many requests the router admits at once (``router_admits``), what they are, and why it
    is passed."""
    admits = router_admits(design, engine)
    why = (
        "its default was 256 in SGLang's router before sgl-project/sglang#11435 and in vLLM's before "
        "vllm-project/router#24, which would throttle a design running more"
    )
    if admits is None:
        return (
            "- the router's `--max-concurrent-requests` is left at its default, as a pool runs its "
            f"engine's default running-request cap: {why}, so check your release's;"
        )
    slots = running_slots(design, engine) or 0
    waiting = "queued for or in prefill and in KV transfer" if disaggregated(design) else "queued for a slot"
    return (
        f"- the router admits {admits:,} requests at once (`--max-concurrent-requests`): it holds each "
        "from its arrival to the end of its response"
        + (" (a stream's to its first bytes only)" if engine != "sglang" else "")
        + ", so this is what the instances run at once "
        f"({slots:,}: each decode or aggregated instance's cap as its engine applies it, times the "
        f"instances) and {admits - slots:,} in flight before that ({waiting}: the "
        f"{design.requests_per_s:.3g} requests/s the design was sized for times "
        f"{design.before_decode_s:.3g} s, the larger of the study's TTFT target and the trial's mean "
        "TTFT, by Little's law). More wait in its queue (`--queue-size`, `--queue-timeout-secs`; then 408 "
        "or 429); its bucket also "
        f"refills at `--rate-limit-tokens-per-second`, by default the cap a second. It is passed as {why};"
    )


def _rpc_note(design: Design, engine: str) -> list[str]:
    """A README line where the vLLM scripts set data-parallel RPC ports (``_placement`` says why)."""
    if engine != "vllm" or not any(p.dp > 1 for p in design.pools):
        return []
    return [
        f"- vLLM's data-parallel RPC port (`--data-parallel-rpc-port`): each instance takes its server "
        f"port + {DP_RPC_OFFSET}, its own. vLLM uses it only "
        "where data-parallel engines run on other hosts (one host's ranks talk over local IPC, their "
        "process group on free ports vLLM picks), so these single-host instances would not collide on "
        "it today; it is set so that none does where vLLM uses it;"
    ]


def _setting_notes(design: Design, engine: str, flags: dict[str, dict[str, str]]) -> list[str]:
    """The README lines on the engine settings that differ from what the study priced, or that it
    chose for the engine: running caps, speculative-decoding resets, token budgets, the KV
    transfer buffer and the host tiers of resting KV."""
    backend = backend_of(design, engine)
    return [
        *_cap_notes(design, engine),
        *_spec_reset_notes(design, engine),
        *_budget_notes(design, engine, flags),
        *_buffer_note(design, engine),
        *host_cache_notes(design, backend, flags[backend]),
    ]


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


def _cap_cell(p: PoolLaunch, design: Design, engine: str) -> str:
    """The README table's running-request cap of a pool: the batch it was sized at; where it has
    none, the engine's default, or, for SGLang under MTP, what the script passes in its place."""
    if p.max_running is not None:
        return str(p.max_running)
    if backend_of(design, engine) == "sglang" and (n := sglang_running(p, design)) is not None:
        return f"{n} (SGLang's default without MTP)"
    return "engine default"


def _spec_reset_notes(design: Design, engine: str) -> list[str]:
    """A README line per pool the study gave no cap that SGLang runs under MTP: unset, SGLang
    would cut its running requests to 48 a server (``SGLANG_SPECULATIVE_RUNNING``)."""
    if backend_of(design, engine) != "sglang" or not design.mtp_drafts:
        return []
    out = []
    for p in design.pools:
        if p.max_running is not None:
            continue
        dp = sglang_dp(p)
        per = SGLANG_SPECULATIVE_RUNNING // dp
        out.append(
            f"- the {p.name} pool has no running-request cap of its own, but SGLang sets an unset "
            f"`--max-running-requests` to {SGLANG_SPECULATIVE_RUNNING} under speculative decoding, "
            f"whatever the server's role ({per} request{'' if per == 1 else 's'} a rank over "
            f"`--dp-size {dp}`): "
            f"it gets {sglang_running(p, design)}, {SGLANG_UNSET_PER_WORKER} a rank, the least SGLang "
            "runs a rank without speculative decoding (within half its KV cache's tokens);"
        )
    return out


def engine_caps(design: Design, engine: str) -> list[tuple[PoolLaunch, int, int, str]]:
    """Each pool whose engine runs another cap than the batch it was sized at: the pool, the
    requests an instance then runs at most, its data-parallel ranks, and how the engine gets there."""
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
        if eff != p.max_running:
            out.append((p, eff, dp, how))
    return out


def _cap_notes(design: Design, engine: str) -> list[str]:
    """A README line per pool whose engine runs another cap than the batch it was sized at."""
    out = []
    for p, eff, dp, how in engine_caps(design, engine):
        over = f"; its {dp} ranks outnumber that batch, one request each" if dp > (p.max_running or 0) else ""
        out.append(
            f"- the {p.name} pool: {how}, so an instance runs at most {eff} requests, "
            f"not the {p.max_running} its pool was sized at{over};"
        )
    return out


CAP_SHORTFALL = 0.1
"""A cap the engine runs this far below the batch a pool was sized at is said on stderr too: its
instances serve that much less of the traffic the study priced (SGLang's 64 for a 64-rank pool
sized at 122: half of it)."""


def cap_warnings(design: Design, engine: str) -> list[str]:
    """One warning per pool whose engine runs a cap over :data:`CAP_SHORTFALL` below its sized batch."""
    out = []
    for p, eff, _, how in engine_caps(design, engine):
        short = 1.0 - eff / (p.max_running or 1)
        if short > CAP_SHORTFALL:
            out.append(
                f"the {p.name} pool's instances run at most {eff} requests ({how.replace('`', '')}), "
                f"{short:.0%} fewer than the {p.max_running} it was sized at: they serve about that much "
                "less of the traffic the study priced (README.md: the running-request caps)"
            )
    return out


def _budget_notes(design: Design, engine: str, flags: dict[str, dict[str, str]]) -> list[str]:
    """A README line per pool whose vLLM or TRT-LLM token budget is raised above its chunk (or the
    engine's default) to hold one step of its running batch (``token_budget``)."""
    backend = backend_of(design, engine)
    if backend not in ("vllm", "trtllm"):
        return []
    table = flags["dynamo"] if engine == "dynamo" and backend == "trtllm" else flags[backend]
    flag = table["trtllm_chunk"] if engine == "dynamo" and backend == "trtllm" else table["chunk"]
    out = []
    for p in design.pools:
        dp = p.dp if backend == "vllm" else trtllm_dp(p)
        budget = token_budget(p, design, dp, graphs=backend == "vllm")
        was = per_rank_chunk(p, design, dp) if p.chunk_tokens is not None else DEFAULT_TOKEN_BUDGET
        if budget is None or budget == was:
            continue
        what = "the trial's chunk" if p.chunk_tokens is not None else f"{backend}'s default"
        drafts = f" with {design.mtp_drafts} MTP drafts each" if design.mtp_drafts else ""
        grid = " up to vLLM's grid of CUDA graph sizes" if budget != batch_tokens(p, design, dp) else ""
        out.append(
            f"- the {p.name} pool: each rank's token budget (`{flag}`) is {budget:,}, one step of its "
            f"{per_rank_cap(p, dp)} running requests{drafts}{grid}, not {what} ({was:,}): the running "
            "requests' decode tokens share that budget with prefill "
            "chunks, vLLM refuses one below `--max-num-seqs`, and a smaller one could not step the "
            "whole batch the study sized;"
        )
    return out
