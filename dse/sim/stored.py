"""A stored design simulated again: what a study's exports and report use for trajectories and
verdicts. The simulator is deterministic and takes milliseconds; nothing is placed or solved, so
neither pyomo nor the solver is imported."""

from __future__ import annotations

from typing import Any

import numpy as np

from dse.catalog import Catalog
from dse.perf.params import PerfParams
from dse.sim.from_placement import design_from_record, pipeline_of
from dse.sim.scenario import scenario_from_record
from dse.sim.simulation import SimulationReport, simulate


def simulate_stored(
    inputs: dict[str, Any] | None, catalog: Catalog, params: PerfParams
) -> SimulationReport | None:
    """The simulation of a trial's stored inputs (``{"design", "scenario", "dt_s", "buffer_max"}``,
    as :func:`dse.study.trial.record_of` writes them); None when the trial placed nothing."""
    if not inputs:
        return None
    design = design_from_record(inputs["design"])
    buffer = inputs.get("buffer_max")
    pipe, kv_gb = pipeline_of(design, catalog, params, buffer_max=np.inf if buffer is None else float(buffer))
    scenario = scenario_from_record(inputs["scenario"])
    return simulate(pipe, scenario, dt=float(inputs["dt_s"]), kv_gb_per_seq=kv_gb, resting=design.resting)
