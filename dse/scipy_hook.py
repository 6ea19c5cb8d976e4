"""pyomo's import hook for scipy, dropped: :func:`drop_pyomo_scipy_hook`.

When ``pyomo.common.dependencies`` loads, it arranges that as soon as anything in the process
imports ``scipy``, pyomo imports ``scipy.stats``, ``scipy.integrate``, ``scipy.sparse`` and
``scipy.spatial`` too (0.5-0.8 s), ready for its own solvers; if scipy is loaded already, it
imports them at once. dse uses none of them. numba imports ``scipy`` when it loads (to check its
version), so every process with the placement MILP and the simulators paid for the four. So the
hook is dropped before numba loads (:mod:`dse.jit`) and where the formulations import pyomo
(:mod:`formulations.pyomo_layer`). ``python benchmarks/startup.py`` measures the difference;
``tests/test_startup.py`` checks the command line's own import orders.

Its hook for ``matplotlib`` goes too: on ``import matplotlib`` pyomo imported ``matplotlib.pyplot``,
``matplotlib.pylab`` and ``matplotlib.backends`` for its own plots (0.05-0.15 s more than the
pyplot a study's report draws with).
"""

from __future__ import annotations

import sys


def drop_pyomo_scipy_hook() -> None:
    """Load pyomo's table of deferred imports and take scipy and matplotlib out of its hook
    (:data:`DROPPED`). Pyomo's own deferred ``scipy`` then resolves only if pyomo itself uses it
    (it imports the four packages then). Not when scipy is loaded and pyomo is not: loading pyomo
    now would import them at once, so that is left to a caller that needs pyomo."""
    if "scipy" in sys.modules and "pyomo.common.dependencies" not in sys.modules:
        return
    from pyomo.common import dependencies

    # Why private: pyomo keeps the hook in this class-level table and offers no switch. A pyomo
    # without the table keeps its hook (slower, not wrong).
    hooks = getattr(getattr(dependencies, "DeferredImportCallbackFinder", None), "_callbacks", None)
    if isinstance(hooks, dict):
        for name in DROPPED:
            hooks.pop(name, None)


DROPPED = ("scipy", "matplotlib")  # pyomo's deferred imports whose hooks load what dse never uses
