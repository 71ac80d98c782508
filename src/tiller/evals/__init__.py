"""Evals: a dataset of cases, each run in its own jail on a private copy of its fixture,
scored, stored, resumable and rescored offline (issue 17).

This package sits above `tiller.loop` and `tiller.fleet`. A `Case` is what one agent run
is asked and what a right answer looks like; a `Scorer` turns a run's `CaseOutcome` into a
`Score`. `Eval` runs an agent on every case (`epochs` times, `concurrency` at once, within
one budget and under one cancel token) and stores each run's result in the run store
(`CaseResultRecord`, in `EVAL_RESULTS_BUCKET`); `rescore` scores stored outcomes again
without running the agent. `write_html_report` draws a report (and, given a baseline, a
comparison) as one self-contained HTML file, with the optional `report` extra's Plotly.
"""

from ._case import MAX_CASE_ID, Case, CaseBudget, check_case_id
from ._compare import CaseChange, CaseComparison, EvalComparison, compare_reports
from ._dataset import DATASET_SUFFIXES, Dataset
from ._dataset_error import DatasetError
from ._error_line import error_line
from ._eval import MAX_EVAL_ID, Eval, EvalProgress, check_eval_id
from ._outcome import CaseOutcome, Scorer
from ._pass_at_k import PassRates, pass_at_k, pass_hat_k, pass_rates
from ._report import CaseResult, EvalReport, ScorerSummary
from ._report_html import check_html_report, render_html_report, write_html_report
from ._report_json import REPORT_JSON_FORMAT, report_to_json, write_json_report
from ._report_junit import report_to_junit, write_junit_report
from ._rescore import rescore
from ._results import (
    EVAL_RESULTS_BUCKET,
    CaseResultRecord,
    CaseStatus,
    EvalRecord,
    EvalResultStore,
)
from ._score import Score
from ._scorer_function import FunctionScorer
from ._scorer_json import JsonMatch
from ._scorer_judge import JUDGE_SYSTEM_PROMPT, LlmJudge
from ._scorer_numeric import NumericMatch
from ._scorer_trace import ExpectedCall, ToolTraceMatch
from ._scorer_workspace import WorkspaceCheck
from ._scorers_text import ExactMatch, Includes, RegexMatch
from ._spec import DEFAULT_SPEC_ATTRIBUTE, EvalSpec, load_eval_spec
from ._stored_report import list_evals, load_report

__all__ = [
    "DEFAULT_SPEC_ATTRIBUTE",
    "CaseChange",
    "CaseComparison",
    "EvalComparison",
    "EvalSpec",
    "compare_reports",
    "list_evals",
    "load_eval_spec",
    "load_report",
    "DATASET_SUFFIXES",
    "JUDGE_SYSTEM_PROMPT",
    "EVAL_RESULTS_BUCKET",
    "MAX_CASE_ID",
    "MAX_EVAL_ID",
    "Case",
    "CaseBudget",
    "CaseOutcome",
    "Dataset",
    "DatasetError",
    "ExactMatch",
    "ExpectedCall",
    "FunctionScorer",
    "Includes",
    "JsonMatch",
    "LlmJudge",
    "NumericMatch",
    "PassRates",
    "RegexMatch",
    "CaseResult",
    "CaseResultRecord",
    "CaseStatus",
    "Eval",
    "EvalProgress",
    "EvalRecord",
    "EvalReport",
    "EvalResultStore",
    "Score",
    "ScorerSummary",
    "Scorer",
    "ToolTraceMatch",
    "WorkspaceCheck",
    "check_case_id",
    "pass_at_k",
    "pass_hat_k",
    "pass_rates",
    "check_eval_id",
    "error_line",
    "rescore",
    "REPORT_JSON_FORMAT",
    "report_to_json",
    "report_to_junit",
    "write_json_report",
    "write_junit_report",
    "check_html_report",
    "render_html_report",
    "write_html_report",
]
