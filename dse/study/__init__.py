"""Studies: named searches over deployments, their runs, results, exports and reports."""

from typing import TYPE_CHECKING

from dse.lazy import exports

if TYPE_CHECKING:
    from dse.study.api import Study, StudyResults
    from dse.study.spec import StudySpec, load_study

__all__ = ["Study", "StudyResults", "StudySpec", "load_study"]
__getattr__, __dir__ = exports(
    __name__,
    {
        "Study": "dse.study.api",
        "StudyResults": "dse.study.api",
        "StudySpec": "dse.study.spec",
        "load_study": "dse.study.spec",
    },
)
