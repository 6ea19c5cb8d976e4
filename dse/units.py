"""Enums parsed once at the edge, with the physics that belongs to each member."""

from __future__ import annotations

import enum


class Precision(enum.Enum):
    """Numeric format of weights, activations or KV cache."""

    BF16 = "bf16"
    FP8 = "fp8"
    FP4 = "fp4"

    @property
    def bytes_per_element(self) -> float:
        return {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5}[self.value]


GB = 1e9
TB = 1e12
GIB = 2**30
MIB = 2**20


def counted(n: float, noun: str) -> str:
    """``n`` of ``noun`` as a sentence says it: ``1 request``, ``2 requests``, ``0.5 requests``
    (the plural with ``s``; the number in full, ``2560``, ``1000000`` and ``0.5``)."""
    return f"{n:.15g} {noun}{'' if n == 1 else 's'}"


def percentile_label(q: float) -> str:
    """A percentile's name with the digits it was given: ``p50``, ``p99.9``, ``p99.99999`` (six
    significant digits had named that one ``p100``, and p99.999991 the same)."""
    return f"p{q:.15g}"


def share_of(x: float) -> str:
    """A share of a whole as a sentence puts it before the whole: ``88% of``, ``350% of``, and
    from 10 times on ``1.2e+05 times`` (a rate of 1e12 requests/s had held ``7715246377247% of``
    a KV cache)."""
    return f"{x:.0%} of" if x < 10 else f"{x:.3g} times"
