"""AG-UI 1.0 events as light values.

Inside the runtime an event is a slotted dataclass: building one costs well under a
microsecond, and the sink, the verifier and the transformers read plain attributes.
Only at the edge does an event become AG-UI JSON (`to_wire`, camelCase keys, optional
fields omitted, never `null`). The `ag-ui-protocol` pydantic models are used where
input arrives (`RunAgentInput`) and in tests, which check that every encoded event
validates against them.

Each class names its wire type in `type` and lists its wire fields once, at class
creation, so encoding is one loop over a precomputed tuple.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel
from pydantic.alias_generators import to_camel

__all__ = [
    "ActivityDeltaEvent",
    "ActivitySnapshotEvent",
    "CustomEvent",
    "Event",
    "MessagesSnapshotEvent",
    "RawEvent",
    "ReasoningEncryptedValueEvent",
    "ReasoningEndEvent",
    "ReasoningMessageChunkEvent",
    "ReasoningMessageContentEvent",
    "ReasoningMessageEndEvent",
    "ReasoningMessageStartEvent",
    "ReasoningStartEvent",
    "RunErrorEvent",
    "RunFinishedEvent",
    "RunStartedEvent",
    "StateDeltaEvent",
    "StateSnapshotEvent",
    "StepFinishedEvent",
    "StepStartedEvent",
    "SubagentErrorEvent",
    "SubagentFinishedEvent",
    "SubagentStartedEvent",
    "TextMessageChunkEvent",
    "TextMessageContentEvent",
    "TextMessageEndEvent",
    "TextMessageStartEvent",
    "ToolCallArgsEvent",
    "ToolCallChunkEvent",
    "ToolCallEndEvent",
    "ToolCallResultEvent",
    "ToolCallStartEvent",
    "event_from_wire",
    "jsonable",
]

_Converter = Callable[[Any], Any]


def jsonable(value: Any) -> Any:
    """Turn a nested value (our own wire objects, pydantic models, tuples) into plain JSON."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    to_wire = getattr(value, "to_wire", None)
    if to_wire is not None:
        return to_wire()
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


# Every event class has a docstring: `dataclass` makes one from `inspect.signature` for a
# class without, which costs more at import than the rest of the class.
@dataclass(slots=True, kw_only=True)
class Event:
    """Fields every AG-UI event may carry. Subclasses add their own."""

    type: ClassVar[str] = ""
    #: Whether a subagent scope stamps `subagent_run_id` on this event (24 types may carry it).
    attributable: ClassVar[bool] = False
    #: (attribute, wire key, converter) for every field, in wire order; set by `_wire`.
    wire_fields: ClassVar[tuple[tuple[str, str, _Converter | None], ...]] = ()

    timestamp: int | None = None
    metadata: dict[str, Any] | None = None
    raw_event: Any = None

    def to_wire(self) -> dict[str, Any]:
        """The AG-UI JSON object: camelCase keys, `None` fields left out."""
        wire: dict[str, Any] = {"type": self.type}
        for attr, key, convert in self.wire_fields:
            value = getattr(self, attr)
            if value is not None:
                wire[key] = value if convert is None else convert(value)
        return wire


# Fields whose values may be our own objects or pydantic models rather than plain JSON.
_NESTED = frozenset({"outcome", "input", "messages", "usage", "result", "interrupts"})

_E = TypeVar("_E", bound=type[Event])
_BY_TYPE: dict[str, type[Event]] = {}


def _wire(cls: _E) -> _E:
    """Record the wire layout of an event class and register it by its wire type."""
    ordered = sorted(fields(cls), key=lambda f: f.name in ("timestamp", "metadata", "raw_event"))
    cls.wire_fields = tuple(
        (f.name, to_camel(f.name), jsonable if f.name in _NESTED else None) for f in ordered
    )
    _BY_TYPE[cls.type] = cls
    return cls


# ── lifecycle ────────────────────────────────────────────────────────────────────


@_wire
@dataclass(slots=True)
class RunStartedEvent(Event):
    """The `RUN_STARTED` event."""

    type: ClassVar[str] = "RUN_STARTED"
    thread_id: str
    run_id: str
    parent_run_id: str | None = None
    input: Any = None
    protocol_version: str | None = None


@_wire
@dataclass(slots=True)
class RunFinishedEvent(Event):
    """The `RUN_FINISHED` event."""

    type: ClassVar[str] = "RUN_FINISHED"
    thread_id: str
    run_id: str
    result: Any = None
    outcome: Any = None  # a RunOutcome, or its wire dict
    usage: list[dict[str, Any]] | None = None


@_wire
@dataclass(slots=True)
class RunErrorEvent(Event):
    """The `RUN_ERROR` event."""

    type: ClassVar[str] = "RUN_ERROR"
    message: str
    code: str | None = None
    usage: list[dict[str, Any]] | None = None


@_wire
@dataclass(slots=True)
class StepStartedEvent(Event):
    """The `STEP_STARTED` event."""

    type: ClassVar[str] = "STEP_STARTED"
    attributable: ClassVar[bool] = True
    step_name: str
    subagent_run_id: str | None = None


@_wire
@dataclass(slots=True)
class StepFinishedEvent(Event):
    """The `STEP_FINISHED` event."""

    type: ClassVar[str] = "STEP_FINISHED"
    attributable: ClassVar[bool] = True
    step_name: str
    subagent_run_id: str | None = None


# ── text messages ────────────────────────────────────────────────────────────────


@_wire
@dataclass(slots=True)
class TextMessageStartEvent(Event):
    """The `TEXT_MESSAGE_START` event."""

    type: ClassVar[str] = "TEXT_MESSAGE_START"
    attributable: ClassVar[bool] = True
    message_id: str
    role: str = "assistant"
    name: str | None = None
    subagent_run_id: str | None = None


@_wire
@dataclass(slots=True)
class TextMessageContentEvent(Event):
    """The `TEXT_MESSAGE_CONTENT` event."""

    type: ClassVar[str] = "TEXT_MESSAGE_CONTENT"
    attributable: ClassVar[bool] = True
    message_id: str
    delta: str
    subagent_run_id: str | None = None


@_wire
@dataclass(slots=True)
class TextMessageEndEvent(Event):
    """The `TEXT_MESSAGE_END` event."""

    type: ClassVar[str] = "TEXT_MESSAGE_END"
    attributable: ClassVar[bool] = True
    message_id: str
    subagent_run_id: str | None = None


@_wire
@dataclass(slots=True)
class TextMessageChunkEvent(Event):
    """The `TEXT_MESSAGE_CHUNK` event."""

    type: ClassVar[str] = "TEXT_MESSAGE_CHUNK"
    attributable: ClassVar[bool] = True
    message_id: str | None = None
    role: str | None = None
    delta: str | None = None
    name: str | None = None
    subagent_run_id: str | None = None


# ── tool calls ───────────────────────────────────────────────────────────────────


@_wire
@dataclass(slots=True)
class ToolCallStartEvent(Event):
    """The `TOOL_CALL_START` event."""

    type: ClassVar[str] = "TOOL_CALL_START"
    attributable: ClassVar[bool] = True
    tool_call_id: str
    tool_call_name: str
    parent_message_id: str | None = None
    subagent_run_id: str | None = None


@_wire
@dataclass(slots=True)
class ToolCallArgsEvent(Event):
    """The `TOOL_CALL_ARGS` event."""

    type: ClassVar[str] = "TOOL_CALL_ARGS"
    attributable: ClassVar[bool] = True
    tool_call_id: str
    delta: str
    subagent_run_id: str | None = None


@_wire
@dataclass(slots=True)
class ToolCallEndEvent(Event):
    """The `TOOL_CALL_END` event."""

    type: ClassVar[str] = "TOOL_CALL_END"
    attributable: ClassVar[bool] = True
    tool_call_id: str
    subagent_run_id: str | None = None


@_wire
@dataclass(slots=True)
class ToolCallChunkEvent(Event):
    """The `TOOL_CALL_CHUNK` event."""

    type: ClassVar[str] = "TOOL_CALL_CHUNK"
    attributable: ClassVar[bool] = True
    tool_call_id: str | None = None
    tool_call_name: str | None = None
    parent_message_id: str | None = None
    delta: str | None = None
    subagent_run_id: str | None = None


@_wire
@dataclass(slots=True)
class ToolCallResultEvent(Event):
    """The `TOOL_CALL_RESULT` event."""

    type: ClassVar[str] = "TOOL_CALL_RESULT"
    attributable: ClassVar[bool] = True
    message_id: str
    tool_call_id: str
    content: str
    role: str | None = "tool"
    subagent_run_id: str | None = None


# ── state and messages ───────────────────────────────────────────────────────────


@_wire
@dataclass(slots=True)
class StateSnapshotEvent(Event):
    """The `STATE_SNAPSHOT` event."""

    type: ClassVar[str] = "STATE_SNAPSHOT"
    attributable: ClassVar[bool] = True
    snapshot: Any
    subagent_run_id: str | None = None

    def to_wire(self) -> dict[str, Any]:
        # `snapshot` is required and may legitimately be JSON null.
        wire = Event.to_wire(self)
        wire.setdefault("snapshot", None)
        return wire


@_wire
@dataclass(slots=True)
class StateDeltaEvent(Event):
    """The `STATE_DELTA` event."""

    type: ClassVar[str] = "STATE_DELTA"
    attributable: ClassVar[bool] = True
    delta: list[dict[str, Any]]
    subagent_run_id: str | None = None


@_wire
@dataclass(slots=True)
class MessagesSnapshotEvent(Event):
    """The `MESSAGES_SNAPSHOT` event."""

    type: ClassVar[str] = "MESSAGES_SNAPSHOT"
    messages: list[Any]  # ag-ui Message models or their wire dicts


@_wire
@dataclass(slots=True)
class ActivitySnapshotEvent(Event):
    """The `ACTIVITY_SNAPSHOT` event."""

    type: ClassVar[str] = "ACTIVITY_SNAPSHOT"
    attributable: ClassVar[bool] = True
    message_id: str
    activity_type: str
    content: dict[str, Any]
    replace: bool | None = None
    subagent_run_id: str | None = None


@_wire
@dataclass(slots=True)
class ActivityDeltaEvent(Event):
    """The `ACTIVITY_DELTA` event."""

    type: ClassVar[str] = "ACTIVITY_DELTA"
    attributable: ClassVar[bool] = True
    message_id: str
    activity_type: str
    patch: list[dict[str, Any]]
    subagent_run_id: str | None = None


# ── special ──────────────────────────────────────────────────────────────────────


@_wire
@dataclass(slots=True)
class RawEvent(Event):
    """The `RAW` event."""

    type: ClassVar[str] = "RAW"
    attributable: ClassVar[bool] = True
    event: Any
    source: str | None = None
    subagent_run_id: str | None = None


@_wire
@dataclass(slots=True)
class CustomEvent(Event):
    """The `CUSTOM` event."""

    type: ClassVar[str] = "CUSTOM"
    attributable: ClassVar[bool] = True
    name: str
    value: Any
    subagent_run_id: str | None = None

    def to_wire(self) -> dict[str, Any]:
        # `value` is required and may legitimately be JSON null.
        wire = Event.to_wire(self)
        wire.setdefault("value", None)
        return wire


# ── reasoning ────────────────────────────────────────────────────────────────────


@_wire
@dataclass(slots=True)
class ReasoningStartEvent(Event):
    """The `REASONING_START` event."""

    type: ClassVar[str] = "REASONING_START"
    attributable: ClassVar[bool] = True
    message_id: str
    subagent_run_id: str | None = None


@_wire
@dataclass(slots=True)
class ReasoningMessageStartEvent(Event):
    """The `REASONING_MESSAGE_START` event."""

    type: ClassVar[str] = "REASONING_MESSAGE_START"
    attributable: ClassVar[bool] = True
    message_id: str
    role: str = "reasoning"
    subagent_run_id: str | None = None


@_wire
@dataclass(slots=True)
class ReasoningMessageContentEvent(Event):
    """The `REASONING_MESSAGE_CONTENT` event."""

    type: ClassVar[str] = "REASONING_MESSAGE_CONTENT"
    attributable: ClassVar[bool] = True
    message_id: str
    delta: str
    subagent_run_id: str | None = None


@_wire
@dataclass(slots=True)
class ReasoningMessageEndEvent(Event):
    """The `REASONING_MESSAGE_END` event."""

    type: ClassVar[str] = "REASONING_MESSAGE_END"
    attributable: ClassVar[bool] = True
    message_id: str
    subagent_run_id: str | None = None


@_wire
@dataclass(slots=True)
class ReasoningMessageChunkEvent(Event):
    """The `REASONING_MESSAGE_CHUNK` event."""

    type: ClassVar[str] = "REASONING_MESSAGE_CHUNK"
    attributable: ClassVar[bool] = True
    message_id: str | None = None
    delta: str | None = None
    subagent_run_id: str | None = None


@_wire
@dataclass(slots=True)
class ReasoningEndEvent(Event):
    """The `REASONING_END` event."""

    type: ClassVar[str] = "REASONING_END"
    attributable: ClassVar[bool] = True
    message_id: str
    subagent_run_id: str | None = None


@_wire
@dataclass(slots=True)
class ReasoningEncryptedValueEvent(Event):
    """The `REASONING_ENCRYPTED_VALUE` event."""

    type: ClassVar[str] = "REASONING_ENCRYPTED_VALUE"
    attributable: ClassVar[bool] = True
    subtype: str  # "tool-call" | "message"
    entity_id: str
    encrypted_value: str
    subagent_run_id: str | None = None


# ── subagents ────────────────────────────────────────────────────────────────────


@_wire
@dataclass(slots=True)
class SubagentStartedEvent(Event):
    """The `SUBAGENT_STARTED` event."""

    type: ClassVar[str] = "SUBAGENT_STARTED"
    subagent_run_id: str
    name: str
    description: str | None = None
    parent_subagent_run_id: str | None = None
    parent_tool_call_id: str | None = None
    parent_message_id: str | None = None


@_wire
@dataclass(slots=True)
class SubagentFinishedEvent(Event):
    """The `SUBAGENT_FINISHED` event."""

    type: ClassVar[str] = "SUBAGENT_FINISHED"
    subagent_run_id: str
    result: Any = None
    outcome: dict[str, Any] | None = None


@_wire
@dataclass(slots=True)
class SubagentErrorEvent(Event):
    """The `SUBAGENT_ERROR` event."""

    type: ClassVar[str] = "SUBAGENT_ERROR"
    subagent_run_id: str
    message: str
    code: str | None = None


def event_from_wire(wire: dict[str, Any]) -> Event:
    """Rebuild a light event from its AG-UI JSON form (recorded streams, event logs).

    Unknown keys are ignored; an unknown `type` raises `ValueError`.
    """
    cls = _BY_TYPE.get(wire.get("type", ""))
    if cls is None:
        raise ValueError(f"unknown AG-UI event type {wire.get('type')!r}")
    kwargs = {attr: wire[key] for attr, key, _ in cls.wire_fields if key in wire}
    return cls(**kwargs)


EVENT_TYPES: dict[str, type[Event]] = dict(_BY_TYPE)
