"""Studies: named searches over deployments, their runs, results, exports and reports."""

from dse.study.api import Study, StudyResults
from dse.study.spec import StudySpec, load_study

__all__ = ["Study", "StudyResults", "StudySpec", "load_study"]
