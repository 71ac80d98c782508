"""AG-UI JSON and SSE framing for light events.

The SSE frame is `data: <compact json>\\n\\n`, exactly what `@ag-ui/client` parses.
orjson writes compact UTF-8 and is several times faster than `json`; nested values that
orjson does not know (our outcome objects, pydantic models) go through `jsonable`.
"""

from __future__ import annotations

from typing import Any

import orjson

from ._types import Event, jsonable

__all__ = ["SSE_CONTENT_TYPE", "encode_json", "encode_sse", "keep_alive_frame"]

SSE_CONTENT_TYPE = "text/event-stream"


def _default(value: Any) -> Any:
    converted = jsonable(value)
    if converted is value:
        raise TypeError(f"cannot encode {type(value).__name__} as JSON")
    return converted


def encode_json(event: Event) -> bytes:
    """The event as compact AG-UI JSON (camelCase, optional fields omitted)."""
    return orjson.dumps(event.to_wire(), default=_default)


def encode_sse(event: Event) -> bytes:
    """The event as one SSE frame."""
    return b"data: " + orjson.dumps(event.to_wire(), default=_default) + b"\n\n"


def keep_alive_frame() -> bytes:
    """An SSE comment; clients ignore it, proxies see traffic on an idle stream."""
    return b": keep-alive\n\n"
