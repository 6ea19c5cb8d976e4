"""The fluid model's Euler steps, compiled (numba): the arithmetic of :mod:`dse.sim.fluid`.

One call advances every configuration from step ``k0`` to ``k1`` with the instance counts fixed;
the planner runs in Python between calls. Outputs go into preallocated ``(configs, steps)`` arrays:
column ``OUT[name]`` of ``out``.
"""

from __future__ import annotations

import numpy as np

from dse.jit import njit

OUT = {
    name: i
    for i, name in enumerate(
        (
            "qp",
            "qb",
            "batch",
            "cp",
            "cd",
            "done",
            "tau",
            "tok",
            "wait_p",
            "wait_b",
            "ttft",
            "ttft_p99",
            "util",
            "queued",
            "queued_b",
        )
    )
}
RHO_CAP = 0.98  # beyond, the fluid backlog itself carries the wait
BUSY_CAP = 0.95  # an aggregated instance's prefill share at most: its decode still steps, slowly
TAIL_Q = 0.99


@njit(cache=True)
def queue_wait(rho: float, servers: float, service_s: float, scv_service: float) -> tuple[float, float]:
    """(mean wait, probability of waiting) of a G/G/c queue with Poisson arrivals (Sakasegawa):
    ``P_wait ~ rho^(sqrt(2(c+1)) - 1)``, ``Wq = P_wait s / (c (1 - rho)) (1 + c_s^2) / 2``."""
    r = min(max(rho, 0.0), RHO_CAP)
    c = max(servers, 1.0)
    p_wait = r ** (np.sqrt(2.0 * (c + 1.0)) - 1.0)
    return p_wait * service_s / (c * (1.0 - r)) * (1.0 + scv_service) / 2.0, p_wait


@njit(cache=True)
def wait_quantile(wq: float, p_wait: float, q: float) -> float:
    """The ``q`` quantile of a wait that, when it happens, is exponential."""
    tail = 1.0 - q
    if p_wait <= tail:
        return 0.0
    return wq / p_wait * np.log(p_wait / tail)


@njit(cache=True)
def _tpot(table: np.ndarray, i: int, batch: float) -> float:
    width = table.shape[1]
    b = min(max(batch, 0.0), width - 1.0)
    lo = int(np.floor(b))
    hi = min(lo + 1, width - 1)
    w = b - lo
    return table[i, lo] * (1.0 - w) + table[i, hi] * w


@njit(cache=True)
def shared_slowdown(planned: float, busy: float) -> float:
    """How much longer than its table a decode step of an instance that prefills too takes: the
    table leaves ``planned`` of the time to prefill, and prefill took ``busy`` of it."""
    if planned <= 0.0:
        return 1.0
    return (1.0 - planned) / (1.0 - min(max(busy, 0.0), BUSY_CAP))


@njit(cache=True)
def _stage(queue: float, inflow: float, servers: float, service_s: float, dt: float) -> float:
    """Outflow of a multi-server stage in one step (all of it when the stage has no limit)."""
    if servers == np.inf or service_s <= 0.0:
        return queue + inflow
    return min(servers / service_s * dt, queue + inflow)


@njit(cache=True)
def _room(x: float, step: tuple) -> float:  # type: ignore[type-arg]
    """The decode slots an aggregated instance has free at a step's end for prefills begun in it,
    when ``x`` requests prefill in it. ``step``: the seconds of prefill a request takes, the
    prefill servers' seconds in the step, the planned prefill share, the decode step at the
    current batch, the requests decoding per class, the classes' shares and mean lengths, the
    step, the slots, and the requests that wait for a slot already. The more it prefills, the
    slower its decode steps and the fewer sequences leave."""
    per_req_s, prefill_s, planned, tau0, active, share, mean_len, dt, seats, ahead = step
    tau = tau0 * shared_slowdown(planned, x * per_req_s / max(prefill_s, 1e-12))
    kept = 0.0
    keep_in = 0.0
    for k in range(active.shape[0]):
        keep = 1.0 / (1.0 + dt / (mean_len[k] * tau))
        kept += active[k] * keep
        keep_in += share[k] * keep
    return max(seats - kept, 0.0) / keep_in - ahead


@njit(cache=True)
def _admissible(x_max: float, step: tuple) -> float:  # type: ignore[type-arg]
    """The most of ``x_max`` requests an aggregated instance begins to prefill in a step: only
    those a decode slot will take once prefilled, as SGLang's and vLLM's schedulers admit a
    prefill only into the running batch's free room (KV and running-request cap). The largest
    ``x`` with ``x <= room(x)`` (:func:`_room`), room falling as ``x`` grows (by bisection)."""
    if _room(x_max, step) >= x_max:
        return x_max
    lo, hi = 0.0, x_max
    if _room(0.0, step) <= 0.0:
        return 0.0
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if _room(mid, step) >= mid:
            lo = mid
        else:
            hi = mid
    return lo


@njit(cache=True)
def advance(
    k0: int,
    k1: int,
    dt: float,
    lam_t: np.ndarray,
    cp: np.ndarray,
    cd: np.ndarray,
    st: np.ndarray,
    table: np.ndarray,
    share: np.ndarray,
    mean_len: np.ndarray,
    tau_full: np.ndarray,
    q: np.ndarray,
    qb: np.ndarray,
    active: np.ndarray,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """``st`` rows: prefill_s, midfill_s, midfill_share, reload_s, reload_servers, handoff_s,
    handoff_servers, slots, buffer_max, prefill_time_share, midfill_handoff_s. ``q`` rows: reload,
    fresh prefill, midfill, handoff."""
    n, kk = active.shape
    mean_l = 0.0
    second = 0.0
    for k in range(kk):
        mean_l += share[k] * mean_len[k]
        second += share[k] * 2.0 * mean_len[k] ** 2
    scv_l = second / mean_l**2 - 1.0  # of the exponential mixture of output lengths
    keep = np.empty(kk)
    pool = np.empty(kk)
    for step in range(k0, k1):
        lam = lam_t[step]
        for i in range(n):
            s_f, s_m, m = st[0, i], st[1, i], st[2, i]
            s_r, c_r, s_h, c_h, slots, bmax = st[3, i], st[4, i], st[5, i], st[6, i], st[7, i], st[8, i]
            planned = st[9, i]
            # a returning turn hands its whole context to decode, a fresh prompt its prompt: the
            # handoff's servers take the arrivals' mix of the two
            s_hm = st[10, i]
            s_hx = (1.0 - m) * s_h + m * s_hm
            # reload (returning turns), then prefill shared first come first served by fresh and midfill
            out_r = _stage(q[0, i], m * lam * dt, c_r, s_r, dt)
            q[0, i] += m * lam * dt - out_r
            fresh = q[1, i] + (1.0 - m) * lam * dt
            mid = q[2, i] + out_r
            work = fresh * s_f + mid * s_m
            theta = 1.0 if work <= cp[i] * dt else cp[i] * dt / work
            out_f, out_m = theta * fresh, theta * mid
            n_act = 0.0
            for k in range(kk):
                n_act += active[i, k]
            blocked = False  # an aggregated instance's prefill waits for decode room
            if planned > 0.0 and out_f + out_m > 0.0:
                x_max = out_f + out_m
                x = _admissible(
                    x_max,
                    (
                        (out_f * s_f + out_m * s_m) / x_max,
                        cp[i] * dt,
                        planned,
                        _tpot(table, i, n_act / max(cd[i], 1e-12)),
                        active[i],
                        share,
                        mean_len,
                        dt,
                        cd[i] * slots,
                        q[3, i] + np.sum(qb[i]),
                    ),
                )
                blocked = x < x_max
                out_f, out_m = out_f * x / x_max, out_m * x / x_max
            # handoff, then the buffer (which blocks the handoff when full)
            hand_in = out_f + out_m
            out_h = _stage(q[3, i], hand_in, c_h, s_hx, dt)
            # an aggregated instance decodes in the time its prefill leaves (its servers' busy share)
            slow = shared_slowdown(planned, (out_f * s_f + out_m * s_m) / max(cp[i] * dt, 1e-12))
            tau = _tpot(table, i, n_act / max(cd[i], 1e-12)) * slow
            # backward Euler per class: stable for any dt, exact in steady state
            kept = 0.0
            for k in range(kk):
                keep[k] = 1.0 / (1.0 + dt / (mean_len[k] * tau))
                kept += active[i, k] * keep[k]
            qb_tot = 0.0
            keep_in = 0.0  # of the requests waiting to be admitted (the buffer and the handoff's)
            for k in range(kk):
                qb_tot += qb[i, k]
                keep_in += (qb[i, k] + out_h * share[k]) * keep[k]
            keep_in = keep_in / (qb_tot + out_h) if qb_tot + out_h > 0.0 else 1.0
            # the slots hold the instances' requests at the step's end, the occupancy whose
            # departures backward Euler counts: an admitted request counts at what of it stays, so
            # full slots serve cd * slots / (mean_len * tau), the capacity the placement sized
            # (counted whole, full slots had served 0.6% less at a 2 s step and 25 s of decode)
            free = max(cd[i] * slots - kept, 0.0) / keep_in
            admit = min(qb_tot + out_h, free)
            out_h = max(min(out_h, bmax - qb_tot + admit), 0.0)
            admit = min(admit, qb_tot + out_h)
            q[1, i] = fresh - out_f
            q[2, i] = mid - out_m
            q[3, i] += hand_in - out_h
            pool_tot = 0.0
            for k in range(kk):
                pool[k] = qb[i, k] + out_h * share[k]
                pool_tot += pool[k]
            frac = admit / max(pool_tot, 1e-12)
            done = 0.0
            tok = 0.0
            n_now = 0.0
            qb_now = 0.0
            for k in range(kk):
                moved = pool[k] * frac
                qb[i, k] = pool[k] - moved
                total = active[i, k] + moved
                active[i, k] = total * keep[k]
                dep = total - active[i, k]
                done += dep
                tok += dep * mean_len[k]
                n_now += active[i, k]
                qb_now += qb[i, k]
            # waits by Little's law on each backlog, plus the stationary queueing wait that a raw
            # fluid lacks below capacity
            s_mix = (1.0 - m) * s_f + m * s_m
            mu_p = cp[i] / max(s_mix, 1e-12)
            wait_p = (q[1, i] * s_f + q[2, i] * s_m) / max(cp[i], 1e-12)
            cap_dec = cd[i] * slots / (tau_full[i] * slow * mean_l)
            wait_b = qb_now / max(cap_dec, 1e-12)
            if blocked:  # the prefill queue drains as fast as decode frees its slots
                wait_p = max(wait_p, (q[1, i] + q[2, i]) / max(cap_dec, 1e-12))
            rho_p = lam / max(mu_p, 1e-12)
            rho_b = lam * mean_l * tau / max(cd[i] * slots, 1e-12)
            scv_p = ((1.0 - m) * s_f**2 + m * s_m**2) / max(s_mix**2, 1e-24) - 1.0
            wq_p, pw_p = queue_wait(rho_p, cp[i], s_mix, scv_p)
            wq_b, pw_b = queue_wait(rho_b, cd[i] * slots, mean_l * tau, scv_l)
            wait_r, wq_r, pw_r, wait_h, wq_h, pw_h = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
            rho_r, rho_h = 0.0, 0.0
            if c_r != np.inf and s_r > 0.0:
                wait_r = q[0, i] * s_r / c_r
                rho_r = m * lam * s_r / c_r
                wq_r, pw_r = queue_wait(rho_r, c_r, s_r, 0.0)
            if c_h != np.inf and s_hx > 0.0:
                wait_h = q[3, i] * s_hx / c_h
                rho_h = lam * s_hx / c_h
                scv_h = ((1.0 - m) * s_h**2 + m * s_hm**2) / s_hx**2 - 1.0
                wq_h, pw_h = queue_wait(rho_h, c_h, s_hx, scv_h)
            # a decode instance admits at its next step boundary: half a step while it runs
            common = wait_p + wait_h + wait_b + (0.5 * tau if n_now > 0 else 0.0)
            ttft_f = common + s_h + s_f
            ttft_m = common + s_hm + wait_r + s_r + s_m
            # stage tails rarely peak together: combine them as a root sum of squares
            tails = np.sqrt(
                wait_quantile(wq_p, pw_p, TAIL_Q) ** 2
                + wait_quantile(wq_b, pw_b, TAIL_Q) ** 2
                + wait_quantile(wq_h, pw_h, TAIL_Q) ** 2
                + wait_quantile(wq_r, pw_r, TAIL_Q) ** 2
            )
            # upstream of the buffer: reloading, waiting for or in prefill (Little), handing off,
            # and the buffer; each with the requests its stationary wait holds (Little's law on the
            # waits the TTFT adds, so that the queues are the arrivals times the time they wait)
            held_p, held_b = lam * (m * wq_r + wq_p + wq_h), lam * wq_b
            # a bounded buffer holds no more than it can; the rest wait upstream, blocked
            # (an aggregated instance's none: a request waits for decode room before prefill)
            over = max(qb_now + held_b - (bmax if planned <= 0.0 else 0.0), 0.0)
            held_b -= over
            held_p += over
            in_prefill = out_f / dt * s_f + out_m / dt * s_m
            out[0, i, step] = q[0, i] + q[1, i] + q[2, i] + in_prefill + q[3, i] + held_p
            out[1, i, step] = qb_now + held_b
            out[2, i, step] = n_now / max(cd[i], 1e-12)
            out[3, i, step] = cp[i]
            out[4, i, step] = cd[i]
            out[5, i, step] = done / dt
            out[6, i, step] = tau
            out[7, i, step] = tok / dt
            out[8, i, step] = wait_p
            out[9, i, step] = wait_b
            out[10, i, step] = (1.0 - m) * ttft_f + m * (ttft_m + wq_r) + wq_p + wq_b + wq_h
            out[11, i, step] = max(ttft_f, ttft_m if m > 0 else 0.0) + tails
            out[12, i, step] = max(max(rho_p, rho_b), max(rho_r, rho_h))
            # the state's own queues: empty below capacity, growing by the excess above it
            out[13, i, step] = q[0, i] + q[1, i] + q[2, i] + q[3, i] + qb_now
            out[14, i, step] = qb_now
