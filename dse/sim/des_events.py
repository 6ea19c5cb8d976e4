"""One run of the discrete-event reference (:mod:`dse.sim.des`): its state and what each event
does to it.

Events wait in a heap ordered by time, then by the order they were pushed in (so a run repeats
exactly); a prefill or decode step event carries the epoch of its server or instance, and is void
when the planner took that one away meanwhile. Arrivals are not events: they are read from the
drawn arrival times whenever the next one comes no later than the next event.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dse.sim.fluid_kernel import shared_slowdown
from dse.sim.planner import MeasurementLog, PlannerState
from dse.sim.scenario import Array, Pipeline, Scenario

PREFILL, STEP, SAMPLE, RELOAD, HANDOFF = range(5)
SAMPLED = ("t", "lam", "qp", "qb", "batch", "cp", "cd", "done")
"""What a sample records: time, arrival rate, prefill-side queue, buffer, decode batch per
instance, prefill and decode instances, completions per second."""
BUSY_MEMORY_S = 1.0  # how long an aggregated instance's decode remembers its prefill's busy share


@dataclass
class _Decoder:
    pool: int = 0  # the decode pool it belongs to: its slots and step table
    # request id -> the step (of ``steps``) its last token ends, in the order they came in; and
    # the ids each step ends: a step touches the sequences it ends, not every one it decodes
    seqs: dict[int, int] = field(default_factory=dict)
    ends: dict[int, list[int]] = field(default_factory=dict)
    steps: int = 0  # decode steps taken
    busy: bool = False
    alive: bool = True
    epoch: int = 0  # invalidates a step event of an instance that was taken away


@dataclass
class _Server:
    job: int = -1  # request id in service, or -1
    alive: bool = True
    epoch: int = 0


class _Stage:
    """A transfer stage: ``servers`` at once (inf: no limit), ``service_s`` each (or request ``r``
    ``by_request[r]``), FCFS."""

    def __init__(
        self, servers: float, service_s: float, kind: int, push: Callable[[float, int, int, int], None],
        by_request: Array | None = None,
    ) -> None:  # fmt: skip
        self.free = servers
        self.service_s, self.kind, self.push = service_s, kind, push
        self.by_request = by_request
        self.queue: deque[int] = deque()
        self.held = 0  # requests in service (or holding their server)

    def offer(self, t: float, r: int) -> None:
        self.queue.append(r)
        self.start(t)

    def start(self, t: float) -> None:
        while self.queue and self.free >= 1:
            self.free -= 1
            self.held += 1
            r = self.queue.popleft()
            s = self.service_s if self.by_request is None else float(self.by_request[r])
            self.push(t + s, self.kind, r, 0)

    def release(self, t: float) -> None:
        self.free += 1
        self.held -= 1
        self.start(t)


@dataclass(frozen=True)
class RequestDraws:
    """The random part of a run, drawn before it starts: per request, its arrival, its output
    tokens, whether it is a returning turn and its prefill (or midfill) seconds."""

    arrival_s: Array
    lengths: Array  # int
    returning: Array  # bool
    service_s: Array


class DesRun:
    """The state of one run of configuration 0 of ``pipe``: servers, decode instances, queues,
    the event heap, the planner, and the per-request times and samples it records."""

    def __init__(self, pipe: Pipeline, scenario: Scenario, draws: RequestDraws, sample_s: float) -> None:
        self.pipe, self.scenario, self.draws, self.sample_s = pipe, scenario, draws, sample_s
        m = len(draws.arrival_s)
        self.admitted = np.full(m, np.nan)  # entered a decode batch
        self.finished = np.full(m, np.nan)
        self.bmax = float(pipe.buffer_max[0])
        # each decode pool's instances step at its own slots and table (the main pool first: an
        # instance the planner brings to decode joins it)
        self.slots = [int(c) for c in pipe.arrays("decode_pool_slots")[0]]
        self.tables = pipe.arrays("decode_pool_tables")[0]
        self.mean_slots = float(pipe.slots[0])
        self.planned = float(pipe.arrays("prefill_time_share")[0])  # > 0: decoders prefill too
        # the share of time the prefill servers were busy lately (decaying over BUSY_MEMORY_S)
        self.busy_avg, self.busy_now, self.busy_t = self.planned, 0.0, 0.0
        self.tau_full = float(pipe.tpot(pipe.slots)[0])
        self.plan = PlannerState(scenario.planner, pipe)
        self.log = MeasurementLog(1)
        self.servers = [_Server() for _ in range(int(pipe.prefill_instances[0]))]
        self.decoders = [
            _Decoder(pool=j)
            for j, x in enumerate(pipe.arrays("decode_pool_instances")[0])
            for _ in range(int(x + 1e-9))
        ]
        self.queue: deque[int] = deque()  # waiting for a prefill server
        self.buffer: deque[int] = deque()  # prefilled and handed off, waiting for a decode slot
        self.blocked: deque[int] = deque()  # handed off while the buffer was full
        self.left_of: dict[int, int] = {}  # tokens still to produce of preempted sequences
        self.events: list[tuple[float, int, int, int, int]] = []  # (time, order, kind, index, epoch)
        self.order = 0
        self.reload = _Stage(
            float(pipe.arrays("reload_servers")[0]), float(pipe.arrays("reload_s")[0]), RELOAD, self.push
        )
        # a returning turn hands its whole context to decode, a fresh prompt its prompt
        hand = np.where(draws.returning, float(pipe.arrays("midfill_handoff_s")[0]), float(pipe.handoff_s[0]))
        self.handoff = _Stage(
            float(pipe.arrays("handoff_servers")[0]), float(pipe.handoff_s[0]), HANDOFF, self.push, hand
        )
        self.done_in_sample = 0
        self.samples: dict[str, list[float]] = {k: [] for k in SAMPLED}

    def run(self) -> None:
        """Process arrivals and events in time order up to the horizon."""
        handlers: dict[int, Callable[[float, int, int], None]] = {
            RELOAD: self.on_reload,
            PREFILL: self.on_prefill,
            HANDOFF: self.on_handoff,
            STEP: self.on_step,
            SAMPLE: self.on_sample,
        }
        arr, events, horizon = self.draws.arrival_s, self.events, self.scenario.horizon_s
        m = len(arr)
        self.push(0.0, SAMPLE, 0, 0)
        nxt = 0
        while True:
            t_ev = events[0][0] if events else np.inf
            if nxt < m and arr[nxt] <= t_ev:
                self.arrive(float(arr[nxt]), nxt)
                nxt += 1
                continue
            if not events:
                break
            t, _, kind, i, epoch = heapq.heappop(events)
            if t > horizon:
                break
            handlers[kind](t, i, epoch)

    def push(self, t: float, kind: int, idx: int, epoch: int) -> None:
        self.order += 1
        heapq.heappush(self.events, (t, self.order, kind, idx, epoch))

    # what each arrival and event does

    def arrive(self, t: float, r: int) -> None:
        if self.draws.returning[r]:
            self.reload.offer(t, r)
        else:
            self.queue.append(r)
            self.start_prefill(t)

    def on_reload(self, t: float, r: int, epoch: int) -> None:
        self.reload.release(t)
        self.queue.append(r)
        self.start_prefill(t)

    def on_prefill(self, t: float, i: int, epoch: int) -> None:
        sv = self.servers[i]
        if not sv.alive or sv.epoch != epoch or sv.job < 0:
            return
        self.handoff.offer(t, sv.job)
        sv.job = -1
        self.start_prefill(t)

    def on_handoff(self, t: float, r: int, epoch: int) -> None:
        if len(self.buffer) >= self.bmax:
            self.blocked.append(r)  # keeps its transfer slot until the buffer has room
            return
        self.buffer.append(r)
        self.handoff.release(t)
        self.wake(t)

    def on_step(self, t: float, i: int, epoch: int) -> None:
        """A decode step ends: every sequence has one more token; finished ones leave."""
        d = self.decoders[i]
        if not d.alive or d.epoch != epoch:
            return
        d.steps += 1
        ended = d.ends.pop(d.steps, ())
        for r in ended:
            del d.seqs[r]
            self.finished[r] = t
            self.done_in_sample += 1
        self.step(t, i)
        # slots freed: an aggregated instance's prefill may begin (only then: a step that ends no
        # sequence frees no room, and decode_room counts every instance)
        if self.planned > 0 and ended and self.queue:
            self.start_prefill(t)

    def on_sample(self, t: float, i: int, epoch: int) -> None:
        """Measurements, records and the planner."""
        plan = self.plan
        plan.release(t)
        self.follow_planner(t)
        self.record(t)
        if plan.due(t):
            plan.tick(t, self.log, np.array([float(self.scenario.arrivals.rate(t))]), self.pipe)
            self.follow_planner(t)
        if t + self.sample_s <= self.scenario.horizon_s:
            self.push(t + self.sample_s, SAMPLE, 0, 0)

    # prefill servers and decode instances

    def start_prefill(self, t: float) -> None:
        """Idle live servers take requests from the queue, in server order; an aggregated
        instance's only while a decode slot is free for each (:meth:`decode_room`)."""
        self.prefill_busy(t)
        room = self.decode_room() if self.planned > 0 else math.inf
        for i, sv in enumerate(self.servers):
            if not self.queue or room < 1:
                break
            if sv.alive and sv.job < 0:
                room -= 1
                sv.job = self.queue.popleft()
                self.push(t + float(self.draws.service_s[sv.job]), PREFILL, i, sv.epoch)
        live = [s for s in self.servers if s.alive]
        self.busy_now = sum(1 for s in live if s.job >= 0) / max(len(live), 1)

    def decode_room(self) -> int:
        """The decode slots no request holds or waits for: an aggregated instance admits a
        prefill only into its running batch's free room (SGLang's and vLLM's schedulers, by KV and
        the running-request cap), so a request in prefill, handed off or in the buffer has its
        slot already. Without that rule prefill had run for every arrival past capacity, taking
        the time its decode needed: 1.7 requests/s served at three times a 21.9 capacity."""
        free = sum(self.slots[d.pool] - len(d.seqs) for d in self.decoders if d.alive)
        in_prefill = sum(1 for s in self.servers if s.alive and s.job >= 0)
        waiting = len(self.handoff.queue) + self.handoff.held + len(self.buffer)
        return free - in_prefill - waiting

    def prefill_busy(self, t: float) -> float:
        """The share of time the prefill servers were busy up to ``t``, over about the last
        :data:`BUSY_MEMORY_S` (an aggregated instance's decode steps take the time it leaves them:
        the share at one instant, all or none of a few servers, would stretch a step by the
        prefill that ends within it)."""
        if t > self.busy_t:
            keep = math.exp(-(t - self.busy_t) / BUSY_MEMORY_S)
            self.busy_avg = self.busy_avg * keep + self.busy_now * (1.0 - keep)
            self.busy_t = t
        return self.busy_avg

    def admit(self, t: float, d: _Decoder) -> None:
        """Fill ``d``'s free slots from the buffer (continuous batching)."""
        buffer = self.buffer
        while buffer and len(d.seqs) < self.slots[d.pool]:
            r = buffer.popleft()
            if np.isnan(self.admitted[r]):
                self.admitted[r] = t
            end = d.steps + max(self.left_of.pop(r, int(self.draws.lengths[r])), 1)
            d.seqs[r] = end
            d.ends.setdefault(end, []).append(r)
            if self.blocked:  # a buffer place freed: a held handoff completes
                buffer.append(self.blocked.popleft())
                self.handoff.release(t)

    def step(self, t: float, i: int) -> None:
        """Instance ``i`` admits what it can and starts its next step, or idles."""
        d = self.decoders[i]
        self.admit(t, d)
        if d.seqs:
            d.busy = True
            step = float(self.tables[d.pool, len(d.seqs)])
            if self.planned > 0:  # an aggregated instance: slower while its prefill takes more time
                step *= shared_slowdown(self.planned, self.prefill_busy(t))
            self.push(t + step, STEP, i, d.epoch)
        else:
            d.busy = False

    def wake(self, t: float) -> None:
        """Idle live instances start stepping while the buffer holds requests."""
        for i, d in enumerate(self.decoders):
            if not self.buffer:
                return
            if d.alive and not d.busy:
                self.step(t, i)

    def follow_planner(self, t: float) -> None:
        """Serve with the planner's counts, and put freed servers and instances to work."""
        _apply_roles(self.plan, self.servers, self.decoders, self.queue, self.buffer, self.left_of)
        self.start_prefill(t)
        self.wake(t)

    # what a sample records

    def record(self, t: float) -> None:
        """Log the backlogs the planner reads, and append one sample of the trajectories."""
        cp, cd = self.plan.prefill[0], self.plan.decode[0]
        in_prefill = len(self.queue) + sum(1 for s in self.servers if s.alive and s.job >= 0)
        cap_dec = cd * self.mean_slots / (self.tau_full * self.scenario.lengths.mean)
        waiting_work = float(sum(self.draws.service_s[r] for r in self.queue))
        self.log.record(
            t,
            np.array([waiting_work / max(cp, 1e-12)]),
            np.array([len(self.buffer) / max(cap_dec, 1e-12)]),
        )
        live = [d for d in self.decoders if d.alive]
        n_seq = sum(len(d.seqs) for d in live)
        in_handoff = len(self.handoff.queue) + len(self.blocked)
        for key, v in (
            ("t", t),
            ("lam", float(self.scenario.arrivals.rate(t))),
            ("qp", in_prefill + len(self.reload.queue) + in_handoff),
            ("qb", len(self.buffer)),
            ("batch", n_seq / max(len(live), 1)),
            ("cp", cp),
            ("cd", cd),
            ("done", self.done_in_sample / self.sample_s),
        ):
            self.samples[key].append(float(v))
        self.done_in_sample = 0


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
        for r, end in reversed(list(d.seqs.items())):
            left_of[r] = end - d.steps
            buffer.appendleft(r)
        d.seqs, d.ends = {}, {}
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
