"""NumericMatch: the answer's number (structured, or the last one in the text) within an
absolute or relative tolerance of the expected number."""

from __future__ import annotations

from typing import Any

import pytest

from tiller.errors import UsageError
from tiller.evals import Case, CaseOutcome, NumericMatch
from tiller.state import StopCause


def outcome(text: str = "", expected: Any = None, output: Any = None) -> CaseOutcome:
    case = Case("c1", "q", expected=expected)
    return CaseOutcome(case, 0, text, StopCause.COMPLETED, output=output)


async def test_the_last_number_in_the_text_is_the_answer() -> None:
    score = await NumericMatch().score(outcome("3 items, so the total is 1,234.50.", 1234.5))
    assert score.passed and score.explanation == "got 1234.5, expected 1234.5: equal"
    assert (await NumericMatch(pick="first").score(outcome("3 items, total 9", 3))).passed


async def test_absolute_and_relative_tolerances() -> None:
    assert (await NumericMatch(abs_tol=0.5).score(outcome("41.6", 42))).passed
    score = await NumericMatch(abs_tol=0.1).score(outcome("41.6", 42))
    assert not score.passed and score.explanation == "got 41.6, expected 42: outside ±0.1"
    assert (await NumericMatch(rel_tol=0.01).score(outcome("-990", -1000))).passed
    assert not (await NumericMatch(rel_tol=0.001).score(outcome("-990", -1000))).passed


async def test_a_structured_number_wins_and_a_numeric_string_expected_is_read() -> None:
    assert (await NumericMatch().score(outcome("about 7", "12", output=12))).passed
    assert (await NumericMatch(3e-4).score(outcome("rate: 3e-4"))).passed


async def test_an_answer_without_a_number_fails_saying_so() -> None:
    score = await NumericMatch().score(outcome("I don't know.", 5))
    assert (score.passed, score.error) == (False, None)
    assert score.explanation == 'no number in the answer "I don\'t know."'


async def test_an_expected_that_is_no_number_or_missing_is_an_error() -> None:
    score = await NumericMatch().score(outcome("5", "five"))
    assert score.error is not None and "expects a number" in score.explanation
    assert (await NumericMatch().score(outcome("5"))).error is not None


@pytest.mark.parametrize("bad", [{"abs_tol": -1}, {"rel_tol": float("inf")}, {"pick": "middle"}])
def test_bad_options_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(UsageError, match="NumericMatch"):
        NumericMatch(**bad)
