"""Stream events to and from JSON, for captures that replay the identical stream."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..conversation import Usage
from ..errors import UsageError
from ._base import (
    Finish,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageReport,
)

__all__ = ["stream_event_from_json", "stream_event_to_json"]

_KINDS: dict[str, type[Any]] = {
    "text": TextDelta,
    "reasoning": ReasoningDelta,
    "call_start": ToolCallStart,
    "call_args": ToolCallArgsDelta,
    "call_end": ToolCallEnd,
    "usage": UsageReport,
    "finish": Finish,
}
_NAMES = {cls: name for name, cls in _KINDS.items()}


def stream_event_to_json(event: StreamEvent) -> dict[str, Any]:
    """`{"kind": ..., **fields}`; usage as its fields."""
    if isinstance(event, UsageReport):
        return {"kind": "usage", "usage": event.usage.model_dump()}
    return {"kind": _NAMES[type(event)], **asdict(event)}


def stream_event_from_json(data: dict[str, Any]) -> StreamEvent:
    """The inverse of `stream_event_to_json`; an unknown kind is a `UsageError`."""
    fields = dict(data)
    kind = fields.pop("kind", None)
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise UsageError(f"not a recorded stream event: {data!r}")
    if cls is UsageReport:
        return UsageReport(Usage.model_validate(fields["usage"]))
    event: StreamEvent = cls(**fields)
    return event
