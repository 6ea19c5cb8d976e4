"""pyomo's modelling layer, as the formulations import it: ``from formulations.pyomo_layer import pyo``.

Two choices, both about import time:

- ``pyomo.core`` alone: ``pyomo.environ`` also loads every plugin (0.4 s more).
- Without pyomo's import hook for scipy (:mod:`dse.scipy_hook`), which made every process that
  also loads numba import four scipy packages dse never uses.
"""

from __future__ import annotations

from dse.scipy_hook import drop_pyomo_scipy_hook

drop_pyomo_scipy_hook()

import logging  # noqa: E402

import pyomo.core as pyo  # noqa: E402 - after the hook is gone


def _not_an_interrupt(record: logging.LogRecord) -> bool:
    """pyomo logs a component whose construction raised, then raises it again: for Ctrl-C (or a
    study's SIGTERM) that is an ``ERROR: Constructing component ... KeyboardInterrupt`` on stdout
    beside dse's own one line, which the interrupt already says. Other errors are logged as pyomo
    logs them."""
    return not any(a in ("KeyboardInterrupt", "SystemExit") for a in record.args or ())


logging.getLogger("pyomo.core").addFilter(_not_an_interrupt)

__all__ = ["pyo"]
