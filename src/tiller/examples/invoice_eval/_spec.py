"""The invoice eval's cases and spec: 20 seeded bugs (`cases.jsonl`), each case a copy of
the pristine project with its bug, scored by running the project's tests in the copy."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Final

from ...evals import Case, Dataset, EvalSpec, ExpectedCall, ToolTraceMatch
from ._approver import InvoiceCaseApprover
from ._fixer import SHELL_TOOL
from ._fixtures import build_fixtures
from ._scorer import PristineTestsScorer
from ._seeded_bug import SeededBug

__all__ = [
    "AGENT_REFERENCE",
    "CASES_FILE",
    "invoice_cases",
    "invoice_eval_spec",
    "tests_pass_scorer",
]

#: The dataset: a row per case with its prompt and its bug (`metadata.bug`).
CASES_FILE: Final = Path(__file__).with_name("cases.jsonl")
#: The agent, as a reference a spec (and a fleet worker) loads.
AGENT_REFERENCE: Final = "tiller.examples.invoice_eval:invoice_fixer_agent"


def invoice_cases(*, cache_root: str | os.PathLike[str] | None = None) -> tuple[Case, ...]:
    """The eval's cases, each with its seeded fixture (built or reused from the cache;
    see `build_fixtures`)."""
    return _cases_and_pristine(cache_root)[0]


def tests_pass_scorer(pristine: Path) -> PristineTestsScorer:
    """Scores a case by the pristine tests (in `pristine`, outside the copy), run
    against the copy's `invoice.py` inside the sandbox: an agent that changed the copy's
    tests, or left files there to end the run early, is still judged by the real ones
    (see `PristineTestsScorer` for what it guards against and what it cannot)."""
    return PristineTestsScorer(pristine, timeout=120, name="tests")


def invoice_eval_spec(
    *, cache_root: str | os.PathLike[str] | None = None, concurrency: int = 4
) -> EvalSpec:
    """The bundled example eval (`tiller eval run examples/invoice_eval/eval.py`)."""
    cases, pristine = _cases_and_pristine(cache_root)
    return EvalSpec(
        name="invoice-fixes",
        agent=AGENT_REFERENCE,
        cases=cases,
        scorers=[
            tests_pass_scorer(pristine),
            # It checked its work: an edit, then the tests run again.
            ToolTraceMatch(
                [ExpectedCall(SHELL_TOOL), ExpectedCall("edit_file"), ExpectedCall(SHELL_TOOL)],
                name="verified",
            ),
        ],
        approver=InvoiceCaseApprover(),
        concurrency=concurrency,
    )


def _cases_and_pristine(
    cache_root: str | os.PathLike[str] | None,
) -> tuple[tuple[Case, ...], Path]:
    dataset = Dataset.load(CASES_FILE)
    bugs = [SeededBug.of_metadata(case.id, case.metadata) for case in dataset]
    fixtures = build_fixtures(bugs, cache_root=cache_root)
    cases = tuple(dataclasses.replace(case, fixture=fixtures.cases[case.id]) for case in dataset)
    return cases, fixtures.pristine
