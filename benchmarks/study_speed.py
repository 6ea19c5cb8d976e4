"""Study throughput and search efficiency.

1. 1,000 trials of the headline study (``deepseek-v3-blackwell``) into a fresh SQLite run folder,
   with NSGA-II and with TPE: wall time, the split of a trial (sampler and storage, candidate
   units, MILP, simulator), and the peak memory of the process.
2. A small study whose grid can be enumerated: evaluate every point, then let Optuna search with
   10% of that many evaluations (over several seeds) and report how close it gets to the best.

Prints figures, not verdicts. Run: ``python benchmarks/study_speed.py [TRIALS]``.
"""

from __future__ import annotations

import itertools
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from record import figure

import dse.study.trial as trial_mod
from dse.catalog import load_catalog
from dse.perf.params import load_params
from dse.study import Study
from dse.study.spec import load_study
from dse.study.trial import Choice, evaluate
from formulations.solve import PlacementSolver


def timed_study(trials: int, sampler: str) -> None:
    spent = {"evaluate": 0.0, "milp": 0.0, "sim": 0.0, "n": 0}
    real_evaluate = trial_mod.evaluate
    real_simulate = trial_mod.simulate

    def sim_timed(*a, **k):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        out = real_simulate(*a, **k)
        spent["sim"] += time.perf_counter() - t0
        return out

    def eval_timed(*a, **k):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        rec = real_evaluate(*a, **k)
        spent["evaluate"] += time.perf_counter() - t0
        spent["milp"] += rec.metrics.get("milp_solve_s") or 0.0
        spent["n"] += 1
        return rec

    trial_mod.simulate = sim_timed  # type: ignore[assignment]
    import dse.study.runner as runner_mod

    runner_mod.evaluate = eval_timed  # type: ignore[assignment]
    study = Study.load("deepseek-v3-blackwell")
    study = replace(study, spec=replace(study.spec, search=replace(study.spec.search, sampler=sampler)))
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = study.run(trials=trials, out=Path(tmp))
        wall = time.perf_counter() - t0
    runner_mod.evaluate = real_evaluate  # type: ignore[assignment]
    trial_mod.simulate = real_simulate  # type: ignore[assignment]
    n = spent["n"]
    other = wall - spent["evaluate"]
    units = spent["evaluate"] - spent["milp"] - spent["sim"]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{trials} trials of deepseek-v3-blackwell ({sampler}) into SQLite: {wall:.1f} s "
        f"({1e3 * wall / n:.1f} ms per trial); peak memory {peak_mb:.0f} MB"
    )
    print(
        f"  per trial: sampler + storage {1e3 * other / n:.1f} ms, candidate units and bookkeeping "
        f"{1e3 * units / n:.1f} ms, MILP {1e3 * spent['milp'] / n:.1f} ms, "
        f"simulator {1e3 * spent['sim'] / n:.1f} ms"
    )
    figure(f"{trials} trials ({sampler})", wall, "s", "deepseek-v3-blackwell into SQLite")
    figure(f"trial overhead: sampler + storage ({sampler})", 1e3 * other / n, "ms")
    figure(f"trial overhead: candidate units and bookkeeping ({sampler})", 1e3 * units / n, "ms")
    figure(f"peak memory, {trials} trials ({sampler})", peak_mb, "MB")
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
    reached = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(10):
            res = (
                Study(replace(spec, name=f"enum-{seed}", trials=budget, seed=seed))
                .with_objective("usd_per_million_tokens")
                .run(out=Path(tmp))
            )
            feas = res.trials.filter(res.trials["feasible"])
            found = feas["usd_per_million_tokens"].min() if feas.height else np.inf
            reached.append(best / found if found else 0.0)
    r = np.array(reached)
    print(
        f"enumerable study: {len(grid)} grid points (batch on a 6-point grid; the search samples it "
        f"log-uniformly), best ${best:.4f}/M tokens found by enumeration in {t_grid:.1f} s"
    )
    within = int((r >= 0.99).sum())
    figure("enumerable study: seeds within 1% of the enumerated best at 10% budget", within, "of 10")
    print(
        f"  Optuna with {budget} trials ({100 * budget / len(grid):.0f}%), 10 seeds: enumerated best / best "
        f"found median {100 * np.median(r):.1f}%, worst {100 * r.min():.1f}%; "
        f"within 1% in {int((r >= 0.99).sum())}/10"
    )


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    timed_study(n, "nsga2")
    timed_study(n, "tpe")
    enumerable()
