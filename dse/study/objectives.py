"""A study's objectives: recorded metrics, or Python functions of a trial's metrics."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from dse.metrics import METRICS

# the magnitude of the value a trial without one gets (no design, or an objective that gave nan):
# the worst either way, so samplers still rank it; the exports show no value
NO_VALUE = 1e12

MetricFn = Callable[[Mapping[str, float]], float]


@dataclass(frozen=True)
class ObjectiveDef:
    """A study objective: a recorded metric, or a Python function of the trial's metrics."""

    name: str
    direction: Literal["minimize", "maximize"]
    fn: MetricFn | None = None

    @classmethod
    def metric(cls, name: str) -> ObjectiveDef:
        m = METRICS[name]
        assert m.direction in ("minimize", "maximize")
        return cls(name, "minimize" if m.direction == "minimize" else "maximize")
