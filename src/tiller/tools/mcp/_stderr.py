"""`StderrTail`: what an MCP server writes to stderr, kept for error messages.

A server that fails usually says why on stderr ("ModuleNotFoundError", "GITHUB_TOKEN is
not set"), and the SDK would otherwise let that text run into tiller's own terminal,
interleaved with the live view. So the server's stderr is a pipe read on the event loop:
each line is logged at DEBUG under `tiller.tools.mcp`, and the last few kilobytes are kept,
bounded, to be quoted when the server fails to start or dies mid-session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import IO, Final, TextIO

__all__ = ["StderrTail"]

_logger: Final = logging.getLogger("tiller.tools.mcp")

#: How much of the end of stderr is kept.
_KEEP_BYTES: Final = 8192


class _Reader(asyncio.Protocol):
    def __init__(self, tail: StderrTail) -> None:
        self._tail = tail

    def data_received(self, data: bytes) -> None:
        self._tail._feed(data)

    def eof_received(self) -> bool | None:
        self._tail._eof.set()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._tail._eof.set()


class StderrTail:
    """A pipe for one server's stderr. Give `writer` to the process as its stderr, call
    `spawned()` once the process exists (tiller's copy of the write end is closed, so the
    pipe ends when the server does), read `tail()`, and `close()` at the end."""

    __slots__ = ("_buffer", "_eof", "_line", "_reader", "_server", "_transport", "writer")

    def __init__(self, server: str) -> None:
        self._server = server
        read_fd, write_fd = os.pipe()
        self.writer: TextIO = os.fdopen(write_fd, "w", encoding="utf-8", errors="replace")
        self._reader: IO[bytes] | None = os.fdopen(read_fd, "rb", buffering=0)
        self._buffer = bytearray()
        self._line = bytearray()
        self._eof = asyncio.Event()
        self._transport: asyncio.ReadTransport | None = None

    async def start(self) -> None:
        """Start reading (on the running loop)."""
        reader = self._reader
        if reader is None:
            return
        self._reader = None
        event_loop = asyncio.get_running_loop()
        self._transport, _ = await event_loop.connect_read_pipe(lambda: _Reader(self), reader)

    def spawned(self) -> None:
        """The process has its own copy of the write end; drop tiller's."""
        with contextlib.suppress(OSError):
            self.writer.close()

    def _feed(self, data: bytes) -> None:
        self._buffer += data
        if len(self._buffer) > _KEEP_BYTES:
            del self._buffer[: len(self._buffer) - _KEEP_BYTES]
        if _logger.isEnabledFor(logging.DEBUG):
            self._line += data
            *lines, rest = bytes(self._line).split(b"\n")
            self._line = bytearray(rest[-_KEEP_BYTES:])
            for line in lines:
                _logger.debug("[%s] %s", self._server, line.decode("utf-8", "replace").rstrip())

    async def wait_closed(self) -> None:
        """Wait until the server's stderr ends (all its writers exited). Bound it with
        `asyncio.timeout`: a grandchild may keep the pipe open."""
        await self._eof.wait()

    def tail(self, max_lines: int = 12) -> str:
        """The last `max_lines` non-empty lines the server wrote, or ''."""
        text = self._buffer.decode("utf-8", "replace")
        lines = [line.rstrip() for line in text.splitlines() if line.strip()]
        return "\n".join(lines[-max_lines:])

    def close(self) -> None:
        """Stop reading and release both ends of the pipe. Idempotent."""
        self.spawned()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._transport is not None:
            self._transport.close()
            self._transport = None
