"""Who may call the server: bearer-token auth, and where there is none, loopback only.

One ASGI middleware in front of every route, so no handler can forget it. The console's
static files are public (the page asks for the token itself); everything else needs
`Authorization: Bearer <token>`. A server with no token (allowed only on a loopback
address) still refuses requests whose `Host` is not a loopback name: without that, any web
page the user visits could reach it through DNS rebinding and approve its own actions.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.responses import JSONResponse

__all__ = ["Guard", "LOOPBACK_HOSTS"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
#: Paths anyone may fetch: the console's page and its static files.
_PUBLIC_PREFIX = "/console/"


class Guard:
    """ASGI middleware: the bearer token, or (with none) loopback `Host` names only."""

    def __init__(self, app: App, *, token: str | None) -> None:
        self.app = app
        self._token = token.encode() if token is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets here: the connection is refused
        if scope["method"] == "OPTIONS" and _is_preflight(scope):
            await self.app(scope, receive, send)  # a CORS preflight carries no token
            return
        refusal = self._refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, message = refusal
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        await JSONResponse({"error": message}, status_code=status, headers=headers)(
            scope, receive, send
        )

    def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        headers = {key.decode("latin-1"): value for key, value in scope["headers"]}
        if self._token is None:
            if _host_name(headers.get("host", b"").decode("latin-1")) not in LOOPBACK_HOSTS:
                return 421, "this server has no token and answers loopback addresses only"
            return None
        path = scope["path"]
        if scope["method"] in ("GET", "HEAD") and (path == "/" or path.startswith(_PUBLIC_PREFIX)):
            return None
        scheme, _, given = headers.get("authorization", b"").partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self._token):
            return None
        return 401, "missing or wrong bearer token: send `Authorization: Bearer <token>`"


def _host_name(host: str) -> str:
    """The name in a `Host` header, without its port (`[::1]:8000` -> `[::1]`)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.split(":", 1)[0]


def _is_preflight(scope: Scope) -> bool:
    names = {key.lower() for key, _ in scope["headers"]}
    return b"origin" in names and b"access-control-request-method" in names
