"""Attention units across the NICs sized for the widest expert units they feed.

An attention instance across the NICs sends each sequence's hidden states to every scale-up domain
its tokens' experts are on, so its own NICs send twice as much to a 16-GPU B200 expert instance
(two nodes) as to an 8-GPU one, and its batch is capped for a fan-out. The candidates offer an
attention shape once per fan-out level of the expert shapes across the NICs, and the placement
keeps every attention unit across the NICs within its reach of every expert unit across them
(``formulations.fan_out``), which the simulations need: they deal each attention pool's tokens
over all the expert pools across the NICs. Until session 58 each attention unit was capped for its
own shape's fan-out. Real catalog, performance model and HiGHS solves.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dse.catalog import Catalog
from dse.perf.afd import SIDE_SHARE, afd_bytes_per_token, afd_transfer_latency_s
from dse.perf.params import load_params
from dse.perf.pool import build_pool
from dse.placement import PlacementRequest, Topology
from dse.placement.candidates import build_candidates
from dse.placement.request import UnitOptions
from dse.units import Precision
from dse.workload import Slo, Workload
from formulations.fan_out import fan_carry, fan_members
from formulations.placement_check import check, residuals
from formulations.placement_data import Role
from formulations.solve import PlacementSolver

SLO = Slo(ttft_s=2.0, tpot_s=0.1)
SHAPES = ("8gpu-dpa-ep8", "16gpu-dpa-ep16", "32gpu-dpa-ep32")  # one, two and four B200 nodes
REQ = PlacementRequest(
    model="deepseek-v3", hardware=("b200",), topology=Topology.AFD, slo=SLO,
    workload=Workload(requests_per_s=100.0, input_tokens=2000.0, output_tokens=800.0),
    options=UnitOptions(decode_shapes=SHAPES, ffn_tokens_per_gpu=(16.0, 64.0), tighter_paces=False),
)  # fmt: skip


def test_an_attention_shape_across_the_nics_comes_once_per_expert_fan_out(catalog: Catalog) -> None:
    """DeepSeek-V3 on B200 at TPOT 100 ms, expert shapes of one, two and four nodes: three fan-out
    levels. The 8-GPU attention shape comes as three units across the NICs, each running what its
    NICs send in the 50 ms half-step after the RDMA waits to expert instances of its level (the
    batch worked out here from the performance model): 2,031 sequences for two nodes, 1,118 for
    four, and for one node more than both (until session 58, one unit capped for its own shape's
    single node, whichever expert instances it fed)."""
    params = load_params()
    c = build_candidates(REQ, Topology.AFD, catalog, params)
    assert c.data.afd_fan_level is not None
    level = {u.name: int(v) for u, v in zip(c.units, c.data.afd_fan_level, strict=True)}
    ffn = [u for u in c.units if u.role is Role.FFN]
    assert {(u.parallel.gpus, level[u.name]) for u in ffn} == {(8, 0), (16, 1), (32, 2)}
    att = [u for u in c.units if u.role is Role.ATTENTION and u.parallel.gpus == 8]
    names = ["b200/attention/8gpu-dpa-ep8", "b200/attention/8gpu-dpa-ep8/fanout2",
             "b200/attention/8gpu-dpa-ep8/fanout4"]  # fmt: skip
    assert [u.name for u in att] == names and [level[n] for n in names] == [0, 1, 2]

    def pool(gpus: float):  # type: ignore[no-untyped-def]
        return build_pool(
            catalog.model("deepseek-v3"), [catalog.hardware("b200")], gpus=[gpus], attn_tp=[1.0],
            ep=[gpus], weight_precision=[Precision.FP8], kv_precision=[Precision.FP8],
        )  # fmt: skip

    own = pool(8.0)
    room = SLO.tpot_s * SIDE_SHARE - float(afd_transfer_latency_s(own, params)[0])
    nics = float(own.nic_bytes_per_s[0]) * params.nic_eff * 8.0  # the attention instance's own
    sends = [np.floor(room / (float(afd_bytes_per_token(pool(g))[0]) / nics)) for g in (8.0, 16.0, 32.0)]
    batch = [u.decode_batch for u in att]
    assert batch[1:] == sends[1:] == [2031.0, 1118.0]
    assert sends[0] >= batch[0] > batch[1]


def test_a_design_feeds_no_expert_unit_beyond_its_attention_units_reach(catalog: Catalog) -> None:
    """The MILP's design keeps every attention unit across the NICs within its reach of every
    expert unit across them, and the checker agrees; one more 8-GPU attention instance capped for
    one node beside one more four-node expert instance breaks the rule, which the checker reports
    with the decode tokens/s the smaller side carries."""
    params = load_params()
    c = build_candidates(REQ, Topology.AFD, catalog, params)
    data = c.data
    assert len(fan_members(data)) == 2  # the two- and four-node levels
    result = PlacementSolver().solve(data)
    sol = result.solution
    assert sol is not None and check(data, sol).ok
    level, x = np.asarray(data.afd_fan_level), sol.instances
    used = x > 0.5
    att = used & (data.unit_role == Role.ATTENTION) & (level >= 0)
    ffn = used & (data.unit_role == Role.FFN) & (level >= 0)
    assert att.any() and ffn.any() and level[att].min() >= level[ffn].max()
    assert np.all(residuals(data, sol)["afd_fan_out"] <= 0.0)

    names = list(data.unit_names)
    narrow, wide = names.index("b200/attention/8gpu-dpa-ep8"), names.index("b200/ffn/32gpu-dpa-ep32/b2048")
    more = x.copy()
    more[[narrow, wide]] += 1.0
    broken = replace(sol, instances=more, sale_units=sol.sale_units + 5.0)  # room for both
    g = residuals(data, broken)["afd_fan_out"]
    carried = [min(w, n) for w, n in fan_carry(data, more)]
    assert g.tolist() == carried and min(carried) >= min(data.decode_tok_s[[narrow, wide]]) > 0
    found = [v for v in check(data, broken).violations if v.family == "afd_fan_out"]
    assert [v.index for v in found] == [0, 1]  # both levels above one node


def test_the_fan_out_rows_solve_alike_every_way(catalog: Catalog) -> None:
    """The levels' binaries through every path of the solver: a first solve through pyomo, a
    re-solve read straight from the parameters (``formulations.direct``), without the root start
    (whose rounding sets each level where its wide expert units carry any decode) and pyomo's own
    re-solve all give the same optimum, each checked; the shadow prices' LP, every binary fixed,
    prices the rule as a family of its own."""
    from formulations.solve import SolveOptions

    data = build_candidates(REQ, Topology.AFD, catalog, load_params()).data
    warm = PlacementSolver()
    first = warm.solve(data)
    others = [warm.solve(data), PlacementSolver(SolveOptions(root_start=False)).solve(data)]
    pyomo = PlacementSolver(SolveOptions(direct=False))
    pyomo.solve(data)
    others.append(pyomo.solve(data))
    for r in (first, *others):
        assert r.solution is not None and check(data, r.solution).ok
        assert r.objective == first.objective
    result, duals = warm.relaxed_duals(data, first.solution)
    assert result.solution is not None
    assert duals.keys() == residuals(data, first.solution).keys()
    assert duals["afd_fan_out"].shape == (2,)


def test_the_rows_bound_no_goodput_placement_below_its_reach(catalog: Catalog) -> None:
    """The most traffic $3,000 an hour of B200 serves at 0.5 requests/s of demand: thousands of
    times the demand its slot rows are first sized for. The levels' bound comes from what the
    budget buys, so the first round reaches what it reaches without the rows (5,036.8 times the
    demand); bounded by the demand, the narrow attention units' 1.9 million tokens/s had been held
    to 0.33 million, and the round reached 4,895 times it."""
    from dse.placement.request import Limits
    from formulations.fan_out import fan_cap
    from formulations.placement_data import Objective
    from formulations.slots import slot_rows

    req = replace(
        REQ, objective=Objective.GOODPUT, limits=Limits(budget_usd_hour=3000.0),
        workload=replace(REQ.workload, requests_per_s=0.5), options=UnitOptions(tighter_paces=False),
    )  # fmt: skip
    data = build_candidates(req, Topology.AFD, catalog, load_params()).data
    assert fan_members(data)
    ruled, free = PlacementSolver().solve(data), PlacementSolver().solve(replace(data, afd_fan_level=None))
    assert ruled.solution is not None and free.solution is not None
    assert (
        ruled.solution.scale == pytest.approx(free.solution.scale, rel=1e-9) and ruled.solution.scale > 5000.0
    )
    carried = max(max(pair) for pair in fan_carry(data, ruled.solution.instances))
    assert 1e6 < carried < fan_cap(data, slot_rows(data))
