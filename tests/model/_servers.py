"""A tiny HTTP/1.1 server in the test process, speaking the providers' wire formats.

Hand-written on `asyncio.start_server` (no extra dependencies) so a test controls every
byte: the status and headers, how the body is framed (chunked, Content-Length, or "until
the connection closes"), and whether the connection is dropped before the body is done.
Each test scripts the replies in order and afterwards reads the requests the server got.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self

import orjson
import pytest

from tiller.model import ModelRequest, StreamEvent

__all__ = [
    "LocalServer",
    "Recorded",
    "Reply",
    "anthropic_sse",
    "byte_chunks",
    "clean_env",
    "collect",
    "collect_until_error",
    "json_reply",
    "openai_sse",
]

Framing = Literal["chunked", "length", "close"]


@dataclass(slots=True)
class Recorded:
    """A request as the server received it; header names are lower-cased."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass(slots=True)
class Reply:
    """What the server answers to one request.

    `chunks` are written one at a time. `complete=False` drops the connection after them:
    with chunked framing the terminating chunk never comes, which httpx reports as an
    error; with `close` framing the body simply ends early, which looks like a clean end.
    """

    status: int = 200
    headers: Sequence[tuple[str, str]] = ()
    chunks: Sequence[bytes] = ()
    framing: Framing = "chunked"
    complete: bool = True


def openai_sse(*chunks: dict[str, Any] | str, **reply: Any) -> Reply:
    """An OpenAI-style event stream: `data: {json}` lines; a str is sent as is ("[DONE]")."""
    lines = [
        b"data: " + (c.encode() if isinstance(c, str) else orjson.dumps(c)) + b"\n\n"
        for c in chunks
    ]
    return Reply(headers=[("content-type", "text/event-stream")], chunks=lines, **reply)


def anthropic_sse(*events: dict[str, Any], **reply: Any) -> Reply:
    """An Anthropic-style event stream: `event: {type}` then `data: {json}`."""
    lines = [
        b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events
    ]
    return Reply(headers=[("content-type", "text/event-stream")], chunks=lines, **reply)


def json_reply(status: int, body: Any, headers: Iterable[tuple[str, str]] = ()) -> Reply:
    """An error (or other JSON) answer with a Content-Length, as providers send errors."""
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return Reply(
        status=status,
        headers=[("content-type", "application/json"), *headers],
        chunks=[raw],
        framing="length",
    )


_REASONS = {200: "OK", 400: "Bad Request", 429: "Too Many Requests", 500: "Internal Server Error"}


@dataclass
class LocalServer:
    """Serves scripted replies on 127.0.0.1 and records what it was asked.

    Use as `async with LocalServer() as server`. Every connection is closed after one
    reply (`Connection: close`), so nothing lingers when the test ends.
    """

    requests: list[Recorded] = field(default_factory=list)
    _replies: deque[Reply] = field(default_factory=deque)
    _server: asyncio.Server | None = None
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)
    _errors: list[str] = field(default_factory=list)

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reply(self, *replies: Reply) -> None:
        self._replies.extend(replies)

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        if exc is None:
            assert not self._errors, self._errors
            assert not self._replies, f"{len(self._replies)} scripted replies were never asked for"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            request = await self._read_request(reader)
            if request is None:
                return
            self.requests.append(request)
            if not self._replies:
                self._errors.append(f"unexpected request {request.method} {request.path}")
                await self._write(writer, json_reply(500, {"error": "no reply scripted"}))
            else:
                await self._write(writer, self._replies.popleft())
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away first (it stopped reading early): that is allowed
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self._handlers.discard(task)

    async def _read_request(self, reader: asyncio.StreamReader) -> Recorded | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        return Recorded(method, path, headers, body)

    async def _write(self, writer: asyncio.StreamWriter, reply: Reply) -> None:
        head = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}"]
        head += [f"{name}: {value}" for name, value in reply.headers]
        head.append("connection: close")
        if reply.framing == "chunked":
            head.append("transfer-encoding: chunked")
        elif reply.framing == "length":
            head.append(f"content-length: {sum(len(c) for c in reply.chunks)}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        for chunk in reply.chunks:
            if reply.framing == "chunked":
                writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            else:
                writer.write(chunk)
            await writer.drain()
        if reply.complete and reply.framing == "chunked":
            writer.write(b"0\r\n\r\n")
            await writer.drain()


async def collect(model: Any, request: ModelRequest) -> list[StreamEvent]:
    """Every event of one streamed response (hang guard: 10 s, never a timing assertion)."""
    async with asyncio.timeout(10):
        return [event async for event in model.stream(request)]


async def collect_until_error(
    model: Any, request: ModelRequest, error: type[BaseException]
) -> tuple[list[StreamEvent], pytest.ExceptionInfo[Any]]:
    """The events yielded before the stream raised `error`, and the error."""
    events: list[StreamEvent] = []
    with pytest.raises(error) as info:
        async with asyncio.timeout(10):
            async for event in model.stream(request):
                events.append(event)
    return events, info


async def byte_chunks(data: bytes, size: int = 1) -> AsyncIterator[bytes]:
    """`data` in pieces of `size` bytes, to put chunk boundaries everywhere."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No provider keys or URLs, and no proxies, from the developer's environment."""
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
