"""`TcpProxy`: a TCP proxy to a local server (NATS by default) that a test cuts and
restores, so the server "goes away" for the clients connected through it only, while
others keep their own connections to it (tests/store/test_nats.py's reconnect tests, the
fleet's store outage in tests/fleet/test_review_faults.py)."""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["TcpProxy"]


class TcpProxy:
    """Listens on a free loopback port (`port`, kept across a `cut` and the next `start`,
    so a client reconnecting to it gets through again) and pipes each connection to
    `127.0.0.1:upstream`."""

    def __init__(self, upstream: int = 4222) -> None:
        self.port = 0
        self._upstream = upstream
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """Stop accepting, drop every proxied connection."""
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream)
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
