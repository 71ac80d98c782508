"""ToolTraceMatch: which tools were called, in which order, with which arguments;
refused, unknown and malformed calls were not made."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tiller.errors import UsageError
from tiller.evals import Case, CaseOutcome, ExpectedCall, ToolTraceMatch
from tiller.loop import ToolTraceEntry
from tiller.state import StopCause


def call(name: str, step: int = 1, refused_by: str | None = None, **args: Any) -> ToolTraceEntry:
    return ToolTraceEntry(f"r-call-{step}", name, json.dumps(args), step, refused_by=refused_by)


def outcome(*trace: ToolTraceEntry, expected: Any = None) -> CaseOutcome:
    case = Case("c1", "q", expected=expected)
    return CaseOutcome(case, 0, "done", StopCause.COMPLETED, tool_trace=trace)


READ, EDIT, TEST = (
    call("read_file", 1, path="a.py"),
    call("edit_file", 2, path="a.py"),
    call("execute_command", 3, command="pytest -q"),
)


async def test_a_subsequence_allows_calls_between_the_expected_ones() -> None:
    scorer = ToolTraceMatch(["read_file", "execute_command"])
    score = await scorer.score(outcome(READ, EDIT, TEST))
    assert score.passed and score.explanation == "made the 2 expected calls in order"


async def test_out_of_order_calls_get_the_in_order_fraction() -> None:
    scorer = ToolTraceMatch(["execute_command", "read_file", "edit_file"])
    score = await scorer.score(outcome(READ, EDIT, TEST))
    assert score.value == pytest.approx(2 / 3) and not score.passed
    assert "matched 2 of 3 expected calls in order" in score.explanation
    assert "made: read_file, edit_file, execute_command" in score.explanation


async def test_exact_order_counts_an_extra_call_against() -> None:
    scorer = ToolTraceMatch(["read_file", "edit_file"], order="exact")
    assert (await scorer.score(outcome(READ, EDIT))).passed
    score = await scorer.score(outcome(READ, EDIT, TEST))
    assert score.value == pytest.approx(2 / 3) and not score.passed


async def test_unordered_matches_each_call_once() -> None:
    scorer = ToolTraceMatch(
        [ExpectedCall("read_file"), ExpectedCall("read_file", {"path": "a.py"})], order="unordered"
    )
    # One read of a.py answers the specific expectation; the general one needs another.
    assert (
        await scorer.score(
            outcome(call("read_file", 1, path="a.py"), call("read_file", 2, path="b.py"))
        )
    ).passed
    score = await scorer.score(outcome(call("read_file", 1, path="a.py")))
    assert score.value == 0.5


async def test_arguments_match_as_a_subset_of_the_parsed_json() -> None:
    scorer = ToolTraceMatch([ExpectedCall("execute_command", {"command": "pytest -q"})])
    assert (
        await scorer.score(outcome(call("execute_command", 1, command="pytest -q", timeout=9)))
    ).passed
    score = await scorer.score(outcome(call("execute_command", 1, command="pytest")))
    assert score.value == 0.0 and 'execute_command({"command": "pytest -q"})' in score.explanation


async def test_refused_calls_are_not_counted_as_made() -> None:
    refused = call("edit_file", 2, refused_by="policy", path="a.py")
    score = await ToolTraceMatch(["read_file", "edit_file"]).score(outcome(READ, refused))
    assert score.value == 0.5 and not score.passed
    assert "(1 refused or malformed calls not counted)" in score.explanation


async def test_a_forbidden_tool_call_fails_the_case_unless_it_was_refused() -> None:
    scorer = ToolTraceMatch(forbid=["execute_command"])
    score = await scorer.score(outcome(READ, TEST))
    assert (score.value, score.explanation) == (0.0, "called forbidden tools: execute_command")
    refused = call("execute_command", 2, refused_by="user", command="rm -rf /")
    assert (await scorer.score(outcome(READ, refused))).passed
    # The case's expected answer is another scorer's business.
    assert (await scorer.score(outcome(READ, expected="Paris"))).passed


async def test_the_expected_calls_can_come_from_the_case_as_a_dataset_row_spells_them() -> None:
    expected = ["read_file", {"name": "edit_file", "arguments": {"path": "a.py"}}]
    assert (await ToolTraceMatch().score(outcome(READ, EDIT, expected=expected))).passed
    score = await ToolTraceMatch().score(outcome(READ, expected="read_file"))
    assert score.error is not None and "are a list" in score.explanation
    assert (await ToolTraceMatch().score(outcome(READ))).error is not None


def test_bad_expectations_are_refused() -> None:
    with pytest.raises(UsageError, match="expected tool call"):
        ToolTraceMatch([{"tool": "x"}])
    with pytest.raises(UsageError, match="order="):
        ToolTraceMatch(["x"], order="sorted")  # type: ignore[arg-type]
