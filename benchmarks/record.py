"""The figures a benchmark reports, collected by ``make bench`` (``benchmarks/run_all.py``).

A benchmark prints its figures for people and also calls :func:`figure` for each one that goes
into the results file. Outside ``run_all.py`` (no ``DSE_BENCH_RESULTS`` in the environment)
:func:`figure` does nothing.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

RESULTS_ENV = "DSE_BENCH_RESULTS"


def figure(name: str, value: float, unit: str, note: str = "") -> None:
    """Record one figure of the running benchmark (named after its script)."""
    target = os.environ.get(RESULTS_ENV)
    if not target:
        return
    row = {
        "benchmark": Path(sys.argv[0]).stem,
        "figure": name,
        "value": float(value),
        "unit": unit,
        "note": note,
    }
    with open(target, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
