"""Discrete-event reference: every request and every decode step, on the same stage model.

It reads the same :class:`~dse.sim.scenario.Pipeline` (prefill seconds per request, the decode step
table) and calls the same planner as the fluid model, so the difference between the two is the
fluid approximation alone. Seeded: the same seed gives the same run.

* arrivals: a Poisson process with the scenario's time-varying rate (thinning);
* prefill: ``c_p`` servers, first come first served, ``prefill_s`` per request; a server whose
  finished request finds the buffer full holds it (blocking after service);
* decode: each instance steps its batch; a step at batch ``n`` lasts ``step_table[n]`` and gives
  every sequence one token; finished sequences leave and the instance fills its free slots from
  the buffer at the step boundary (continuous batching); an idle instance wakes on arrivals;
* planner moves: a decode instance taken away returns its sequences to the front of the buffer;
  a prefill server taken away returns its request to the front of the queue.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

from dse.sim.planner import MeasurementLog, PlannerState
from dse.sim.result import Summary, Trajectories, verdicts
from dse.sim.scenario import Array, Pipeline, Scenario


@dataclass
class _Decoder:
    seqs: list[int]  # request ids
    left: list[int]  # tokens still to produce, per sequence
    busy: bool = False
    alive: bool = True
    epoch: int = 0  # invalidates a step event of an instance that was taken away


@dataclass
class _Server:
    job: int = -1  # request id in service, or -1
    blocked: bool = False  # holding a finished request while the buffer is full
    alive: bool = True
    epoch: int = 0


@dataclass(frozen=True)
class Requests:
    """Per-request records (nan where the run ended first)."""

    arrival_s: Array
    admitted_s: Array  # entered a decode batch
    finished_s: Array
    output_tokens: Array


def _arrivals(scenario: Scenario, rng: np.random.Generator) -> Array:
    h = scenario.horizon_s
    top = scenario.arrivals.max_rate(h)
    if top <= 0:
        return np.zeros(0)
    n = rng.poisson(top * h * 1.1) + 16
    t = np.cumsum(rng.exponential(1.0 / top, n))
    t = t[t < h]
    keep = rng.random(len(t)) < scenario.arrivals.rate(t) / top
    return t[keep]


def simulate_des(pipe: Pipeline, scenario: Scenario, *, seed: int = 0, sample_s: float = 1.0
                 ) -> tuple[Summary, Trajectories, Requests]:
    """Simulate configuration 0 of ``pipe`` request by request."""
    if pipe.n != 1:
        raise ValueError("the discrete-event reference simulates one configuration at a time")
    rng = np.random.default_rng(seed)
    arr = _arrivals(scenario, rng)
    m = len(arr)
    k = rng.choice(len(scenario.lengths.shares), size=m, p=np.asarray(scenario.lengths.shares))
    lengths = np.maximum(1, np.rint(rng.exponential(np.asarray(scenario.lengths.means)[k]))).astype(int)
    admitted = np.full(m, np.nan)
    finished = np.full(m, np.nan)
    s_p, handoff = float(pipe.prefill_s[0]), float(pipe.handoff_s[0])
    slots, bmax = int(pipe.slots[0]), float(pipe.buffer_max[0])
    table = pipe.step_table[0]
    tau_full = float(pipe.tpot(pipe.slots)[0])

    plan = PlannerState(scenario.planner, pipe)
    log = MeasurementLog(1)
    servers = [_Server() for _ in range(int(pipe.prefill_instances[0]))]
    decoders = [_Decoder([], []) for _ in range(int(pipe.decode_instances[0]))]
    queue: deque[int] = deque()
    buffer: deque[int] = deque()
    blocked: deque[int] = deque()  # server indices holding a finished request
    left_of: dict[int, int] = {}  # tokens still to produce of preempted sequences
    events: list[tuple[float, int, int, int, int]] = []  # (time, order, kind, index, epoch)
    order = 0
    PREFILL, STEP, SAMPLE = 0, 1, 2

    def push(t: float, kind: int, idx: int, epoch: int) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (t, order, kind, idx, epoch))

    def start_prefill(t: float) -> None:
        for i, sv in enumerate(servers):
            if not queue:
                return
            if sv.alive and sv.job < 0 and not sv.blocked:
                sv.job = queue.popleft()
                push(t + s_p, PREFILL, i, sv.epoch)

    def admit(t: float, d: _Decoder) -> None:
        while buffer and len(d.seqs) < slots:
            r = buffer.popleft()
            if np.isnan(admitted[r]):
                admitted[r] = t
            d.seqs.append(r)
            d.left.append(left_of.pop(r, int(lengths[r])))
            if blocked:  # a buffer place freed: a blocked server hands its request over
                i = blocked.popleft()
                sv = servers[i]
                buffer.append(sv.job)
                sv.job, sv.blocked = -1, False
        start_prefill(t)

    def step(t: float, i: int) -> None:
        d = decoders[i]
        admit(t, d)
        if d.seqs:
            d.busy = True
            push(t + float(table[len(d.seqs)]), STEP, i, d.epoch)
        else:
            d.busy = False

    def wake(t: float) -> None:
        for i, d in enumerate(decoders):
            if not buffer:
                return
            if d.alive and not d.busy:
                step(t, i)

    done_in_sample = 0
    samples: dict[str, list[float]] = {k: [] for k in (
        "t", "lam", "qp", "qb", "batch", "cp", "cd", "done", "kv")}
    push(0.0, SAMPLE, 0, 0)
    nxt = 0
    horizon = scenario.horizon_s
    while True:
        t_ev = events[0][0] if events else np.inf
        if nxt < m and arr[nxt] <= t_ev:
            t = float(arr[nxt])
            queue.append(nxt)
            nxt += 1
            start_prefill(t)
            continue
        if not events:
            break
        t, _, kind, i, epoch = heapq.heappop(events)
        if t > horizon:
            break
        if kind == PREFILL:
            sv = servers[i]
            if not sv.alive or sv.epoch != epoch or sv.job < 0:
                continue
            if len(buffer) >= bmax:
                sv.blocked = True
                blocked.append(i)
                continue
            buffer.append(sv.job)
            sv.job = -1
            start_prefill(t)
            wake(t)
        elif kind == STEP:
            d = decoders[i]
            if not d.alive or d.epoch != epoch:
                continue
            keep_s, keep_l = [], []
            for r, left in zip(d.seqs, d.left, strict=True):
                if left <= 1:
                    finished[r] = t
                    done_in_sample += 1
                else:
                    keep_s.append(r)
                    keep_l.append(left - 1)
            d.seqs, d.left = keep_s, keep_l
            step(t, i)
        else:  # SAMPLE: measurements, records and the planner
            plan.release(t)
            _apply_roles(t, plan, servers, decoders, queue, buffer, left_of, blocked, push, PREFILL)
            start_prefill(t)
            wake(t)
            cp, cd = plan.prefill[0], plan.decode[0]
            in_prefill = len(queue) + sum(1 for s in servers if s.alive and s.job >= 0 and not s.blocked)
            cap_dec = cd * slots / (tau_full * scenario.lengths.mean)
            log.record(t, np.array([len(queue) * s_p / max(cp, 1e-12)]),
                       np.array([len(buffer) / max(cap_dec, 1e-12)]))
            live = [d for d in decoders if d.alive]
            n_seq = sum(len(d.seqs) for d in live)
            for key, v in (("t", t), ("lam", float(scenario.arrivals.rate(t))), ("qp", in_prefill),
                           ("qb", len(buffer) + len(blocked)), ("batch", n_seq / max(len(live), 1)),
                           ("cp", cp), ("cd", cd), ("done", done_in_sample / sample_s), ("kv", 0.0)):
                samples[key].append(float(v))
            done_in_sample = 0
            if plan.due(t):
                plan.tick(t, log, np.array([float(scenario.arrivals.rate(t))]), pipe)
                _apply_roles(t, plan, servers, decoders, queue, buffer, left_of, blocked, push, PREFILL)
                start_prefill(t)
                wake(t)
            if t + sample_s <= horizon:
                push(t + sample_s, SAMPLE, 0, 0)
    traj = _trajectories(samples)
    reqs = Requests(arr, admitted, finished, lengths.astype(float))
    return _summarise(pipe, scenario, traj, reqs, plan.moves), traj, reqs


def _apply_roles(t: float, plan: PlannerState, servers: list[_Server], decoders: list[_Decoder],
                 queue: deque[int], buffer: deque[int], left_of: dict[int, int], blocked: deque[int],
                 push: object, prefill_kind: int) -> None:
    """Make the live servers and decoders match the planner's serving counts."""
    alive_d = [d for d in decoders if d.alive]
    for d in sorted(alive_d, key=lambda d: len(d.seqs))[: max(len(alive_d) - int(plan.decode[0]), 0)]:
        d.alive, d.busy = False, False
        d.epoch += 1
        for r, left in reversed(list(zip(d.seqs, d.left, strict=True))):
            left_of[r] = left
            buffer.appendleft(r)
        d.seqs, d.left = [], []
    alive_s = [s for s in servers if s.alive]
    for sv in sorted(alive_s, key=lambda s: s.job >= 0)[: max(len(alive_s) - int(plan.prefill[0]), 0)]:
        sv.alive = False
        sv.epoch += 1
        if sv.job >= 0:
            if sv.blocked:
                blocked.remove(servers.index(sv))
                buffer.append(sv.job)
            else:
                queue.appendleft(sv.job)
        sv.job, sv.blocked = -1, False
    for _ in range(int(plan.decode[0]) - sum(d.alive for d in decoders)):
        decoders.append(_Decoder([], []))
    for _ in range(int(plan.prefill[0]) - sum(s.alive for s in servers)):
        servers.append(_Server())


def _trajectories(s: dict[str, list[float]]) -> Trajectories:
    def row(key: str) -> Array:
        return np.asarray(s[key], dtype=float)[None, :]

    return Trajectories(t=np.asarray(s["t"]), arrival_rate=row("lam"), prefill_queue=row("qp"), buffer=row("qb"),
                        decode_batch=row("batch"), prefill_instances=row("cp"), decode_instances=row("cd"),
                        completions_per_s=row("done"), kv_active_gb=row("kv"))


def _summarise(pipe: Pipeline, scenario: Scenario, traj: Trajectories, reqs: Requests, moves: Array) -> Summary:
    w0, h = scenario.warmup_s, scenario.horizon_s
    fin = reqs.finished_s
    window = (fin >= w0) & (fin <= h)
    adm = (reqs.admitted_s >= w0) & (reqs.admitted_s <= h)
    handoff = float(pipe.handoff_s[0])
    ttft = (reqs.admitted_s - reqs.arrival_s)[adm] + handoff
    done = window & np.isfinite(reqs.admitted_s)
    tpot = ((fin - reqs.admitted_s) / reqs.output_tokens)[done]
    e2e = (fin - reqs.arrival_s)[done] + handoff
    dur = max(h - w0, 1e-9)
    stable, growth, osc = verdicts(traj, scenario)
    after = traj.t >= w0
    util_p = np.mean(traj.arrival_rate[0][after]) * float(pipe.prefill_s[0]) / max(np.mean(traj.prefill_instances[0][after]), 1e-9)

    def stat(x: Array, f: str) -> Array:
        if not len(x):
            return np.array([np.nan])
        return np.array([float(np.mean(x)) if f == "mean" else float(np.percentile(x, 99))])

    return Summary(
        requests_per_s=np.array([window.sum() / dur]),
        output_tokens_per_s=np.array([reqs.output_tokens[window].sum() / dur]),
        ttft_mean_s=stat(ttft, "mean"), ttft_p99_s=stat(ttft, "p99"),
        tpot_mean_s=stat(tpot, "mean"), tpot_p99_s=stat(tpot, "p99"),
        e2e_mean_s=stat(e2e, "mean"), e2e_p99_s=stat(e2e, "p99"),
        stable=stable, backlog_growth_per_s=growth,
        oscillating=np.array([o.detected for o in osc]),
        oscillation_period_s=np.array([o.period_s for o in osc]),
        oscillation_amplitude=np.array([o.amplitude for o in osc]),
        near_capacity=np.array([util_p > 0.95]),
        planner_moves=moves,
    )
