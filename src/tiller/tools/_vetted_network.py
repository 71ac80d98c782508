"""`VettedTransport`: an httpx transport that connects only to addresses `WebAccess` allows.

httpx's default transport hands the URL's host name to the socket layer, which resolves it
again: a check made before the request (resolve, vet, then fetch) leaves a window in which
a second DNS answer points the name at 127.0.0.1. So the check lives where the connection
is made. `VettedBackend` is an `httpcore.AsyncNetworkBackend`: its `connect_tcp(host,
port)` resolves the name once, vets every address (`WebAccess.vet`), and opens the socket
to a vetted address itself. httpcore then does TLS on that socket with the URL's host name
as SNI and for certificate checks, and the `Host` header stays the name: only the address
connected to is pinned. Redirects reach the transport as new requests, so every hop is
vetted the same way.

The name's lookup and the attempts on its addresses, in turn, share one connect timeout (a
name with twenty dead A records still fails after one timeout, not twenty).

The transport never uses a proxy (a proxy would make the connection, and the vetted
address would be the proxy's); the `Fetcher` builds its client with `trust_env=False`, so
`HTTP(S)_PROXY`, `ALL_PROXY` and `.netrc` credentials in tiller's environment are not used
for model-chosen URLs.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from typing import Final

import httpcore
import httpx

from ._web_access import WebAccess

__all__ = ["VettedBackend", "VettedTransport"]

_EXCEPTIONS: Final[tuple[tuple[type[Exception], type[httpx.HTTPError]], ...]] = (
    # Most specific first: the first match wins.
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def _httpx_errors() -> Iterator[None]:
    """httpcore's errors as the matching httpx ones, as httpx's own transport does;
    anything else (a `PrivateDestination`) passes through unchanged."""
    try:
        yield
    except Exception as exc:
        for source, target in _EXCEPTIONS:
            if isinstance(exc, source):
                raise target(str(exc)) from exc
        raise


class VettedBackend(httpcore.AsyncNetworkBackend):
    """Connects to `host:port` only through addresses `access` allows.

    `inner` opens the sockets (httpcore's `AnyIOBackend`); `clock` measures the shared
    connect deadline (`time.monotonic`). Both are seams for tests."""

    def __init__(
        self,
        access: WebAccess,
        *,
        inner: httpcore.AsyncNetworkBackend | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._access = access
        self._inner = inner if inner is not None else httpcore.AnyIOBackend()
        self._clock = clock

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        deadline = None if timeout is None else self._clock() + timeout
        try:
            async with asyncio.timeout(timeout):  # resolving counts against it too
                addresses = await self._access.vet(host, port)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"resolving {host} timed out") from None
        failure: Exception | None = None
        for address in addresses:
            remaining = None if deadline is None else deadline - self._clock()
            if remaining is not None and remaining <= 0:
                raise httpcore.ConnectTimeout(f"connecting to {host} timed out")
            try:
                return await self._inner.connect_tcp(
                    str(address), port, remaining, local_address, socket_options
                )
            except httpcore.ConnectTimeout:
                raise  # the shared deadline is spent
            except httpcore.ConnectError as exc:
                failure = exc
        assert failure is not None  # `vet` returns at least one address
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("web_fetch does not connect to Unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class VettedTransport(httpx.AsyncBaseTransport):
    """An httpx transport over an httpcore pool whose every connection is vetted."""

    def __init__(self, access: WebAccess, *, ssl_context: ssl.SSLContext | None = None) -> None:
        """`ssl_context`: how servers' certificates are verified (httpx's default: the
        system's trusted CAs, or `SSL_CERT_FILE`)."""
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context if ssl_context is not None else httpx.create_ssl_context(),
            network_backend=VettedBackend(access),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _httpx_errors():
            response = await self._pool.handle_async_request(core)
        assert isinstance(response.stream, AsyncIterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


class _Body(httpx.AsyncByteStream):
    def __init__(self, stream: AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _httpx_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            await close()
