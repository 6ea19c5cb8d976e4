"""The engine-level serving simulation, compiled (numba): every request through the engines'
schedulers, step by step, with the decode steps between two events taken in one jump.

One call simulates a whole deployment: ``D`` engine instances (aggregated: each prefills and
decodes; disaggregated: decode only) and ``P`` prefill instances (disaggregated only). The rules,
and where they come from (see :mod:`dse.perf.latency` for the citations):

* a request is routed on arrival to the instance with the fewest requests (aggregated, decode) or
  the fewest queued prompt tokens (prefill), and waits there first come, first served;
* an iteration of an aggregated instance first forms a prefill batch: the chunked request left
  from the last iteration, then waiting requests while the token budget ``chunk`` lasts, the
  running-request cap ``run_cap`` holds and the KV cache has room for the prompt plus
  ``reserve`` times the output (a prompt longer than what is left of the budget is chunked);
  with a prefill batch the iteration is a prefill forward, and, where the engine mixes
  (``mixed``: vLLM, TensorRT-LLM), the running requests decode one step in the same forward;
  without one it is a decode step of every running request;
* a decode step at ``n`` running requests whose contexts sum to ``S`` tokens lasts
  ``A(n) + B(n) S`` and gives each request ``accept`` tokens on average (MTP: its drafts'
  accepted prefix plus one); a request needs ``steps[i]`` steps after its first token;
* between two events (an arrival, a request finishing, a KV transfer landing) every step has the
  same batch, so the steps are taken in one jump whose length is closed-form; an event that lands
  during a jump ends it at the step boundary after it (continuous batching admits only there);
* when the KV cache overflows (admission reserved less than the outputs grew to), the newest
  running request is preempted: it returns to the front of the queue and recomputes its prompt
  and the tokens it had (vLLM's and SGLang's recompute preemption);
* disaggregated: a prefill instance batches queued prompts up to its budget; each finished prompt
  moves its KV to a decode instance in ``xfer_fixed + xfer_per_token * isl`` seconds and is
  admitted there at a step boundary when the cap and the KV cache allow; its first token is
  streamed then.

Load: closed loop (``clients > 0``: requests ``0..clients-1`` arrive at time 0 and each request
finishing sends the next one at once, as benchmark_serving's ``--max-concurrency`` with
``--request-rate inf`` does), or open loop (``arrivals``: sorted times).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

IDLE, PREFILL, JUMP = 0, 1, 2
INF = np.inf


@njit(cache=True)
def _interp(x: float, xs: np.ndarray, ys: np.ndarray) -> float:
    """Piecewise-linear in the table, linear extrapolation past its last point."""
    n = len(xs)
    if x <= xs[0]:
        return ys[0]
    if x >= xs[n - 1]:
        if n == 1:
            return ys[0]
        slope = (ys[n - 1] - ys[n - 2]) / (xs[n - 1] - xs[n - 2])
        return ys[n - 1] + slope * (x - xs[n - 1])
    lo, hi = 0, n - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if xs[mid] <= x:
            lo = mid
        else:
            hi = mid
    w = (x - xs[lo]) / (xs[hi] - xs[lo])
    return ys[lo] + w * (ys[hi] - ys[lo])


@njit(cache=True)
def _jump_steps(c0: float, g: float, elapsed: float, k_max: int) -> int:
    """The step in progress ``elapsed`` seconds into a jump whose ``k``-th step ends at
    ``k c0 + g k (k - 1) / 2``: the smallest ``k >= 1`` whose end is at or after ``elapsed``."""
    if g <= 1e-15:
        k = math.ceil(elapsed / c0 - 1e-9)
    else:
        b = c0 - 0.5 * g
        k = math.ceil((-b + math.sqrt(b * b + 2.0 * g * elapsed)) / g - 1e-9)
    return max(1, min(k, k_max))


@njit(cache=True)
def simulate(
    agg, mixed, n_prefill, n_decode, clients, arrivals, isl, osl, steps, accept,
    dec_n, dec_a, dec_b, pf_tokens, pf_cost, chunk, pf_chunk, kv_cap, run_cap, reserve,
    xfer_fixed, xfer_per_token, t_arrive, t_first, t_done,
):  # fmt: skip
    """Fill ``t_arrive``, ``t_first`` and ``t_done`` for every request; returns the number of
    preemptions. Lengths in tokens, times in seconds; ``steps`` are decode steps after the first
    token; ``dec_*`` tabulate ``A(n)`` and ``B(n)`` of a decode step; ``pf_*`` a prefill forward's
    seconds by its tokens (per instance: ``chunk`` aggregated, ``pf_chunk`` on a prefill pool)."""
    N = len(isl)
    D = n_decode
    P = n_prefill if not agg else 0
    M = D + P
    cap = max(1, min(run_cap, N))
    # queues: one FIFO linked list per instance (decode/engine 0..D-1, prefill D..D+P-1)
    head = np.full(M, -1, np.int64)
    tail = np.full(M, -1, np.int64)
    nxt = np.full(N, -1, np.int64)
    queued = np.zeros(M)  # requests (engine) or prompt tokens (prefill) queued
    ready = np.zeros(N)  # when a queued request may be admitted (KV landed)
    pf_rem = isl.astype(np.float64).copy()
    base = isl.astype(np.float64).copy()  # context a request (re)joins its batch with
    left = steps.astype(np.int64).copy()
    fin_at = np.zeros(N, np.int64)
    adm_sig = np.zeros(N, np.int64)
    # engine instances: running requests, step counter, context sum, KV reserved
    run = np.full((D, cap), -1, np.int64)
    n_run = np.zeros(D, np.int64)
    sigma = np.zeros(D, np.int64)
    ctx = np.zeros(D)
    res = np.zeros(D)
    resv = np.zeros(N)  # KV each admitted request reserved
    ratio = np.full(D, float(reserve))  # share of the output an admission reserves, per instance
    chunked = np.full(M, -1, np.int64)  # the request a prefill chunk was cut from
    batch = np.full((M, N if N < 4096 else 4096), -1, np.int64)  # requests of a prefill batch
    n_batch = np.zeros(M, np.int64)
    mode = np.zeros(M, np.int64)
    busy = np.full(M, INF)  # when the iteration in progress ends (or the instance wakes)
    t0 = np.zeros(D)
    c0 = np.zeros(D)
    gr = np.zeros(D)
    kk = np.zeros(D, np.int64)
    mix_n = np.zeros(M, np.int64)  # mixed iteration: the decode step it carries (running count)
    for i in range(N):
        t_arrive[i] = np.nan
        t_first[i] = np.nan
        t_done[i] = np.nan
    next_arrival = 0
    spawned = 0
    if clients > 0:
        for i in range(min(clients, N)):
            t_arrive[i] = 0.0
        spawned = min(clients, N)
    done = 0
    preempted = 0
    # closed loop: the first wave arrives now
    pending_route = np.zeros(N, np.int64)
    n_route = 0
    if clients > 0:
        for i in range(spawned):
            pending_route[n_route] = i
            n_route += 1
    now = 0.0
    while done < N:
        # route what arrived
        for r in range(n_route):
            _route(pending_route[r], now, agg, D, P, head, tail, nxt, queued, ready, isl, n_run,
                   mode, busy, t0, c0, gr, kk, cap)  # fmt: skip
        n_route = 0
        # the next event
        t_next = INF
        who = -1
        if clients == 0 and next_arrival < N:
            t_next = arrivals[next_arrival]
        for m in range(M):
            if busy[m] < t_next:
                t_next = busy[m]
                who = m
        if t_next == INF:
            break  # nothing can move: the rest can never be served
        now = t_next
        if who < 0:
            i = next_arrival
            t_arrive[i] = now
            next_arrival += 1
            pending_route[0] = i
            n_route = 1
            continue
        if who >= D:  # a prefill instance finished its forward
            for b in range(n_batch[who]):
                i = batch[who, b]
                j = _least_loaded(D, n_run, queued)
                ready[i] = now + xfer_fixed + xfer_per_token * isl[i]
                _push(j, i, head, tail, nxt)
                queued[j] += 1.0
                _wake(j, ready[i], n_run[j] < cap, mode, busy, t0, c0, gr, kk)
            n_batch[who] = 0
            _prefill_batch(who, now, head, tail, nxt, queued, pf_rem, pf_chunk, chunked, batch, n_batch,
                           pf_tokens, pf_cost, mode, busy, True)  # fmt: skip
            continue
        j = who
        finished_from = done
        if mode[j] == PREFILL:
            if mix_n[j] > 0:  # the decode step the mixed forward carried
                sigma[j] += 1
                ctx[j] += n_run[j] * accept
            for b in range(n_batch[j]):
                i = batch[j, b]
                t_first[i] = now
                done = _join(j, i, now, run, n_run, sigma, ctx, isl, base, left, fin_at, adm_sig, t_done,
                             done, res, resv)  # fmt: skip
            n_batch[j] = 0
            done = _retire(j, now, run, n_run, sigma, ctx, isl, base, accept, fin_at, adm_sig, t_done, res,
                           resv, done)  # fmt: skip
        elif mode[j] == JUMP:
            ratio[j] = max(reserve, ratio[j] - 0.001 * kk[j])  # SGLang's decay, 0.001 a step
            sigma[j] += kk[j]
            ctx[j] += n_run[j] * accept * kk[j]
            done = _retire(j, now, run, n_run, sigma, ctx, isl, base, accept, fin_at, adm_sig, t_done, res,
                           resv, done)  # fmt: skip
            while ctx[j] > kv_cap and n_run[j] > 1:
                preempted += 1
                _preempt(j, run, n_run, sigma, ctx, isl, base, accept, fin_at, adm_sig, left, pf_rem, res,
                         resv, head, tail, nxt, queued, ready, now)  # fmt: skip
                ratio[j] = 1.0  # as SGLang raises its new-token ratio after a retraction
        mode[j] = IDLE
        busy[j] = INF
        if clients > 0:  # each request that finished sends its client's next one, now
            for _ in range(done - finished_from):
                if spawned < N:
                    t_arrive[spawned] = now
                    pending_route[n_route] = spawned
                    n_route += 1
                    spawned += 1
        # route the new requests before this instance schedules, so it may take them now
        for r in range(n_route):
            _route(pending_route[r], now, agg, D, P, head, tail, nxt, queued, ready, isl, n_run,
                   mode, busy, t0, c0, gr, kk, cap)  # fmt: skip
        n_route = 0
        _schedule(j, now, agg, mixed, head, tail, nxt, queued, ready, pf_rem, chunk, chunked, batch, n_batch,
                  pf_tokens, pf_cost, mode, busy, run, n_run, sigma, ctx, res, isl, base, osl, ratio, resv,
                  kv_cap, cap, accept, fin_at, adm_sig, left, t_first, t_done, dec_n, dec_a, dec_b, t0, c0,
                  gr, kk, mix_n)  # fmt: skip
    return preempted


@njit(cache=True)
def _push(q, i, head, tail, nxt):  # type: ignore[no-untyped-def]
    nxt[i] = -1
    if tail[q] < 0:
        head[q] = i
    else:
        nxt[tail[q]] = i
    tail[q] = i


@njit(cache=True)
def _push_front(q, i, head, tail, nxt):  # type: ignore[no-untyped-def]
    nxt[i] = head[q]
    head[q] = i
    if tail[q] < 0:
        tail[q] = i


@njit(cache=True)
def _pop(q, head, tail, nxt):  # type: ignore[no-untyped-def]
    i = head[q]
    head[q] = nxt[i]
    if head[q] < 0:
        tail[q] = -1
    nxt[i] = -1
    return i


@njit(cache=True)
def _least_loaded(D, n_run, queued):  # type: ignore[no-untyped-def]
    best, load = 0, INF
    for j in range(D):
        x = n_run[j] + queued[j]
        if x < load:
            best, load = j, x
    return best


@njit(cache=True)
def _wake(j, at, room, mode, busy, t0, c0, gr, kk):  # type: ignore[no-untyped-def]
    """Engine instance ``j`` has a request it may admit from ``at``: an idle instance wakes then,
    a jump in progress ends at the step boundary after it."""
    if mode[j] == IDLE:
        if at < busy[j]:
            busy[j] = at
    elif mode[j] == JUMP and room and at < busy[j]:
        k = _jump_steps(c0[j], gr[j], at - t0[j], kk[j])
        kk[j] = k
        busy[j] = t0[j] + k * c0[j] + gr[j] * k * (k - 1) * 0.5


@njit(cache=True)
def _route(i, now, agg, D, P, head, tail, nxt, queued, ready, isl, n_run, mode, busy, t0, c0, gr, kk, cap):  # type: ignore[no-untyped-def]  # noqa: E501
    if agg or P == 0:
        j = _least_loaded(D, n_run, queued)
        ready[i] = now
        _push(j, i, head, tail, nxt)
        queued[j] += 1.0
        _wake(j, now, n_run[j] < cap, mode, busy, t0, c0, gr, kk)
        return
    best, load = D, INF
    for q in range(D, D + P):
        if queued[q] < load:
            best, load = q, queued[q]
    _push(best, i, head, tail, nxt)
    queued[best] += isl[i]
    if mode[best] == IDLE and now < busy[best]:
        busy[best] = now


@njit(cache=True)
def _prefill_batch(q, now, head, tail, nxt, queued, pf_rem, budget, chunked, batch, n_batch, pf_tokens, pf_cost, mode, busy, pool):  # type: ignore[no-untyped-def]  # noqa: E501
    """A prefill pool instance: batch queued prompts up to the budget (cutting the last one)."""
    tokens = 0.0
    room = budget
    while room > 0 and head[q] >= 0 and n_batch[q] < batch.shape[1]:
        i = head[q]
        take = min(pf_rem[i], room)
        pf_rem[i] -= take
        tokens += take
        room -= take
        queued[q] -= take
        if pf_rem[i] <= 0:
            _pop(q, head, tail, nxt)
            batch[q, n_batch[q]] = i
            n_batch[q] += 1
    if tokens > 0:
        mode[q] = PREFILL
        busy[q] = now + _interp(tokens, pf_tokens, pf_cost)
    else:
        mode[q] = IDLE
        busy[q] = INF


@njit(cache=True)
def _join(j, i, now, run, n_run, sigma, ctx, isl, base, left, fin_at, adm_sig, t_done, done, res, resv):  # type: ignore[no-untyped-def]  # noqa: E501
    """Request ``i`` has its first token and joins instance ``j``'s decode batch."""
    if left[i] <= 0:
        t_done[i] = now
        res[j] -= resv[i]
        return done + 1
    run[j, n_run[j]] = i
    n_run[j] += 1
    adm_sig[i] = sigma[j]
    fin_at[i] = sigma[j] + left[i]
    ctx[j] += base[i]
    return done


@njit(cache=True)
def _retire(j, now, run, n_run, sigma, ctx, isl, base, accept, fin_at, adm_sig, t_done, res, resv, done):  # type: ignore[no-untyped-def]  # noqa: E501
    b = 0
    while b < n_run[j]:
        i = run[j, b]
        if fin_at[i] <= sigma[j]:
            t_done[i] = now
            ctx[j] -= base[i] + (sigma[j] - adm_sig[i]) * accept
            res[j] -= resv[i]
            n_run[j] -= 1
            run[j, b] = run[j, n_run[j]]
            run[j, n_run[j]] = -1
            done += 1
        else:
            b += 1
    if n_run[j] == 0:
        ctx[j] = 0.0
    return done


@njit(cache=True)
def _preempt(j, run, n_run, sigma, ctx, isl, base, accept, fin_at, adm_sig, left, pf_rem, res, resv, head, tail, nxt, queued, ready, now):  # type: ignore[no-untyped-def]  # noqa: E501
    """Preempt the newest running request of ``j``: back to the front of its queue, to recompute
    its prompt and what it generated."""
    newest, b_new = -1, -1
    for b in range(n_run[j]):
        i = run[j, b]
        if newest < 0 or adm_sig[i] > adm_sig[newest]:
            newest, b_new = i, b
    i = newest
    held = base[i] + (sigma[j] - adm_sig[i]) * accept
    ctx[j] -= held
    res[j] -= resv[i]
    left[i] = fin_at[i] - sigma[j]
    base[i] = held
    pf_rem[i] = held
    n_run[j] -= 1
    run[j, b_new] = run[j, n_run[j]]
    run[j, n_run[j]] = -1
    ready[i] = now
    _push_front(j, i, head, tail, nxt)
    queued[j] += 1.0


@njit(cache=True)
def _schedule(j, now, agg, mixed, head, tail, nxt, queued, ready, pf_rem, chunk, chunked, batch, n_batch, pf_tokens, pf_cost, mode, busy, run, n_run, sigma, ctx, res, isl, base, osl, ratio, resv, kv_cap, cap, accept, fin_at, adm_sig, left, t_first, t_done, dec_n, dec_a, dec_b, t0, c0, gr, kk, mix_n):  # type: ignore[no-untyped-def]  # noqa: E501
    """Engine instance ``j`` at a step boundary: admit, then a prefill forward or a decode jump."""
    mix_n[j] = 0
    if agg:
        tokens = 0.0
        room = chunk
        c = chunked[j]
        if c >= 0:  # the request a chunk was cut from goes first
            take = min(pf_rem[c], room)
            pf_rem[c] -= take
            tokens += take
            room -= take
            if pf_rem[c] <= 0:
                batch[j, n_batch[j]] = c
                n_batch[j] += 1
                chunked[j] = -1
        while room > 0 and chunked[j] < 0 and head[j] >= 0 and n_batch[j] < batch.shape[1]:
            i = head[j]
            need = isl[i] + ratio[j] * osl[i]
            busy_slots = n_run[j] + n_batch[j]
            if busy_slots >= 1 and (busy_slots >= cap or res[j] + need > kv_cap):
                break
            _pop(j, head, tail, nxt)
            queued[j] -= 1.0
            res[j] += need
            resv[i] = need
            take = min(pf_rem[i], room)
            pf_rem[i] -= take
            tokens += take
            room -= take
            if pf_rem[i] <= 0:
                batch[j, n_batch[j]] = i
                n_batch[j] += 1
            else:
                chunked[j] = i
        if tokens > 0:
            dur = _interp(tokens, pf_tokens, pf_cost)
            if mixed and n_run[j] > 0:
                n = float(n_run[j])
                dur += _interp(n, dec_n, dec_a) + _interp(n, dec_n, dec_b) * ctx[j]
                mix_n[j] = n_run[j]
            mode[j] = PREFILL
            busy[j] = now + dur
            return
    else:  # a decode instance admits the requests whose KV has landed
        while head[j] >= 0 and ready[head[j]] <= now and n_run[j] < cap:
            i = head[j]
            if n_run[j] >= 1 and res[j] + isl[i] + ratio[j] * osl[i] > kv_cap:
                break
            _pop(j, head, tail, nxt)
            queued[j] -= 1.0
            resv[i] = isl[i] + ratio[j] * osl[i]
            res[j] += resv[i]
            if np.isnan(t_first[i]):
                t_first[i] = now
            run[j, n_run[j]] = i
            n_run[j] += 1
            adm_sig[i] = sigma[j]
            fin_at[i] = sigma[j] + max(left[i], 1)
            ctx[j] += base[i]
    if n_run[j] == 0:
        mode[j] = IDLE
        busy[j] = INF
        if head[j] >= 0:  # a transfer still landing
            busy[j] = max(ready[head[j]], now)
        return
    k = fin_at[run[j, 0]] - sigma[j]
    for b in range(1, n_run[j]):
        k = min(k, fin_at[run[j, b]] - sigma[j])
    n = float(n_run[j])
    growth = n * accept
    if ctx[j] + growth * k > kv_cap:  # stop where the cache overflows
        k = max(1, int((kv_cap - ctx[j]) / growth))
    k = max(k, 1)
    a = _interp(n, dec_n, dec_a)
    b_ = _interp(n, dec_n, dec_b)
    t0[j] = now
    c0[j] = a + b_ * ctx[j]
    gr[j] = b_ * growth
    kk[j] = k
    mode[j] = JUMP
    busy[j] = now + k * c0[j] + gr[j] * k * (k - 1) * 0.5
    if not agg and head[j] >= 0 and n_run[j] < cap and ready[head[j]] > now:
        _wake(j, max(ready[head[j]], now), True, mode, busy, t0, c0, gr, kk)
