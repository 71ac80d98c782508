"""What the web console learns from the server that serves it: `GET /console/settings.json`.

The page is static (no build step, no templating), so what differs from one server to the
next reaches it as JSON it fetches when it starts: whether the server wants a bearer token
(with `--no-auth` it does not, and the page hides its token field), and which scripts of the
app's own to import (`AppSettings.console_scripts`: tool renderers registered through
`window.tillerConsole.registerToolRenderer`). Both are public like the page itself: the
first is what a 401 would tell anyone anyway, and the scripts are the page's code.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from ._http import error

__all__ = ["ConsoleRoutes"]


class ConsoleRoutes:
    """The console's settings and the app's console scripts, under `/console/`."""

    def __init__(self, *, auth: bool, scripts: Sequence[str | Path]) -> None:
        self._auth = auth
        self._scripts = [Path(script).resolve() for script in scripts]

    def routes(self) -> list[Route]:
        # Before the static mount of /console: these paths are not files in its folder.
        return [
            Route("/console/settings.json", self.settings, methods=["GET"]),
            Route("/console/app/{index:int}/{name}", self.script, methods=["GET"]),
        ]

    def _address(self, index: int) -> str:
        # Relative to the page (the app may be mounted under a prefix).
        return f"console/app/{index}/{self._scripts[index].name}"

    async def settings(self, request: Request) -> Response:
        return JSONResponse(
            {
                "auth": "bearer" if self._auth else "none",
                "scripts": [self._address(i) for i in range(len(self._scripts))],
            },
            headers={"Cache-Control": "no-store"},
        )

    async def script(self, request: Request) -> Response:
        index = request.path_params["index"]
        if (
            not 0 <= index < len(self._scripts)
            or self._scripts[index].name != (request.path_params["name"])
        ):
            return error(404, "no such console script")
        return FileResponse(self._scripts[index], media_type="text/javascript")
