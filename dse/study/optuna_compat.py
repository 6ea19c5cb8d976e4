"""Every use dse makes of Optuna beyond its public interface, in one place, each with its reason.

Nothing here runs at import; nothing of Optuna's is changed for longer than a call of dse's own
sampler. ``tests/test_optuna_compat.py`` pins each behaviour relied on against the installed
Optuna, so an upgrade that breaks one fails there, naming it, not somewhere inside a study.

* :func:`storage_of`: the storage under a :class:`optuna.Study`.
* :class:`TPEHooks`: TPE's two passes over the history as methods (``dse.study.tpe``), and
  :func:`scipy_log_ndtr` while it samples.
* :func:`grid_of`, :func:`set_trial_system_attr`: what ``dse.study.sweep.GridSampler`` shares
  with Optuna's grid sampler.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, cast

import numpy as np
import optuna
import scipy.special
from optuna.distributions import BaseDistribution
from optuna.samplers._tpe import sampler as tpe_sampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

try:  # Optuna's log Phi; an Optuna without it keeps its own (scipy_log_ndtr does nothing)
    from optuna.samplers._tpe import _truncnorm
except ImportError:  # pragma: no cover - another Optuna
    _truncnorm = None  # type: ignore[assignment]

Split = tuple[list[FrozenTrial], list[FrozenTrial]]


def storage_of(study: Study) -> optuna.storages.BaseStorage:
    """The storage a study was opened on (the RDB storage itself, not Optuna's cache over it).

    Why private: a Study keeps its storage in ``_storage`` (an ``RDBStorage`` under a
    ``_CachedStorage``, ``_backend``) with no accessor. dse's runner holds the storage it opened and
    passes it; this serves callers that hold only the Study (``dse.study.runner.enqueue_first``
    from the Python API and tests)."""
    storage = study._storage
    return cast(optuna.storages.BaseStorage, getattr(storage, "_backend", storage))


# ---------------------------------------------------------------------------------------------
# TPE


class TPEHooks(optuna.samplers.TPESampler):
    """Optuna's :class:`~optuna.samplers.TPESampler` with its two passes over the history as
    methods a subclass replaces: :meth:`split` (the good and the bad trials for a trial) and
    :meth:`observations` (a split part's parameters as columns). As it stands it proposes what
    Optuna's TPE proposes.

    Why private: TPESampler takes neither as an argument. ``_sample`` below is Optuna 5.0's, with
    :meth:`split` in place of its read and split of the trials, sampling under
    :func:`scipy_log_ndtr`; ``_get_internal_repr`` is where Optuna reads a part's parameters. The
    accessors read settings TPESampler keeps private."""

    def split(self, study: Study, trial: FrozenTrial) -> Split:
        """The good and the bad trials for ``trial``, as Optuna splits them (called once for each
        time TPE samples: for the relative parameters, and for each parameter outside them)."""
        running = (TrialState.RUNNING,) if self.constant_liar else ()
        states = (TrialState.COMPLETE, TrialState.PRUNED, *running)
        trials = [t for t in study.get_trials(deepcopy=False, states=states) if t.number != trial.number]
        n = sum(t.state != TrialState.RUNNING for t in trials)
        return tpe_sampler._split_trials(study, trials, self.gamma(study)(n))

    def observations(
        self, trials: list[FrozenTrial], search_space: dict[str, BaseDistribution], study: Study
    ) -> dict[str, np.ndarray]:
        """The internal values of ``search_space``'s parameters of the ``trials`` (a part of a
        split) that have them all, one array per parameter."""
        return super()._get_internal_repr(trials, search_space, study)

    @property
    def constant_liar(self) -> bool:
        """Whether running trials count as bad ones (TPESampler's ``constant_liar``)."""
        return bool(self._constant_liar)

    def gamma(self, study: Study) -> Callable[[int], int]:
        """How many of n finished trials are good: the one given, or Optuna's default for the
        study's number of objectives (chosen once, at first use, as Optuna does)."""
        if self._gamma is None:
            one = len(study.directions) <= 1
            self._gamma = tpe_sampler.default_gamma if one else tpe_sampler.default_gamma_multiobjective
        return cast(Callable[[int], int], self._gamma)

    def params_so_far(self, trial: FrozenTrial, study: Study) -> dict[str, Any]:
        """A trial's parameters as TPE reads them: a running one's include the relative parameters
        its worker was proposed and has not asked for yet (the constant liar's view)."""
        return cast(dict[str, Any], self._get_params(trial, study))

    def _sample(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        below, above = self.split(study, trial)
        with scipy_log_ndtr():
            mpe_below = self._build_parzen_estimator(study, search_space, below, handle_below=True)
            mpe_above = self._build_parzen_estimator(study, search_space, above, handle_below=False)
            samples_below = mpe_below.sample(self._rng.rng, self._n_ei_candidates)
            acq = self._compute_acquisition_func(samples_below, mpe_below, mpe_above)
        ret = optuna.samplers.TPESampler._compare(samples_below, acq)
        for name, dist in search_space.items():
            ret[name] = dist.to_external_repr(ret[name])
        return ret

    def _get_internal_repr(
        self, trials: list[FrozenTrial], search_space: dict[str, BaseDistribution], study: Study
    ) -> dict[str, np.ndarray]:
        return self.observations(trials, search_space, study)


def split_complete(trials: list[FrozenTrial], study: Study, n_below: int) -> Split:
    """Optuna's split of feasible complete trials: the best ``n_below`` by value, or for several
    objectives by non-domination rank with its hypervolume tie-break (which is why dse calls it)."""
    below, above = tpe_sampler._split_complete_trials(trials, study, n_below)
    return list(below), list(above)


def split_pruned(trials: list[FrozenTrial], study: Study, n_below: int) -> Split:
    """Optuna's split of feasible pruned trials, by their last step and intermediate value."""
    below, above = tpe_sampler._split_pruned_trials(trials, study, n_below)
    return list(below), list(above)


_SWAP = threading.RLock()


@contextlib.contextmanager
def scipy_log_ndtr() -> Iterator[None]:
    """Optuna's truncated normal with :func:`scipy.special.log_ndtr` for log Phi(x) during the
    block, its own after it.

    Why private: Optuna 5 computes log Phi one element at a time in Python (``np.frompyfunc``
    behind a cache): in 300 trials of the headline study 2.6 million calls, 60% of TPE's time.
    scipy's is the same function in C and more exact in the tails (the tests check they agree).
    Optuna takes no other, so the module's function is swapped while dse's TPE samples, under a
    lock (threads that sample at once wait for each other), and put back."""
    if _truncnorm is None or not hasattr(_truncnorm, "_log_ndtr"):
        yield
        return
    with _SWAP:
        own = _truncnorm._log_ndtr
        setattr(_truncnorm, "_log_ndtr", scipy.special.log_ndtr)  # noqa: B010 - a private name mypy does not know
        try:
            yield
        finally:
            setattr(_truncnorm, "_log_ndtr", own)  # noqa: B010


# ---------------------------------------------------------------------------------------------
# the grid sampler


class Grid(NamedTuple):
    """What Optuna's grid sampler holds: its parameters (sorted), its points in the order its
    seed shuffled them, the search space it records on each trial, and its random state."""

    names: list[str]
    points: list[tuple[Any, ...]]
    search_space: dict[str, list[Any]]
    rng: np.random.RandomState


def grid_of(sampler: optuna.samplers.GridSampler) -> Grid:
    """Why private: :class:`optuna.samplers.GridSampler` keeps its shuffled grid and random state
    to itself; dse's grid sampler chooses each trial's point among those no trial holds, from the
    same shuffled grid and stream as Optuna's, so a seed gives the points it always gave."""
    return Grid(sampler._param_names, sampler._all_grids, sampler._search_space, sampler._rng.rng)


def set_trial_system_attr(study: Study, trial: FrozenTrial, key: str, value: Any) -> None:
    """Why private: a grid sampler's ``before_trial`` tells its ``sample_independent`` which point
    the trial has through the trial's system attributes, as Optuna's own GridSampler does; neither
    Study nor FrozenTrial sets one, and the storage's setter needs the trial's id."""
    study._storage.set_trial_system_attr(trial._trial_id, key, value)
