"""Typed values as plain JSON-ready ones: what records, reports and ``--json`` outputs store."""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

import numpy as np


def plain(obj: Any) -> Any:
    """Dataclasses, enums, numpy values and tuples as JSON-ready values; NaN and inf as None, and
    -0.0 (a solver's round-off of nothing: "instances": [-0.0, ...]) as 0.0."""
    kind = type(obj)
    if kind is str or kind is int or kind is bool or obj is None:  # most values: nothing to do
        return obj
    if kind is float:
        return obj + 0.0 if math.isfinite(obj) else None  # -0.0 + 0.0 is 0.0
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.IntEnum):
        return obj.name.lower()
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return [plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return plain(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        v = float(obj)
        return v + 0.0 if math.isfinite(v) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj
