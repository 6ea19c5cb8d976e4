"""Studies: named searches over deployments, their runs, results, exports and reports.

The names below are imported on first use (PEP 562), so that the command line can read a study
file without importing Optuna or the solver.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dse.study.api import Study, StudyResults
    from dse.study.spec import StudySpec, load_study

__all__ = ["Study", "StudyResults", "StudySpec", "load_study"]


def __getattr__(name: str) -> object:
    if name in ("Study", "StudyResults"):
        import dse.study.api as api

        return getattr(api, name)
    if name in ("StudySpec", "load_study"):
        import dse.study.spec as spec

        return getattr(spec, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
