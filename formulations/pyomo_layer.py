"""pyomo's modelling layer, as the formulations import it: ``from formulations.pyomo_layer import pyo``.

Two choices, both about import time:

- ``pyomo.core`` alone: ``pyomo.environ`` also loads every plugin (0.4 s more).
- Without pyomo's import hook for scipy (:mod:`dse.scipy_hook`), which made every process that
  also loads numba import four scipy packages dse never uses.
"""

from __future__ import annotations

from dse.scipy_hook import drop_pyomo_scipy_hook

drop_pyomo_scipy_hook()

import pyomo.core as pyo  # noqa: E402 - after the hook is gone

__all__ = ["pyo"]
