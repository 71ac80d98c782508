"""Light events encode to AG-UI 1.0 JSON that the protocol's own models accept."""

from __future__ import annotations

import orjson
import pytest
from ag_ui.core import Event as AgUiEvent
from pydantic import TypeAdapter

from tiller.events import (
    EVENT_TYPES,
    ActivityDeltaEvent,
    ActivitySnapshotEvent,
    CustomEvent,
    Event,
    Interrupt,
    MessagesSnapshotEvent,
    RawEvent,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    encode_json,
    encode_sse,
    event_from_wire,
    parse_input,
)

ADAPTER: TypeAdapter[object] = TypeAdapter(AgUiEvent)

INPUT = parse_input(
    {"threadId": "t", "runId": "r", "messages": [{"id": "u", "role": "user", "content": "hi"}]}
)

# One of every event type, with optional fields both set and left out.
SAMPLES: list[Event] = [
    RunStartedEvent("t", "r", protocol_version="1.0"),
    RunStartedEvent("t", "r", "parent", input=INPUT, protocol_version="1.0"),
    RunFinishedEvent("t", "r"),
    RunFinishedEvent("t", "r", outcome=RunOutcome.success(["c1"])),
    RunFinishedEvent(
        "t",
        "r",
        outcome=RunOutcome.interrupt(
            Interrupt("i1", "tool_call", tool_call_id="c1", response_schema={"type": "object"})
        ),
        usage=[{"provider": "scripted", "inputTokens": 3}],
    ),
    RunFinishedEvent("t", "r", outcome=RunOutcome.cancelled(), result={"ok": True}),
    RunErrorEvent("boom"),
    RunErrorEvent("boom", "AGENT_ERROR"),
    StepStartedEvent("s"),
    StepFinishedEvent("s", subagent_run_id="r-sub-1"),
    TextMessageStartEvent("m"),
    TextMessageStartEvent("m", "user", "alice", subagent_run_id="r-sub-1"),
    TextMessageContentEvent("m", "hé"),
    TextMessageEndEvent("m"),
    TextMessageChunkEvent("m", "assistant", "x"),
    TextMessageChunkEvent(delta="y"),
    ToolCallStartEvent("c", "tool"),
    ToolCallStartEvent("c", "tool", "m"),
    ToolCallArgsEvent("c", '{"a":'),
    ToolCallEndEvent("c"),
    ToolCallChunkEvent("c", "tool", None, "{}"),
    ToolCallResultEvent("m2", "c", "done"),
    StateSnapshotEvent({"a": [1, 2]}),
    StateSnapshotEvent(None),
    StateDeltaEvent([{"op": "replace", "path": "/a", "value": 1}]),
    MessagesSnapshotEvent([{"id": "u", "role": "user", "content": "hi"}]),
    MessagesSnapshotEvent(list(INPUT.messages)),
    ActivitySnapshotEvent("a", "progress", {"pct": 1}, replace=False),
    ActivityDeltaEvent("a", "progress", [{"op": "replace", "path": "/pct", "value": 2}]),
    RawEvent({"vendor": 1}, "openai"),
    CustomEvent("tiller.note", None),
    CustomEvent("tiller.note", {"x": 1}, timestamp=1, metadata={"k": None}),
    ReasoningStartEvent("m"),
    ReasoningMessageStartEvent("m"),
    ReasoningMessageContentEvent("m", "hmm"),
    ReasoningMessageEndEvent("m"),
    ReasoningMessageChunkEvent("m", "x"),
    ReasoningEndEvent("m"),
    ReasoningEncryptedValueEvent("tool-call", "c", "opaque"),
    SubagentStartedEvent("s1", "helper", "does things", "s0", "c", "m"),
    SubagentFinishedEvent("s1"),
    SubagentFinishedEvent(
        "s1", result={"a": 1}, outcome={"type": "suspended", "interruptIds": ["i"]}
    ),
    SubagentErrorEvent("s1", "failed", "AGENT_ERROR"),
]


def test_every_event_type_has_a_sample() -> None:
    assert {type(e) for e in SAMPLES} == set(EVENT_TYPES.values())
    assert len(EVENT_TYPES) == 31  # ag-ui-protocol 1.0 (THINKING_* left the protocol)


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: e.type)
def test_encoding_validates_against_the_protocol_models(event: Event) -> None:
    wire = orjson.loads(encode_json(event))
    model = ADAPTER.validate_python(wire)
    assert getattr(model, "model_extra", None) == {}, "only fields AG-UI knows"
    assert model.model_dump(mode="json", by_alias=True) == wire


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: e.type)
def test_optional_fields_are_omitted_never_null(event: Event) -> None:
    wire = orjson.loads(encode_json(event))
    required_nulls = {"snapshot", "value"}
    assert all(v is not None for k, v in wire.items() if k not in required_nulls)
    assert all(k[0].islower() and "_" not in k for k in wire), "camelCase keys"


def test_sse_frame_is_compact_json() -> None:
    frame = encode_sse(TextMessageContentEvent("m", "a b"))
    assert frame == b'data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"a b"}\n\n'


def test_round_trip_through_wire() -> None:
    for event in SAMPLES:
        again = event_from_wire(orjson.loads(encode_json(event)))
        assert type(again) is type(event)
        assert encode_json(again) == encode_json(event)


def test_unknown_type_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown AG-UI event type"):
        event_from_wire({"type": "THINKING_START"})
