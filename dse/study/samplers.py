"""The samplers of a study, seeded so that runs repeat.

In one process every sampler repeats exactly with the same seed. Across workers on a shared
storage, the random sampler draws trial ``n``'s design from ``(seed, n)`` and the grid sampler's
order comes from the study's seed, so the set of trials does not depend on which worker ran what;
TPE and NSGA-II learn from the trials finished so far, so with several workers their proposals
depend on the order trials finish in.
"""

from __future__ import annotations

from typing import Any

import optuna

from dse.study.grid import grid_sampler
from dse.study.spec import StudySpec
from dse.study.tpe import CachedTPESampler


class TrialSeededRandomSampler(optuna.samplers.BaseSampler):
    """Random search whose draws for trial ``n`` depend only on the seed and ``n``: each trial
    draws from Optuna's :class:`~optuna.samplers.RandomSampler` seeded with both."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._draws = optuna.samplers.RandomSampler(seed=seed)

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return {}

    def sample_relative(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        return {}

    def before_trial(self, study: Any, trial: Any) -> None:
        """Called as a trial starts, before any of its parameters is sampled."""
        self._draws = optuna.samplers.RandomSampler(seed=(self._seed * 1_000_003 + trial.number) % 2**32)

    def sample_independent(self, study: Any, trial: Any, param_name: str, param_distribution: Any) -> Any:
        return self._draws.sample_independent(study, trial, param_name, param_distribution)


def make_sampler(
    spec: StudySpec, seed: int, budget: int | None = None, stream: int = 0, warm: int = 0
) -> optuna.samplers.BaseSampler:
    """The study's sampler, seeded with ``seed``. ``stream`` separates the random streams of
    learning samplers that must not propose alike (each worker; a resumed run); the grid and
    random samplers ignore it, their draws being fixed by the seed and the trial. TPE samples its
    first trials at random: a fifth of the budget, between 5 and 20, besides the ``warm`` trials
    of the warm start (:mod:`dse.study.warm_start`), which are not random and would otherwise
    take the place of random ones in its first picture of the space."""
    if spec.is_grid:  # point ids index a grid shuffled by the seed: resumed runs and workers must agree
        return grid_sampler(spec, seed)
    kind = spec.search.sampler
    if kind == "random":
        return TrialSeededRandomSampler(seed)
    own = (seed + stream) % 2**32  # numpy's seeds are 32-bit
    if kind == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=own, population_size=spec.search.population)
    startup = min(20, max(5, (budget or spec.trials) // 5)) + warm
    return CachedTPESampler(seed=own, n_startup_trials=startup, multivariate=True)
