"""The text scorers: exact, includes and regex compare the final text with the case's
expected answer (or their own target), explain themselves, give partial credit where it
means something, and say so when they have nothing to compare with."""

from __future__ import annotations

from typing import Any

import pytest

from tiller.errors import UsageError
from tiller.evals import Case, CaseOutcome, ExactMatch, Includes, RegexMatch, Scorer
from tiller.state import StopCause


def outcome(text: str, expected: Any = None) -> CaseOutcome:
    return CaseOutcome(Case("c1", "q", expected=expected), 0, text, StopCause.COMPLETED)


def test_every_text_scorer_is_a_scorer_with_its_name() -> None:
    scorers = [ExactMatch(), Includes(), RegexMatch("x"), ExactMatch(name="strict")]
    assert all(isinstance(s, Scorer) for s in scorers)
    assert [s.name for s in scorers] == ["exact", "includes", "regex", "strict"]


async def test_exact_passes_on_the_expected_text_and_fails_saying_both() -> None:
    assert (await ExactMatch().score(outcome("Paris", "Paris"))).passed
    score = await ExactMatch().score(outcome("paris ", "Paris"))
    assert (score.value, score.passed) == (0.0, False)
    assert score.explanation == "expected 'Paris', got 'paris '"


async def test_exact_can_ignore_case_and_whitespace() -> None:
    loose = ExactMatch(ignore_case=True, ignore_whitespace=True)
    assert (await loose.score(outcome("  the   QUICK\nfox ", "The quick fox"))).passed
    assert not (await ExactMatch(ignore_case=True).score(outcome("a  b", "A b"))).passed


async def test_a_scorer_target_wins_over_the_case_expected() -> None:
    assert (await ExactMatch("yes").score(outcome("yes", "no"))).passed


async def test_a_case_without_expected_is_an_error_score_saying_so() -> None:
    for scorer in (ExactMatch(), Includes(), RegexMatch()):
        score = await scorer.score(outcome("anything"))
        assert score.error is not None and not score.passed
        assert "has no expected answer" in score.explanation and scorer.name in score.explanation


async def test_a_non_text_expected_is_an_error_pointing_at_the_structured_scorers() -> None:
    score = await ExactMatch().score(outcome("42", {"total": 42}))
    assert score.error is not None
    assert "expects a dict" in score.explanation and "JsonMatch" in score.explanation


async def test_includes_all_gives_the_fraction_found_and_names_the_missing() -> None:
    score = await Includes().score(outcome("total 12, due Friday", ["12", "Friday", "EUR"]))
    assert score.value == pytest.approx(2 / 3) and not score.passed
    assert score.explanation == "found 2 of 3; missing 'EUR'"
    assert (await Includes("due").score(outcome("total 12, due Friday"))).passed


async def test_includes_any_passes_on_one() -> None:
    scorer = Includes(["EUR", "USD"], require="any", ignore_case=True)
    assert (await scorer.score(outcome("paid in usd"))).passed
    score = await scorer.score(outcome("paid in yen"))
    assert (score.value, score.explanation) == (0.0, "the text includes none of 'EUR', 'USD'")


def test_includes_refuses_a_target_that_is_not_strings() -> None:
    with pytest.raises(UsageError, match="list of strings"):
        Includes([1, 2])  # type: ignore[list-item]
    with pytest.raises(UsageError, match="'all' or 'any'"):
        Includes("x", require="most")  # type: ignore[arg-type]


async def test_regex_searches_by_default_and_can_require_the_whole_text() -> None:
    score = await RegexMatch(r"INV-\d{4}").score(outcome("see INV-0042 attached"))
    assert (
        score.passed and "/INV-\\d{4}/" in score.explanation and "'INV-0042'" in score.explanation
    )
    whole = RegexMatch(r"INV-\d{4}", fullmatch=True)
    score = await whole.score(outcome("see INV-0042 attached"))
    assert not score.passed and "does not match the whole text" in score.explanation


async def test_regex_reads_the_pattern_from_the_case_and_compiles_it_once() -> None:
    scorer = RegexMatch(ignore_case=True)
    assert (await scorer.score(outcome("Total: 12", r"total: \d+"))).passed
    assert (await scorer.score(outcome("total: 7", r"total: \d+"))).passed
    assert list(scorer._compiled) == [r"total: \d+"]


def test_a_regex_that_does_not_compile_is_refused_at_construction() -> None:
    with pytest.raises(UsageError, match=r"pattern '\(unclosed' does not compile"):
        RegexMatch("(unclosed")


async def test_a_case_pattern_that_does_not_compile_is_that_case_s_error() -> None:
    score = await RegexMatch().score(outcome("text", "[z-a]"))
    assert score.error is not None and "does not compile" in score.explanation
