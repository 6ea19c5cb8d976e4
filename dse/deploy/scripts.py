"""The launch scripts of a design's pools, the router in front of its instances, its Dynamo
graph and ``instances.json``: where each instance runs on its host (GPUs, ports) and how to reach it.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from dse.deploy.design import Design, PoolLaunch

PORT = 8000  # the server port of a design's first instance on a host; each owns SLOT_STRIDE from its own


# What an instance binds beside its server port P, as offsets from P. SGLang under data-parallel
# attention binds P + 13 (the DP handshake) and P + 233 .. P + 239 (the dist-init store at
# P + 233, then tokenizer, detokenizer, RPC, metrics, scheduler-input and load-collector ZMQ
# sockets at P + 234 .. P + 239), all derived from --port (sgl-project/sglang:
# python/sglang/srt/server_args.py @ 001067ff, ``PortArgs.init_new``, ZMQ_TCP_PORT_DELTA 233,
# DP_ATTENTION_HANDSHAKE_PORT_DELTA 13; its NCCL port is one the OS gives). The scripts put an
# SGLang prefill server's KV bootstrap port and a vLLM server's data-parallel RPC port among them,
# at offsets SGLang leaves free.
SGLANG_DERIVED = (13, *range(233, 240))
BOOTSTRAP_OFFSET = 1
DP_RPC_OFFSET = 2

# An SGLang instance over several hosts is given --dist-init-addr HOST:D, and then derives from D,
# not from --port: its rank 0 binds D (torch.distributed's store) and, under data-parallel
# attention, D + 1 .. D + 6 (tokenizer, detokenizer, RPC, metrics, scheduler-input and
# load-collector ZMQ sockets: ``PortArgs.init_new``, port_base = D + 1, server_args.py @ 001067ff)
# and D + 13 (the DP handshake with the other nodes: DataParallelController._broadcast_worker_ports,
# python/sglang/srt/managers/data_parallel_controller.py). The scripts take D at this offset from
# the instance's server port P, so that all of them lie in its slot and clear of P, its bootstrap
# and RPC ports, P + 13 and P + 233 .. P + 239.
DIST_INIT_OFFSET = 3
SGLANG_DIST_INIT_DERIVED = (*range(7), 13)

# A disaggregated vLLM worker's NIXL side channel (VLLM_NIXL_SIDE_CHANNEL_PORT, default 5600 for
# every worker) binds its base plus an offset by data-parallel rank (dp_rank x tp_size in 2025's
# vLLM, the rank itself later; ``engine_flags.toml``): instances sharing a host each get a base at
# this offset from their server port, and the NIXL_SPAN ports from it, room for two ports a GPU of
# any instance that shares a host (32 GPUs at most), clear of SGLang's derived ports.
NIXL_OFFSET = 100
NIXL_SPAN = 64


# Instances sharing a host take ports this far apart, each the SLOT_STRIDE ports from its server
# port: no port one instance binds is another's, however many share a host. Each pool's instances
# on a host take slots after the previous pools' (``first_slot``), so no two pools' do either.
SLOT_STRIDE = (
    max(
        0,
        *SGLANG_DERIVED,
        BOOTSTRAP_OFFSET,
        DP_RPC_OFFSET,
        *(DIST_INIT_OFFSET + d for d in SGLANG_DIST_INIT_DERIVED),
        NIXL_OFFSET + NIXL_SPAN - 1,
    )
    + 1
)


ROUTER_PORT = 30000


def dynamo_graph(
    design: Design, files: dict[str, str], flags: dict[str, dict[str, str]], image: str
) -> dict[str, Any]:
    """A DynamoGraphDeployment: the frontend and one worker service per pool, replicas = its
    instances (one replica per host where an instance spans several), every one in ``image``, each
    worker with the environment of the Hugging Face token's secret, as Dynamo's graphs have it."""
    d = flags["dynamo"]
    container = {"mainContainer": {"image": image}}
    services: dict[str, Any] = {
        "Frontend": {"componentType": "frontend", "replicas": 1, "extraPodSpec": container}
    }
    for pool in design.pools:
        line = _command_line(files[f"{pool.name}.sh"])
        words = shlex.split(line.replace("$MODEL", design.model_repo or "MODEL").replace("$HERE/", ""))
        words = _without_node_wiring(_without_env(words), flags["sglang"])
        ports = {"$BOOTSTRAP_PORT": str(PORT + BOOTSTRAP_OFFSET), "$PORT": str(PORT)}
        words = [ports.get(w, w) for w in words]  # a pod's own
        service: dict[str, Any] = {
            "envFromSecret": d["hf_secret"],  # HF_TOKEN, for a gated checkpoint (the README says)
            "componentType": "worker",
            "replicas": pool.instances,
            "resources": {"limits": {"gpu": str(min(pool.gpus, pool.gpus_per_host))}},
            "extraPodSpec": {"mainContainer": {"image": image, "command": words[:3], "args": words[3:]}},
        }
        if pool.role in ("prefill", "decode"):
            service["subComponentType"] = pool.role
        if pool.hosts > 1:
            service["multinode"] = {"nodeCount": pool.hosts}
        services[pool.name] = service
    return {
        "apiVersion": d["api_version"],
        "kind": d["kind"],
        "metadata": {"name": k8s_name(f"{design.study}-trial-{design.trial}")},
        "spec": {"services": services},
    }


def _without_env(words: list[str]) -> list[str]:
    """A command's words without a leading ``env NAME=VALUE ...``: the scripts give instances
    sharing a host ports of their own that way, which a pod, alone in its network, needs not."""
    if not words or words[0] != "env":
        return words
    rest = words[1:]
    while rest and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", rest[0]):
        rest = rest[1:]
    return rest


def _without_node_wiring(words: list[str], f: dict[str, str]) -> list[str]:
    """A worker's words without the flags that wire an instance across hosts (--nnodes,
    --node-rank, --dist-init-addr) and their values: the operator injects them for a multinode
    service, and Kubernetes would not expand the scripts' $NODE_RANK and $HEAD_HOST."""
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


def launch_script(
    pool: PoolLaunch | None,
    design: Design,
    args: list[str],
    unwired: str = "",
    k: int = 0,
) -> str:
    """A launch script of the ``k``-th pool; ``unwired``: the Dynamo worker whose multi-host
    instance only graph.yaml launches (the script says so and exits 2). It sets the variables its
    command uses and no others (``HERE``, ``MODEL``, the ports: ``_placement``)."""
    used = {v for a in args for v in re.findall(r"\$\{?([A-Z_]+)", a)}
    head = [
        "#!/usr/bin/env bash",
        f"# {design.study}, trial {design.trial}: " + (_pool_text(pool) if pool else "the Dynamo frontend"),
        "set -euo pipefail",
    ]
    if "HERE" in used:
        head.append('HERE="$(cd "$(dirname "$0")" && pwd)"')
    if "MODEL" in used:
        head.append(
            f'MODEL="${{MODEL:-{design.model_repo}}}"'
            if design.model_repo
            else ': "${MODEL:?set MODEL to the checkpoint}"'
        )
    head += _placement(pool, first_slot(design, k), used)
    if pool is not None and pool.hosts > 1 and unwired:
        return "\n".join([
            *head,
            f"# one instance spans {pool.hosts} hosts, which this script does not wire for {unwired}:",
            "# deploy graph.yaml, whose multinode service the Dynamo operator wires across them",
            "echo " + shlex.quote(f"{pool.name}.sh: an instance spans {pool.hosts} hosts; deploy graph.yaml")
            + " >&2",
            "exit 2",
            "# the command graph.yaml runs on each of them:",
            "# shellcheck disable=SC2317",
            "exec " + " ".join(_quote(a) for a in args),
        ]) + "\n"  # fmt: skip
    if pool is not None and pool.hosts > 1:
        head += [
            f"# one instance spans {pool.hosts} hosts: run this on each with NODE_RANK 0..{pool.hosts - 1}",
            'NODE_RANK="${NODE_RANK:?set NODE_RANK}"',
            'HEAD_HOST="${HEAD_HOST:?set HEAD_HOST to the host NODE_RANK 0 runs on}"',
        ]
    return "\n".join([*head, "exec " + " ".join(_quote(a) for a in args)]) + "\n"


def _placement(pool: PoolLaunch | None, first: int, used: set[str]) -> list[str]:
    """Where an instance of a pool whose slots on a host start at ``first`` runs on its host: its
    GPUs (``INSTANCE``'s share where instances share a host) and the ports of ``used`` (``PORT``,
    ``BOOTSTRAP_PORT``, ``DP_RPC_PORT``), each its own: its server port P, its KV bootstrap port
    and its vLLM data-parallel RPC port, both in the SLOT_STRIDE ports from P that are its own.

    vLLM's ``--data-parallel-rpc-port`` (default 29550, the same for every ``vllm serve``) "is only
    used when there are remote data parallel engines, otherwise the local IPC transport is used"
    (vllm-project/vllm:vllm/engine/arg_utils.py @ 99d7eb5d), and the ranks' process group takes
    free ports the OS gives (``ParallelConfig.__post_init__``: ``get_open_ports_list``, no flag;
    vllm/config/parallel.py @ 00193b82). The single-host instances written here would not
    collide on it today; each gets its own all the same, so that none does where vLLM uses it."""
    if pool is None:
        return []
    base = PORT + SLOT_STRIDE * first
    offsets = {
        "PORT": 0,
        "BOOTSTRAP_PORT": BOOTSTRAP_OFFSET,
        "DP_RPC_PORT": DP_RPC_OFFSET,
        "DIST_INIT_PORT": DIST_INIT_OFFSET,
        "NIXL_SIDE_PORT": NIXL_OFFSET,
    }
    ports = [(name, base + offset) for name, offset in offsets.items() if name in used]
    if pool.per_host == 1:
        return [f"{name}={port}" for name, port in ports]
    g = pool.gpus
    return [
        f"# {pool.per_host} instances share a host: INSTANCE (0..{pool.instances - 1}) picks this one's "
        f"GPUs and ports; instance i runs on host i // {pool.per_host} of this pool's own hosts",
        'INSTANCE="${INSTANCE:?set INSTANCE to the number of this instance in its pool}"',
        f"SLOT=$((INSTANCE % {pool.per_host}))",
        f'CUDA_VISIBLE_DEVICES="$(seq -s, $((SLOT * {g})) $((SLOT * {g} + {g - 1})))"',
        "export CUDA_VISIBLE_DEVICES",
        *(f"{name}=$(({port} + {SLOT_STRIDE} * SLOT))" for name, port in ports),
    ]


def first_slot(design: Design, k: int) -> int:
    """The first host slot of the ``k``-th pool's instances: the slots after the previous pools'."""
    return sum(p.per_host for p in design.pools[:k])


def check_ports(design: Design) -> str | None:
    """Why the design's instances' ports do not fit below the router's, or None where they do."""
    slots = first_slot(design, len(design.pools))
    if PORT + SLOT_STRIDE * slots <= ROUTER_PORT:
        return None
    return (
        f"its pools take {slots} instance slots on a host, {SLOT_STRIDE} ports each from {PORT}, "
        f"which would reach the router's port {ROUTER_PORT}"
    )


def router_script(design: Design, f: dict[str, str], admits: int | None = None) -> str | None:
    """SGLang's router in front of the design's servers (prefill ones with their bootstrap ports,
    for PD disaggregation), each at ``<POOL>_<i>``, the host of the pool's instance i, admitting
    ``admits`` requests at once (``dse.deploy.engines.router_admits``: the instances' running
    slots and the requests in flight before a slot holds them; None: its default): None for one
    aggregated instance."""
    disagg = disaggregated(design)
    if not needs_router(design):
        return None
    args = [*f["router"].split(), *([f["router_pd"]] if disagg else [])]
    urls: list[str] = []
    for k, p in enumerate(design.pools):
        for i in range(p.instances):
            url = _instance_url(design, k, i)
            if not disagg:
                urls.append(url)
            elif p.role == "prefill":
                args += [f["router_prefill"], url, str(_port(design, k, i) + BOOTSTRAP_OFFSET)]
            else:
                args += [f["router_decode"], url]
    if urls:
        args += [f["router_workers"], *urls]
    if admits is not None:
        args += [f["router_max_concurrent"], str(admits)]
    args += [f["host"], "0.0.0.0", f["port"], str(ROUTER_PORT)]
    return _router_file(design, "SGLang's router", args)


def http_router_script(
    design: Design, r: dict[str, str], engine: str, admits: int | None = None
) -> str | None:
    """vLLM's router (the ``vllm-router`` package) in front of several vLLM or TRT-LLM servers, each
    at ``<POOL>_<i>``, in its regular mode: it waits for a server's ``/health`` and forwards each
    OpenAI request to the server its cache-aware policy picks, both of which ``vllm serve`` and
    ``trtllm-serve`` serve (vllm-project/router:src/routers/http/router.rs; TensorRT-LLM's
    tensorrt_llm/serve/openai_server.py). None for one instance (these engines launch no
    disaggregated design here)."""
    if not needs_router(design):
        return None
    urls = [_instance_url(design, k, i) for k, p in enumerate(design.pools) for i in range(p.instances)]
    args = [*r["launch"].split(), r["workers"], *urls, r["policy"], r["policy_value"]]
    if admits is not None:  # as ``router_script``'s
        args += [r["max_concurrent"], str(admits)]
    args += [r["host"], "0.0.0.0", r["port"], str(ROUTER_PORT)]
    return _router_file(design, f"vLLM's router (`{r['package']}`, {engine} servers behind it)", args)


def _instance_url(design: Design, k: int, i: int) -> str:
    """The URL of instance ``i`` of the ``k``-th pool, double-quoted, its host ``<POOL>_<i>`` (the
    script stops where that is unset)."""
    pool = design.pools[k]
    var = host_var(pool, i)
    who = f"instance {i}" if pool.name == "instance" else f"{pool.name} instance {i}"  # an aggregated pool's
    return f'"http://${{{var}:?set {var} to the host of {who}}}:{_port(design, k, i)}"'


def host_var(pool: PoolLaunch, i: int) -> str:
    """The router script's variable for the host of instance ``i`` of ``pool``: ``DECODE_B200_0``,
    a name bash takes (a hardware id ``b200.v2`` had made ``${INSTANCE_B200.V2_1_0}``, which bash
    refuses as a bad substitution)."""
    return re.sub(r"[^A-Z0-9_]", "_", f"{pool.name.upper()}_{i}")


def k8s_name(text: str) -> str:
    """``text`` as a Kubernetes object's name takes it (RFC 1123: lowercase letters, digits and
    '-', a letter or digit at each end, 63 at most): a study ``My_Study v2`` had named its graph
    ``My_Study v2-trial-0``, which ``kubectl apply`` refuses."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower())[-63:].strip("-") or "dse"


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


def _port(design: Design, k: int, i: int) -> int:
    """The server port of instance ``i`` of the ``k``-th pool (``_placement``'s)."""
    return PORT + SLOT_STRIDE * (first_slot(design, k) + i % design.pools[k].per_host)


def _quote(arg: str) -> str:
    """Shell words; the script's own variables stay expandable (``$PORT``, and an environment
    assignment of one, ``NAME=$PORT``)."""
    return f'"{arg}"' if arg.startswith("$") or re.fullmatch(r"[A-Z_]+=\$[A-Z_]+", arg) else shlex.quote(arg)


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


def instances_of(design: Design) -> dict[str, Any]:
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
                "instances_per_host": p.per_host,
                "hosts": pool_hosts(p),  # hosts of its own: no host runs two pools' instances
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


def pool_hosts(pool: PoolLaunch) -> int:
    """The hosts a pool's instances take, none shared with another pool (each pool's scripts number
    its GPUs from 0 on a host): ``per_host`` instances to a host, or ``hosts`` a host each."""
    return pool.instances * pool.hosts if pool.per_host == 1 else -(-pool.instances // pool.per_host)


def disaggregated(design: Design) -> bool:
    return any(p.role == "prefill" for p in design.pools)


def needs_router(design: Design) -> bool:
    return disaggregated(design) or sum(p.instances for p in design.pools) > 1
