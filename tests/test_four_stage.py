"""Four stages as pools: a midfill pool for returning turns beside prefill and the split decode
(attention, experts), placed by the MILP where it pays, in `dse place`, studies and their tables."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import Cli

from dse.catalog import Catalog
from dse.perf.params import load_params
from dse.placement import PlacementRequest, Topology, place
from dse.placement.candidates import build_candidates
from dse.placement.request import UnitOptions
from dse.study import Study
from dse.workload import Slo, ThinkBin, Workload
from formulations.placement_data import TIERS, Role
from formulations.solve import PlacementSolver

pytestmark = pytest.mark.e2e  # placements with 100-150 units and a study run: beside the quick tests

# agent sessions: most requests are later turns on a long prefix that rests for minutes, and the
# TTFT target leaves a returning turn little time to bring it back from host DRAM or storage
AGENTS = Workload(
    requests_per_s=200.0,
    input_tokens=2000.0,
    output_tokens=800.0,
    returning_share=0.8,
    cached_prefix_tokens=100_000.0,
    suffix_tokens=2000.0,
    think=(ThinkBin(0.5, 300.0), ThinkBin(0.5, 1800.0)),
)
SLO = Slo(ttft_s=1.0, tpot_s=0.05)
# at TTFT 0.355 s no 4-GPU instance brings a returning turn back in time (its midfill of 2,000
# tokens against the 100k prefix, the hand-off and the engines' fitted front end take more), so
# with prefill on 4-GPU instances the returning turns need a midfill pool of larger ones (0.4 s
# before the calibration of 2026-12-05 put the fitted hand-off at 65 ms, not 110)
TIGHT = Slo(ttft_s=0.355, tpot_s=0.05)
SPLIT = UnitOptions(
    prefill_shapes=("4gpu-dpa-ep4",),
    midfill_shapes=("16gpu-dpa-ep16",),
    decode_shapes=("4gpu-dpa-ep2", "8gpu-dpa-ep8"),
)
FLAGS = [
    "place", "--hardware", "b200", "--rate", "200", "--isl", "2000", "--osl", "800",
    "--returning-share", "0.8", "--prefix", "100000", "--suffix", "2000", "--think", "0.5:300,0.5:1800",
    "--ttft", "0.355", "--tpot", "0.05", "--shapes", "4gpu-dpa-ep2,8gpu-dpa-ep8", "--prefill-shapes",
    "4gpu-dpa-ep4", "--midfill-shapes", "16gpu-dpa-ep16",
]  # fmt: skip
DRAM = TIERS.index("dram")


def request(
    topology: Topology, workload: Workload = AGENTS, slo: Slo = SLO, options: UnitOptions | None = None
) -> PlacementRequest:
    return PlacementRequest(
        model="deepseek-v3", hardware=("b200",), workload=workload, slo=slo, topology=topology,
        options=options or UnitOptions(),
    )  # fmt: skip


@pytest.fixture(scope="module")
def both(catalog: Catalog) -> dict[Topology, object]:
    rep = {
        t: place(request(t, slo=TIGHT, options=SPLIT), catalog=catalog, with_shadow_prices=False)
        for t in (Topology.AFD, Topology.FOUR_STAGE)
    }
    return {t: r.best for t, r in rep.items()}


def test_a_midfill_pool_takes_returning_turns_only_and_hands_them_to_decode(both: dict) -> None:
    four = both[Topology.FOUR_STAGE]
    assert four is not None and four.check is not None and four.check.ok, four.check
    roles = {p.unit.role for p in four.pools}
    assert {Role.PREFILL, Role.MIDFILL, Role.ATTENTION, Role.FFN} <= roles
    served = sum(p.requests_per_s for p in four.pools if p.unit.role is Role.MIDFILL)
    returning = sum(p.returning_per_s for p in four.pools if p.unit.role is Role.MIDFILL)
    assert served == pytest.approx(returning, rel=1e-9)
    for p in four.pools:
        if p.unit.role is Role.MIDFILL:
            assert p.unit.ttft_s <= SLO.ttft_s + 1e-9


def test_the_milp_gives_midfill_units_no_fresh_prompt(catalog: Catalog) -> None:
    req = request(Topology.FOUR_STAGE, slo=TIGHT, options=SPLIT)
    c = build_candidates(req, Topology.FOUR_STAGE, catalog, load_params())
    mid = [u for u, info in enumerate(c.units) if info.role is Role.MIDFILL]
    assert mid and np.isinf(c.data.fresh_s[mid]).all()
    sol = PlacementSolver().solve(c.data).solution
    assert sol is not None
    assert float(sol.fresh[mid].sum()) == 0.0 and float(sol.returning[mid].sum()) > 0.0


def test_four_stage_never_costs_more_than_attention_ffn_alone(both: dict, catalog: Catalog) -> None:
    """Its units are the attention-FFN design's plus midfill units: the optimum can only fall.
    With prefill on 4-GPU instances at TTFT 0.355 s, attention-FFN alone has no design at all."""
    assert both[Topology.AFD] is None and both[Topology.FOUR_STAGE] is not None
    afd, four = (place(request(t), catalog=catalog, with_shadow_prices=False).best
                 for t in (Topology.AFD, Topology.FOUR_STAGE))  # fmt: skip
    assert afd is not None and four is not None
    assert four.usd_per_hour <= afd.usd_per_hour * (1 + 1e-4)


def test_prefill_units_may_run_slower_to_reload_from_dram_in_time(catalog: Catalog) -> None:
    """At TTFT 0.65 s, at the load that fits the fastest way back, a 100k-token prefix cannot come
    back from host DRAM in time on 4-GPU instances (tensor-parallel and attention-DP, four shapes);
    a second unit of the same shape runs at a lower load that can. A third takes fresh prompts only,
    at a higher load. (0.7 s before the fitted hand-off went from 110 to 65 ms; 0.655 s until it
    went to 60 ms, where the fresh unit of one shape came to the first one's load; 0.635 s until the
    refit of c3e51c0 put it at 100 ms and the front end at 75; 0.665 s until session 54's refit put
    it at 85 ms, where only 8gpu-dpa-ep8 split: of the targets 0.6-0.8 s by 5 ms, 0.605-0.61, 0.63,
    0.645-0.66, 0.675, 0.695-0.7, 0.725-0.735, 0.76, 0.77 and 0.785 s show all three in two shapes
    or more now, and 0.645-0.655 and 0.725-0.73 s in 4-GPU shapes only, tensor-parallel and DP.
    Since session 61 a session reloads over the links of the GPUs that split its KV, not all the
    instance's: more shapes split, not each with a fresh unit of its own; at 0.65 s six show all
    three, 4-GPU tensor-parallel and DP among them.)"""
    c = build_candidates(request(Topology.AFD, slo=Slo(0.65, 0.05)), Topology.AFD, catalog, load_params())
    d = c.data
    by_shape: dict[str, list[int]] = {}
    for u, info in enumerate(c.units):
        if info.role is Role.PREFILL:
            by_shape.setdefault(f"{info.hardware}/{info.parallel.label()}", []).append(u)
    split = [us for us in by_shape.values() if not np.isfinite(d.mid_s[us[0], 0, DRAM])]
    shown = []
    for us in split:
        slower = [u for u in us[1:] if np.isfinite(d.mid_s[u, 0, DRAM])]
        first = d.prefill_share[us[0]]
        assert all(d.prefill_share[u] <= first for u in slower)  # slower, never faster (shares cap at 1)
        fresh = [u for u in us if c.units[u].name.endswith("/fresh")]
        assert all(np.isinf(d.mid_s[f]).all() and d.prefill_share[f] >= first for f in fresh)
        if any(d.prefill_share[u] < first for u in slower) and any(d.prefill_share[f] > first for f in fresh):
            shown.append(c.units[us[0]].parallel.label())
    assert len(shown) >= 2 and {"4gpu-tp4-ep4", "4gpu-dpa-ep4"} <= set(shown), shown


def test_without_returning_turns_four_stage_is_attention_ffn(catalog: Catalog) -> None:
    fresh = Workload(requests_per_s=20.0, input_tokens=4000.0, output_tokens=1000.0)
    c = build_candidates(request(Topology.FOUR_STAGE, fresh), Topology.FOUR_STAGE, catalog, load_params())
    afd = build_candidates(request(Topology.AFD, fresh), Topology.AFD, catalog, load_params())
    assert [u.name for u in c.units] == [u.name for u in afd.units]
    assert any(e.role == "midfill" and "no returning turns" in e.reason for e in c.exclusions)


def test_place_cli_shows_the_midfill_pool(cli: Cli) -> None:
    out = cli(*FLAGS, "--topology", "four-stage")
    assert out.code == 0, out.err
    rows = [
        line.split()[0]
        for line in out.out.splitlines()
        if line.startswith(("prefill", "midfill", "attention", "ffn"))
    ]
    assert {"prefill", "midfill", "attention", "ffn"} <= set(rows)
    doc = json.loads(cli(*FLAGS, "--topology", "four-stage", "--json").out)
    assert "midfill" in {p["unit"]["role"] for p in doc["best"]["pools"]}


def test_a_four_stage_study_records_the_midfill_pool_in_its_tables(tmp_path: Path) -> None:
    toml = Path(__file__).parent.parent / "studies" / "deepseek-v3-blackwell.toml"
    text = toml.read_text()
    text = text.replace('name = "deepseek-v3-blackwell"', 'name = "four-stage-agents"')
    text = text.replace('topologies = ["aggregated", "disaggregated"]', 'topologies = ["four-stage"]')
    text = text.replace("[search.aggregated]\nprefill_share = [0.05, 0.5]\n", "")  # no aggregated designs
    text = text.replace('hardware = ["b200", "gb200-nvl72", "h200-sxm"]', 'hardware = ["b200"]')
    text = text.replace("requests_per_s = 40.0", "requests_per_s = 200.0")
    text = text.replace("input_tokens = 3000.0", "input_tokens = 2000.0")
    text = text.replace("returning_share = 0.4", "returning_share = 0.8")
    text = text.replace("cached_prefix_tokens = 12000.0", "cached_prefix_tokens = 100000.0")
    text = text.replace("suffix_tokens = 400.0", "suffix_tokens = 2000.0")
    text = text.replace("{ share = 0.7, dwell_s = 60.0 }, { share = 0.3, dwell_s = 900.0 }",
                        "{ share = 0.5, dwell_s = 300.0 }, { share = 0.5, dwell_s = 1800.0 }")  # fmt: skip
    text = text.replace("ttft_s = 2.0", "ttft_s = 0.355")
    # prefill on 4-GPU instances cannot bring the returning turns back in time (SPLIT, above):
    # the study's midfill shapes can ([search.midfill])
    text = text.replace("percentile = 90.0", "percentile = 50.0")
    prefill = 'shapes = ["8gpu-tp8-ep8", "8gpu-dpa-ep8", "16gpu-dpa-ep16"]'
    text = text.replace(prefill, 'shapes = ["4gpu-dpa-ep4"]')
    text = text.replace(
        "chunk_tokens = [4096, 8192, 16384]",
        'chunk_tokens = [8192]\n\n[search.midfill]\nshapes = ["16gpu-dpa-ep16"]',
    )
    text = text.replace('shapes = ["8gpu-dpa-ep8", "16gpu-dpa-ep16", "32gpu-dpa-ep32", "64gpu-dpa-ep64"]',
                        'shapes = ["8gpu-dpa-ep8"]')  # fmt: skip
    spec = tmp_path / "four-stage-agents.toml"
    spec.write_text(text)
    res = Study.load(str(spec)).run(trials=6, out=tmp_path / "runs")
    assert set(res.trials["p_topology"].drop_nulls().to_list()) == {"four-stage"}
    assert res.trials["p_midfill_hardware"].drop_nulls().len() == res.trials.height
    from dse.cli.study_cmd import _write_all

    _write_all(res, tmp_path / "runs")
    placements = pl.read_parquet(tmp_path / "runs" / "four-stage-agents" / "exports" / "placements")
    assert "midfill" in set(placements["role"].to_list())


@pytest.mark.parametrize("topology", ["afd", "four-stage"])
def test_deploy_refuses_split_decode_designs_by_name(topology: str, catalog: Catalog) -> None:
    from dse.deploy.design import design_of
    from dse.errors import InputError

    spec = Study.load("deepseek-v3-blackwell").spec
    with pytest.raises(InputError, match="attention-FFN disaggregated design"):
        design_of(spec, 3, {"choice": {"topology": topology}}, catalog, load_params())
