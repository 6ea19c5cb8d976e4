"""Total cost: the capex of the DRAM, NVMe and network storage resting KV fills, and energy in the
MILP's objective, from `dse place` flags and a study's [storage] and [energy] tables."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import Cli
from test_placement import SESSIONS
from test_placement_milp import instance

from dse.catalog import Catalog
from dse.placement import PlacementRequest, place
from dse.placement.request import Energy, Storage
from dse.study.spec import load_study
from dse.workload import Slo, Workload
from formulations.placement_check import cost_usd_hour, energy_usd_hour, objective_value, stored_gb
from formulations.placement_data import Role
from formulations.solve import PlacementSolver

PLACE = ["place", "--hardware", "b200", "--rate", "20", "--isl", "4000", "--osl", "1000",
         "--returning-share", "0.5", "--prefix", "20000", "--suffix", "500",
         "--think", "0.6:30,0.3:600,0.1:3600", "--ttft", "2", "--tpot", "0.05",
         "--no-shadow-prices", "--json"]  # fmt: skip


def test_storage_capex_is_per_gb_hour_over_its_years() -> None:
    s = Storage(dram_usd_per_tb=8760.0, nvme_usd_per_tb=876.0, network_usd_per_tb=0.0, years=1.0)
    assert s.usd_per_gb_hour("dram") == pytest.approx(1e-3)  # $8,760 a TB-year is $1 a TB-hour
    assert s.usd_per_gb_hour("nvme") == pytest.approx(1e-4)
    assert s.usd_per_gb_hour("network") == 0.0


def test_priced_dram_is_paid_for_and_moves_kv_elsewhere(catalog: Catalog) -> None:
    req = PlacementRequest(model="deepseek-v3", hardware=("b200",), workload=SESSIONS, slo=Slo(2.0, 0.05))
    free = place(req, catalog=catalog, with_shadow_prices=False).best
    assert free is not None
    dram_free = sum(t.stored_gb.get("dram", 0.0) for t in free.tiers)
    assert dram_free > 100.0  # free DRAM holds the long think times' sessions
    priced_req = replace(req, storage=Storage(dram_usd_per_tb=50_000.0, years=1.0))
    priced = place(priced_req, catalog=catalog, with_shadow_prices=False).best
    assert priced is not None and priced.check is not None and priced.check.ok
    dram = sum(t.stored_gb.get("dram", 0.0) for t in priced.tiers)
    assert dram < dram_free
    gpu_usd = sum(p.usd_per_hour for p in priced.pools) + sum(i.usd_per_hour for i in priced.idle)
    dram_usd = dram * priced_req.storage.usd_per_gb_hour("dram")
    assert priced.usd_per_hour == pytest.approx(gpu_usd + dram_usd, rel=1e-6)
    assert priced.usd_per_hour >= free.usd_per_hour - 1e-9


def test_each_pool_carries_the_kv_it_rests_below_hbm(catalog: Catalog) -> None:
    """The pools that take returning turns carry the KV they rest in DRAM (and NVMe, the network
    store), which adds up to the KV classes' (what deploy sizes each instance's host tier by, and
    the placements table's resting_<tier>_gb); decode pools rest none."""
    req = PlacementRequest(model="deepseek-v3", hardware=("b200",), workload=SESSIONS, slo=Slo(2.0, 0.05))
    best = place(req, catalog=catalog, with_shadow_prices=False).best
    assert best is not None
    for tier in ("dram", "nvme", "network"):
        classes = sum(t.stored_gb.get(tier, 0.0) for t in best.tiers)
        assert sum(p.resting_gb.get(tier, 0.0) for p in best.pools) == pytest.approx(
            classes, rel=1e-9, abs=1e-9
        )
    assert sum(p.resting_gb.get("dram", 0.0) for p in best.pools) > 100.0  # the case: KV in DRAM
    assert all(not p.resting_gb for p in best.pools if p.unit.role is Role.DECODE)


def test_sglangs_host_tier_rests_what_its_copy_of_the_gpu_pool_leaves(catalog: Catalog) -> None:
    """SGLang's hierarchical cache keeps a copy of each GPU's KV pool in its host pool, and leaves
    10 GiB of host memory free: a B200's 256 GB of DRAM rests what those leave. TensorRT-LLM's host
    cache keeps no copy. Priced on SGLang, the design rests no more in a pool's DRAM than that."""
    from dse.perf.latency_tables import SGLANG_HOST_RESERVE_GB
    from dse.perf.params import load_params
    from dse.placement.candidates import build_candidates
    from dse.placement.request import Topology

    trt = PlacementRequest(model="deepseek-v3", hardware=("b200",), workload=SESSIONS, slo=Slo(2.0, 0.05))
    sglang = replace(trt, engine="sglang")
    params = load_params()
    assert build_candidates(trt, Topology.DISAGGREGATED, catalog, params).data.unit_host_mirror_gb is None
    c = build_candidates(sglang, Topology.DISAGGREGATED, catalog, params)
    mirror = c.data.unit_host_mirror_gb
    assert mirror is not None
    usable = catalog.hardware("b200").hbm.usable_gib * 2**30 / 1e9 * (1 - params.hbm_reserve_fraction)
    for u, info in enumerate(c.units):
        want = usable - info.weights_gb_per_gpu + SGLANG_HOST_RESERVE_GB
        assert mirror[u] == pytest.approx(want, rel=1e-9), info.name
    assert np.allclose(c.data.dram_room_gb, np.maximum(256.0 - mirror, 0.0))
    best = place(sglang, catalog=catalog, with_shadow_prices=False).best
    assert best is not None and best.check is not None and best.check.ok
    for p in best.pools:
        room = max(256.0 - (usable - p.unit.weights_gb_per_gpu) - SGLANG_HOST_RESERVE_GB, 0.0)
        room *= p.unit.kv_shard * p.instances
        assert p.resting_gb.get("dram", 0.0) <= room * (1 + 1e-9), p.unit.name


def two_hardware(energy: np.ndarray | None) -> object:
    """The same units on two hardware: B costs a little more per GPU-hour, draws far less."""
    one = instance(rate=10.0)
    return replace(
        one,
        hw_names=("a", "b"),
        sale_gpus=np.array([8.0, 8.0]),
        usd_per_gpu_hour=np.array([2.0, 2.1]),
        watts_per_gpu=np.array([1000.0, 500.0]),
        inventory_gpus=np.array([np.inf, np.inf]),
        tier_gb_per_gpu=np.vstack([one.tier_gb_per_gpu] * 2),
        tier_gb_s_per_gpu=np.vstack([one.tier_gb_s_per_gpu] * 2),
        unit_names=("a/prefill", "a/decode", "b/prefill", "b/decode"),
        unit_hw=np.array([0, 0, 1, 1]),
        unit_role=np.array([Role.PREFILL, Role.DECODE] * 2),
        unit_gpus=np.tile(one.unit_gpus, 2),
        prefill_share=np.tile(one.prefill_share, 2),
        fresh_s=np.tile(one.fresh_s, 2),
        decode_tok_s=np.tile(one.decode_tok_s, 2),
        hbm_idle_gb=np.tile(one.hbm_idle_gb, 2),
        nic_gb_s=np.tile(one.nic_gb_s, 2),
        mid_s=np.tile(one.mid_s, (2, 1, 1)),
        reload_s=np.tile(one.reload_s, (2, 1, 1)),
        energy_usd_per_gpu_hour=energy,
    )


def test_energy_in_the_objective_picks_the_hardware_that_draws_less() -> None:
    plain = PlacementSolver().solve(two_hardware(None))
    assert plain.solution is not None and plain.solution.sale_units.tolist() == [4.0, 0.0]
    data = two_hardware(np.array([0.5, 0.25]))  # $/GPU-hour at full draw: A's 1 kW, B's 0.5 kW
    priced = PlacementSolver().solve(data)
    sol = priced.solution
    assert sol is not None and sol.sale_units.tolist() == [0.0, 4.0]
    assert cost_usd_hour(data, sol) == pytest.approx(32 * 2.1)  # the cost is what is bought
    assert energy_usd_hour(data, sol) == pytest.approx(32 * 0.25)
    assert objective_value(data, sol) == pytest.approx(32 * 2.1 + 32 * 0.25)
    assert stored_gb(data, sol, "dram") == 0.0


def test_the_site_energy_price_reaches_the_milp(catalog: Catalog) -> None:
    req = PlacementRequest(
        model="deepseek-v3",
        hardware=("b200", "h200-sxm"),
        workload=Workload(requests_per_s=20.0, input_tokens=4000.0, output_tokens=1000.0),
        slo=Slo(2.0, 0.05),
        energy=Energy(usd_per_kwh=0.2, pue=1.3),
    )
    from dse.perf.params import load_params
    from dse.placement.candidates import build_candidates

    params = load_params()
    data = build_candidates(req, req.topology.concrete()[0], catalog, params).data
    assert data.energy_usd_per_gpu_hour is not None
    b200 = catalog.hardware("b200")
    full_kw = b200.tdp_w * params.power.full / 1e3
    assert data.energy_usd_per_gpu_hour[0] == pytest.approx(full_kw * 1.3 * 0.2)


def test_place_flags_price_storage_and_refuse_bad_values(cli: Cli) -> None:
    free = json.loads(cli(*PLACE).out)["best"]
    priced = cli(*PLACE, "--dram-usd-per-tb", "50000", "--storage-years", "1")
    assert priced.code == 0, priced.err
    best = json.loads(priced.out)["best"]

    def dram(b: dict) -> float:
        return sum(t["stored_gb"].get("dram", 0.0) for t in b["tiers"])

    assert dram(best) < dram(free) and best["usd_per_hour"] >= free["usd_per_hour"]
    bad = cli(*PLACE, "--storage-years", "0")
    assert bad.code == 2 and "--storage-years = 0: must be > 0" in bad.err
    assert len(bad.err.strip().splitlines()) == 1


def test_a_study_reads_its_storage_table(tmp_path: Path, cli: Cli) -> None:
    spec = Path(__file__).parent / "data" / "tiny-study.toml"
    good = tmp_path / "priced.toml"
    good.write_text(spec.read_text().replace('name = "tiny-study"', 'name = "priced"')
                    + "\n[storage]\ndram_usd_per_tb = 4000\nyears = 5\n")  # fmt: skip
    loaded = load_study(str(good))
    assert loaded.storage.dram_usd_per_tb == 4000.0 and loaded.storage.years == 5.0
    bad = tmp_path / "bad.toml"
    bad.write_text(
        spec.read_text().replace('name = "tiny-study"', 'name = "bad"') + "\n[storage]\nyears = -1\n"
    )
    proc = cli("study", "show", str(bad))
    assert proc.code == 2 and "storage.years = -1" in proc.err


def test_a_study_says_what_of_its_cost_is_the_resting_kv_s_storage(tmp_path: Path, cli: Cli) -> None:
    """A study that prices [storage] counts the resting KV's host DRAM, NVMe and network store in
    its usd_per_hour, which the best design's line had given as the price tier's alone beside pools
    that sum to less (24 B200 at $46.80 an hour, and $48.45: $1.65 of NVMe)."""
    shipped = Path(__file__).parent.parent / "studies" / "deepseek-v3-blackwell.toml"
    spec = tmp_path / "priced-storage.toml"
    spec.write_text(shipped.read_text().replace('name = "deepseek-v3-blackwell"', 'name = "priced-storage"')
                    + "\n[storage]\nnvme_usd_per_tb = 20000.0\ndram_usd_per_tb = 30000.0\n"
                    "network_usd_per_tb = 50000.0\nyears = 1\n")  # fmt: skip
    run = cli("study", "run", str(spec), "--trials", "6", "--out", tmp_path / "runs", "--no-export")
    assert run.code == 0, run.err
    line = next(x for x in run.out.splitlines() if x.startswith("best design by "))
    said = re.search(r"\$([\d,.]+)/hour \(own_hyperscaler; \$([\d.]+) of it the resting KV's storage\)", line)
    assert said is not None, line
    total, storage = (float(x.replace(",", "")) for x in said.groups())
    pools = re.findall(r"^(?:prefill|decode|mixed|idle)\s.*\s([\d.]+)$", run.out, flags=re.M)
    assert storage > 0 and total - storage == pytest.approx(sum(float(p) for p in pools), abs=0.02), run.out
    # each trial's storage is a column of its own (BI tools had only usd_per_hour, storage inside)
    from dse.study import Study

    trials = Study.load(str(spec)).results(out=tmp_path / "runs").trials
    assert trials["storage_usd_per_hour"].drop_nulls().min() >= 0  # type: ignore[operator]
    best = trials.filter(pl.col("trial") == int(line.split("trial ")[1].split(":")[0]))
    assert best["storage_usd_per_hour"][0] == pytest.approx(storage, abs=0.005)
