"""A grid study's points: the ``[sweep]`` axes as Optuna parameters, the grid sampler that picks
the points still missing, and the study as one point sees it (light: no solver)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import optuna

from dse.study.optuna_compat import grid_of, set_trial_system_attr
from dse.study.spec import StudySpec

PREFIX = "x_"  # Optuna parameter names of the grid axes
WORKLOAD_AXES = ("requests_per_s", "input_tokens", "output_tokens", "cached_prefix_tokens")
SLO_AXES = ("ttft_s", "tpot_s")
# simulated anew on the same placement (:class:`dse.study.spec.Sweep`)
DYNAMICS_AXES = (
    "burst_factor",
    "output_tail",
    "planner",
    "planner_period_s",
    "planner_delay_s",
    "buffer_requests",
)
PLANNER_DELAY_S = 30.0  # age of the planner's measurements unless swept (at most its period)


POINT_ATTR = "dse_grid_point"  # a trial's point, set with its grid id: claimed before its params are


class GridFull(RuntimeError):
    """No point of the grid is free: each has a complete trial or one running."""


class GridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler, choosing each trial's point by what the storage holds: a point is
    taken when a complete trial has its values or a running one has claimed it (its
    :data:`POINT_ATTR`, set with its grid id, before its parameters are), so a failed trial's
    point is run again, a resumed run (whatever its numbering or seed) runs only the missing
    points, and workers pick at random among the free ones. Workers ask under a lock on the
    storage (:class:`dse.study.sources.SharedTrials`), so no two claim one point. No point free is
    :class:`GridFull` (the runner asks for no more trials than the grid has points). No
    ``study.stop()`` once the grid is done: the runner asks and tells itself and stops at its
    budget (one trial per point)."""

    def before_trial(self, study: Any, trial: Any) -> None:
        if "grid_id" in trial.system_attrs or "fixed_params" in trial.system_attrs:
            return
        grid = grid_of(self)  # Optuna's shuffled grid and random state (dse.study.optuna_compat)
        live = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING)
        others = [t for t in study.get_trials(deepcopy=False, states=live) if t.number != trial.number]
        taken = grid_points(others, grid.names)[1]
        free = [i for i, g in enumerate(grid.points) if tuple(_key(v) for v in g) not in taken]
        if not free:
            raise GridFull(f"every point of the grid is complete or running (trial {trial.number})")
        grid_id = int(grid.rng.choice(free))
        set_trial_system_attr(study, trial, "search_space", grid.search_space)
        set_trial_system_attr(study, trial, POINT_ATTR, list(grid.points[grid_id]))
        set_trial_system_attr(study, trial, "grid_id", grid_id)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        return None


def grid_points(trials: list[Any], names: list[str]) -> tuple[set[tuple[Any, ...]], set[tuple[Any, ...]]]:
    """The grid points (keyed as :func:`_key` keys them) of ``trials``' complete ones, and of the
    complete and running ones: a running trial's from its parameters or, asked but not yet
    suggested, from the point its grid sampler claimed for it."""
    done: set[tuple[Any, ...]] = set()
    held: set[tuple[Any, ...]] = set()
    for t in trials:
        if all(k in t.params for k in names):
            point = tuple(_key(t.params[k]) for k in names)
        elif isinstance(claimed := t.system_attrs.get(POINT_ATTR), list) and len(claimed) == len(names):
            point = tuple(_key(v) for v in claimed)
        else:
            continue
        if t.state == optuna.trial.TrialState.COMPLETE:
            done.add(point)
            held.add(point)
        elif t.state == optuna.trial.TrialState.RUNNING:
            held.add(point)
    return done, held


def _key(value: Any) -> Any:
    """A grid value as stored and as listed compare equal (2000 and 2000.0)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def grid_space(spec: StudySpec) -> dict[str, list[Any]]:
    return {PREFIX + k: list(v) for k, v in spec.sweep.axes().items()}


def grid_sampler(spec: StudySpec, seed: int) -> GridSampler:
    return GridSampler(grid_space(spec), seed=seed)


def suggest_point(trial: optuna.Trial, spec: StudySpec) -> dict[str, Any]:
    return {k: trial.suggest_categorical(PREFIX + k, list(v)) for k, v in spec.sweep.axes().items()}


def point_of(params: dict[str, Any]) -> dict[str, Any]:
    """A finished trial's grid point, from its recorded parameters."""
    return {k.removeprefix(PREFIX): v for k, v in params.items() if k.startswith(PREFIX)}


def spec_at(spec: StudySpec, point: dict[str, Any]) -> StudySpec:
    """The study as one grid point sees it."""
    changes: dict[str, Any] = {k: float(point[k]) for k in WORKLOAD_AXES if k in point}
    workload = replace(spec.workload, **changes)
    slo = replace(spec.slo, **{k: float(point[k]) for k in SLO_AXES if k in point})
    sim = spec.simulate
    if "burst_factor" in point:
        sim = replace(sim, arrivals="burst", burst_factor=float(point["burst_factor"]))
    return replace(
        spec,
        model=str(point.get("model", spec.model)),
        hardware=(str(point["hardware"]),) if "hardware" in point else spec.hardware,
        workload=workload,
        slo=slo,
        simulate=sim,
    )
