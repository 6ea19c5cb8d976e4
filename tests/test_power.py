"""Power at load and energy per token: the GPU power model, its fit, and what place and studies report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import Cli

from dse.catalog import Catalog
from dse.perf.params import PowerParams, load_params
from dse.perf.power import gpu_power_w, kwh_per_million_tokens, step_busy

PLACE = ("place", "--hardware", "b200,h200", "--rate", "20", "--isl", "4000", "--osl", "1000",
         "--ttft", "2", "--tpot", "0.05", "--no-shadow-prices", "--json")  # fmt: skip


def test_a_gpu_draws_more_the_busier_its_kernels() -> None:
    p = PowerParams(idle=0.3, full=0.8)
    watts = gpu_power_w(1000.0, np.array([0.0, 0.5, 1.0, 2.0]), p)
    assert watts.tolist() == pytest.approx([300.0, 550.0, 800.0, 800.0])  # busy is a share: at most 1
    assert step_busy(6.0, 2.0, 2.0, 10.0) == pytest.approx(0.5)  # the overhead waits on the host
    assert kwh_per_million_tokens(10.0, 1000.0) == pytest.approx(10.0 * 1e6 / 3.6e6)


def test_the_shipped_fit_is_the_measured_power_within_its_error() -> None:
    """The shares come from the runs that report their power (MI355X's), with provenance."""
    params = load_params()
    prov = params.provenance["power"]
    assert prov["hardware"] == ["mi355x"] and prov["rows"] == 10
    assert 0.0 < params.power.idle < params.power.full <= 1.0
    assert prov["in_sample_median_ape"] < 0.15


def test_place_reports_power_and_prices_energy_on_top(cli: Cli) -> None:
    free = cli(*PLACE)
    assert free.code == 0, free.err
    e0 = json.loads(free.out)["best_energy"]
    assert e0["power_kw"] > 0 and e0["energy_usd_per_hour"] == 0.0
    facility = json.loads(cli(*PLACE, "--pue", "1.25").out)["best_energy"]  # unpriced: the same design
    assert facility["power_kw"] == pytest.approx(1.25 * e0["power_kw"])  # the facility's, at PUE 1.25
    priced = cli(*PLACE, "--usd-per-kwh", "0.1", "--pue", "1.25")  # the MILP now weighs energy too
    assert priced.code == 0, priced.err
    doc = json.loads(priced.out)
    e1, best = doc["best_energy"], doc["best"]
    assert e1["energy_usd_per_hour"] == pytest.approx(0.1 * e1["power_kw"])
    with_energy = (best["usd_per_hour"] + e1["energy_usd_per_hour"]) / (3600.0 * best["tokens_per_s"]) * 1e6
    assert e1["usd_per_million_tokens"] == pytest.approx(with_energy)
    assert e1["kwh_per_million_tokens"] == pytest.approx(
        e1["power_kw"] * 1e6 / (3600.0 * best["tokens_per_s"])
    )
    text = cli(*PLACE[:-1], "--usd-per-kwh", "0.1").out
    assert "power at load: " in text and "at $0.1/kWh" in text
    # counting the GPUs of hardware without a price: no $/M tokens with the energy ("$nan" had read)
    unpriced = ["place", "--hardware", "vr200-nvl144", "--rate", "20", "--isl", "4000", "--osl", "1000"]
    unpriced += ["--ttft", "2", "--tpot", "0.05", "--objective", "gpus", "--usd-per-kwh", "0.1"]
    said = cli(*unpriced)
    assert said.code == 0, said.err
    assert "nan" not in said.out and "(no $/M tokens with it: a GPU has no own_hyperscaler price)" in said.out
    bad = cli(*PLACE, "--pue", "0.9")
    assert bad.code == 2 and "--pue = 0.9: must be at least 1" in bad.err


def test_a_study_records_power_and_its_energy_terms_are_checked(
    cli: Cli, tiny_cli_run: object, tmp_path: Path
) -> None:
    import polars as pl

    trials = pl.read_parquet(tmp_path / "tiny-study" / "exports" / "trials")
    feasible = trials.filter(pl.col("feasible"))
    assert (feasible["power_kw"] > 0).all() and (feasible["kwh_per_million_tokens"] > 0).all()
    assert (feasible["energy_usd_per_hour"] == 0).all()  # the tiny study prices no energy
    spec = Path(__file__).parent / "data" / "tiny-study.toml"
    bad = tmp_path / "bad.toml"
    bad.write_text(spec.read_text() + "\n[energy]\npue = 0.5\n")
    proc = cli("study", "show", str(bad))
    assert proc.code == 2 and "energy.pue = 0.5: must be at least 1" in proc.err


def test_a_prefill_pool_that_serves_nothing_draws_its_idle_power(catalog: Catalog) -> None:
    """A prefill pool the MILP keeps but sends no request to (its busy time per request is nan)
    idles: it draws what the same pool at 0 requests/s with a known busy time does, its GPUs'
    idle power, not its full step's."""
    from dataclasses import replace

    from dse.context import Context
    from dse.design_power import power_metrics, stage_split
    from dse.placement import PlacementRequest, Topology, place
    from dse.placement.plan import IdleGpus
    from dse.workload import Slo, Workload
    from formulations.solve import PlacementSolver

    params = load_params()
    req = PlacementRequest(
        model="deepseek-v3",
        hardware=("b200",),
        workload=Workload(requests_per_s=20.0, input_tokens=4000.0, output_tokens=1000.0),
        slo=Slo(ttft_s=2.0, tpot_s=0.05, percentile=90.0),
        topology=Topology.DISAGGREGATED,
    )
    ctx = Context(catalog, params, PlacementSolver())
    best = place(req, catalog=ctx.catalog, params=params, with_shadow_prices=False).best
    assert best is not None
    pre = next(p for p in best.pools if p.unit.role.hands_off)
    stages = stage_split(req, best.pools, ctx)

    def power_with(prefill: object) -> float:
        pools = tuple(prefill if p is pre else p for p in best.pools)
        kw = power_metrics(req, replace(best, pools=pools), stages, ctx)["power_kw"]
        assert kw is not None
        return kw

    nothing = power_with(replace(pre, requests_per_s=0.0, prefill_busy_s=float("nan")))
    assert nothing == pytest.approx(power_with(replace(pre, requests_per_s=0.0)), rel=1e-12)
    others = tuple(p for p in best.pools if p is not pre)
    without = power_metrics(req, replace(best, pools=others), stages, ctx)["power_kw"]
    idle_kw = pre.gpus * ctx.catalog.hardware(pre.unit.hardware).tdp_w * params.power.idle / 1e3
    assert without is not None and nothing - without == pytest.approx(idle_kw, rel=1e-9)
    assert power_with(pre) > nothing  # serving, it draws more than idling
    # the same GPUs as idle GPUs (bought, no pool on them: what read_back makes of a unit sent no
    # request) draw the same; they had drawn nothing
    spare = (IdleGpus(pre.unit.hardware, pre.gpus, pre.usd_per_hour, 8),)
    as_idle = power_metrics(req, replace(best, pools=others, idle=spare), stages, ctx)["power_kw"]
    assert as_idle == pytest.approx(nothing, rel=1e-12)


def test_a_decode_pools_stage_split_with_mtp_is_the_step_it_was_priced_at(catalog: Catalog) -> None:
    """With MTP a decode step verifies the drafts too (batch x (1 + drafts) tokens) and runs the
    draft layers: the split had priced the batch alone without them, 46.9 ms of a step the pool
    was sized at 113.5 ms (TPOT 49.97 ms x 2.27 tokens a step), in study trials' stage columns and
    stage_breakdown.png."""
    from dse.context import Context
    from dse.design_power import stage_split
    from dse.perf.params import with_mtp
    from dse.placement import PlacementRequest, Topology, place
    from dse.workload import Slo, Workload
    from formulations.solve import PlacementSolver

    params = load_params()
    req = PlacementRequest(
        model="deepseek-v3",
        hardware=("b200",),
        workload=Workload(requests_per_s=20.0, input_tokens=4000.0, output_tokens=1000.0),
        slo=Slo(ttft_s=2.0, tpot_s=0.05),
        topology=Topology.DISAGGREGATED,
        mtp=True,
    )
    ctx = Context(catalog, params, PlacementSolver())
    best = place(req, catalog=catalog, params=params, with_shadow_prices=False).best
    assert best is not None
    dec = next(p for p in best.pools if not p.unit.role.hands_off)
    split = stage_split(req, best.pools, ctx)
    step_ms = sum(next(v for k, v in split.items() if k.startswith("decode")).values())
    per_step = with_mtp(params.engine(req.engine), None, None).mtp_accept_tokens
    assert step_ms == pytest.approx(1e3 * float(dec.unit.tpot_s) * per_step, rel=0.01)


def test_a_power_that_is_no_gpus_is_left_out_and_the_fit_stays_within_the_tdp(catalog: Catalog) -> None:
    """MI355X's runs with their power per node (eight GPUs') had been fitted as 185% of the TDP,
    which no command then loads (the power model's rule: a fraction of the TDP in (0, 1]); in
    kilowatts, as 5% of it idle and full. Such cells are now left out and said; and a fit whose
    runs sit at the TDP keeps its full power within it."""
    from dataclasses import replace

    from dse.calibration import fit as cal
    from dse.calibration.power import fit_power, per_gpu_power
    from dse.paths import MEASURED_RUNS

    data, _ = cal.read_measured(MEASURED_RUNS, catalog)
    params = load_params()
    powered = [m for m in data if (m.raw.get("avg_power_w") or "").strip()]
    assert len(per_gpu_power(powered, catalog)[0]) == len(powered) >= 5  # the shipped runs: all a GPU's

    def scaled(k: float) -> list[cal.Measured]:
        return [
            replace(m, raw={**m.raw, "avg_power_w": str(float(m.raw["avg_power_w"]) * k)}) for m in powered
        ]

    for k, said in ((8.0, "a node's or a server's, not a GPU's?"), (1e-3, "kilowatts, not watts?")):
        runs, notes = per_gpu_power(scaled(k), catalog)
        assert runs == [] and len(notes) == len(powered) and fit_power(scaled(k), catalog, params) is None
        assert "avg_power_w = " in notes[0] and said in notes[0] and "(left out;" in notes[0], notes[0]
    tdp = catalog.hardware(powered[0].row.hardware).tdp_w
    at_tdp = [replace(m, raw={**m.raw, "avg_power_w": str(1.08 * tdp)}) for m in powered]
    fitted = fit_power(at_tdp, catalog, params)
    assert fitted is not None and 0 < fitted.params.idle <= fitted.params.full <= 1.0
