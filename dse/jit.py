"""numba's ``njit`` for the compiled kernels, loaded once pyomo's scipy hook is dropped
(:mod:`dse.scipy_hook`): numba imports scipy as it loads."""

from __future__ import annotations

from dse.scipy_hook import drop_pyomo_scipy_hook

drop_pyomo_scipy_hook()

from numba import njit  # noqa: E402 - after the hook is gone

__all__ = ["njit"]
