"""pyomo's modelling layer, as the formulations import it: ``from formulations.pyomo_layer import pyo``.

Two choices, both about import time:

- ``pyomo.core`` alone: ``pyomo.environ`` also loads every plugin (0.4 s more).
- Without pyomo's scipy hook. When ``pyomo.common.dependencies`` loads, it registers an import
  hook so that whenever anything in the process imports ``scipy``, pyomo imports ``scipy.stats``,
  ``scipy.integrate``, ``scipy.sparse`` and ``scipy.spatial`` too, ready for its own solvers.
  numba imports ``scipy`` at import to check its version, so every process that had both pyomo and
  numba paid 0.5-0.8 s for four packages no dse path uses (``python -X importtime -c "import
  dse.study.runner"``; ``tests/test_imports.py`` checks they stay out). Dropping the hook leaves
  pyomo's own deferred ``scipy`` unresolved until pyomo itself uses it, which then imports them
  as before. Only a process that imported scipy before pyomo still pays (pyomo then imports them
  at once).
"""

from __future__ import annotations

import pyomo.core as pyo
from pyomo.common import dependencies

# Why private: pyomo registers the hook in this class-level table and offers no switch. A pyomo
# without the table keeps its hook (slower, not wrong).
_hooks = getattr(getattr(dependencies, "DeferredImportCallbackFinder", None), "_callbacks", None)
if isinstance(_hooks, dict):
    _hooks.pop("scipy", None)

__all__ = ["pyo"]
