"""Fluid (ODE) model of the prefill -> buffer -> decode pipeline, vectorised over configurations.

State per configuration: the prefill queue ``Qp`` (requests), the buffer ``Qb_k`` and the decoding
sequences ``N_k`` per output-length class ``k``. Explicit Euler steps of ``h``, ``dt`` itself or, for
a ``dt`` longer than :data:`~dse.sim.kinds.MAX_SUBSTEP_S`, the fewest equal sub-steps of it no longer
than that (``dt`` is then the reporting step of the trajectories alone):

* prefill drains at ``c_p / s_p`` requests/s while it has work (``c_p`` serving instances);
* decode class ``k`` completes ``N_k / (L_k tau(n))`` requests/s, ``tau(n)`` the time per output
  token at the per-instance batch ``n`` (state dependent: a fuller batch steps slower); integrated
  by backward Euler, so any step is stable and the steady state is exact;
* the buffer admits into free decode slots; when it holds ``buffer_max`` requests, prefill blocks;
* an aggregated instance (a pipeline with a ``prefill_time_share``) has no buffer: it begins a
  prefill only for a decode slot free at the step's end, as SGLang's and vLLM's schedulers admit
  into the running batch's room, so past capacity its queue waits before prefill and its decode
  keeps the time it needs (prefill had run for every arrival, taking that time: a design of 21.9
  requests/s served 1.7 at three times that);
* the planner (:mod:`dse.sim.planner`) moves instances from measurements ``delay_s`` old; a decode
  instance taken away returns its sequences to the buffer.

A raw fluid has no waiting below capacity, so TTFT adds a stationary queueing wait (Sakasegawa's
G/G/c approximation) at the instantaneous utilisation to the fluid backlog's virtual wait.
"""

from __future__ import annotations

import numpy as np

from dse.sim.fluid_kernel import OUT, advance
from dse.sim.kinds import substeps
from dse.sim.outputs import Summary, Trajectories, e2e_p99, swings, verdicts
from dse.sim.planner import PlannerState
from dse.sim.scenario import Array, Pipeline, Scenario
from dse.sim.statistics import weighted_quantile

NEAR_CAPACITY = 0.9  # peak utilisation above which percentiles are flagged low-confidence


STAGE_ROWS = (
    "prefill_s",
    "midfill_s",
    "midfill_share",
    "reload_s",
    "reload_servers",
    "handoff_s",
    "handoff_servers",
    "slots",
    "buffer_max",
    "prefill_time_share",
    "midfill_handoff_s",
)
"""The pipeline's stage arrays as the compiled kernel reads them: row ``i`` of its ``st``."""


def simulate_fluid(
    pipe: Pipeline, scenario: Scenario, *, dt: float = 1.0, kv_gb_per_seq: Array | float = 0.0
) -> tuple[Summary, Trajectories]:
    """Simulate every configuration of ``pipe`` under ``scenario``: the trajectories one row per
    ``dt``, integrated in :func:`~dse.sim.kinds.substeps` of it, and the summary (means, tails,
    verdicts, the queues' peaks) over the integration's own steps, so that a coarse ``dt``
    reports what a fine one does (a step of 60 s had been integrated as one: TTFT 12%, TPOT 1.8%
    off a 0.25 s run)."""
    n = pipe.n
    lengths = scenario.lengths
    every, reporting_s = substeps(dt), dt
    steps = int(round(scenario.horizon_s / dt)) * every
    dt = dt / every  # the integration's step from here on
    t_arr = np.arange(steps) * dt
    lam_t = np.ascontiguousarray(scenario.arrivals.rate(t_arr), dtype=float)
    q = np.zeros((4, n))  # reload, fresh prefill, midfill, handoff
    qb = np.zeros((n, len(lengths.shares)))
    active = np.zeros_like(qb)
    plan = PlannerState(scenario.planner, pipe)
    out = np.zeros((len(OUT), n, steps))
    log = _ArrayLog(out, dt)
    tau_full = pipe.tpot(pipe.slots)
    share, mean_len = np.asarray(lengths.shares, dtype=float), np.asarray(lengths.means, dtype=float)
    table = np.ascontiguousarray(pipe.step_table, dtype=float)
    stages = np.ascontiguousarray(np.stack([pipe.arrays(k) for k in STAGE_ROWS]))
    k = 0
    while k < steps:
        t = k * dt
        plan.release(t)
        if plan.due(t):
            plan.tick(t, log.upto(k), np.full(n, lam_t[k]), pipe)
            _return_taken_sequences(plan, pipe, qb, active)
        # run until the next planner tick or switch completes, with the counts fixed
        nxt = min(plan.next_tick, float(plan.ready_at.min()), steps * dt)
        k1 = min(max(k + 1, int(np.ceil(nxt / dt - 1e-9))), steps)
        advance(
            k,
            k1,
            dt,
            lam_t,
            plan.prefill.copy(),
            plan.decode.copy(),
            stages,
            table,
            share,
            mean_len,
            tau_full,
            q,
            qb,
            active,
            out,
        )
        k = k1
    r = {name: out[i] for name, i in OUT.items()}
    r["lam"] = np.broadcast_to(lam_t, (n, steps))
    traj = _trajectories(t_arr, r, kv_gb_per_seq)
    summary = _summarise(pipe, scenario, traj, r, plan.moves)
    return summary, (traj if every == 1 else _reported(traj, every, reporting_s))


def _reported(traj: Trajectories, every: int, dt: float) -> Trajectories:
    """``traj`` one row per reporting step of ``every`` integration steps, as a step's row reads at
    one: the rates (arrivals, completions) the step's mean, the rest (queues, batch, instances, KV)
    its state at the step's end; ``t`` where each reporting step of ``dt`` starts."""
    n, steps = traj.prefill_queue.shape

    def mean(a: Array) -> Array:
        return np.asarray(a, dtype=float).reshape(n, steps // every, every).mean(axis=2)

    def last(a: Array) -> Array:
        return np.ascontiguousarray(a[:, every - 1 :: every])

    return Trajectories(
        t=np.arange(steps // every) * dt,
        arrival_rate=mean(traj.arrival_rate),
        prefill_queue=last(traj.prefill_queue),
        buffer=last(traj.buffer),
        decode_batch=last(traj.decode_batch),
        prefill_instances=last(traj.prefill_instances),
        decode_instances=last(traj.decode_instances),
        completions_per_s=mean(traj.completions_per_s),
        kv_active_gb=last(traj.kv_active_gb),
        queued=None if traj.queued is None else last(traj.queued),
        queued_buffer=None if traj.queued_buffer is None else last(traj.queued_buffer),
    )


def _return_taken_sequences(plan: PlannerState, pipe: Pipeline, qb: Array, active: Array) -> None:
    """Decode instances the planner took away return their sequences to the buffer, in place:
    each class gives back the same share of its decoding sequences."""
    n_act = active.sum(axis=1)
    over = n_act - plan.decode * pipe.slots  # sequences of instances taken away
    back = np.where(over > 0, over / np.maximum(n_act, 1e-12), 0.0)[:, None] * active
    active -= back
    qb += back


def _trajectories(t_arr: Array, r: dict[str, Array], kv_gb_per_seq: Array | float) -> Trajectories:
    return Trajectories(
        t=t_arr,
        arrival_rate=r["lam"],
        prefill_queue=r["qp"],
        buffer=r["qb"],
        decode_batch=r["batch"],
        prefill_instances=r["cp"],
        decode_instances=r["cd"],
        completions_per_s=r["done"],
        kv_active_gb=r["batch"] * r["cd"] * np.asarray(kv_gb_per_seq, dtype=float).reshape(-1, 1),
        queued=r["queued"],
        queued_buffer=r["queued_b"],
    )


class _ArrayLog:
    """The planner's view of the fluid's recorded backlogs: the value at the last step at or
    before the asked time, among the steps already simulated."""

    def __init__(self, out: Array, dt: float) -> None:
        self.out, self.dt, self.filled = out, dt, 0

    def upto(self, k: int) -> _ArrayLog:
        self.filled = k
        return self

    def at(self, t: float) -> tuple[Array, Array]:
        k = min(int(np.floor(t / self.dt + 1e-9)), self.filled - 1)
        n = self.out.shape[1]
        if k < 0:
            return np.zeros(n), np.zeros(n)
        return self.out[OUT["wait_p"], :, k], self.out[OUT["wait_b"], :, k]


def _summarise(
    pipe: Pipeline, scenario: Scenario, traj: Trajectories, r: dict[str, Array], moves: Array
) -> Summary:
    lengths = scenario.lengths
    after = traj.t >= scenario.warmup_s
    lam, done = r["lam"][:, after], r["done"][:, after]
    stable, growth, judged_s, osc = verdicts(traj, scenario, fluid=True)
    tau_a = r["tau"][:, after]
    w_done, w_lam = done + 1e-12, lam + 1e-12
    tpot_mean = (tau_a * w_done).sum(axis=1) / w_done.sum(axis=1)
    ttft_mean = (r["ttft"][:, after] * w_lam).sum(axis=1) / w_lam.sum(axis=1)
    ttft_p99 = weighted_quantile(r["ttft_p99"][:, after], lam, 0.99)
    return Summary(
        requests_per_s=done.mean(axis=1),
        output_tokens_per_s=r["tok"][:, after].mean(axis=1),
        ttft_mean_s=ttft_mean,
        ttft_p99_s=ttft_p99,
        tpot_mean_s=tpot_mean,
        tpot_p99_s=weighted_quantile(tau_a, done, 0.99),
        e2e_mean_s=ttft_mean + lengths.mean * tpot_mean,
        e2e_p99_s=e2e_p99(ttft_mean, ttft_p99, lengths.mean * tpot_mean, lengths.quantile(0.99) * tpot_mean),
        stable=stable,
        backlog_growth_per_s=growth,
        growth_window_s=judged_s,
        oscillating=np.array([o.detected for o in osc]),
        oscillation_period_s=np.array([o.period_s for o in osc]),
        **swings(osc),
        # the peak, not the mean: a burst that nears capacity makes the tails uncertain too
        near_capacity=r["util"][:, after].max(axis=1) > NEAR_CAPACITY,
        planner_moves=moves,
        prefill_queue_peak_requests=r["qp"].max(axis=1),
        buffer_peak_requests=r["qb"].max(axis=1),
    )
