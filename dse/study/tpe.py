"""Optuna's TPE with the work that depends only on the finished trials done once per trial.

Optuna 5's TPE, for every parameter it samples, splits all earlier trials into good and bad
(reading each trial's constraints anew) and converts every trial's parameters to their internal
form: at 1,000 trials of the headline study that is ten passes over the history per trial, about
20 ms. :class:`CachedTPESampler` proposes exactly what Optuna's TPE proposes with the same seed
(``tests/test_tpe.py``), but splits once per trial (over arrays when the study has one objective
and no pruned trial) and keeps each finished trial's parameters as columns it extends with the
new trials only. On a storage shared by workers it splits the trials as they stood at the
trial's first parameter, where Optuna rereads them for each.

It replaces the two passes through :class:`dse.study.optuna_compat.TPEHooks`, which also samples
with scipy's log Phi (``scipy.special.log_ndtr``, the same function in C).
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from dse.study.optuna_compat import Split, TPEHooks, split_complete, split_pruned


class CachedTPESampler(TPEHooks):
    """:class:`optuna.samplers.TPESampler`, same arguments and proposals, O(new trials) upkeep."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._forget(None)

    def _forget(self, study: Study | None) -> None:
        """Start the rows afresh for ``study``: a sampler handed to another study must not split
        that study's trials with the first one's rows."""
        self._owner: weakref.ref[Study] | None = None if study is None else weakref.ref(study)
        self._split_key: tuple[int, int] | None = None
        self._split: Split = ([], [])
        self._split_rows: list[tuple[list[FrozenTrial], np.ndarray]] = []  # each part of the split, its rows
        self._row_of: dict[int, int] = {}  # trial number -> row of the columns
        self._raw: list[dict[str, Any]] = []  # each row's parameters as the trial holds them
        self._columns: dict[tuple[str, BaseDistribution], list[float]] = {}
        self._running: list[dict[str, Any]] = []  # the running trials' parameters, rows after _raw
        # each column over every row, the running trials' after, as an array: made once a split
        # (its good and its bad part read it)
        self._arrays: dict[tuple[str, BaseDistribution], np.ndarray] = {}
        # per row: the trial, its number, violation and first objective value; any pruned trial
        self._rows: list[FrozenTrial] = []
        self._row_numbers: list[int] = []
        self._row_violation: list[float] = []
        self._row_value: list[float] = []
        self._pruned = False

    def split(self, study: Study, trial: FrozenTrial) -> Split:
        """The good and bad trials for ``trial``, as Optuna's TPE splits them, made at its first
        parameter. Trials still running (the constant liar counts them: a worker's others on a
        shared storage, the trial proposed ahead of a lone run's) go with the bad ones, as in
        Optuna, with their parameters as they stand then; they get rows of their own, dropped at
        the next split."""
        if self._owner is None or self._owner() is not study:
            self._forget(study)
        key = (id(study), trial.number)
        if key == self._split_key:
            return self._split
        liar = self.constant_liar
        states = (TrialState.COMPLETE, TrialState.PRUNED) + ((TrialState.RUNNING,) if liar else ())
        trials = [t for t in study.get_trials(deepcopy=False, states=states) if t.number != trial.number]
        running = [t for t in trials if t.state == TrialState.RUNNING]
        finished = [t for t in trials if t.state != TrialState.RUNNING] if running else trials
        for t in finished:
            if t.number not in self._row_of:
                self._add_row(t)
        below, above = self._split_trials(study, finished, self.gamma(study)(len(finished)))
        if running:
            above = sorted(above + running, key=lambda t: t.number)
        self._running = [self.params_so_far(t, study) for t in running]
        self._arrays = {}
        row_of = {**self._row_of, **{t.number: len(self._raw) + j for j, t in enumerate(running)}}
        self._split_key, self._split = key, (below, above)
        self._split_rows = [
            (part, np.fromiter((row_of[t.number] for t in part), dtype=np.intp, count=len(part)))
            for part in (below, above)
        ]
        return self._split

    def _add_row(self, t: FrozenTrial) -> None:
        self._row_of[t.number] = len(self._raw)
        self._raw.append(t.params)
        self._rows.append(t)
        self._row_numbers.append(t.number)
        self._row_violation.append(sum(v for v in t.constraints.values() if v > 0))  # Optuna's score
        self._row_value.append(t.values[0] if t.values else math.nan)
        self._pruned = self._pruned or t.state == TrialState.PRUNED

    def _split_trials(self, study: Study, trials: list[FrozenTrial], n_below: int) -> Split:
        """Optuna's ``_split_trials`` for finished trials, reading each violation once; in numpy
        when every row is in ``trials`` and the study has one objective and no pruned trial."""
        if len(trials) == len(self._rows) and len(study.directions) == 1 and not self._pruned:
            return self._split_rows_one_objective(study, n_below)
        violation = {t.number: self._row_violation[self._row_of[t.number]] for t in trials}
        infeasible = [t for t in trials if violation[t.number] > 0]
        complete = [t for t in trials if violation[t.number] <= 0 and t.state == TrialState.COMPLETE]
        pruned = [t for t in trials if violation[t.number] <= 0 and t.state == TrialState.PRUNED]
        below_c, above_c = split_complete(complete, study, n_below)
        n_below = max(0, n_below - len(below_c))
        below_p, above_p = split_pruned(pruned, study, n_below)
        n_below = max(0, n_below - len(below_p))
        ranked = sorted(infeasible, key=lambda t: violation[t.number])
        n_inf = min(n_below, len(ranked))
        below = sorted(below_c + below_p + ranked[:n_inf], key=lambda t: t.number)
        above = sorted(above_c + above_p + ranked[n_inf:], key=lambda t: t.number)
        return below, above

    def _split_rows_one_objective(self, study: Study, n_below: int) -> Split:
        """The same split over the rows as arrays: feasible trials best first (ties in trial
        order, as Python's stable sort leaves them), then the infeasible by violation."""
        number = np.asarray(self._row_numbers)
        violation = np.asarray(self._row_violation)
        sign = -1.0 if study.direction == StudyDirection.MAXIMIZE else 1.0
        feasible = np.flatnonzero(violation <= 0)
        ranked = feasible[np.lexsort((number[feasible], sign * np.asarray(self._row_value)[feasible]))]
        infeasible = np.flatnonzero(violation > 0)
        ranked_inf = infeasible[np.lexsort((number[infeasible], violation[infeasible]))]
        n_good = min(n_below, len(ranked))
        n_bad = min(max(0, n_below - n_good), len(ranked_inf))
        below = np.concatenate([ranked[:n_good], ranked_inf[:n_bad]])
        above = np.concatenate([ranked[n_good:], ranked_inf[n_bad:]])
        rows = self._rows
        return (
            [rows[i] for i in below[np.argsort(number[below])]],
            [rows[i] for i in above[np.argsort(number[above])]],
        )

    def observations(
        self, trials: list[FrozenTrial], search_space: dict[str, BaseDistribution], study: Study
    ) -> dict[str, np.ndarray]:
        """A part of the split's columns, read from the rows kept (Optuna's own for other lists)."""
        rows = next((r for part, r in self._split_rows if part is trials), None)
        if rows is None:
            return super().observations(trials, search_space, study)
        cols = {name: self._array(name, dist)[rows] for name, dist in search_space.items()}
        if not cols:
            return {}
        has_all = np.logical_and.reduce([~np.isnan(c) for c in cols.values()])
        return {name: c[has_all] for name, c in cols.items()}

    def _array(self, name: str, dist: BaseDistribution) -> np.ndarray:
        """The column of ``name`` over the rows of this split, the running trials' after them."""
        key = (name, dist)
        arr = self._arrays.get(key)
        if arr is None:
            arr = self._arrays[key] = np.asarray(
                self._column(name, dist) + self._values(self._running, name, dist)
            )
        return arr

    def _column(self, name: str, dist: BaseDistribution) -> list[float]:
        """Every row's internal value of ``name`` under ``dist`` (nan where the trial lacks it),
        extended over the rows added since it was last read."""
        col = self._columns.setdefault((name, dist), [])
        col.extend(self._values(self._raw[len(col) :], name, dist))
        return col

    @staticmethod
    def _values(rows: list[dict[str, Any]], name: str, dist: BaseDistribution) -> list[float]:
        return [math.nan if name not in p else float(dist.to_internal_repr(p[name])) for p in rows]
