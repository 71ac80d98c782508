"""Compact, readable forms of a run's transcript and event stream, for inline snapshots.

A test that is the spec of a run asserts the whole of it: `assert transcript_of(run) ==
snapshot([...])` and `assert event_lines(run.wire) == snapshot([...])`. One line per part
keeps a snapshot short enough to check by eye, while every id, name, argument and result the
run produced stays in it (ids are the runtime's and deterministic, law 10, so they are pinned
literally; only what truly varies, such as times or temp paths, is left to dirty-equals).

Lines of a transcript:

    user: <text>                          a user message's text (its id too, when it has one)
    result <call id> <tool>: <content>    a tool result the model reads
    error <call id> <tool>: <content>     a tool result marked as an error
    and user: <text>                      text folded into the message of the results above
    assistant <message id>: <text>        an assistant message (text may be empty)
    reasoning: <text>                     a reasoning part of the message above
    call <call id> <tool> <arguments>     a tool call of the message above

A newline inside a text or result is written `¶`, so each part stays on one line.

Lines of a stream (AG-UI events as a client reads them, `Run.wire`):

    RUN_STARTED <run id> {...}            plus `thread=<id>` when the thread differs
    STEP_STARTED <step name>
    TEXT_MESSAGE_START <message id>       plus the role when it is not "assistant"
    TEXT_MESSAGE_CONTENT <id> <text>      consecutive deltas of one message joined
                                          (REASONING_MESSAGE_CONTENT likewise)
    TOOL_CALL_START <call id> <tool> in <parent message id>
    TOOL_CALL_ARGS <call id> <json>       consecutive deltas of one call joined
    TOOL_CALL_RESULT <call id> (<message id>): <content>
    MESSAGES_SNAPSHOT                     then one line per message, indented:
      <id> <role>: <content>              a message (a tool message adds its call id)
      <id> call <call id> <tool> <json>   a tool call of the message above
    CUSTOM <name> {"value": ...}
    <TYPE> <compact JSON of the rest>     every other event; any field not written bare
                                          above follows as JSON, so nothing is dropped
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tiller.conversation import AssistantMessage, UserMessage

Message = UserMessage | AssistantMessage


def transcript_of(source: Any) -> list[str]:
    """The transcript of a run (a `Run`, `RunResult`, `RunState` or a list of messages) as
    one line per part."""
    lines: list[str] = []
    for message in _messages(source):
        lines.extend(message_lines(message))
    return lines


def message_lines(message: Message) -> list[str]:
    """One message as transcript lines (see the module docstring)."""
    if isinstance(message, UserMessage):
        lines = [
            f"{'error' if r.is_error else 'result'} {r.call_id} {r.name}: {_line(r.content)}"
            for r in message.tool_results
        ]
        if message.text or not message.tool_results:
            label = f"user {message.id}" if message.id else "user"
            # Text folded into the message that carries the results (law 1) reads "and".
            label = f"and {label}" if message.tool_results else label
            lines.append(f"{label}: {_line(message.text)}")
        return lines
    lines = [f"assistant {message.id}: {_line(message.text)}".rstrip()]
    lines.extend(f"reasoning: {_line(part.text)}" for part in message.reasoning)
    lines.extend(f"call {c.id} {c.name} {c.arguments}" for c in message.tool_calls)
    return lines


def _line(text: str) -> str:
    return text.replace("\n", "¶")


def _messages(source: Any) -> Sequence[Message]:
    if isinstance(source, Sequence):
        return source
    # A `Run` (tests/loop/_support.py) and a `RunState` carry `.messages`; a `RunResult`
    # carries them on its state.
    if hasattr(source, "messages"):
        return list(source.messages)
    return list(source.state.messages)


# Fields that say nothing about the run's behaviour: the scripted model's token counts are
# asserted where a test is about usage, not in every stream.
_NOISE = frozenset({"usage", "timestamp", "rawEvent"})


def event_lines(
    wire: Iterable[Mapping[str, Any]], *, usage: bool = False, skip: Iterable[str] = ()
) -> list[str]:
    """A stream of wire events (dicts, as `assert_valid_stream` returns them) as one line
    per event, consecutive content deltas of one message or call joined. `skip` leaves out
    event types a test does not specify (pin the whole shape with `event_types` then)."""
    skipped = frozenset(skip)
    lines: list[str] = []
    last: tuple[str, str] | None = None
    for event in wire:
        kind = event["type"]
        if kind in skipped:
            continue
        if kind in ("TEXT_MESSAGE_CONTENT", "REASONING_MESSAGE_CONTENT", "TOOL_CALL_ARGS"):
            key = event.get("messageId") or event["toolCallId"]
            if last == (kind, key):
                lines[-1] += _line(event["delta"])
                continue
            lines.append(f"{kind} {key} {_line(event['delta'])}")
            last = (kind, key)
            continue
        last = None
        lines.append(_event_line(event, usage=usage))
        if kind == "MESSAGES_SNAPSHOT":
            lines[-1] = kind
            lines.extend(_snapshot_lines(event["messages"]))
    return lines


# Per event type, the fields written bare, in order, ahead of the rest (`role` and
# `parentMessageId` too, as `as <role>` / `in <message id>`); whatever else an event carries
# follows as compact JSON, so nothing it said is dropped.
_BARE: dict[str, tuple[str, ...]] = {
    "STEP_STARTED": ("stepName",),
    "STEP_FINISHED": ("stepName",),
    "TEXT_MESSAGE_START": ("messageId",),
    "TEXT_MESSAGE_END": ("messageId",),
    "REASONING_START": ("messageId",),
    "REASONING_END": ("messageId",),
    "REASONING_MESSAGE_START": ("messageId",),
    "REASONING_MESSAGE_END": ("messageId",),
    "TOOL_CALL_START": ("toolCallId", "toolCallName"),
    "TOOL_CALL_END": ("toolCallId",),
    "TOOL_CALL_RESULT": ("toolCallId",),
    "CUSTOM": ("name",),
}


def _event_line(event: Mapping[str, Any], *, usage: bool) -> str:
    kind = event["type"]
    rest = {k: v for k, v in event.items() if k != "type" and (usage or k not in _NOISE)}
    words = [kind]
    if kind in ("RUN_STARTED", "RUN_FINISHED", "RUN_ERROR") and "runId" in rest:
        run_id = rest.pop("runId")
        thread = rest.pop("threadId", run_id)
        words.append(run_id if thread == run_id else f"{run_id} thread={thread}")
    words.extend(str(rest.pop(name)) for name in _BARE.get(kind, ()) if name in rest)
    if kind == "TEXT_MESSAGE_START" and rest.get("role") == "assistant":
        del rest["role"]
    if kind == "REASONING_MESSAGE_START" and rest.get("role") == "reasoning":
        del rest["role"]
    if kind == "TOOL_CALL_RESULT" and rest.get("role") == "tool":
        del rest["role"]
    if "parentMessageId" in rest:
        words.append(f"in {rest.pop('parentMessageId')}")
    if kind == "TOOL_CALL_RESULT":
        message = rest.pop("messageId", None)
        content = rest.pop("content")
        if message is not None:
            words.append(f"({message})")
        return " ".join(words) + (f" {_compact(rest)}" if rest else "") + f": {_line(content)}"
    if rest:
        words.append(_compact(rest))
    return " ".join(words)


def _snapshot_lines(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    lines: list[str] = []
    for message in messages:
        rest = {k: v for k, v in message.items() if k not in ("id", "role", "content")}
        calls = rest.pop("toolCalls", [])
        call_id = rest.pop("toolCallId", None)
        head = f"  {message['id']} {message['role']}" + (f" {call_id}" if call_id else "")
        content = message.get("content")
        text = (
            ""
            if content is None
            else _line(content)
            if isinstance(content, str)
            else _compact(content)
        )
        lines.append(f"{head}: {text}".rstrip() + (f" {_compact(rest)}" if rest else ""))
        for call in calls:
            function = call["function"]
            lines.append(
                f"  {message['id']} call {call['id']} {function['name']} {function['arguments']}"
            )
    return lines


def event_types(wire: Iterable[Mapping[str, Any]]) -> list[str]:
    """Only the event types, for streams whose shape is the spec."""
    return [event["type"] for event in wire]


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=False)
