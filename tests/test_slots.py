"""Decode slots kept free for the traffic's fluctuation (formulations.slots), and the designs it
places holding in the engine-level simulation: the square-root staffing rule, its linear row,
the whole fleet simulated behind its router, and the KV an engine's admission reserves."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from test_placement import SESSIONS

import dse.placement.candidates as candidates
from dse.catalog import Catalog
from dse.evaluation import design_of
from dse.perf.latency import percentile_of
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


def test_a_goodput_design_is_the_cheapest_of_its_reach_at_any_rate(catalog: Catalog) -> None:
    """Goodput weighs cost only as a tie-break, far inside the MILP's gap and below the noise of
    the settled reach: with returning turns under a $150 budget, 132.12 requests/s came at
    $147.36 an hour at a rate of 1 and $140.40 at 10. A cost stage at the reach
    (dse.placement.plan._cheapest_at_reach) answers $140.40 at both, and no cost-objective
    placement of that traffic is cheaper."""
    params = load_params()

    def request(rate: float, objective: Objective) -> PlacementRequest:
        return PlacementRequest(
            model="deepseek-v3",
            hardware=("b200", "h200-sxm"),
            workload=replace(SESSIONS, requests_per_s=rate),
            slo=Slo(ttft_s=1.0, tpot_s=0.05),
            topology=Topology.DISAGGREGATED,
            objective=objective,
            limits=Limits(budget_usd_hour=150.0) if objective is Objective.GOODPUT else Limits(),
        )

    def best(r: PlacementRequest) -> Any:
        return place(r, catalog=catalog, params=params, with_shadow_prices=False).best

    bests = [best(request(r, Objective.GOODPUT)) for r in (1.0, 10.0)]
    assert all(b is not None for b in bests)
    costs = [b.usd_per_hour for b in bests if b is not None]
    assert costs[0] == pytest.approx(costs[1], rel=1e-6), costs
    assert bests[0] is not None
    traffic = bests[0].requests_per_s
    cheapest = best(request(traffic, Objective.COST))
    assert cheapest is not None
    assert costs[0] <= cheapest.usd_per_hour * (1.0 + 1e-6), (costs, cheapest.usd_per_hour)


def test_decode_pools_of_several_shapes_are_one_deployment_behind_one_router(catalog: Catalog) -> None:
    """A disaggregated design's decode pools are one deployment with its prefill pool: any prefill
    instance hands a prompt to any decode instance, the one whose requests fill the smallest share
    of its slots, and each pool's requests are told apart for the worst pool's figure. Two pools
    of one shape are the same simulation as one pool of their instances, request by request; of
    two shapes, each fills its slots alike. Such designs had been simulated apart, each with a
    whole share of the prefill instances, or not at all where the shares did not come out whole
    (two prefill instances for these three decode instances)."""
    params = load_params()
    pre = _sim_pool(instances=2.0, requests_per_s=20.0)
    large = replace(pre, role="decode", name="d8", instances=1.0, decode_batch=128.0, output_tokens_per_s=9e3)
    small = replace(large, name="d4", gpus=4.0, ep=4.0, instances=2.0, decode_batch=64.0)

    def design(*decode: SimPool) -> SimDesign:
        return SimDesign(
            model="qwen3-235b", engine="trt", weight_precision="fp8", mtp=False, topology="disaggregated",
            workload=Workload(requests_per_s=20.0, input_tokens=1000.0, output_tokens=400.0),
            slo=Slo(ttft_s=2.0, tpot_s=0.05), pools=(pre, *decode), resting=(),
        )  # fmt: skip

    one = design_latency(design(replace(large, instances=2.0)), catalog, params)
    two = design_latency(design(large, replace(large, name="d8b")), catalog, params)
    assert one is not None and two is not None
    assert one.groups == (len(one.ttft_s),) and len(two.groups) == 2 and sum(two.groups) == len(one.ttft_s)
    for metric in ("ttft_s", "tpot_s", "e2el_s"):
        assert np.array_equal(np.sort(getattr(two, metric)), np.sort(getattr(one, metric)))
    mixed = design_latency(design(small, large), catalog, params)
    assert mixed is not None and len(mixed.groups) == 2 and mixed.warning is None  # steady
    # 2 x 64 slots and 1 x 128: the router keeps their shares of the slots alike, so about half each
    assert 0.4 < mixed.groups[0] / sum(mixed.groups) < 0.6, mixed.groups
    ends = np.cumsum((0, *mixed.groups))
    spans = list(zip(ends[:-1], ends[1:], strict=True))
    own = [float(np.median(mixed.tpot_s[a:b])) for a, b in spans]
    assert own[0] != own[1]  # each pool decodes at its own shape's step
    worst = mixed.worst("tpot", 90.0)
    assert worst == max(percentile_of("tpot", mixed.tpot_s[a:b], 90.0) for a, b in spans)
    assert worst >= mixed.percentile("tpot", 90.0)


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


def test_an_attention_ffn_designs_attention_pools_share_its_expert_pools(catalog: Catalog) -> None:
    """An attention-FFN design of several attention or expert pools is simulated (until 2026-12-06
    it stood on the MILP's TTFT): each attention pool is a decode pool, and its tokens go to the
    expert pools as the placement put them, the slowest pool it reaches pacing its step, in the
    engine-level simulation's tables and the fluid model's step alike, at every batch. The pools
    of a Qwen3-235B design on H200 that ``dse place`` gives (TTFT 0.5 s at p90, TPOT 100 ms, 20
    req/s of 2,000 / 800 tokens): three TP2 attention instances kept in a node with three expert
    instances of 32 tokens a step (``.../nvlink``), one attention-DP instance, and three expert
    instances of 512 tokens across the NICs. Counted as six of the first's shape, as until
    2026-12-06, they stepped at 115 ms and the design was overloaded; dealt so, 99.95 ms. Until
    session 57 every attention instance dealt its tokens over both expert pools and each link was
    found from the counts: the node's pool then crossed the NICs and the other NVLink, the
    placement's links the wrong way round."""
    from dse.perf.latency_inputs import Lengths
    from dse.perf.latency_tables import tables_of
    from dse.sim.engine_latency import _deployments, _pool, _tables
    from dse.sim.from_placement import _afd_tpot

    params = load_params()
    pre = _sim_pool(hardware="h200-sxm", gpus=2.0, ep=1.0, instances=2.0, requests_per_s=20.0)
    att = replace(pre, role="attention", name="h200-sxm/attention/2gpu-tp2-ep2/nvlink", attn_tp=2.0, ep=2.0,
                  instances=3.0, decode_batch=433.0)  # fmt: skip
    dpa = replace(att, name="h200-sxm/attention/2gpu-dpa-ep2", attn_tp=1.0, instances=1.0, decode_batch=436.0)
    ep2 = replace(pre, role="ffn", name="h200-sxm/ffn/2gpu-tp2-ep2/b32/nvlink", attn_tp=2.0, ep=2.0,
                  instances=3.0, decode_batch=32.0)  # fmt: skip
    ep1 = replace(ep2, name="h200-sxm/ffn/2gpu-dpa-ep1/b512", attn_tp=1.0, ep=1.0, decode_batch=512.0)
    design = SimDesign(
        model="qwen3-235b", engine="sglang", weight_precision="fp8", mtp=False, topology="afd",
        workload=Workload(requests_per_s=20.0, input_tokens=2000.0, output_tokens=800.0),
        slo=Slo(ttft_s=0.5, tpot_s=0.1, percentile=90.0), pools=(pre, att, dpa, ep2, ep1), resting=(),
    )  # fmt: skip
    ((deployed, _, _),) = _deployments(design, catalog, params, 0.5 + 800 * 0.1)
    (near, far), (alone,) = deployed.pools
    # at the load both sides carry (1,632 tokens a step: 3 x 32 + 3 x 512, of the attention's 3 x
    # 433 + 436), the node's attention sends its partner the 96 its three instances carry, over
    # NVLink; the rest of its tokens, and all of the attention-DP instance's, cross the NICs to the
    # 512-token pool. Each expert instance then takes its planned batch
    assert [bool(d.ffn_in_domain[0]) for d in (near, far, alone)] == [True, False, False]  # type: ignore[index]
    per = [float((d.decode_instances / d.ffn_instances)[0]) for d in (near, far, alone)]  # per attention seq
    load = 1632 / 1735
    taken = [b * load * x for b, x in zip((433, 433, 436), per, strict=True)]
    assert taken == pytest.approx([32.0, 512.0, 512.0])
    near_share = 96 / (3 * 433 * load)
    # each link carries the share of its own pool; the lone pool takes every token (as it is)
    sent = [float(d.ffn_sent[0]) for d in (near, far)]  # type: ignore[index]
    assert sent == pytest.approx([near_share, 1.0 - near_share])
    assert alone.ffn_sent is None
    # 8-GPU expert pools across the NICs, neither a domain unit: an attention instance's NICs
    # carry both pools' shares, every token's hidden states, not each pool's share alone
    wide = replace(ep1, name="f8", gpus=8.0, ep=8.0, attn_tp=1.0, instances=1.0)
    two = replace(
        design, pools=(pre, att, dpa, replace(wide, decode_batch=2048.0), replace(wide, name="f8b"))
    )
    ((spread, _, _),) = _deployments(two, catalog, params, 0.5 + 800 * 0.1)
    for sides in spread.pools:
        assert [float(d.ffn_sent[0]) for d in sides if d.ffn_sent is not None] == pytest.approx([1.0, 1.0])
    assert deployed.gpus == 2 * 2 + 4 * 2 + 6 * 2  # prefill, attention, experts
    lengths = Lengths(2000.0 / 0.9, 800.0 / 0.9)
    context = lengths.mean_context + 0.5 * lengths.mean_osl
    tables = _tables(deployed, params, "sglang", lengths)
    for t, a, sides in zip((tables, *tables.decode_more), (att, dpa), deployed.pools, strict=True):
        n, x = t.dec_n, np.ones(len(t.dec_n))
        pool = _pool(design, catalog, params, a)
        fluid = _afd_tpot(design, catalog, params, pool, a, n, context * x, 0 * x, x)
        assert np.allclose(t.dec_a + t.dec_b * n * context, fluid, rtol=1e-12, atol=0.0)
        each = [tables_of(d, params, ["sglang"], [lengths])[0] for d in sides]
        slowest = set(np.argmax([s.dec_a + s.dec_b * n * context for s in each], axis=0).tolist())
        assert slowest == ({0, 1} if a is att else {0}), slowest  # the node's pools: either, by batch
        assert fluid[np.searchsorted(n, a.decode_batch)] < 0.1  # within the pace at the placed batch
    lat = design_latency(design, catalog, params)
    assert lat is not None and len(lat.groups) == 2 and "overloaded" not in (lat.warning or "")
    assert lat.worst("ttft", 90.0) < 0.5 and lat.worst("tpot", 50.0) < 0.1
    ends = np.cumsum((0, *lat.groups))
    spans = list(zip(ends[:-1], ends[1:], strict=True))
    assert lat.worst("ttft", 90.0) == max(percentile_of("ttft", lat.ttft_s[a:b], 90.0) for a, b in spans)


def test_a_window_no_slice_shortens_grows_to_a_steady_state(catalog: Catalog) -> None:
    """DeepSeek-V3 on H200 at 100 requests/s (TTFT 0.5 s at p90, TPOT 100 ms), disaggregated:
    about 5,600 requests in flight, and prefill and decode instance counts no slice keeps in
    ratio. Its window had been cut at 10,000 requests, every one of which arrived while the
    batches filled (the simulation warned so); it now holds three times the requests in flight,
    and the warning is gone."""
    from dse.sim.engine_latency import MAX_REQUESTS

    req = PlacementRequest(
        model="deepseek-v3", hardware=("h200-sxm",), workload=Workload(100.0, 2000.0, 800.0),
        slo=Slo(ttft_s=0.5, tpot_s=0.1, percentile=90.0), topology=Topology.DISAGGREGATED, engine="trt",
    )  # fmt: skip
    best = place(req, catalog=catalog, with_shadow_prices=False).best
    assert best is not None
    lat = design_latency(design_of(req, best), catalog, load_params())
    assert lat is not None and lat.warning is None, lat.warning
    assert len(lat.ttft_s) > MAX_REQUESTS * 2 / 3  # the measured two thirds of a longer window
