"""The shadow prices of a study's best design, computed once when a run ends and stored with the
study, so the report reads them rather than solving anything.

The prices are LP duals at the best trial's placement: what one more TB/s of HBM bandwidth, GB of
HBM, GB/s of host link or NIC per GPU would save per hour. The best trial's placement is solved
again here (a search trial from its choice, a grid trial at its point), once per run.
"""

from __future__ import annotations

from typing import Any

from dse.context import Context
from dse.perf.params import PerfParams
from dse.placement.plan import place_best
from dse.placement.request import Topology
from dse.plain import plain
from dse.study.api import StudyResults
from dse.study.best import PRICES_ATTR
from dse.study.choice import choice_from_params
from dse.study.grid import point_of, spec_at
from dse.study.sweep import request_at
from dse.study.trial import request_for


def pricing_context(res: StudyResults, params: PerfParams) -> Context:
    """What a best design is priced with: the results' catalog, ``params`` and a trial's solver."""
    from dse.study.runner import TRIAL_SOLVE  # (it imports the study's modules)
    from formulations.solve import PlacementSolver

    return Context(res._cat(), params, PlacementSolver(TRIAL_SOLVE))


def store_best_prices(res: StudyResults, ctx: Context) -> None:
    """Price the best trial (on the first objective) and store it with the study."""
    number = res.best_trial()
    if number is None:
        return
    stored = res.study.user_attrs.get(PRICES_ATTR)
    if stored is not None and stored.get("trial") == number:
        return
    res.study.set_user_attr(PRICES_ATTR, {"trial": number, "prices": best_prices(res, number, ctx)})


def best_prices(res: StudyResults, number: int, ctx: Context) -> list[dict[str, Any]]:
    """Trial ``number``'s placement solved again under ``ctx``'s catalog, and its shadow prices
    (what a run stores; a report read with another catalog than the trials ran with, its own)."""
    trial = next(t for t in res.read.get_trials() if t.number == number)
    spec = res.spec
    if spec.is_grid:
        point = point_of(trial.params)
        at = spec_at(spec, point)
        req = request_at(at, ctx.catalog, float(point.get("headroom", 0.0)), point.get("kv_policy"))
        topologies = [Topology(t) for t in at.search.topologies]
    else:
        choice = choice_from_params(trial.params)
        req, topologies = request_for(spec, choice, ctx.catalog), [Topology(choice.topology)]
    placed = place_best(req, topologies, ctx)
    return [plain(p) for p in placed.shadow_prices]
