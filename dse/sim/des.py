"""Discrete-event reference: every request and every decode step, on the same stage model.

It reads the same :class:`~dse.sim.scenario.Pipeline` (stage times, the decode step table) and
calls the same planner as the fluid model, so the difference between the two is the fluid
approximation alone. Seeded: the same seed gives the same run.

* arrivals: a Poisson process with the scenario's time-varying rate (thinning); a share of them
  are returning turns;
* reload (returning turns) and KV handoff: stages of ``servers`` parallel transfers of fixed time,
  first come first served (an unlimited stage is a pure delay);
* prefill: servers, first come first served, ``prefill_s`` per fresh prompt and ``midfill_s``
  per returning turn;
* a handoff that finds the buffer full holds its transfer until a place frees (blocking);
* decode: each instance steps its batch; a step at batch ``n`` lasts ``step_table[n]`` and gives
  every sequence one token; finished sequences leave and the instance fills its free slots from
  the buffer at the step boundary (continuous batching); an idle instance wakes on arrivals;
* planner moves: a decode instance taken away returns its sequences to the front of the buffer;
  a prefill server taken away returns its request to the front of the queue.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dse.sim.planner import MeasurementLog, PlannerState
from dse.sim.result import Summary, Trajectories, verdicts
from dse.sim.scenario import Array, Pipeline, Scenario

PREFILL, STEP, SAMPLE, RELOAD, HANDOFF = range(5)


@dataclass
class _Decoder:
    seqs: list[int] = field(default_factory=list)  # request ids
    left: list[int] = field(default_factory=list)  # tokens still to produce, per sequence
    busy: bool = False
    alive: bool = True
    epoch: int = 0  # invalidates a step event of an instance that was taken away


@dataclass
class _Server:
    job: int = -1  # request id in service, or -1
    alive: bool = True
    epoch: int = 0


@dataclass(frozen=True)
class Requests:
    """Per-request records (nan where the run ended first)."""

    arrival_s: Array
    admitted_s: Array  # entered a decode batch
    finished_s: Array
    output_tokens: Array
    returning: Array  # bool


class _Stage:
    """A transfer stage: ``servers`` at once (inf: no limit), ``service_s`` each, FCFS."""

    def __init__(
        self, servers: float, service_s: float, kind: int, push: Callable[[float, int, int, int], None]
    ) -> None:
        self.free = servers
        self.service_s, self.kind, self.push = service_s, kind, push
        self.queue: deque[int] = deque()

    def offer(self, t: float, r: int) -> None:
        self.queue.append(r)
        self.start(t)

    def start(self, t: float) -> None:
        while self.queue and self.free >= 1:
            self.free -= 1
            self.push(t + self.service_s, self.kind, self.queue.popleft(), 0)

    def release(self, t: float) -> None:
        self.free += 1
        self.start(t)


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


def simulate_des(
    pipe: Pipeline, scenario: Scenario, *, seed: int = 0, sample_s: float = 1.0
) -> tuple[Summary, Trajectories, Requests]:
    """Simulate configuration 0 of ``pipe`` request by request."""
    if pipe.n != 1:
        raise ValueError("the discrete-event reference simulates one configuration at a time")
    rng = np.random.default_rng(seed)
    arr = _arrivals(scenario, rng)
    m = len(arr)
    k = rng.choice(len(scenario.lengths.shares), size=m, p=np.asarray(scenario.lengths.shares))
    lengths = np.maximum(1, np.rint(rng.exponential(np.asarray(scenario.lengths.means)[k]))).astype(int)
    returning = rng.random(m) < float(pipe.arrays("midfill_share")[0])
    service = np.where(returning, float(pipe.arrays("midfill_s")[0]), float(pipe.prefill_s[0]))
    admitted = np.full(m, np.nan)
    finished = np.full(m, np.nan)
    slots, bmax = int(pipe.slots[0]), float(pipe.buffer_max[0])
    table = pipe.step_table[0]
    tau_full = float(pipe.tpot(pipe.slots)[0])

    plan = PlannerState(scenario.planner, pipe)
    log = MeasurementLog(1)
    servers = [_Server() for _ in range(int(pipe.prefill_instances[0]))]
    decoders = [_Decoder() for _ in range(int(pipe.decode_instances[0]))]
    queue: deque[int] = deque()  # waiting for a prefill server
    buffer: deque[int] = deque()  # prefilled and handed off, waiting for a decode slot
    blocked: deque[int] = deque()  # handed off while the buffer was full
    left_of: dict[int, int] = {}  # tokens still to produce of preempted sequences
    events: list[tuple[float, int, int, int, int]] = []  # (time, order, kind, index, epoch)
    order = 0

    def push(t: float, kind: int, idx: int, epoch: int) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (t, order, kind, idx, epoch))

    reload = _Stage(float(pipe.arrays("reload_servers")[0]), float(pipe.arrays("reload_s")[0]), RELOAD, push)
    handoff = _Stage(float(pipe.arrays("handoff_servers")[0]), float(pipe.handoff_s[0]), HANDOFF, push)

    def start_prefill(t: float) -> None:
        for i, sv in enumerate(servers):
            if not queue:
                return
            if sv.alive and sv.job < 0:
                sv.job = queue.popleft()
                push(t + float(service[sv.job]), PREFILL, i, sv.epoch)

    def admit(t: float, d: _Decoder) -> None:
        while buffer and len(d.seqs) < slots:
            r = buffer.popleft()
            if np.isnan(admitted[r]):
                admitted[r] = t
            d.seqs.append(r)
            d.left.append(left_of.pop(r, int(lengths[r])))
            if blocked:  # a buffer place freed: a held handoff completes
                buffer.append(blocked.popleft())
                handoff.release(t)

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
    samples: dict[str, list[float]] = {k: [] for k in ("t", "lam", "qp", "qb", "batch", "cp", "cd", "done")}
    push(0.0, SAMPLE, 0, 0)
    nxt = 0
    horizon = scenario.horizon_s
    while True:
        t_ev = events[0][0] if events else np.inf
        if nxt < m and arr[nxt] <= t_ev:
            t = float(arr[nxt])
            if returning[nxt]:
                reload.offer(t, nxt)
            else:
                queue.append(nxt)
                start_prefill(t)
            nxt += 1
            continue
        if not events:
            break
        t, _, kind, i, epoch = heapq.heappop(events)
        if t > horizon:
            break
        if kind == RELOAD:
            reload.release(t)
            queue.append(i)
            start_prefill(t)
        elif kind == PREFILL:
            sv = servers[i]
            if not sv.alive or sv.epoch != epoch or sv.job < 0:
                continue
            handoff.offer(t, sv.job)
            sv.job = -1
            start_prefill(t)
        elif kind == HANDOFF:
            if len(buffer) >= bmax:
                blocked.append(i)  # keeps its transfer slot until the buffer has room
                continue
            buffer.append(i)
            handoff.release(t)
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
            _apply_roles(plan, servers, decoders, queue, buffer, left_of)
            start_prefill(t)
            wake(t)
            cp, cd = plan.prefill[0], plan.decode[0]
            in_prefill = len(queue) + sum(1 for s in servers if s.alive and s.job >= 0)
            cap_dec = cd * slots / (tau_full * scenario.lengths.mean)
            waiting_work = float(sum(service[r] for r in queue))
            log.record(
                t, np.array([waiting_work / max(cp, 1e-12)]), np.array([len(buffer) / max(cap_dec, 1e-12)])
            )
            live = [d for d in decoders if d.alive]
            n_seq = sum(len(d.seqs) for d in live)
            in_handoff = len(handoff.queue) + len(blocked)
            for key, v in (
                ("t", t),
                ("lam", float(scenario.arrivals.rate(t))),
                ("qp", in_prefill + len(reload.queue) + in_handoff),
                ("qb", len(buffer)),
                ("batch", n_seq / max(len(live), 1)),
                ("cp", cp),
                ("cd", cd),
                ("done", done_in_sample / sample_s),
            ):
                samples[key].append(float(v))
            done_in_sample = 0
            if plan.due(t):
                plan.tick(t, log, np.array([float(scenario.arrivals.rate(t))]), pipe)
                _apply_roles(plan, servers, decoders, queue, buffer, left_of)
                start_prefill(t)
                wake(t)
            if t + sample_s <= horizon:
                push(t + sample_s, SAMPLE, 0, 0)
    traj = _trajectories(samples)
    reqs = Requests(arr, admitted, finished, lengths.astype(float), returning)
    return _summarise(pipe, scenario, traj, reqs, plan.moves), traj, reqs


def _apply_roles(
    plan: PlannerState,
    servers: list[_Server],
    decoders: list[_Decoder],
    queue: deque[int],
    buffer: deque[int],
    left_of: dict[int, int],
) -> None:
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
            queue.appendleft(sv.job)
        sv.job = -1
    for _ in range(int(plan.decode[0]) - sum(d.alive for d in decoders)):
        decoders.append(_Decoder())
    for _ in range(int(plan.prefill[0]) - sum(s.alive for s in servers)):
        servers.append(_Server())


def _trajectories(s: dict[str, list[float]]) -> Trajectories:
    def row(key: str) -> Array:
        return np.asarray(s[key], dtype=float)[None, :]

    return Trajectories(
        t=np.asarray(s["t"]),
        arrival_rate=row("lam"),
        prefill_queue=row("qp"),
        buffer=row("qb"),
        decode_batch=row("batch"),
        prefill_instances=row("cp"),
        decode_instances=row("cd"),
        completions_per_s=row("done"),
        kv_active_gb=np.zeros_like(row("done")),
    )


def _summarise(
    pipe: Pipeline, scenario: Scenario, traj: Trajectories, reqs: Requests, moves: Array
) -> Summary:
    w0, h = scenario.warmup_s, scenario.horizon_s
    fin = reqs.finished_s
    window = (fin >= w0) & (fin <= h)
    adm = (reqs.admitted_s >= w0) & (reqs.admitted_s <= h)
    ttft = (reqs.admitted_s - reqs.arrival_s)[adm]
    done = window & np.isfinite(reqs.admitted_s)
    tpot = ((fin - reqs.admitted_s) / reqs.output_tokens)[done]
    e2e = (fin - reqs.arrival_s)[done]
    dur = max(h - w0, 1e-9)
    stable, growth, osc = verdicts(traj, scenario)
    after = traj.t >= w0
    lam = float(np.mean(traj.arrival_rate[0][after])) if after.any() else 0.0
    util_p = lam / max(float(pipe.prefill_capacity()[0]), 1e-12)
    util_d = lam / max(float(pipe.decode_capacity(scenario.lengths)[0]), 1e-12)

    def stat(x: Array, f: str) -> Array:
        if not len(x):
            return np.array([np.nan])
        return np.array([float(np.mean(x)) if f == "mean" else float(np.percentile(x, 99))])

    return Summary(
        requests_per_s=np.array([window.sum() / dur]),
        output_tokens_per_s=np.array([reqs.output_tokens[window].sum() / dur]),
        ttft_mean_s=stat(ttft, "mean"),
        ttft_p99_s=stat(ttft, "p99"),
        tpot_mean_s=stat(tpot, "mean"),
        tpot_p99_s=stat(tpot, "p99"),
        e2e_mean_s=stat(e2e, "mean"),
        e2e_p99_s=stat(e2e, "p99"),
        stable=stable,
        backlog_growth_per_s=growth,
        oscillating=np.array([o.detected for o in osc]),
        oscillation_period_s=np.array([o.period_s for o in osc]),
        oscillation_amplitude=np.array([o.amplitude for o in osc]),
        near_capacity=np.array([max(util_p, util_d) > 0.9]),
        planner_moves=moves,
    )
