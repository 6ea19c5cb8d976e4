"""Attention-FFN units in one scale-up domain, through the placement and the simulators.

An expert instance and the attention instances that feed it, all in one GB200 NVL72 rack, send
their hidden states over NVLink (``dse.perf.afd.afd_in_domain``); the placement then counts their
bytes in no NIC budget and keeps each unit in its rack (``formulations.domains``), and the
simulators find the same unit from the design's instance counts. A unit wider than its domain
(a 64-GPU shape beside another on NVL72, any two 8-GPU instances on H200) keeps the NICs, as
before. Real catalog, performance model and HiGHS solves.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dse.catalog import Catalog
from dse.context import Context
from dse.perf.afd import SIDE_SHARE, afd_bytes_per_token
from dse.perf.params import load_params
from dse.perf.pool import build_pool
from dse.placement import PlacementRequest, Topology, place
from dse.placement.candidates import Candidates, build_candidates
from dse.placement.request import UnitOptions
from dse.units import GB, Precision
from dse.workload import Slo, Workload
from formulations.placement_check import residuals
from formulations.placement_data import Role
from formulations.solve import PlacementSolver

TRAFFIC = Workload(requests_per_s=100.0, input_tokens=2000.0, output_tokens=800.0)
SLO = Slo(ttft_s=2.0, tpot_s=0.05)


def _trial(hardware: str, shape: str, slo: Slo = SLO) -> PlacementRequest:
    """DeepSeek-V3 at 100 requests/s, attention-FFN on one decode shape, 64 tokens per expert GPU,
    at the target's pace alone: a search trial's placement."""
    return PlacementRequest(
        model="deepseek-v3", hardware=(hardware,), workload=TRAFFIC, slo=slo, topology=Topology.AFD,
        options=UnitOptions(decode_shapes=(shape,), ffn_tokens_per_gpu=(64.0,), tighter_paces=False),
    )  # fmt: skip


def _decode_rows(c: Candidates, domain: bool) -> tuple[int, int]:
    """The attention unit's and the FFN unit's index: across the NICs, or in one domain."""
    units = list(enumerate(c.units))
    att, ffn = (next(i for i, u in units if u.role is r and u.name.endswith("/nvlink") == domain)
                for r in (Role.ATTENTION, Role.FFN))  # fmt: skip
    return att, ffn


def test_a_unit_in_one_nvl72_rack_is_in_no_nic_budget_and_keeps_to_its_rack(catalog: Catalog) -> None:
    """16-GPU attention instances (2,345 sequences each, KV-bound) and 16-GPU expert instances
    (1,024): an attention instance and the three expert instances its batch takes make a 64-GPU
    unit inside a 72-GPU rack, so beside the units across the NICs come units in one domain
    (``.../nvlink``), whose FFN unit's hidden states count in no NIC budget. Across the NICs every
    byte waits 22 ms on RDMA in each 25 ms half-step, and the NIC budgets (the bytes over the 3 ms
    left) found no design: infeasible before. Now $318.24 an hour (two racks); the MILP's domain
    rows hold in the checker, and its NIC budget carries nothing: since 2026-12-06 no expert unit
    across the NICs is offered, its own NICs taking its 1,024 tokens' hidden states in 25.7 ms a
    step, past the 25 ms half (the NIC budget pools every instance's NICs), and so none with NICs
    a tenth as fast, at the same price."""
    params = load_params()
    req = _trial("gb200", "16gpu-dpa-ep16")
    c = build_candidates(req, Topology.AFD, catalog, params)
    att, ffn = _decode_rows(c, domain=True)
    far_att = next(i for i, u in enumerate(c.units) if u.role is Role.ATTENTION and "/nvlink" not in u.name)
    assert [u.name for u in c.units if u.role is Role.FFN] == ["gb200-nvl72/ffn/16gpu-dpa-ep16/b1024/nvlink"]
    (why,) = [e for e in c.exclusions if e.role == "ffn"]
    assert "1024 tokens' hidden states take 25.67 ms a step on an expert instance's NICs" in why.reason
    d = c.data
    assert d.afd_partner is not None and d.afd_partner[ffn] == att
    assert d.afd_attention_per_ffn is not None and d.afd_ffn_per_attention is not None
    assert (d.afd_attention_per_ffn[ffn], d.afd_ffn_per_attention[ffn]) == (1.0, 3.0)
    assert d.afd_units_per_domain is not None and d.afd_units_per_domain[ffn] == 1.0  # 16 + 3 x 16 of 72
    gb = np.asarray(d.afd_gb_per_token)
    assert gb[ffn] == 0.0  # in no NIC budget
    report = place(req, catalog=catalog, params=params, with_shadow_prices=False)
    (o,) = report.outcomes
    assert o.feasible and o.check is not None and o.check.ok, o.check
    assert o.result.solution is not None
    sol = o.result.solution
    x, racks = sol.instances, float(sol.sale_units[0])
    assert report.best is not None and report.best.usd_per_hour == pytest.approx(318.24)
    assert x[att] <= x[ffn] <= 3 * x[att] and x[ffn] / 3 <= racks  # the units in their racks
    g = residuals(d, sol)
    assert {"afd_beside_attention", "afd_beside_ffn", "afd_domains", "afd_fed"} <= set(g)
    nics = float((d.nic_gb_s * x)[[att, far_att]].sum())
    assert g["afd_attention"][0] == pytest.approx(-nics)  # the NIC budget carries nothing
    # NICs a tenth as fast: the units in one domain alone, at the same price
    gb200 = catalog.hardware("gb200")
    slow = replace(gb200, scale_out=replace(gb200.scale_out, nic_gbit_per_s_per_gpu=40.0))
    slower = build_candidates(req, Topology.AFD, catalog, params, hardware=[slow])
    solved = PlacementSolver().solve(slower.data)
    assert solved.solution is not None and solved.objective == pytest.approx(o.result.objective)
    moved = np.asarray(slower.data.afd_gb_per_token) * slower.data.decode_tok_s * solved.solution.instances
    assert moved.sum() == 0.0


@pytest.mark.parametrize(("hardware", "shape"), [("gb200", "64gpu-dpa-ep64"), ("h200", "8gpu-dpa-ep8")])
def test_a_unit_wider_than_its_domain_keeps_the_nic_budget(
    catalog: Catalog, hardware: str, shape: str
) -> None:
    """A 64-GPU attention instance and a 64-GPU expert instance (128 GPUs) on NVL72, and two 8-GPU
    instances on 8-GPU H200 nodes (TPOT 100 ms: at 50 ms H200's expert step is too slow), span
    domains: the FFN unit's bytes count in the NIC budgets as before (the fanned-out hidden
    states over the share of the step the RDMA waits leave), and the MILP has no domain rows
    (the same model as before)."""
    params = load_params()
    slo = replace(SLO, tpot_s=0.1)
    c = build_candidates(_trial(hardware, shape, slo), Topology.AFD, catalog, params)
    d = c.data
    assert d.afd_partner is None and d.afd_attention_per_ffn is None
    assert not any(u.name.endswith("/nvlink") for u in c.units)
    ffns = [i for i, u in enumerate(c.units) if u.role is Role.FFN]
    (ffn,) = ffns
    par = c.units[ffn].parallel
    pool = build_pool(
        catalog.model("deepseek-v3"), [catalog.hardware(hardware)], gpus=[par.gpus], attn_tp=[par.attn_tp],
        ep=[par.ep], weight_precision=[Precision.FP8], kv_precision=[Precision.FP8],
    )  # fmt: skip
    wait = 2.0 * catalog.model("deepseek-v3").layers * params.nic_a2a_latency_us * 1e-6
    usable = SIDE_SHARE - wait / slo.tpot_s
    assert float(np.asarray(d.afd_gb_per_token)[ffn]) == afd_bytes_per_token(pool)[0] / GB / usable


def test_an_attention_unit_across_the_nics_runs_what_its_own_nics_send_in_time(catalog: Catalog) -> None:
    """DeepSeek-V3 on B200 at TPOT 50 ms, 8-GPU attention-DP instances: HBM and the attention step
    would let one run thousands of sequences, but its own NICs send only a few hundred
    sequences' hidden states in its 25 ms half-step after the RDMA waits (each token fans out to
    every node its experts are on). Until session 57 only the design's NIC budget, pooled over
    every instance's NICs, bounded those sends, while the simulations step each instance on its
    own NICs. The attention unit now runs what its NICs send in time (the batch worked out here
    from the performance model); with NICs ten times as fast the attention step binds again, at a
    larger batch; and with NICs too slow for one sequence the unit is left out, with the figures."""
    from dse.perf.afd import afd_transfer_latency_s

    params = load_params()
    req = _trial("b200", "8gpu-dpa-ep8")
    hw = catalog.hardware("b200")

    def attention_batch(nic_gbit_s: float) -> float:
        nics = replace(hw, scale_out=replace(hw.scale_out, nic_gbit_per_s_per_gpu=nic_gbit_s))
        c = build_candidates(req, Topology.AFD, catalog, params, hardware=[nics])
        return next(u.decode_batch or 0.0 for u in c.units if u.role is Role.ATTENTION)

    pool = build_pool(
        catalog.model("deepseek-v3"), [hw], gpus=[8.0], attn_tp=[1.0], ep=[8.0],
        weight_precision=[Precision.FP8], kv_precision=[Precision.FP8],
    )  # fmt: skip
    per_seq = afd_bytes_per_token(pool)[0] / (pool.nic_bytes_per_s[0] * params.nic_eff * 8.0)
    room = SLO.tpot_s * SIDE_SHARE - float(afd_transfer_latency_s(pool, params)[0])
    nic = hw.scale_out.nic_gbit_per_s_per_gpu
    assert attention_batch(nic) == np.floor(room / per_seq) < 1000
    assert attention_batch(10.0 * nic) > 2 * attention_batch(nic)
    slow = replace(hw, scale_out=replace(hw.scale_out, nic_gbit_per_s_per_gpu=0.02))
    c = build_candidates(req, Topology.AFD, catalog, params, hardware=[slow])
    assert not any(u.role is Role.ATTENTION for u in c.units)
    (why,) = [e for e in c.exclusions if e.role == "attention"]
    one = per_seq * nic / 0.02 + SLO.tpot_s * SIDE_SHARE - room  # its bytes, then the waits
    said = f"one sequence's hidden states take {one * 1e3:.2f} ms a step on an attention instance's NICs"
    assert said in why.reason, why.reason


def test_the_simulators_step_the_placed_unit_over_nvlink_at_its_pace(catalog: Catalog) -> None:
    """The placed GB200 design, two attention and four expert instances of one shape in one
    domain (until 2026-12-06 three and five, across the NICs and in one domain alike): the
    engine-level simulation (a slice of it, one attention and two expert instances) and the fluid
    model's step table step the unit (an attention instance over two expert instances, 48 GPUs)
    over NVLink, as the placement put it (``.../nvlink``), within the TPOT the placement sized it
    for; the design holds in the engine-level simulation."""
    from dse.evaluation import design_of, engine_checks
    from dse.perf.serving import _decode_step
    from dse.sim.engine_latency import _deployments
    from dse.sim.from_placement import _step_table

    params = load_params()
    req = _trial("gb200", "16gpu-dpa-ep16")
    report = place(req, catalog=catalog, params=params, with_shadow_prices=False)
    best = report.best
    assert best is not None
    design = design_of(req, best)
    (deployed, _, _), *_ = _deployments(
        design, catalog, params, SLO.ttft_s + TRAFFIC.output_tokens * SLO.tpot_s
    )
    ((dep,),) = deployed.pools  # one attention pool, one expert pool
    assert dep.ffn is not None and dep.ffn_same_hardware is not None and bool(dep.ffn_same_hardware[0])
    att = sum(p.instances for p in best.pools if p.unit.role is Role.ATTENTION)
    ffn = [p for p in best.pools if p.unit.role is Role.FFN]
    assert {p.unit.parallel.label() for p in best.pools if p.unit.role in (Role.ATTENTION, Role.FFN)} == {
        "16gpu-dpa-ep16"
    }
    assert dep.ffn_instances is not None and (att, sum(p.instances for p in ffn)) == (2, 4)
    assert (float(dep.decode_instances[0]), float(dep.ffn_instances[0])) == (1.0, 2.0)  # the slice
    # at the most the expert instances carry, each attention instance below its 2,345
    carried = sum(p.instances * p.unit.decode_batch for p in ffn) / att
    cost, step = _decode_step(dep, params, np.array([carried]))
    assert cost.afd is not None and bool(cost.afd.in_domain[0])
    assert step[0] <= SLO.tpot_s
    # the fluid model's step table, at the same batch, steps alike
    pool = next(p for p in design.pools if p.role == "attention")
    _, table, _ = _step_table(design, pool, catalog, params)
    assert table[int(carried)] == pytest.approx(step[0], rel=1e-3)
    (check,) = engine_checks(report, Context(catalog, params, PlacementSolver()))
    assert check.holds and check.tpot_s is not None and check.tpot_s <= SLO.tpot_s, check
    assert float(afd_bytes_per_token(dep.ffn)[0]) > 0
