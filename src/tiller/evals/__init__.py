"""Evals: a dataset of cases, each run in its own jail on a private copy of its fixture,
scored, stored, resumable and rescored offline (issue 17).

This package sits above `tiller.loop` and `tiller.fleet`. A `Case` is what one agent run
is asked and what a right answer looks like; a `Scorer` turns a run's `CaseOutcome` into a
`Score`.
"""

from ._case import MAX_CASE_ID, Case, CaseBudget, check_case_id
from ._dataset import DATASET_SUFFIXES, Dataset
from ._dataset_error import DatasetError
from ._outcome import CaseOutcome, Scorer
from ._score import Score

__all__ = [
    "DATASET_SUFFIXES",
    "MAX_CASE_ID",
    "Case",
    "CaseBudget",
    "CaseOutcome",
    "Dataset",
    "DatasetError",
    "Score",
    "Scorer",
    "check_case_id",
]
