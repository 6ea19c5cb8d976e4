"""A simulator pipeline from a placement: a :class:`SimDesign`, made from a placement outcome
(:func:`dse.evaluation.design_of`, a study trial) or read from ``dse place --json``
(:func:`design_from_doc`, which validates the file once, at the edge).

Prefill pools become one pool of servers: an instance that batches ``m`` prompts per forward is
``m`` servers, each taking the batch time, so one request's prefill lasts a batch (as it does on
the GPU) and the pool's throughput is the mix of fresh prompts and midfills the MILP routed to it.
A four-stage design's midfill pool joins those servers with the midfills it was given: one queue
of the same total work, so the fluid model sees its capacity but not that it refuses fresh
prompts (the engine-level simulation keeps the pools apart only as one prefill pool as well).
Returning turns first pass a reload stage (one session at a time per prefill instance, at the mean
reload time of the tiers the MILP chose); every request passes a KV handoff stage. Each decode
pool keeps its instances, its slots (its unit's operating batch, which the engine uses as its
batch cap) and its step table: the stage performance model's time per output token of its unit at
every batch up to that cap (:func:`dse.sim.scenario.pooled_decode`: the discrete-event reference
steps the pools apart, the fluid model one kind of instance of their summed capacity and mean
time per output token). Until 2026-12-05 the pools became whole instances of the one with the most
instances, counted by tokens/s and rounded up: a small second pool on other hardware doubled the
decode capacity simulated. Aggregated units give a prefill server at full speed (a prompt's
prefill runs as its own forward, or as a chunk beside the decode step) and a decode instance
whose steps stretch by ``1 / (1 - phi)``, its prefill time share; attention-FFN units give decode
instances paced by twice the attention half's step (each side has half the TPOT).

The design is plain typed data (a study trial stores it), so the same pipeline can be built
again later without solving anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np

from dse.catalog import Catalog
from dse.errors import InputError
from dse.perf.afd import attention_side, domain_unit, ffn_side
from dse.perf.memo import Memo, frozen
from dse.perf.params import EngineProfile, PerfParams, with_mtp
from dse.perf.pool import build_pool
from dse.perf.serving import Deployment, dealt_over_pools, decode_step_seconds, decode_tpot
from dse.sim.kv_tiers import RestingClass
from dse.sim.scenario import Pipeline, pooled_decode
from dse.typed_data import Rule, acceptance, build, check_number, draft_depth
from dse.units import GB, Precision
from dse.workload import Slo, Workload
from formulations.placement_data import TIERS, Role

SOURCE = "placement"
ROLES = tuple(r.name.lower() for r in Role)
"""A unit's roles as ``dse place --json`` writes them."""


@dataclass(frozen=True)
class SimPool:
    """What the simulator needs of one pool of a placed design (per instance unless said)."""

    role: str  # prefill, midfill, decode, mixed, attention, ffn
    hardware: str
    name: str
    gpus: float
    attn_tp: float
    ep: float
    instances: float
    prefill_share: float  # an aggregated unit's time share for prefill
    prefill_batch_requests: float  # fresh prompts one prefill forward batches, at most
    decode_batch: float  # the unit's operating batch (its cap in the simulation)
    output_tokens_per_s: float  # the pool's decode capacity at the TPOT target
    requests_per_s: float  # prefilled or midfilled here
    returning_per_s: float
    prefill_busy_s: float | None  # busy seconds of one instance per request it prefills
    fresh_busy_s: float | None
    midfill_busy_s: float | None
    reload_s: float | None
    prefill_forward_requests: float = 0.0  # prompts a forward batches at its load (0: at most)
    # returning turns of ``returning_per_s`` whose KV was dropped: prefilled whole, no reload
    # (``reload_s`` is then the others' mean; a record from before 2026-12-07 has none)
    recompute_per_s: float = 0.0
    stages: float = 1.0  # a pipelined instance's stages, each one of ``instances`` here


@dataclass(frozen=True)
class SimDesign:
    """A placed design as the simulator reads it: the request's model, engine and traffic, the
    pools, and where KV rests between turns."""

    model: str
    engine: str
    weight_precision: str
    mtp: bool
    topology: str
    workload: Workload
    slo: Slo
    pools: tuple[SimPool, ...]
    resting: tuple[RestingClass, ...]
    # the deployment's own draft depth and acceptance rate (None: the engine profile's)
    mtp_draft_tokens: int | None = None
    mtp_accept_rate: float | None = None

    def engine_of(self, params: PerfParams) -> EngineProfile:
        """The engine profile this design runs with, its own MTP settings applied."""
        return with_mtp(params.engine(self.engine), self.mtp_draft_tokens, self.mtp_accept_rate)


def at_rate(design: SimDesign, rate: float) -> SimDesign:
    """``design`` carrying ``rate`` requests/s (a scenario's mean traffic, not the placement's):
    each pool's traffic scaled by the same factor. What the engine-level simulation runs, in
    ``dse simulate`` and in a study's check."""
    k = rate / design.workload.requests_per_s
    if math.isclose(k, 1.0, rel_tol=1e-9):  # a constant rate's mean over a grid of times: round-off
        return design
    pools = tuple(replace(p, requests_per_s=p.requests_per_s * k, returning_per_s=p.returning_per_s * k,
                          recompute_per_s=p.recompute_per_s * k)
                  for p in design.pools)  # fmt: skip
    return replace(design, pools=pools, workload=replace(design.workload, requests_per_s=rate))


def design_from_record(data: dict[str, Any], source: str = "trial record") -> SimDesign:
    """A :class:`SimDesign` as a study trial stored it (its plain values; a value a pool does not
    have, such as a decode pool's prefill time, stored as null)."""
    return SimDesign(
        model=str(data["model"]),
        engine=str(data["engine"]),
        weight_precision=str(data["weight_precision"]),
        mtp=bool(data["mtp"]),
        topology=str(data["topology"]),
        workload=build(Workload, data["workload"], source=source, prefix="workload."),
        slo=build(Slo, data["slo"], source=source, prefix="slo."),
        pools=tuple(SimPool(**p) for p in data["pools"]),
        resting=tuple(RestingClass(**r) for r in data["resting"]),
        mtp_draft_tokens=data.get("mtp_draft_tokens"),
        mtp_accept_rate=data.get("mtp_accept_rate"),
    )


def _need(d: dict[str, Any], key: str, where: str, source: str = SOURCE) -> Any:
    if not isinstance(d, dict) or key not in d or d[key] is None:
        raise InputError(source, f"{where}{key}", "is required (write it with `dse place --json`)")
    return d[key]


def _number(value: Any, key: str, source: str, *, positive: bool) -> float:
    """A finite number (> 0 when ``positive``, else >= 0), or bad input naming ``key``."""
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(source, key, "must be a number", value) from None
    if not np.isfinite(x) or x < 0 or (positive and x == 0):
        raise InputError(
            source, key, "must be a finite number > 0" if positive else "must be finite and >= 0", value
        )
    return x


def _whole(value: Any, key: str, source: str) -> float:
    """A count of instances, GPUs or stages: a whole number > 0 (0.5 instances had been simulated
    as half an instance's capacity, silently)."""
    x = _number(value, key, source, positive=True)
    if not x.is_integer():
        raise InputError(source, key, "must be a whole number > 0", value)
    return x


OPTIONAL = (
    "prefill_busy_s",
    "fresh_busy_s",
    "midfill_busy_s",
    "reload_s",
    "requests_per_s",
    "returning_per_s",
    "recompute_per_s",
)
"""Numbers of a pool that a placement may leave out (a decode pool prefills nothing)."""


def stage_replicas(p: SimPool, pp: float) -> SimPool:
    """A pool of ``pp``-stage pipelined (prefill) instances as the simulators run it: each
    instance as ``pp`` instances of one stage's GPUs running every layer, which is the same work
    per GPU, the same time a prompt takes through the stages and the same prompts per second."""
    if pp <= 1:
        return p
    busy = {k: getattr(p, k) * pp if getattr(p, k) else getattr(p, k)
            for k in ("prefill_busy_s", "fresh_busy_s", "midfill_busy_s")}  # fmt: skip
    return replace(
        p,
        gpus=p.gpus / pp,
        instances=p.instances * pp,
        stages=pp,
        prefill_batch_requests=p.prefill_batch_requests / pp,  # its count was a pipeline's
        **busy,
    )


def _pool_from_doc(p: Any, i: int, source: str) -> SimPool:
    """``best.pools[i]`` of a ``dse place --json`` file, checked: every number the pipeline
    divides by or multiplies with."""
    where = f"best.pools[{i}]"
    if not isinstance(p, dict) or not isinstance(p.get("unit"), dict):
        raise InputError(source, where, "must be a pool with a unit (write it with `dse place --json`)")
    unit = _need(p, "unit", f"{where}.", source)
    par = _need(unit, "parallel", f"{where}.unit.", source)
    instances = _whole(_need(p, "instances", f"{where}.", source), f"{where}.instances", source)
    size = {
        k: _whole(_need(par, k, f"{where}.unit.parallel.", source), f"{where}.unit.parallel.{k}", source)
        for k in ("gpus", "attn_tp", "ep")
    }
    role = _need(unit, "role", f"{where}.unit.", source)
    if role not in ROLES:  # another role's pool had been left out of the pipeline, silently
        raise InputError(source, f"{where}.unit.role", f"must be one of {', '.join(ROLES)}", role)
    pp = _whole(par.get("pp", 1), f"{where}.unit.parallel.pp", source)  # 1.5 stages had been run
    total = p.get("gpus")
    if total is not None and _whole(total, f"{where}.gpus", source) != instances * size["gpus"]:
        # an instance's GPUs edited apart from the pool's had simulated the shape the pool cannot hold
        rule = f"must agree with the pool's gpus ({float(total):g}) over its instances ({instances:g})"
        raise InputError(source, f"{where}.unit.parallel.gpus", rule, par["gpus"])
    out_tok = 0.0
    if role in ("decode", "mixed", "attention"):
        key = "output_tokens_per_s"
        out_tok = _number(_need(p, key, f"{where}.", source), f"{where}.{key}", source, positive=True)
    opt: dict[str, float | None] = {}
    for k in OPTIONAL:
        v = p.get(k)
        missing = v is None or (isinstance(v, float) and np.isnan(v))
        opt[k] = None if missing else _number(v, f"{where}.{k}", source, positive=False)
    if role in ("prefill", "mixed", "midfill") and opt["prefill_busy_s"] == 0:
        # a pool that prefills in no time: it had been dropped, and the file told it has no such pool
        raise InputError(source, f"{where}.prefill_busy_s", f"must be > 0 for a {role} pool", 0)
    if (opt["recompute_per_s"] or 0.0) > (opt["returning_per_s"] or 0.0) * (1 + 1e-9):
        rule = f"must be at most the pool's returning_per_s ({opt['returning_per_s'] or 0.0:g})"
        raise InputError(source, f"{where}.recompute_per_s", rule, opt["recompute_per_s"])
    share = 0.0
    if unit.get("prefill_share") is not None:
        share = _number(unit["prefill_share"], f"{where}.unit.prefill_share", source, positive=False)
        if share > 1:
            raise InputError(source, f"{where}.unit.prefill_share", "must be between 0 and 1", share)
    # counts the pipeline takes as they are (a decode_batch of -5 had run as one slot, silently)
    counts = {
        k: 0.0 if unit.get(k) is None else _number(unit[k], f"{where}.unit.{k}", source, positive=False)
        for k in ("decode_batch", "prefill_batch_requests", "prefill_forward_requests")
    }
    sim = SimPool(
        role=str(role),
        hardware=str(_need(unit, "hardware", f"{where}.unit.", source)),
        name=str(unit.get("name", "")),
        gpus=size["gpus"],
        attn_tp=size["attn_tp"],
        ep=size["ep"],
        instances=instances,
        prefill_share=share,
        prefill_batch_requests=counts["prefill_batch_requests"],
        prefill_forward_requests=counts["prefill_forward_requests"],
        decode_batch=counts["decode_batch"],
        output_tokens_per_s=out_tok,
        requests_per_s=opt["requests_per_s"] or 0.0,
        returning_per_s=opt["returning_per_s"] or 0.0,
        prefill_busy_s=opt["prefill_busy_s"],
        fresh_busy_s=opt["fresh_busy_s"],
        midfill_busy_s=opt["midfill_busy_s"],
        reload_s=opt["reload_s"],
        recompute_per_s=opt["recompute_per_s"] or 0.0,
    )
    return stage_replicas(sim, pp)


def _resting(tiers: Any, total: float, source: str) -> tuple[RestingClass, ...]:
    """``best.tiers`` of a placement file, checked: each KV class's returns, dwell and KV, and its
    shares over known tiers summing to one; all classes' returns within the traffic. A negative
    dwell had rested 59 million TB in HBM, shares of 3 in all and returns of 1,000 a second at 20
    requests/s had simulated, and an unknown tier had been left out, silently."""
    out = []
    for i, t in enumerate(tiers):
        where = f"best.tiers[{i}]."
        back = _number(
            _need(t, "returning_per_s", where, source), f"{where}returning_per_s", source, positive=False
        )
        dwell = _number(_need(t, "dwell_s", where, source), f"{where}dwell_s", source, positive=True)
        gb = _number(
            _need(t, "gb_per_session", where, source), f"{where}gb_per_session", source, positive=False
        )
        share = _need(t, "share", where, source)
        if not isinstance(share, dict):
            raise InputError(source, f"{where}share", "must map tiers to shares", share)
        for k, v in share.items():
            if k not in TIERS:
                raise InputError(source, f"{where}share.{k}", f"is no tier: one of {', '.join(TIERS)}")
            if _number(v, f"{where}share.{k}", source, positive=False) > 1:
                raise InputError(source, f"{where}share.{k}", "must be between 0 and 1", v)
        if share and not math.isclose(sum(float(v) for v in share.values()), 1.0, abs_tol=1e-6):
            rule = "must sum to 1 over the tiers (the class rests somewhere, or is dropped)"
            raise InputError(source, f"{where}share", rule, round(sum(float(v) for v in share.values()), 6))
        out.append(RestingClass(back / total, dwell, gb, {k: float(v) for k, v in share.items()}))
    returns = sum(c.share_of_arrivals for c in out) * total
    if returns > total * (1 + 1e-9):
        rule = f"returning_per_s must sum to at most the traffic ({total:g} requests/s)"
        raise InputError(source, "best.tiers", rule, round(returns, 6))
    return tuple(out)


def _flag(req: dict[str, Any], key: str, source: str) -> bool:
    """``req[key]``, a JSON true or false (absent: false); the string "false" had been read as
    true, and a design placed without MTP simulated with it."""
    value = req.get(key, False)
    if not isinstance(value, bool):
        raise InputError(source, f"request.{key}", "must be true or false", value)
    return value


def _optional(req: dict[str, Any], key: str, check: Rule, source: str) -> Any:
    """``req[key]`` held to ``check``, or None where it is absent or null."""
    value = req.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(source, f"request.{key}", "must be a number", value)
    check_number(value, source=source, key=f"request.{key}", check=check)
    return value


def design_from_doc(doc: dict[str, Any], source: str = SOURCE) -> SimDesign:
    """The best design of a ``dse place --json`` document, validated once: a broken file is bad
    input naming its key. What the catalog says of it (ids, shapes, weights) ``dse simulate``
    checks next, where the placement's rules are at hand (``_runnable`` of :mod:`dse.cli.simulate_cmd`)."""
    try:
        req = _need(doc, "request", "", source)
        best = doc.get("best")
        if not best:
            why = doc.get("infeasibility")  # what `dse place` said of it (its JSON since it carries it)
            said = (
                f" ({why['binding']}: {why['detail']})"
                if isinstance(why, dict) and {"binding", "detail"} <= set(why)
                else ""
            )
            raise InputError(source, "best", f"holds no feasible design to simulate{said}")
        workload = build(
            Workload, _need(req, "workload", "request.", source), source=source, prefix="request.workload."
        )
        served = best.get("requests_per_s")
        if req.get("objective") == "goodput" and isinstance(served, (int, float)) and served > 0:
            # the most traffic its caps serve, what the design was sized for (the request's rate
            # only sets the mix): the pools' and the KV classes' figures are at this rate
            workload = replace(workload, requests_per_s=float(served))
        slo = build(Slo, _need(req, "slo", "request.", source), source=source, prefix="request.slo.")
        pools = tuple(
            _pool_from_doc(p, i, source) for i, p in enumerate(_need(best, "pools", "best.", source))
        )
        resting = _resting(best.get("tiers") or [], workload.requests_per_s, source)
        return SimDesign(
            model=str(_need(req, "model", "request.", source)),
            engine=str(req.get("engine", "trt")),
            weight_precision=str(req.get("weight_precision", "fp8")),
            mtp=_flag(req, "mtp", source),
            topology=str(best.get("topology", "")),
            workload=workload,
            slo=slo,
            pools=pools,
            resting=resting,
            # the request's own draft depth and acceptance (a design placed with them had been
            # simulated at the engine profile's)
            mtp_draft_tokens=_optional(req, "mtp_draft_tokens", draft_depth, source),
            mtp_accept_rate=_optional(req, "mtp_accept_rate", acceptance, source),
        )
    except KeyError as exc:
        raise InputError(
            source, f"best.pools: {exc.args[0]}", "is required (write it with `dse place --json`)"
        ) from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise InputError(
            source, "best", f"is not a placement written by `dse place --json` ({exc})"
        ) from None


# A study's trials place the same design again and again (about half the headline study's checks
# repeat one): its pipeline, a pure function of everything but its resting KV classes (which the
# pipeline does not read), is built once a process.
_PIPELINES = Memo(256)


def pipeline_of(
    design: SimDesign,
    catalog: Catalog,
    params: PerfParams,
    *,
    buffer_max: float = np.inf,
    source: str = SOURCE,
) -> tuple[Pipeline, float]:
    """(pipeline, KV GB per decoding sequence) of ``design``; a design met before is answered from
    :data:`_PIPELINES` (what is kept is shared: its arrays are read-only)."""
    key = (replace(design, resting=()), id(catalog), id(params), buffer_max, source)
    try:
        return _PIPELINES.get(
            key, (catalog, params), lambda: _frozen(_pipeline(design, catalog, params, buffer_max, source))
        )
    except (TypeError, ValueError) as exc:  # a precision or engine the file names wrongly
        raise InputError(
            source, "request", f"is not a placement written by `dse place --json` ({exc})"
        ) from None


def _frozen(built: tuple[Pipeline, float]) -> tuple[Pipeline, float]:
    return frozen(built[0]), built[1]


@dataclass
class _Prefill:
    """The prefill-capable pools as one pool of servers, and the mix of work they are given."""

    servers: float = 0.0  # an instance batching m prompts per forward is m servers
    instances: float = 0.0
    gpus: float = 0.0
    rate: float = 0.0  # requests/s the servers prefill when busy
    fresh_w: float = 0.0  # requests/s x seconds, per kind, to weight the mean service times
    fresh_n: float = 0.0
    mid_w: float = 0.0
    mid_n: float = 0.0
    reload_w: float = 0.0
    # sessions whose KV comes back at once: each attention-DP rank of an instance reloads its own
    # sessions over its own GPUs' links (a session's reload takes the links of the GPUs that split
    # it: dse.placement.shapes.Shapes.reload_s), a pipelined instance's stages together
    reload_links: float = 0.0

    def add(self, p: SimPool) -> None:
        x, busy = p.instances, p.prefill_busy_s
        if p.role not in ("prefill", "mixed", "midfill") or not busy:
            return
        # an aggregated instance prefills the prompts that wait, forward after forward: at its
        # prefill share that is mostly one, so one server at the busy time per prompt; a prefill
        # pool's instance as many servers as prompts its forwards batch at its load, counted in
        # fresh prompts' worth: where its mix costs more a request than a fresh prompt (returning
        # turns recomputed from nothing), a forward holds fewer (a 32-GPU B200 prefill whose dropped
        # 60,000-token prefixes took 78% of its time had been 128 servers of 6 s, TTFT 2.5 s in the
        # fluid model against 0.32 s at p50 through the schedulers; 23 servers of a 1.1-s forward)
        forward = p.prefill_forward_requests or p.prefill_batch_requests or 1.0
        if p.role == "prefill" and p.fresh_busy_s and busy > p.fresh_busy_s:
            forward *= p.fresh_busy_s / busy
        m = 1.0 if p.role == "mixed" else max(1.0, round(forward))
        self.servers += x * m
        self.instances += x
        self.gpus += x * p.gpus
        self.reload_links += x / p.stages * max(p.gpus / p.attn_tp, 1.0)
        self.rate += x / busy
        ret = p.returning_per_s
        fresh = p.requests_per_s - ret
        if fresh > 0 and p.fresh_busy_s:
            self.fresh_w += fresh * p.fresh_busy_s * m
            self.fresh_n += fresh
        if ret > 0 and p.midfill_busy_s:
            self.mid_w += ret * p.midfill_busy_s * m
            self.reload_w += (ret - p.recompute_per_s) * (p.reload_s or 0.0)  # a recompute reloads nothing
            self.mid_n += ret

    def planner_steps(self, decode: SimPool) -> tuple[float, float]:
        """(prefill servers, decode instances) one planner move takes from one role and gives the
        other: the fewest whole instances of each whose GPUs are equal (an 8-GPU prefill instance
        for an 8-GPU decode instance, two of 4 GPUs for one of 8), the prefill side counted in
        its servers (:class:`~dse.sim.scenario.Pipeline`)."""
        gp, gd, per = self.gpus / self.instances, float(decode.gpus), self.servers / self.instances
        if gp.is_integer() and gd.is_integer():
            g = math.lcm(int(gp), int(gd))
            return g / gp * per, g / gd
        return gd / gp * per, 1.0

    def service_s(self, returning_share: float) -> tuple[float, float]:
        """(fresh, midfill) seconds per request on one server: each kind's mean, scaled so the
        servers' mix reproduces the pool's rate (one request's prefill lasts a batch)."""
        mean_busy = self.servers / self.rate
        fresh_s = self.fresh_w / self.fresh_n if self.fresh_n > 0 else mean_busy
        midfill_s = self.mid_w / self.mid_n if self.mid_n > 0 else mean_busy
        mix = (1 - returning_share) * fresh_s + returning_share * midfill_s
        return fresh_s * mean_busy / mix, midfill_s * mean_busy / mix  # the same total work


def _pipeline(
    design: SimDesign, catalog: Catalog, params: PerfParams, buffer_max: float, source: str
) -> tuple[Pipeline, float]:
    workload = design.workload
    model, engine, wp = (
        catalog.model(design.model),
        design.engine_of(params),
        Precision(design.weight_precision),
    )
    prefill = _Prefill()
    decoders: list[SimPool] = []
    for i, p in enumerate(design.pools):
        prefill.add(p)
        if p.role in ("decode", "mixed", "attention"):
            if not p.decode_batch:
                raise InputError(
                    source, f"best.pools[{i}].unit.decode_batch", "must be positive for a decode pool"
                )
            decoders.append(p)
    if prefill.servers <= 0 or not decoders:
        raise InputError(source, "best.pools", "needs a prefill-capable and a decode-capable pool")
    main = max(decoders, key=lambda d: d.instances)
    decoders.sort(key=lambda d: d is not main)  # the main pool first: its KV and the planner's
    slots, tables, pool = _step_tables(design, decoders, catalog, params)
    decode = pooled_decode(
        [p.instances for p in decoders],
        slots,
        tables,
        [p.prefill_share if p.role == "mixed" else 0.0 for p in decoders],
    )
    handoff = hand_back = 0.0
    if main.role != "mixed":
        hands = prefill_pool(design.pools, catalog, model, wp, engine, params)
        handoff = _handoff_s(workload.input_tokens, hands, params)
        hand_back = _handoff_s(workload.returning_context_tokens, hands, params)
    ctx = workload.mean_prompt_tokens() + 0.5 * workload.output_tokens
    kv_gb = (ctx * float(pool.kv_bytes_per_token[0]) + float(pool.state_bytes[0])) / GB
    share = workload.returning_share
    fresh_s, midfill_s = prefill.service_s(share)
    steps = prefill.planner_steps(main)
    pipe = Pipeline(
        prefill_instances=np.array([prefill.servers]),
        planner_prefill_step=np.array([steps[0]]),
        planner_decode_step=np.array([steps[1]]),
        prefill_s=np.array([fresh_s]),
        handoff_s=np.array([handoff]),
        buffer_max=np.array([buffer_max]),
        label=(f"{design.topology}: {' + '.join(p.name for p in decoders)}",),
        midfill_share=np.array([share]),
        midfill_s=np.array([midfill_s]),
        reload_s=np.array([prefill.reload_w / prefill.mid_n if prefill.mid_n > 0 else 0.0]),
        # each attention-DP rank of a prefill instance brings back one session's KV at a time
        # (until 2026-12-07 an instance one at a time: a 32-GPU attention-DP pool reloaded at a
        # 32nd of the rate the placement's links carry once a session's reload took one GPU's
        # link), and each instance hands one request's KV to decode at a time over the NICs that
        # hold its shards
        reload_servers=np.array([prefill.reload_links]),
        handoff_servers=np.array([prefill.instances if handoff > 0 else np.inf]),
        # a returning turn hands its cached prefix with its suffix, as the placement's NIC rows
        # count it (until 2026-12-05 every turn handed a fresh prompt's KV: 4,000 tokens where a
        # returning turn of a 20,000-token prefix hands 20,500)
        midfill_handoff_s=np.array([hand_back]),
        # every decode pool at its own instances, slots and step table, no instance rounded up;
        # an aggregated unit's prefill takes time from its decode: the tables leave it the planned
        # share, and the simulators slow or speed its steps as prefill takes more or less
        **decode,
    )
    return pipe, kv_gb


def _step_tables(
    design: SimDesign, pools: list[SimPool], catalog: Catalog, params: PerfParams
) -> tuple[list[int], list[Any], Any]:
    """(slots, time per output token at every batch 0..slots) of each decode pool, and the
    performance-model pool of the first one."""
    slots, tables, first = [], [], None
    for p in pools:
        c, table, pool = _step_table(design, p, catalog, params)
        slots.append(c)
        tables.append(table)
        first = pool if first is None else first
    return slots, tables, first


def _step_table(
    design: SimDesign, dec: SimPool, catalog: Catalog, params: PerfParams
) -> tuple[int, Any, Any]:
    """(slots, time per output token at every batch 0..slots, the pool) of one decode pool: the
    performance model at up to 257 batches (a pool the performance model builds once a process),
    interpolated to every batch up to the cap; an aggregated unit's leaves prefill its share."""
    w, engine = design.workload, design.engine_of(params)
    slots = int(max(1, np.floor(dec.decode_batch)))
    n = np.unique(np.round(np.linspace(0.0, slots, min(slots + 1, 257))))
    k = len(n)
    pool = build_pool(
        catalog.model(design.model),
        [catalog.hardware(dec.hardware)] * k,
        gpus=[dec.gpus] * k,
        attn_tp=[dec.attn_tp] * k,
        ep=[dec.ep] * k,
        weight_precision=[Precision(design.weight_precision)] * k,
        kv_precision=[engine.kv_precision] * k,
        engines=params.kernel_engines([design.engine] * k),
    )
    ctx = np.full_like(n, w.mean_prompt_tokens() + 0.5 * w.output_tokens)
    drafts = np.full_like(n, float(engine.mtp_draft_tokens if design.mtp else 0))
    accept = np.full_like(n, engine.mtp_accept_tokens if design.mtp else 1.0)
    if dec.role == "attention":
        tpot = _afd_tpot(design, catalog, params, pool, dec, n, ctx, drafts, accept)
    else:
        tpot = decode_tpot(
            pool, params, batch=np.maximum(n, 1e-9), context=ctx, speed=np.full_like(n, engine.speed),
            draft_tokens=drafts, accept_tokens=accept,
        )  # fmt: skip
    tpot = np.interp(np.arange(slots + 1, dtype=float), n, tpot)
    if dec.role == "mixed":
        tpot = tpot / (1.0 - dec.prefill_share)
    return slots, tpot, pool


def _afd_tpot(
    design: SimDesign, catalog: Catalog, params: PerfParams, pool: Any, dec: SimPool,
    n: Any, ctx: Any, drafts: Any, accept: Any,
) -> Any:  # fmt: skip
    """Seconds per output token of an attention instance of an attention-FFN design (of ``dec``,
    whose performance-model pool is ``pool``) at ``n`` sequences: the slowest of its attention
    half, the halves of the expert pools it reaches (each its share of the tokens,
    :func:`expert_routes`, every attention instance at ``n``: the experts' weights are read every
    step however few tokens come) and the hidden states' transfer (over NVLink or the NICs, as the
    placement put the unit), each in half the step (two micro-batches in ping-pong), as the
    engine-level simulation steps."""
    k = len(n)

    def pool_of(p: SimPool) -> Any:
        return build_pool(
            catalog.model(design.model), [catalog.hardware(p.hardware)] * k, gpus=[p.gpus] * k,
            attn_tp=[p.attn_tp] * k, ep=[p.ep] * k, weight_precision=[Precision(design.weight_precision)] * k,
            kv_precision=[design.engine_of(params).kv_precision] * k,
            engines=params.kernel_engines([design.engine] * k),
        )  # fmt: skip

    attention = sum(p.instances for p in design.pools if p.role == "attention")
    routes = routes_of(design, dec)
    each = [
        Deployment(
            prefill=None, decode=attention_side(pool), prefill_instances=np.ones(k),
            decode_instances=np.full(k, attention), isl=ctx, osl=np.zeros(k),
            speed=np.full(k, design.engine_of(params).speed), draft_tokens=drafts, accept_tokens=accept,
            ffn=ffn_side(pool_of(r.pool)), ffn_instances=np.full(k, r.instances),
            ffn_same_hardware=np.full(k, r.pool.hardware == dec.hardware), ffn_in_domain=np.full(k, r.near),
        )
        for r in routes
    ]  # fmt: skip
    dealt = dealt_over_pools(each, [r.share for r in routes])
    steps = [decode_step_seconds(d, params, np.maximum(n, 1e-9), ctx) for d in dealt]
    return np.max(steps, axis=0) / accept


Shape = tuple[str, float, float, float, float, bool]  # hardware, GPUs, attention TP, EP, batch, domain unit


def shape_of(p: SimPool) -> Shape:
    """What tells pools apart in :func:`one_per_shape`: hardware, shape, batch, domain unit."""
    return (p.hardware, p.gpus, p.attn_tp, p.ep, p.decode_batch, domain_unit(p.name))


def one_per_shape(pools: list[SimPool]) -> list[SimPool]:
    """Pools of one hardware, shape and batch as one, their instances and traffic summed, those
    the placement keeps in one scale-up domain (``.../nvlink``, :func:`~dse.perf.afd.domain_unit`)
    apart from those across the NICs."""
    out: dict[Shape, SimPool] = {}
    for p in pools:
        key = shape_of(p)
        q = out.get(key)
        out[key] = (
            p
            if q is None
            else replace(
                q,
                instances=q.instances + p.instances,
                requests_per_s=q.requests_per_s + p.requests_per_s,
                returning_per_s=q.returning_per_s + p.returning_per_s,
                output_tokens_per_s=q.output_tokens_per_s + p.output_tokens_per_s,
            )
        )
    return list(out.values())


class ExpertRoute(NamedTuple):
    """An expert pool an attention pool deals its tokens to: the ``share`` of its tokens it takes;
    the ``instances`` it counts as beside all the attention instances (``Deployment.ffn_instances``
    to their ``decode_instances``), so that an expert instance takes, for each sequence an
    attention instance of this pool runs, what every attention pool sends it at the same share of
    its placed batch; and whether the hidden states cross NVLink (``near``) or the NICs."""

    pool: SimPool
    share: float
    instances: float
    near: bool


def expert_routes(design: SimDesign) -> dict[Shape, list[ExpertRoute]]:
    """An attention-FFN design's expert pools as each attention pool (by shape, :func:`one_per_shape`)
    reaches them, as the placement put them. Pools that share a scale-up domain with the
    attention of their shape (``.../nvlink``) take that attention's tokens over NVLink, as far as
    they carry (each pool its instances times its unit's token batch) at the load both sides
    carry; the rest of the attention pools' tokens are dealt over the pools across the NICs as
    they carry them (over every pool, where none is across the NICs). The router keeps every
    attention pool equally full (:mod:`dse.sim.engine_latency`), so an expert instance takes what
    every attention pool sends it at the same share of its placed batch. The slowest pool an
    attention pool reaches paces its step.

    Until 2026-12-06 (session 57) every attention pool dealt its tokens over every expert pool,
    each link was found from the counts, and every attention instance counted as one of the same
    batch: 38 of the 152 attention-FFN designs of ``benchmarks/engine_agreement.py`` then stepped
    some expert pool on another link than the placement's (NICs for a domain unit, NVLink for a
    unit the placement put across the NICs), and an 8-GPU attention instance of 3,685 sequences
    beside 2-GPU ones of 954 stepped as if all ran 3,685. Pools whose units name no batch (a
    placement written before FFN units had one) share by GPUs."""
    att = one_per_shape([p for p in design.pools if p.role == "attention"])
    ffns = one_per_shape([p for p in design.pools if p.role == "ffn"])
    sized = all(p.decode_batch > 0 for p in ffns)
    carry = np.array([p.instances * (p.decode_batch if sized else p.gpus) for p in ffns])
    batch = np.array([max(a.decode_batch, 1.0) for a in att])
    held = np.array([a.instances for a in att]) * batch  # tokens a step at the placed batches
    load = min(held.sum(), carry.sum()) / held.sum() if sized else 1.0  # the share both sides carry

    def partners(a: SimPool, f: SimPool) -> bool:  # a domain unit and the FFN units of its shape
        return domain_unit(a.name) and domain_unit(f.name) and shape_of(f)[:4] == shape_of(a)[:4]

    beside = {i: [j for j, f in enumerate(ffns) if partners(a, f)] for i, a in enumerate(att)}
    kept = {j for js in beside.values() for j in js}
    nic = [j for j in range(len(ffns)) if j not in kept]
    across = nic or list(range(len(ffns)))  # none across the NICs: the rest over every pool
    shares = np.zeros((len(att), len(ffns)))
    for i, own in beside.items():
        room = float(carry[own].sum())
        near = 1.0 if own and not nic else min(1.0, room / (held[i] * load))  # its tokens' share over NVLink
        shares[i, own] = near * carry[own] / max(room, 1e-300)
        shares[i, across] += (1.0 - near) * carry[across] / carry[across].sum()
    taken = held @ shares  # tokens a step each expert pool takes, every attention pool at its batch
    attention = sum(a.instances for a in att)
    return {
        shape_of(a): [
            ExpertRoute(f, float(shares[i, j]), float(attention * batch[i] * f.instances / t), j in beside[i])
            for j, (f, t) in enumerate(zip(ffns, taken, strict=True))
            if shares[i, j] > 0
        ]
        for i, a in enumerate(att)
    }


def routes_of(design: SimDesign, attention: SimPool) -> list[ExpertRoute]:
    """The expert pools ``attention`` (a pool of the design) reaches (:func:`expert_routes`)."""
    return expert_routes(design)[shape_of(attention)]


def prefill_pool(
    pools: tuple[SimPool, ...], catalog: Catalog, model: Any, wp: Precision, engine: Any, params: PerfParams
) -> Any:
    """The performance-model pool of the prefill unit with the most instances."""
    pre = max((p for p in pools if p.role == "prefill"), key=lambda p: p.instances)
    return build_pool(
        model,
        [catalog.hardware(pre.hardware)],
        gpus=[pre.gpus],
        attn_tp=[pre.attn_tp],
        ep=[pre.ep],
        weight_precision=[wp],
        kv_precision=[engine.kv_precision],
        engines=params.kernel_engines([engine.name]),
    )


def _handoff_s(tokens: float, pool: Any, p: PerfParams) -> float:
    """Seconds to hand the KV of a context of ``tokens`` (and its fixed state) to decode over the
    NICs of the prefill GPUs that hold its shards: a fresh prompt's, or a returning turn's cached
    prefix and suffix (:mod:`dse.placement.shapes`' fresh and returning handoffs)."""
    nics = float(pool.nic_bytes_per_s[0]) * p.nic_eff * float(min(pool.gpus[0], pool.kv_shard[0]))
    return float((tokens * float(pool.kv_bytes_per_token[0]) + float(pool.state_bytes[0])) / nics)
