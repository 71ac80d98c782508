"""The stream verifier: refuses, before it goes out, any event that would make the run's
AG-UI stream invalid.

It is on by default and sits after the transformers, so it judges exactly what
subscribers receive. A rejected event raises `ProtocolViolation` naming the rule and is
not delivered; the verifier's bookkeeping is left as it was, so the emitting code can
recover (the driver turns an uncaught violation into `RUN_ERROR`).

Rules (names as in the `ag-ui` crate, plus the ones `ag-ui-validate` adds):

| rule | refuses |
|---|---|
| `RunEnded` | anything after `RUN_FINISHED` / `RUN_ERROR` |
| `DuplicateRunStarted` | a second `RUN_STARTED` |
| `DuplicateStart` | reopening an open message, reasoning block, tool call, step or subagent |
| `ReusedId` | starting a message, reasoning block or tool call whose id already closed |
| `NotOpen` | content or an end for something that is not open |
| `UnknownId` | `TOOL_CALL_RESULT` for an unknown call; an unknown `parentSubagentRunId` |
| `OutOfOrder` | `TOOL_CALL_RESULT` before that call's `TOOL_CALL_END` |
| `ArgsNotJson` | `TOOL_CALL_END` whose concatenated arguments do not parse as JSON |
| `OpenAtFinish` | `RUN_FINISHED` while anything is open (`RUN_ERROR` is exempt) |
| `RunIdMismatch` | a `RUN_FINISHED` naming another thread or run than `RUN_STARTED` did |
| `OwnerMismatch` | a continuation or end attributed to another subagent than its opener |
| `InvalidOutcome` | an interrupt outcome without interrupts |
| `MissingId` | a first `*_CHUNK` without its id (and name, for tool calls) |
| `EmptyDelta` | an empty text or reasoning delta (clients warn on it) |
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..errors import ProtocolViolation
from ._types import (
    Event,
    MessagesSnapshotEvent,
    ReasoningMessageChunkEvent,
    RunFinishedEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageChunkEvent,
    TextMessageStartEvent,
    ToolCallChunkEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    jsonable,
)

__all__ = ["Verifier"]


@dataclass(slots=True)
class _OpenCall:
    owner: str | None
    args: list[str] = field(default_factory=list)


def _args_parse(args: list[str]) -> bool:
    text = "".join(args)
    if not text:
        return True  # a call without arguments (a no-argument tool) is fine
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


class Verifier:
    """Tracks what is open in one run and checks each event against the rules above."""

    def __init__(self) -> None:
        self.started = False
        self.ended = False
        self._run_ids: tuple[str, str] | None = None
        self._messages: dict[str, str | None] = {}  # open text message id -> owner
        self._message_owner: dict[str, str | None] = {}  # every text message seen -> owner
        self._closed_messages: set[str] = set()
        self._reasoning: dict[str, str | None] = {}  # open REASONING_START blocks
        self._reasoning_messages: dict[str, str | None] = {}
        self._closed_reasoning: set[str] = set()
        self._closed_reasoning_messages: set[str] = set()
        self._calls: dict[str, _OpenCall] = {}
        self._ended_calls: set[str] = set()  # TOOL_CALL_END passed: a result may follow
        self._known_calls: set[str] = set()  # listed by a MESSAGES_SNAPSHOT of this run
        self._steps: dict[str, str | None] = {}  # open step name -> owner
        self._subagents: dict[str, str | None] = {}  # open subagent id -> parent
        self._finished_subagents: set[str] = set()
        self._suspended_subagents: set[str] = set()
        self._text_chunk: str | None = None
        self._tool_chunk: tuple[str, _OpenCall] | None = None
        self._reasoning_chunk: str | None = None
        self._checks: dict[str, Callable[[Any], Callable[[], None] | None]] = {
            "RUN_STARTED": self._run_started,
            "RUN_FINISHED": self._run_finished,
            "RUN_ERROR": self._run_error,
            "TEXT_MESSAGE_START": self._text_start,
            "TEXT_MESSAGE_CONTENT": self._text_content,
            "TEXT_MESSAGE_END": self._text_end,
            "TEXT_MESSAGE_CHUNK": self._text_chunk_event,
            "TOOL_CALL_START": self._tool_start,
            "TOOL_CALL_ARGS": self._tool_args,
            "TOOL_CALL_END": self._tool_end,
            "TOOL_CALL_CHUNK": self._tool_chunk_event,
            "TOOL_CALL_RESULT": self._tool_result,
            "REASONING_START": self._reasoning_start,
            "REASONING_END": self._reasoning_end,
            "REASONING_MESSAGE_START": self._reasoning_message_start,
            "REASONING_MESSAGE_CONTENT": self._reasoning_content,
            "REASONING_MESSAGE_END": self._reasoning_message_end,
            "REASONING_MESSAGE_CHUNK": self._reasoning_chunk_event,
            "STEP_STARTED": self._step_started,
            "STEP_FINISHED": self._step_finished,
            "SUBAGENT_STARTED": self._subagent_started,
            "SUBAGENT_FINISHED": self._subagent_closed,
            "SUBAGENT_ERROR": self._subagent_closed,
            "MESSAGES_SNAPSHOT": self._messages_snapshot,
        }

    # ── public ───────────────────────────────────────────────────────────────────

    def check(self, event: Event) -> None:
        """Accept `event` (updating what is open) or raise `ProtocolViolation`."""
        if self.ended:
            raise ProtocolViolation("RunEnded", f"{event.type} after the run's terminal event")
        kind = event.type
        if self._tool_chunk is not None and kind != "TOOL_CALL_CHUNK":
            # Even RUN_ERROR: clients judge the call's arguments when its chunks end. The
            # driver's last-resort error goes out regardless (`EventSink.emit_terminal`).
            self._check_tool_chunk(kind)
        check = self._checks.get(kind)
        commit = check(event) if check is not None else None
        # Only now, with the event accepted, does any other event close a chunk stream.
        if self._text_chunk is not None and kind != "TEXT_MESSAGE_CHUNK":
            self._close_text_chunk()
        if self._reasoning_chunk is not None and kind != "REASONING_MESSAGE_CHUNK":
            self._reasoning_chunk = None
        if self._tool_chunk is not None and kind != "TOOL_CALL_CHUNK":
            self._ended_calls.add(self._tool_chunk[0])
            self._tool_chunk = None
        if commit is not None:
            commit()

    def open_items(self) -> list[str]:
        """Human-readable list of everything still open (empty when the run may finish)."""
        items = [f"text message {i}" for i in self._messages]
        items += [f"reasoning block {i}" for i in self._reasoning]
        items += [f"reasoning message {i}" for i in self._reasoning_messages]
        items += [f"tool call {i}" for i in self._calls]
        items += [f"step {n!r}" for n in self._steps]
        items += [f"subagent {i}" for i in self._subagents]
        return items

    def message_owner(self, message_id: str) -> str | None:
        """The subagent that owns text message `message_id` (None: the agent, or unknown)."""
        return self._message_owner.get(message_id)

    # ── helpers ──────────────────────────────────────────────────────────────────

    @staticmethod
    def _owner_check(kind: str, what: str, ident: str, event: Any, owner: str | None) -> None:
        tagged = event.subagent_run_id
        if tagged != owner:
            raise ProtocolViolation(
                "OwnerMismatch",
                f"{kind} for {what} {ident} is attributed to subagent {tagged!r}, "
                f"but it was opened by {owner!r}",
            )

    def _close_text_chunk(self) -> None:
        assert self._text_chunk is not None
        self._closed_messages.add(self._text_chunk)
        self._text_chunk = None

    def _check_tool_chunk(self, kind: str) -> None:
        """An open chunked tool call closes when another event comes: its args must parse."""
        assert self._tool_chunk is not None
        call_id, call = self._tool_chunk
        if not _args_parse(call.args):
            raise ProtocolViolation(
                "ArgsNotJson",
                f"the chunked arguments of tool call {call_id} are not JSON "
                f"(the stream went on with {kind})",
            )

    # ── lifecycle ────────────────────────────────────────────────────────────────

    def _run_started(self, event: Any) -> Callable[[], None]:
        if self.started:
            raise ProtocolViolation("DuplicateRunStarted", "RUN_STARTED was already emitted")

        def commit() -> None:
            self.started = True
            self._run_ids = (event.thread_id, event.run_id)

        return commit

    def _run_finished(self, event: RunFinishedEvent) -> Callable[[], None]:
        if self._run_ids is not None and (event.thread_id, event.run_id) != self._run_ids:
            raise ProtocolViolation(
                "RunIdMismatch",
                f"RUN_FINISHED names thread {event.thread_id!r} run {event.run_id!r}, but the "
                f"run started as thread {self._run_ids[0]!r} run {self._run_ids[1]!r}",
            )
        still_open = self.open_items()
        if still_open:
            raise ProtocolViolation(
                "OpenAtFinish", "RUN_FINISHED while open: " + ", ".join(still_open)
            )
        outcome = jsonable(event.outcome)
        interrupt = isinstance(outcome, dict) and outcome.get("type") == "interrupt"
        if interrupt and not outcome.get("interrupts"):
            raise ProtocolViolation(
                "InvalidOutcome", "an interrupt outcome needs at least one interrupt"
            )

        def commit() -> None:
            self.ended = True

        return commit

    def _run_error(self, event: Any) -> Callable[[], None]:
        def commit() -> None:
            self.ended = True

        return commit

    # ── text ─────────────────────────────────────────────────────────────────────

    def _text_start(self, event: TextMessageStartEvent) -> Callable[[], None]:
        mid = event.message_id
        if mid in self._messages:
            raise ProtocolViolation("DuplicateStart", f"text message {mid} is already open")
        if mid in self._closed_messages or mid == self._text_chunk:
            raise ProtocolViolation("ReusedId", f"text message id {mid} was already used")

        def commit() -> None:
            self._messages[mid] = event.subagent_run_id
            self._message_owner[mid] = event.subagent_run_id

        return commit

    def _text_content(self, event: Any) -> None:
        mid = event.message_id
        if mid not in self._messages:
            raise ProtocolViolation("NotOpen", f"TEXT_MESSAGE_CONTENT for {mid}, which is not open")
        if event.delta == "":
            raise ProtocolViolation("EmptyDelta", f"empty TEXT_MESSAGE_CONTENT delta for {mid}")
        self._owner_check(event.type, "text message", mid, event, self._messages[mid])
        return None

    def _text_end(self, event: Any) -> Callable[[], None]:
        mid = event.message_id
        if mid not in self._messages:
            raise ProtocolViolation("NotOpen", f"TEXT_MESSAGE_END for {mid}, which is not open")
        self._owner_check(event.type, "text message", mid, event, self._messages[mid])

        def commit() -> None:
            del self._messages[mid]
            self._closed_messages.add(mid)

        return commit

    def _text_chunk_event(self, event: TextMessageChunkEvent) -> Callable[[], None] | None:
        mid = event.message_id
        if mid is None or mid == self._text_chunk:
            if self._text_chunk is None:
                raise ProtocolViolation(
                    "MissingId", "the first TEXT_MESSAGE_CHUNK of a message needs a messageId"
                )
            return None
        if mid in self._messages:
            return None  # content for an explicitly opened message
        if mid in self._closed_messages:
            raise ProtocolViolation("ReusedId", f"text message id {mid} was already used")

        def commit() -> None:
            if self._text_chunk is not None:
                self._close_text_chunk()
            self._text_chunk = mid
            self._message_owner[mid] = event.subagent_run_id

        return commit

    # ── tool calls ───────────────────────────────────────────────────────────────

    def _tool_start(self, event: ToolCallStartEvent) -> Callable[[], None]:
        cid = event.tool_call_id
        if cid in self._calls:
            raise ProtocolViolation("DuplicateStart", f"tool call {cid} is already open")
        chunked = self._tool_chunk is not None and self._tool_chunk[0] == cid
        if cid in self._ended_calls or chunked:
            raise ProtocolViolation("ReusedId", f"tool call id {cid} was already used")
        owner = event.subagent_run_id
        parent = event.parent_message_id
        if parent is not None and parent in self._message_owner:
            parent_owner = self._message_owner[parent]
            if owner is not None and owner != parent_owner:
                raise ProtocolViolation(
                    "OwnerMismatch",
                    f"tool call {cid} is attributed to {owner!r} but its parent message "
                    f"{parent} belongs to {parent_owner!r}",
                )
            owner = parent_owner

        def commit() -> None:
            self._calls[cid] = _OpenCall(owner)

        return commit

    def _tool_args(self, event: Any) -> Callable[[], None]:
        cid = event.tool_call_id
        call = self._calls.get(cid)
        if call is None:
            raise ProtocolViolation("NotOpen", f"TOOL_CALL_ARGS for {cid}, which is not open")
        self._owner_check(event.type, "tool call", cid, event, call.owner)

        def commit() -> None:
            call.args.append(event.delta)

        return commit

    def _tool_end(self, event: Any) -> Callable[[], None]:
        cid = event.tool_call_id
        call = self._calls.get(cid)
        if call is None:
            raise ProtocolViolation("NotOpen", f"TOOL_CALL_END for {cid}, which is not open")
        self._owner_check(event.type, "tool call", cid, event, call.owner)
        if not _args_parse(call.args):
            raise ProtocolViolation(
                "ArgsNotJson", f"the arguments streamed for tool call {cid} are not JSON"
            )

        def commit() -> None:
            del self._calls[cid]
            self._ended_calls.add(cid)

        return commit

    def _tool_chunk_event(self, event: ToolCallChunkEvent) -> Callable[[], None] | None:
        cid = event.tool_call_id
        chunk = self._tool_chunk
        if cid is None or (chunk is not None and cid == chunk[0]):
            if chunk is None:
                raise ProtocolViolation(
                    "MissingId", "the first TOOL_CALL_CHUNK of a call needs toolCallId and name"
                )
            if event.delta:
                chunk[1].args.append(event.delta)
            return None
        if cid in self._calls:
            if event.delta:
                self._calls[cid].args.append(event.delta)
            return None
        if cid in self._ended_calls:
            raise ProtocolViolation("ReusedId", f"tool call id {cid} was already used")
        if event.tool_call_name is None:
            raise ProtocolViolation(
                "MissingId", f"the first TOOL_CALL_CHUNK of call {cid} needs toolCallName"
            )

        if self._tool_chunk is not None:
            self._check_tool_chunk(event.type)

        def commit() -> None:
            if self._tool_chunk is not None:
                self._ended_calls.add(self._tool_chunk[0])
            self._tool_chunk = (cid, _OpenCall(event.subagent_run_id, [event.delta or ""]))

        return commit

    def _tool_result(self, event: ToolCallResultEvent) -> None:
        cid = event.tool_call_id
        if cid in self._calls:
            raise ProtocolViolation(
                "OutOfOrder", f"TOOL_CALL_RESULT for {cid} before its TOOL_CALL_END"
            )
        if cid not in self._ended_calls and cid not in self._known_calls:
            raise ProtocolViolation("UnknownId", f"TOOL_CALL_RESULT for unknown tool call {cid}")
        return None

    def _messages_snapshot(self, event: MessagesSnapshotEvent) -> Callable[[], None]:
        def commit() -> None:
            for message in jsonable(event.messages):
                if not isinstance(message, dict):
                    continue
                for call in message.get("toolCalls") or ():
                    if isinstance(call, dict) and isinstance(call.get("id"), str):
                        self._known_calls.add(call["id"])

        return commit

    # ── reasoning ────────────────────────────────────────────────────────────────

    def _reasoning_start(self, event: Any) -> Callable[[], None]:
        mid = event.message_id
        if mid in self._reasoning:
            raise ProtocolViolation("DuplicateStart", f"reasoning block {mid} is already open")
        if mid in self._closed_reasoning:
            raise ProtocolViolation("ReusedId", f"reasoning block id {mid} was already used")

        def commit() -> None:
            self._reasoning[mid] = event.subagent_run_id

        return commit

    def _reasoning_end(self, event: Any) -> Callable[[], None]:
        mid = event.message_id
        if mid not in self._reasoning:
            raise ProtocolViolation("NotOpen", f"REASONING_END for {mid}, which is not open")
        self._owner_check(event.type, "reasoning block", mid, event, self._reasoning[mid])

        def commit() -> None:
            del self._reasoning[mid]
            self._closed_reasoning.add(mid)

        return commit

    def _reasoning_message_start(self, event: Any) -> Callable[[], None]:
        mid = event.message_id
        if mid in self._reasoning_messages:
            raise ProtocolViolation("DuplicateStart", f"reasoning message {mid} is already open")
        if mid in self._closed_reasoning_messages:
            raise ProtocolViolation("ReusedId", f"reasoning message id {mid} was already used")

        def commit() -> None:
            self._reasoning_messages[mid] = event.subagent_run_id

        return commit

    def _reasoning_content(self, event: Any) -> None:
        mid = event.message_id
        if mid not in self._reasoning_messages:
            raise ProtocolViolation(
                "NotOpen", f"REASONING_MESSAGE_CONTENT for {mid}, which is not open"
            )
        if event.delta == "":
            raise ProtocolViolation("EmptyDelta", f"empty reasoning delta for {mid}")
        self._owner_check(
            event.type, "reasoning message", mid, event, self._reasoning_messages[mid]
        )
        return None

    def _reasoning_message_end(self, event: Any) -> Callable[[], None]:
        mid = event.message_id
        if mid not in self._reasoning_messages:
            raise ProtocolViolation(
                "NotOpen", f"REASONING_MESSAGE_END for {mid}, which is not open"
            )
        self._owner_check(
            event.type, "reasoning message", mid, event, self._reasoning_messages[mid]
        )

        def commit() -> None:
            del self._reasoning_messages[mid]
            self._closed_reasoning_messages.add(mid)

        return commit

    def _reasoning_chunk_event(self, event: ReasoningMessageChunkEvent) -> Callable[[], None]:
        mid = event.message_id
        if mid is None and self._reasoning_chunk is None:
            raise ProtocolViolation(
                "MissingId", "the first REASONING_MESSAGE_CHUNK needs a messageId"
            )

        def commit() -> None:
            if event.delta == "":
                self._reasoning_chunk = None  # an empty delta closes a chunked reasoning message
            elif mid is not None:
                self._reasoning_chunk = mid

        return commit

    # ── steps ────────────────────────────────────────────────────────────────────

    def _step_started(self, event: Any) -> Callable[[], None]:
        name = event.step_name
        if name in self._steps:
            raise ProtocolViolation("DuplicateStart", f"step {name!r} is already open")

        def commit() -> None:
            self._steps[name] = event.subagent_run_id

        return commit

    def _step_finished(self, event: Any) -> Callable[[], None]:
        name = event.step_name
        if name not in self._steps:
            raise ProtocolViolation(
                "NotOpen", f"STEP_FINISHED for step {name!r}, which is not open"
            )
        self._owner_check(event.type, "step", name, event, self._steps[name])

        def commit() -> None:
            del self._steps[name]

        return commit

    # ── subagents ────────────────────────────────────────────────────────────────

    def _subagent_started(self, event: SubagentStartedEvent) -> Callable[[], None]:
        sid = event.subagent_run_id
        if sid in self._subagents:
            raise ProtocolViolation("DuplicateStart", f"subagent {sid} is already active")
        if sid in self._finished_subagents:
            raise ProtocolViolation(
                "ReusedId", f"subagent {sid} already finished in this run and cannot restart"
            )
        parent = event.parent_subagent_run_id
        known = self._subagents.keys() | self._finished_subagents | self._suspended_subagents
        if parent is not None and parent not in known:
            raise ProtocolViolation("UnknownId", f"parentSubagentRunId {parent} was never started")

        def commit() -> None:
            self._suspended_subagents.discard(sid)  # a suspended subagent continues
            self._subagents[sid] = parent

        return commit

    def _subagent_closed(self, event: Any) -> Callable[[], None]:
        sid = event.subagent_run_id
        if sid not in self._subagents:
            raise ProtocolViolation(
                "NotOpen", f"{event.type} for subagent {sid}, which is not active"
            )
        suspended = (
            isinstance(event, SubagentFinishedEvent)
            and isinstance(event.outcome, dict)
            and event.outcome.get("type") == "suspended"
        )

        def commit() -> None:
            del self._subagents[sid]
            if suspended:
                self._suspended_subagents.add(sid)
            else:
                self._finished_subagents.add(sid)

        return commit
