"""The best design of a study, in full, from what its trials stored: the pools, metrics and stage
split of the best trial's record, the shadow prices the run stored (:mod:`dse.study.prices`), and
the simulator's verdicts from its stored design simulated again (milliseconds; nothing is solved).
"""

from __future__ import annotations

from typing import Any

from dse.perf.params import load_params
from dse.sim.stored import simulate_stored
from dse.study.api import StudyResults
from dse.study.report import BestDesign

PRICES_ATTR = "best_shadow_prices"
"""The study's user attribute the run writes (:mod:`dse.study.prices`): ``{"trial", "prices"}``."""


def best_design(res: StudyResults) -> BestDesign | None:
    number = res.best_trial()
    if number is None:
        return None
    trial = next(t for t in res.study.get_trials(deepcopy=False) if t.number == number)
    record: dict[str, Any] = trial.user_attrs.get("record", {})
    sim = simulate_stored(record.get("simulation"), res._cat(), load_params())
    if sim is None:
        return None
    f = sim.fluid
    verdicts = {
        "stable": bool(f.stable[0]),
        "oscillating": bool(f.oscillating[0]),
        "oscillation_period_s": float(f.oscillation_period_s[0]),
        "ttft_mean_s": float(f.ttft_mean_s[0]),
        "ttft_p99_s": float(f.ttft_p99_s[0]),
        "tpot_mean_s": float(f.tpot_mean_s[0]),
        "e2e_mean_s": float(f.e2e_mean_s[0]),
        "near_capacity": bool(f.near_capacity[0]),
    }
    stored = res.study.user_attrs.get(PRICES_ATTR)
    prices = list(stored["prices"]) if stored is not None and stored.get("trial") == number else []
    return BestDesign(
        trial=number,
        pools=list(record.get("pools", [])),
        metrics=dict(record.get("metrics", {})),
        shadow_prices=prices,
        sim=verdicts,
        stage_ms=dict(record.get("stage_ms", {})),
    )
