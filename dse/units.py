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
