"""A study's objectives: recorded metrics, or Python functions of a trial's metrics."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from dse.errors import InputError
from dse.metrics import METRICS

# the magnitude of the value a trial without one gets (no design, or an objective that gave nan):
# the worst either way, so samplers still rank it; the exports show no value
NO_VALUE = 1e12

MetricFn = Callable[[Mapping[str, float]], float]
NAME = re.compile(r"[A-Za-z0-9_.-]+")  # a custom objective's name


@dataclass(frozen=True)
class ObjectiveDef:
    """A study objective: a recorded metric, or a Python function of the trial's metrics."""

    name: str
    direction: Literal["minimize", "maximize"]
    fn: MetricFn | None = None

    @classmethod
    def custom(cls, name: str, fn: MetricFn, direction: Literal["minimize", "maximize"]) -> ObjectiveDef:
        """``fn`` of a trial's metrics, under a name of its own (a column ``objective_<name>``)."""
        if not NAME.fullmatch(name):  # a column name BI tools and Hive partitions take as it is
            raise InputError("objective", "name", "must be ASCII letters, digits, '_', '-' or '.'", name)
        if name in METRICS:
            rule = "is a built-in metric's name: give the function a name of its own"
            raise InputError("objective", "name", rule, name)
        return cls(name, direction, fn)

    @classmethod
    def metric(cls, name: str) -> ObjectiveDef:
        m = METRICS.get(name)
        if m is None or m.direction is None:
            valid = sorted(k for k, v in METRICS.items() if v.direction is not None)
            rule = f"must be a metric with a direction: {', '.join(valid)}"
            raise InputError("objective", "name", rule, name)
        assert m.direction in ("minimize", "maximize")
        return cls(name, "minimize" if m.direction == "minimize" else "maximize")
