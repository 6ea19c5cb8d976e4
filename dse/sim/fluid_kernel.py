"""The fluid model's Euler steps, compiled (numba): the arithmetic of :mod:`dse.sim.fluid`.

One call advances every configuration from step ``k0`` to ``k1`` with the instance counts fixed;
the planner runs in Python between calls. Outputs go into preallocated ``(configs, steps)`` arrays:
column ``OUT[name]`` of ``out``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

OUT = {name: i for i, name in enumerate(
    ("qp", "qb", "batch", "cp", "cd", "done", "tau", "tok", "wait_p", "wait_b", "rho_p", "rho_b"))}


@njit(cache=True)
def _tpot(table: np.ndarray, i: int, batch: float) -> float:
    width = table.shape[1]
    b = min(max(batch, 0.0), width - 1.0)
    lo = int(np.floor(b))
    hi = min(lo + 1, width - 1)
    w = b - lo
    return table[i, lo] * (1.0 - w) + table[i, hi] * w


@njit(cache=True)
def advance(k0: int, k1: int, dt: float, lam_t: np.ndarray, cp: np.ndarray, cd: np.ndarray,
            prefill_s: np.ndarray, slots: np.ndarray, buffer_max: np.ndarray, table: np.ndarray,
            share: np.ndarray, mean_len: np.ndarray, tau_full: np.ndarray, qp: np.ndarray,
            qb: np.ndarray, active: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    n, kk = active.shape
    mean_l = 0.0
    for k in range(kk):
        mean_l += share[k] * mean_len[k]
    keep = np.empty(kk)
    pool = np.empty(kk)
    for step in range(k0, k1):
        lam = lam_t[step]
        for i in range(n):
            mu_p = cp[i] / prefill_s[i]
            out_p = min(mu_p * dt, qp[i] + lam * dt)
            n_act = 0.0
            for k in range(kk):
                n_act += active[i, k]
            tau = _tpot(table, i, n_act / max(cd[i], 1e-12))
            # backward Euler per class: stable for any dt, exact in steady state
            kept = 0.0
            for k in range(kk):
                keep[k] = 1.0 / (1.0 + dt / (mean_len[k] * tau))
                kept += active[i, k] * keep[k]
            free = max(cd[i] * slots[i] - kept, 0.0)
            qb_tot = 0.0
            for k in range(kk):
                qb_tot += qb[i, k]
            admit = min(qb_tot + out_p, free)
            out_p = max(min(out_p, buffer_max[i] - qb_tot + admit), 0.0)  # blocking
            admit = min(admit, qb_tot + out_p)
            pool_tot = 0.0
            for k in range(kk):
                pool[k] = qb[i, k] + out_p * share[k]
                pool_tot += pool[k]
            frac = admit / max(pool_tot, 1e-12)
            qp[i] += lam * dt - out_p
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
            cap_dec = cd[i] * slots[i] / (tau_full[i] * mean_l)
            out[0, i, step] = qp[i] + out_p / dt * prefill_s[i]  # waiting + in service (Little)
            out[1, i, step] = qb_now
            out[2, i, step] = n_now / max(cd[i], 1e-12)
            out[3, i, step] = cp[i]
            out[4, i, step] = cd[i]
            out[5, i, step] = done / dt
            out[6, i, step] = tau
            out[7, i, step] = tok / dt
            out[8, i, step] = qp[i] / max(mu_p, 1e-12)
            out[9, i, step] = qb_now / max(cap_dec, 1e-12)
            out[10, i, step] = lam / max(mu_p, 1e-12)
            out[11, i, step] = lam * mean_l * tau / max(cd[i] * slots[i], 1e-12)
