"""The engine-level serving simulation, compiled (numba): every request through the engines'
schedulers, step by step, with the decode steps between two events taken in one jump.

One call simulates a whole deployment: ``D`` engine instances (aggregated: each prefills and
decodes; disaggregated: decode only) and ``P`` prefill instances (disaggregated only). The rules,
and where they come from (see :mod:`dse.perf.latency` for the citations):

* requests wait at their instance first come, first served;
* a request is routed on arrival to the instance with the fewest requests (running, queued or in
  its prefill forward), or, disaggregated, to the prefill instance with the fewest prompt tokens
  queued or in its forward;
* where TensorRT-LLM balances attention-DP ranks (``balance``), an aggregated instance lets
  queued requests into a prefill batch only once every rank has one, some rank has none
  decoding, or ``recv_every`` steps passed since it last did (``_balance_adp_requests``);
* an iteration of an aggregated instance first forms a prefill batch: the chunked request left
  from the last iteration, then waiting requests while the token budget ``chunk`` lasts (where
  the engine mixes, ``mixed``: vLLM, TensorRT-LLM, less the running requests' decode tokens, which
  take it first), the running-request cap ``run_cap`` holds and the KV cache has room both for
  what is reserved (the prompt plus ``reserve`` times the output) and for what is held now plus
  one more KV block of every running request (a prompt longer than what is left of the budget is
  chunked); with a prefill batch the iteration
  is a prefill forward, and, mixed, the running requests decode one step in the same forward;
  without one it is a decode step of every running request;
* a decode step at ``n`` running requests whose contexts sum to ``S`` tokens lasts
  ``A(n) + B(n) S`` and gives each request ``accept`` tokens on average (MTP: its drafts'
  accepted prefix plus one); a request needs ``steps[i]`` steps after its first token;
* between two events (an arrival, a request finishing, a KV transfer landing) every step has the
  same batch, so the steps are taken in one jump whose length is closed-form; an event that lands
  during a jump ends it at the step boundary after it (continuous batching admits only there);
* when the KV cache overflows (admission reserved less than the outputs grew to), after a decode
  step or a mixed forward, the newest running request is preempted: it returns to the front of
  the queue, keeps its first token, and recomputes its prompt and the tokens it had (vLLM's and
  SGLang's recompute preemption; disaggregated, the decode instance takes it back without the
  recompute's time);
* disaggregated: a prefill instance batches queued prompts up to its budget; where the engine
  hand-shakes before prefill (``bootstrap``: SGLang's prefill server admits a request to its
  waiting queue only once its KV receiver on the decode server is ready, polled once per loop
  iteration), a prompt that arrives during a forward is received after it and admitted at the
  iteration after that, so it misses the next forward when other prompts fill one (an idle
  server's loop spins, and takes it at once); a forward takes at most ``pf_lane`` tokens of one
  prompt (under attention data parallelism its rank's share of the budget); each finished prompt
  moves its KV (the cached prefix included) to a decode instance in ``xfer_fixed +
  xfer_per_token * context`` seconds and is admitted there at a step boundary when the cap and
  the KV cache allow (reserving ``dec_reserve`` tokens past its prompt where the engine keeps a
  fixed reserve, else its share of the output), in the order its transfer began; its first token
  is streamed then.

Load: closed loop (``clients > 0``: requests ``0..clients-1`` arrive at time 0 and each request
finishing sends the next one, as benchmark_serving's ``--max-concurrency`` with ``--request-rate
inf`` does, which reaches the engine ``think`` seconds later: the last token's way out to the
client and the next request's way in), or open loop (``arrivals``: sorted times).
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

from dse.jit import njit

IDLE, PREFILL, JUMP = 0, 1, 2
BLOCK_TOKENS = 16.0  # vLLM's KV block: an admission leaves room for one more block of every running request
INF = np.inf
INLINE: Final = "always"  # numba inlines the helpers into simulate (below)

# The state lives in a few 2-D arrays, one column per field, so that a helper takes five arrays
# rather than forty. The helpers are inlined into ``simulate`` by numba itself (``INLINE``):
# called, each array argument cost a reference count in and out, a quarter of the kernel's time
# (the same arithmetic in the same order, so the same answers to the bit).
# per request, float
ISL, OSL, READY, PF_REM, BASE, RESV, ARRIVE, FIRST, DONE = range(9)
# per request, int
LEFT, FIN, ADM, NXT = range(4)
# per instance, float (decode or engine instances 0..D-1, prefill instances D..D+P-1)
QUEUED, BUSY, T0, C0, GR, CTX, RES, RATIO, FWD = range(9)
# per instance, int
HEAD, TAIL, MODE, KK, SIGMA, NRUN, CHUNKED, NBATCH, MIXN, MINFIN, RECV, UNSEEN = range(12)
NEVER = 1 << 62  # MINFIN of an instance with nobody running
LATER = 1e-9  # seconds: just after an event, so a forward formed at it leaves the request out


@njit(cache=True, inline=INLINE)
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


@njit(cache=True, inline=INLINE)
def _jump_steps(c0: float, g: float, elapsed: float, k_max: int) -> int:
    """The step in progress ``elapsed`` seconds into a jump whose ``k``-th step ends at
    ``k c0 + g k (k - 1) / 2``: the smallest ``k >= 1`` whose end is at or after ``elapsed``."""
    if elapsed <= 0.0:
        return 1
    b = c0 - 0.5 * g
    root = b + math.sqrt(b * b + 2.0 * g * elapsed)  # the stable form of (-b + sqrt(...)) / g
    k = math.ceil(2.0 * elapsed / root) if root > 0 else k_max
    k = max(1, min(k, k_max))
    while k < k_max and k * c0 + g * k * (k - 1) * 0.5 < elapsed:  # rounding left it short
        k += 1
    return k


@njit(cache=True)
def simulate(
    agg, mixed, n_prefill, n_decode, clients, arrivals, isl, osl, steps, accept,
    dec_n, dec_a, dec_b, pf_tokens, pf_cost, chunk, pf_chunk, kv_cap, run_cap, recv_every, reserve,
    xfer_fixed, xfer_per_token, t_arrive, t_first, t_done, cached, bootstrap, pf_lane, dec_reserve,
    balance, think, dec_from, dec_to, weight, served,
):  # fmt: skip
    """Fill ``t_arrive``, ``t_first`` and ``t_done`` for every request; returns the number of
    preemptions. Lengths in tokens, times in seconds; ``steps`` are decode steps after the first
    token; ``dec_*`` tabulate ``A(n)`` and ``B(n)`` of a decode step; ``pf_*`` a prefill forward's
    seconds by its tokens (per instance: ``chunk`` aggregated, ``pf_chunk`` on a prefill pool);
    ``cached``: tokens of each request's context already in the cache (a returning turn's prefix),
    held in the KV cache and attended to but not prefilled; ``recv_every``: the decode steps between
    two looks of an aggregated instance's scheduler for new requests (1: every step);
    ``bootstrap``: a disaggregated prefill server admits a prompt one loop iteration after it
    receives it; ``pf_lane``: the most tokens of one prompt a prefill pool's forward takes;
    ``dec_reserve``: tokens a disaggregated decode instance reserves past each prompt it admits
    (0: ``reserve`` times the output); ``balance``: an aggregated instance's attention-DP ranks
    whose context requests wait for each other, ``recv_every`` steps at most (TensorRT-LLM's
    ``enable_balance``; 0: none); ``think``: closed loop, the seconds from the engine finishing a
    request to its client's next one reaching the engine (the stream's way out to the client and
    the next request's way in; 0: at once).

    Per engine (decode) instance ``j``: its KV cache ``kv_cap[j]`` tokens, its running cap
    ``run_cap[j]``, its step table ``dec_*[dec_from[j]:dec_to[j]]``, the KV transfer to it
    ``xfer_fixed[j] + xfer_per_token[j] * context`` and its routing weight ``weight[j]`` (a
    design's decode pools of several shapes: the router sends each request to the instance whose
    requests times its weight, the reciprocal of its share of the largest cap, are fewest; 1 for
    every instance of one shape). ``served`` receives the instance each request decoded on."""
    N = len(isl)
    D = n_decode
    P = n_prefill if not agg else 0
    M = D + P
    cap = np.empty(D, np.int64)
    for j in range(D):
        cap[j] = max(1, min(run_cap[j], N))
    rf = np.zeros((N, 9))
    ri = np.zeros((N, 4), np.int64)
    for i in range(N):
        rf[i, ISL] = isl[i]
        rf[i, OSL] = osl[i]
        rf[i, PF_REM] = isl[i]
        rf[i, BASE] = isl[i] + cached[i]  # the context a request (re)joins its batch with
        rf[i, ARRIVE] = np.nan
        rf[i, FIRST] = np.nan
        rf[i, DONE] = np.nan
        ri[i, LEFT] = steps[i]
        ri[i, NXT] = -1
    mf = np.zeros((M, 9))
    mi = np.zeros((M, 12), np.int64)
    every = max(1, recv_every) if agg else 1
    for m in range(M):
        mf[m, BUSY] = INF
        mf[m, RATIO] = reserve
        mi[m, HEAD] = -1
        mi[m, TAIL] = -1
        mi[m, CHUNKED] = -1
        mi[m, MINFIN] = NEVER  # the step count at which the first running request finishes
    run = np.full((D, cap.max()), -1, np.int64)  # each instance's running requests: a heap by FIN
    batch = np.full((M, N if N < 4096 else 4096), -1, np.int64)  # requests of a prefill batch
    dec_all = np.empty((3, len(dec_n)))
    dec_all[0], dec_all[1], dec_all[2] = dec_n, dec_a, dec_b
    pf = np.empty((2, len(pf_tokens)))
    pf[0], pf[1] = pf_tokens, pf_cost
    pending = np.zeros(N, np.int64)  # requests that arrived and wait to be routed
    n_pending = 0
    next_arrival = 0  # open loop: the next of ``arrivals``; closed: the next request sent, not yet in
    spawned = 0
    if clients > 0:  # the first wave arrives at once
        spawned = min(clients, N)
        for i in range(spawned):
            rf[i, ARRIVE] = 0.0
            pending[n_pending] = i
            n_pending += 1
        next_arrival = spawned
    done = 0
    preempted = 0
    now = 0.0
    while done < N:
        for r in range(n_pending):
            _route(pending[r], now, agg, D, P, cap, every, bootstrap, balance, rf, ri, mf, mi, weight, served)
        n_pending = 0
        t_next = INF  # the next event
        who = -1
        if clients == 0 and next_arrival < N:
            t_next = arrivals[next_arrival]
        elif think > 0.0 and next_arrival < spawned:  # closed: sent ``think`` earlier, in order
            t_next = rf[next_arrival, ARRIVE]
        for m in range(M):
            if mf[m, BUSY] < t_next:
                t_next = mf[m, BUSY]
                who = m
        if t_next == INF:
            break  # nothing can move: the rest can never be served
        now = t_next
        if who < 0:  # an arrival: open loop, or a closed loop's request on its way in
            if clients == 0:
                rf[next_arrival, ARRIVE] = now
            pending[0] = next_arrival
            n_pending = 1
            next_arrival += 1
            continue
        if who >= D:  # a prefill instance finished its forward: the KV moves to decode
            for b in range(mi[who, NBATCH]):
                i = batch[who, b]
                j = _least_loaded(D, weight, mf, mi)
                served[i] = j
                rf[i, READY] = now + xfer_fixed[j] + xfer_per_token[j] * rf[i, BASE]
                _push(j, i, mi, ri)
                mf[j, QUEUED] += 1.0
                _wake(j, rf[i, READY], mi[j, NRUN] < cap[j], mf, mi)
            mi[who, NBATCH] = 0
            mf[who, FWD] = 0.0
            _prefill_batch(who, now, pf_chunk, pf_lane, rf, ri, mf, mi, batch, pf)
            continue
        j = who
        finished_from = done
        steps = 0
        if mi[j, MODE] == PREFILL:
            if mi[j, MIXN] > 0:  # the decode step the mixed forward carried
                steps = 1
                mi[j, SIGMA] += 1
                mf[j, CTX] += mi[j, NRUN] * accept
            for b in range(mi[j, NBATCH]):
                done += _join(j, batch[j, b], now, rf, ri, mf, mi, run)
            mi[j, NBATCH] = 0
            mf[j, FWD] = 0.0
        elif mi[j, MODE] == JUMP:
            steps = mi[j, KK]
            mi[j, SIGMA] += steps
            mf[j, CTX] += mi[j, NRUN] * accept * steps
        if mi[j, MODE] != IDLE:
            if reserve > 0:  # SGLang's new-token ratio decays by 0.001 a decode step
                mf[j, RATIO] = max(reserve, mf[j, RATIO] - 0.001 * steps)
            done += _retire(j, now, accept, rf, ri, mf, mi, run)
            while mf[j, CTX] > kv_cap[j] and mi[j, NRUN] > 1:
                preempted += 1
                _preempt(j, now, accept, rf, ri, mf, mi, run)
                if reserve > 0:  # and jumps to 1 after a retraction (vLLM reserves nothing, always)
                    mf[j, RATIO] = 1.0
        if every > 1:
            _recv_point(j, every, balance, mf, mi)
        mi[j, MODE] = IDLE
        mf[j, BUSY] = INF
        if clients > 0:  # each request that finished sends its client's next one, now
            spawned, n_pending = _spawn(done - finished_from, now, think, spawned, N, rf, pending, n_pending)
        for r in range(n_pending):  # before this instance schedules, so it may take them now
            _route(pending[r], now, agg, D, P, cap, every, bootstrap, balance, rf, ri, mf, mi, weight, served)
        n_pending = 0
        before = done
        dec = dec_all[:, dec_from[j] : dec_to[j]]
        done += _schedule(
            j, now, agg, mixed, chunk, kv_cap[j], cap[j], every, accept, dec_reserve,
            rf, ri, mf, mi, run, batch, dec, pf,
        )  # fmt: skip
        if clients > 0:  # requests done on admission (one output token) release their clients too
            spawned, n_pending = _spawn(done - before, now, think, spawned, N, rf, pending, n_pending)
    for i in range(N):
        t_arrive[i] = rf[i, ARRIVE]
        t_first[i] = rf[i, FIRST]
        t_done[i] = rf[i, DONE]
    return preempted


@njit(cache=True, inline=INLINE)
def _spawn(count, now, think, spawned, N, rf, pending, n_pending):  # type: ignore[no-untyped-def]
    """A closed loop's clients whose requests finished send their next ones, which reach the
    engine ``think`` seconds later (at once: pending now; later: arrivals the loop takes in the
    order sent, :func:`simulate`): (spawned, pending)."""
    for _ in range(count):
        if spawned < N:
            rf[spawned, ARRIVE] = now + think
            if think <= 0.0:
                pending[n_pending] = spawned
                n_pending += 1
            spawned += 1
    return spawned, n_pending


@njit(cache=True, inline=INLINE)
def _push(q, i, mi, ri):  # type: ignore[no-untyped-def]
    ri[i, NXT] = -1
    if mi[q, TAIL] < 0:
        mi[q, HEAD] = i
    else:
        ri[mi[q, TAIL], NXT] = i
    mi[q, TAIL] = i


@njit(cache=True, inline=INLINE)
def _push_front(q, i, mi, ri):  # type: ignore[no-untyped-def]
    ri[i, NXT] = mi[q, HEAD]
    mi[q, HEAD] = i
    if mi[q, TAIL] < 0:
        mi[q, TAIL] = i


@njit(cache=True, inline=INLINE)
def _pop(q, mi, ri):  # type: ignore[no-untyped-def]
    i = mi[q, HEAD]
    mi[q, HEAD] = ri[i, NXT]
    if mi[q, HEAD] < 0:
        mi[q, TAIL] = -1
    ri[i, NXT] = -1
    return i


@njit(cache=True, inline=INLINE)
def _least_loaded(D, weight, mf, mi):  # type: ignore[no-untyped-def]
    """The engine instance with the fewest requests (running, queued, or in its prefill forward)
    times its weight."""
    best, load = 0, INF
    for j in range(D):
        x = (mi[j, NRUN] + mf[j, QUEUED] + mi[j, NBATCH] + (1 if mi[j, CHUNKED] >= 0 else 0)) * weight[j]
        if x < load:
            best, load = j, x
    return best


@njit(cache=True, inline=INLINE)
def _wake(j, at, room, mf, mi):  # type: ignore[no-untyped-def]
    """Engine instance ``j`` has a request it may admit from ``at``: an idle instance wakes then,
    a jump in progress ends at the step boundary after it."""
    if mi[j, MODE] == IDLE:
        if at < mf[j, BUSY]:
            mf[j, BUSY] = at
    elif mi[j, MODE] == JUMP and room and at < mf[j, BUSY]:
        k = _jump_steps(mf[j, C0], mf[j, GR], at - mf[j, T0], mi[j, KK])
        mi[j, KK] = k
        mf[j, BUSY] = mf[j, T0] + k * mf[j, C0] + mf[j, GR] * k * (k - 1) * 0.5


@njit(cache=True, inline=INLINE)
def _wake_at_recv(j, at, every, mf, mi):  # type: ignore[no-untyped-def]
    """A request arrived at ``at`` during instance ``j``'s decode jump: the jump ends at the first
    step boundary after it where the scheduler looks for new requests (every ``every`` steps since
    it last looked)."""
    k = _jump_steps(mf[j, C0], mf[j, GR], at - mf[j, T0], mi[j, KK])
    k += (every - (mi[j, SIGMA] - mi[j, RECV] + k) % every) % every
    if k < mi[j, KK]:
        mi[j, KK] = k
        mf[j, BUSY] = mf[j, T0] + k * mf[j, C0] + mf[j, GR] * k * (k - 1) * 0.5


@njit(cache=True, inline=INLINE)
def _released(j, balance, mf, mi):  # type: ignore[no-untyped-def]
    """TensorRT-LLM's attention-DP balance over ``balance`` ranks (0: none) lets instance ``j``'s
    context requests into a forward before its timer runs out: once every rank has one (as many
    queued as ranks: new requests go to the rank with the fewest) or some rank has none decoding
    (fewer running than ranks)."""
    return balance > 0 and (mf[j, QUEUED] >= balance or mi[j, NRUN] < balance)


@njit(cache=True, inline=INLINE)
def _recv_point(j, every, balance, mf, mi):  # type: ignore[no-untyped-def]
    """Instance ``j`` at the end of a forward: SGLang's scheduler looks for new requests after a
    prefill forward, when idle, and every ``every`` decode steps (``SchedulerRecvSkipper``: a
    decode step counts 1, any other forward enough to look at once); at a look it sees every
    request that has arrived. TensorRT-LLM's attention-DP balance is the same timer (its count of
    iterations without context requests let in, reset when it lets them in), which also lets them
    in once :func:`_released` says so."""
    since = mi[j, SIGMA] - mi[j, RECV]
    if mi[j, MODE] != JUMP or mi[j, NRUN] == 0 or since % every == 0 or _released(j, balance, mf, mi):
        mi[j, UNSEEN] = 0
        mi[j, RECV] = mi[j, SIGMA]
    else:  # it looked (and saw nothing new) at the last multiple passed
        mi[j, RECV] = mi[j, SIGMA] - since % every


@njit(cache=True, inline=INLINE)
def _route(i, now, agg, D, P, cap, every, bootstrap, balance, rf, ri, mf, mi, weight, served):  # type: ignore[no-untyped-def]  # noqa: E501
    """A request that arrived: to the engine instance with the fewest requests, or (disaggregated)
    to the prefill instance with the fewest queued prompt tokens. An instance that looks for new
    requests only every ``every`` decode steps sees it at once only when idle; otherwise at the
    end of its forward in progress, or of the decode step where it next looks (or, balancing
    attention-DP ranks, the step after the one :func:`_released` lets it in). A prefill server
    that hand-shakes first (``bootstrap``) and is in a forward can batch it only after the forward
    that follows (``READY`` just past the current one's end)."""
    if agg or P == 0:
        j = _least_loaded(D, weight, mf, mi)
        served[i] = j
        rf[i, READY] = now
        _push(j, i, mi, ri)
        mf[j, QUEUED] += 1.0
        idle = mi[j, MODE] == IDLE and mi[j, NRUN] == 0 and mi[j, CHUNKED] < 0
        if every > 1 and not idle and not _released(j, balance, mf, mi):
            mi[j, UNSEEN] += 1
            if mi[j, MODE] == JUMP:
                _wake_at_recv(j, now, every, mf, mi)
            return
        _wake(j, now, mi[j, NRUN] < cap[j], mf, mi)
        return
    best, load = D, INF
    for q in range(D, D + P):  # the prefill instance with the fewest prompt tokens queued or in its forward
        if mf[q, QUEUED] + mf[q, FWD] < load:
            best, load = q, mf[q, QUEUED] + mf[q, FWD]
    busy = mi[best, MODE] == PREFILL
    rf[i, READY] = mf[best, BUSY] + LATER if bootstrap and busy else now
    _push(best, i, mi, ri)
    mf[best, QUEUED] += rf[i, ISL]
    if mi[best, MODE] == IDLE and now < mf[best, BUSY]:
        mf[best, BUSY] = now


@njit(cache=True, inline=INLINE)
def _prefill_batch(q, now, budget, lane, rf, ri, mf, mi, batch, pf):  # type: ignore[no-untyped-def]
    """A prefill pool instance: batch queued prompts admitted by now (``READY``) up to the budget,
    at most ``lane`` tokens of each (its attention-DP rank's share of the budget: a prompt longer
    than that goes on in the next forward, beside the prompts after it); with none admitted yet,
    wait for the first."""
    tokens = 0.0
    room = budget
    prev = -1  # the queued request before i (-1: i is the head)
    i = mi[q, HEAD]
    while room > 0 and i >= 0 and mi[q, NBATCH] < batch.shape[1]:
        if rf[i, READY] > now:  # queued in arrival order, so every later one waits too
            break
        take = min(rf[i, PF_REM], room, lane)
        rf[i, PF_REM] -= take
        tokens += take
        room -= take
        mf[q, QUEUED] -= take
        nxt = ri[i, NXT]
        if rf[i, PF_REM] <= 0:
            _unlink(q, prev, i, mi, ri)
            batch[q, mi[q, NBATCH]] = i
            mi[q, NBATCH] += 1
        else:
            prev = i
        i = nxt
    if tokens > 0:
        mi[q, MODE] = PREFILL
        mf[q, FWD] = tokens
        mf[q, BUSY] = now + _interp(tokens, pf[0], pf[1])
    else:
        mi[q, MODE] = IDLE
        mf[q, BUSY] = rf[mi[q, HEAD], READY] if mi[q, HEAD] >= 0 else INF


@njit(cache=True, inline=INLINE)
def _unlink(q, prev, i, mi, ri):  # type: ignore[no-untyped-def]
    """Take request ``i`` out of ``q``'s queue; ``prev`` is the one before it (-1: it is the head)."""
    if prev < 0:
        _pop(q, mi, ri)
        return
    ri[prev, NXT] = ri[i, NXT]
    if mi[q, TAIL] == i:
        mi[q, TAIL] = prev
    ri[i, NXT] = -1


@njit(cache=True, inline=INLINE)
def _join(j, i, now, rf, ri, mf, mi, run):  # type: ignore[no-untyped-def]
    """Request ``i`` has its first token and joins instance ``j``'s decode batch; 1 if that
    was its only token."""
    if np.isnan(rf[i, FIRST]):  # a preempted request keeps the first token it had
        rf[i, FIRST] = now
    if ri[i, LEFT] <= 0:
        rf[i, DONE] = now
        mf[j, RES] -= rf[i, RESV]
        return 1
    ri[i, ADM] = mi[j, SIGMA]
    ri[i, FIN] = mi[j, SIGMA] + ri[i, LEFT]
    run[j, mi[j, NRUN]] = i
    mi[j, NRUN] += 1
    _sift_up(j, mi[j, NRUN] - 1, ri, run)
    mi[j, MINFIN] = min(mi[j, MINFIN], ri[i, FIN])
    mf[j, CTX] += rf[i, BASE]
    return 0


@njit(cache=True, inline=INLINE)
def _retire(j, now, accept, rf, ri, mf, mi, run):  # type: ignore[no-untyped-def]
    """Requests of ``j`` that have all their tokens leave; how many. The running requests are a
    heap by the step count they finish at, so those finishing now come off its top, each in
    ``log n`` (a scan of all of them, as before, made a 10,000-client closed loop quadratic)."""
    sigma = mi[j, SIGMA]
    if mi[j, MINFIN] > sigma:  # nobody is done yet
        return 0
    out = 0
    while mi[j, NRUN] > 0 and ri[run[j, 0], FIN] <= sigma:
        i = run[j, 0]
        rf[i, DONE] = now
        mf[j, CTX] -= rf[i, BASE] + (sigma - ri[i, ADM]) * accept
        mf[j, RES] -= rf[i, RESV]
        _remove_at(j, 0, mi, ri, run)
        out += 1
    mi[j, MINFIN] = ri[run[j, 0], FIN] if mi[j, NRUN] > 0 else NEVER
    if mi[j, NRUN] == 0:
        mf[j, CTX] = 0.0
    return out


@njit(cache=True, inline=INLINE)
def _sift_up(j, b, ri, run):  # type: ignore[no-untyped-def]
    """The request at place ``b`` of ``j``'s heap moved up to where its FIN belongs."""
    i = run[j, b]
    fin = ri[i, FIN]
    while b > 0:
        up = (b - 1) >> 1
        q = run[j, up]
        if ri[q, FIN] <= fin:
            break
        run[j, b] = q
        b = up
    run[j, b] = i


@njit(cache=True, inline=INLINE)
def _sift_down(j, b, n, ri, run):  # type: ignore[no-untyped-def]
    """The request at place ``b`` of ``j``'s heap of ``n`` moved down to where its FIN belongs."""
    i = run[j, b]
    fin = ri[i, FIN]
    while True:
        c = 2 * b + 1
        if c >= n:
            break
        if c + 1 < n and ri[run[j, c + 1], FIN] < ri[run[j, c], FIN]:
            c += 1
        q = run[j, c]
        if ri[q, FIN] >= fin:
            break
        run[j, b] = q
        b = c
    run[j, b] = i


@njit(cache=True, inline=INLINE)
def _remove_at(j, b, mi, ri, run):  # type: ignore[no-untyped-def]
    """Take the request at place ``b`` out of ``j``'s heap of running requests."""
    n = mi[j, NRUN] - 1
    mi[j, NRUN] = n
    last = run[j, n]
    run[j, n] = -1
    if b < n:  # the last one takes its place, and moves up or down from there
        run[j, b] = last
        if b > 0 and ri[last, FIN] < ri[run[j, (b - 1) >> 1], FIN]:
            _sift_up(j, b, ri, run)
        else:
            _sift_down(j, b, n, ri, run)


@njit(cache=True, inline=INLINE)
def _preempt(j, now, accept, rf, ri, mf, mi, run):  # type: ignore[no-untyped-def]
    """Preempt the newest running request of ``j``: back to the front of its queue, to recompute
    its prompt and what it generated."""
    newest, b_new = -1, -1
    for b in range(mi[j, NRUN]):
        i = run[j, b]
        later = ri[i, ADM] > ri[newest, ADM] or (ri[i, ADM] == ri[newest, ADM] and i > newest)
        if newest < 0 or later:
            newest, b_new = i, b
    i = newest
    held = rf[i, BASE] + (mi[j, SIGMA] - ri[i, ADM]) * accept
    mf[j, CTX] -= held
    mf[j, RES] -= rf[i, RESV]
    ri[i, LEFT] = ri[i, FIN] - mi[j, SIGMA]
    rf[i, OSL] = ri[i, LEFT] * accept  # what is left of its output: all a readmission reserves for
    rf[i, BASE] = held
    rf[i, PF_REM] = held
    _remove_at(j, b_new, mi, ri, run)
    rf[i, READY] = now
    _push_front(j, i, mi, ri)
    mf[j, QUEUED] += 1.0
    mi[j, MINFIN] = ri[run[j, 0], FIN] if mi[j, NRUN] > 0 else NEVER


@njit(cache=True, inline=INLINE)
def _take_prefill(j, i, room, rf, mi, batch):  # type: ignore[no-untyped-def]
    """Up to ``room`` tokens of request ``i``'s prompt into ``j``'s prefill forward; the tokens taken."""
    take = min(rf[i, PF_REM], room)
    rf[i, PF_REM] -= take
    if rf[i, PF_REM] <= 0:
        batch[j, mi[j, NBATCH]] = i
        mi[j, NBATCH] += 1
        if mi[j, CHUNKED] == i:
            mi[j, CHUNKED] = -1
    else:
        mi[j, CHUNKED] = i
    return take


@njit(cache=True, inline=INLINE)
def _aggregated_prefill(j, now, mixed, chunk, kv_cap, cap, rf, ri, mf, mi, run, batch, dec, pf):  # type: ignore[no-untyped-def]  # noqa: E501
    """An aggregated instance's prefill forward, if it has prompt tokens to take; True if so.
    Mixed (vLLM, TensorRT-LLM): the running requests' decode tokens take the budget first."""
    room = chunk - (mi[j, NRUN] if mixed else 0)
    tokens = 0.0
    c = mi[j, CHUNKED]
    if c >= 0:  # the request a chunk was cut from goes first
        took = _take_prefill(j, c, room, rf, mi, batch)
        tokens += took
        room -= took
    seen = mf[j, QUEUED] - mi[j, UNSEEN]  # the newest UNSEEN requests have not been looked for yet
    while room > 0 and mi[j, CHUNKED] < 0 and seen > 0 and mi[j, NBATCH] < batch.shape[1]:
        i = mi[j, HEAD]
        need = rf[i, BASE] + mf[j, RATIO] * rf[i, OSL]
        slots = mi[j, NRUN] + mi[j, NBATCH]
        held = mf[j, CTX] + rf[i, BASE] + (slots + 1) * BLOCK_TOKENS  # held now, and the next block
        full = mf[j, RES] + need > kv_cap or held > kv_cap
        if slots >= 1 and (slots >= cap or full):
            break
        _pop(j, mi, ri)
        mf[j, QUEUED] -= 1.0
        seen -= 1.0
        mf[j, RES] += need
        rf[i, RESV] = need
        took = _take_prefill(j, i, room, rf, mi, batch)
        tokens += took
        room -= took
    if tokens <= 0:
        return False
    dur = _interp(tokens, pf[0], pf[1])
    if mixed and mi[j, NRUN] > 0:
        n = float(mi[j, NRUN])
        dur += _interp(n, dec[0], dec[1]) + _interp(n, dec[0], dec[2]) * mf[j, CTX]
        mi[j, MIXN] = mi[j, NRUN]
    mi[j, MODE] = PREFILL
    mf[j, BUSY] = now + dur
    return True


@njit(cache=True, inline=INLINE)
def _admit_transferred(j, now, kv_cap, cap, dec_reserve, rf, ri, mf, mi, run):  # type: ignore[no-untyped-def]
    """A decode instance admits the requests whose KV has landed, while the cap and cache allow;
    how many were done on admission (their one output token came from prefill)."""
    out = 0
    while mi[j, HEAD] >= 0 and rf[mi[j, HEAD], READY] <= now and mi[j, NRUN] < cap:
        i = mi[j, HEAD]
        need = rf[i, BASE] + (dec_reserve if dec_reserve > 0 else mf[j, RATIO] * rf[i, OSL])
        held = mf[j, CTX] + rf[i, BASE] + (mi[j, NRUN] + 1) * BLOCK_TOKENS
        full = mf[j, RES] + need > kv_cap or held > kv_cap
        if mi[j, NRUN] >= 1 and full:
            break
        _pop(j, mi, ri)
        mf[j, QUEUED] -= 1.0
        rf[i, RESV] = need
        mf[j, RES] += need
        out += _join(j, i, now, rf, ri, mf, mi, run)  # its first token, streamed now
    return out


@njit(cache=True, inline=INLINE)
def _schedule(
    j, now, agg, mixed, chunk, kv_cap, cap, every, accept, dec_reserve, rf, ri, mf, mi, run, batch, dec, pf
):  # type: ignore[no-untyped-def]  # noqa: E501
    """Engine instance ``j`` at a step boundary: admit, then a prefill forward or a decode jump;
    how many requests were done on admission."""
    mi[j, MIXN] = 0
    done = 0
    if agg:
        if _aggregated_prefill(j, now, mixed, chunk, kv_cap, cap, rf, ri, mf, mi, run, batch, dec, pf):
            return 0
    else:
        done = _admit_transferred(j, now, kv_cap, cap, dec_reserve, rf, ri, mf, mi, run)
    n_run = mi[j, NRUN]
    if n_run == 0:
        mi[j, MODE] = IDLE
        mf[j, BUSY] = INF
        if mi[j, HEAD] >= 0:  # a transfer still landing
            mf[j, BUSY] = max(rf[mi[j, HEAD], READY], now)
        return done
    k = mi[j, MINFIN] - mi[j, SIGMA]  # steps until the first running request finishes
    n = float(n_run)
    growth = n * accept
    if mf[j, CTX] + growth * k > kv_cap:  # stop where the cache overflows
        k = max(1, int((kv_cap - mf[j, CTX]) / growth))
    if mi[j, UNSEEN] > 0:  # stop where the scheduler next looks for the requests that wait unseen
        k = min(k, every - (mi[j, SIGMA] - mi[j, RECV]) % every)
    k = max(k, 1)
    a = _interp(n, dec[0], dec[1])
    b_ = _interp(n, dec[0], dec[2])
    mf[j, T0] = now
    mf[j, C0] = a + b_ * mf[j, CTX]
    mf[j, GR] = b_ * growth
    mi[j, KK] = k
    mi[j, MODE] = JUMP
    mf[j, BUSY] = now + k * mf[j, C0] + mf[j, GR] * k * (k - 1) * 0.5
    h = mi[j, HEAD]
    if not agg and h >= 0 and n_run < cap and rf[h, READY] > now:
        _wake(j, max(rf[h, READY], now), True, mf, mi)
    return done
