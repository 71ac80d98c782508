"""JsonMatch: the structured answer (or the text parsed, fence and all) against the
expected value, whole or as a subset of keys, with partial credit per key and an
optional schema whose first error is the explanation."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from tiller.errors import UsageError
from tiller.evals import Case, CaseOutcome, JsonMatch
from tiller.state import StopCause


class Invoice(BaseModel):
    number: str
    total: float


def outcome(text: str = "", expected: Any = None, output: Any = None) -> CaseOutcome:
    case = Case("c1", "q", expected=expected)
    return CaseOutcome(case, 0, text, StopCause.COMPLETED, output=output)


async def test_a_structured_output_equal_to_the_expected_passes() -> None:
    answer = Invoice(number="7", total=12.5)
    score = await JsonMatch().score(outcome(expected={"number": "7", "total": 12.5}, output=answer))
    assert score.passed and score.explanation == "all 2 compared keys match"


async def test_the_text_is_parsed_with_or_without_a_json_fence() -> None:
    expected = {"total": 12}
    assert (await JsonMatch().score(outcome('{"total": 12.0}', expected))).passed
    fenced = 'Here it is:\n```json\n{"total": 12}\n```\nDone.'
    assert (await JsonMatch().score(outcome(fenced, expected))).passed


async def test_malformed_json_fails_the_case_saying_where() -> None:
    score = await JsonMatch().score(outcome('{"total": 12,', {"total": 12}))
    assert (score.passed, score.error) == (False, None)
    assert score.explanation.startswith("the answer is not JSON: ")
    assert "line 1" in score.explanation


async def test_partial_credit_is_the_fraction_of_matching_keys() -> None:
    expected = {"number": "7", "total": 12.5, "currency": "EUR", "paid": True}
    answer = {"number": "7", "total": 12.0, "paid": 1, "note": "x"}
    score = await JsonMatch().score(outcome(expected=expected, output=answer))
    # Compared: number, total, currency, paid, note; only number matches (true is not 1).
    assert score.value == pytest.approx(1 / 5) and not score.passed
    assert "1 of 5 keys match" in score.explanation
    assert "'total' (expected 12.5, got 12.0)" in score.explanation
    assert "'paid' (expected true, got 1)" in score.explanation
    assert "missing: 'currency'" in score.explanation
    assert "not expected: 'note'" in score.explanation


async def test_a_subset_match_ignores_extra_keys_even_nested() -> None:
    expected = {"customer": {"name": "Ada"}, "total": 3}
    answer = {"customer": {"name": "Ada", "id": 9}, "total": 3, "lines": []}
    assert (await JsonMatch(subset=True).score(outcome(expected=expected, output=answer))).passed
    assert not (await JsonMatch().score(outcome(expected=expected, output=answer))).passed


async def test_keys_compares_only_those() -> None:
    scorer = JsonMatch(keys=["total"])
    assert (await scorer.score(outcome(expected={"total": 3, "a": 1}, output={"total": 3}))).passed


async def test_an_expected_string_is_read_as_json_as_a_csv_row_gives_it() -> None:
    assert (await JsonMatch().score(outcome("[1, 2]", expected="[1, 2]"))).passed
    score = await JsonMatch().score(outcome("[1, 2]", expected="[1, 2"))
    assert score.error is not None and "expected value is not JSON" in score.explanation


async def test_non_objects_compare_whole() -> None:
    score = await JsonMatch([1, 2]).score(outcome("[2, 1]"))
    assert (score.value, score.explanation) == (0.0, "expected [1, 2], got [2, 1]")
    score = await JsonMatch({"a": 1}).score(outcome("[1]"))
    assert score.explanation == "expected an object, got [1]"


async def test_a_schema_misfit_fails_with_its_first_error() -> None:
    scorer = JsonMatch(schema=Invoice)
    score = await scorer.score(outcome('{"number": 7, "total": "x"}', {"number": "7"}))
    assert not score.passed
    assert (
        score.explanation
        == "the answer does not fit the schema: at $.number: 7 is not of type 'string'"
    )


async def test_a_schema_alone_passes_a_fitting_answer_without_expected() -> None:
    schema = {"type": "object", "required": ["total"]}
    assert (await JsonMatch(schema=schema).score(outcome('{"total": 1}'))).passed
    score = await JsonMatch(schema=schema).score(outcome("{}"))
    assert "'total' is a required property" in score.explanation


async def test_without_expected_or_schema_the_score_is_an_error() -> None:
    score = await JsonMatch().score(outcome("{}"))
    assert score.error is not None and "has no expected answer" in score.explanation


def test_an_invalid_schema_or_bad_keys_are_refused_at_construction() -> None:
    with pytest.raises(UsageError, match="not a valid JSON schema"):
        JsonMatch(schema={"type": "no-such-type"})
    with pytest.raises(UsageError, match="keys="):
        JsonMatch(keys="total")  # type: ignore[arg-type]
