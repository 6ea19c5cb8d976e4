"""Package attributes imported on first use (PEP 562).

``import dse.placement.request`` runs ``dse/placement/__init__.py`` first; if that imported the
solver, every light submodule (an enum the CLI needs to build its parser) would pay for pyomo.
A package lists what it exports and where each name lives, and this module imports it on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def exports(
    package: str, where: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose names ``where`` maps to their modules."""

    def __getattr__(name: str) -> object:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name]), name)

    def __dir__() -> list[str]:
        return sorted(where)

    return __getattr__, __dir__
