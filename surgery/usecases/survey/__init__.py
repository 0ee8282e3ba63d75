"""The survey use case: every model of a folder against several targets in one run (run.py), and its pieces: the
request and its jobs (request.py), one cell in its child (cells.py), the cell cache (cache.py), where cells run
(engines.py: local threads, Ray), the report (report.py: report.html and SARIF)."""

from surgery.usecases.survey.cells import final_outcome, survey_cell
from surgery.usecases.survey.request import OUTCOMES, Job, SurveyInputError, SurveyRequest
from surgery.usecases.survey.run import SurveyProgress, SurveyResult, comparable, prepare, summarize, survey

__all__ = [
    "OUTCOMES",
    "Job",
    "SurveyInputError",
    "SurveyProgress",
    "SurveyRequest",
    "SurveyResult",
    "comparable",
    "final_outcome",
    "prepare",
    "summarize",
    "survey",
    "survey_cell",
]
