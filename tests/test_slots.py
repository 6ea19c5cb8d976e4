"""Decode slots kept free for the traffic's fluctuation (formulations.slots), and the designs it
places holding in the engine-level simulation: the square-root staffing rule, its linear row,
the whole fleet simulated behind its router, and the KV an engine's admission reserves."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

import dse.placement.candidates as candidates
from dse.catalog import Catalog
from dse.evaluation import design_of
from dse.perf.params import load_params
from dse.placement import Limits, Objective, PlacementRequest, Topology, place
from dse.sim.engine_latency import _slice, design_latency
from dse.sim.from_placement import SimDesign, SimPool
from dse.workload import Slo, Workload
from formulations.slots import carried, tangent, wait_beta


def traffic(
    model: str, hw: str, rate: float, ttft: float, tpot: float, q: float, topology: Topology, engine: str
) -> PlacementRequest:
    """2,000-token prompts and 800-token answers at ``rate`` requests/s on one hardware."""
    return PlacementRequest(
        model=model,
        hardware=(hw,),
        workload=Workload(requests_per_s=rate, input_tokens=2000.0, output_tokens=800.0),
        slo=Slo(ttft_s=ttft, tpot_s=tpot, percentile=q),
        topology=topology,
        engine=engine,
    )


def halfin_whitt_wait(beta: float) -> float:
    """The chance of waiting for a slot at ``N = a + beta sqrt(a)`` (Halfin and Whitt, 1981)."""
    cdf = 0.5 * (1.0 + math.erf(beta / math.sqrt(2.0)))
    pdf = math.exp(-0.5 * beta * beta) / math.sqrt(2.0 * math.pi)
    return 1.0 / (1.0 + beta * cdf / pdf)


@pytest.mark.parametrize("q", [50.0, 90.0, 99.0])
def test_the_headroom_makes_a_wait_as_rare_as_the_percentile_allows(q: float) -> None:
    beta = wait_beta(q)
    assert halfin_whitt_wait(beta) == pytest.approx(1.0 - q / 100.0, rel=1e-6)
    # h(N) is the traffic whose slots plus their headroom are N
    a = np.array([1.0, 45.0, 1600.0, 1e5])
    assert carried(a + beta * np.sqrt(a), beta) == pytest.approx(a, rel=1e-9)


def test_the_row_is_a_tangent_never_above_what_the_slots_carry() -> None:
    beta = wait_beta(99.0)
    slope, k = tangent(np.array([480.0]), beta)
    n0 = 480.0 + beta * math.sqrt(480.0)
    slots = np.linspace(0.0, 20 * n0, 2001)
    row = slope[0] * slots - k[0]
    assert (row <= carried(slots, beta) + 1e-9).all()  # never admits more than h
    assert slope[0] * n0 - k[0] == pytest.approx(480.0)  # exact where the pool takes it all
    assert 0.0 < slope[0] < 1.0 and k[0] > 0.0
    none_s, none_k = tangent(np.array([480.0]), 0.0)
    assert none_s[0] == 1.0 and none_k[0] == 0.0  # no headroom: the plain row


def test_a_pool_keeps_slots_free_and_holds_at_its_percentile(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DeepSeek-V3 on H200 at 2 requests/s (SGLang, TTFT 1 s at p99, TPOT 30 ms): every slot of
    its pool in use, the MILP's cheapest design is two 8-GPU instances of 26 slots each, whose
    requests queue for them to seconds at p99; keeping slots free it places three, which hold."""
    params = load_params()
    req = traffic("deepseek-v3", "h200-sxm", 2.0, 1.0, 0.03, 99.0, Topology.AGGREGATED, "sglang")

    def placed() -> tuple[float, float]:
        best = place(req, catalog=catalog, params=params, with_shadow_prices=False).best
        assert best is not None
        lat = design_latency(design_of(req, best), catalog, params)
        assert lat is not None
        return sum(p.instances for p in best.pools), lat.percentile("ttft", 99.0)

    instances, ttft = placed()
    assert instances == 3 and ttft <= 1.0
    monkeypatch.setattr(candidates, "wait_beta", lambda q: 0.0)  # every slot may be in use
    bare, bare_ttft = placed()
    assert bare == 2 and bare_ttft > 3.0


def test_a_fleet_is_simulated_behind_its_router_not_instance_by_instance() -> None:
    """35 instances at 20 requests/s share their slots behind the router: simulated whole where
    the window allows, cut to about the share it needs where it does not, never below."""
    pool = _sim_pool(
        role="mixed", hardware="h200-sxm", name="u", gpus=4.0, attn_tp=4.0, ep=2.0, instances=35.0,
        prefill_share=0.1, decode_batch=18.0, requests_per_s=20.0, prefill_busy_s=0.09, fresh_busy_s=0.09,
    )  # fmt: skip
    (whole,), g = _slice((pool,), 20.0, 80.5)
    assert whole.instances == 35.0 and g == 1.0
    (cut,), g = _slice((pool,), 200.0, 80.5)  # a window of 48,300 requests: about a fifth
    assert cut.instances == 7.0 and g == pytest.approx(5.0)
    (cut,), g = _slice((replace(pool, instances=23.0),), 200.0, 80.5)
    assert cut.instances == 5.0 and 200.0 / g == pytest.approx(200.0 * 5.0 / 23.0)  # each its load
    # two pools keep their ratio: a common divisor at or above the cut, else none beyond the greatest
    pre, dec = replace(pool, role="prefill", instances=10.0), replace(pool, role="decode", instances=30.0)
    (p, d), g = _slice((pre, dec), 200.0, 80.5)
    assert (p.instances, d.instances, g) == (2.0, 6.0, 5.0)
    (p, d), g = _slice((replace(pre, instances=5.0), replace(dec, instances=6.0)), 200.0, 80.5)
    assert (p.instances, d.instances, g) == (5.0, 6.0, 1.0)  # whole: no slice keeps 5 to 6


def test_an_aggregated_fleet_of_small_instances_holds_once_simulated_whole(catalog: Catalog) -> None:
    """GLM-4.6 on H200 at 20 requests/s, TTFT 0.5 s at p99, TPOT 50 ms, on four-GPU instances:
    15 of them, each simulated alone at its share of the traffic, queue for their slots (3.7 s at
    p99); behind one router they hold (0.32 s)."""
    from dse.placement.request import UnitOptions

    params = load_params()
    req = traffic("glm-4.6", "h200-sxm", 20.0, 0.5, 0.05, 99.0, Topology.AGGREGATED, "trt")
    req = replace(req, options=UnitOptions(decode_shapes=("4gpu-tp4-ep4",)))
    best = place(req, catalog=catalog, params=params, with_shadow_prices=False).best
    assert best is not None
    assert max(p.instances for p in best.pools) >= 10  # a fleet of small instances
    design = design_of(req, best)
    lat = design_latency(design, catalog, params)
    assert lat is not None and lat.percentile("ttft", 99.0) <= 0.5
    # one of its instances alone at its share of the traffic, as the check had simulated it
    fleet = max(design.pools, key=lambda p: p.instances)
    one = replace(fleet, instances=1.0, requests_per_s=fleet.requests_per_s / fleet.instances)
    alone = design_latency(replace(design, pools=(one,)), catalog, params)
    assert alone is not None and alone.percentile("ttft", 99.0) > 2.0, alone.percentile("ttft", 99.0)


def test_a_decode_pool_holds_the_kv_its_engine_reserves(catalog: Catalog) -> None:
    """TensorRT-LLM admits a request only with room for its whole output (GUARANTEED_NO_EVICT):
    DeepSeek-V3 on B200 at 20 requests/s, TPOT 100 ms, sized its HBM-bound decode batch at the
    mean context (2,400 tokens) where the engine reserves 2,800 for each sequence, so the engine
    admitted fewer than the batch and queued. Sized at what the engine reserves, it holds."""
    params = load_params()
    req = traffic("deepseek-v3", "b200", 20.0, 0.5, 0.1, 90.0, Topology.DISAGGREGATED, "trt")
    report = place(req, catalog=catalog, params=params, with_shadow_prices=False)
    best = report.best
    assert best is not None
    lat = design_latency(design_of(req, best), catalog, params)
    assert lat is not None and lat.percentile("ttft", 90.0) <= 0.5
    s = candidates.Shapes(req, catalog.model(req.model), [catalog.hardware("b200")], params, handed=True)
    assert s.kv_ctx[0] == pytest.approx(2800.0) and s.decode_ctx[0] == pytest.approx(2400.0)


def test_sglangs_disaggregated_decode_holds_its_fixed_reserve(catalog: Catalog) -> None:
    """SGLang's disaggregated decode server reserves 512 tokens past each prompt it admits
    (SGLANG_NUM_RESERVED_DECODE_TOKENS), as the engine-level simulation admits: more than half of
    an 800-token output, less than half of a 2,000-token one. Its aggregated scheduler reserves a
    tenth of the output, so an aggregated unit holds the mean context."""
    model, hw, params = catalog.model("deepseek-v3"), [catalog.hardware("b200")], load_params()
    req = traffic("deepseek-v3", "b200", 20.0, 0.5, 0.1, 90.0, Topology.DISAGGREGATED, "sglang")
    assert candidates.Shapes(req, model, hw, params, handed=True).kv_ctx[0] == pytest.approx(2512.0)
    assert candidates.Shapes(req, model, hw, params).kv_ctx[0] == pytest.approx(2400.0)
    long = replace(req, workload=replace(req.workload, output_tokens=2000.0))
    assert candidates.Shapes(long, model, hw, params, handed=True).kv_ctx[0] == pytest.approx(3000.0)
    # the decode units of a disaggregated build hold it: their HBM counts 2,512 tokens a sequence
    c = candidates.build_candidates(req, Topology.DISAGGREGATED, catalog, params)
    dec = [u for u in c.units if u.role.name == "DECODE"]
    assert dec
    s = candidates.Shapes(req, model, hw, params, handed=True)
    for u in dec:
        i = next(k for k, q in enumerate(s.par) if q == u.parallel)
        kv = u.decode_batch * s.per_seq_gb[i] / s.pool.kv_shard[i]
        assert u.hbm_gb_per_gpu == pytest.approx(s.weights_gb[i] + kv)


def test_a_goodput_answer_does_not_depend_on_the_rate_it_is_given(catalog: Catalog) -> None:
    """Under goodput the rate only sets the traffic's mix; the slot rows are sized for the scale
    the placement reaches (dse.placement.plan.settled_reach), so 0.001 and 100 requests/s give
    the same answer: AIConfigurator's question on 64 H200, aggregated."""
    params = load_params()
    reach = []
    for rate in (0.001, 1.0, 100.0):
        req = PlacementRequest(
            model="deepseek-r1",
            hardware=("h200-sxm",),
            workload=Workload(requests_per_s=rate, input_tokens=4000.0, output_tokens=1000.0),
            slo=Slo(ttft_s=1.0, tpot_s=0.03, percentile=50.0),
            topology=Topology.AGGREGATED,
            objective=Objective.GOODPUT,
            limits=Limits(inventory_gpus={"h200-sxm": 64.0}),
        )
        best = place(req, catalog=catalog, params=params, with_shadow_prices=False).best
        assert best is not None and best.gpus == 64
        reach.append(best.requests_per_s)
    assert reach == pytest.approx([reach[1]] * 3, rel=1e-3), reach


def test_decode_pools_of_two_shapes_are_simulated_apart_with_their_share_of_prefill(catalog: Catalog) -> None:
    """Each decode pool takes the traffic its capacity carries and that share of the prefill
    instances, whole, and the traffic its prefill instances take, as a router balancing them sends
    it; where a decode pool could not decode that share within TPOT, the traffic follows the decode
    capacities with the prefill instances within a fifth of them, else (or where a pool gets no
    prefill instance) the design is not split (not simulated request by request). The traffic had
    always followed the decode capacities: 18 instances dealt 2 and 16 for 2.48 and 15.52
    instances' worth of prompts left the first slice's prompts queueing without bound."""
    from dse.sim.engine_latency import _per_decode_pool, unsimulated

    base = _sim_pool(instances=10.0, prefill_batch_requests=4.0, requests_per_s=100.0)
    small = replace(base, role="decode", name="d4", gpus=4.0, instances=1.0, output_tokens_per_s=30_000.0)
    large = replace(base, role="decode", name="d8", instances=1.0, output_tokens_per_s=70_000.0)
    groups = _per_decode_pool(base, [small, large])
    assert groups is not None
    assert [g[2] for g in groups] == pytest.approx([0.3, 0.7])
    assert [g[0].instances for g in groups] == [3.0, 7.0]  # 10 prefill instances, 3 and 7
    assert [g[0].requests_per_s for g in groups] == pytest.approx([30.0, 70.0])
    assert [g[1].name for g in groups] == ["d4", "d8"]
    two = replace(base, instances=2.0)  # 0.6 and 1.4 of 2: one each, half the traffic each
    assert [g[2] for g in _per_decode_pool(two, [small, large], 50_000.0) or []] == [0.5, 0.5]
    assert _per_decode_pool(two, [small, large], 80_000.0) is None  # 40,000 tokens/s on the 30,000 pool
    # past the decode pools' capacity the traffic follows it (the overload shows where it is)
    over = _per_decode_pool(base, [replace(small, output_tokens_per_s=29_000.0), large], 300_000.0) or []
    assert [g[2] for g in over] == pytest.approx([29 / 99, 70 / 99])
    # the case that queued without bound: each slice's prompts are what its prefill instances take
    a = replace(small, output_tokens_per_s=12_453.0)
    b = replace(large, output_tokens_per_s=77_979.0)
    dealt = _per_decode_pool(replace(base, instances=18.0), [a, b], 80_000.0) or []
    assert [g[0].instances for g in dealt] == [2.0, 16.0]
    assert [g[2] for g in dealt] == pytest.approx([1 / 9, 8 / 9])
    # and a design it cannot split says why, not that a role is on more than one hardware
    design = SimDesign(
        model="deepseek-v3", engine="trt", weight_precision="fp8", mtp=False, topology="disaggregated",
        workload=Workload(requests_per_s=100.0, input_tokens=1000.0, output_tokens=800.0),
        slo=Slo(ttft_s=2.0, tpot_s=0.05), pools=(replace(base, instances=2.0), small, large), resting=(),
    )  # fmt: skip
    assert design_latency(design, catalog, load_params()) is None
    assert unsimulated(design) == (
        "2 prefill instances cannot be shared among 2 decode pools: a pool would get none, or too few for "
        "the prompts it decodes within TPOT"
    )
    (one,) = _per_decode_pool(replace(base, instances=2.0), [large]) or []
    assert one[0].instances == 2.0 and one[2] == 1.0


def test_the_fluid_model_runs_a_prefill_instance_as_the_prompts_its_forwards_batch_at_its_load() -> None:
    """An instance whose forward may take 33 prompts but takes 2 at its load is two servers, each a
    forward of two prompts long, not 33 each a whole batch's forward long."""
    from dse.sim.from_placement import _Prefill

    pool = _sim_pool(
        instances=3.0, prefill_batch_requests=33.0, requests_per_s=30.0, prefill_forward_requests=2.2
    )
    loaded, full = _Prefill(), _Prefill()
    loaded.add(pool)
    full.add(replace(pool, prefill_forward_requests=0.0))  # a record from before: the most it batches
    assert loaded.servers == 6.0 and full.servers == 99.0
    assert loaded.rate == full.rate == pytest.approx(3.0 / 0.05)  # the same prompts a second
    assert loaded.service_s(0.0)[0] == pytest.approx(0.1) and full.service_s(0.0)[0] == pytest.approx(1.65)


def _sim_pool(**over: Any) -> SimPool:
    """An 8-GPU B200 prefill pool at 50 ms of busy time a prompt, with ``over`` changed."""
    pool = SimPool(
        role="prefill", hardware="b200", name="p", gpus=8.0, attn_tp=1.0, ep=8.0, instances=1.0,
        prefill_share=0.0, prefill_batch_requests=4.0, decode_batch=0.0, output_tokens_per_s=0.0,
        requests_per_s=1.0, returning_per_s=0.0, prefill_busy_s=0.05, fresh_busy_s=0.05,
        midfill_busy_s=None, reload_s=None,
    )  # fmt: skip
    return replace(pool, **over)
