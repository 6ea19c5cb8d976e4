"""Markdown cells and tables of the study reports."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

COST_SPEC = ".4g"
"""A $ per million tokens in the tables: four significant figures ($0.01449 had read 0.014 at three
decimals, 3% off, and designs 0.3% apart alike)."""


def fmt(value: Any, spec: str = "", scale: float = 1.0) -> str:
    """One table cell: ``-`` for missing or non-finite numbers, yes/no for booleans, numbers
    with ``spec`` (or four significant digits), text with Markdown pipes escaped."""
    if value is None:
        return "-"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | float | np.integer | np.floating):
        x = float(value) * scale
        if not math.isfinite(x):
            return "-"
        if spec:
            return format(x, spec)
        if isinstance(value, int | np.integer) and scale == 1.0:
            return f"{int(value):,}"
        if abs(x) < 1e-9:  # solver and integration noise around zero
            return "0"
        return f"{x:,.4g}" if abs(x) < 1e4 else f"{x:,.0f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool] = ()) -> str:
    """A Markdown table of formatted cells; ``numeric`` columns are right-aligned."""
    align = [("---:" if i < len(numeric) and numeric[i] else "---") for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
