"""A placement report as plain JSON values (``dse place --json``; the simulator reads it back)."""

from __future__ import annotations

from typing import Any

from dse.placement.plan import PlacementReport
from dse.plain import plain

SCHEMA_VERSION = 1


def report_to_dict(report: PlacementReport) -> dict[str, Any]:
    out = plain(report)
    out["schema_version"] = SCHEMA_VERSION
    out["best_topology"] = report.best.topology.value if report.best else None
    return out
