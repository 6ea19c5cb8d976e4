"""What every evaluation runs against: the catalog, the performance parameters and the solver.

One frozen value passed down instead of the same three arguments through every signature. Built
by the caller (the CLI, a study run, a test); constructing it touches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from dse.catalog import Catalog
from dse.perf.params import PerfParams
from formulations.solve import PlacementSolver


@dataclass(frozen=True)
class Context:
    catalog: Catalog
    params: PerfParams
    solver: PlacementSolver
