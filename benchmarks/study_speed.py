"""Study throughput and search efficiency.

1. 1,000 trials of the headline study (``deepseek-v3-blackwell``) into a fresh SQLite run folder,
   with NSGA-II and with TPE: wall time, the split of a trial (sampler and storage, candidate
   units, MILP, simulator), and the peak memory of the process.
2. A small study whose grid can be enumerated: evaluate every point, then let Optuna search with
   10% of that many evaluations (over several seeds) and report how close it gets to the best,
   with the warm start (the full placement's designs first) and without it (the sampler alone).
3. The headline study at its budget (500 trials) with TPE and with NSGA-II, three seeds each: the
   cheapest design each run finds.

Prints figures, not verdicts. Run: ``python benchmarks/study_speed.py [TRIALS]``.
"""

from __future__ import annotations

import contextlib
import itertools
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from record import figure

import dse.evaluation as evaluation_mod
import dse.placement.plan as placement_mod
import dse.sim.engine_latency as engine_latency_mod
import dse.study.runner as runner_mod
from dse.catalog import load_catalog
from dse.perf.params import load_params
from dse.study import Study
from dse.study.choice import Choice
from dse.study.spec import load_study
from dse.study.trial import evaluate
from formulations.solve import PlacementSolver


@contextlib.contextmanager
def _timing(
    spent: dict[str, float], parts: dict[str, tuple[object, str]], calls: dict[str, list[float]] | None = None
):  # type: ignore[no-untyped-def]
    """Time the named functions of their modules while the block runs (every call adds to
    ``spent[part]``, and is listed in ``calls[part]`` when that exists), then put the originals
    back. What runs inside the warm start (its MILPs and candidate units) is listed but adds to
    the warm start alone: the parts of a trial are the trials'."""
    real = {part: getattr(mod, name) for part, (mod, name) in parts.items()}
    warm = [0]  # > 0 while the warm start runs

    def wrap(part: str, fn):  # type: ignore[no-untyped-def]
        def timed(*a, **k):  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            warm[0] += part == "start warm"
            try:
                return fn(*a, **k)
            finally:
                warm[0] -= part == "start warm"
                dt = time.perf_counter() - t0
                if part == "start warm" or not warm[0]:
                    spent[part] += dt
                if calls is not None and part in calls:
                    calls[part].append(dt)

        return timed

    for part, (mod, name) in parts.items():
        setattr(mod, name, wrap(part, real[part]))
    try:
        yield
    finally:
        for part, (mod, name) in parts.items():
            setattr(mod, name, real[part])


def timed_study(trials: int, sampler: str) -> None:
    """A trial's parts: the MILP (parameter update, HiGHS, reading back) and the simulator
    (building its pipeline from the placement, the run); the rest is the overhead: the sampler
    and storage (waiting for the sampler's process to propose, the messages to it, which stores
    the trials), candidate units from the performance model, and the trial record. Opening the
    storage (creating its tables, Optuna's import of alembic), the warm start's MILPs and starting
    the sampler's process happen once per run and are reported apart, as is the CPU time of the
    sampler's process (it runs beside the evaluation)."""
    parts = {
        "candidate units": (placement_mod, "build_candidates"),
        "MILP": (placement_mod, "solve_candidates"),
        "simulator": (evaluation_mod, "pipeline_of"),
        "simulator run": (evaluation_mod, "simulate"),
        "engine latency": (engine_latency_mod, "design_latency"),
        "evaluate": (runner_mod, "evaluate"),
        "start": (runner_mod, "open_stored"),  # once per run: opening (creating) the storage
        "start copy": (runner_mod, "Proposer"),  # starting the sampler's process
        "start warm": (runner_mod, "warm_start_params"),  # the full placement's designs
    }
    spent = dict.fromkeys(parts, 0.0)
    calls: dict[str, list[float]] = {"MILP": []}
    study = Study.load("deepseek-v3-blackwell")
    study = replace(study, spec=replace(study.spec, search=replace(study.spec.search, sampler=sampler)))
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as tmp, _timing(spent, parts, calls):
        t0 = time.perf_counter()
        res = study.run(trials=trials, out=Path(tmp))
        wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime
    n = res.trials.height
    sim = spent["simulator"] + spent["simulator run"] + spent["engine latency"]
    record = spent["evaluate"] - spent["candidate units"] - spent["MILP"] - sim
    start = spent["start"] + spent["start copy"] + spent["start warm"]
    sampler_s = wall - start - spent["evaluate"]
    overhead = wall - start - spent["MILP"] - sim
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child_mb = after.ru_maxrss / 1024
    ms = {k: 1e3 * v / n for k, v in spent.items()}
    print(
        f"{trials} trials of deepseek-v3-blackwell ({sampler}) into SQLite: {wall:.1f} s "
        f"({1e3 * wall / n:.1f} ms per trial, of which {start:.2f} s once: the storage, the warm start, "
        "the sampler process); "
        f"peak memory {peak_mb:.0f} MB (sampler process {child_mb:.0f} MB)"
    )
    print(
        f"  per trial: overhead {1e3 * overhead / n:.2f} ms = sampler and storage {1e3 * sampler_s / n:.2f} "
        f"+ candidate units {ms['candidate units']:.2f} + trial record {1e3 * record / n:.2f}; "
        f"MILP {ms['MILP']:.2f} ms, simulators {1e3 * sim / n:.2f} ms (of which the engine-level "
        f"latency {ms['engine latency']:.2f} ms); "
        f"beside them the sampler's process (sampling, storage writes) {1e3 * child_cpu / n:.2f} ms CPU"
    )
    milp_ms = 1e3 * np.array(calls["MILP"])
    print(
        f"  MILP per call (every topology a trial solves, and the warm start's): median "
        f"{np.median(milp_ms):.2f} ms, p95 {np.percentile(milp_ms, 95):.2f} ms over {milp_ms.size} calls"
    )
    figure(f"{trials} trials ({sampler})", wall, "s", "deepseek-v3-blackwell into SQLite")
    figure(f"MILP per call, median ({sampler})", float(np.median(milp_ms)), "ms", "headline study trials")
    figure(f"run start ({sampler})", start, "s", "once per run: storage, warm start, sampler process")
    figure(
        f"trial overhead ({sampler})", 1e3 * overhead / n, "ms", "all but the MILP, the simulator, the start"
    )
    figure(f"trial overhead part: sampler and storage ({sampler})", 1e3 * sampler_s / n, "ms")
    figure(f"trial overhead part: candidate units ({sampler})", ms["candidate units"], "ms")
    figure(f"trial overhead part: trial record ({sampler})", 1e3 * record / n, "ms")
    figure(f"sampler process CPU per trial ({sampler})", 1e3 * child_cpu / n, "ms", "beside the evaluation")
    figure(f"peak memory, {trials} trials ({sampler})", peak_mb, "MB")
    figure(f"peak memory of the sampler process, {trials} trials ({sampler})", child_mb, "MB")
    feas = res.trials.filter(res.trials["feasible"])
    print(
        f"  feasible {feas.height}/{res.trials.height}; "
        f"best ${feas['usd_per_million_tokens'].min():.4f}/M tokens"
    )


def enumerable() -> None:
    spec = load_study("deepseek-v3-blackwell")
    spec = replace(
        spec,
        hardware=("b200", "h200-sxm"),
        search=replace(
            spec.search,
            topologies=("disaggregated",),
            kv_policies=("tiered", "recompute"),
            prefill=replace(
                spec.search.prefill, shapes=("8gpu-tp8-ep8", "8gpu-dpa-ep8"), chunk_tokens=(8192.0,)
            ),
            decode=replace(
                spec.search.decode, shapes=("8gpu-dpa-ep8", "16gpu-dpa-ep16"), max_batch=(64.0, 2048.0)
            ),
        ),
    )
    batches = [64, 128, 256, 512, 1024, 2048]
    catalog, params = load_catalog(), load_params()
    solver = PlacementSolver()
    grid = list(
        itertools.product(
            spec.search.kv_policies,
            spec.hardware,
            spec.search.prefill.shapes,
            spec.hardware,
            spec.search.decode.shapes,
            batches,
        )
    )
    best = np.inf
    t0 = time.perf_counter()
    for kv, ph, ps, dh, ds, b in grid:
        rec = evaluate(
            spec, Choice("disaggregated", kv, ph, dh, ps, ds, 8192, b, 0.0, 0.0), catalog, params, solver
        )
        if rec.feasible:
            best = min(best, rec.metrics["usd_per_million_tokens"])
    t_grid = time.perf_counter() - t0
    budget = max(1, len(grid) // 10)
    print(
        f"enumerable study: {len(grid)} grid points (batch on a 6-point grid; the search samples it "
        f"log-uniformly), best ${best:.4f}/M tokens found by enumeration in {t_grid:.1f} s"
    )
    for warm in (True, False):
        search = replace(spec.search, warm_start=warm)
        reached, first = [], []
        with tempfile.TemporaryDirectory() as tmp:
            for seed in range(10):
                res = (
                    Study(replace(spec, name=f"enum-{seed}", trials=budget, seed=seed, search=search))
                    .with_objective("usd_per_million_tokens")
                    .run(out=Path(tmp))
                )
                feas = res.trials.filter(res.trials["feasible"])
                found = feas["usd_per_million_tokens"].min() if feas.height else np.inf
                reached.append(best / found if found else 0.0)
                t0 = res.trials.filter(res.trials["trial"] == 0)
                first.append(best / t0["usd_per_million_tokens"][0] if t0["feasible"][0] else 0.0)
        r = np.array(reached)
        label = "warm start" if warm else "sampler alone, no warm start"
        within = int((r >= 0.99).sum())
        name = f"enumerable study ({label}): seeds within 1% of the enumerated best at 10% budget"
        figure(name, within, "of 10")
        print(
            f"  {label}: Optuna with {budget} trials ({100 * budget / len(grid):.0f}%), 10 seeds: enumerated "
            f"best / best found median {100 * np.median(r):.1f}%, worst {100 * r.min():.1f}%; within 1% in "
            f"{within}/10; the first trial alone reaches {100 * np.median(first):.1f}% (median)"
        )


def sampler_quality(trials: int = 500, seeds: tuple[int, ...] = (1, 2, 3)) -> None:
    """The cheapest design TPE and NSGA-II each find in the headline study's budget, per seed,
    against the cheapest either found."""
    found: dict[str, list[float]] = {}
    warm: list[float] = []
    for sampler in ("tpe", "nsga2"):
        for seed in seeds:
            study = Study.load("deepseek-v3-blackwell")
            search = replace(study.spec.search, sampler=sampler)
            study = replace(study, spec=replace(study.spec, seed=seed, search=search))
            with tempfile.TemporaryDirectory() as tmp:
                t = study.run(trials=trials, out=Path(tmp)).trials
            ok = t.filter(t["feasible"])
            found.setdefault(sampler, []).append(float(ok["usd_per_million_tokens"].min()))
            first = ok.filter(ok["warm_start"])["usd_per_million_tokens"]  # as the export marks them
            warm.append(float(first.min()) if first.len() else np.inf)
    best = min(min(v) for v in found.values())
    print(
        f"  the warm-start trials alone: cheapest ${min(warm):.4f}/M tokens "
        f"({100 * best / min(warm):.1f}% of the best)"
    )
    for sampler, costs in found.items():
        print(
            f"{sampler}, {trials} trials, seeds {seeds}: cheapest $/M tokens {[round(c, 4) for c in costs]}"
        )
        reached = sum(c <= best * 1.001 for c in costs)
        figure(
            f"headline, {trials} trials ({sampler}): seeds finding the cheapest design",
            reached,
            f"of {len(seeds)}",
            f"${best:.4f}/M tokens; others {[round(c, 4) for c in costs]}",
        )


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    timed_study(n, "nsga2")
    timed_study(n, "tpe")
    enumerable()
    sampler_quality()
