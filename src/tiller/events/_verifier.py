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
| `ArgsNotJson` | `TOOL_CALL_END` with arguments not JSON; a chunk after which they cannot be |
| `OpenAtFinish` | `RUN_FINISHED` while anything is open (`RUN_ERROR` is exempt) |
| `RunIdMismatch` | a `RUN_FINISHED` naming another thread or run than `RUN_STARTED` did |
| `OwnerMismatch` | a continuation or end attributed to another subagent than its opener |
| `InvalidOutcome` | an interrupt outcome without interrupts |
| `MissingId` | a first `*_CHUNK` without its id (and name, for tool calls) |
| `EmptyDelta` | an empty text or reasoning delta (clients warn on it) |
| `InvalidRole` | a role or subtype the schema does not allow (a text message as `tool`) |
| `DeltaNotRfc6902` | a `STATE_DELTA` that is not a list of RFC 6902 operations |
| `DeltaDoesNotApply` | a `STATE_DELTA` that does not apply to the state the client has |
| `InvalidInterrupt` | an approval (reason `tool_call`) without `toolCallId`; no `id`/`reason` |

A `RUN_ERROR` that comes while a chunked call's arguments are half written cannot be
valid as it is (clients judge the arguments at the next event, whatever it is);
`completion_before_error()` gives the chunk that completes them, which the sink sends
first. `TOOL_CALL_CHUNK`s are refused as soon as no completion would exist.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..errors import ProtocolViolation
from ._json_prefix import JsonPrefix
from ._stream_state import StreamState
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

#: Roles the AG-UI schema allows on the events that carry one (ag-ui-validate AGUI504).
TEXT_ROLES = frozenset({"developer", "system", "assistant", "user"})
ENCRYPTED_SUBTYPES = frozenset({"tool-call", "message"})


@dataclass(slots=True)
class _OpenCall:
    owner: str | None
    args: list[str] = field(default_factory=list)
    #: For a chunked call: where its arguments stand as a JSON prefix.
    prefix: JsonPrefix | None = None


def _args_parse(args: list[str]) -> bool:
    text = "".join(args)
    if not text:
        return True  # a call without arguments (a no-argument tool) is fine
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


def _check_role(kind: str, role: object, allowed: frozenset[str]) -> None:
    if role not in allowed:
        raise ProtocolViolation(
            "InvalidRole",
            f"{kind} has role {role!r}; AG-UI allows {', '.join(sorted(allowed))} "
            "(a tool's output is a TOOL_CALL_RESULT, reasoning a REASONING_MESSAGE_*)",
        )


def _check_interrupts(interrupts: object) -> None:
    """Each interrupt names itself and why; an approval names the call it is about."""
    if not isinstance(interrupts, list):
        raise ProtocolViolation("InvalidInterrupt", "an outcome's interrupts are a list")
    for interrupt in interrupts:
        if not isinstance(interrupt, dict) or not all(
            isinstance(interrupt.get(key), str) for key in ("id", "reason")
        ):
            raise ProtocolViolation(
                "InvalidInterrupt", f"an interrupt needs a string id and reason: {interrupt!r}"
            )
        call_id = interrupt.get("toolCallId")
        if interrupt["reason"] == "tool_call" and not (isinstance(call_id, str) and call_id):
            raise ProtocolViolation(
                "InvalidInterrupt",
                f"approval interrupt {interrupt['id']} (reason 'tool_call') does not say "
                "which call it is about: set its toolCallId",
            )


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
        self._state = StreamState()

    def _snapshot_event(self, event: Any) -> Callable[[], None] | None:
        return self._state.snapshot(event)

    def _delta_event(self, event: Any) -> Callable[[], None] | None:
        return self._state.delta(event)

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
        check = _CHECKS.get(kind)
        commit = check(self, event) if check is not None else None
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

    @property
    def state(self) -> StreamState:
        """The state the client has, as the accepted state events describe it."""
        return self._state

    def completion_before_error(self) -> Event | None:
        """The chunk that completes an open chunked call's half-written arguments, so a
        `RUN_ERROR` can follow validly; None when nothing needs completing."""
        if self._tool_chunk is None:
            return None
        call_id, call = self._tool_chunk
        if _args_parse(call.args) or call.prefix is None:
            return None
        return ToolCallChunkEvent(
            call_id, delta=call.prefix.completion(), subagent_run_id=call.owner
        )

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
        if interrupt:
            if not outcome.get("interrupts"):
                raise ProtocolViolation(
                    "InvalidOutcome", "an interrupt outcome needs at least one interrupt"
                )
            _check_interrupts(outcome["interrupts"])

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
        _check_role(event.type, event.role, TEXT_ROLES)
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
        if event.role is not None:
            _check_role(event.type, event.role, TEXT_ROLES)
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
                self._extend_chunk(chunk[0], chunk[1], event.delta)
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
        opened = _OpenCall(event.subagent_run_id, prefix=JsonPrefix())
        if event.delta:
            self._extend_chunk(cid, opened, event.delta)

        def commit() -> None:
            if self._tool_chunk is not None:
                self._ended_calls.add(self._tool_chunk[0])
            self._tool_chunk = (cid, opened)

        return commit

    @staticmethod
    def _extend_chunk(call_id: str, call: _OpenCall, delta: str) -> None:
        """Add a chunk's arguments, refusing them if the call could then never end validly."""
        assert call.prefix is not None
        advanced = call.prefix.advanced(delta)
        if advanced is None:
            raise ProtocolViolation(
                "ArgsNotJson",
                f"after this TOOL_CALL_CHUNK the arguments of tool call {call_id} can no "
                f"longer become JSON ({''.join(call.args) + delta!r})",
            )
        call.prefix = advanced
        call.args.append(delta)

    def _tool_result(self, event: ToolCallResultEvent) -> None:
        cid = event.tool_call_id
        if event.role is not None and event.role != "tool":
            raise ProtocolViolation(
                "InvalidRole", f"TOOL_CALL_RESULT for {cid} has role {event.role!r}; it is 'tool'"
            )
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
        if event.role != "reasoning":
            raise ProtocolViolation(
                "InvalidRole",
                f"REASONING_MESSAGE_START for {mid} has role {event.role!r}; it is 'reasoning'",
            )
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

    def _encrypted_value(self, event: Any) -> None:
        if event.subtype not in ENCRYPTED_SUBTYPES:
            raise ProtocolViolation(
                "InvalidRole",
                f"REASONING_ENCRYPTED_VALUE has subtype {event.subtype!r}; it is one of "
                + ", ".join(sorted(ENCRYPTED_SUBTYPES)),
            )
        return None

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


#: Each event type's check, by wire type: one table for every verifier (a run builds one).
_CHECKS: dict[str, Callable[[Verifier, Any], Callable[[], None] | None]] = {
    "RUN_STARTED": Verifier._run_started,
    "RUN_FINISHED": Verifier._run_finished,
    "RUN_ERROR": Verifier._run_error,
    "TEXT_MESSAGE_START": Verifier._text_start,
    "TEXT_MESSAGE_CONTENT": Verifier._text_content,
    "TEXT_MESSAGE_END": Verifier._text_end,
    "TEXT_MESSAGE_CHUNK": Verifier._text_chunk_event,
    "TOOL_CALL_START": Verifier._tool_start,
    "TOOL_CALL_ARGS": Verifier._tool_args,
    "TOOL_CALL_END": Verifier._tool_end,
    "TOOL_CALL_CHUNK": Verifier._tool_chunk_event,
    "TOOL_CALL_RESULT": Verifier._tool_result,
    "REASONING_START": Verifier._reasoning_start,
    "REASONING_END": Verifier._reasoning_end,
    "REASONING_MESSAGE_START": Verifier._reasoning_message_start,
    "REASONING_MESSAGE_CONTENT": Verifier._reasoning_content,
    "REASONING_MESSAGE_END": Verifier._reasoning_message_end,
    "REASONING_MESSAGE_CHUNK": Verifier._reasoning_chunk_event,
    "STEP_STARTED": Verifier._step_started,
    "STEP_FINISHED": Verifier._step_finished,
    "SUBAGENT_STARTED": Verifier._subagent_started,
    "SUBAGENT_FINISHED": Verifier._subagent_closed,
    "SUBAGENT_ERROR": Verifier._subagent_closed,
    "MESSAGES_SNAPSHOT": Verifier._messages_snapshot,
    "STATE_SNAPSHOT": Verifier._snapshot_event,
    "STATE_DELTA": Verifier._delta_event,
    "REASONING_ENCRYPTED_VALUE": Verifier._encrypted_value,
}
