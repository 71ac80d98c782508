"""The values an eval is made of: a case checks its id and input, a case budget its
ceilings, a score its value, and a score with an error never passes."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from tiller.errors import UsageError
from tiller.evals import Case, CaseBudget, Score, check_case_id


class Invoice(BaseModel):
    number: str
    total: float


def test_a_string_input_is_the_prompt_and_a_model_is_sent_as_its_json() -> None:
    assert Case("c1", "fix the bug").prompt() == "fix the bug"
    assert Case("c2", Invoice(number="7", total=1.5)).prompt() == '{"number":"7","total":1.5}'
    assert Case("c3", {"b": 1, "a": [2]}).prompt() == '{"a": [2], "b": 1}'


@pytest.mark.parametrize("bad", ["", "a/b", "-lead", "x" * 101, "sp ace", 7, None])
def test_a_case_id_that_cannot_key_its_runs_is_refused_with_what_an_id_is(bad: object) -> None:
    with pytest.raises(UsageError, match="case id"):
        check_case_id(bad)


def test_a_case_without_input_or_with_a_string_for_tags_is_refused() -> None:
    with pytest.raises(UsageError, match="no input"):
        Case("c1", None)
    with pytest.raises(UsageError, match="tags"):
        Case("c1", "x", tags="slow")  # type: ignore[arg-type]


def test_a_fixture_given_as_a_string_becomes_a_path() -> None:
    assert Case("c1", "x", fixture="fixtures/a").fixture == Path("fixtures/a")  # type: ignore[arg-type]


def test_a_case_budget_checks_its_ceilings_and_makes_a_fresh_budget() -> None:
    budget = CaseBudget(max_steps=3, max_cost_usd=0.5).budget()
    assert (budget.max_steps, budget.max_output_tokens, budget.max_cost_usd) == (3, None, 0.5)
    for bad in ({"max_steps": 0}, {"max_steps": True}, {"max_cost_usd": -1.0}):
        with pytest.raises(UsageError, match="case budget"):
            CaseBudget(**bad)  # type: ignore[arg-type]


def test_a_score_passes_at_one_unless_it_says_otherwise() -> None:
    assert Score(1.0).passed is True
    assert Score(0.9).passed is False
    assert Score(0.9, passed=True).passed is True
    assert Score.of(False, "wrong total") == Score(0.0, "wrong total", passed=False)


@pytest.mark.parametrize("bad", [1.5, -0.1, float("nan"), True, "1"])
def test_a_score_outside_zero_to_one_is_refused(bad: object) -> None:
    with pytest.raises(UsageError, match="score's value"):
        Score(bad)  # type: ignore[arg-type]


def test_a_scorer_that_raised_scores_an_error_that_never_passes() -> None:
    score = Score.failed_with("Traceback ...")
    assert (score.passed, score.error, score.value) == (False, "Traceback ...", 0.0)
    with pytest.raises(UsageError, match="cannot pass"):
        Score(1.0, passed=True, error="boom")
