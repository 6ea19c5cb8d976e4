"""A finished trial evaluated again from its recorded parameters (evaluation is deterministic):
exports re-simulate the front, the report details the best design."""

from __future__ import annotations

from typing import Any

from dse.catalog import Catalog
from dse.perf.params import PerfParams
from dse.study.spec import StudySpec
from dse.study.sweep import evaluate_point, point_of
from dse.study.trial import TrialRecord, choice_from_params, evaluate
from formulations.solve import PlacementSolver


def replay(
    spec: StudySpec,
    trial_params: dict[str, Any],
    catalog: Catalog,
    params: PerfParams,
    solver: PlacementSolver,
) -> TrialRecord:
    """The trial's record again: a grid point or a search choice. ``catalog`` must hold the
    study's variants (:func:`dse.study.variants.study_catalog`)."""
    if spec.is_grid:
        return evaluate_point(spec, point_of(trial_params), catalog, params, solver)
    return evaluate(spec, choice_from_params(trial_params, spec), catalog, params, solver)
