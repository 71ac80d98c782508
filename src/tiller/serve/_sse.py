"""SSE bodies: frames as they come, keep-alive comments while idle.

A frame is `data: <json>\\n\\n` (with `id: <index>` first on the events endpoint, so a
reader knows where to reattach). Each frame is its own chunk of the response: nothing is
buffered, so a client sees an event as soon as the run emits it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from ..events import keep_alive_frame

__all__ = ["sse_frames"]

_KEEP_ALIVE = keep_alive_frame()


async def sse_frames(
    frames: AsyncIterator[bytes | None], *, first_index: int | None = None
) -> AsyncIterator[bytes]:
    """SSE chunks for `frames` (JSON events; None for "idle, send a keep-alive")."""
    index = first_index
    async for frame in frames:
        if frame is None:
            yield _KEEP_ALIVE
            continue
        if index is None:
            yield b"data: " + frame + b"\n\n"
        else:
            yield b"id: " + str(index).encode() + b"\ndata: " + frame + b"\n\n"
            index += 1
