"""The best design of a study, in full, from what its trials stored: the pools, metrics and stage
split of the best trial's record, the shadow prices the run stored (:mod:`dse.study.prices`), and
the simulator's verdicts from its stored design simulated again (milliseconds; nothing is solved,
unless the results are read with another catalog than the trials ran with: its shadow prices are
then solved again under it, about a second).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dse.perf.params import PerfParams
from dse.sim.from_placement import design_from_record
from dse.sim.kv_cache import OUTCOMES, simulate_kv_cache
from dse.sim.stored import simulate_stored
from dse.study.api import StudyResults
from dse.study.report import BestDesign
from dse.study.results import batch_cap, recorded_metrics, sent_load, served_tiers
from dse.study.spec import StudySpec

PRICES_ATTR = "best_shadow_prices"
"""The study's user attribute the run writes (:mod:`dse.study.prices`): ``{"trial", "prices"}``."""


def best_design(res: StudyResults) -> BestDesign | None:
    number = res.best_trial()
    if number is None:
        return None
    trial = next(t for t in res.read.get_trials() if t.number == number)
    record: dict[str, Any] = trial.user_attrs.get("record", {})
    params = res.params
    sim = simulate_stored(record.get("simulation"), res._cat(), params)
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
    if res.catalog_note is not None:  # read with another catalog: its prices, as the note says
        prices = _repriced(res, number, params)
    return BestDesign(
        trial=number,
        pools=[
            {**p, **sent_load(p, record)} for p in record.get("pools", [])
        ],  # the load served, as exported
        metrics=recorded_metrics(dict(record.get("metrics", {}))),
        shadow_prices=prices,
        sim=verdicts,
        stage_ms=dict(record.get("stage_ms", {})),
        settings=engine_settings(res.spec, dict(record.get("choice", {})), params, record.get("pools", [])),
        tiers=served_tiers(record),  # at the traffic served, as exported
        kv_cache=kv_cache_check(record.get("simulation")),
    )


def _repriced(res: StudyResults, number: int, params: PerfParams) -> list[dict[str, Any]]:
    """The best trial's shadow prices under the catalog the results are read with (the stored
    ones are the catalog's the trials ran with: a B200 priced at $1.50 where they ran at $1.95 had
    shown the stored $1.69 an hour beside a note saying it used the new price; it gives $1.30)."""
    from dse.study.prices import best_prices, pricing_context  # (it imports this module)

    return best_prices(res, number, pricing_context(res, params))


CACHE_SESSIONS = 100_000  # sessions the live-cache check runs at most (about 0.02 s)


def kv_cache_check(inputs: dict[str, Any] | None) -> dict[str, tuple[float, float]]:
    """The design's planned resting KV run as a live LRU cache (:mod:`dse.sim.kv_cache`): per
    outcome, the planned and the simulated share of returning turns; empty without any. The
    window is six of the longest think times; traffic that would start more than
    :data:`CACHE_SESSIONS` sessions in it runs scaled down (rate and tier capacities alike)."""
    if not inputs:
        return {}
    design = design_from_record(inputs["design"])
    rate = design.workload.requests_per_s
    per_s = sum(rate * c.share_of_arrivals for c in design.resting if c.dwell_s > 0)
    if per_s <= 0:
        return {}
    rep = simulate_kv_cache(design.resting, rate, max_sessions=CACHE_SESSIONS)
    return {o: (rep.planned["all"].get(o, 0.0), rep.simulated["all"][o]) for o in OUTCOMES}


def running_cap(role: str, pool: dict[str, Any], choice: dict[str, Any]) -> int | None:
    """A decode (or aggregated) instance's running-request cap: the batch the study sized its pool
    at, the most sequences it runs and still meets the TPOT target (what the study priced and the
    simulator ran as the engine's cap; at most the trial's ``max_batch``, the search's bound), whole
    sequences down; the trial's ``max_batch`` where the record has no such batch. None for a
    prefill pool."""
    if role not in ("decode", "mixed"):
        return None
    bound = choice.get("max_batch")
    cap = batch_cap(float(pool.get("decode_batch") or 0.0))
    if cap is not None:
        return min(cap, int(bound)) if bound else cap
    return int(bound) if bound else None


def engine_settings(
    spec: StudySpec, choice: dict[str, Any], params: PerfParams, pools: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    """What the engine of the design runs with, labelled: the study's engine profile, precisions
    and MTP, and the trial's chunk and each decode pool's running-request cap (`dse deploy` writes
    the same: the batch its pool was sized at, within the search's bound)."""
    caps = {}
    for p in pools:
        if (c := running_cap(str(p.get("role")), p, choice)) is not None:
            caps[f"{p.get('role')} on {p.get('hardware')}"] = c
    cap: Any = choice.get("max_batch")
    if len(set(caps.values())) == 1:
        cap = next(iter(caps.values()))
    elif caps:
        cap = ", ".join(f"{v:,} ({k})" for k, v in caps.items())
    engine = params.engine(spec.engine)
    drafts = 0
    if spec.mtp:
        drafts = spec.mtp_draft_tokens if spec.mtp_draft_tokens is not None else engine.mtp_draft_tokens
    return {
        "engine profile": spec.engine,
        "topology": choice.get("topology"),
        "KV policy": choice.get("kv_policy"),
        "routed-expert weights": spec.precision,
        "KV cache": engine.kv_precision.value,
        "MTP draft tokens per step": drafts,
        "prefill chunk (tokens per forward)": choice.get("chunk_tokens"),
        "running requests per decode instance (cap)": cap,
    }
