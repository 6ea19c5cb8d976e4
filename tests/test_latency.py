"""The engine-level latency simulation (dse.perf.latency): against queueing closed forms, Little's
law, the direction load moves it, seeds, and on deployments of the measured runs."""

from __future__ import annotations

import decimal
import math
import re
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dse.catalog import Catalog
from dse.errors import InputError
from dse.perf.benchmark_rows import deployment_of, latency_of, parse_row
from dse.perf.latency import simulate_latency
from dse.perf.latency_inputs import Lengths, Load, Trace, draw_requests
from dse.perf.latency_tables import ENGINE_RULES, EngineTables, tables_of, with_decode_pools
from dse.perf.params import LatencyParams, load_params


def _queue(service_s: float | None, per_token_s: float = 0.0, chunk: float = 1000.0) -> EngineTables:
    """One prefill server in front of a decode pool that never holds anyone up: the TTFT is the
    prefill queue's sojourn time. ``service_s``: every forward takes that long; else
    ``per_token_s`` per prompt token (a work-conserving server over ``chunk``-token forwards)."""
    tokens = np.array([1.0, 1e7])
    cost = np.array([service_s, service_s]) if service_s is not None else tokens * per_token_s
    n = np.array([1.0, 1e6])
    return EngineTables(
        agg=False, mixed=False, n_prefill=1, n_decode=1, dec_n=n, dec_a=np.full(2, 1e-9),
        dec_b=np.zeros(2), pf_tokens=tokens, pf_cost=cost, chunk=chunk, pf_chunk=chunk, kv_cap=1e15,
        run_cap=1 << 20, reserve=0.0, xfer_fixed=0.0, xfer_per_token=0.0, accept_mean=1.0,
        accept_var=0.0, gpus=1.0,
    )  # fmt: skip


def _md1_wait_cdf(t: float, lam: float, s: float) -> float:
    """P(W <= t) of the M/D/1 queue (Erlang 1909): ``(1 - rho) sum_{k <= t/s} (lam (k s - t))^k / k!
    e^{lam (t - k s)}``."""
    with decimal.localcontext() as ctx:  # the terms alternate and grow: 80 digits keep the sum exact
        ctx.prec = 80
        lam_, s_, t_ = (decimal.Decimal(repr(v)) for v in (lam, s, t))
        total = decimal.Decimal(0)
        for k in range(int(t / s) + 1):
            x = lam_ * (k * s_ - t_)
            total += x**k / math.factorial(k) * (-x).exp()
        return float((1 - lam_ * s_) * total)


def _md1_quantile(q: float, lam: float, s: float) -> float:
    lo, hi = 0.0, 100.0 * s
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _md1_wait_cdf(mid, lam, s) < q else (lo, mid)
    return 0.5 * (lo + hi)


def test_a_prefill_queue_with_fixed_forwards_is_the_md1_queue() -> None:
    s, rho = 0.1, 0.7
    lam = rho / s
    lat = simulate_latency(
        _queue(s), Load("poisson", rate=lam), Lengths(1000, 2, low=1.0), requests=60_000, seed=3
    )
    wait = lat.ttft_s - s
    assert wait.min() >= -1e-9
    assert float(np.mean(wait)) == pytest.approx(rho * s / (2 * (1 - rho)), rel=0.05)
    assert float(np.mean(wait <= 1e-9)) == pytest.approx(1 - rho, abs=0.01)  # P(no wait) = 1 - rho
    for q in (50, 90, 99):
        assert np.percentile(wait, q) == pytest.approx(_md1_quantile(q / 100, lam, s), rel=0.06, abs=0.004)


def test_a_prefill_queue_with_exponential_prompts_is_the_mm1_queue() -> None:
    """Prompts of exponential length on a server whose time is linear in tokens: the sojourn time
    of M/M/1, exponential with rate ``mu - lambda``."""
    rng = np.random.default_rng(5)
    n, mean_tokens, per_token, rho = 40_000, 2000.0, 5e-5, 0.6
    mu = 1.0 / (mean_tokens * per_token)
    lam = rho * mu
    isl = np.maximum(np.round(rng.exponential(mean_tokens, n)), 1.0)
    trace = Trace(np.cumsum(rng.exponential(1 / lam, n)), isl, np.full(n, 2.0))
    lat = simulate_latency(_queue(None, per_token, chunk=16.0), Load("trace", trace=trace), Lengths(1, 2))
    for q in (50, 90, 99):
        exact = -math.log(1 - q / 100) / (mu - lam)
        assert np.percentile(lat.ttft_s, q) == pytest.approx(exact, rel=0.06)


B200_ROW = {
    "hardware": "b200", "framework": "sglang", "model": "deepseek-v3", "precision": "fp8",
    "spec_method": "none", "disagg": "False", "isl": "1024", "osl": "1024", "conc": "64",
    "prefill_tp": "8", "prefill_ep": "8", "prefill_dp_attention": "False", "prefill_num_workers": "1",
    "num_prefill_gpu": "8", "decode_tp": "8", "decode_ep": "8", "decode_dp_attention": "False",
    "decode_num_workers": "1", "num_decode_gpu": "8",
}  # fmt: skip


DISAGG = {"disagg": "True", "num_prefill_gpu": "8", "num_decode_gpu": "16", "decode_num_workers": "2"}


@pytest.fixture(scope="module")
def b200(catalog: Catalog) -> tuple[EngineTables, Lengths]:
    params = load_params()
    bench = parse_row(B200_ROW, catalog)
    lengths = Lengths(1024, 1024)
    return tables_of(deployment_of([bench], catalog, params), params, ["sglang"], [lengths])[0], lengths


def test_a_closed_loop_that_breaks_little_s_law_is_not_steady(b200: tuple[EngineTables, Lengths]) -> None:
    """64 clients under a long tail of output lengths (sigma 2): ten requests each, their last ones
    end far apart, the slowest running on alone, and the window's rate times its mean end-to-end
    latency holds a third of the clients. It had "served 1.15 requests/s" and said nothing, where
    64,000 requests serve 1.67; it now says the window is not steady, with Little's law's figures.
    Without the tail the same window holds its clients within 3%, and says nothing."""
    tables, lengths = b200
    tail = simulate_latency(tables, Load("closed", concurrency=64), replace(lengths, tail_sigma=2.0), seed=0)
    held = tail.requests_per_s * float(np.mean(tail.e2el_s))
    assert held < 0.5 * 64
    assert tail.warning == (
        f"not steady: 64 clients, but the window serves {tail.requests_per_s:.3g} requests/s at "
        f"{float(np.mean(tail.e2el_s)):.3g} s end to end on average, {held:.3g} in flight by Little's "
        "law: its clients' last requests end far apart, the slowest running on alone, so its rate and "
        "percentiles are not a steady load's; simulate more requests (640 now)"
    )
    even = simulate_latency(tables, Load("closed", concurrency=64), lengths, seed=0)
    assert even.warning is None
    assert even.requests_per_s * float(np.mean(even.e2el_s)) == pytest.approx(64, rel=0.03)


def test_a_trace_of_lists_replays_as_arrays(b200: tuple[EngineTables, Lengths]) -> None:
    """A trace built from Python lists had passed its checks, then failed in the replay (``'list'
    object has no attribute 'astype'``); two requests a second apart, fewer than one in flight, had
    been "about 0 requests in flight"."""
    tables, lengths = b200
    listed = Trace([0.0, 1.0], [100.0, 100.0], [10.0, 10.0])
    assert isinstance(listed.arrival_s, np.ndarray) and listed.osl.dtype == float
    lat = simulate_latency(tables, Load("trace", trace=listed), lengths)
    assert len(lat.ttft_s) == 2 and np.isfinite(lat.e2el_s).all()
    assert lat.warning is not None and "about 0." in lat.warning and "about 0 " not in lat.warning, (
        lat.warning
    )
    with pytest.raises(InputError, match=r"Trace: isl = \['a'\]: must be numbers"):
        Trace([0.0], ["a"], [1.0])
    # nor a count or a seed below 0 (-5 requests had run the default, a seed of -1 raised numpy's error)
    for key, value in (("requests", -5), ("seed", -1), ("requests", 2.5), ("seed", True)):
        with pytest.raises(InputError, match=rf"simulate_latency: {key} = .*: must be a whole number >= 0"):
            simulate_latency(tables, Load("trace", trace=listed), lengths, **{key: value})


@pytest.mark.parametrize("frontend_s", [0.0, 0.08])
def test_little_law_holds_in_a_closed_loop(b200: tuple[EngineTables, Lengths], frontend_s: float) -> None:
    """Clients that send their next request as the last token reaches them: throughput = clients
    / end-to-end latency at the client, the front end's time included (a loop that resent at the
    engine's last token served 61 requests/s of one client whose answers took 95 ms)."""
    tables, lengths = b200
    tables = replace(tables, frontend_s=frontend_s)
    for clients, osl in ((1, 16), (8, 1024), (64, 1024)):
        lat = simulate_latency(
            tables,
            Load("closed", concurrency=clients),
            replace(lengths, osl=osl),
            requests=40 * clients,
            seed=1,
        )
        assert lat.requests_per_s * float(np.mean(lat.e2el_s)) == pytest.approx(clients, rel=0.05)


def test_little_law_holds_in_a_disaggregated_closed_loop(catalog: Catalog) -> None:
    """The same with the disaggregated hand-off, which the client waits for too."""
    params = load_params()
    bench = parse_row({**B200_ROW, **DISAGG}, catalog)
    lengths = Lengths(1024, 64)
    tables = tables_of(deployment_of([bench], catalog, params), params, ["sglang"], [lengths])[0]
    assert tables.frontend_s + tables.handoff_s > 0.1  # the shipped offsets weigh on 64-token answers
    for clients in (1, 16):
        load = Load("closed", concurrency=clients)
        lat = simulate_latency(tables, load, lengths, requests=30 * clients, seed=1)
        assert lat.requests_per_s * float(np.mean(lat.e2el_s)) == pytest.approx(clients, rel=0.05)


def test_more_load_never_lowers_the_ttft_p99(b200: tuple[EngineTables, Lengths]) -> None:
    tables, lengths = b200
    closed = [
        simulate_latency(tables, Load("closed", concurrency=c), lengths, seed=2).percentile("ttft", 99)
        for c in (4, 16, 64, 256)
    ]
    assert closed == sorted(closed) and closed[-1] > 2 * closed[0]
    opened = [
        simulate_latency(tables, Load("poisson", rate=r), lengths, requests=3000, seed=2).percentile(
            "ttft", 99
        )
        for r in (1.0, 4.0, 8.0)
    ]
    assert opened == sorted(opened) and opened[-1] > opened[0]


def test_attention_dp_balance_holds_light_load_for_its_timer(b200: tuple[EngineTables, Lengths]) -> None:
    """The exception to more load, later first tokens: TensorRT-LLM's attention-DP balance lets
    context requests in once every rank has one or its timer runs out, so at light load a request
    waits out the timer, and more load fills the ranks sooner (the p99 falls from 4 to 8
    requests/s). Without the balance the same load is a monotone rise."""
    tables, lengths = b200
    balanced = replace(tables, balance_ranks=8.0, recv_every=60)

    def p99(t: EngineTables, rate: float) -> float:
        lat = simulate_latency(t, Load("poisson", rate=rate), lengths, requests=3000, seed=2)
        return lat.percentile("ttft", 99)

    assert p99(balanced, 1.0) > 5 * p99(tables, 1.0)  # the timer, against an idle engine's prefill
    assert p99(balanced, 8.0) < p99(balanced, 4.0)
    assert p99(tables, 8.0) > p99(tables, 4.0)


def test_the_same_seed_gives_the_same_percentiles(b200: tuple[EngineTables, Lengths]) -> None:
    tables, lengths = b200
    runs = [
        simulate_latency(tables, Load("bursty", rate=4.0, burstiness=0.5), lengths, requests=800, seed=s)
        for s in (7, 7, 8)
    ]
    assert runs[0].summary() == runs[1].summary()
    assert runs[0].summary() != runs[2].summary()


def test_bursty_arrivals_wait_longer_than_poisson_at_the_same_rate(
    b200: tuple[EngineTables, Lengths],
) -> None:
    tables, lengths = b200
    smooth = simulate_latency(tables, Load("poisson", rate=6.0), lengths, requests=3000, seed=4)
    bursty = simulate_latency(
        tables, Load("bursty", rate=6.0, burstiness=0.2), lengths, requests=3000, seed=4
    )
    assert bursty.percentile("ttft", 99) > 1.5 * smooth.percentile("ttft", 99)


def test_aggregated_prefill_stretches_the_decode_of_the_running_requests(
    b200: tuple[EngineTables, Lengths],
) -> None:
    """SGLang runs a prefill forward between decode steps: the more prompts arrive per second,
    the longer the running requests' TPOT tail; without arrivals (one client) it is the step."""
    tables, lengths = b200
    alone = simulate_latency(tables, Load("closed", concurrency=1), lengths, requests=20, seed=1)
    busy = simulate_latency(tables, Load("closed", concurrency=128), lengths, seed=1)
    step_ms = (tables.dec_a[0] + tables.dec_b[0] * lengths.mean_isl) * 1e3
    assert alone.percentile("tpot", 50) * 1e3 == pytest.approx(step_ms, rel=0.15)
    assert busy.percentile("tpot", 99) > busy.percentile("tpot", 50) > alone.percentile("tpot", 50)


def test_a_cache_too_small_for_every_output_preempts_and_still_serves_all(
    b200: tuple[EngineTables, Lengths],
) -> None:
    tables, lengths = b200
    small = replace(tables, kv_cap=40 * (lengths.isl + 0.3 * lengths.osl), reserve=0.0)
    lat = simulate_latency(small, Load("closed", concurrency=64), lengths, seed=1)
    assert lat.preempted > 0 and lat.warning is None
    assert np.isfinite(lat.e2el_s).all()
    roomy = simulate_latency(tables, Load("closed", concurrency=64), lengths, seed=1)
    assert roomy.preempted == 0
    assert lat.percentile("e2el", 50) > roomy.percentile("e2el", 50)


def test_an_overloaded_open_loop_warns_with_the_figures(b200: tuple[EngineTables, Lengths]) -> None:
    tables, lengths = b200
    lat = simulate_latency(tables, Load("poisson", rate=200.0), lengths, requests=2000, seed=1)
    assert lat.warning is not None and lat.warning.startswith("overloaded: ")
    assert " s (first quarter" in lat.warning
    calm = simulate_latency(tables, Load("poisson", rate=1.0), lengths, requests=2000, seed=1)
    assert calm.warning is None


@pytest.mark.parametrize("kind", ["poisson", "bursty"])
def test_an_open_loop_beyond_capacity_is_said_overloaded_with_what_arrives_and_what_is_served(
    b200: tuple[EngineTables, Lengths], kind: str
) -> None:
    """20 requests/s on one B200 instance that serves about 12: the queue grows without bound, so
    the window's percentiles are the window's (TTFT p99 910 s in its 28,000 requests, 16,000 s in
    200,000 at 1,000 requests/s). The warning had said only that the load exceeds what the
    deployment serves "or the window is too short", with neither rate, and nothing a program
    could read. It now says overloaded with both; ``overloaded`` and ``offered_requests_per_s``
    carry them. A load the deployment serves is not overloaded, nor a closed loop, whose clients
    wait for their answers whatever their number."""
    tables, lengths = b200
    lat = simulate_latency(tables, Load(kind, rate=20.0, burstiness=0.5), lengths, seed=1)
    assert lat.overloaded
    assert lat.offered_requests_per_s == pytest.approx(20.0, rel=0.05)
    assert 10.0 < lat.requests_per_s < 0.7 * lat.offered_requests_per_s
    assert lat.warning is not None
    assert lat.warning.startswith(
        f"overloaded: {lat.offered_requests_per_s:.3g} requests/s arrive and the deployment serves "
        f"{lat.requests_per_s:.3g}; the TTFT median grew from "
    )
    assert lat.warning.endswith(
        "so every percentile here grows with a longer window and describes no steady state"
    )
    served = simulate_latency(tables, Load(kind, rate=8.0, burstiness=0.5), lengths, seed=1)
    assert not served.overloaded and served.warning is None
    assert served.offered_requests_per_s == pytest.approx(8.0, rel=0.05)
    # a window so overloaded that nothing arriving in its middle half finishes there still says so
    flooded = simulate_latency(
        tables, Load(kind, rate=1000.0, burstiness=0.5), lengths, requests=20_000, seed=1
    )
    assert flooded.overloaded and flooded.offered_requests_per_s > 500, flooded.warning
    # a burst of a few requests is no load: too short a window to call overloaded (three had been
    # "150 requests/s arrive", from 10 ms between them); the steady-state warning says so
    three = Trace(np.array([0.0, 0.01, 0.02]), np.full(3, 8000.0), np.full(3, 100.0))
    burst = simulate_latency(tables, Load("trace", trace=three), lengths)
    assert not burst.overloaded and burst.warning is not None and burst.warning.startswith("not steady"), (
        burst
    )
    # nor do their answers of 1,000 tokens fill the cache: a replay holds at most its own requests'
    # KV (they had held "825% of the cache" by Little's law at the rate of their 10 ms gaps)
    answers = Trace(np.array([0.0, 0.01, 0.02]), np.full(3, 8000.0), np.full(3, 1000.0))
    burst = simulate_latency(tables, Load("trace", trace=answers), lengths)
    cache = tables.kv_cap * tables.n_decode
    assert not burst.overloaded and burst.kv_held_share <= 27_000 / cache < 0.05, burst
    assert burst.warning is not None and burst.warning.startswith("not steady"), burst
    # what it serves is the deployment's capacity, whatever arrives (tests/test_cli_simulate.py)
    assert flooded.requests_per_s == pytest.approx(lat.requests_per_s, rel=0.1)
    closed = simulate_latency(tables, Load("closed", concurrency=2048), lengths, seed=1)
    assert not closed.overloaded and math.isnan(closed.offered_requests_per_s)
    # two requests a second apart, none finished inside the second: it had read 0 requests/s arriving
    pair = Trace(np.array([0.0, 1.0]), np.array([20_000.0, 1000.0]), np.array([100.0, 100.0]))
    short = simulate_latency(tables, Load("trace", trace=pair), lengths)
    assert short.offered_requests_per_s == 2.0 and not short.overloaded


@pytest.mark.parametrize("seed", [0, 2, 5])
def test_an_open_loops_window_counts_the_requests_in_flight_by_their_mean_time(
    b200: tuple[EngineTables, Lengths], seed: int
) -> None:
    """Little's law: the requests in flight are the arrival rate times the mean time in the system.
    The window's rule had taken the median end-to-end latency, which a long tail leaves at a third
    of the mean (log-normal lengths of sigma 1.5 at 6 requests/s on one B200 instance), so 2,000
    requests passed for ten times the ~220 in flight and said nothing. The default window now
    holds ten times them, and a window asked for that does not says so."""
    tables, _ = b200
    tail = Lengths(1024, 1024, tail_sigma=1.5)
    load = Load("poisson", rate=6.0)
    lat = simulate_latency(tables, load, tail, seed=seed)
    n = len(lat.e2el_s)
    span = float(np.ptp(_arrivals(load, tail, n, seed)))
    in_flight = n / span * float(np.mean(lat.e2el_s))
    assert n >= 10 * in_flight, (n, in_flight)
    assert lat.warning is None or "in flight at once" not in lat.warning, lat.warning  # (its KV's is below)
    short = simulate_latency(tables, load, tail, requests=2000, seed=seed)
    assert (
        short.warning is not None
        and "requests are in flight at once and the window has 2000" in short.warning
    )


def _arrivals(load: Load, lengths: Lengths, n: int, seed: int) -> np.ndarray:
    """The arrival times of a window of ``n`` requests, as the simulation draws them."""
    return draw_requests(load, lengths, n, np.random.default_rng(seed))[0]


@pytest.mark.parametrize(
    "lengths",
    [
        Lengths(1024, 1024, limit=163_840),
        Lengths(1024, 1024, tail_sigma=2.0, limit=163_840),
        Lengths(1024, 1024, tail_sigma=3.0, limit=163_840),
        Lengths(3000, 800, returning_share=0.4, prefix=12_000, suffix=400,
                output_mix=((0.7, 300.0), (0.3, 2000.0)), limit=163_840),
    ],
)  # fmt: skip
def test_the_kv_a_request_holds_is_its_lengths_distributions(lengths: Lengths) -> None:
    """``Lengths.mean_kv_steps``, E[(context + output / 2) x output], from the distributions, is
    the mean of a draw of two million requests, within 3% (a tail the context caps often, both
    lengths long, is overestimated: sigma 3 in 20,000 tokens by a third)."""
    _, isl, osl, cached = draw_requests(
        Load("closed", concurrency=1), lengths, 2_000_000, np.random.default_rng(1)
    )
    drawn = float(np.mean((cached + isl + 0.5 * osl) * osl))
    assert lengths.mean_kv_steps == pytest.approx(drawn, rel=0.03)
    assert lengths.mean_square_osl == pytest.approx(float(np.mean(osl * osl)), rel=0.04)


def test_an_open_loop_whose_lengths_hold_more_kv_than_the_cache_is_overloaded(
    b200: tuple[EngineTables, Lengths],
) -> None:
    """Log-normal lengths of sigma 2 at 6 requests/s on one B200 instance: its 2,500-request window
    looked steady (TTFT p99 under 1 s, no warning), yet by Little's law the load holds about 1.8
    times the KV cache at once, and 40,000 requests show the queue growing without bound. The rare
    longest requests, which hold most of that KV, are too few and too long for the window. It is
    said overloaded with the figures; at 80% of the cache under a long tail, not steady; uniform
    lengths at 88% of it hold steady and say nothing."""
    tables, _ = b200
    cache = tables.kv_cap * tables.n_decode
    tail = Lengths(1024, 1024, tail_sigma=2.0, limit=163_840)
    lat = simulate_latency(tables, Load("poisson", rate=6.0), tail, seed=0)
    assert lat.percentile("ttft", 99) < 1.0  # the window alone looks calm
    assert lat.overloaded and lat.warning is not None
    assert lat.warning.startswith("overloaded: at 6 requests/s these lengths hold ")
    assert f"of the {cache:.3g} the deployment's KV cache holds" in lat.warning
    longer = simulate_latency(tables, Load("poisson", rate=6.0), tail, requests=40_000, seed=0)
    assert longer.percentile("ttft", 50) > 100.0 and longer.overloaded  # what it had not shown
    near = simulate_latency(tables, Load("poisson", rate=6.0), replace(tail, tail_sigma=1.5), seed=0)
    assert not near.overloaded and near.warning is not None
    assert near.warning.startswith("not steady: at 6 requests/s these lengths hold ")
    uniform = simulate_latency(tables, Load("poisson", rate=11.0), Lengths(1024, 1024), seed=0)
    assert uniform.warning is None and not uniform.overloaded


def test_a_returning_turn_prefills_its_suffix_and_decodes_over_its_prefix(
    b200: tuple[EngineTables, Lengths],
) -> None:
    """A returning turn prefills only its 500 new tokens, as a fresh 500-token prompt does, but
    holds its 20,000 cached tokens in the cache, which every decode step reads."""
    tables, _ = b200
    fresh = Lengths(500, 1024)
    back = Lengths(500, 1024, returning_share=1.0, prefix=20_000, suffix=500)
    load = Load("poisson", rate=1.0)
    a = simulate_latency(tables, load, fresh, requests=400, seed=1)
    b = simulate_latency(tables, load, back, requests=400, seed=1)
    assert b.percentile("ttft", 50) == pytest.approx(a.percentile("ttft", 50), rel=0.1)
    assert b.percentile("tpot", 50) > 1.1 * a.percentile("tpot", 50)
    # a prefix resting in DRAM or storage comes back first: the TTFT carries its reload, in order
    slow = replace(back, reload_s=0.5)
    c = simulate_latency(tables, load, slow, requests=400, seed=1)
    assert c.percentile("ttft", 50) == pytest.approx(b.percentile("ttft", 50) + 0.5, rel=0.1)
    assert (c.ttft_s >= 0.5).all() and np.isfinite(c.e2el_s).all()


def test_a_dropped_prefix_is_prefilled_again_and_reloads_nothing(
    b200: tuple[EngineTables, Lengths],
) -> None:
    """A returning turn whose KV was dropped prefills its 8,000-token prefix with its suffix: its
    TTFT is an 8,450-token prompt's, not its suffix's, and it waits for no reload (here 0.5 s).
    The share drawn is the share asked for. Until 2026-12-07 the engine-level check prefilled
    only its suffix (a dropped 60,000-token prefix's recompute took no forward from the queue)."""
    tables, _ = b200
    load = Load("poisson", rate=0.5)
    back = Lengths(500, 1024, returning_share=1.0, prefix=8_000, suffix=500, reload_s=0.5)
    dropped = replace(back, recompute_share=1.0)
    whole = Lengths(8_450, 1024, low=1.0)  # the prefix and a mean suffix, as a fresh prompt
    kept, again, fresh, suffix = (
        simulate_latency(tables, load, x, requests=400, seed=1).percentile("ttft", 50)
        for x in (back, dropped, whole, replace(back, reload_s=0.0))
    )
    assert again == pytest.approx(fresh, rel=0.05)
    assert again > 2.0 * suffix and again < kept  # a longer prefill, and no 0.5-s reload
    assert dropped.mean_isl == pytest.approx(back.mean_isl + 8_000)
    assert dropped.mean_context == pytest.approx(back.mean_context)
    half = replace(back, recompute_share=0.25)
    _, isl, _, cached = draw_requests(load, half, 20_000, np.random.default_rng(3))
    assert (cached == 0).mean() == pytest.approx(0.25, abs=0.01)
    assert (isl[cached == 0] > 8_000).all() and (isl[cached > 0] <= 500).all()
    with pytest.raises(InputError, match="recompute_share"):
        replace(back, recompute_share=1.5)


def test_the_engine_check_queues_a_design_sized_to_its_last_decode_slot(catalog: Catalog) -> None:
    """A placed design (a real HiGHS solve) passes the engine-level check; the same design with
    its decode instances capped below the batch the traffic needs queues for slots under
    Poisson arrivals: its TTFT at the percentile grows past the target, which makes a study's
    trial infeasible (dse.evaluation takes the worse of this and the fluid's)."""
    from dse.evaluation import design_of
    from dse.perf.params import load_params
    from dse.placement.plan import place
    from dse.placement.request import PlacementRequest
    from dse.sim.engine_latency import design_latency
    from dse.workload import Slo, Workload

    w = Workload(requests_per_s=20.0, input_tokens=4000.0, output_tokens=1000.0)
    req = PlacementRequest(model="deepseek-v3", hardware=("b200",), workload=w, slo=Slo(2.0, 0.05, 90.0))
    report = place(req, catalog=catalog)
    assert report.best is not None
    design = design_of(req, report.best)
    params = load_params()
    ok = design_latency(design, catalog, params)
    assert ok is not None and ok.warning is None
    assert ok.percentile("ttft", 90) < 2.0
    in_flight = w.requests_per_s * w.output_tokens * ok.percentile("tpot", 50)  # Little's law
    decode = [p for p in design.pools if p.role in ("decode", "mixed")]
    slots = 0.8 * in_flight / sum(p.instances for p in decode)
    tight = replace(
        design, pools=tuple(replace(p, decode_batch=slots) if p in decode else p for p in design.pools)
    )
    late = design_latency(tight, catalog, params)
    assert late is not None and late.percentile("ttft", 90) > 2.0


def _engine(agg: bool, *, n_prefill: int = 1, n_decode: int = 1, kv_cap: float = 1e15, step_s: float = 0.01,
            prefill_s: float = 0.1, mixed: bool = False, chunk: float = 1e6) -> EngineTables:  # fmt: skip
    """Constant costs: every decode step ``step_s``, every prefill forward ``prefill_s``."""
    two = np.array([1.0, 1e7])
    return EngineTables(
        agg=agg, mixed=mixed, n_prefill=n_prefill, n_decode=n_decode, dec_n=np.array([1.0, 1e6]),
        dec_a=np.full(2, step_s), dec_b=np.zeros(2), pf_tokens=two, pf_cost=np.full(2, prefill_s),
        chunk=chunk, pf_chunk=chunk, kv_cap=kv_cap, run_cap=1 << 20, reserve=0.0, xfer_fixed=0.0,
        xfer_per_token=0.0, accept_mean=1.0, accept_var=0.0, gpus=1.0,
    )  # fmt: skip


def _trace(arrivals: list[float], isl: float, osl: float) -> Load:
    n = len(arrivals)
    return Load("trace", trace=Trace(np.array(arrivals), np.full(n, isl), np.full(n, osl)))


def test_every_request_leaves_at_the_step_its_output_ends_whatever_the_others_do() -> None:
    """Decode instances whose every step takes 10 ms, hundreds of requests running at once with
    long-tailed outputs, arriving and leaving at every step: each request's time from its first
    token to its last is its steps x 10 ms exactly, neither earlier nor later (the running requests
    are a heap by the step they finish at; a mis-ordered heap lets some run on). And a closed loop
    on the same instances: every client's requests, one after another, all served."""
    tables = _engine(False, n_decode=2, step_s=0.01, prefill_s=1e-4)
    open_loop = simulate_latency(
        tables, Load("poisson", rate=400.0), Lengths(10, 100, tail_sigma=1.0), requests=4000, seed=4
    )
    steps = np.round((open_loop.e2el_s - open_loop.ttft_s) / 0.01)
    assert open_loop.output_tokens.max() > 1000 and open_loop.output_tokens.min() < 20  # a long tail
    np.testing.assert_allclose(steps, open_loop.output_tokens - 1, rtol=0, atol=1e-6)
    np.testing.assert_allclose(open_loop.tpot_s[open_loop.output_tokens > 1], 0.01, rtol=1e-9)
    closed = simulate_latency(tables, Load("closed", concurrency=300), Lengths(10, 100), requests=3000)
    assert np.isfinite(closed.e2el_s).all() and closed.preempted == 0
    np.testing.assert_allclose(closed.tpot_s[closed.output_tokens > 1], 0.01, rtol=1e-9)


def test_the_heap_of_running_requests_gives_them_back_by_the_step_they_finish_at() -> None:
    """The engine kernel's heap on its own: requests pushed as a join pushes them, some taken out
    from the middle as a preemption takes them, the rest come off the top in the order of the step
    they finish at, whatever the order they came in."""
    from dse.perf.engine_kernel import FIN, NRUN, _remove_at, _sift_up

    rng = np.random.default_rng(6)
    for _ in range(20):
        n = int(rng.integers(1, 200))
        ri = np.zeros((n, 4), np.int64)
        ri[:, FIN] = rng.integers(0, 50, n)  # ties too
        run, mi = np.full((1, n), -1, np.int64), np.zeros((1, 12), np.int64)
        for i in rng.permutation(n):
            run[0, mi[0, NRUN]] = i
            mi[0, NRUN] += 1
            _sift_up(0, mi[0, NRUN] - 1, ri, run)
        gone = set()
        for _ in range(n // 3):  # preempted: from anywhere in the heap
            b = int(rng.integers(0, mi[0, NRUN]))
            gone.add(int(run[0, b]))
            _remove_at(0, b, mi, ri, run)
        order = []
        while mi[0, NRUN] > 0:
            order.append(int(run[0, 0]))
            _remove_at(0, 0, mi, ri, run)
        assert sorted(order) == sorted(set(range(n)) - gone)
        assert list(ri[order, FIN]) == sorted(ri[order, FIN])


def test_decode_pools_each_step_at_their_own_table_and_move_kv_over_their_own_link() -> None:
    """One prefill instance handing off to two decode pools (:func:`with_decode_pools`): one
    instance stepping every 10 ms with the KV landing at once, two stepping every 20 ms whose KV
    takes 0.5 s to land. Every request decodes at its own pool's step, to the bit, and reaches its
    first token after its own pool's transfer; both pools serve."""
    fast = _engine(False, n_decode=1, step_s=0.01, prefill_s=1e-3)
    slow = replace(_engine(False, n_decode=2, step_s=0.02, prefill_s=1e-3), xfer_fixed=0.5)
    lat = simulate_latency(
        with_decode_pools([fast, slow], gpus=4.0), Load("poisson", rate=20.0), Lengths(10, 100), requests=2000
    )
    assert lat.pool is not None and set(np.unique(lat.pool)) == {0, 1}
    np.testing.assert_allclose(lat.tpot_s[lat.pool == 0], 0.01, rtol=1e-9)
    np.testing.assert_allclose(lat.tpot_s[lat.pool == 1], 0.02, rtol=1e-9)
    assert lat.ttft_s[lat.pool == 1].min() >= 0.5 > lat.ttft_s[lat.pool == 0].max()
    assert simulate_latency(fast, Load("poisson", rate=5.0), Lengths(10, 100), requests=100).pool is None


def test_an_idle_instance_takes_the_next_request() -> None:
    """Two prefill instances (or two aggregated ones): a request arriving while the first is busy
    goes to the idle one, not behind the forward in progress."""
    for tables in (_engine(False, n_prefill=2, chunk=10), _engine(True, n_decode=2, chunk=10)):
        lat = simulate_latency(tables, _trace([0.0, 0.01], 10, 2), Lengths(1, 2))
        assert lat.ttft_s == pytest.approx([0.1, 0.1])


def test_a_scheduler_looking_every_n_steps_sees_a_request_at_its_next_look() -> None:
    """SGLang's --scheduler-recv-interval 30: after the first prompt's forward (0.05 s) the
    instance decodes in 0.02 s steps and looks for new requests 30 steps later (0.65 s); a request
    arriving at 0.1 s waits for that look, then its own forward (to 0.7 s). A forward is followed
    by a look at once (one arriving at 0.7 s goes straight in), and the next look is 30 steps
    after the last forward (one arriving at 0.8 s waits for 0.75 + 0.6 s). One arriving at an
    idle instance is seen at once."""
    tables = replace(_engine(True, step_s=0.02, prefill_s=0.05), recv_every=30)
    lat = simulate_latency(tables, _trace([0.0, 0.1, 0.7, 0.8], 10, 200), Lengths(10, 200))
    assert lat.ttft_s == pytest.approx([0.05, 0.7 - 0.1, 0.05, 0.75 + 0.6 + 0.05 - 0.8])
    alone = simulate_latency(tables, _trace([0.0, 10.0], 10, 2), Lengths(10, 2))
    assert alone.ttft_s == pytest.approx([0.05, 0.05])


def test_a_prefill_server_that_hand_shakes_first_batches_a_prompt_a_forward_late() -> None:
    """SGLang's disaggregated prefill server (``PrefillBootstrapQueue``): a prompt received during a
    forward is admitted at the loop iteration after the next, so it misses the forward that
    follows when another prompt fills it. Two prompts per forward of 0.1 s; three arrive at an idle
    server at 0 (two go in at once), a fourth at 0.05. Without the hand-shake the fourth joins the
    third in the forward at 0.1; with it, it runs alone at 0.2. A server that has nothing else to
    batch takes a late prompt at once."""
    tables = _engine(False, chunk=20)
    arrivals = [0.0, 0.0, 0.0, 0.05]
    plain = simulate_latency(tables, _trace(arrivals, 10, 2), Lengths(10, 2))
    assert plain.ttft_s == pytest.approx([0.1, 0.1, 0.2, 0.15])
    shaking = simulate_latency(replace(tables, bootstrap=True), _trace(arrivals, 10, 2), Lengths(10, 2))
    assert shaking.ttft_s == pytest.approx([0.1, 0.1, 0.2, 0.25])
    alone = simulate_latency(replace(tables, bootstrap=True), _trace([0.0, 0.05], 10, 2), Lengths(10, 2))
    assert alone.ttft_s == pytest.approx([0.1, 0.15])  # its forward starts when the first ends


def test_a_prompt_takes_its_attention_dp_ranks_share_of_a_prefill_forward() -> None:
    """Under attention data parallelism a prompt runs on one rank, whose budget is the instance's
    over the ranks (SGLang divides ``--chunked-prefill-size`` by the DP size). Two ranks of 10
    tokens in a forward of 20 (0.1 s): two 20-token prompts each take 10 tokens of two forwards,
    where one rank's worth of budget would run them one after the other; a 30-token prompt alone
    takes three forwards, not two."""
    tables = _engine(False, chunk=20)
    two = _trace([0.0, 0.0], 20, 2)
    assert simulate_latency(tables, two, Lengths(20, 2)).ttft_s == pytest.approx([0.1, 0.2])
    ranks = replace(tables, pf_ranks=2.0)
    assert simulate_latency(ranks, two, Lengths(20, 2)).ttft_s == pytest.approx([0.2, 0.2])
    long = _trace([0.0], 30, 2)
    assert simulate_latency(tables, long, Lengths(30, 2)).ttft_s == pytest.approx([0.2])
    assert simulate_latency(ranks, long, Lengths(30, 2)).ttft_s == pytest.approx([0.3])


def test_a_prefill_pools_lane_is_its_chunk_over_its_attention_dp_ranks(catalog: Catalog) -> None:
    """Read from a disaggregated row: a DP-attention prefill pool of 8 GPUs takes an eighth of its
    chunk per prompt; a tensor-parallel one the whole chunk; an aggregated instance no lane."""
    params = load_params()
    for dpa, ranks in (("True", 8.0), ("False", 1.0)):
        row = parse_row({**B200_ROW, **DISAGG, "prefill_dp_attention": dpa}, catalog)
        t = tables_of(deployment_of([row], catalog, params), params, [row.engine], [Lengths(1000, 100)])[0]
        assert t.pf_lane == pytest.approx(t.pf_chunk / ranks)
    agg = parse_row(B200_ROW, catalog)
    t = tables_of(deployment_of([agg], catalog, params), params, [agg.engine], [Lengths(1000, 100)])[0]
    assert math.isinf(t.pf_lane)


def test_a_placed_prefill_budget_keeps_each_ranks_share() -> None:
    """The engine check runs a prefill pool at the placement's budget (the fresh prompts its
    forward batches); under attention data parallelism of 8 ranks a prompt keeps an eighth of it,
    without it the whole."""
    from dse.sim.engine_latency import placed_chunk

    ranks = replace(_engine(False, chunk=8192), pf_ranks=8.0)
    placed = placed_chunk(ranks, 4 * 3000.0)
    assert (placed.pf_chunk, placed.chunk, placed.pf_lane) == (12000.0, 12000.0, 1500.0)
    whole = _engine(False, chunk=8192)  # tensor-parallel attention: one rank
    assert placed_chunk(whole, 12000.0).pf_lane == 12000.0
    assert math.isinf(placed_chunk(_engine(True, chunk=8192), 12000.0).pf_lane)  # no prefill pool


def test_a_decode_server_that_reserves_fixed_tokens_admits_fewer() -> None:
    """SGLang's disaggregated decode server keeps 512 tokens past each prompt it holds
    (``SGLANG_NUM_RESERVED_DECODE_TOKENS``), not a share of the output. Two 100-token prompts, one
    forward, a cache of 300 tokens: reserving nothing past the prompts both decode at once; with 150
    tokens each the second waits for the first's 100 steps of 0.01 s."""
    tables = _engine(False, kv_cap=300.0)
    both = _trace([0.0, 0.0], 100, 101)
    assert simulate_latency(tables, both, Lengths(1, 2)).ttft_s == pytest.approx([0.1, 0.1])
    reserving = replace(tables, dec_reserve=150.0)
    assert simulate_latency(reserving, both, Lengths(1, 2)).ttft_s == pytest.approx([0.1, 1.1])
    assert ENGINE_RULES["sglang"].decode_reserve_tokens == 512.0
    assert all(r.decode_reserve_tokens == 0.0 for e, r in ENGINE_RULES.items() if e != "sglang")


def test_an_sglang_attention_dp_prefill_pool_takes_the_fitted_slowdown(catalog: Catalog) -> None:
    """The fitted slowdown multiplies every forward of an SGLang prefill pool under attention data
    parallelism up to the 8,192 tokens its runs' forwards took, and adds what that one's adds to
    a larger forward; it slows nothing else: not its tensor-parallel pool, not TensorRT-LLM's
    attention-DP pool, not an aggregated instance, not the decode steps."""
    from dse.perf.latency_tables import SLOWED_UP_TO_TOKENS

    shipped = load_params()
    none, slow = (
        replace(shipped, latency=replace(shipped.latency, dp_prefill_slowdown=f)) for f in (1.0, 1.5)
    )

    def both(row: dict[str, str]) -> tuple[EngineTables, EngineTables]:
        bench = parse_row(row, catalog)
        d = deployment_of([bench], catalog, shipped)
        before, after = (tables_of(d, p, [bench.engine], [Lengths(1000, 100)])[0] for p in (none, slow))
        return before, after

    sglang_dp = {**B200_ROW, **DISAGG, "prefill_dp_attention": "True"}
    before, after = both(sglang_dp)
    assert after.dp_prefill_slowed and after.pf_ranks > 1.0
    up_to = after.pf_tokens <= SLOWED_UP_TO_TOKENS
    assert SLOWED_UP_TO_TOKENS in after.pf_tokens and not up_to.all()  # the table reaches past it
    np.testing.assert_allclose(after.pf_cost[up_to], 1.5 * before.pf_cost[up_to])
    at_budget = before.pf_cost[after.pf_tokens == SLOWED_UP_TO_TOKENS]
    np.testing.assert_allclose(after.pf_cost[~up_to], before.pf_cost[~up_to] + 0.5 * at_budget)
    np.testing.assert_array_equal(after.dec_a, before.dec_a)
    for row in (
        {**B200_ROW, **DISAGG},  # tensor-parallel prefill pool
        {**sglang_dp, "framework": "trt"},
        B200_ROW,  # aggregated
    ):
        before, after = both(row)
        assert not after.dp_prefill_slowed
        np.testing.assert_array_equal(after.pf_cost, before.pf_cost)
    assert [e for e, rules in ENGINE_RULES.items() if rules.dp_prefill_slowed] == ["sglang"]


def test_the_aggregated_prefill_factor_scales_aggregated_prefill_forwards_alone(catalog: Catalog) -> None:
    """The fitted aggregated prefill factor multiplies an aggregated instance's prefill forwards,
    under every engine, and nothing else: not a disaggregated prefill pool's, not the decode steps;
    and a shorter prefill leaves the aggregated instance's decode steps less stalled."""
    shipped = load_params()
    one, fast = (replace(shipped, latency=replace(shipped.latency, agg_prefill_factor=f)) for f in (1.0, 0.6))

    def both(row: dict[str, str]) -> tuple[EngineTables, EngineTables]:
        bench = parse_row(row, catalog)
        d = deployment_of([bench], catalog, shipped)
        before, after = (tables_of(d, p, [bench.engine], [Lengths(1000, 100)])[0] for p in (one, fast))
        return before, after

    for row in (B200_ROW, {**B200_ROW, "framework": "trt"}):
        before, after = both(row)
        assert after.agg
        np.testing.assert_allclose(after.pf_cost, 0.6 * before.pf_cost)
        np.testing.assert_array_equal(after.dec_a, before.dec_a)
    before, after = both({**B200_ROW, **DISAGG})
    np.testing.assert_array_equal(after.pf_cost, before.pf_cost)
    bench = parse_row({**B200_ROW, "conc": "16"}, catalog)
    tpot = [latency_of(bench, catalog, p, seed=0).percentile("tpot", 50.0) for p in (one, fast)]
    assert tpot[1] < tpot[0]


def test_the_factor_fit_finds_the_factors_the_runs_need() -> None:
    """Runs whose replays scale with the slowdown (the slowed ones) and runs whose replays scale
    with the aggregated prefill factor (TTFT and TPOT), measured at 1.3 times the first's forwards,
    0.7 times the second's and a 50 ms front end: the fit returns both factors and the front end,
    and runs at other factors of the grids pull it there. Replays no factor moves leave both at
    their tie-breaks: the smallest slowdown, the aggregated factor 1."""
    from dse.calibration.latency import AGG_PREFILL_GRID, COLD_GRID, SLOWDOWN_GRID, Replays, fit_factors

    rng = np.random.default_rng(1)
    rows = 24
    slowed = np.arange(rows) < rows // 2
    agg = ~slowed
    base = rng.uniform(0.2, 2.0, rows)
    group = np.array(["sglang/nvidia/random"] * rows)

    def at(f: float, a: float, moved: bool = True) -> Replays:
        scale = np.where(slowed, f, 1.0) * np.where(agg, a, 1.0) if moved else np.ones(rows)
        t = base * scale
        ttft = np.repeat(np.stack([t, 2.0 * t], axis=1)[:, :, None], len(COLD_GRID), axis=2)
        tpot = 0.02 * np.where(agg & moved, 0.5 + 0.5 * a, 1.0)
        return Replays(ttft, np.repeat(tpot[:, None], 2, axis=1), group)

    reps = {(f, a): at(f, a) for f in SLOWDOWN_GRID for a in AGG_PREFILL_GRID}
    meas = np.full((rows, 4), np.nan)
    for f, a in ((1.3, 0.7), (1.6, 0.9)):
        truth = at(f, a)
        meas[:, :2] = truth.ttft[:, :, 0] + 0.05
        meas[:, 2:] = truth.tpot
        fitted = fit_factors(reps, meas, np.zeros(rows, dtype=bool))
        assert (fitted.dp_prefill_slowdown, fitted.agg_prefill_factor, fitted.frontend_s) == pytest.approx(
            (f, a, 0.05)
        )
    still = {k: at(*k, moved=False) for k in reps}
    fitted = fit_factors(still, meas, np.zeros(rows, dtype=bool))
    assert (fitted.dp_prefill_slowdown, fitted.agg_prefill_factor) == (1.0, 1.0)


def test_the_offset_fit_is_the_grid_searched_one_pair_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The offsets, fitted over the whole grid at once, are the pair a loop over it finds: the
    least mean of the TTFT p50 and p99 central errors, the first of equal ones; runs missing a
    value count in the other percentile only. (On every third value of the grid, to keep the
    loop short.)"""
    import dse.calibration.latency as fit
    from dse.calibration.latency import abs_errors, central_mean, fit_offsets, with_offsets

    monkeypatch.setattr(fit, "OFFSET_GRID", fit.OFFSET_GRID[::3])
    grid = fit.OFFSET_GRID
    rng = np.random.default_rng(2)
    for k in range(3):
        rows = 30
        sim = np.c_[rng.uniform(0.05, 3.0, (rows, 2)), np.full((rows, 2), 0.02)]
        disagg = rng.random(rows) < 0.5
        meas = sim * rng.uniform(0.7, 1.6, sim.shape) + rng.uniform(0.0, 0.3, sim.shape)
        meas[rng.random(rows) < 0.1, k % 2] = np.nan
        best = (np.inf, 0.0, 0.0)
        for f in grid:
            for h in grid:
                e = abs_errors(with_offsets(sim, disagg, f, h)[:, :2], meas[:, :2])
                score = float(np.mean([central_mean(e[:, 0]), central_mean(e[:, 1])]))
                if score < best[0] - 1e-12:
                    best = (score, float(f), float(h))
        assert fit_offsets(sim, meas, disagg) == (best[1], best[2])


def test_the_offset_scores_are_the_central_means_over_every_pair() -> None:
    """Every pair's score, taken from running sums of two sorted rows, is the mean of the errors
    ranked from the first quartile to the third that sorting a ``pairs x runs`` array gives, to
    rounding (inf where an inf is among them, nan where no run has the value): odd and even
    counts, ties (rounded values), runs missing a percentile, and all, none or some of the runs
    disaggregated. The ranks are the quartiles' (``floor(0.25 (n - 1))`` to ``ceil(0.75 (n -
    1))``), and one run is its own central mean."""
    from dse.calibration.latency import OFFSET_GRID, central_mean, central_ranks, offset_scores

    assert [central_ranks(n) for n in (1, 2, 4, 5, 223)] == [(0, 0), (0, 1), (0, 3), (1, 3), (55, 167)]
    assert central_mean(np.array([3.0, np.nan, 1.0, 2.0, 10.0, 0.0])) == 2.0  # ranks 1-3 of five: 1, 2, 3

    rng = np.random.default_rng(5)
    for case in range(31):
        rows = int(rng.integers(1, 40))
        sim = rng.uniform(0.01, 3.0, (rows, 4))
        meas = sim * rng.uniform(0.5, 2.5, (rows, 4))
        if case % 2:
            sim, meas = np.round(sim, 2), np.round(meas, 1) + 0.1
        sim[rng.random((rows, 4)) < 0.1] = np.nan
        sim[rng.random(rows) < 0.1, 0] = np.inf  # a replay whose request never got its first token
        if case == 30:
            sim[:, 1] = np.nan  # no run with a p99: that half of every score is nan, as numpy's
        disagg = rng.random(rows) < (0.0, 1.0, 0.5)[case % 3]
        hands = OFFSET_GRID if disagg.any() else OFFSET_GRID[:1]
        want = np.zeros((len(OFFSET_GRID), len(hands)))
        for k in range(2):
            ok = ~np.isnan(sim[:, k]) & ~np.isnan(meas[:, k])
            hand = np.where(disagg[ok], 1.0, 0.0)[None, None, :] * hands[None, :, None]
            off = OFFSET_GRID[:, None, None] + hand
            err = np.sort(np.abs((sim[ok, k] + off) / meas[ok, k] - 1.0), axis=2)
            a, b = central_ranks(max(int(ok.sum()), 1))
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # no run with both values: nan
                want += err[:, :, a : b + 1].mean(axis=2) / 2.0
        score, got_hands = offset_scores(sim, meas, disagg)
        np.testing.assert_array_equal(got_hands, hands)
        np.testing.assert_allclose(score, want, rtol=1e-12, atol=0.0)


def test_balanced_attention_dp_ranks_let_a_lone_request_in_when_the_timer_runs_out() -> None:
    """TensorRT-LLM's ``enable_balance`` over 2 ranks with a 5-iteration timer: three requests
    decode (10 ms steps) after their prefill forward (0.1 s, ending at 0.1 s); one more arriving at
    0.203 s waits for the timer's next multiple of 5 steps since that forward, at 0.25 s (without
    balancing it joins at the step boundary after it, 0.21 s); two arriving together have one for
    each rank and go at the next boundary; with fewer requests decoding than ranks it goes at once."""
    tables = _engine(True, chunk=1e6)
    balanced = replace(tables, recv_every=5, balance_ranks=2.0)

    def ttft(t: EngineTables, arrivals: list[float]) -> np.ndarray:
        return simulate_latency(t, _trace(arrivals, 10, 100), Lengths(10, 100)).ttft_s[3:]

    assert ttft(tables, [0.0, 0.0, 0.0, 0.203]) == pytest.approx([0.31 - 0.203])
    assert ttft(balanced, [0.0, 0.0, 0.0, 0.203]) == pytest.approx([0.35 - 0.203])
    assert ttft(balanced, [0.0, 0.0, 0.0, 0.203, 0.203]) == pytest.approx([0.31 - 0.203] * 2)
    one_running = simulate_latency(balanced, _trace([0.0, 0.203], 10, 100), Lengths(10, 100))
    assert one_running.ttft_s[1] == pytest.approx(0.31 - 0.203)


def test_the_balance_setting_is_read_for_trt_attention_dp_rows_only(catalog: Catalog) -> None:
    """``adp_balance_timeout_iters`` reaches an aggregated TensorRT-LLM attention-DP instance's
    tables (its ranks, its timer); any other row refuses it with one line naming the rule."""
    from dse.errors import InputError

    params = load_params()
    trt_dp = {**B200_ROW, "framework": "trt", "prefill_dp_attention": "True", "decode_dp_attention": "True"}
    bench = parse_row({**trt_dp, "adp_balance_timeout_iters": "60"}, catalog)
    t = tables_of(deployment_of([bench], catalog, params), params, ["trt"], [Lengths(1000, 100)])[0]
    assert (t.balance_ranks, t.recv_every) == (8.0, 60)
    plain = parse_row(trt_dp, catalog)
    t = tables_of(deployment_of([plain], catalog, params), params, ["trt"], [Lengths(1000, 100)])[0]
    assert (t.balance_ranks, t.recv_every) == (0.0, 1)
    rule = r"adp_balance_timeout_iters.*only an aggregated TensorRT-LLM \(trt\) row with attention DP"
    for row in (B200_ROW, {**B200_ROW, "framework": "trt"}, {**trt_dp, **DISAGG}):
        with pytest.raises(InputError, match=rule):
            parse_row({**row, "adp_balance_timeout_iters": "60"}, catalog)
    for bad in ("0", "2.5", "many"):
        with pytest.raises(InputError, match=r"adp_balance_timeout_iters.*whole number from 1"):
            parse_row({**trt_dp, "adp_balance_timeout_iters": bad}, catalog)


def test_the_benchmark_warmup_column(catalog: Catalog) -> None:
    """``benchmark_warmup`` is what the benchmark sent a fresh server first: when empty, what
    InferenceX's harness for the row's topology sends (copies of one prompt on one node, a run of
    random prompts across nodes), else the value given; any other value gets one line naming the
    column."""
    from dse.errors import InputError

    assert parse_row(B200_ROW, catalog).warmup == "one-prompt"
    assert parse_row({**B200_ROW, **DISAGG}, catalog).warmup == "random"
    for given in ("none", "one-prompt", "random"):
        assert parse_row({**B200_ROW, "benchmark_warmup": given}, catalog).warmup == given
    with pytest.raises(
        InputError, match=r"benchmark_warmup = 'cold'.*must be one of none, one-prompt, random"
    ):
        parse_row({**B200_ROW, "benchmark_warmup": "cold"}, catalog)
    # dse predict offers the same values (its parser does not import the engine, for start-up)
    from dse.cli.main import build_parser
    from dse.perf.benchmark_rows import WARMUPS

    sub = next(a for a in build_parser()._actions if a.choices and "predict" in a.choices)
    flag = next(a for a in sub.choices["predict"]._actions if "--benchmark-warmup" in a.option_strings)
    assert tuple(flag.choices) == WARMUPS


def test_only_sglang_hand_shakes_before_prefill() -> None:
    assert [e for e, rules in ENGINE_RULES.items() if rules.bootstrap] == ["sglang"]


def test_a_scheduler_looking_every_n_steps_adds_half_of_them_to_the_ttft() -> None:
    """Poisson arrivals at an instance that is always decoding: a request waits for the next look,
    on average half of ``n`` steps, then its forward."""
    base = _engine(True, step_s=0.02, prefill_s=0.05)
    for n in (1, 10, 30):
        lat = simulate_latency(
            replace(base, recv_every=n), Load("poisson", rate=0.5), Lengths(100, 2000), requests=2000, seed=1
        )
        assert np.mean(lat.ttft_s) == pytest.approx(0.05 + 0.02 * max(n, 1) / 2, rel=0.05)


def test_a_preempted_request_keeps_its_first_token_and_the_cache_is_not_thrashed() -> None:
    """Two requests share a cache that holds one and a half: the newer is preempted once, keeps the
    TTFT it had, and waits for room rather than coming back at once; ten such requests on a cache
    of a hundred steps each preempt a few times, not hundreds. (Arrivals that keep a mixed engine
    reserving nothing at its cache's edge do make it preempt again and again, as vLLM does.)"""
    two = simulate_latency(_engine(True, kv_cap=120.0), _trace([0.0, 0.0], 10, 101), Lengths(1, 2))
    assert two.preempted == 1
    assert two.ttft_s == pytest.approx([0.1, 0.1])
    assert two.e2el_s[1] > two.e2el_s[0] + 0.5  # it waited for the first to finish
    ten = simulate_latency(_engine(True, kv_cap=1000.0), _trace([0.0] * 10, 10, 201), Lengths(1, 2))
    assert np.isfinite(ten.e2el_s).all() and ten.preempted <= 20
    mixed = simulate_latency(
        _engine(True, kv_cap=1000.0, mixed=True), _trace(list(np.arange(40) * 0.12), 10, 201), Lengths(1, 2)
    )
    assert (
        np.isfinite(mixed.e2el_s).all() and mixed.preempted > 0
    )  # overflow is checked after mixed forwards too


def test_a_one_token_answer_is_done_at_its_first_token_in_every_topology() -> None:
    for tables in (_engine(True), _engine(False)):
        lat = simulate_latency(tables, _trace([0.0, 1.0], 10, 1), Lengths(1, 2))
        assert lat.e2el_s == pytest.approx(lat.ttft_s)


def test_a_fresh_server_delays_the_closed_loops_first_wave_alone(b200: tuple[EngineTables, Lengths]) -> None:
    """Closed loop, the engine starting ``cold_start_s`` after the clients is the same run shifted:
    the first wave (every client's first request) waits exactly that much longer for its first
    token and its end, every later request and every TPOT is as before. An open loop has no
    first wave and ignores it."""
    tables, lengths = b200
    clients, cold = 16, 1.7
    load = Load("closed", concurrency=clients)
    warm = simulate_latency(tables, load, lengths, seed=4)
    fresh = simulate_latency(tables, load, lengths, seed=4, cold_start_s=cold)
    assert fresh.cold_start_s == cold and warm.cold_start_s == 0.0
    np.testing.assert_allclose(fresh.ttft_s[:clients], warm.ttft_s[:clients] + cold, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fresh.e2el_s[:clients], warm.e2el_s[:clients] + cold, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fresh.ttft_s[clients:], warm.ttft_s[clients:], rtol=0, atol=1e-9)
    assert fresh.first_wave == warm.first_wave == clients
    # the run took that much longer: the rate it served is over the longer span
    assert fresh.requests_per_s < warm.requests_per_s
    np.testing.assert_allclose(fresh.tpot_s, warm.tpot_s, rtol=1e-12)
    # ten prompts per client: the wave is the slowest tenth, so it moves the p99 and not the p50
    assert fresh.percentile("ttft", 99) >= warm.percentile("ttft", 99) + 0.9 * cold
    assert fresh.percentile("ttft", 50) == warm.percentile("ttft", 50)
    poisson = Load("poisson", rate=5.0)
    a = simulate_latency(tables, poisson, lengths, requests=500, seed=4)
    b = simulate_latency(tables, poisson, lengths, requests=500, seed=4, cold_start_s=cold)
    np.testing.assert_array_equal(a.ttft_s, b.ttft_s)
    assert b.cold_start_s == 0.0


def test_each_engine_vendor_and_warmup_waits_its_fitted_cold_start(catalog: Catalog) -> None:
    """The shipped calibration carries a first-wave wait per engine, GPU vendor and benchmark
    warm-up, fitted on the measured runs; a measured run's replay takes its own (the row's
    ``benchmark_warmup``, by default its topology's harness), a pairing no run measured (vLLM)
    none, and a file keyed by engine and vendor alone (fitted before warm-ups were told apart)
    still gives its waits."""
    from dse.perf.benchmark_rows import cold_start_of

    params = load_params()
    waits = params.latency.cold_start_s
    assert {"sglang/nvidia/one-prompt", "trt/nvidia/none", "sglang/amd/random"} <= set(waits)
    assert all(0.0 <= v <= 5.0 for v in waits.values())
    row = {**B200_ROW, "hardware": "mi355x", "conc": "4"}
    assert cold_start_of(parse_row(row, catalog), catalog, params) == waits["sglang/amd/one-prompt"]
    unwarmed = parse_row({**row, "benchmark_warmup": "none"}, catalog)
    assert cold_start_of(unwarmed, catalog, params) == waits["sglang/amd/none"]
    assert params.latency.cold_start("vllm", "nvidia", "one-prompt") == 0.0
    older = LatencyParams(cold_start_s={"sglang/amd": 2.2})
    assert older.cold_start("sglang", "amd", "none") == older.cold_start("sglang", "amd", "random") == 2.2


def test_the_cold_start_fit_finds_the_wait_a_groups_p99_needs() -> None:
    """Runs whose measured p99 sits a known wait above their first-wave-free replay: the fit
    returns that wait for their group (engine, vendor and the benchmark's warm-up: one engine's
    two warm-ups apart) and none for a group already right; the offsets move every TTFT alike."""
    from dse.calibration.latency import COLD_GRID, Replays, fit_cold_starts, predicted
    from dse.perf.params import LatencyParams

    rng = np.random.default_rng(0)
    rows, waits = 12, {"sglang/amd/none": 1.5, "sglang/amd/random": 0.4, "trt/nvidia/one-prompt": 0.0}
    group = np.array(["sglang/amd/none"] * 4 + ["sglang/amd/random"] * 4 + ["trt/nvidia/one-prompt"] * 4)
    base = rng.uniform(0.2, 0.8, rows)  # each run's p99 without a cold start, offsets left out
    ttft = np.empty((rows, 2, len(COLD_GRID)))
    ttft[:, 0, :] = (0.5 * base)[:, None]
    ttft[:, 1, :] = base[:, None] + COLD_GRID[None, :]  # the first wave sets the p99
    rep = Replays(ttft, np.full((rows, 2), 0.02), group)
    disagg = np.zeros(rows, dtype=bool)
    meas = np.full((rows, 4), np.nan)
    meas[:, 1] = base + 0.06 + np.array([waits[g] for g in group])
    fitted = fit_cold_starts(rep, meas, disagg, frontend_s=0.06, handoff_s=0.0)
    assert fitted == pytest.approx(waits)
    lp = LatencyParams(frontend_s=0.06, cold_start_s=fitted)
    np.testing.assert_allclose(predicted(rep, disagg, lp)[:, 1], meas[:, 1], atol=1e-9)
    np.testing.assert_allclose(predicted(rep, disagg, lp)[:, 0], 0.5 * base + 0.06, atol=1e-9)


def test_a_calibration_file_keeps_the_cold_starts(tmp_path: Path) -> None:
    """Written and read back, the waits and the slowdown are the same; a file from before there
    were any reads as none (every closed loop then starts warm, no prefill pool slows)."""
    import json

    from dse.errors import InputError
    from dse.perf.params import params_to_json

    shipped = load_params()
    file = tmp_path / "calibration.json"
    file.write_text(params_to_json(shipped))
    assert load_params(file).latency == shipped.latency
    older = json.loads(file.read_text())
    del older["latency"]["cold_start_s"]
    del older["latency"]["dp_prefill_slowdown"]
    older["latency"].pop("agg_prefill_factor", None)
    file.write_text(json.dumps(older))
    assert load_params(file).latency.cold_start_s == {}
    assert load_params(file).latency.dp_prefill_slowdown == 1.0
    assert load_params(file).latency.agg_prefill_factor == 1.0
    assert load_params(file).latency.frontend_s == shipped.latency.frontend_s
    for key, bad, rule in (
        ("dp_prefill_slowdown", 0.0, r"latency\.dp_prefill_slowdown.*must be a number > 0"),
        ("dp_prefill_slowdown", "fast", r"latency\.dp_prefill_slowdown.*must be a number > 0"),
        ("agg_prefill_factor", -1.0, r"latency\.agg_prefill_factor.*must be a number > 0"),
        ("frontend_s", -0.1, r"latency\.frontend_s.*must be seconds >= 0"),
    ):
        file.write_text(json.dumps({**older, "latency": {**older["latency"], key: bad}}))
        with pytest.raises(InputError, match=rule):
            load_params(file)
    for bad in (1.5, None, {"sglang/amd": -1.0}, {"sglang/amd": "slow"}):
        older["latency"]["cold_start_s"] = bad
        file.write_text(json.dumps(older))
        rule = r"latency\.cold_start_s.*must map engine/vendor/warm-up to seconds >= 0"
        with pytest.raises(InputError, match=rule):
            load_params(file)


def test_the_percentiles_at_every_wait_are_numpys() -> None:
    """The fit's shortcut (each percentile's ranks found in the two sorted parts, for every wait at
    once) gives numpy's percentile of the raised values at every wait, unserved requests (inf)
    included, a wave of every request too."""
    from dse.calibration.latency import COLD_GRID, _with_waits

    rng = np.random.default_rng(1)
    cases = [(10, 1), (40, 4), (160, 16), (2560, 256), (1000, 100), (7, 7), (4, 1), (10, 1), (10240, 1024)]
    cases.append((2, 1))
    for case, (n, wave) in enumerate(cases):
        t = rng.exponential(1.0, n)
        t[:wave] += rng.uniform(0.0, 3.0, wave)
        if n == 1000:
            t[5] = np.inf
        if case in (6, 7):  # an unserved request just above the p99's rank (numpy: nan), at a client
            t[-1] = np.inf
        for q in (50.0, 99.0):
            with np.errstate(invalid="ignore"):  # inf beside the rank: numpy's nan
                want = [np.percentile(np.r_[t[:wave] + w, t[wave:]], q) for w in COLD_GRID]
            np.testing.assert_allclose(_with_waits(t, wave, q), want, rtol=0, atol=1e-12, equal_nan=True)


def test_a_replay_over_several_seeds_is_the_mean_of_each_seeds(catalog: Catalog) -> None:
    """The calibration's replays under several draws of the runs' lengths and acceptances average
    each percentile (every first-wave wait of the grid, TPOT too); one seed is that seed's replay,
    and two seeds' draws differ (else averaging would measure nothing)."""
    from dse.calibration.fit import Measured
    from dse.calibration.latency import replay_measured

    runs = [Measured(parse_row(row, catalog), 1.0, 1.0, {}) for row in (B200_ROW, {**B200_ROW, **DISAGG})]
    params = load_params()
    one, other, both = (replay_measured(runs, catalog, params, seeds=s) for s in ((0,), (1,), (0, 1)))
    for f in one:
        np.testing.assert_allclose(both[f].ttft, (one[f].ttft + other[f].ttft) / 2.0)
        np.testing.assert_allclose(both[f].tpot, (one[f].tpot + other[f].tpot) / 2.0)
    assert not np.array_equal(one[(1.0, 1.0)].ttft, other[(1.0, 1.0)].ttft)
    default = replay_measured(runs, catalog, params)  # seed 0
    assert np.array_equal(default[(1.0, 1.0)].ttft, one[(1.0, 1.0)].ttft)


def test_each_run_is_replayed_at_the_factor_that_reaches_it(catalog: Catalog) -> None:
    """The calibration's replays by (slowdown, aggregated factor): an aggregated run moves with the
    aggregated prefill factor and stands at every slowdown; an SGLang attention-DP prefill pool's
    run moves with the slowdown and stands at every aggregated factor."""
    from dse.calibration.fit import Measured
    from dse.calibration.latency import replay_measured

    rows = (B200_ROW, {**B200_ROW, **DISAGG, "prefill_dp_attention": "True"})
    runs = [Measured(parse_row(row, catalog), 1.0, 1.0, {}) for row in rows]
    reps = replay_measured(runs, catalog, load_params())

    def same(a: tuple[float, float], b: tuple[float, float], run: int) -> bool:
        return bool(np.array_equal(reps[a].ttft[run], reps[b].ttft[run]))

    assert same((1.45, 0.8), (1.0, 0.8), 0) and not same((1.0, 0.8), (1.0, 1.0), 0)
    assert not np.array_equal(reps[(1.0, 0.8)].tpot[0], reps[(1.0, 1.0)].tpot[0])
    assert same((1.45, 0.8), (1.45, 1.0), 1) and not same((1.45, 1.0), (1.0, 1.0), 1)


def test_output_lengths_drawn_from_a_mixture_of_exponentials() -> None:
    """``Lengths.output_mix`` (what `dse simulate --lengths 0.5:100,0.5:1000` asks): outputs of
    the mixture's mean, 550 tokens, at least one token each and with its long tail (an
    exponential of mean 1000 passes 3000 tokens in 5% of its draws: 2.5% of the mixture's)."""
    mix = Lengths(1000.0, 1000.0, output_mix=((0.5, 100.0), (0.5, 1000.0)))
    assert mix.mean_osl == 550.0
    _, _, osl, _ = draw_requests(Load("poisson", rate=1.0), mix, 40_000, np.random.default_rng(0))
    assert osl.min() >= 1.0 and np.all(osl == np.round(osl))
    assert osl.mean() == pytest.approx(550.0, rel=0.03)
    assert (osl > 3000.0).mean() == pytest.approx(0.5 * math.exp(-3.0), rel=0.15)


POSITIVE, RATE = "must be a finite number > 0", "must be a finite number > 0 (requests/s)"
NON_NEGATIVE, KINDS = "must be a finite number >= 0", "closed, poisson, bursty, trace"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        # a closed loop of no clients, or of fewer than none, had run as one client and reported its
        # TTFT; NaN clients ended in numpy's "cannot convert float NaN to integer"
        (lambda: Load("closed", concurrency=0), "Load: concurrency = 0: must be a finite number > 0"),
        (lambda: Load("closed", concurrency=-1), "Load: concurrency = -1: must be a finite number > 0"),
        (lambda: Load("closed", concurrency=math.nan), "Load: concurrency = nan: " + POSITIVE),
        (lambda: Load("closed", concurrency=math.inf), "Load: concurrency = inf: " + POSITIVE),
        # a rate of 0 had divided by zero, NaN had reported every request "never served"
        (lambda: Load("poisson", rate=0), "Load: rate = 0: " + RATE),
        (lambda: Load("poisson", rate=-2.0), "Load: rate = -2.0: " + RATE),
        (lambda: Load("bursty", rate=math.nan), "Load: rate = nan: " + RATE),
        (lambda: Load("poisson", rate=math.inf), "Load: rate = inf: " + RATE),
        (lambda: Load("bursty", rate=2.0, burstiness=0), "Load: burstiness = 0: must be a finite number > 0"),
        # an unknown kind had run as bursty arrivals
        (lambda: Load("poison", rate=2.0), "Load: kind = 'poison': must be one of " + KINDS),
        (lambda: Load("trace"), "Load: trace: is required for a trace replay"),
        (lambda: Lengths(math.nan, 100), "Lengths: isl = nan: must be a finite number > 0 (tokens)"),
        (lambda: Lengths(100, 0), "Lengths: osl = 0: must be a finite number > 0 (tokens)"),
        (lambda: Lengths(100, 100, tail_sigma=math.nan), "Lengths: tail_sigma = nan: " + NON_NEGATIVE),
        (lambda: Lengths(100, 100, low=2.0), "Lengths: low = 2.0: must be in (0, 1] (of nominal)"),
    ],
)
def test_a_load_or_lengths_no_simulation_can_run_is_refused_in_one_line(make: object, message: str) -> None:
    """The Python API refuses what `dse predict` refuses for its flags, naming the field and the rule."""
    with pytest.raises(InputError) as exc:
        make()  # type: ignore[operator]
    assert str(exc.value) == message


@pytest.mark.parametrize("q", [0, 100, -5, 150, math.nan, "p99", True])
def test_a_percentile_outside_0_100_is_refused(b200: tuple[EngineTables, Lengths], q: object) -> None:
    """p0 and p100 had come back as the window's fastest and slowest request, -5 and NaN as numpy's
    error, "p99" as a TypeError; each is now one line naming the rule."""
    tables, lengths = b200
    lat = simulate_latency(tables, Load("closed", concurrency=4), lengths, requests=40, seed=1)
    for metric in ("ttft", "tpot", "e2el"):
        with pytest.raises(InputError, match=r"must be a number in \(0, 100\)"):
            lat.percentile(metric, q)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"percentile: ttft = .*must be a number in \(0, 100\)"):
        lat.summary((50.0, q))  # type: ignore[arg-type]
    assert lat.percentile("ttft", 99.9) <= float(np.max(lat.ttft_s))  # inside the range, a figure


def test_kernel_helpers_are_inlined() -> None:
    """The engine kernel's helpers are compiled into ``simulate`` (numba's ``inline="always"``):
    called, each array argument's reference count in and out took a quarter of the kernel's time.
    The answers are the same to the bit (the tests above pin them)."""
    from numba.core.registry import CPUDispatcher

    from dse.perf import engine_kernel

    kernels = {n: f for n, f in vars(engine_kernel).items() if isinstance(f, CPUDispatcher)}
    helpers = {n: f.targetoptions.get("inline") for n, f in kernels.items() if n != "simulate"}
    assert len(helpers) >= 20, sorted(kernels)
    assert set(helpers.values()) == {"always"}, helpers


def test_a_summary_names_each_percentile_with_the_digits_it_was_given(
    b200: tuple[EngineTables, Lengths],
) -> None:
    """``Latency.summary`` had keyed p99.99999 as ``ttft_p100_s`` (six significant digits), and
    p99.999991 then overwrote it under the same key: two percentiles asked, one figure back, named
    as the percentile no window has. Its keys carry the digits given, as `dse predict` labels them."""
    tables, lengths = b200
    lat = simulate_latency(tables, Load("closed", concurrency=4), lengths, requests=40, seed=1)
    asked = (50.0, 99.99999, 99.999991)
    got = lat.summary(asked)
    assert len(got) == 3 * len(asked)
    assert {k for k in got if k.startswith("ttft_")} == {
        "ttft_p50_s",
        "ttft_p99.99999_s",
        "ttft_p99.999991_s",
    }
    assert got["tpot_p99.99999_ms"] == lat.percentile("tpot", 99.99999) * 1e3
    assert list(lat.summary()) == [  # the usual keys as before: --batch's pred_* columns read them
        "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms",
        "e2el_p50_s", "e2el_p90_s", "e2el_p99_s",
    ]  # fmt: skip


def test_a_trace_or_load_no_replay_can_run_is_refused_in_the_api() -> None:
    """The Python API refuses a trace as ``read_trace`` refuses a file's rows, naming the request:
    unsorted, negative and NaN arrivals had been replayed as given, a request of no output
    tokens simulated, and arrays of two lengths had raised numpy's broadcast error; a closed loop
    of 2.5 clients (the CLI refuses it) had run."""
    a = np.array
    cases = {
        "arrival_s[1] = 0.0: must not be earlier": (a([1.0, 0.0]), a([4000, 1000]), a([100, 100])),
        "arrival_s[0] = -5.0: must be a finite number >= 0": (a([-5.0, 0.0]), a([4000, 1000]), a([100, 100])),
        "arrival_s[0] = nan": (a([np.nan, 0.0]), a([4000, 1000]), a([100, 100])),
        "osl[0] = 0.0: must be a whole number >= 1": (a([0.0, 1.0]), a([4000, 1000]), a([0, 100])),
        "isl[1] = 10.5: must be a whole number": (a([0.0, 1.0]), a([4000, 10.5]), a([1, 100])),
        "arrival_s, isl, osl = [2, 3]: must have the same length": (
            a([0.0, 1.0, 2.0]),
            a([4000, 1000]),
            a([100, 100]),
        ),
        "arrival_s: has no requests": (a([]), a([]), a([])),
    }
    for want, cols in cases.items():
        with pytest.raises(InputError, match=re.escape(f"Trace: {want}")):
            Trace(*cols)
    assert len(Trace(a([0.0, 0.0, 2.5]), a([4000, 1, 7]), a([1, 100, 3])).isl) == 3
    for clients in (2.5, 0.5):  # (half a client had run as one, before the CLI's rule reached here)
        with pytest.raises(InputError, match=f"concurrency = {clients}: must be a whole number of clients"):
            Load("closed", concurrency=clients)
