"""Small HTTP helpers the handlers share: JSON errors, bodies with a limit, `Accept`."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

__all__ = [
    "SSE_HEADERS",
    "RunStreamResponse",
    "accepts_sse",
    "error",
    "is_json",
    "issues",
    "read_body",
]

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def error(
    status: int, message: str, *, details: list[dict[str, Any]] | None = None
) -> JSONResponse:
    """`{"error": message}` (and `details`), with `status`."""
    body: dict[str, Any] = {"error": message}
    if details:
        body["details"] = details
    return JSONResponse(body, status_code=status)


def issues(exc: ValidationError) -> list[dict[str, Any]]:
    """A validation error's first issues, as `{loc, msg}`."""
    return [
        {"loc": ".".join(str(p) for p in issue["loc"]), "msg": issue["msg"]}
        for issue in exc.errors()[:20]
    ]


def is_json(request: Request) -> bool:
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def accepts_sse(accept: str) -> bool:
    """Whether an `Accept` header admits `text/event-stream` (with a q above zero)."""
    for part in accept.split(","):
        media, *params = (piece.strip() for piece in part.split(";"))
        if media.lower() not in ("text/event-stream", "text/*", "*/*"):
            continue
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if quality > 0:
            return True
    return False


async def read_body(request: Request, limit: int) -> bytes | None:
    """The body, or None if it is over `limit` bytes (read no further than that, whether
    the client declared its length or sent it in chunks)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


class RunStreamResponse(StreamingResponse):
    """An SSE response that runs `on_close` however it ends: the client read it all, left
    midway, or left before the first byte (when the body never even starts)."""

    def __init__(self, content: Any, *, on_close: Any) -> None:
        super().__init__(content, media_type="text/event-stream", headers=SSE_HEADERS)
        self._on_close = on_close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()
