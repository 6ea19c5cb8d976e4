"""What a study's trials keep between them (``dse.placement.shapes.shapes_of``, the prefill units
of ``dse.placement.candidates``, the fluid runs of ``dse.sim.simulation``): every record the same
to the bit as with everything built afresh, the work done once where trials differ only in what it
does not read, and the keys naming every field of the request the builders read."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import optuna
import pytest

from dse.catalog import Catalog
from dse.perf.params import load_params
from dse.placement import candidates, shapes
from dse.placement.candidates import _Builder
from dse.placement.request import Topology
from dse.sim import simulation
from dse.study.choice import Choice, suggest
from dse.study.runner import TRIAL_SOLVE
from dse.study.spec import StudySpec, load_study
from dse.study.trial import TrialRecord, evaluate, request_for
from dse.study.variants import study_catalog
from formulations.solve import PlacementSolver

MEMOS = (shapes._SHAPES, candidates._PREFILL, simulation._FLUID)
TIMINGS = {"milp_solve_s"}  # wall-clock seconds: never the same twice


def _choices(spec: StudySpec, n: int, seed: int) -> list[Choice]:
    """``n`` random choices of the study's space, each again with another decode cap and KV
    policy (what a study's trials vary most), and with another prefill chunk (what the shapes
    read)."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    chunks = [int(x) for x in spec.search.prefill.chunk_tokens]
    out = []
    for _ in range(n):
        c = suggest(study.ask(), spec)
        other = chunks[(chunks.index(c.chunk_tokens) + 1) % len(chunks)]
        out += [
            c,
            replace(c, max_batch=max(1, c.max_batch // 3), kv_policy="hbm-only"),
            replace(c, chunk_tokens=other),
        ]
    return out


def _plain(record: TrialRecord) -> dict[str, Any]:
    attrs = record.attrs()
    attrs["metrics"] = {k: v for k, v in attrs["metrics"].items() if k not in TIMINGS}
    return attrs


def _same(a: object, b: object) -> bool:
    """Equal to the bit: floats by value (nan with nan, 0.0 apart from -0.0), containers by item."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return (a == b and math.copysign(1.0, a) == math.copysign(1.0, b)) or (
            math.isnan(a) and math.isnan(b)
        )
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("study", ["deepseek-v3-blackwell", "kimi-k3-blackwell"])
def test_records_are_the_same_with_the_memos_as_built_afresh(catalog: Catalog, study: str) -> None:
    spec = load_study(study)
    cat, params = study_catalog(spec, catalog), load_params()
    choices = _choices(spec, 10, seed=7)
    for memo in MEMOS:
        memo.clear()
    kept = [_plain(evaluate(spec, c, cat, params, PlacementSolver(TRIAL_SOLVE))) for c in choices]
    assert all(len(memo) for memo in MEMOS)  # they were used
    fresh = []
    for c in choices:
        for memo in MEMOS:
            memo.clear()
        fresh.append(_plain(evaluate(spec, c, cat, params, PlacementSolver(TRIAL_SOLVE))))
    assert any("usd_per_hour" in r["metrics"] for r in kept)  # some designs placed, not only failures
    for i, (a, b) in enumerate(zip(kept, fresh, strict=True)):
        assert _same(a, b), f"trial {i} ({choices[i]}) differs"


def test_trials_that_differ_in_the_decode_cap_and_share_build_shapes_and_prefill_units_once(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_study("deepseek-v3-blackwell")
    cat, params = study_catalog(spec, catalog), load_params()
    built = []
    real = shapes.Shapes.__init__

    def counted(self: shapes.Shapes, *a: Any, **k: Any) -> None:
        built.append(1)
        real(self, *a, **k)

    monkeypatch.setattr(shapes.Shapes, "__init__", counted)
    for memo in MEMOS:
        memo.clear()
    first = Choice(
        "disaggregated", "tiered", "b200", "b200", "8gpu-dpa-ep8", "8gpu-dpa-ep8", 4096, 512, 0.0, 0.0
    )
    for batch in (512, 300, 2048):
        evaluate(spec, replace(first, max_batch=batch), cat, params, PlacementSolver(TRIAL_SOLVE))
    assert len(built) == 1 and len(candidates._PREFILL) == 1
    evaluate(spec, replace(first, chunk_tokens=8192), cat, params, PlacementSolver(TRIAL_SOLVE))
    assert len(built) == 2 and len(candidates._PREFILL) == 2  # another chunk: other prefill costs


def test_shapes_of_the_measured_kernel_tier_are_built_each_time(catalog: Catalog) -> None:
    spec = load_study("deepseek-v3-blackwell")
    cat = study_catalog(spec, catalog)
    params = replace(load_params(), kernels="measured")
    c = Choice("disaggregated", "tiered", "h200", "h200", "8gpu-dpa-ep8", "8gpu-dpa-ep8", 4096, 512, 0.0, 0.0)
    req = request_for(spec, c, cat)
    hws = [cat.hardware(h) for h in req.hardware]
    one, two = (shapes.shapes_of(req, cat.model(req.model), hws, params, True) for _ in range(2))
    assert one is not two and not shapes.shared_shapes(one)
    datasheet = load_params()
    shared = shapes.shapes_of(req, cat.model(req.model), hws, datasheet, True)
    assert shapes.shapes_of(req, cat.model(req.model), hws, datasheet, True) is shared
    assert shapes.shapes_of(req, cat.model(req.model), hws, load_params(), True) is not shared  # other params
    with pytest.raises(ValueError, match="read-only"):
        shared.weights_gb[0] = 0.0  # shared: a caller cannot change another's


class _Reads:
    """``of``'s attributes, each read noted in ``read`` (under ``prefix``); ``options`` another such."""

    def __init__(self, of: object, read: set[str], prefix: str = "") -> None:
        self._of, self._read, self._prefix = of, read, prefix

    def __getattr__(self, name: str) -> Any:
        self._read.add(self._prefix + name)
        value = getattr(self._of, name)
        return _Reads(value, self._read, "options.") if name == "options" else value


def test_the_memo_keys_name_every_request_field_the_builders_read(catalog: Catalog) -> None:
    spec = load_study("deepseek-v3-blackwell")
    cat, params = study_catalog(spec, catalog), load_params()
    c = Choice(
        "disaggregated", "tiered", "b200", "gb200-nvl72", "8gpu-dpa-ep8", "8gpu-dpa-ep8", 4096, 512, 0.0, 0.0
    )
    req = request_for(spec, c, cat)
    model, hws = cat.model(req.model), [cat.hardware(h) for h in req.hardware]
    read: set[str] = set()
    s = shapes.Shapes(_Reads(req, read), model, hws, params, True)  # type: ignore[arg-type]
    keyed = set(shapes.SHAPE_FIELDS) | {"options"} | {f"options.{f}" for f in shapes.SHAPE_OPTIONS}
    assert read and read <= keyed, sorted(read - keyed)
    # the prefill units read the Shapes (its key) and these of the request
    b = _Builder(req, s)
    read.clear()
    b.req, b.opts = _Reads(req, read), _Reads(req.options, read, "options.")  # type: ignore[assignment]
    b._add_prefill()
    assert b.rows and read <= {"workload", "engine", "options.tiers", "options.prefill_shapes",
                               "options.prefill_hardware"}, sorted(read)  # fmt: skip
    assert req.topology is Topology.DISAGGREGATED


def test_a_design_checked_again_runs_its_fluid_simulation_once(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same design (a decode cap far past what its KV cache holds changes nothing) is
    simulated once; another traffic or time step runs its own; a run of several configurations
    is not kept."""
    spec = load_study("deepseek-v3-blackwell")
    cat, params = study_catalog(spec, catalog), load_params()
    runs = []
    real = simulation.simulate_fluid

    def counted(pipe: Any, *a: Any, **k: Any) -> Any:
        runs.append(pipe.n)
        return real(pipe, *a, **k)

    monkeypatch.setattr(simulation, "simulate_fluid", counted)
    simulation._FLUID.clear()
    c = Choice(
        "disaggregated", "tiered", "b200", "b200", "8gpu-dpa-ep8", "8gpu-dpa-ep8", 4096, 8000, 0.0, 0.0
    )
    one, two = (
        evaluate(spec, replace(c, max_batch=b), cat, params, PlacementSolver(TRIAL_SOLVE))
        for b in (8000, 7000)
    )
    assert one.simulation is not None and two.simulation is not None
    assert one.pools == two.pools and len(runs) == 1  # the same design: run once
    assert _same(_plain(one), _plain(two))
    with pytest.raises(ValueError, match="read-only"):
        one.simulation.fluid_trajectories.prefill_queue[0, 0] = 1.0  # shared: nobody changes another's
    sim = one.simulation
    simulation.simulate(sim.pipeline, sim.scenario, dt=2.0)
    simulation.simulate(sim.pipeline, replace(sim.scenario, horizon_s=sim.scenario.horizon_s / 2))
    assert len(runs) == 3
    for _ in range(2):
        simulation.simulate(sim.pipeline.tiled(2), sim.scenario)
    assert runs[-2:] == [2, 2]  # several configurations: run each time
