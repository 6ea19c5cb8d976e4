"""The shadow prices of `dse place` against the placement LP solved again with the resource
changed as a catalog entry or a what-if variant changes it: the same units (a GB is 10^9 bytes,
the catalog's HBM capacity is GiB) and the same pricing of measured kernels."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, Cli

from dse.catalog import Catalog, Hardware
from dse.perf.params import PerfParams, load_params
from dse.placement import PlacementRequest, Topology
from dse.placement.candidates import build_candidates
from dse.placement.explain import ShadowPrice, shadow_prices
from dse.placement.plan import Context, _solve_topology
from dse.study.spec import Variant
from dse.study.variants import variant_hardware
from dse.workload import Slo, ThinkBin, Workload
from formulations.placement_data import Objective
from formulations.solve import PlacementSolver, SolveOptions

DISAGG = Topology.DISAGGREGATED


def _priced_and_moved(
    req: PlacementRequest, catalog: Catalog, params: PerfParams, resource: str, changed: Hardware
) -> tuple[ShadowPrice, float]:
    """The shadow price of ``resource`` at the best design, and how far the relaxed LP over that
    design's units falls (in $/hour) when its hardware is ``changed`` instead."""
    solver = PlacementSolver(SolveOptions(time_limit_s=30.0, mip_rel_gap=1e-4))
    outcome, cands = _solve_topology(req, DISAGG, Context(catalog, params, solver))
    sol = outcome.result.solution
    assert sol is not None
    (price,) = [p for p in shadow_prices(req, cands, sol, solver, catalog, params) if p.resource == resource]
    before, _ = solver.relaxed_duals(replace(cands.data, objective=Objective.COST), sol)
    data = build_candidates(req, DISAGG, catalog, params, hardware=[changed]).data
    after, _ = solver.relaxed_duals(replace(data, objective=Objective.COST), sol)
    return price, before.objective - after.objective


def test_the_hbm_capacity_price_is_per_gb_of_ten_to_the_nine_bytes(catalog: Catalog) -> None:
    """Returning turns whose KV rests in the decode pool's HBM: 4 GB (10^9 bytes) more per B200
    lowers the LP by 4 x the price. The price had been per GiB (the catalog's capacity unit,
    1.074 GB), 7% above the GB its label and the exports name."""
    think = (ThinkBin(0.6, 30.0), ThinkBin(0.3, 600.0), ThinkBin(0.1, 3600.0))
    workload = Workload(100.0, 4000.0, 1000.0, 0.5, 20000.0, 500.0, think)
    req = PlacementRequest("deepseek-v3", ("b200",), workload, Slo(2.0, 0.05, 50.0), DISAGG)
    b200 = catalog.hardware("b200")
    four_gb = replace(b200, hbm=replace(b200.hbm, capacity_gb=b200.hbm.capacity_gb + 4e9 / 2**30))
    price, saved = _priced_and_moved(req, catalog, load_params(), "hbm_capacity", four_gb)
    assert price.unit == "GB" and price.usd_per_hour > 0.0
    assert price.usd_per_hour == pytest.approx(saved / 4.0, rel=0.01)


def test_hbm_bandwidth_is_worth_its_measured_kernels_speed_up(catalog: Catalog) -> None:
    """With the measured kernel tier, +0.1 TB/s on H200 is priced as a what-if variant with that
    bandwidth is (its tables measured at H200's own and scaled): the price had read the tables at
    the new bandwidth as if measured there, and bandwidth was worth $0 an hour."""
    params = replace(load_params(), kernels="measured")
    req = PlacementRequest("deepseek-v3", ("h200-sxm",), Workload(200.0, 2000.0, 800.0),
                           Slo(20.0, 0.05, 90.0), DISAGG, engine="sglang")  # fmt: skip
    h200 = catalog.hardware("h200-sxm")
    assert h200.measured_kernels and h200.measured_hbm_tb_per_s is None
    scale = (h200.hbm.bandwidth_tb_per_s + 0.1) / h200.hbm.bandwidth_tb_per_s
    faster = replace(variant_hardware(h200, Variant("x", h200.id, hbm_bandwidth_scale=scale)), id=h200.id)
    price, saved = _priced_and_moved(req, catalog, params, "hbm_bandwidth", faster)
    assert saved > 0.0
    # a first-order price against a step of 0.1 TB/s: within the curvature of the step
    assert price.usd_per_hour == pytest.approx(saved / 0.1, rel=0.1)


def test_a_design_on_hardware_without_a_price_has_no_shadow_prices(cli: Cli) -> None:
    """VR200 has no price: a GPU-count placement on it saves no $/hour, and its prices had all
    come out $0 (bandwidth and capacity worth nothing, in the table, `--json` and a grid's export)."""
    args = ["place", "--model", "kimi-k3", "--hardware", "vr200", "--objective", "gpus", "--rate", "20",
            "--isl", "4000", "--osl", "1000", "--ttft", "2", "--tpot", "0.05",
            "--topology", "disaggregated"]  # fmt: skip
    r = cli(*args, "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["best"] is not None and doc["shadow_prices"] == []
    text = cli(*args)
    assert text.code == 0 and "shadow prices (LP" not in text.out
    # and the text says why there is no table (it had left it out without a word)
    assert "shadow prices: none (vr200-nvl144: no own_hyperscaler price, so no $/hour to save)" in text.out
    quiet = cli(*args, "--no-shadow-prices")  # none asked for: no word about them
    assert quiet.code == 0 and "shadow prices" not in quiet.out


def test_a_row_no_margin_moves_leaves_the_price_a_number() -> None:
    """A unit that cannot prefill has an infinite prefill-time row before and after a resource
    moves: the finite difference took inf - inf, so the price came out nan (seen in
    stage-memory-2027's Kimi K3 points on GB300 with 4x HBM, recorded as null prices, with
    numpy's RuntimeWarning on stderr). Such a row moves by no margin and is left out."""
    import warnings

    from dse.placement.explain import _moved_objective

    base = {"prefill_time": np.array([np.inf, 1.0]), "hbm": np.array([-2.0])}
    moved = {"prefill_time": np.array([np.inf, 0.5]), "hbm": np.array([-3.0])}
    duals = {"prefill_time": np.array([0.0, 4.0]), "hbm": np.array([2.0])}
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert _moved_objective(duals, moved, base) == pytest.approx(4.0 * -0.5 + 2.0 * -1.0)


def test_a_design_partly_on_hardware_without_a_price_names_only_that_hardware(
    cli: Cli, tmp_path: Path
) -> None:
    """A GPU-count design with one pool on B200 (priced) and one on a copy of it without prices
    (each capped at one 8-GPU node, so both are used): the line saying why there are no shadow
    prices named both hardware as having no price."""
    mine = tmp_path / "hardware"
    mine.mkdir()
    b200 = (REPO / "hardware_catalog" / "b200.toml").read_text()
    unpriced = "\n".join(
        line.replace('id = "b200"', 'id = "b200-unpriced"')
        for line in b200.splitlines()
        if not line.startswith(("usd_per_gpu_hour", "aliases"))
    )
    (mine / "b200-unpriced.toml").write_text(unpriced + "\n")
    r = cli("--catalog-dir", tmp_path, "place", "--model", "deepseek-v3",
            "--hardware", "b200,b200-unpriced", "--objective", "gpus", "--rate", "45",
            "--isl", "2000", "--osl", "500", "--ttft", "2", "--tpot", "0.05", "--topology",
            "disaggregated", "--inventory", "b200=8,b200-unpriced=8")  # fmt: skip
    assert r.code == 0, r.err
    pools = [line.split()[:2] for line in r.out.splitlines() if line.startswith(("prefill ", "decode "))]
    assert {hw for _, hw in pools} == {"b200", "b200-unpriced"}, r.out
    assert "shadow prices: none (b200-unpriced: no own_hyperscaler price, so no $/hour to save)" in r.out
