"""Evals: a dataset of cases, each run in its own jail on a private copy of its fixture,
scored, stored, resumable and rescored offline (issue 17).

This package sits above `tiller.loop` and `tiller.fleet`. A `Case` is what one agent run
is asked and what a right answer looks like; a `Scorer` turns a run's `CaseOutcome` into a
`Score`. `Eval` runs an agent on every case (`epochs` times, `concurrency` at once, within
one budget and under one cancel token) and stores each run's result in the run store
(`CaseResultRecord`, in `EVAL_RESULTS_BUCKET`); `rescore` scores stored outcomes again
without running the agent.
"""

from ._case import MAX_CASE_ID, Case, CaseBudget, check_case_id
from ._eval import MAX_EVAL_ID, Eval, EvalProgress, check_eval_id
from ._outcome import CaseOutcome, Scorer
from ._report import CaseResult, EvalReport, ScorerSummary, pass_at_k, pass_hat_k
from ._rescore import rescore
from ._results import (
    EVAL_RESULTS_BUCKET,
    CaseResultRecord,
    CaseStatus,
    EvalRecord,
    EvalResultStore,
)
from ._score import Score

__all__ = [
    "EVAL_RESULTS_BUCKET",
    "MAX_CASE_ID",
    "MAX_EVAL_ID",
    "Case",
    "CaseBudget",
    "CaseOutcome",
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
    "check_case_id",
    "check_eval_id",
    "pass_at_k",
    "pass_hat_k",
    "rescore",
]
