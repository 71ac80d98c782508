"""httpx plumbing shared by the provider adapters: the border where httpx ends.

Everything here exists so that nothing above `tiller.model` ever sees an httpx type:

- `translate_errors` turns httpx exceptions into the most specific `ModelError`, chained
  with `from` (timeouts → `ModelTimeout`, transport failures → `ModelConnectionError`);
- `open_event_stream` sends the request, turns an error status into `ModelHTTPError` (or
  `ContextOverflow`) carrying the provider's own message and `Retry-After` advice, and
  yields the body as parsed server-sent events;
- `iter_sse` parses the event stream itself. httpx's `aiter_lines` is not used because it
  splits on every `str.splitlines` boundary (U+2028, U+0085, form feed, ...), which may
  legally appear unescaped inside a JSON string; SSE lines end only at CR, LF or CRLF;
- `error_from_payload` builds the same errors from an error object that arrives inside a
  stream, so both paths agree on statuses, retryability and context-overflow detection.
"""

from __future__ import annotations

import math
import re
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from http import HTTPStatus
from types import TracebackType
from typing import Self

import httpx
import orjson

from ..errors import UsageError
from ._errors import (
    ContextOverflow,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelProtocolError,
    ModelTimeout,
)

__all__ = [
    "HttpModel",
    "missing_key_message",
    "ServerSentEvent",
    "error_from_payload",
    "error_from_response",
    "is_context_overflow",
    "iter_sse",
    "open_event_stream",
    "parse_retry_after",
    "translate_errors",
]

#: How much of an error body is kept on the exception (`ModelHTTPError.body`).
_MAX_ERROR_BODY = 64 * 1024
#: How much of a non-JSON error body (an HTML page from a proxy, say) becomes the message.
_MAX_ERROR_MESSAGE = 500

#: Error `type`/`code` words that name a status, for errors that arrive without one
#: (inside a stream): Anthropic's error types and OpenAI's, plus common compat spellings.
_STATUS_BY_ERROR_TYPE = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "api_error": 500,
    "server_error": 500,
    "internal_server_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}

#: How providers say "the prompt does not fit the context window". Codes and types are
#: matched exactly; messages by these patterns (OpenAI, Anthropic, vLLM, Ollama, llama.cpp,
#: TGI, DeepSeek, Mistral, Gemini's compat layer).
_OVERFLOW_CODES = frozenset(
    {"context_length_exceeded", "exceed_context_size_error", "context_window_exceeded"}
)
_OVERFLOW_MESSAGE = re.compile(
    "|".join(
        [
            r"context[_ ]length[_ ]exceeded",
            r"maximum context length",
            r"prompt is too long",
            r"exceeds? (?:the |your )?(?:model'?s? )?(?:maximum |available )?"
            r"context (?:length|window|size|limit)",
            r"exceed context limit",
            r"context window (?:is |was )?exceeded",
            r"reduce the length of the (?:messages|prompt|input)",
            r"`inputs` (?:tokens \+ `max_new_tokens` )?must (?:have less than|be <=)",
            r"input token count .* exceeds the maximum",
        ]
    ),
    re.IGNORECASE,
)


@dataclass(slots=True, frozen=True)
class ServerSentEvent:
    """One dispatched server-sent event: its type (`message` unless named) and data."""

    data: str
    event: str = "message"
    id: str | None = None


# ---------------------------------------------------------------------------------------
# Errors


@contextmanager
def translate_errors(*, provider: str, url: str) -> Iterator[None]:
    """Turn httpx exceptions raised inside the block into the most specific `ModelError`.

    Timeouts are checked before other transport errors because httpx makes them a kind
    of `TransportError`; only the timeout class says "trying again may work later".
    """
    try:
        yield
    except httpx.TimeoutException as exc:
        raise ModelTimeout(
            f"{provider}: no answer from {url} in time ({_describe(exc)})", provider=provider
        ) from exc
    except (httpx.UnsupportedProtocol, httpx.LocalProtocolError) as exc:
        # Our side is wrong (a base_url without http(s)://, a header httpx cannot send):
        # the same request will fail the same way, so it is not retryable.
        raise ModelConnectionError(
            f"{provider}: cannot send the request to {url}: {_describe(exc)}; "
            "check base_url and extra_headers",
            retryable=False,
            provider=provider,
        ) from exc
    except httpx.ConnectError as exc:
        raise ModelConnectionError(
            f"{provider}: could not connect to {url}: {_describe(exc)}; "
            "is the server running and base_url right?",
            provider=provider,
        ) from exc
    except httpx.TransportError as exc:
        raise ModelConnectionError(
            f"{provider}: the connection to {url} failed or dropped: {_describe(exc)}",
            provider=provider,
        ) from exc
    except httpx.DecodingError as exc:
        raise ModelProtocolError(
            f"{provider}: the response from {url} could not be decoded: {_describe(exc)}",
            provider=provider,
        ) from exc
    except httpx.InvalidURL as exc:
        raise ModelError(
            f"{provider}: {url!r} is not a valid URL: {_describe(exc)}; check base_url",
            retryable=False,
            provider=provider,
        ) from exc


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def parse_retry_after(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """The provider's advice on when to try again, in seconds, or None if it gave none.

    `retry-after-ms` (OpenAI, Azure) is more precise and wins; `Retry-After` may be
    delta-seconds or an HTTP-date (RFC 9110 §10.2.3), which is measured from `now`.
    A date in the past means "now" (0.0). Garbage is ignored rather than raised: the
    advice is optional, the error it rides on is what matters.
    """
    milliseconds = _non_negative_float(headers.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000.0
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _non_negative_float(value)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; be lenient about a missing zone
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _non_negative_float(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def is_context_overflow(message: str, *, code: object = None, kind: object = None) -> bool:
    """Whether a provider's error says the prompt is longer than the context window.

    Providers agree on no code, so this reads the message too; the patterns are narrow
    enough that a rate limit ("tokens per minute") or a bad parameter does not match.
    """
    if code in _OVERFLOW_CODES or kind in _OVERFLOW_CODES:
        return True
    return _OVERFLOW_MESSAGE.search(message) is not None


#: Credentials as they appear in text a server may echo back (a proxy's error page that
#: prints the request's headers): a bearer token, an OpenAI- or Anthropic-style key.
_CREDENTIAL = re.compile(r"(?i)(bearer\s+)\S+|\bsk-[A-Za-z0-9_-]{8,}")


def without_credentials(text: str, secrets: Sequence[str] = ()) -> str:
    """`text` with the request's own `secrets` and anything shaped like a credential
    replaced: an error message travels to logs, retry notices, the event stream and
    served clients, and must never carry the key the request was sent with."""
    for secret in secrets:
        if len(secret) >= 8:  # a short value would blank out ordinary words
            text = text.replace(secret, "[redacted]")
    return _CREDENTIAL.sub(lambda m: f"{m.group(1) or ''}[redacted]", text)


def credentials_of(headers: Mapping[str, str]) -> tuple[str, ...]:
    """The secret values among a request's headers (its key, with or without `Bearer`)."""
    found: list[str] = []
    for name, value in headers.items():
        if name.lower() in ("authorization", "x-api-key", "api-key"):
            found.append(value)
            scheme, _, token = value.partition(" ")
            if token and scheme.lower() == "bearer":
                found.append(token)
    return tuple(found)


def error_from_response(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    provider: str,
    secrets: Sequence[str] = (),
) -> ModelHTTPError:
    """The error for an HTTP error response, with the provider's message when it sent one;
    the request's `secrets` (and anything shaped like a key) are never in it.

    A 400-class answer whose message says the prompt is too long becomes `ContextOverflow`,
    so the loop can compact and try again instead of failing the run.
    """
    text = without_credentials(body[:_MAX_ERROR_BODY].decode("utf-8", "replace"), secrets)
    message, code, kind = _error_fields(body)
    if message is None:
        message = " ".join(text.split())[:_MAX_ERROR_MESSAGE] or _reason(status)
    else:
        message = without_credentials(message, secrets)
    return _make_error(
        status,
        message,
        code=code,
        kind=kind,
        retry_after=parse_retry_after(headers),
        provider=provider,
        body=text,
    )


def error_from_payload(
    error: object, *, provider: str, status: int | None = None
) -> ModelHTTPError:
    """The error for an error object that arrived inside a stream (no HTTP status then).

    The status is taken from `status`, else from a numeric `code`, else from the error's
    type (`overloaded_error` → 529, `rate_limit_error` → 429, ...), else 500: a provider
    that fails after the stream began has almost always failed on its own side.
    """
    message, code, kind = _fields_of(error)
    if message is None:
        message = str(error) if error else "the provider reported an error"
    if status is None:
        status = _status_of(code, kind)
    body = orjson.dumps(error).decode() if isinstance(error, dict | list) else str(error)
    return _make_error(
        status, message, code=code, kind=kind, retry_after=None, provider=provider, body=body
    )


def _make_error(
    status: int,
    message: str,
    *,
    code: object,
    kind: object,
    retry_after: float | None,
    provider: str,
    body: str,
) -> ModelHTTPError:
    if status in (400, 413, 422) and is_context_overflow(message, code=code, kind=kind):
        overflow = ContextOverflow(message, provider=provider, status=status)
        overflow.body = body
        return overflow
    return ModelHTTPError(status, message, retry_after=retry_after, provider=provider, body=body)


def _error_fields(body: bytes) -> tuple[str | None, object, object]:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None, None
    return _fields_of(payload)


def _fields_of(payload: object) -> tuple[str | None, object, object]:
    """`(message, code, type)` from the error shapes in the wild.

    `{"error": {"message", "code", "type"}}` (OpenAI, vLLM, llama.cpp, Ollama's compat
    layer), `{"type": "error", "error": {"type", "message"}}` (Anthropic),
    `{"error": "text"}` (Ollama's native API), `{"object": "error", "message": ...}`
    (older vLLM), and the bare inner object when it arrives inside a stream.
    """
    if not isinstance(payload, dict):
        return (payload if isinstance(payload, str) and payload else None), None, None
    inner = payload.get("error")
    if isinstance(inner, str) and inner:
        return inner, payload.get("code"), payload.get("type")
    if isinstance(inner, dict):
        payload = inner
    message = payload.get("message")
    if not isinstance(message, str) or not message:
        detail = payload.get("detail")  # FastAPI-style servers
        message = detail if isinstance(detail, str) and detail else None
    kind = payload.get("type")
    return message, payload.get("code"), None if kind == "error" else kind


def _status_of(code: object, kind: object) -> int:
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599:
        return code
    for word in (kind, code):
        if isinstance(word, str) and word in _STATUS_BY_ERROR_TYPE:
            return _STATUS_BY_ERROR_TYPE[word]
    return 500


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "error"


# ---------------------------------------------------------------------------------------
# Streaming


@asynccontextmanager
async def open_event_stream(
    client: httpx.AsyncClient,
    url: str,
    *,
    body: bytes,
    headers: Mapping[str, str],
    http_timeout: httpx.Timeout,
    provider: str,
) -> AsyncIterator[AsyncIterator[ServerSentEvent]]:
    """POST `body` and yield the response as server-sent events.

    An error status is read in full and raised as `ModelHTTPError` before anything is
    yielded. Every httpx failure inside the block, including those that surface while the
    caller is iterating, is translated on the way out; the response is always closed.
    `http_timeout` is httpx's per-phase timeout (connecting, each read), not a deadline for
    the whole response: callers bound that with `asyncio.timeout`.
    """
    with translate_errors(provider=provider, url=url):
        async with client.stream(
            "POST", url, content=body, headers=headers, timeout=http_timeout
        ) as response:
            if not response.is_success:
                raw = await response.aread()
                raise error_from_response(
                    response.status_code,
                    response.headers,
                    raw,
                    provider=provider,
                    secrets=credentials_of(headers),
                )
            content_type = response.headers.get("content-type", "")
            if "html" in content_type:
                # A web page, not an API: a base_url that points at a site, a proxy's
                # login page, a dashboard. Read as a stream it would end "dropped".
                raise ModelProtocolError(
                    f"{provider}: {url} answered with an HTML page ({content_type}), not an "
                    "event stream: is the base URL right? (an OpenAI-compatible one usually "
                    "ends in /v1)",
                    provider=provider,
                )
            if "json" in content_type:
                # A proxy or server that ignored `stream: true`, or reported an error with
                # a success status: neither is an event stream we can read.
                raw = await response.aread()
                message, _, _ = _error_fields(raw)
                raise ModelProtocolError(
                    f"{provider}: expected an event stream from {url} but got JSON"
                    + (f": {message}" if message else " (does the server support stream: true?)"),
                    provider=provider,
                )
            events = iter_sse(response.aiter_bytes())
            try:
                yield events
            finally:
                await events.aclose()


_EOL = re.compile(rb"\r\n|\r|\n")


async def _iter_lines(chunks: AsyncIterable[bytes]) -> AsyncGenerator[str, None]:
    """Lines of an event stream, split only at CR, LF and CRLF as the SSE spec says.

    Splitting bytes is safe because no UTF-8 multi-byte sequence contains CR or LF. A CR
    at the end of a chunk is held back: its LF may be the next chunk's first byte. An
    unterminated last line is dropped, as the spec drops an undispatched event.
    """
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        start = 0
        for match in _EOL.finditer(buffer):
            if match.end() == len(buffer) and match.group() == b"\r":
                break
            yield buffer[start : match.start()].decode("utf-8", "replace")
            start = match.end()
        buffer = buffer[start:]
    if buffer.endswith(b"\r"):
        yield buffer[:-1].decode("utf-8", "replace")


async def iter_sse(chunks: AsyncIterable[bytes]) -> AsyncGenerator[ServerSentEvent, None]:
    """Parse an event stream (WHATWG HTML, "Server-sent events") from raw body chunks.

    Comments (`:` lines, used as keep-alives) are skipped; several `data:` lines join with
    newlines; an event is dispatched at a blank line and only if it has data.
    """
    data: list[str] = []
    event = ""
    last_id: str | None = None
    first = True
    async for line in _iter_lines(chunks):
        if first:
            first = False
            line = line.removeprefix("\ufeff")
        if not line:
            if data:
                yield ServerSentEvent("\n".join(data), event or "message", last_id)
            data = []
            event = ""
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id" and "\0" not in value:
            last_id = value


def missing_key_message(
    provider: str, variable: str, *, needed: bool, local_hint: str
) -> str | None:
    """What to say when a provider that needs a key has none (`needed`), else None."""
    if not needed:
        return None
    return f"{provider}: no API key: set {variable} (or pass api_key=); {local_hint}"


class HttpModel:
    """What both HTTP adapters share: their client, timeout, headers, and closed state.

    The client is made here unless the caller lends one, which then stays the caller's to
    close. `timeout` bounds connecting and each wait for bytes, also on a lent client.
    Extra headers are lower-cased, so an `Authorization` given there replaces the
    adapter's own instead of doubling it.
    """

    provider: str
    name: str

    def __init__(
        self,
        *,
        url: str,
        headers: Mapping[str, str],
        client: httpx.AsyncClient | None,
        timeout: float,
        extra_headers: Mapping[str, str] | None,
        missing_key: str | None = None,
    ) -> None:
        self._url = url
        #: Why no request can succeed: the provider needs a key and none was found (the
        #: adapter says which variable to set). Raised at the first call, not here, so
        #: an agent can be defined, listed and tested before the key is set.
        self._missing_key = missing_key
        self._timeout = httpx.Timeout(timeout)
        self._owns_client = client is None
        self._client = client if client is not None else httpx.AsyncClient(timeout=self._timeout)
        self._closed = False
        self._headers = {
            **headers,
            **{name.lower(): value for name, value in (extra_headers or {}).items()},
        }

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if this model made it; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owns_client:
            await self._client.aclose()

    def _post(self, body: bytes) -> AbstractAsyncContextManager[AsyncIterator[ServerSentEvent]]:
        """Open the response to `body` as server-sent events (see `open_event_stream`)."""
        if self._closed:
            raise UsageError(f"{self!r} is closed; make a new model to send more requests")
        if self._missing_key is not None:
            # Before connecting: without a key the provider can only refuse, and offline
            # the failure would read as a DNS error ("Name or service not known").
            raise ModelError(self._missing_key, retryable=False, provider=self.provider)
        return open_event_stream(
            self._client,
            self._url,
            body=body,
            headers=self._headers,
            http_timeout=self._timeout,
            provider=self.provider,
        )
