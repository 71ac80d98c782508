"""Tests for `ResponseAccumulator`: the response so far, and law 1 for tool calls."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiller.conversation import AssistantMessage, Reasoning, ToolCall, Usage
from tiller.model import (
    AccumulatedResponse,
    DroppedCall,
    Finish,
    ModelProtocolError,
    ReasoningDelta,
    ResponseAccumulator,
    StreamEvent,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageReport,
)


def fed(events: Iterable[StreamEvent]) -> ResponseAccumulator:
    acc = ResponseAccumulator()
    for event in events:
        acc.feed(event)
    return acc


def test_a_finished_stream_is_complete() -> None:
    acc = fed(
        [
            ReasoningDelta(text="think "),
            ReasoningDelta(text="hard"),
            ReasoningDelta(signature="sig"),
            TextDelta("Hello"),
            TextDelta(", world"),
            ToolCallStart(0, "c0", "search"),
            ToolCallArgsDelta(0, '{"q": '),
            ToolCallArgsDelta(0, '"x"}'),
            ToolCallEnd(0),
            UsageReport(Usage(input_tokens=10, output_tokens=3, requests=1)),
            Finish("tool_calls", raw="tool_use"),
        ]
    )
    assert acc.get(id="m1") == AccumulatedResponse(
        message=AssistantMessage(
            id="m1",
            text="Hello, world",
            reasoning=(Reasoning(text="think hard", signature="sig"),),
            tool_calls=(ToolCall(id="c0", name="search", arguments='{"q": "x"}'),),
        ),
        status="complete",
        usage=Usage(input_tokens=10, output_tokens=3, requests=1),
        finish_reason="tool_calls",
        dropped=(),
    )


def test_status_is_incomplete_until_finish_and_interrupted_when_told() -> None:
    acc = fed([TextDelta("half a")])
    assert acc.status == "incomplete"
    assert acc.get().message.text == "half a"
    acc.interrupt()
    assert acc.get().status == "interrupted"
    assert acc.get().message.text == "half a"  # law 8: the partial text is kept
    assert acc.finish_reason is None


def test_finish_wins_over_a_later_interrupt() -> None:
    acc = fed([TextDelta("done"), Finish("stop")])
    acc.interrupt()
    assert acc.status == "complete"


def test_a_call_without_end_is_dropped_not_executed() -> None:
    acc = fed(
        [
            ToolCallStart(0, "a", "ok"),
            ToolCallArgsDelta(0, "{}"),
            ToolCallEnd(0),
            ToolCallStart(1, "b", "cut"),
            ToolCallArgsDelta(1, '{"path": "/et'),
        ]
    )
    acc.interrupt()
    response = acc.get()
    assert response.message.tool_calls == (ToolCall(id="a", name="ok", arguments="{}"),)
    assert response.dropped == (DroppedCall(1, "b", "cut", '{"path": "/et', "incomplete"),)
    assert acc.completed_call(0) == ToolCall(id="a", name="ok", arguments="{}")
    assert acc.completed_call(1) is None
    assert acc.completed_call(7) is None


def test_a_call_whose_arguments_are_not_json_is_dropped() -> None:
    acc = fed(
        [ToolCallStart(0, "a", "f"), ToolCallArgsDelta(0, "{oops"), ToolCallEnd(0), Finish("stop")]
    )
    assert acc.get().message.tool_calls == ()
    assert acc.dropped == (DroppedCall(0, "a", "f", "{oops", "invalid_json"),)


@pytest.mark.parametrize("fragments", [[], [""], ["  ", "\n"]])
def test_empty_arguments_become_an_empty_object(fragments: list[str]) -> None:
    events: list[StreamEvent] = [ToolCallStart(0, "a", "now")]
    events += [ToolCallArgsDelta(0, part) for part in fragments]
    acc = fed([*events, ToolCallEnd(0)])
    assert acc.get().message.tool_calls == (ToolCall(id="a", name="now", arguments="{}"),)


def test_interleaved_calls_are_ordered_by_index() -> None:
    acc = fed(
        [
            ToolCallStart(1, "b", "second"),
            ToolCallStart(0, "a", "first"),
            ToolCallArgsDelta(1, '{"n":'),
            ToolCallArgsDelta(0, '{"n":'),
            ToolCallArgsDelta(0, "1}"),
            ToolCallArgsDelta(1, "2}"),
            ToolCallEnd(1),
            ToolCallEnd(0),
            ToolCallEnd(0),  # a repeated end changes nothing
            ToolCallStart(0, "a", "first"),  # a repeated identical start neither
        ]
    )
    assert [(c.id, c.arguments) for c in acc.get().message.tool_calls] == [
        ("a", '{"n":1}'),
        ("b", '{"n":2}'),
    ]


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ([ToolCallArgsDelta(0, "{}")], "never started"),
        ([ToolCallEnd(3)], "never started"),
        ([ToolCallStart(0, "a", "f"), ToolCallStart(0, "b", "f")], "started twice"),
        ([ToolCallStart(0, "a", "f"), ToolCallEnd(0), ToolCallArgsDelta(0, "x")], "after its end"),
    ],
)
def test_an_adapter_that_lost_track_is_a_protocol_error(
    events: list[StreamEvent], message: str
) -> None:
    with pytest.raises(ModelProtocolError, match=message):
        fed(events)


def test_reasoning_blocks_split_on_signature_redaction_and_other_events() -> None:
    acc = fed(
        [
            ReasoningDelta(text="one"),
            ReasoningDelta(signature="s1"),
            ReasoningDelta(text="two"),
            TextDelta("visible"),
            ReasoningDelta(text="three"),
            ReasoningDelta(redacted="opaque"),
            ReasoningDelta(text="four", signature="s4"),
        ]
    )
    assert acc.get().message.reasoning == (
        Reasoning(text="one", signature="s1"),
        Reasoning(text="two"),
        Reasoning(text="three"),
        Reasoning(redacted="opaque"),
        Reasoning(text="four", signature="s4"),
    )


def test_usage_later_nonzero_fields_win_and_requests_is_one() -> None:
    acc = fed(
        [
            UsageReport(Usage(input_tokens=100, cached_input_tokens=40)),
            UsageReport(Usage(output_tokens=5)),
            UsageReport(Usage(output_tokens=12, requests=3)),
        ]
    )
    assert acc.usage == Usage(
        input_tokens=100, output_tokens=12, cached_input_tokens=40, requests=1
    )
    assert ResponseAccumulator().usage == Usage(requests=1)


def test_bytes_count_utf8_of_text_reasoning_and_arguments() -> None:
    acc = fed(
        [
            TextDelta("héllo"),  # 6 bytes
            ReasoningDelta(text="ab", signature="xyz"),  # 5
            ReasoningDelta(redacted="r"),  # 1
            ToolCallStart(0, "id-not-counted", "name-not-counted"),
            ToolCallArgsDelta(0, "{}"),  # 2
            UsageReport(Usage(input_tokens=1)),
            Finish("stop"),
        ]
    )
    assert acc.bytes == 14


def test_an_empty_stream_gives_an_empty_incomplete_response() -> None:
    response = ResponseAccumulator().get()
    assert response.message == AssistantMessage()
    assert response.status == "incomplete"
    assert response.dropped == ()


_text = st.text(max_size=8)


@given(st.lists(_text, max_size=10), st.lists(st.lists(_text, max_size=4), max_size=4))
def test_text_and_arguments_are_the_concatenation_of_their_deltas(
    texts: list[str], calls: list[list[str]]
) -> None:
    events: list[StreamEvent] = [TextDelta(t) for t in texts]
    for index, parts in enumerate(calls):
        events.append(ToolCallStart(index, f"c{index}", "f"))
        events += [ToolCallArgsDelta(index, p) for p in parts]
        events.append(ToolCallEnd(index))
    acc = fed(events)
    response = acc.get()
    assert response.message.text == "".join(texts)
    assert acc.bytes == sum(len(t.encode()) for t in texts) + sum(
        len(p.encode()) for parts in calls for p in parts
    )
    # every ended call is either in the message or dropped as invalid JSON, never both
    kept = {c.id for c in response.message.tool_calls}
    dropped = {d.id for d in response.dropped}
    assert kept | dropped == {f"c{i}" for i in range(len(calls))}
    assert not kept & dropped
    assert all(d.reason == "invalid_json" for d in response.dropped)


def test_with_an_allocator_every_ended_call_gets_the_runs_id() -> None:
    """Law 10: the provider's id (here the same for two calls, and empty for a third) is
    kept beside the run's id, which the allocator gives as each call ends."""
    handed = iter(["r1-call-1", "r1-call-2", "r1-call-3"])
    acc = ResponseAccumulator(call_ids=lambda: next(handed))
    for index, provider in enumerate(["dup", "dup", ""]):
        acc.feed(ToolCallStart(index, provider, "look"))
        acc.feed(ToolCallArgsDelta(index, "{}"))
    acc.feed(ToolCallEnd(0))
    assert acc.completed_call(0) == ToolCall(id="r1-call-1", name="look", provider_id="dup")
    acc.feed(ToolCallEnd(1))
    acc.feed(ToolCallStart(3, "late", "look"))  # never ends: dropped, with no run id
    acc.feed(ToolCallEnd(2))
    message = acc.get().message
    assert [(c.id, c.provider_id) for c in message.tool_calls] == [
        ("r1-call-1", "dup"),
        ("r1-call-2", "dup"),
        ("r1-call-3", ""),
    ]
    (dropped,) = acc.dropped
    assert (dropped.id, dropped.provider_id, dropped.reason) == ("late", "", "incomplete")
