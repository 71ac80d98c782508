"""Each verifier rule refuses what it should, and a refusal changes nothing."""

from __future__ import annotations

import pytest

from tiller import ProtocolViolation, UsageError
from tiller.events import (
    Event,
    EventSink,
    Interrupt,
    MessagesSnapshotEvent,
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
    Verifier,
)
from tiller.testing import assert_valid_stream


def feed(*events: Event) -> Verifier:
    verifier = Verifier()
    for event in events:
        verifier.check(event)
    return verifier


def refused(rule: str, verifier: Verifier, event: Event) -> None:
    with pytest.raises(ProtocolViolation) as info:
        verifier.check(event)
    assert info.value.rule == rule


START = RunStartedEvent("t", "r")
FINISH = RunFinishedEvent("t", "r")


def test_a_valid_stream_passes_both_verifiers() -> None:
    events: list[Event] = [
        START,
        StepStartedEvent("s"),
        TextMessageStartEvent("m1"),
        TextMessageContentEvent("m1", "hi"),
        TextMessageEndEvent("m1"),
        ToolCallStartEvent("c1", "tool", "m1"),
        ToolCallArgsEvent("c1", '{"a"'),
        ToolCallArgsEvent("c1", ": 1}"),
        ToolCallEndEvent("c1"),
        ToolCallResultEvent("m2", "c1", "ok"),
        StepFinishedEvent("s"),
        FINISH,
    ]
    feed(*events)
    assert_valid_stream(events)


def test_nothing_after_the_terminal_event() -> None:
    v = feed(START, FINISH)
    refused("RunEnded", v, TextMessageStartEvent("m"))
    refused("RunEnded", v, RunErrorEvent("late"))
    v = feed(START, RunErrorEvent("x"))
    refused("RunEnded", v, FINISH)


def test_one_run_started() -> None:
    refused("DuplicateRunStarted", feed(START), RunStartedEvent("t", "r"))


@pytest.mark.parametrize(
    ("opening", "again"),
    [
        (TextMessageStartEvent("x"), TextMessageStartEvent("x")),
        (ReasoningStartEvent("x"), ReasoningStartEvent("x")),
        (ReasoningMessageStartEvent("x"), ReasoningMessageStartEvent("x")),
        (ToolCallStartEvent("x", "t"), ToolCallStartEvent("x", "t")),
        (StepStartedEvent("x"), StepStartedEvent("x")),
        (SubagentStartedEvent("x", "n"), SubagentStartedEvent("x", "n")),
    ],
)
def test_no_reopening_what_is_open(opening: Event, again: Event) -> None:
    refused("DuplicateStart", feed(START, opening), again)


@pytest.mark.parametrize(
    "event",
    [
        TextMessageContentEvent("x", "a"),
        TextMessageEndEvent("x"),
        ToolCallArgsEvent("x", "{}"),
        ToolCallEndEvent("x"),
        ReasoningMessageContentEvent("x", "a"),
        ReasoningMessageEndEvent("x"),
        ReasoningEndEvent("x"),
        StepFinishedEvent("x"),
        SubagentFinishedEvent("x"),
        SubagentErrorEvent("x", "boom"),
    ],
)
def test_no_content_or_end_for_what_is_not_open(event: Event) -> None:
    refused("NotOpen", feed(START), event)


def test_double_close_is_refused() -> None:
    v = feed(START, TextMessageStartEvent("m"), TextMessageEndEvent("m"))
    refused("NotOpen", v, TextMessageEndEvent("m"))


def test_closed_ids_are_not_reused() -> None:
    v = feed(START, TextMessageStartEvent("m"), TextMessageEndEvent("m"))
    refused("ReusedId", v, TextMessageStartEvent("m"))
    v = feed(START, ToolCallStartEvent("c", "t"), ToolCallEndEvent("c"))
    refused("ReusedId", v, ToolCallStartEvent("c", "t"))


def test_result_needs_an_ended_or_snapshotted_call() -> None:
    v = feed(START, ToolCallStartEvent("c", "t"))
    refused("OutOfOrder", v, ToolCallResultEvent("m", "c", "early"))
    refused("UnknownId", feed(START), ToolCallResultEvent("m", "nope", "x"))
    # A resumed run knows the calls its MESSAGES_SNAPSHOT lists.
    snapshot = MessagesSnapshotEvent(
        [
            {
                "id": "a1",
                "role": "assistant",
                "toolCalls": [
                    {"id": "old", "type": "function", "function": {"name": "t", "arguments": "{}"}}
                ],
            }
        ]
    )
    events = [START, snapshot, ToolCallResultEvent("m", "old", "done"), FINISH]
    feed(*events)
    assert_valid_stream(events)


def test_run_finished_needs_everything_closed() -> None:
    for opener in (
        TextMessageStartEvent("m"),
        ReasoningStartEvent("m"),
        ToolCallStartEvent("c", "t"),
        StepStartedEvent("s"),
        SubagentStartedEvent("s", "n"),
    ):
        v = feed(START, opener)
        with pytest.raises(ProtocolViolation, match="OpenAtFinish") as info:
            v.check(FINISH)
        assert info.value.rule == "OpenAtFinish"
        v.check(RunErrorEvent("but an error needs nothing closed"))


def test_args_must_be_json_at_the_end() -> None:
    v = feed(START, ToolCallStartEvent("c", "t"), ToolCallArgsEvent("c", '{"a": '))
    refused("ArgsNotJson", v, ToolCallEndEvent("c"))
    # The refusal changed nothing: the call is still open, and can be completed.
    v.check(ToolCallArgsEvent("c", "1}"))
    v.check(ToolCallEndEvent("c"))
    # No arguments at all is a no-argument tool.
    feed(START, ToolCallStartEvent("d", "t"), ToolCallEndEvent("d"))


def test_owner_consistency() -> None:
    v = feed(
        START, SubagentStartedEvent("s1", "n"), TextMessageStartEvent("m", subagent_run_id="s1")
    )
    refused("OwnerMismatch", v, TextMessageContentEvent("m", "x"))
    refused("OwnerMismatch", v, TextMessageEndEvent("m", subagent_run_id="s2"))
    v.check(TextMessageEndEvent("m", subagent_run_id="s1"))
    # A tool call inherits and must agree with its parent message's owner.
    v = feed(START, TextMessageStartEvent("p", subagent_run_id="s1"))
    refused("OwnerMismatch", v, ToolCallStartEvent("c", "t", "p", subagent_run_id="s2"))
    v.check(ToolCallStartEvent("c", "t", "p"))
    refused("OwnerMismatch", v, ToolCallEndEvent("c"))
    v.check(ToolCallEndEvent("c", subagent_run_id="s1"))


def test_subagent_lifecycle() -> None:
    refused(
        "UnknownId", feed(START), SubagentStartedEvent("s2", "n", parent_subagent_run_id="ghost")
    )
    v = feed(START, SubagentStartedEvent("s", "n"), SubagentFinishedEvent("s"))
    refused("ReusedId", v, SubagentStartedEvent("s", "n"))
    # A suspended subagent may continue under the same id.
    suspended = SubagentFinishedEvent("s", outcome={"type": "suspended", "interruptIds": []})
    v = feed(START, SubagentStartedEvent("s", "n"), suspended, SubagentStartedEvent("s", "n"))
    v.check(SubagentFinishedEvent("s"))


def test_interrupt_outcome_needs_interrupts() -> None:
    refused(
        "InvalidOutcome",
        feed(START),
        RunFinishedEvent("t", "r", outcome={"type": "interrupt", "interrupts": []}),
    )
    feed(
        START, RunFinishedEvent("t", "r", outcome=RunOutcome.interrupt(Interrupt("i", "question")))
    )


def test_chunks() -> None:
    refused("MissingId", feed(START), TextMessageChunkEvent(delta="x"))
    refused("MissingId", feed(START), ToolCallChunkEvent(delta="{}"))
    refused("MissingId", feed(START), ToolCallChunkEvent("c", delta="{}"))
    refused("MissingId", feed(START), ReasoningMessageChunkEvent(delta="x"))
    events: list[Event] = [
        START,
        TextMessageChunkEvent("m", "assistant", "he"),
        TextMessageChunkEvent(delta="llo"),
        ToolCallChunkEvent("c", "t", "m", '{"a":'),
        ToolCallChunkEvent(delta="1}"),
        StateSnapshotEvent({}),
        ToolCallResultEvent("r1", "c", "ok"),
        FINISH,
    ]
    v = feed(*events[:-1])
    refused("ReusedId", v, TextMessageChunkEvent("m", delta="again"))
    v.check(FINISH)
    assert_valid_stream(events)
    # Chunked arguments that are not JSON are refused when the chunk stream closes.
    v = feed(START, ToolCallChunkEvent("c", "t", None, '{"a":'))
    refused("ArgsNotJson", v, StateSnapshotEvent({}))


def test_empty_deltas_are_refused() -> None:
    refused("EmptyDelta", feed(START, TextMessageStartEvent("m")), TextMessageContentEvent("m", ""))
    v = feed(START, ReasoningMessageStartEvent("m"))
    refused("EmptyDelta", v, ReasoningMessageContentEvent("m", ""))


def test_unordered_events_pass() -> None:
    feed(START, StateSnapshotEvent({}), StateSnapshotEvent({"a": 1}), FINISH)


# ── what the verifier now knows that the validator knows (issue 14, item 4) ─────────


def test_a_delta_that_does_not_apply_to_the_client_state_is_refused() -> None:
    """Broke on main: any STATE_DELTA went out, so a client failed to apply it (AGUI302).
    The verifier now keeps the last snapshot plus the deltas since, and a refused delta
    changes nothing: the next valid one still applies."""
    v = feed(START, StateSnapshotEvent({"a": 1, "items": [1]}))
    refused("DeltaDoesNotApply", v, StateDeltaEvent([{"op": "replace", "path": "/b", "value": 2}]))
    beyond = [{"op": "add", "path": "/items/5", "value": 0}]
    refused("DeltaDoesNotApply", v, StateDeltaEvent(beyond))
    refused("DeltaDoesNotApply", v, StateDeltaEvent([{"op": "test", "path": "/a", "value": True}]))
    # Atomic: the first operation applies, the second does not, so neither counts.
    refused(
        "DeltaDoesNotApply",
        v,
        StateDeltaEvent(
            [{"op": "remove", "path": "/a"}, {"op": "replace", "path": "/zz", "value": 1}]
        ),
    )
    refused("DeltaDoesNotApply", v, StateDeltaEvent([{"op": "move", "from": "", "path": ""}]))
    v.check(StateDeltaEvent([{"op": "remove", "path": "/a"}]))  # /a is still there
    refused("DeltaDoesNotApply", v, StateDeltaEvent([{"op": "remove", "path": "/a"}]))
    assert v.state.document == {"items": [1]}
    # A new snapshot is the new base.
    v.check(StateSnapshotEvent({"b": 0}))
    v.check(StateDeltaEvent([{"op": "replace", "path": "/b", "value": 2}]))
    assert v.state.document == {"b": 2}


def test_a_delta_that_is_not_rfc6902_is_refused_even_before_a_snapshot() -> None:
    """Broke on main: `{"op": "frobnicate"}` went out (AGUI303). Before any snapshot the
    base may be the client's input state, so only the shape is judged there, as the
    validator does."""
    for delta in (
        [{"op": "frobnicate", "path": "/a"}],
        [{"op": "add", "path": "/a"}],  # no value
        [{"op": "add", "path": "a", "value": 1}],  # not a JSON pointer
        [{"op": "copy", "path": "/a"}],  # no from
        ["add"],
    ):
        refused("DeltaNotRfc6902", feed(START), StateDeltaEvent(delta))  # type: ignore[arg-type]
    feed(START, StateDeltaEvent([{"op": "replace", "path": "/unknown/base", "value": 1}]))


def test_a_snapshot_value_is_not_changed_by_later_deltas() -> None:
    """The verifier keeps the snapshot by reference until a delta must apply; then it
    works on its own copy, never on the value a subscriber still holds."""
    snapshot = {"items": [1]}
    v = feed(START, StateSnapshotEvent(snapshot))
    v.check(StateDeltaEvent([{"op": "add", "path": "/items/-", "value": 2}]))
    assert snapshot == {"items": [1]}
    assert v.state.document == {"items": [1, 2]}


@pytest.mark.parametrize(
    "event",
    [
        TextMessageStartEvent("m", "tool"),
        TextMessageStartEvent("m", "reasoning"),
        TextMessageChunkEvent("m", "tool", "x"),
        ToolCallResultEvent("r", "c", "ok", "assistant"),
        ReasoningMessageStartEvent("m", "assistant"),
        ReasoningEncryptedValueEvent("thought", "m", "opaque"),
    ],
    ids=lambda e: f"{e.type}-{getattr(e, 'role', None) or getattr(e, 'subtype', None)}",
)
def test_roles_the_schema_does_not_allow_are_refused(event: Event) -> None:
    """Broke on main: `ctx.message("tool")` opened a TEXT_MESSAGE_START with role `tool`,
    which the schema does not allow (AGUI504); a tool's output is a TOOL_CALL_RESULT."""
    v = feed(START, ToolCallStartEvent("c", "t"), ToolCallEndEvent("c"))
    refused("InvalidRole", v, event)


def test_an_approval_interrupt_needs_its_call() -> None:
    """Broke on main: an approval interrupt (reason `tool_call`) without `toolCallId`
    was accepted, leaving the client nothing to show the approval next to."""
    with pytest.raises(UsageError, match="tool_call_id"):
        Interrupt("approve-c", "tool_call")
    wire = {"type": "interrupt", "interrupts": [{"id": "approve-c", "reason": "tool_call"}]}
    refused("InvalidInterrupt", feed(START), RunFinishedEvent("t", "r", outcome=wire))
    nameless = {"type": "interrupt", "interrupts": [{"reason": "question"}]}
    refused("InvalidInterrupt", feed(START), RunFinishedEvent("t", "r", outcome=nameless))
    ok = RunOutcome.interrupt(Interrupt("approve-c", "tool_call", tool_call_id="c"))
    feed(START, RunFinishedEvent("t", "r", outcome=ok))


def test_a_chunk_after_which_the_arguments_cannot_be_json_is_refused() -> None:
    """A chunked call has no end event: its arguments are judged at the next event,
    whatever it is. So a chunk that leaves them no way to become JSON is refused at once,
    and the call can still be continued validly."""
    v = feed(START, ToolCallChunkEvent("c", "t", None, '{"a": 1'))
    refused("ArgsNotJson", v, ToolCallChunkEvent(delta="]"))
    refused("ArgsNotJson", v, ToolCallChunkEvent("c", delta="}}"))
    refused("ArgsNotJson", feed(START), ToolCallChunkEvent("c", "t", None, "nul!"))
    v.check(ToolCallChunkEvent(delta="}"))
    v.check(FINISH)


@pytest.mark.parametrize(
    "args",
    ['{"q": ', '{"q": "ab\\', '{"q": "\\u00', '{"q": [1, tr', '{"q": -', "  ", '{"a": 1,'],
)
def test_a_run_error_after_half_written_chunked_args_ends_validly(args: str) -> None:
    """Broke on main: the driver's last-resort RUN_ERROR after a chunked call's arguments
    that never became JSON left an invalid stream (AGUI204 at the RUN_ERROR). The sink now
    sends the chunk that completes them first."""
    sink = EventSink()
    received = sink.subscribe(maxsize=None)
    sink.emit_forced(START)
    sink.emit(ToolCallChunkEvent("c", "t", None, args))
    with pytest.raises(ProtocolViolation, match="ArgsNotJson"):
        sink.emit_forced(FINISH)
    sink.emit_terminal(RunErrorEvent("the model stream died", "AGENT_ERROR"))
    events = received.drain()
    assert [e.type for e in events] == [
        "RUN_STARTED",
        "TOOL_CALL_CHUNK",
        "TOOL_CALL_CHUNK",
        "RUN_ERROR",
    ]
    assert_valid_stream(events)
