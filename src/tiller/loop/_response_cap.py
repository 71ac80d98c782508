"""The response byte cap (`RunOptions.max_response_bytes`), applied before a delta is kept.

The loop sends each delta to the client and keeps it in the transcript; law 8 keeps the
half-written text of a cut step, so the two must hold the same bytes. The cap is therefore
applied to the event *before* either sees it: a text or reasoning delta that would cross
the cap is cut to the bytes that still fit (at a character boundary), and that part is
both streamed and kept; then the step stops. Any other event that would cross it (tool
call arguments, a signature, a redacted block) is kept by neither: a cut argument could
not become a call anyway (law 1).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from ..model import ReasoningDelta, StreamEvent, TextDelta, ToolCallArgsDelta

__all__ = ["fit_response_cap", "response_bytes"]

#: The events that add bytes to a response.
_SIZED: Final = (TextDelta, ToolCallArgsDelta, ReasoningDelta)


def response_bytes(event: StreamEvent) -> int:
    """UTF-8 bytes `event` adds to a response, counted as `ResponseAccumulator.bytes` does."""
    if isinstance(event, TextDelta):
        return _utf8_len(event.text)
    if isinstance(event, ToolCallArgsDelta):
        return _utf8_len(event.delta)
    if isinstance(event, ReasoningDelta):
        return sum(_utf8_len(part or "") for part in (event.text, event.signature, event.redacted))
    return 0


def fit_response_cap(event: StreamEvent, room: int) -> tuple[StreamEvent | None, bool]:
    """`event` as far as `room` bytes allow, and whether the cap was reached.

    `(event, False)`: it fits whole. `(part, True)`: a text or reasoning delta cut to the
    bytes that fit; stream and keep it, then stop. `(None, True)`: nothing of it fits (or
    it cannot be cut); keep and stream nothing of it, and stop.
    """
    if not isinstance(event, _SIZED) or response_bytes(event) <= room:
        return event, False  # (most events add no bytes: it is called with every one)
    if isinstance(event, TextDelta):
        head = _utf8_prefix(event.text, room)
        return (TextDelta(head) if head else None), True
    if (
        isinstance(event, ReasoningDelta)
        and event.signature is None
        and event.redacted is None
        and (head := _utf8_prefix(event.text, room))
    ):
        return replace(event, text=head), True
    return None, True


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _utf8_prefix(text: str, size: int) -> str:
    """The longest start of `text` whose UTF-8 form has at most `size` bytes."""
    return text.encode("utf-8")[: max(size, 0)].decode("utf-8", errors="ignore")
