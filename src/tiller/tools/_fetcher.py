"""`Fetcher`: one HTTP GET within a step's web byte budget, and `Fetched`, its result.

Every byte a fetch accepts is charged, chunk by chunk as it arrives, to the step's shared
`WebBudget` through a `BodyMeter`: parallel fetches of one step cannot download more than
its limit together, and error bodies and retries are paid for like any other body. A body
whose size is announced is reserved when its headers arrive, so parallel fetches are
served in arrival order: those that fit complete, one that would cross the limit fails
before reading its body. A body
is also capped (the budget's `body_limit`, or the caller's smaller `max_bytes`); a longer
one is cut and marked `truncated`.

The fetcher knows nothing of tools (the `web_fetch` tool renders its result): it takes a
budget, the run's `WebAccess` (where it may connect), an optional
`httpx.AsyncBaseTransport` (borrowed, never closed) and an optional `Progress`. Without a
transport it uses a `VettedTransport`, which resolves each host once, refuses private,
loopback, link-local and metadata addresses and this machine's own (unless `WebAccess`
allows them), and connects to the vetted address, so a DNS answer cannot change between
the check and the connection. Its client has `trust_env=False`: no `HTTP(S)_PROXY` (a
proxy would make the connection the check vetted) and no `.netrc` credentials sent to
hosts the model chose. A transport given by the program is its author's choice of how to
connect: then only hosts that spell an address, and `localhost` names, are vetted (the
transport resolves other names). What it does, in order:

- only `http` and `https` URLs, including every redirect's target;
- every hop's destination vetted by `WebAccess` (`PrivateDestination`, a `ToolError`);
- redirects followed by hand, at most `MAX_REDIRECTS`, so each hop is checked (a redirect's
  body is not read: closing it costs nothing from the budget);
- one retry, after a short backoff (longer if the server's `Retry-After` says so, within
  `MAX_RETRY_DELAY_SECONDS`), on a connection failure, a 5xx or a 429;
- a 2xx body of a type a model cannot read (an image, a PDF) is not downloaded at all: its
  type and announced size are enough; a body without a useful type is sniffed, and reading
  stops early if it starts like binary data; an error body is read only up to
  `ERROR_PREVIEW_BYTES`, enough to show why;
- progress: a status line per request and byte counts as the body arrives (throttled).

Failures the model can act on are `ToolError`s, written for it; running out of the step's
budget is `WebBudgetExceeded`. Cancellation needs nothing special: the download is
ordinary `await`s, so a cancel scope around the call interrupts it, and the `async with`
blocks close the response (dropping the connection) and the client on the way out.
"""

from __future__ import annotations

import asyncio
import codecs
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Final, Literal

import httpx

from ._progress import Progress
from ._tool import ToolError
from ._vetted_network import VettedTransport
from ._web_access import PrivateDestination, WebAccess, port_of
from ._web_budget import BodyMeter, WebBudget, WebBudgetExceeded

__all__ = ["Fetched", "Fetcher", "Kind"]

#: How a body can be shown to a model: as text from HTML, as text, or not at all.
Kind = Literal["html", "text", "binary"]

#: Redirects followed before giving up.
MAX_REDIRECTS: Final = 5
#: Seconds to connect, and the longest silence while reading, before giving up.
TIMEOUT_SECONDS: Final = 30.0
#: Seconds to wait before the one retry, at least.
RETRY_BACKOFF_SECONDS: Final = 0.5
#: A server asking for a longer wait (`Retry-After`) is not retried: the call reports it.
MAX_RETRY_DELAY_SECONDS: Final = 10.0
#: Bytes of an error response's body read, to show the model why it failed.
ERROR_PREVIEW_BYTES: Final = 16 * 1024
#: Bytes read of a body without a useful type before deciding whether it is text.
SNIFF_BYTES: Final = 8192
#: The least time between two byte-count progress reports.
PROGRESS_INTERVAL_SECONDS: Final = 0.1

_HEADERS: Final = {
    "User-Agent": "tiller-web-fetch/0.1",
    "Accept": "text/html,application/xhtml+xml,text/*;q=0.9,application/json;q=0.9,"
    "application/xml;q=0.8,*/*;q=0.5",
}
_HTML_TYPES: Final = frozenset({"text/html", "application/xhtml+xml"})
_TEXT_TYPES: Final = frozenset(
    {
        "application/ecmascript",
        "application/javascript",
        "application/json",
        "application/sql",
        "application/toml",
        "application/x-javascript",
        "application/x-ndjson",
        "application/x-sh",
        "application/x-yaml",
        "application/xml",
        "application/yaml",
    }
)
#: Types that say nothing about the content: the body is sniffed.
_UNTYPED: Final = frozenset({"application/octet-stream", "binary/octet-stream"})
_RETRY_STATUSES: Final = frozenset({429})
# Failures of the connection itself, worth one more try; timeouts are not (a second
# 30-second wait doubles the cost of a dead host).
_RETRYABLE: Final = (
    httpx.ConnectError,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)
_META_CHARSET: Final = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)
_BOMS: Final = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


# ── what a fetch returns ────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class Fetched:
    """One finished fetch: the last response's status and headers, and the body kept.

    - `url`: the URL asked for; `final_url`: the one that answered (after redirects);
      `redirects`: the URLs that redirected, in order.
    - `media_type`: the `Content-Type` without parameters, lowercased ("" when absent);
      `charset`: its `charset` parameter, if any.
    - `body`: the decoded (decompressed) bytes kept; `truncated`: the body went on past
      `cap`, its limit for this fetch.
    - `read`: whether the body was read at all (a 2xx binary body is not).
    - `length`: the `Content-Length` the server announced, if any.
    - `attempts`: 1, or 2 after a retry; `retry_after`: the server's `Retry-After` in
      seconds, if it sent one; `retry_refused`: it asked for a longer wait than a retry
      may take, so there was no retry.
    """

    url: str
    final_url: str
    status: int
    reason: str
    media_type: str
    charset: str | None
    body: bytes
    truncated: bool
    cap: int
    read: bool = True
    length: int | None = None
    attempts: int = 1
    redirects: tuple[str, ...] = ()
    retry_after: float | None = None
    retry_refused: bool = False

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def kind(self) -> Kind:
        """`html`, `text` or `binary`: how the body can be shown."""
        return _kind(self.media_type, self.body)

    def text(self) -> str:
        """The body decoded: a byte-order mark first, then the response's charset, then
        (for HTML) a `<meta charset>`, then UTF-8; undecodable bytes are replaced."""
        return _decode(self.body, self.charset, html=self.kind == "html")


class Fetcher:
    """Downloads one URL at a time within a `WebBudget`; see the module docstring.

    `access` says where it may connect (default: public addresses only). `transport` is
    borrowed (never closed); `None` uses a `VettedTransport` over `access`. `backoff` is
    the least wait before the retry, in seconds.
    """

    __slots__ = ("_access", "_backoff", "_budget", "_progress", "_timeout", "_transport")

    def __init__(
        self,
        budget: WebBudget,
        *,
        access: WebAccess | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        progress: Progress | None = None,
        timeout: float = TIMEOUT_SECONDS,
        backoff: float = RETRY_BACKOFF_SECONDS,
    ) -> None:
        self._budget = budget
        self._access = access if access is not None else WebAccess()
        self._transport = transport
        self._progress = progress
        self._timeout = timeout
        self._backoff = backoff

    @property
    def budget(self) -> WebBudget:
        return self._budget

    async def fetch(self, url: str, *, max_bytes: int | None = None) -> Fetched:
        """GET `url`, following redirects and retrying once, and keep its body.

        Raises `ToolError` for what the model can act on (a URL that is not http(s), a
        host that cannot be reached, too many redirects) and `WebBudgetExceeded` when the
        step's budget runs out, before the request or during it.
        """
        start = _checked_url(url)
        if self._budget.exhausted:
            raise WebBudgetExceeded(self._budget.limit)
        async with self._client() as client:
            try:
                first = await self._follow(client, start, max_bytes, attempt=1)
            except _RETRYABLE as exc:
                self._status(f"{_describe(exc, self._timeout)}; retrying in {self._backoff:g}s")
                await asyncio.sleep(self._backoff)
                return await self._retry(client, start, max_bytes)
            if first.ok or not _retryable_status(first.status):
                return first
            delay = self._backoff if first.retry_after is None else first.retry_after
            if delay > MAX_RETRY_DELAY_SECONDS:
                return replace(first, retry_refused=True)
            delay = max(delay, self._backoff)
            self._status(f"{first.status} {first.reason}; retrying in {delay:g}s")
            await asyncio.sleep(delay)
            return await self._retry(client, start, max_bytes)

    async def _retry(self, client: httpx.AsyncClient, start: httpx.URL, cap: int | None) -> Fetched:
        if self._budget.exhausted:  # spent meanwhile, by this body or a sibling call
            raise WebBudgetExceeded(self._budget.limit)
        try:
            return await self._follow(client, start, cap, attempt=2)
        except _RETRYABLE as exc:
            raise ToolError(
                f"could not fetch {start} (tried twice): {_describe(exc, self._timeout)}"
            ) from exc

    @asynccontextmanager
    async def _client(self) -> AsyncIterator[httpx.AsyncClient]:
        transport: httpx.AsyncBaseTransport = (
            _Borrowed(self._transport)
            if self._transport is not None
            else VettedTransport(self._access)
        )
        async with httpx.AsyncClient(
            transport=transport,
            timeout=httpx.Timeout(self._timeout),
            headers=_HEADERS,
            follow_redirects=False,
            trust_env=False,  # no env proxies, no .netrc: see the module docstring
        ) as client:
            yield client

    async def _follow(
        self, client: httpx.AsyncClient, start: httpx.URL, max_bytes: int | None, *, attempt: int
    ) -> Fetched:
        """One attempt: the request, its redirects, and the final response's body."""
        url = start
        redirects: list[str] = []
        while True:
            self._status(f"GET {url}" if attempt == 1 else f"GET {url} (retry)")
            try:
                await self._access.vet_literal(url.host, port_of(url.scheme, url.port))
                async with client.stream("GET", url) as response:
                    target = response.next_request
                    location = response.headers.get("location", "")
                    if target is None:
                        return await self._receive(response, start, redirects, max_bytes, attempt)
            except _RETRYABLE:
                raise
            except PrivateDestination as exc:
                if not redirects:
                    raise
                raise PrivateDestination(
                    exc.host, exc.address, exc.reason, via=redirects[-1]
                ) from None
            except httpx.HTTPError as exc:  # timeouts, a broken redirect, a bad proxy
                raise ToolError(f"could not fetch {url}: {_describe(exc, self._timeout)}") from exc
            if len(redirects) == MAX_REDIRECTS:
                chain = " -> ".join([*redirects, str(url)])
                raise ToolError(
                    f"too many redirects (more than {MAX_REDIRECTS}): {chain} -> "
                    f"{target.url}; fetch the last URL directly if it is the page you want"
                )
            if target.url.scheme not in ("http", "https"):
                raise ToolError(
                    f"{url} redirected to {location}, which web_fetch does not follow: "
                    "only http:// and https:// URLs can be fetched"
                )
            redirects.append(str(url))
            url = target.url
            self._status(f"redirected to {url}")

    async def _receive(
        self,
        response: httpx.Response,
        start: httpx.URL,
        redirects: list[str],
        max_bytes: int | None,
        attempt: int,
    ) -> Fetched:
        media_type, charset = _content_type(response.headers.get("content-type", ""))
        length = _content_length(response.headers)
        ok = 200 <= response.status_code < 300
        fetched = Fetched(
            url=str(start),
            final_url=str(response.url),
            status=response.status_code,
            reason=response.reason_phrase,
            media_type=media_type,
            charset=charset,
            body=b"",
            truncated=False,
            cap=0,
            read=False,
            length=length,
            attempts=attempt,
            redirects=tuple(redirects),
            retry_after=_retry_after(response.headers.get("retry-after", "")),
        )
        sniff = not media_type or media_type in _UNTYPED
        if ok and not sniff and _kind(media_type, b"") == "binary":
            return fetched  # the model cannot read it: do not spend the budget on it
        cap = max_bytes if ok else min(ERROR_PREVIEW_BYTES, max_bytes or ERROR_PREVIEW_BYTES)
        # An announced size is reserved whole before reading, so parallel fetches are
        # served in arrival order: a body that would cross the step's budget is refused
        # here, having cost nothing, and those that fit complete (see `WebBudget`).
        with BodyMeter(self._budget, cap, expected=length) as meter:
            body = await self._read(response, meter, sniff=sniff)
        if body is None:
            return replace(fetched, media_type=media_type or "application/octet-stream")
        return replace(fetched, body=body, truncated=meter.truncated, cap=meter.cap, read=True)

    async def _read(
        self, response: httpx.Response, meter: BodyMeter, *, sniff: bool
    ) -> bytes | None:
        """The body up to the meter's cap, each chunk charged as it is accepted.

        With `sniff` (no useful type), reading stops at `SNIFF_BYTES` if the start looks
        binary, and the answer is `None`: what was read is paid for, not kept.
        """
        encoded = response.headers.get("content-encoding", "identity").lower() != "identity"
        total = None if encoded else _content_length(response.headers)
        chunks: list[bytes] = []
        reported_at = float("-inf")
        sniffing = sniff
        async for chunk in response.aiter_bytes():
            part = meter.accept(chunk)
            if part:
                chunks.append(part)
                now = time.monotonic()
                if now - reported_at >= PROGRESS_INTERVAL_SECONDS:
                    reported_at = now
                    self._transferred(meter.received, total)
            if sniffing and meter.received >= SNIFF_BYTES:
                sniffing = False
                if _kind("", b"".join(chunks)) == "binary":
                    break
            if meter.truncated:
                break
        self._transferred(meter.received, total)
        body = b"".join(chunks)
        if sniff and _kind("", body) == "binary":
            return None
        return body

    def _status(self, message: str) -> None:
        if self._progress is not None:
            self._progress(message)

    def _transferred(self, done: int, total: int | None) -> None:
        if self._progress is not None:
            self._progress.transferred(done, total)


class _Borrowed(httpx.AsyncBaseTransport):
    """A transport lent by the run: used, never closed (other calls share it)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        """The lender closes it."""


# ── helpers ─────────────────────────────────────────────────────────────────────────


def _checked_url(url: str) -> httpx.URL:
    """`url` parsed, or a `ToolError` saying why it cannot be fetched."""
    text = url.strip()
    try:
        parsed = httpx.URL(text)
    except httpx.InvalidURL as exc:
        raise ToolError(f"{text!r} is not a valid URL: {exc}") from None
    if parsed.scheme not in ("http", "https"):
        scheme = f"{parsed.scheme}://" if parsed.scheme else "a URL without a scheme"
        hint = " To read a workspace file, use read_file." if parsed.scheme == "file" else ""
        raise ToolError(
            f"web_fetch fetches only http:// and https:// URLs, not {scheme} ({text!r}).{hint}"
        )
    if not parsed.host:
        raise ToolError(f"{text!r} has no host; give a full URL such as https://example.com/")
    return parsed


def _retryable_status(status: int) -> bool:
    return status >= 500 or status in _RETRY_STATUSES


def _retry_after(value: str) -> float | None:
    """A `Retry-After` in seconds; `None` when absent or an HTTP date (not honoured)."""
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _content_type(value: str) -> tuple[str, str | None]:
    """The media type (lowercased) and charset of a `Content-Type` header."""
    media, _, params = value.partition(";")
    charset = None
    for param in params.split(";"):
        name, _, raw = param.partition("=")
        if name.strip().lower() == "charset":
            charset = raw.strip().strip("\"'") or None
    return media.strip().lower(), charset


def _content_length(headers: httpx.Headers) -> int | None:
    try:
        length = int(headers.get("content-length", ""))
    except ValueError:
        return None
    return length if length >= 0 else None


def _kind(media_type: str, body: bytes) -> Kind:
    """`html`, `text` or `binary`. Without a useful type, the body decides: markup, then text
    that decodes as UTF-8 without NUL bytes, else binary."""
    if media_type in _HTML_TYPES:
        return "html"
    if (
        media_type.startswith("text/")
        or media_type in _TEXT_TYPES
        or media_type.endswith(("+json", "+xml"))
    ):
        return "text"
    if media_type and media_type not in _UNTYPED:
        return "binary"
    head = body[:1024].lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html")):
        return "html"
    if b"\x00" in body[:8192]:
        return "binary"
    try:
        body[:8192].decode("utf-8")
    except UnicodeDecodeError as exc:
        # A character cut at the sample's end is still text.
        return "text" if exc.start >= len(body[:8192]) - 3 else "binary"
    return "text"


def _decode(body: bytes, charset: str | None, *, html: bool) -> str:
    encoding = None
    for bom, name in _BOMS:
        if body.startswith(bom):
            encoding = name
            break
    if encoding is None:
        encoding = charset
    if encoding is None and html:
        found = _META_CHARSET.search(body[:4096])
        if found is not None:
            encoding = found.group(1).decode("ascii")
    try:
        return body.decode(encoding or "utf-8", errors="replace")
    except LookupError:  # an unknown charset, or one that is no text encoding ("base64")
        return body.decode("utf-8", errors="replace")


def _describe(exc: httpx.HTTPError, timeout: float) -> str:
    """An httpx error as a short reason the model can act on."""
    if isinstance(exc, httpx.ConnectTimeout):
        return f"connecting timed out after {timeout:g} s"
    if isinstance(exc, httpx.TimeoutException):
        return f"the server sent nothing for {timeout:g} s"
    if isinstance(exc, httpx.ConnectError):
        return f"could not connect ({exc or 'connection failed'})"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"the server broke the HTTP exchange ({exc})"
    if isinstance(exc, httpx.TooManyRedirects):
        return "too many redirects"
    detail = str(exc)
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
