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
* decode: each instance steps its batch; a step at batch ``n`` lasts its pool's table at ``n``
  (``decode_pool_tables``; pools of other hardware or shapes keep their own slots and tables,
  where the fluid model pools them) and gives every sequence one token; finished sequences leave
  and the instance fills its free slots from the buffer at the step boundary (continuous
  batching: the instance whose step ends first takes the next request); an idle instance wakes
  on arrivals;
* planner moves: a decode instance taken away returns its sequences to the front of the buffer;
  a prefill server taken away returns its request to the front of the queue.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.sim.des_events import DesRun, RequestDraws
from dse.sim.outputs import Summary, Trajectories, swings, verdicts
from dse.sim.scenario import Array, Pipeline, Scenario


@dataclass(frozen=True)
class Requests:
    """Per-request records (nan where the run ended first)."""

    arrival_s: Array
    admitted_s: Array  # entered a decode batch
    finished_s: Array
    output_tokens: Array
    returning: Array  # bool


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


def _draw_requests(pipe: Pipeline, scenario: Scenario, rng: np.random.Generator) -> RequestDraws:
    """Arrival times, then output lengths (a class, then an exponential length in it), then
    which requests are returning turns: in this order, which the seed's stream depends on."""
    arr = _arrivals(scenario, rng)
    m = len(arr)
    k = rng.choice(len(scenario.lengths.shares), size=m, p=np.asarray(scenario.lengths.shares))
    lengths = np.maximum(1, np.rint(rng.exponential(np.asarray(scenario.lengths.means)[k]))).astype(int)
    returning = rng.random(m) < float(pipe.arrays("midfill_share")[0])
    service = np.where(returning, float(pipe.arrays("midfill_s")[0]), float(pipe.prefill_s[0]))
    return RequestDraws(arr, lengths, returning, service)


def simulate_des(
    pipe: Pipeline, scenario: Scenario, *, seed: int = 0, sample_s: float = 1.0
) -> tuple[Summary, Trajectories, Requests]:
    """Simulate configuration 0 of ``pipe`` request by request."""
    if pipe.n != 1:
        raise ValueError("the discrete-event reference simulates one configuration at a time")
    draws = _draw_requests(pipe, scenario, np.random.default_rng(seed))
    run = DesRun(pipe, scenario, draws, sample_s)
    run.run()
    traj = _trajectories(run.samples)
    reqs = Requests(draws.arrival_s, run.admitted, run.finished, draws.lengths.astype(float), draws.returning)
    return _summarise(pipe, scenario, traj, reqs, run.plan.moves), traj, reqs


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
        kv_active_gb=np.full_like(row("done"), np.nan),  # per sequence: simulation.simulate sets it
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
    stable, growth, judged_s, osc = verdicts(traj, scenario)
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
        growth_window_s=judged_s,
        oscillating=np.array([o.detected for o in osc]),
        oscillation_period_s=np.array([o.period_s for o in osc]),
        **swings(osc),
        near_capacity=np.array([max(util_p, util_d) > 0.9]),
        planner_moves=moves,
        prefill_queue_peak_requests=traj.prefill_queue.max(axis=1),
        buffer_peak_requests=traj.buffer.max(axis=1),
    )
