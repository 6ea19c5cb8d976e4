"""Custom objectives from Python: trials without a value kept off the Pareto front and out of
the best trial."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl

from dse.study.results import best_of, non_dominated, pareto_frame

TINY = Path(__file__).resolve().parent / "data" / "tiny-study.toml"


def _trials(values: list[float | None], feasible: list[bool] | None = None) -> pl.DataFrame:
    n = len(values)
    return pl.DataFrame(
        {
            "trial": list(range(n)),
            "feasible": feasible if feasible is not None else [True] * n,
            "gpus": [8 * (i + 1) for i in range(n)],
            "objective_o": values,
        },
        schema_overrides={"objective_o": pl.Float64},
    )


def test_a_trial_without_a_value_is_on_no_front_and_never_best() -> None:
    """Null (None, nan) compared false both ways: such a trial was never beaten, so it sat on
    the front, and with every value missing best_trial() gave the first trial."""
    assert non_dominated(np.array([[1.0], [math.nan], [2.0]])).tolist() == [True, False, False]
    assert non_dominated(np.array([[1.0, math.nan], [2.0, 1.0], [3.0, 0.5]])).tolist() == [False, True, True]
    assert non_dominated(np.array([[math.nan], [math.nan]])).tolist() == [False, False]
    some = _trials([None, 5.0, None, 7.0])
    front = pareto_frame(some, ["o"], ["maximize"])
    assert front["trial"].to_list() == [3] and front["objective_o"].null_count() == 0
    assert best_of(some, ("o", "maximize")) == 3 and best_of(some, ("o", "minimize")) == 1
    none = _trials([None, None, None])
    assert pareto_frame(none, ["o"], ["maximize"]).is_empty()
    assert best_of(none, ("o", "maximize")) is None
    infeasible_only = _trials([1.0, None], feasible=[False, True])
    assert best_of(infeasible_only, ("o", "minimize")) is None
