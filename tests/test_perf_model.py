"""Physics of the stage performance model: hand-checked cases and properties."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dse.calibration.fit import _identifiable
from dse.catalog import Catalog
from dse.perf.params import PerfParams, default_params, load_params
from dse.perf.pool import Pool, build_pool
from dse.perf.serving import Deployment, closed_loop, decode_capacity_at_tpot, decode_tpot
from dse.perf.stages import attention_rank_imbalance, expert_imbalance, forward_cost, kv_capacity_sequences
from dse.units import Precision

HW = ["h100", "h200", "b200", "gb200", "mi355x", "b300"]


def _pool(
    catalog: Catalog,
    hw: str,
    gpus: int,
    attn_tp: int,
    prec: Precision = Precision.FP8,
    model: str = "deepseek-v3",
) -> Pool:
    return build_pool(
        catalog.model(model),
        [catalog.hardware(hw)],
        gpus=[gpus],
        attn_tp=[attn_tp],
        ep=[gpus],
        weight_precision=[prec],
        kv_precision=[Precision.FP8],
    )


def _decode_s(pool: Pool, p: PerfParams, batch: float, ctx: float = 2000.0) -> float:
    c = forward_cost(
        pool,
        p,
        tokens=np.array([batch]),
        sequences=np.array([batch]),
        context=np.array([ctx]),
        prefill=False,
        speed=np.ones(1),
    )
    return float(c.total_s[0])


def test_memory_bound_decode_step_is_bytes_over_bandwidth(catalog: Catalog) -> None:
    """One sequence on 8 x H200 TP8, no overheads or communication: the step is the weight and
    KV reads over HBM bandwidth, which we compute here by hand."""
    p = replace(
        default_params(),
        hbm_eff=1.0,
        gemm_eff=1.0,
        attn_eff=1.0,
        step_overhead_ms=0.0,
        layer_overhead_us=0.0,
        collective_latency_us=0.0,
        comm_overlap=1.0,
    )
    pool = _pool(catalog, "h200", 8, 8)
    m = catalog.model("deepseek-v3")
    g = m.param_groups()
    attn_w = g["attention"] / 8
    other_w = (sum(g.values()) - g["attention"] - g["routed_experts"]) / 8
    active = 1 - (1 - 8 / 256) ** 1
    expert_w = g["routed_experts"] / 8 * active
    kv = (2000 + 1) * 35136  # MLA latent replicated on each TP rank, fp8
    expected = (attn_w + other_w + expert_w + kv) / 4.8e12
    assert _decode_s(pool, p, 1.0) == pytest.approx(expected, rel=1e-6)


def test_imbalance_shrinks_with_batch_and_vanishes_without_ep() -> None:
    ep = np.array([32.0, 32.0, 32.0, 1.0])
    imb = expert_imbalance(np.array([64.0, 6400.0, 640000.0, 10.0]), ep)
    assert imb[0] > imb[1] > imb[2] > 1.0
    assert imb[3] == 1.0


@settings(max_examples=60, deadline=None)
@given(dp=st.sampled_from([1.0, 2.0, 8.0, 16.0, 72.0]), b1=st.floats(0.01, 1e5), b2=st.floats(0.01, 1e5))
def test_busiest_attention_rank_evens_out_as_the_batch_grows(dp: float, b1: float, b2: float) -> None:
    """The busiest data-parallel attention rank holds at most the whole batch (factor <= dp), at
    least its share (>= 1), exactly its share without data parallelism, and a larger batch never
    makes it hold more sequences per sequence of the batch."""
    lo, hi = sorted((b1, b2))
    imb = attention_rank_imbalance(np.array([lo, hi]), np.array([dp, dp]))
    assert np.all(imb >= 1.0) and np.all(imb <= dp + 1e-12)
    assert imb[1] <= imb[0] * (1 + 1e-12)
    if dp == 1.0:
        assert np.all(imb == 1.0)


@settings(max_examples=40, deadline=None)
@given(
    hw=st.sampled_from(HW),
    gpus=st.sampled_from([8, 16, 72]),
    ctx=st.floats(100, 30000),
    b1=st.floats(1, 4096),
    b2=st.floats(1, 4096),
)
def test_dp_attention_per_sequence_is_never_slower_with_more_sequences(
    catalog: Catalog, hw: str, gpus: int, ctx: float, b1: float, b2: float
) -> None:
    """Under data-parallel attention the step waits for the busiest rank: a larger batch evens the
    ranks out, so it never costs more attention time per sequence."""
    p = load_params()
    lo, hi = sorted((b1, b2))

    def attn(pool: Pool, b: float) -> float:
        c = forward_cost(
            pool,
            p,
            tokens=np.array([b]),
            sequences=np.array([b]),
            context=np.array([ctx]),
            prefill=False,
            speed=np.ones(1),
        )
        return float(c.attention_s[0])

    dp = _pool(catalog, hw, gpus, 1)
    assert attn(dp, hi) / hi <= attn(dp, lo) / lo * (1 + 1e-9)


def test_mla_latent_is_replicated_under_attention_tp(catalog: Catalog) -> None:
    tp = _pool(catalog, "b200", 8, 8)
    dp = _pool(catalog, "b200", 8, 1)
    assert tp.kv_shard[0] == 1 and dp.kv_shard[0] == 8
    gqa = _pool(catalog, "b200", 8, 8, model="qwen3-235b-a22b")
    assert gqa.kv_shard[0] == 4  # 4 KV heads: TP beyond 4 replicates them


@settings(max_examples=60, deadline=None)
@given(
    hw=st.sampled_from(HW),
    gpus=st.sampled_from([8, 16, 72]),
    dpa=st.booleans(),
    batch=st.floats(1, 512),
    ctx=st.floats(100, 30000),
    factor=st.floats(1.0, 4.0),
    which=st.sampled_from(
        [
            "hbm_bytes_per_s",
            "dense_tflops",
            "expert_tflops",
            "attn_tflops",
            "scaleup_bytes_per_s",
            "nic_bytes_per_s",
        ]
    ),
)
def test_more_bandwidth_or_compute_is_never_slower(
    catalog: Catalog, hw: str, gpus: int, dpa: bool, batch: float, ctx: float, factor: float, which: str
) -> None:
    p = load_params()
    pool = _pool(catalog, hw, gpus, 1 if dpa else 8)
    faster = replace(pool, **{which: getattr(pool, which) * factor})
    assert _decode_s(faster, p, batch, ctx) <= _decode_s(pool, p, batch, ctx) * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(
    hw=st.sampled_from(HW),
    gpus=st.sampled_from([8, 16, 72]),
    dpa=st.booleans(),
    ctx=st.floats(500, 20000),
    b1=st.floats(1, 4096),
    b2=st.floats(1, 4096),
)
def test_larger_batch_never_lowers_throughput_before_memory_runs_out(
    catalog: Catalog, hw: str, gpus: int, dpa: bool, ctx: float, b1: float, b2: float
) -> None:
    p = load_params()
    pool = _pool(catalog, hw, gpus, 1 if dpa else 8)
    cap = float(kv_capacity_sequences(pool, p, np.array([ctx]))[0])
    lo, hi = sorted((b1, b2))
    if hi > cap:
        return
    assert hi / _decode_s(pool, p, hi, ctx) >= lo / _decode_s(pool, p, lo, ctx) * (1 - 1e-9)


@settings(max_examples=40, deadline=None)
@given(
    hw=st.sampled_from(HW),
    tp=st.sampled_from([4, 8]),
    dpa=st.booleans(),
    prec=st.sampled_from([Precision.FP8, Precision.FP4]),
    isl=st.sampled_from([1024.0, 8192.0]),
    conc=st.floats(1, 8192),
)
def test_residency_never_exceeds_capacity_in_a_feasible_design(
    catalog: Catalog, hw: str, tp: int, dpa: bool, prec: Precision, isl: float, conc: float
) -> None:
    p = load_params()
    pool = _pool(catalog, hw, tp, 1 if dpa else tp, prec)
    dep = Deployment(
        prefill=None,
        decode=pool,
        prefill_instances=np.ones(1),
        decode_instances=np.ones(1),
        isl=np.array([isl]),
        osl=np.array([1024.0]),
        speed=np.ones(1),
        draft_tokens=np.zeros(1),
        accept_tokens=np.ones(1),
    )
    res = closed_loop(dep, p, np.array([conc]))
    if np.isfinite(res.tput_per_gpu[0]):
        assert res.hbm_peak_bytes_per_gpu[0] <= pool.hbm_bytes[0]
        assert res.tput_per_gpu[0] > 0 and res.ttft_s[0] > 0
    else:
        assert res.regime[0] == "weights-do-not-fit"


def test_closed_loop_obeys_littles_law(catalog: Catalog) -> None:
    p = load_params()
    n = 3
    pool = build_pool(
        catalog.model("deepseek-v3"),
        [catalog.hardware("b200")] * n,
        gpus=[8] * n,
        attn_tp=[1] * n,
        ep=[8] * n,
        weight_precision=[Precision.FP8] * n,
        kv_precision=[Precision.FP8] * n,
    )
    dep = Deployment(
        prefill=None,
        decode=pool,
        prefill_instances=np.ones(n),
        decode_instances=np.ones(n),
        isl=np.full(n, 1024.0),
        osl=np.full(n, 1024.0),
        speed=np.ones(n),
        draft_tokens=np.zeros(n),
        accept_tokens=np.ones(n),
    )
    conc = np.array([4.0, 64.0, 512.0])
    res = closed_loop(dep, p, conc)
    in_flight = res.requests_per_s * (res.ttft_s + 1024.0 * res.tpot_s)
    assert in_flight == pytest.approx(conc, rel=0.02)
    assert np.all(np.diff(res.tput_per_gpu) > 0) and np.all(np.diff(res.intvty_tok_s_user) < 0)


def test_decode_capacity_meets_its_tpot_target(catalog: Catalog) -> None:
    p = load_params()
    pool = _pool(catalog, "gb200", 72, 1)
    rate, batch = decode_capacity_at_tpot(
        pool,
        p,
        context=np.array([4000.0]),
        tpot_s=np.array([0.03]),
        speed=np.ones(1),
        draft_tokens=np.zeros(1),
        accept_tokens=np.ones(1),
    )
    assert batch[0] > 1
    assert batch[0] / rate[0] <= 0.03 * (1 + 1e-9)


@pytest.mark.parametrize("n", [1, 3, 100, 5000])  # 128, 128, 20 and 1 (bisection) batches a round
def test_decode_capacity_is_the_largest_batch_that_meets_tpot(catalog: Catalog, n: int) -> None:
    """Against a plain bisection to 1e-6 sequences, rounded down to whole sequences, whatever the
    number of candidates."""
    p = load_params()
    rng = np.random.default_rng(n)
    names = ["b200", "h200", "gb200", "mi355x"]
    pool = build_pool(
        catalog.model("deepseek-v3"),
        [catalog.hardware(names[i]) for i in rng.integers(0, len(names), n)],
        gpus=np.full(n, 8.0),
        attn_tp=np.ones(n),
        ep=np.full(n, 8.0),
        weight_precision=[Precision.FP8] * n,
        kv_precision=[Precision.FP8] * n,
    )
    kw = {
        "context": rng.choice([1000.0, 8000.0, 60000.0], n),
        "speed": np.ones(n),
        "draft_tokens": np.zeros(n),
        "accept_tokens": np.ones(n),
    }
    tpot_s = rng.choice([0.015, 0.03, 0.1], n)
    max_batch = rng.choice([64.0, np.inf], n)
    _, batch = decode_capacity_at_tpot(pool, p, tpot_s=tpot_s, max_batch=max_batch, **kw)
    cap = np.minimum(kv_capacity_sequences(pool, p, kw["context"]), max_batch)
    lo, hi = np.zeros(n), np.maximum(cap, 0.0)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        ok = decode_tpot(pool, p, batch=np.maximum(mid, 1e-9), **kw) <= tpot_s
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    ref = np.where(decode_tpot(pool, p, batch=np.maximum(cap, 1e-9), **kw) <= tpot_s, cap, lo)
    ref = np.floor(ref + 1e-7)  # whole sequences: what an engine's batch cap counts
    ref = np.where(ref >= 1.0, ref, 0.0)
    np.testing.assert_array_equal(batch, ref)
    assert (batch > 0).any()


@pytest.mark.parametrize("n", [1, 100, 5000])  # 128, 20 and 1 (bisection) batches a round
def test_a_target_met_at_a_whole_batch_gives_that_batch(catalog: Catalog, n: int) -> None:
    """Targets set at the time per output token of a whole batch (a hair above it), so the largest
    batch that meets each lies within the search's thousandth of a sequence above a whole one: the
    search's lower end may stop below it, and only the check of the whole batch above that end
    finds it. Every answer is its whole batch, whatever the number of candidates."""
    p = load_params()
    rng = np.random.default_rng(7)
    pool = build_pool(
        catalog.model("deepseek-v3"), [catalog.hardware("h200")] * n, gpus=np.full(n, 8.0),
        attn_tp=np.ones(n), ep=np.full(n, 8.0), weight_precision=[Precision.FP8] * n,
        kv_precision=[Precision.FP8] * n,
    )  # fmt: skip
    kw = {
        "context": np.full(n, 8000.0),
        "speed": np.ones(n),
        "draft_tokens": np.zeros(n),
        "accept_tokens": np.ones(n),
    }
    whole = rng.integers(2, 40, n).astype(float)  # below the HBM cap (about 60 at 8,000 tokens)
    assert (whole < kv_capacity_sequences(pool, p, kw["context"])).all()
    tpot_s = decode_tpot(pool, p, batch=whole, **kw) * (1.0 + 1e-12)
    _, batch = decode_capacity_at_tpot(pool, p, tpot_s=tpot_s, **kw)
    np.testing.assert_array_equal(batch, whole)


def _counted_decode_tpot(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], Any]:
    """``dse.perf.serving.decode_tpot`` counting its calls (the list), and the real one."""
    from dse.perf import serving

    calls: list[int] = []
    real = serving.decode_tpot

    def counted(*a: object, **k: object) -> np.ndarray:
        calls.append(1)
        return real(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(serving, "decode_tpot", counted)
    return calls, real


def test_the_decode_search_stops_at_whole_sequences(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer is a whole batch, so the search stops once its bracket is under one sequence and
    tries the whole batch inside it: one candidate of an HBM cap near 60 sequences takes one round
    of 128 batches, four step-time evaluations in all (the cap, the round, the whole batch, the
    rate), where searching to a thousandth of a sequence took three rounds (five or six). The
    answer is the test above's: the largest whole batch that meets the target."""

    p = load_params()
    pool = _pool(catalog, "h200", 8, 1)
    kw = {
        "context": np.array([8000.0]),
        "speed": np.ones(1),
        "draft_tokens": np.zeros(1),
        "accept_tokens": np.ones(1),
    }
    calls, real = _counted_decode_tpot(monkeypatch)
    tpot_s = np.array([0.03])
    rate, batch = decode_capacity_at_tpot(pool, p, tpot_s=tpot_s, **kw)
    assert len(calls) <= 4
    assert 1.0 < batch[0] < kv_capacity_sequences(pool, p, kw["context"])[0]
    assert real(pool, p, batch=batch, **kw)[0] <= tpot_s[0] < real(pool, p, batch=batch + 1.0, **kw)[0]


def test_decode_capacity_at_a_binding_cap_is_the_cap_without_a_search(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where every candidate meets the target at its cap (a study trial whose decode cap binds),
    the answer is the cap, found with two step-time evaluations (at the cap, and the rate) rather
    than a search; where one does not, the others' answers are those of a search without it."""

    p = load_params()
    n = 3
    pool = build_pool(
        catalog.model("deepseek-v3"), [catalog.hardware(h) for h in ("b200", "h200", "gb200")],
        gpus=np.full(n, 8.0), attn_tp=np.ones(n), ep=np.full(n, 8.0),
        weight_precision=[Precision.FP8] * n, kv_precision=[Precision.FP8] * n,
    )  # fmt: skip
    kw = {
        "context": np.full(n, 4000.0),
        "speed": np.ones(n),
        "draft_tokens": np.zeros(n),
        "accept_tokens": np.ones(n),
    }
    calls, real = _counted_decode_tpot(monkeypatch)
    caps = np.array([16.0, 40.0, 64.0])
    rate, batch = decode_capacity_at_tpot(pool, p, tpot_s=np.full(n, 0.05), max_batch=caps, **kw)
    assert len(calls) == 2
    np.testing.assert_array_equal(batch, caps)
    np.testing.assert_array_equal(rate, caps / real(pool, p, batch=caps, **kw))
    # one candidate past what the target allows: the search runs, and the cap still binds the others
    calls.clear()
    wide = np.array([16.0, 40.0, 1e5])
    rate2, batch2 = decode_capacity_at_tpot(pool, p, tpot_s=np.full(n, 0.05), max_batch=wide, **kw)
    assert len(calls) > 2 and batch2[2] < 1e5
    np.testing.assert_array_equal(batch2[:2], caps[:2])
    np.testing.assert_array_equal(rate2[:2], rate[:2])


def test_kimi_k3_state_takes_room_from_the_batch(catalog: Catalog) -> None:
    """69 KDA layers hold ~414 MiB per request whatever its context."""
    p = load_params()
    pool = build_pool(
        catalog.model("kimi-k3"),
        [catalog.hardware("b300")],
        gpus=[8],
        attn_tp=[1],
        ep=[8],
        weight_precision=[Precision.FP4],
        kv_precision=[Precision.FP8],
    )
    short = kv_capacity_sequences(pool, p, np.array([100.0]))[0]
    free = 268.6 * 2**30 * (1 - p.hbm_reserve_fraction) - (  # a "288 GB" B300 shows 268.6 GiB
        pool.attn_weight_bytes[0] + (pool.dense_weight_bytes[0] + pool.expert_weight_bytes[0]) / 8
    )
    assert short == pytest.approx(free * 8 / (100 * 27648 / 2 + 414 * 2**20), rel=0.01)


def test_sliding_window_kv_takes_the_pools_kv_precision_and_linear_state_its_own(catalog: Catalog) -> None:
    """gpt-oss's sliding-window KV halves under fp8 KV; Kimi K3's KDA state keeps its precision."""

    def state(model: str, kv: Precision) -> float:
        pool = build_pool(
            catalog.model(model),
            [catalog.hardware("b200")],
            gpus=[8],
            attn_tp=[1],
            ep=[8],
            weight_precision=[Precision.FP8],
            kv_precision=[kv],
        )
        return float(pool.state_bytes[0])

    assert state("gpt-oss-120b", Precision.FP8) == pytest.approx(state("gpt-oss-120b", Precision.BF16) / 2)
    assert state("gpt-oss-120b", Precision.FP8) / 2**20 == pytest.approx(2.25)
    assert state("kimi-k3", Precision.FP8) == pytest.approx(state("kimi-k3", Precision.BF16))


def test_calibration_keeps_values_no_residual_responds_to() -> None:
    """A value the training rows cannot see (here the second) keeps its start instead of
    drifting with the solver's scaling; the others stay free."""

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.array([x[0] - 1.0, 2.0 * x[2]])

    free = _identifiable(residuals, np.array([0.5, 40.0, 0.3]), np.zeros(3), np.full(3, 300.0))
    assert free.tolist() == [True, False, True]


def _comm_s(
    catalog: Catalog, p: PerfParams, hw: str, gpus: int, attn_tp: int, ep: int, batch: float, context: float
) -> float:
    """Communication seconds of one DeepSeek-V3 fp8 decode step on one instance."""
    pool = build_pool(
        catalog.model("deepseek-v3"),
        [catalog.hardware(hw)],
        gpus=[gpus],
        attn_tp=[attn_tp],
        ep=[ep],
        weight_precision=[Precision.FP8],
        kv_precision=[Precision.FP8],
    )
    c = forward_cost(
        pool, p, tokens=np.full(1, batch), sequences=np.full(1, batch), context=np.full(1, context),
        prefill=False, speed=np.ones(1),
    )  # fmt: skip
    return float(c.comm_s[0])


def test_nvlink_all_to_all_latency_is_paid_per_peer(catalog: Catalog) -> None:
    """Inside the scale-up domain an expert dispatch or combine signals every peer, so its fixed
    cost grows with the EP group (GB200 NVL72 EP48 pays 47 peers, B200 EP8 seven), while a
    tensor-parallel all-reduce pays the NVLink latency once per call."""
    p = replace(default_params(), collective_latency_us=2.0, link_eff=1e9, nic_eff=1e9, comm_overlap=0.0)
    m = catalog.model("deepseek-v3")

    def comm_s(hw: str, gpus: int, attn_tp: int, ep: int) -> float:
        return _comm_s(catalog, p, hw, gpus, attn_tp, ep, batch=1.0, context=1.0)

    calls = 2 * m.moe_layers
    assert comm_s("b200", 8, 1, 8) == pytest.approx(calls * 7 * 2e-6, rel=1e-3)
    assert comm_s("gb200", 48, 1, 48) == pytest.approx(calls * 47 * 2e-6, rel=1e-3)
    assert comm_s("b200", 8, 8, 1) == pytest.approx(2 * m.layers * 2e-6, rel=1e-3)  # TP8, no EP


def test_expert_parallelism_under_tensor_parallel_attention_needs_no_all_to_all(catalog: Catalog) -> None:
    """Under tensor-parallel attention every rank holds every token, so experts spread over the
    ranks (TEP) need no dispatch: each rank computes its own experts' share and the all-reduce
    ending the layer sums it. The instance communicates as the same one with replicated experts
    (EP1), also across nodes (H100 TEP16), where a cross-node all-to-all latency was charged
    twice per MoE layer; data-parallel attention (DEP) does need the all-to-all."""
    p = default_params()

    def comm_s(hw: str, gpus: int, attn_tp: int, ep: int) -> float:
        return _comm_s(catalog, p, hw, gpus, attn_tp, ep, batch=64.0, context=2000.0)

    for hw, g in (("b200", 8), ("h100", 16), ("gb200", 32)):
        assert comm_s(hw, g, g, g) == pytest.approx(comm_s(hw, g, g, 1), rel=1e-12)
        assert comm_s(hw, g, 1, g) > 0.0  # DEP: the all-to-all
    # experts over more GPUs than the instance has (8gpu-tp8-ep16): its tokens must reach them
    assert comm_s("b200", 8, 8, 16) > comm_s("b200", 8, 8, 8)


def test_hbm_capacity_is_read_in_binary_units(catalog: Catalog) -> None:
    """Datasheet HBM "GB" are GiB (nvidia-smi: 183,359 MiB on a "180 GB" B200): DeepSeek-R1 fp8
    on 4 x B200, as InferenceX serves it at 32 concurrent 8k-token requests, has room for them."""
    pool = _pool(catalog, "b200", 4, 4)
    assert pool.hbm_bytes[0] == 180 * 2**30
    cap = kv_capacity_sequences(pool, default_params(), np.array([8192.0 * 0.9 + 1024.0 * 0.9]))
    assert cap[0] >= 32


def test_hbm_is_what_the_driver_shows_where_it_is_below_the_datasheet(catalog: Catalog) -> None:
    """A "288 GB" B300 shows 275,040 MiB in nvidia-smi (268.6 GiB, not 288): its pools hold that
    much, and a what-if scales what it shows; a B200 shows its datasheet's 180 GiB."""
    from dse.study.spec import Variant
    from dse.study.variants import variant_hardware

    b300 = catalog.hardware("b300")
    assert b300.hbm.capacity_gb == 288.0 and b300.hbm.usable_gib == 268.6
    assert _pool(catalog, "b300", 8, 8).hbm_bytes[0] == pytest.approx(268.6 * 2**30, rel=1e-12)
    assert catalog.hardware("b200").hbm.usable_gib == 180.0
    more = variant_hardware(b300, Variant(id="b300-cap150", base="b300", hbm_capacity_scale=1.5)).hbm
    assert more.capacity_gb == 432.0 and more.usable_gib == pytest.approx(1.5 * 268.6, rel=1e-12)


def test_pool_terms_computed_once_give_the_same_costs_bit_for_bit(catalog: Catalog) -> None:
    """A solve over the batch computes a pool's batch-independent terms once (stages.pool_terms)
    and reuses them for every batch it tries: the costs are exactly those of a call that computes
    them itself, in decode and prefill, for a 2-D grid of batches as the capacity search uses, and
    terms from other parameters are refused. (That the split reproduced the costs of the code
    before it bit for bit was checked once, on the calibration rows and 1,450 random pools; the
    hand-computed cases above pin the physics.)"""
    from dse.perf.stages import pool_terms

    p = load_params()
    pool = build_pool(
        catalog.model("deepseek-v3"),
        [catalog.hardware(h) for h in ("b200", "h200", "gb200", "mi355x")],
        gpus=[8, 16, 48, 8],
        attn_tp=[8, 1, 1, 4],
        ep=[1, 16, 48, 8],
        weight_precision=[Precision.FP8] * 4,
        kv_precision=[Precision.FP8] * 4,
    )
    terms = pool_terms(pool, p)
    tokens = np.array([[1.0, 40.0, 700.0, 3.0], [9000.0, 2.0, 64.0, 256.0]])
    for prefill in (False, True):
        kw = dict(tokens=tokens, sequences=tokens / 2.0, context=np.full(4, 3000.0), prefill=prefill)
        fresh = forward_cost(pool, p, speed=np.ones(4), **kw)  # type: ignore[arg-type]
        reused = forward_cost(terms, p, speed=np.ones(4), **kw)  # type: ignore[arg-type]
        for name in ("gemm_s", "attention_s", "comm_s", "overhead_s", "gemm_compute_bound"):
            assert np.array_equal(getattr(fresh, name), getattr(reused, name)), name
        assert fresh.total_s.shape == tokens.shape
    with pytest.raises(ValueError, match="other parameters"):
        forward_cost(terms, replace(p, hbm_eff=0.5), tokens=tokens, sequences=tokens, context=1.0,
                     prefill=False, speed=1.0)  # fmt: skip


def test_a_bf16_deployment_holds_every_weight_in_bf16(catalog: Catalog) -> None:
    """A bf16 checkpoint (Llama, Qwen3, GLM as published) is bf16 throughout: a dense model's
    weights double against fp8 (they were held at fp8 whatever the precision, so Llama 3.1 70B in
    bf16 fitted one 80 GB GPU); fp4 changes the experts only, attention and dense layers stay fp8."""
    llama = catalog.model("llama-3.1-70b")
    bf16, fp8 = (_pool(catalog, "h100", 1, 1, p, "llama-3.1-70b") for p in (Precision.BF16, Precision.FP8))
    held = [float(p.attn_weight_bytes[0] + p.dense_weight_bytes[0] + p.expert_weight_bytes[0])
            for p in (bf16, fp8)]  # fmt: skip
    assert held[0] == pytest.approx(llama.weight_bytes(Precision.BF16)) == pytest.approx(2 * held[1])
    h100_bf16 = catalog.hardware("h100").compute.bf16_dense_tflops
    assert float(bf16.dense_tflops[0]) == pytest.approx(h100_bf16 * 1e12)
    fp4, fp8 = (_pool(catalog, "b200", 8, 8, p) for p in (Precision.FP4, Precision.FP8))
    assert float(fp4.dense_weight_bytes[0]) == float(fp8.dense_weight_bytes[0])
    assert float(fp4.expert_weight_bytes[0]) == pytest.approx(float(fp8.expert_weight_bytes[0]) / 2)


@pytest.mark.parametrize(
    ("model", "serving"),
    [("gpt-oss-120b", "fp4"), ("kimi-k3", "fp4"), ("deepseek-v3", "fp8"), ("llama-3.1-70b", "fp8")],
)
def test_a_model_serves_at_its_checkpoints_expert_precision_unless_told(
    catalog: Catalog, model: str, serving: str
) -> None:
    """gpt-oss ships MXFP4 experts and Kimi K3 FP4 ones: served as shipped, not widened to fp8."""
    assert catalog.model(model).serving_precision is Precision(serving)


def test_a_linear_attention_state_splits_over_tensor_parallel_ranks(catalog: Catalog) -> None:
    """Kimi K3's KDA state (414 MiB a request, fp32) is one matrix per head, and tensor
    parallelism splits the heads (vLLM's KDA layer holds num_heads / tp_size): at TP8 each GPU
    holds an eighth of it. MLA's latent KV is replicated over TP, and DP ranks split both."""
    tp8, dp8 = (_pool(catalog, "b200", 8, tp, Precision.FP4, "kimi-k3") for tp in (8, 1))
    state = float(tp8.state_bytes[0])
    assert state / 2**20 == pytest.approx(414, rel=0.01)
    kv = 2000.0 * float(tp8.kv_bytes_per_token[0])
    assert float(tp8.seq_bytes_per_gpu(2000.0)[0]) == pytest.approx(kv + state / 8)
    assert float(dp8.seq_bytes_per_gpu(2000.0)[0]) == pytest.approx((kv + state) / 8)
    deepseek = _pool(catalog, "b200", 8, 8)  # no fixed state: as before
    per_token = float(deepseek.kv_bytes_per_token[0])
    assert float(deepseek.seq_bytes_per_gpu(2000.0)[0]) == pytest.approx(2000.0 * per_token)


def test_sparse_attention_reads_the_top_k_tokens_and_indexes_them_all(catalog: Catalog) -> None:
    """DeepSeek-V3.2: each query reads the 2,048 tokens its indexer picks, in the absorbed (latent)
    form in prefill too, and the indexer, replicated on every tensor-parallel rank, scores the
    whole context with its 132-byte fp8 keys; an fp8 cache takes FlashMLA's 656 bytes a layer.
    Under data-parallel attention at 32k tokens its attention is a fraction of V3's (it was priced
    as V3's, and slower); at 1k, where the top-k is the whole context, decode pays for its larger
    cache (788 bytes a layer against 576); under TP8 every rank scores every prompt token, so its
    32k-token prefill costs more than V3's."""
    v32 = catalog.model("deepseek-v3.2")
    assert v32.kv_bytes_per_token(Precision.FP8) == (656 + 132) * 61
    bf16 = v32.kv_bytes_per_token(Precision.BF16)
    assert bf16 == (576 * 2 + 132) * 61 == v32.published.kv_bytes_per_token_bf16
    p = load_params()

    def ratio(ctx: float, prefill: bool, attn_tp: int = 1) -> float:
        def attention_s(model: str) -> float:
            pool = _pool(catalog, "b200", 8, attn_tp, model=model)
            n = np.array([64.0]) if not prefill else np.array([1.0])
            tokens = n if not prefill else np.array([ctx])
            cost = forward_cost(pool, p, tokens=tokens, sequences=n, context=np.array([ctx]),
                                prefill=prefill, speed=np.ones(1))  # fmt: skip
            return float(cost.attention_s[0])

        return attention_s("deepseek-v3.2") / attention_s("deepseek-v3")

    assert ratio(32768, prefill=False) < 0.3 and ratio(32768, prefill=True) < 0.6
    assert 1.0 <= ratio(1024, prefill=False) < 788 / 576 + 0.01
    assert ratio(32768, prefill=True, attn_tp=8) > 1.0


def test_the_mean_top_k_of_a_prompt_is_the_mean_of_min_position_k() -> None:
    from dse.perf.stages import _mean_top_k

    for a, b, k in [(0, 1000, 2048), (0, 32768, 2048), (3000, 9000, 2048), (1000, 5000, 2048), (5, 5, 2)]:
        x = np.linspace(a, b, 200_001)
        want = float(np.minimum(x, k).mean())
        assert float(_mean_top_k(a, b, k)) == pytest.approx(want, rel=1e-4), (a, b, k)


def test_an_instance_wider_than_its_node_crosses_the_network_whatever_its_ep(catalog: Catalog) -> None:
    """16 H200s under DP attention span two 8-GPU nodes at ep 8 (each expert split over 2 GPUs)
    as at ep 16: tokens reach experts on the other node over the NICs. At ep 8 the all-to-all was
    taken to stay inside NVLink, so `dse place` bought 16-GPU ep-8 instances at a quarter of
    their price and no NIC speed changed it."""
    p = load_params()

    def comm_s(ep: int, nic_scale: float = 1.0, gpus: int = 16) -> float:
        h = catalog.hardware("h200")
        pool = build_pool(catalog.model("deepseek-v3"), [h], gpus=[gpus], attn_tp=[1], ep=[ep],
                          weight_precision=[Precision.FP8], kv_precision=[Precision.FP8])  # fmt: skip
        pool = replace(pool, nic_bytes_per_s=pool.nic_bytes_per_s * nic_scale)
        n = np.array([512.0])
        cost = forward_cost(pool, p, tokens=n, sequences=n, context=np.array([2000.0]), prefill=False,
                            speed=np.ones(1))  # fmt: skip
        return float(cost.comm_s[0])

    assert comm_s(8) >= comm_s(16)  # (each token reaches both shards of a split expert)
    assert comm_s(8) > 3 * comm_s(8, gpus=8)  # RDMA round trips and NIC bytes, not NVLink's
    assert comm_s(8, nic_scale=0.25) > comm_s(8) + 2e-3  # the NICs carry it


def test_splitting_experts_under_dp_attention_sends_each_token_to_every_shard(catalog: Catalog) -> None:
    """8 H200s under DP attention at ep 2 split each expert over 4 GPUs, and a routed token goes
    to all 4: the all-to-all carries more than at ep 8 (it was priced as less, so `dse place`
    favoured split experts), and ep 8's is as it was."""
    p = load_params()

    def comm_s(ep: int) -> float:
        h200 = catalog.hardware("h200")
        pool = build_pool(catalog.model("deepseek-v3"), [h200], gpus=[8], attn_tp=[1], ep=[ep],
                          weight_precision=[Precision.FP8], kv_precision=[Precision.FP8])  # fmt: skip
        n = np.array([256.0])
        cost = forward_cost(pool, p, tokens=n, sequences=n, context=np.array([2000.0]), prefill=False,
                            speed=np.ones(1))  # fmt: skip
        return float(cost.comm_s[0])

    assert comm_s(2) > comm_s(4) > comm_s(8)
