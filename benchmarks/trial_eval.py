"""CPU a study trial's evaluation takes, without the sampler: the headline study's trials of one
run, replayed in this process.

A study run's wall time mixes the evaluation with the sampler's process, the storage and the
machine's hour; this isolates the evaluation (placement MILP, the fluid and the engine-level
simulations, the trial record) on a fixed list of designs, so two checkouts can be compared on
the same work: run it in each, alternating, and compare the CPU seconds.

Prints figures, not verdicts. Run: ``python benchmarks/trial_eval.py [TRIALS]`` (default 300).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from record import figure

from dse.catalog import load_catalog
from dse.perf.params import load_params
from dse.study import Study
from dse.study.choice import choice_from_params
from dse.study.runner import TRIAL_SOLVE
from dse.study.trial import evaluate
from dse.study.variants import study_catalog
from formulations.solve import PlacementSolver

WARM = 30  # trials evaluated first, untimed: numba's caches loaded, the MILP structures built


def main(trials: int = 300) -> None:
    study = Study.load("deepseek-v3-blackwell")
    spec = study.spec
    with tempfile.TemporaryDirectory() as tmp:
        res = study.run(trials=trials, out=Path(tmp))
        choices = [choice_from_params(t.params, spec) for t in res.study.get_trials(deepcopy=False)]
    catalog, params = study_catalog(spec, load_catalog()), load_params()
    solver = PlacementSolver(TRIAL_SOLVE)
    for c in choices[:WARM]:
        evaluate(spec, c, catalog, params, solver)
    cpu, wall = time.process_time(), time.perf_counter()
    for c in choices:
        evaluate(spec, c, catalog, params, solver)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    n = len(choices)
    print(
        f"{n} trials of deepseek-v3-blackwell replayed in one process: {cpu:.2f} s CPU "
        f"({1e3 * cpu / n:.2f} ms a trial), {wall:.2f} s wall"
    )
    figure("evaluation CPU per trial", 1e3 * cpu / n, "ms", f"{n} headline-study trials, no sampler")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
