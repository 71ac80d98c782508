"""Stream transformers: each maps one outgoing event to zero or more.

They run after attribution and before the verifier, per run (stateful ones must not be
shared between runs: `Agent.run`, `run_in`, `resume` and `create_app` take a factory,
`transformers=lambda: [...]`, called once per run).
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Iterable
from typing import Any

import orjson

from ._types import (
    Event,
    ReasoningEncryptedValueEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    ToolCallChunkEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

__all__ = ["FilterToolCalls", "SubagentVisibility", "ToolResultToState"]

_CALL_EVENTS = frozenset({"TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"})


class FilterToolCalls:
    """Drop whole tool calls by tool name: start, arguments, end, result, encrypted value.

    Build with `FilterToolCalls.allow(names)` (only these pass) or `.deny(names)`.
    """

    def __init__(self, names: Iterable[str], *, allow: bool) -> None:
        self._names = frozenset(names)
        self._allow = allow
        self._dropped: set[str] = set()
        self._chunk_id: str | None = None

    @classmethod
    def allow(cls, names: Iterable[str]) -> FilterToolCalls:
        return cls(names, allow=True)

    @classmethod
    def deny(cls, names: Iterable[str]) -> FilterToolCalls:
        return cls(names, allow=False)

    def _drops(self, name: str) -> bool:
        return (name in self._names) != self._allow

    def transform(self, event: Event) -> Iterable[Event]:
        kind = event.type
        if isinstance(event, ToolCallStartEvent):
            if self._drops(event.tool_call_name):
                self._dropped.add(event.tool_call_id)
                return ()
        elif kind in _CALL_EVENTS:
            if event.tool_call_id in self._dropped:  # type: ignore[attr-defined]
                return ()
        elif isinstance(event, ToolCallChunkEvent):
            call_id = event.tool_call_id or self._chunk_id
            if event.tool_call_id is not None and event.tool_call_name is not None:
                self._chunk_id = event.tool_call_id
                if self._drops(event.tool_call_name):
                    self._dropped.add(event.tool_call_id)
            if call_id in self._dropped:
                return ()
        elif (
            isinstance(event, ReasoningEncryptedValueEvent)
            and event.subtype == "tool-call"
            and event.entity_id in self._dropped
        ):
            return ()
        return (event,)


class ToolResultToState:
    """Turn a tool's JSON result into shared state.

    `ToolResultToState.snapshot(tool)`: the result is the new state (`STATE_SNAPSHOT`).
    `ToolResultToState.delta(tool)`: the result is an RFC 6902 patch (`STATE_DELTA`).
    `.replacing()` drops the result event itself; otherwise the state event follows it.
    A result that is not JSON (or, for `delta`, not a list of operations) passes unchanged.

    The state event is checked by the verifier like any other (a patch that does not
    apply to the client's state is refused), and once delivered the run context's state
    manager and live state take it on, so `ctx.state` is the tool's state and the next
    `publish_state()` is a delta from it.
    """

    def __init__(self, tool: str, *, mode: str, replace: bool = False) -> None:
        self._tool = tool
        self._mode = mode
        self._replace = replace
        self._calls: set[str] = set()

    @classmethod
    def snapshot(cls, tool: str) -> ToolResultToState:
        return cls(tool, mode="snapshot")

    @classmethod
    def delta(cls, tool: str) -> ToolResultToState:
        return cls(tool, mode="delta")

    def replacing(self) -> ToolResultToState:
        return ToolResultToState(self._tool, mode=self._mode, replace=True)

    def transform(self, event: Event) -> Iterable[Event]:
        if isinstance(event, ToolCallStartEvent):
            if event.tool_call_name == self._tool:
                self._calls.add(event.tool_call_id)
            return (event,)
        if not isinstance(event, ToolCallResultEvent) or event.tool_call_id not in self._calls:
            return (event,)
        try:
            value: Any = orjson.loads(event.content)
        except orjson.JSONDecodeError:
            return (event,)
        state_event: Event
        if self._mode == "snapshot":
            state_event = StateSnapshotEvent(value, subagent_run_id=event.subagent_run_id)
        elif isinstance(value, list) and all(isinstance(op, dict) and "op" in op for op in value):
            state_event = StateDeltaEvent(value, subagent_run_id=event.subagent_run_id)
        else:
            return (event,)
        return (state_event,) if self._replace else (event, state_event)


class SubagentVisibility(enum.Enum):
    """How subagent work reaches the client.

    `ATTRIBUTED` (the default): lifecycle events plus `subagentRunId` on each event.
    `INLINE`: lifecycle events removed and attribution stripped, for clients older than
    `@ag-ui/client` 0.0.59. `HIDDEN`: everything a subagent produced is dropped.
    """

    ATTRIBUTED = "attributed"
    INLINE = "inline"
    HIDDEN = "hidden"

    def transform(self, event: Event) -> Iterable[Event]:
        if self is SubagentVisibility.ATTRIBUTED:
            return (event,)
        if isinstance(event, SubagentStartedEvent | SubagentFinishedEvent | SubagentErrorEvent):
            return ()
        owner = getattr(event, "subagent_run_id", None)
        if owner is None:
            return (event,)
        if self is SubagentVisibility.HIDDEN:
            return ()
        stripped = copy.copy(event)
        stripped.subagent_run_id = None  # type: ignore[attr-defined]
        return (stripped,)
