"""Transcript rules, checked whole and incrementally."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiller.conversation import (
    AssistantMessage,
    ToolCall,
    ToolResult,
    TranscriptChecker,
    TranscriptError,
    UserMessage,
    check_transcript,
)

IDS = ["a", "b", "c"]


@st.composite
def transcripts(draw: st.DrawFn) -> list[UserMessage | AssistantMessage]:
    messages: list[UserMessage | AssistantMessage] = []
    for _ in range(draw(st.integers(0, 8))):
        if draw(st.booleans()):
            ids = draw(st.lists(st.sampled_from(IDS), max_size=3))
            calls = tuple(ToolCall(id=f"{i}{len(messages)}", name="t") for i in ids)
            messages.append(AssistantMessage(text="x", tool_calls=calls))
        else:
            last = messages[-1] if messages else None
            honest = isinstance(last, AssistantMessage) and draw(st.booleans())
            results: tuple[ToolResult, ...]
            if honest and isinstance(last, AssistantMessage):
                results = tuple(
                    ToolResult(call_id=c.id, name=c.name, content="ok") for c in last.tool_calls
                )
            else:
                ids = draw(st.lists(st.sampled_from(IDS), max_size=2))
                results = tuple(ToolResult(call_id=f"{i}9", name="t", content="?") for i in ids)
            messages.append(
                UserMessage(text=draw(st.sampled_from(["", "hi"])), tool_results=results)
            )
    return messages


def verdict(check: object, messages: list[UserMessage | AssistantMessage]) -> bool:
    try:
        check(messages)  # type: ignore[operator]
    except TranscriptError:
        return False
    return True


@settings(max_examples=300, derandomize=True)
@given(transcripts())
def test_incremental_checker_agrees_with_the_whole_check(
    messages: list[UserMessage | AssistantMessage],
) -> None:
    checker = TranscriptChecker()
    for end in range(len(messages) + 1):
        prefix = messages[:end]
        expected = verdict(check_transcript, prefix)
        assert verdict(checker.check, prefix) == expected
        if not expected:
            return  # the loop never goes on from an illegal transcript


def test_checker_sees_a_rewritten_last_message() -> None:
    call = ToolCall(id="c1", name="t")
    messages: list[UserMessage | AssistantMessage] = [
        UserMessage(text="go"),
        AssistantMessage(tool_calls=(call,)),
        UserMessage(tool_results=(ToolResult(call_id="c1", name="t", content="ok"),)),
    ]
    checker = TranscriptChecker()
    checker.check(messages)
    messages[-1] = UserMessage(text="steer")  # the results vanished: illegal now
    with pytest.raises(TranscriptError, match="no result"):
        checker.check(messages)


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([AssistantMessage(tool_calls=(ToolCall(id="a", name="t"),) * 2)], "duplicate"),
        ([UserMessage(tool_results=(ToolResult(call_id="x", name="t", content=""),))], "unknown"),
        (
            [AssistantMessage(tool_calls=(ToolCall(id="a", name="t"),)), AssistantMessage()],
            "no result",
        ),
    ],
)
def test_illegal_transcripts_say_why(
    messages: list[UserMessage | AssistantMessage], message: str
) -> None:
    with pytest.raises(TranscriptError, match=message):
        check_transcript(messages)


def test_usage_subtracts_an_earlier_reading_of_the_same_ledger() -> None:
    from tiller.conversation import Usage
    from tiller.errors import UsageError

    before = Usage(input_tokens=10, output_tokens=4, cached_input_tokens=2, requests=1)
    after = before + Usage(input_tokens=5, output_tokens=3, reasoning_tokens=1, requests=2)
    assert after - before == Usage(input_tokens=5, output_tokens=3, reasoning_tokens=1, requests=2)
    assert after - after == Usage()
    with pytest.raises(UsageError, match="never negative"):
        before - after
