"""A placed design as the simulators' pipeline (:mod:`dse.sim.from_placement`): every decode pool
at its own instances, slots and speed, in the fluid model and in the discrete-event reference.

The designs are built here, not solved: B200 and H200 decode pools as a tester's placement had them
(one 8-GPU instance each, at batches of 1,581 and 308.6), and an aggregated design of an 8-GPU
TP8 instance beside four DPA ones that prefill 20% and 35% of their time. Until 2026-12-05 a
second pool counted as whole instances of the one with the most, by tokens/s and rounded up: two
B200 instances here (92 requests/s where the pools hold 54; the tester's placement, 79.1 where
they hold 47.3, was stable 6% over its capacity), and five DPA ones (51 where the pools hold 48).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from dse.catalog import Catalog
from dse.perf.params import load_params
from dse.sim.des import simulate_des
from dse.sim.fluid import simulate_fluid
from dse.sim.from_placement import SimDesign, SimPool, pipeline_of
from dse.sim.kinds import ArrivalKind
from dse.sim.scenario import Arrivals, OutputLengths, Pipeline, Scenario
from dse.workload import Slo, Workload

OUTPUT = 800.0
LENGTHS = OutputLengths((1.0,), (OUTPUT,))


def _pool(role: str, hardware: str, **over: Any) -> SimPool:
    """An 8-GPU DPA unit (EP8) of ``role`` on ``hardware``, one instance, ``over`` changed."""
    pool = SimPool(
        role=role, hardware=hardware, name=f"{hardware}/{role}", gpus=8.0, attn_tp=1.0, ep=8.0,
        instances=1.0, prefill_share=0.0, prefill_batch_requests=0.0, decode_batch=0.0,
        output_tokens_per_s=0.0, requests_per_s=0.0, returning_per_s=0.0, prefill_busy_s=None,
        fresh_busy_s=None, midfill_busy_s=None, reload_s=None,
    )  # fmt: skip
    return replace(pool, **over)


def _design(*pools: SimPool, topology: str = "disaggregated") -> SimDesign:
    """DeepSeek-V3 at 40 requests/s of 3,000 prompt and 800 output tokens (no returning turns)."""
    return SimDesign(
        model="deepseek-v3", engine="trt", weight_precision="fp8", mtp=False, topology=topology,
        workload=Workload(requests_per_s=40.0, input_tokens=3000.0, output_tokens=OUTPUT),
        slo=Slo(ttft_s=2.0, tpot_s=0.05), pools=pools, resting=(),
    )  # fmt: skip


# two prefill instances of 28 ms a prompt: 70 requests/s, never what binds here
PREFILL = _pool("prefill", "b200", instances=2.0, prefill_batch_requests=21.8, prefill_forward_requests=7.2,
                requests_per_s=40.0, prefill_busy_s=0.0282, fresh_busy_s=0.0282)  # fmt: skip
B200 = _pool("decode", "b200", decode_batch=1581.43, output_tokens_per_s=31_629.0)
H200 = _pool("decode", "h200-sxm", decode_batch=308.64, output_tokens_per_s=6_173.0)
# an aggregated design: each mixed pool prefills its own share of the traffic
TP8 = _pool("mixed", "b200", name="tp8", attn_tp=8.0, prefill_share=0.2, decode_batch=233.9,
            output_tokens_per_s=4_678.0, prefill_batch_requests=2.73, requests_per_s=4.17,
            prefill_busy_s=0.048, fresh_busy_s=0.048)  # fmt: skip
DPA = _pool("mixed", "b200", name="dpa", instances=4.0, prefill_share=0.35, decode_batch=384.8,
            output_tokens_per_s=30_786.0, prefill_batch_requests=21.8, requests_per_s=35.83,
            prefill_busy_s=0.0283, fresh_busy_s=0.0283)  # fmt: skip


def _runs(pipe: Pipeline, rate: float) -> tuple[Any, Any]:
    """The fluid model and the discrete-event reference at a constant ``rate`` for 10 minutes."""
    sc = Scenario(Arrivals(ArrivalKind.CONSTANT, rate), LENGTHS, horizon_s=600.0, warmup_s=200.0)
    fluid, _ = simulate_fluid(pipe, sc)
    des, _, _ = simulate_des(pipe, sc, seed=1)
    return fluid, des


def test_decode_pools_on_two_hardware_simulate_at_the_sum_of_their_capacities(catalog: Catalog) -> None:
    """The pools' capacities add up (each as it simulates alone), no instance rounded up; both
    simulators hold 0.9 of it and, at 1.1, decode at it while a backlog grows; the reference steps
    each pool at its own table (the H200 instance, full, at its own step: the slowest requests)."""
    params = load_params()
    both, _ = pipeline_of(_design(PREFILL, B200, H200), catalog, params)
    alone = [float(pipeline_of(_design(PREFILL, d), catalog, params)[0].decode_capacity(LENGTHS)[0])
             for d in (B200, H200)]  # fmt: skip
    cap = float(both.decode_capacity(LENGTHS)[0])
    assert cap == pytest.approx(sum(alone), rel=1e-9)
    assert cap < 0.7 * 2 * alone[0]  # where the H200 instance had counted as a second B200 one
    assert both.decode_instances[0] == 2.0 and both.slots[0] == pytest.approx((1581 + 308) / 2)
    assert both.decode_pool_slots[0].tolist() == [1581.0, 308.0]
    fluid, des = _runs(both, 0.9 * cap)
    assert fluid.stable[0] and des.stable[0]
    assert float(des.tpot_mean_s[0]) == pytest.approx(float(fluid.tpot_mean_s[0]), rel=0.05)
    h200_full = float(both.decode_pool_tables[0, 1, 308])
    assert float(des.tpot_p99_s[0]) == pytest.approx(h200_full, rel=0.03)
    assert float(fluid.tpot_mean_s[0]) < h200_full  # the mean over both pools' requests
    fluid, des = _runs(both, 1.1 * cap)
    assert not fluid.stable[0] and not des.stable[0]
    for run in (fluid, des):  # every slot full: the capacity, and not a request more
        assert float(run.output_tokens_per_s[0]) == pytest.approx(cap * OUTPUT, rel=0.01)


def test_mixed_pools_of_two_shapes_keep_their_capacity_and_prefill_shares(catalog: Catalog) -> None:
    """Two aggregated pools of different shapes and prefill shares: the table's capacity is the
    sum of theirs at their own shares, and its share their capacity-weighted mean; decode steps at
    each pool's table with no prefill over (1 - the prefill servers' busy share), so the traffic
    both simulators hold is where the pools' summed decode at that share meets it."""
    params = load_params()
    both, _ = pipeline_of(_design(TP8, DPA, topology="aggregated"), catalog, params)
    alone = [pipeline_of(_design(p, topology="aggregated"), catalog, params)[0] for p in (TP8, DPA)]
    caps = np.array([float(p.decode_capacity(LENGTHS)[0]) for p in alone])
    shares = np.array([0.2, 0.35])
    assert float(both.decode_capacity(LENGTHS)[0]) == pytest.approx(caps.sum(), rel=1e-9)
    assert float(both.prefill_time_share[0]) == pytest.approx(
        np.dot(caps / (1 - shares), shares) / (caps / (1 - shares)).sum(), rel=1e-9
    )
    assert both.decode_instances[0] == 5.0
    assert both.prefill_instances[0] == 5.0  # each instance prefills one prompt at a time
    raw = float((caps / (1 - shares)).sum())  # requests/s their decode holds with no prefill
    prefill = float(both.prefill_capacity()[0])
    most = raw / (1 + raw / prefill)  # rate = raw x (1 - rate / prefill capacity)
    fluid, des = _runs(both, 0.9 * most)
    assert fluid.stable[0] and des.stable[0]
    assert float(des.tpot_mean_s[0]) == pytest.approx(float(fluid.tpot_mean_s[0]), rel=0.05)
    fluid, des = _runs(both, 1.1 * most)
    assert not fluid.stable[0] and not des.stable[0]


def test_a_placed_decode_pool_simulates_at_the_capacity_the_milp_sized(catalog: Catalog) -> None:
    """A real solve whose decode batch is bound by HBM (100k-token prompts on H200): the MILP
    credits whole sequences, so the fluid model's slots (the batch's floor), the engine-level
    simulation's running cap (its ceiling) and the MILP's batch are one number, and the fluid's
    decode capacity is the pools' output tokens/s over the output length exactly. The MILP had
    credited 40.14 sequences an instance: the fluid's 40 slots carried 0.18% less (the MILP's
    capacity read unstable) and the engine's 41 ran past the TPOT target."""
    from dse.evaluation import design_of
    from dse.placement.plan import place
    from dse.placement.request import PlacementRequest, Topology
    from dse.sim.engine_latency import _deployments

    w = Workload(requests_per_s=5.0, input_tokens=100_000.0, output_tokens=1000.0)
    req = PlacementRequest(model="deepseek-v3", hardware=("h200-sxm",), workload=w, slo=Slo(20.0, 0.05),
                           topology=Topology.DISAGGREGATED)  # fmt: skip
    report = place(req, catalog=catalog)
    assert report.best is not None
    design = design_of(req, report.best)
    params = load_params()
    decode = [p for p in design.pools if p.role == "decode"]
    assert decode and all(p.decode_batch == np.floor(p.decode_batch) for p in decode)
    pipe, _ = pipeline_of(design, catalog, params)
    lengths = OutputLengths((1.0,), (w.output_tokens,))
    milp = sum(p.output_tokens_per_s for p in decode) / w.output_tokens
    assert float(pipe.decode_capacity(lengths)[0]) == pytest.approx(milp, rel=1e-9)
    assert pipe.decode_pool_slots[0].tolist() == [p.decode_batch for p in decode]
    (deployed, _, _), *_ = _deployments(design, catalog, params, 1.0)
    dep = deployed.pools[0][0]
    assert float(dep.max_batch[0]) == decode[0].decode_batch


def test_a_returning_turn_hands_off_its_whole_context(catalog: Catalog) -> None:
    """A returning turn hands decode its cached prefix and suffix (20,500 tokens here), a fresh
    prompt its 3,000: the pipeline's handoff times are in that ratio (the KV's fixed state aside,
    which DeepSeek-V3 has none of), as the placement's NIC rows count them. Every turn had handed
    a fresh prompt's KV, 6.8 times too little for a returning one."""
    from dse.workload import ThinkBin

    w = Workload(
        requests_per_s=40.0, input_tokens=3000.0, output_tokens=OUTPUT, returning_share=0.5,
        cached_prefix_tokens=20_000.0, suffix_tokens=500.0, think=(ThinkBin(1.0, 60.0),),
    )  # fmt: skip
    pre = replace(PREFILL, returning_per_s=20.0, midfill_busy_s=0.01)
    pipe, _ = pipeline_of(replace(_design(pre, B200), workload=w), catalog, load_params())
    fresh, back = float(pipe.handoff_s[0]), float(pipe.arrays("midfill_handoff_s")[0])
    assert fresh > 0 and back / fresh == pytest.approx(20_500.0 / 3000.0, rel=1e-9)


def test_a_placement_file_keeps_its_own_mtp_draft_depth_and_acceptance(catalog: Catalog) -> None:
    """A request placed with its own MTP draft depth and acceptance rate writes them in its JSON;
    ``dse simulate --placement`` had read the design at the engine profile's, the step it was
    sized at not the one simulated. A value outside its rule is bad input naming the field."""
    import json

    from dse.errors import InputError
    from dse.placement import PlacementRequest, Topology, place
    from dse.placement.serialize import report_to_dict
    from dse.sim.from_placement import design_from_doc

    req = PlacementRequest(
        model="deepseek-v3",
        hardware=("b200",),
        workload=Workload(requests_per_s=20.0, input_tokens=4000.0, output_tokens=1000.0),
        slo=Slo(ttft_s=2.0, tpot_s=0.05),
        topology=Topology.DISAGGREGATED,
        mtp=True,
        mtp_draft_tokens=3,
        mtp_accept_rate=0.5,
    )
    doc = json.loads(json.dumps(report_to_dict(place(req, catalog=catalog, with_shadow_prices=False))))
    design = design_from_doc(doc)
    assert (design.mtp, design.mtp_draft_tokens, design.mtp_accept_rate) == (True, 3, 0.5)
    for text in ("false", "no", 0):  # "false" had been read as true: MTP simulated unasked
        with pytest.raises(InputError, match="request.mtp = .*: must be true or false"):
            design_from_doc({**doc, "request": {**doc["request"], "mtp": text}})
    params = load_params()
    own = design.engine_of(params)
    assert (own.mtp_draft_tokens, own.mtp_accept_tokens) != (
        params.engine("trt").mtp_draft_tokens,
        params.engine("trt").mtp_accept_tokens,
    )
    doc["request"]["mtp_accept_rate"] = 1.5
    with pytest.raises(InputError, match=r"request\.mtp_accept_rate = 1\.5: must be between 0 and 1"):
        design_from_doc(doc, "place.json")


def test_a_placement_that_drops_kv_recomputes_it_in_both_simulations(catalog: Catalog) -> None:
    """DeepSeek-V3 on B200, 80% returning turns of 60,000-token prefixes, storage priced so that
    the placement drops some KV (a real HiGHS solve): its pools say how many turns they recompute
    (the class tiers' dropped turns, all of them), their reload seconds are the reloaded turns'
    alone, the engine-level check draws that share of recomputes, and the fluid model counts the
    prefill pool's servers in fresh prompts' worth of a forward. A dropped turn's recompute had
    been a reload delay in the check (TTFT p99 0.38 s where recomputes through the queue give
    0.78), and 128 servers of a 6-s forward in the fluid model (TTFT 2.5 s beside 0.32 s at p50)."""
    from dse.evaluation import design_of
    from dse.placement import PlacementRequest, Topology, place
    from dse.placement.request import Storage
    from dse.sim.engine_latency import _recompute_share, _reload_s
    from dse.workload import ThinkBin

    w = Workload(
        requests_per_s=40.0, input_tokens=2000.0, output_tokens=500.0, returning_share=0.8,
        cached_prefix_tokens=60_000.0, suffix_tokens=300.0, think=(ThinkBin(0.7, 20.0), ThinkBin(0.3, 300.0)),
    )  # fmt: skip
    req = PlacementRequest(
        model="deepseek-v3", hardware=("b200",), workload=w, slo=Slo(ttft_s=1.0, tpot_s=0.05),
        topology=Topology.DISAGGREGATED, network_kv_usd_per_tb_hour=1000.0,
        storage=Storage(dram_usd_per_tb=1e6, nvme_usd_per_tb=1e6),
    )  # fmt: skip
    report = place(req, catalog=catalog, with_shadow_prices=False)
    best = report.best
    assert best is not None
    dropped = sum(t.returning_per_s * t.share["drop"] for t in best.tiers)
    recomputing = [p for p in best.pools if p.recompute_per_s > 0]
    assert dropped > 1.0 and sum(p.recompute_per_s for p in best.pools) == pytest.approx(dropped, rel=1e-6)
    design = design_of(req, report.outcomes[0])
    assert _recompute_share(design) == pytest.approx(dropped / (0.8 * 40.0), rel=1e-6)
    # a pool that recomputes everything it takes back reloads nothing; the reloaded turns' mean
    assert all(np.isnan(p.reload_s) or p.recompute_per_s < p.returning_per_s for p in recomputing)
    assert _reload_s(design) < 0.1
    pipe, _ = pipeline_of(design, catalog, load_params())
    one = next(p for p in design.pools if p.recompute_per_s > 0)
    assert one.prefill_busy_s is not None and one.fresh_busy_s is not None
    assert one.prefill_busy_s > 2.0 * one.fresh_busy_s  # its recomputes cost more than fresh prompts
    assert float(pipe.arrays("midfill_s")[0]) < 1.5  # a forward at its load, not 128 prompts' worth
    import json

    from dse.errors import InputError
    from dse.placement.serialize import report_to_dict
    from dse.sim.from_placement import design_from_doc

    doc = json.loads(json.dumps(report_to_dict(report)))
    assert design_from_doc(doc).pools == design.pools  # the file carries what the check reads
    k = next(i for i, p in enumerate(doc["best"]["pools"]) if p["recompute_per_s"] > 0)
    doc["best"]["pools"][k]["recompute_per_s"] = doc["best"]["pools"][k]["returning_per_s"] * 2
    with pytest.raises(InputError, match=rf"best.pools\[{k}\].recompute_per_s = .*: must be at most"):
        design_from_doc(doc)


def test_prefill_pools_join_for_the_check_by_their_speed_not_their_mix() -> None:
    """The engine-level check joins prefill pools as the busiest one's shape. Pools of that shape
    count instance for instance, whatever their mix: 11 H200 TP8 instances recomputing dropped
    12,000-token prefixes (0.27 s a turn) beside 4 taking fresh prompts (0.04 s) are 15, not the
    4 + 11 x 0.04 / 0.27 = 6 of the headline study's trial that the check had queued to a TTFT
    p90 of 102 s. A pool of another shape counts by its busy seconds per fresh prompt."""
    from dse.sim.engine_latency import _one_prefill_pool

    fresh = _pool(
        "prefill", "h200-sxm", instances=4.0, requests_per_s=23.9, prefill_busy_s=0.04, fresh_busy_s=0.04
    )
    again = replace(fresh, instances=11.0, requests_per_s=16.1, returning_per_s=16.1, recompute_per_s=16.1,
                    prefill_busy_s=0.27, midfill_busy_s=0.27)  # fmt: skip
    one = _one_prefill_pool([fresh, again])
    assert (one.instances, one.requests_per_s, one.recompute_per_s) == (15.0, pytest.approx(40.0), 16.1)
    twice = replace(again, gpus=16.0, ep=16.0, fresh_busy_s=0.02)  # twice as fast a fresh prompt
    assert _one_prefill_pool([fresh, twice]).instances == 4.0 + 22.0


def test_the_simulate_line_counts_a_pipelined_pools_instances_as_placed() -> None:
    """A 16-GPU prefill instance of two pipeline stages runs in the simulators as two 8-GPU
    instances; ``dse simulate``'s first line says the one placed (it had said "prefill 2 x
    h100-sxm/16gpu-pp2-dpa-ep8", 32 GPUs where the placement has 16)."""
    from dse.cli.simulate_cmd import _design_line
    from dse.sim.from_placement import stage_replicas

    pp2 = stage_replicas(
        replace(PREFILL, name="h100-sxm/prefill/16gpu-pp2-dpa-ep8", instances=1.0, gpus=16.0), 2
    )
    assert (pp2.instances, pp2.gpus, pp2.stages) == (2.0, 8.0, 2.0)
    line = _design_line(_design(pp2, B200))
    assert "prefill 1 x b200/16gpu-pp2-dpa-ep8, decode 1 x b200/8gpu" in line, line


def test_each_attention_dp_rank_reloads_its_own_sessions_at_once(catalog: Catalog) -> None:
    """A session's KV comes back over the links of the GPUs that split it: one GPU's for DeepSeek
    on an attention-DP instance, whose ranks each reload their own sessions at once. 100 requests/s,
    95% returning with 100,000-token prefixes: the placed design holds in the fluid model, as its
    link rows priced it. With one reload at a time an instance, as before 2026-12-07, the reload
    stage took 9.6 times its capacity and the fluid model served 14.9 requests/s of 100."""
    from dse.evaluation import design_of
    from dse.placement import PlacementRequest, Topology, place
    from dse.workload import ThinkBin

    w = Workload(requests_per_s=100.0, input_tokens=2000.0, output_tokens=200.0, returning_share=0.95,
                 cached_prefix_tokens=100_000.0, suffix_tokens=64.0,
                 think=(ThinkBin(1.0, 600.0),))  # fmt: skip
    req = PlacementRequest(model="deepseek-v3", hardware=("b200",), workload=w,
                           slo=Slo(ttft_s=5.0, tpot_s=0.1), topology=Topology.DISAGGREGATED)  # fmt: skip
    report = place(req, catalog=catalog, with_shadow_prices=False)
    assert report.best is not None
    design = design_of(req, report.best)
    pipe, _ = pipeline_of(design, catalog, load_params())
    ranks = sum(p.instances / p.stages * p.gpus / p.attn_tp for p in design.pools if p.role == "prefill")
    assert float(pipe.arrays("reload_servers")[0]) == pytest.approx(ranks)
    assert ranks > sum(p.instances for p in design.pools if p.role == "prefill")  # the case: DP ranks
    sc = Scenario(Arrivals(ArrivalKind.CONSTANT, 100.0), OutputLengths((1.0,), (200.0,)), horizon_s=600.0,
                  warmup_s=200.0)  # fmt: skip
    fluid, _ = simulate_fluid(pipe, sc)
    assert bool(fluid.stable[0]) and float(fluid.requests_per_s[0]) == pytest.approx(100.0, rel=0.02)
