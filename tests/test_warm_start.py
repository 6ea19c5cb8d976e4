"""A search starts from the full placement's designs: the first trials are what one MILP over
every listed hardware and shape picks, in the search's own parameters; a resumed run does not
run them again; ``warm_start = false`` leaves the start to the sampler."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import optuna
import pytest

from dse.catalog import load_catalog
from dse.perf.params import load_params
from dse.placement.candidates import build_candidates
from dse.placement.plan import solve_candidates
from dse.placement.request import PlacementRequest, Topology
from dse.study import Study
from dse.study.choice import choice_from_params, suggest, trial_params
from dse.study.results import choice_columns
from dse.study.spec import StudySpec, load_study
from dse.study.sweep import request_at
from dse.study.warm_start import designs, warm_request, warm_start_params
from formulations.placement_data import Role
from formulations.solve import PlacementSolver

TINY = Path(__file__).resolve().parent / "data" / "tiny-study.toml"


def _warm(spec: StudySpec, limit: int = 10) -> list[dict[str, object]]:
    return warm_start_params(spec, load_catalog(), load_params(), PlacementSolver(), limit)


def _params(trials, number: int) -> dict[str, object]:  # type: ignore[no-untyped-def]
    row = trials.filter(trials["trial"] == number).row(0, named=True)
    return {k: row[k] for k in trials.columns if k.startswith("p_")}


def _choice_columns(params: dict[str, object], spec: StudySpec) -> dict[str, object]:
    return choice_columns(asdict(choice_from_params(params)))  # as the trials table has them


@pytest.mark.parametrize("topologies", [("aggregated", "disaggregated"), ("disaggregated", "afd")])
def test_suggest_asks_back_the_choice_its_parameters_came_from(topologies: tuple[str, ...]) -> None:
    spec = load_study(TINY)
    spec = replace(spec, search=replace(spec.search, topologies=topologies))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(40):
        c = suggest(study.ask(), spec)
        again = optuna.create_study()
        again.enqueue_trial(trial_params(c))
        assert suggest(again.ask(), spec) == c
        assert choice_from_params(trial_params(c)) == c


def _answers(spec: StudySpec) -> list[tuple[float, str, str, list[dict[str, object]]]]:
    """Each feasible full placement of the tiny study: cost, KV policy, topology, its designs."""
    catalog, params, solver = load_catalog(), load_params(), PlacementSolver()
    out = []
    for kv in spec.search.kv_policies:
        req = warm_request(spec, catalog, kv)
        for t in spec.search.topologies:
            o = solve_candidates(req, build_candidates(req, Topology(t), catalog, params), solver)
            if o.feasible:
                listed = {h: h for h in spec.hardware}
                out.append((o.usd_per_hour, kv, t, [trial_params(c) for c in designs(o, req, spec, listed)]))
    return sorted(out, key=lambda a: a[0])


def test_a_placement_mixing_units_gives_every_pairing_largest_pools_first() -> None:
    spec = load_study(TINY)
    base = request_at(spec, load_catalog(), 0.0, "recompute")
    # at 3x the tiny study's traffic its answer prefills on two units (at 1-2x on one)
    req = replace(base, workload=replace(base.workload, requests_per_s=3.0 * base.workload.requests_per_s))
    o = solve_candidates(
        req, build_candidates(req, Topology.DISAGGREGATED, load_catalog(), load_params()), PlacementSolver()
    )
    pre = sorted((p for p in o.pools if p.unit.role is Role.PREFILL), key=lambda p: -p.gpus)
    dec = [p for p in o.pools if p.unit.role is Role.DECODE]
    assert len(pre) == 2 and len(dec) == 1
    got = designs(o, req, spec, {h: h for h in spec.hardware})
    assert [(c.prefill_hardware, c.prefill_shape) for c in got] == [
        (p.unit.hardware, p.unit.parallel.label()) for p in pre
    ]
    assert {(c.decode_hardware, c.decode_shape) for c in got} == {(dec[0].unit.hardware, "8gpu-dpa-ep8")}


def test_the_first_trials_take_each_placements_designs_in_turn_cheapest_first() -> None:
    spec = load_study(TINY)
    answers = _answers(spec)
    warm = _warm(spec)
    assert len(answers) >= 2
    firsts = [d[0] for *_, d in answers]  # the first design of every answer, cheapest answer first
    assert warm[: len(firsts)] == firsts
    every = [p for *_, d in answers for p in d]
    assert sorted(map(str, warm)) == sorted({str(p) for p in every}) and len(warm) == len(every)
    assert all(p["decode_max_batch"] == 1024 for p in warm)  # the top of the study's range
    assert _warm(spec, limit=1) == warm[:1]
    assert _warm(replace(spec, search=replace(spec.search, warm_start=False))) == []


def test_a_run_evaluates_them_first_and_a_resumed_run_not_again(tmp_path: Path) -> None:
    study = Study.load(TINY)
    warm = _warm(study.spec, limit=2)  # a budget of 10 runs a fifth of it from the warm start
    first = study.run(trials=1, out=tmp_path).trials  # 1 trial: only the cheapest
    assert _params(first, 0) == _choice_columns(warm[0], study.spec)
    assert first["feasible"][0]
    resumed = study.run(trials=10, out=tmp_path).trials
    rows = [_params(resumed, n) for n in range(10)]
    assert rows[0] == _params(first, 0)
    for p in warm:  # each exactly once
        assert rows.count(_choice_columns(p, study.spec)) == 1
    assert rows[1] == _choice_columns(warm[1], study.spec)
    assert resumed["warm_start"].to_list() == [True, True] + [False] * 8  # the exports say which


def test_hardware_named_by_an_alias_comes_back_under_that_name() -> None:
    spec = load_study(TINY)
    alias = next(a for a in load_catalog().hardware("h200-sxm").aliases if a != "h200-sxm")
    spec = replace(spec, hardware=(alias,))
    catalog, params, solver = load_catalog(), load_params(), PlacementSolver()
    warm = warm_start_params(spec, catalog, params, solver, 10)
    named = {p[k] for p in warm for k in ("prefill_hardware", "decode_hardware", "agg_hardware") if k in p}
    assert named == {alias}
    study = optuna.create_study()
    for p in warm:  # each enqueues into the study's own search space
        study.enqueue_trial(p)
        assert trial_params(suggest(study.ask(), spec)) == p


def test_without_warm_start_the_sampler_starts(tmp_path: Path) -> None:
    study = Study.load(TINY)
    off = replace(study, spec=replace(study.spec, search=replace(study.spec.search, warm_start=False)))
    trials = off.run(trials=3, out=tmp_path).trials
    warm = [_choice_columns(p, study.spec) for p in _warm(study.spec)]
    assert all(_params(trials, n) not in warm for n in range(3))


def test_tpe_keeps_its_random_start_beside_the_warm_start() -> None:
    from dse.study.samplers import make_sampler

    spec = load_study(TINY)  # budget 12: 5 random trials
    assert make_sampler(spec, 1)._n_startup_trials == 5
    assert make_sampler(spec, 1, warm=6)._n_startup_trials == 11


def test_a_warm_start_trial_that_failed_is_run_again_by_the_next_worker() -> None:
    """Shared workers enqueue a design unless a complete, running or waiting trial has it; a
    trial failed as stale (its worker died) does not count, as in a lone run."""
    from dse.study.runner import _not_taken

    a, b = {"x": 1}, {"x": 2}
    study = optuna.create_study()
    study.enqueue_trial(a)
    assert _not_taken(study, [a, b]) == [b]  # waiting
    t = study.ask({"x": optuna.distributions.IntDistribution(0, 3)})
    assert _not_taken(study, [a, b]) == [b]  # running
    study.tell(t, state=optuna.trial.TrialState.FAIL)
    assert _not_taken(study, [a, b]) == [a, b]  # its worker died: run it again
    study.enqueue_trial(a)
    study.tell(study.ask({"x": optuna.distributions.IntDistribution(0, 3)}), 1.0)
    assert _not_taken(study, [a, b]) == [b]  # done


def test_aggregated_prefill_shares_stay_inside_the_studys_range() -> None:
    spec = load_study(TINY)
    spec = replace(
        spec,
        search=replace(spec.search, aggregated=replace(spec.search.aggregated, prefill_share=(0.05, 0.4375))),
    )
    shares = request_at(spec, load_catalog(), 0.0, "tiered").options.agg_prefill_shares
    assert min(shares) >= 0.05 and max(shares) <= 0.4375 and len(shares) == 4
    for p in _warm(spec):
        if "agg_prefill_share" in p:
            assert 0.05 <= p["agg_prefill_share"] <= 0.4375


@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
def test_workers_starting_together_enqueue_each_design_once(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """Two workers that look for untaken designs at the same moment would both find them all and
    both enqueue them: the lock on the database lets one look and enqueue, then the other (the
    test holds the window open between looking and enqueueing, where the race was)."""
    import threading
    import time

    import dse.study.runner as runner
    from dse.study.storage import open_storage

    if db == "sqlite":
        url = f"sqlite:///{tmp_path / 'shared.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    name = f"enqueue-{db}-{tmp_path.name}"
    optuna.create_study(study_name=name, storage=open_storage(url))
    first = [{"x": i} for i in range(4)]
    looked = threading.Barrier(2, timeout=2)
    real = runner._not_taken

    def slow(study: optuna.Study, designs: list[dict[str, object]]) -> list[dict[str, object]]:
        found = real(study, designs)
        try:
            looked.wait()  # without the lock both threads get here before either enqueues
        except threading.BrokenBarrierError:  # with it, the other waits on the lock instead
            pass
        time.sleep(0.2)
        return found

    monkeypatch.setattr(runner, "_not_taken", slow)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            study = optuna.load_study(study_name=name, storage=open_storage(url))
            runner.enqueue_first(study, first, budget=10)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    waiting = optuna.load_study(study_name=name, storage=open_storage(url)).get_trials(
        states=(optuna.trial.TrialState.WAITING,)
    )
    assert sorted(t.system_attrs["fixed_params"]["x"] for t in waiting) == [0, 1, 2, 3]


def test_a_trial_and_the_warm_start_build_aggregated_units_at_their_targets_batch() -> None:
    """A search trial searches the batch, so its aggregated units come at the target's batch
    alone, and the warm start builds the units a trial builds; a grid point's full placement,
    as `dse place`, also offers them at tighter TPOT paces (at TTFT 0.5 s, where a shorter
    decode step ahead of a prompt still buys TTFT)."""
    from dse.study.trial import request_for

    spec, catalog, params = load_study(TINY), load_catalog(), load_params()
    spec = replace(spec, slo=replace(spec.slo, ttft_s=0.5))

    def paced(req: PlacementRequest) -> list[str]:
        units = build_candidates(req, Topology.AGGREGATED, catalog, params).units
        assert units
        return [u.name for u in units if "/tpot" in u.name]

    kv = spec.search.kv_policies[0]
    assert paced(warm_request(spec, catalog, kv)) == []
    assert paced(request_at(spec, catalog, 0.0, kv))  # the same placement with the paces on
    trials = [choice_from_params(p) for p in _warm(spec)]
    aggregated = [c for c in trials if c.topology == "aggregated"]
    assert aggregated
    for c in aggregated:
        assert paced(request_for(spec, c, catalog)) == []


def test_a_four_stage_warm_start_without_a_midfill_pool_enqueues_a_listed_shape(tmp_path: Path) -> None:
    """A four-stage design whose MILP answer has no midfill pool takes its prefill pool's place
    for the midfill; where that shape is not among the search's midfill shapes, the warm start had
    enqueued it and the run ended in Optuna's ValueError ('16gpu-dpa-ep16' not in (...)). It now
    takes a listed one, and every enqueued choice is one the search could suggest."""
    text = (
        'name = "fs-mid"\nmodel = "deepseek-v3"\nhardware = ["b200", "gb200-nvl72", "h200-sxm"]\nseed = 3\n'
        "[workload]\nrequests_per_s = 40.0\ninput_tokens = 3000.0\noutput_tokens = 800.0\n"
        "returning_share = 0.4\n"
        "cached_prefix_tokens = 12000.0\nsuffix_tokens = 400.0\n"
        "think = [{ share = 0.7, dwell_s = 60.0 }, { share = 0.3, dwell_s = 900.0 }]\n"
        "[slo]\nttft_s = 2.0\ntpot_s = 0.05\npercentile = 90.0\n"
        '[search]\ntopologies = ["afd", "four-stage", "disaggregated"]\nkv_policies = ["tiered"]\n'
        '[search.prefill]\nshapes = ["8gpu-dpa-ep8", "16gpu-dpa-ep16"]\nchunk_tokens = [4096, 8192]\n'
        '[search.midfill]\nshapes = ["8gpu-dpa-ep8", "8gpu-tp8-ep8"]\n'
        '[search.decode]\nshapes = ["8gpu-dpa-ep8", "16gpu-dpa-ep16", "32gpu-dpa-ep32"]\n'
        "max_batch = [16, 4096]\n"
        "[search.afd]\nffn_tokens_per_gpu = [32, 128, 512]\n"
        "[simulate]\nhorizon_s = 900.0\nwarmup_s = 300.0\ndt_s = 2.0\n"
    )
    path = tmp_path / "fs-mid.toml"
    path.write_text(text)
    spec = load_study(str(path))
    warm = [p for p in _warm(spec) if p["topology"] == "four-stage"]
    assert warm, "no four-stage warm start"
    assert all(p["midfill_shape"] in spec.search.midfill.shapes for p in warm), warm
    Study.load(str(path)).run(trials=len(_warm(spec)) + 1, out=tmp_path / "runs")
