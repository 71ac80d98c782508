"""SSE bodies: frames as they come, keep-alive comments while idle.

A frame is `data: <json>\\n\\n`, with `id: <index>` first where the reader may want to
reattach (the events endpoint): the index of the event in the run's stream, from 0. Each
frame is its own chunk of the response: nothing is buffered, so a client sees an event as
soon as the run emits it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from ..events import keep_alive_frame

__all__ = ["Indexed", "sse_frames"]

_KEEP_ALIVE = keep_alive_frame()

#: An event's index in its run's stream and its JSON; None for "idle: send a keep-alive".
Indexed = tuple[int, bytes] | None


async def sse_frames(frames: AsyncIterator[Indexed], *, ids: bool = False) -> AsyncIterator[bytes]:
    """SSE chunks for `frames`, with `id:` lines when `ids`."""
    async for item in frames:
        if item is None:
            yield _KEEP_ALIVE
            continue
        index, frame = item
        if ids:
            yield b"id: " + str(index).encode() + b"\ndata: " + frame + b"\n\n"
        else:
            yield b"data: " + frame + b"\n\n"
