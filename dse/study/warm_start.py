"""A search's first trials: the designs the full placement picks.

The placement MILP already chooses exactly among every listed hardware and shape at once (as
``dse place`` does), which a search trial, with one hardware and shape per side, cannot. So a
search starts from what it picks: for each KV policy and topology of the study, one MILP over all
its units (the decode batch capped at the top of the study's range, the first prefill chunk).
Its answer may mix several units per side (an 8-GPU B200 prefill pool beside a 32-GPU GB200 one);
a trial cannot, so every pairing of a prefill-side and a decode-side pool of the answer is a
design, the largest pools first. The first designs of every answer come first (the answer best
by the MILP's objective first: cost, or GPUs when those are the study's first objective), then
the second ones, and so on, so that a short list still covers every KV policy and topology. They
are enqueued as trials in the search's own parameters; the sampler then explores from there what
the MILP does not see: the batch cap, the chunk, the simulator's verdict, objectives other than
cost, and the designs the projection to one unit per side misses.

A few MILPs per run (0.02-1.5 s for the shipped studies); ``warm_start = false`` under
``[search]`` turns it off. Grid studies have no search to start.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from dse.catalog import Catalog
from dse.context import Context
from dse.perf.params import PerfParams
from dse.placement.plan import PoolPlan, TopologyOutcome, place_best
from dse.placement.request import PlacementRequest, Topology
from dse.study.choice import Choice, trial_params
from dse.study.spec import StudySpec
from dse.study.sweep import request_at
from formulations.placement_data import Role
from formulations.solve import PlacementSolver


def warm_start_params(
    spec: StudySpec, catalog: Catalog, params: PerfParams, solver: PlacementSolver, limit: int
) -> list[dict[str, Any]]:
    """The Optuna parameters of at most ``limit`` first trials (none for a grid study or with
    ``warm_start`` off), in the order described above, without repeats."""
    s = spec.search
    if spec.is_grid or not s.warm_start or limit < 1:
        return []
    answers: list[tuple[float, list[Choice]]] = []
    listed = {catalog.hardware(h).id: h for h in spec.hardware}  # the study may name an alias
    ctx = Context(catalog, params, solver)
    for kv in s.kv_policies:
        req = warm_request(spec, catalog, kv)
        placed = place_best(req, [Topology(t) for t in s.topologies], ctx, with_shadow_prices=False)
        for outcome in placed.outcomes:  # every topology's answer, not only the best
            if outcome.feasible and outcome.result.objective is not None:
                answers.append((outcome.result.objective, designs(outcome, req, spec, listed)))
    answers.sort(key=lambda a: a[0])
    out: list[dict[str, Any]] = []
    for c in itertools.chain.from_iterable(itertools.zip_longest(*(d for _, d in answers))):
        p = trial_params(c) if c is not None else None
        if p is not None and p not in out:
            out.append(p)
    return out[:limit]


def warm_request(spec: StudySpec, catalog: Catalog, kv_policy: str) -> PlacementRequest:
    """The full placement a search starts from, with the units a trial builds: aggregated ones
    at the target's batch, not at tighter paces (a trial searches the batch)."""
    at = request_at(spec, catalog, 0.0, kv_policy)
    return replace(at, options=replace(at.options, tighter_paces=False))


def designs(
    outcome: TopologyOutcome, req: PlacementRequest, spec: StudySpec, listed: dict[str, str]
) -> list[Choice]:
    """One unit per side from a placement's pools: every pairing of a prefill-side and a
    decode-side pool (each aggregated pool alone), the pair with the larger pools first. The
    decode cap is the one the placement had, the top of the study's range, so a trial builds
    the same decode unit; hardware comes back under the name the study lists it by."""
    pools = sorted(outcome.pools, key=lambda p: -p.gpus)

    def side(*roles: Role) -> list[PoolPlan]:
        return [p for p in pools if p.unit.role in roles]

    if outcome.topology is Topology.AGGREGATED:
        pairs = [(p, p) for p in side(Role.MIXED)]
    else:
        pre, dec = side(Role.PREFILL), side(Role.DECODE, Role.ATTENTION)
        order = sorted(itertools.product(range(len(pre)), range(len(dec))), key=lambda ij: (sum(ij), ij))
        pairs = [(pre[i], dec[j]) for i, j in order]
    mid = side(Role.MIDFILL)  # four-stage: the largest midfill pool, else the prefill side's place
    ffn = 0.0
    expert = side(Role.FFN)
    if expert:  # the listed expert-side batch nearest the largest expert pool's
        per_gpu = expert[0].unit.decode_batch / expert[0].unit.parallel.gpus
        ffn = float(min(spec.search.afd.ffn_tokens_per_gpu, key=lambda v: abs(v - per_gpu)))
    return [
        Choice(
            topology=outcome.topology.value,
            kv_policy=req.options.kv_policy,
            prefill_hardware=listed.get(p.unit.hardware, p.unit.hardware),
            decode_hardware=listed.get(d.unit.hardware, d.unit.hardware),
            prefill_shape=p.unit.parallel.label(),
            decode_shape=d.unit.parallel.label(),
            chunk_tokens=req.options.prefill_chunk_tokens,
            max_batch=int(spec.search.decode.max_batch[1]),
            prefill_share=float(p.unit.prefill_share) if p.unit.role is Role.MIXED else 0.0,
            ffn_tokens_per_gpu=ffn,
            **_midfill(
                outcome.topology,
                (mid or [p])[0],
                listed,
                spec.search.midfill.shapes or spec.search.prefill.shapes,
            ),
        )
        for p, d in pairs
    ]


def _midfill(
    topology: Topology, pool: PoolPlan, listed: dict[str, str], shapes: tuple[str, ...]
) -> dict[str, str]:
    """A four-stage choice's midfill hardware and shape, from ``pool``, its shape one of the
    search's midfill ``shapes`` (the first where the pool is a prefill pool of another shape: a
    design with no midfill pool had enqueued its prefill shape, which the search does not list,
    and the run ended in Optuna's ValueError)."""
    if topology is not Topology.FOUR_STAGE:
        return {}
    hw, shape = pool.unit.hardware, pool.unit.parallel.label()
    return {"midfill_hardware": listed.get(hw, hw), "midfill_shape": shape if shape in shapes else shapes[0]}
