"""A placement report as plain JSON values (``dse place --json``; the simulator reads it back)."""

from __future__ import annotations

from typing import Any

from dse.placement.plan import PlacementReport
from dse.plain import plain

SCHEMA_VERSION = 1


def report_to_dict(report: PlacementReport) -> dict[str, Any]:
    out = plain(report)
    for doc, o in zip(out["outcomes"], report.outcomes, strict=True):
        # a goodput optimum may serve nothing: solved ("optimal"), and yet no design
        doc["feasible"] = o.feasible
    out["schema_version"] = SCHEMA_VERSION
    out["best_topology"] = report.best.topology.value if report.best else None
    return out
