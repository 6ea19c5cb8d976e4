"""Fluid (ODE) model of the prefill -> buffer -> decode pipeline, vectorised over configurations.

State per configuration: the prefill queue ``Qp`` (requests), the buffer ``Qb_k`` and the decoding
sequences ``N_k`` per output-length class ``k``. Explicit Euler steps of ``dt``:

* prefill drains at ``c_p / s_p`` requests/s while it has work (``c_p`` serving instances);
* decode class ``k`` completes ``N_k / (L_k tau(n))`` requests/s, ``tau(n)`` the time per output
  token at the per-instance batch ``n`` (state dependent: a fuller batch steps slower); integrated
  by backward Euler, so any ``dt`` is stable and the steady state is exact;
* the buffer admits into free decode slots; when it holds ``buffer_max`` requests, prefill blocks;
* the planner (:mod:`dse.sim.planner`) moves instances from measurements ``delay_s`` old; a decode
  instance taken away returns its sequences to the buffer.

A raw fluid has no waiting below capacity, so TTFT adds a stationary queueing wait (Sakasegawa's
G/G/c approximation) at the instantaneous utilisation to the fluid backlog's virtual wait.
"""

from __future__ import annotations

import numpy as np

from dse.sim.metrics import queue_wait, wait_quantile, weighted_quantile
from dse.sim.fluid_kernel import OUT, advance
from dse.sim.planner import PlannerState
from dse.sim.result import Summary, Trajectories, verdicts
from dse.sim.scenario import Array, Pipeline, Scenario

NEAR_CAPACITY = 0.95  # utilisation above which percentiles are flagged low-confidence


def simulate_fluid(pipe: Pipeline, scenario: Scenario, *, dt: float = 1.0,
                   kv_gb_per_seq: Array | float = 0.0) -> tuple[Summary, Trajectories]:
    """Simulate every configuration of ``pipe`` under ``scenario``."""
    n = pipe.n
    lengths = scenario.lengths
    steps = int(round(scenario.horizon_s / dt))
    t_arr = np.arange(steps) * dt
    lam_t = np.ascontiguousarray(scenario.arrivals.rate(t_arr), dtype=float)
    qp = np.zeros(n)
    qb = np.zeros((n, len(lengths.shares)))
    active = np.zeros_like(qb)
    plan = PlannerState(scenario.planner, pipe)
    out = np.zeros((len(OUT), n, steps))
    log = _ArrayLog(out, dt)
    tau_full = pipe.tpot(pipe.slots)
    share, mean_len = np.asarray(lengths.shares, dtype=float), np.asarray(lengths.means, dtype=float)
    table = np.ascontiguousarray(pipe.step_table, dtype=float)
    k = 0
    while k < steps:
        t = k * dt
        plan.release(t)
        if plan.due(t):
            plan.tick(t, log.upto(k), np.full(n, lam_t[k]), pipe)
            n_act = active.sum(axis=1)
            over = n_act - plan.decode * pipe.slots  # sequences of instances taken away
            back = np.where(over > 0, over / np.maximum(n_act, 1e-12), 0.0)[:, None] * active
            active -= back
            qb += back
        # run until the next planner tick or switch completes, with the counts fixed
        nxt = min(plan.next_tick, float(plan.ready_at.min()), steps * dt)
        k1 = min(max(k + 1, int(np.ceil(nxt / dt - 1e-9))), steps)
        advance(k, k1, dt, lam_t, plan.prefill.copy(), plan.decode.copy(), pipe.prefill_s.astype(float),
                pipe.slots.astype(float), pipe.buffer_max.astype(float), table, share, mean_len, tau_full,
                qp, qb, active, out)
        k = k1
    r = {name: out[i] for name, i in OUT.items()}
    r["lam"] = np.broadcast_to(lam_t, (n, steps))
    traj = Trajectories(
        t=t_arr, arrival_rate=r["lam"], prefill_queue=r["qp"], buffer=r["qb"], decode_batch=r["batch"],
        prefill_instances=r["cp"], decode_instances=r["cd"], completions_per_s=r["done"],
        kv_active_gb=r["batch"] * r["cd"] * np.asarray(kv_gb_per_seq, dtype=float).reshape(-1, 1))
    return _summarise(pipe, scenario, traj, r, plan.moves), traj


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


def _summarise(pipe: Pipeline, scenario: Scenario, traj: Trajectories, r: dict[str, Array],
               moves: Array) -> Summary:
    lengths = scenario.lengths
    after = traj.t >= scenario.warmup_s
    lam, done = r["lam"][:, after], r["done"][:, after]
    mean_l = lengths.mean
    scv_l = float(np.dot(lengths.shares, 2.0 * np.square(lengths.means))) / mean_l**2 - 1.0
    wq_p, pw_p = queue_wait(r["rho_p"], traj.prefill_instances, pipe.prefill_s[:, None], 0.0)
    tau = r["tau"]
    wq_b, pw_b = queue_wait(r["rho_b"], traj.decode_instances * pipe.slots[:, None], mean_l * tau, scv_l)
    # a decode instance admits at its next step boundary: half a step on average while it runs
    fixed = pipe.prefill_s[:, None] + pipe.handoff_s[:, None] + 0.5 * tau * (r["batch"] > 0)
    ttft_t = (r["wait_p"] + r["wait_b"] + wq_p + wq_b + fixed)[:, after]
    tail_t = (r["wait_p"] + r["wait_b"] + fixed + wait_quantile(wq_p, pw_p, 0.99)
              + wait_quantile(wq_b, pw_b, 0.99))[:, after]
    stable, growth, osc = verdicts(traj, scenario)
    tau_a, done_w = tau[:, after], done
    tpot_mean = (tau_a * (done_w + 1e-12)).sum(axis=1) / (done_w + 1e-12).sum(axis=1)
    ttft_mean = (ttft_t * (lam + 1e-12)).sum(axis=1) / (lam + 1e-12).sum(axis=1)
    util = np.maximum(np.mean(r["rho_p"][:, after], axis=1), np.mean(r["rho_b"][:, after], axis=1))
    return Summary(
        requests_per_s=done.mean(axis=1),
        output_tokens_per_s=r["tok"][:, after].mean(axis=1),
        ttft_mean_s=ttft_mean,
        ttft_p99_s=weighted_quantile(tail_t, lam, 0.99),
        tpot_mean_s=tpot_mean,
        tpot_p99_s=weighted_quantile(tau_a, done_w, 0.99),
        e2e_mean_s=ttft_mean + mean_l * tpot_mean,
        e2e_p99_s=ttft_mean + lengths.quantile(0.99) * tpot_mean,
        stable=stable,
        backlog_growth_per_s=growth,
        oscillating=np.array([o.detected for o in osc]),
        oscillation_period_s=np.array([o.period_s for o in osc]),
        oscillation_amplitude=np.array([o.amplitude for o in osc]),
        near_capacity=util > NEAR_CAPACITY,
        planner_moves=moves,
    )
