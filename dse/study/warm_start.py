"""A search's first trials: the designs the full placement picks.

The placement MILP already chooses exactly among every listed hardware and shape at once (as
``dse place`` does), which a search trial, with one hardware and shape per side, cannot. So a
search starts from what it picks: for each KV policy and topology of the study, one MILP over all
its units (the decode batch capped at the top of the study's range, the first prefill chunk),
and each feasible answer, cheapest first, is enqueued as a trial in the search's own parameters
(its largest pool per side). The sampler then explores from there what the MILP does not see:
the batch cap, the chunk, the simulator's verdict, objectives other than cost.

A few MILPs per run (0.02-1.5 s for the shipped studies); ``warm_start = false`` under
``[search]`` turns it off. Grid studies have no search to start.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dse.catalog import Catalog
from dse.perf.params import PerfParams
from dse.placement.api import solve_candidates
from dse.placement.candidates import build_candidates
from dse.placement.request import Topology
from dse.study.spec import StudySpec
from dse.study.sweep import choice_of, request_at
from dse.study.trial import trial_params
from formulations.solve import PlacementSolver


def warm_start_params(
    spec: StudySpec, catalog: Catalog, params: PerfParams, solver: PlacementSolver, limit: int
) -> list[dict[str, Any]]:
    """The Optuna parameters of at most ``limit`` first trials, cheapest placement first (none
    for a grid study or with ``warm_start`` off)."""
    s = spec.search
    if spec.is_grid or not s.warm_start or limit < 1:
        return []
    picked: list[tuple[float, dict[str, Any]]] = []
    listed = {catalog.hardware(h).id: h for h in spec.hardware}  # the study may name an alias
    for kv in s.kv_policies:
        req = request_at(spec, catalog, 0.0, kv)
        for t in s.topologies:
            outcome = solve_candidates(req, build_candidates(req, Topology(t), catalog, params), solver)
            if not outcome.feasible or outcome.result.objective is None:
                continue
            c = choice_of(outcome, req)
            if t == Topology.AFD.value:  # the listed expert-side batch nearest the pool's
                ffn = min(s.afd.ffn_tokens_per_gpu, key=lambda v: abs(v - c.ffn_tokens_per_gpu))
                c = replace(c, ffn_tokens_per_gpu=float(ffn))
            # the cap the placement had: the trial then builds the same decode unit
            hw = (
                listed.get(c.prefill_hardware, c.prefill_hardware),
                listed.get(c.decode_hardware, c.decode_hardware),
            )
            c = replace(
                c, prefill_hardware=hw[0], decode_hardware=hw[1], max_batch=int(s.decode.max_batch[1])
            )
            picked.append((outcome.result.objective, trial_params(c)))
    picked.sort(key=lambda p: p[0])
    return [p for _, p in picked[:limit]]
