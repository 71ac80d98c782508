"""The AG-UI HTTP server: `create_app(agent, ...)` is a Starlette application.

- `POST /agui` (and `POST /`): a `RunAgentInput` in, the run's AG-UI events out as SSE.
  400 bad JSON or input, 415 not JSON, 413 too large, 406 `Accept` refuses SSE, 405 other
  methods; a run that fails still answers 200 and ends its stream with `RUN_ERROR`.
- `GET /runs`, `GET /runs/{id}`, `GET /runs/{id}/events?after=N`,
  `POST /runs/{id}/steer`, `POST /runs/{id}/cancel`: run control and reattach, from the
  store, so they reach a run on any process that shares it.
- `GET /`: the web console (static files, no build step).

Every endpoint but the console needs `Authorization: Bearer <token>` unless the app was
made with `token=None` (the CLI allows that only on a loopback address).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
from ag_ui.core import RunAgentInput
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import UsageError
from ..loop import Agent, RunContext, RunOptions
from ..store import Bus, EventLog, NotFound, open_bus
from ._input import InvalidRunInput
from ._run_view import run_summary
from ._runner import Runner, ServeSettings
from ._sse import sse_frames

__all__ = ["DEFAULT_MAX_BODY", "create_app"]

_logger = logging.getLogger(__name__)

#: The largest request body accepted (bytes): a long thread with attachments fits.
DEFAULT_MAX_BODY = 8 * 1024 * 1024
_CONSOLE = Path(__file__).parent / "console"
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_TERMINAL_TYPES = frozenset({"RUN_FINISHED", "RUN_ERROR"})
#: How often a run on another process is looked for in the store's event log (seconds).
_LOG_POLL = 0.1
#: How long a run that has ended may take to write its last events to the log.
_LOG_SETTLE = 2.0


def create_app(
    agent: Agent,
    *,
    store: str | Bus,
    token: str | None,
    workspace: str | Path = ".",
    namespace: str = "",
    cors_origins: Sequence[str] = (),
    detach: bool = False,
    keep_alive: float = 15.0,
    max_body: int = DEFAULT_MAX_BODY,
    interrupt_ttl: float | None = None,
    options: RunOptions | None = None,
    configure: Callable[[RunContext], RunContext] | None = None,
) -> Starlette:
    """Serve `agent` over AG-UI. `store` is a store URL (opened with the app, closed with
    it; `namespace` keeps the users of one store apart) or an open `Bus`; `token` the
    bearer token every API call must carry (None: no auth, for a loopback-only server);
    `workspace` every run's jail."""
    if token is not None and not token.strip():
        raise UsageError("the bearer token is empty; pass a real token, or None for no auth")
    settings = ServeSettings(
        workspace=Path(workspace).resolve(),
        detach=detach,
        interrupt_ttl=interrupt_ttl,
        options=options or RunOptions(),
        configure=configure,
    )
    server = _Server(
        agent, store, token, settings, keep_alive=keep_alive, max_body=max_body, namespace=namespace
    )
    routes = [
        Route("/", server.root, methods=["GET", "POST"]),
        Route("/agui", server.agui, methods=["POST"]),
        Route("/runs", server.list_runs, methods=["GET"]),
        Route("/runs/{run_id}", server.get_run, methods=["GET"]),
        Route("/runs/{run_id}/events", server.run_events, methods=["GET"]),
        Route("/runs/{run_id}/steer", server.steer, methods=["POST"]),
        Route("/runs/{run_id}/cancel", server.cancel, methods=["POST"]),
        Mount("/console", StaticFiles(directory=_CONSOLE, check_dir=False), name="console"),
    ]
    middleware = []
    if cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["GET", "POST", "OPTIONS"],
                allow_headers=["Authorization", "Content-Type", "Accept"],
            )
        )
    app = Starlette(routes=routes, middleware=middleware, lifespan=server.lifespan)
    app.state.tiller = server
    return app


class _Server:
    """The handlers, and what they share: the store and this process's runs."""

    def __init__(
        self,
        agent: Agent,
        store: str | Bus,
        token: str | None,
        settings: ServeSettings,
        *,
        keep_alive: float,
        max_body: int,
        namespace: str = "",
    ) -> None:
        self.agent = agent
        self.namespace = namespace
        self._store = store
        self.token = token
        self.settings = settings
        self.keep_alive = keep_alive
        self.max_body = max_body
        self._runner: Runner | None = None

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        owned = isinstance(self._store, str)
        if isinstance(self._store, str):
            bus = await open_bus(self._store, namespace=self.namespace)
        else:
            bus = self._store
        self._runner = Runner(self.agent, bus, self.settings)
        try:
            yield
        finally:
            await self._runner.aclose()
            if owned:
                await bus.aclose()

    @property
    def runner(self) -> Runner:
        if self._runner is None:
            raise RuntimeError("the app was not started (run it under an ASGI server)")
        return self._runner

    # ── guards ───────────────────────────────────────────────────────────────────

    def _denied(self, request: Request) -> Response | None:
        if self.token is None:
            return None
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), self.token):
            return None
        return _error(
            401,
            "missing or wrong bearer token: send `Authorization: Bearer <token>`",
            headers={"WWW-Authenticate": "Bearer"},
        )

    # ── AG-UI ────────────────────────────────────────────────────────────────────

    async def root(self, request: Request) -> Response:
        if request.method == "GET":
            return FileResponse(_CONSOLE / "index.html", media_type="text/html")
        return await self.agui(request)

    async def agui(self, request: Request) -> Response:
        denied = self._denied(request)
        if denied is not None:
            return denied
        accept = request.headers.get("accept", "")
        if accept and not _accepts_sse(accept):
            return _error(406, "this endpoint answers text/event-stream; accept it")
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/json" and not content_type.endswith("+json"):
            return _error(415, "send the RunAgentInput as application/json")
        body = await _read_body(request, self.max_body)
        if body is None:
            return _error(413, f"the request body is over {self.max_body} bytes")
        try:
            raw = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return _error(400, f"the body is not JSON: {exc}")
        try:
            run_input = RunAgentInput.model_validate(raw)
        except ValidationError as exc:
            return _error(400, "the body is not a valid RunAgentInput", details=_issues(exc))
        try:
            prepared = await self.runner.prepare(run_input)
        except InvalidRunInput as exc:
            return _error(400, str(exc))
        live = await self.runner.launch(prepared)

        async def body_frames() -> AsyncIterator[bytes | None]:
            try:
                async for frame in live.follow(0, idle=self.keep_alive):
                    yield frame
            finally:
                if not live.done and not live.detached:
                    # The client went away: this run stops (its own token, nothing shared).
                    live.cancel.cancel("the client disconnected")

        return StreamingResponse(
            sse_frames(body_frames()), media_type="text/event-stream", headers=_SSE_HEADERS
        )

    # ── run control and reattach ─────────────────────────────────────────────────

    async def list_runs(self, request: Request) -> Response:
        denied = self._denied(request)
        if denied is not None:
            return denied
        try:
            limit = max(1, min(500, int(request.query_params.get("limit", "100"))))
        except ValueError:
            return _error(400, "limit must be a number")
        runner = self.runner
        ids = await runner.checkpoints.run_ids()
        loaded = await asyncio.gather(*(_load(runner, run_id) for run_id in ids))
        found = [c for c in loaded if c is not None]
        found.sort(key=lambda c: c.revision, reverse=True)
        runs = [
            run_summary(c, live=_is_live(runner, c.state.run_id), brief=True) for c in found[:limit]
        ]
        return JSONResponse({"runs": runs})

    async def get_run(self, request: Request) -> Response:
        denied = self._denied(request)
        if denied is not None:
            return denied
        run_id = request.path_params["run_id"]
        runner = self.runner
        checkpoint = await _load(runner, run_id)
        if checkpoint is None:
            live = runner.live.get(run_id)
            if live is None:
                return _error(404, f"no run {run_id!r} in this server's store")
            return JSONResponse(
                {"runId": run_id, "threadId": live.thread_id, "status": "starting", "live": True}
            )
        held = await runner.checkpoints.holder(run_id)
        summary = run_summary(checkpoint, live=_is_live(runner, run_id) or held is not None)
        return JSONResponse(summary)

    async def run_events(self, request: Request) -> Response:
        denied = self._denied(request)
        if denied is not None:
            return denied
        run_id = request.path_params["run_id"]
        try:
            after = max(0, int(request.query_params.get("after", "0")))
        except ValueError:
            return _error(400, "after must be a number (an event index)")
        runner = self.runner
        live = runner.live.get(run_id)
        if live is not None:
            frames = live.follow(after, idle=self.keep_alive)
        else:
            if await _load(runner, run_id) is None:
                return _error(404, f"no run {run_id!r} in this server's store")
            frames = self._follow_log(run_id, after)
        return StreamingResponse(
            sse_frames(frames, first_index=after),
            media_type="text/event-stream",
            headers=_SSE_HEADERS,
        )

    async def _follow_log(self, run_id: str, after: int) -> AsyncIterator[bytes | None]:
        """The run's stored events from `after`, then new ones as its process writes them,
        until its terminal event (a run on another process, or one that ended)."""
        runner = self.runner
        log = EventLog(runner.bus)
        loop = asyncio.get_running_loop()
        index = after
        last_event = last_frame = loop.time()
        while True:
            events = await log.read(run_id, after=index)
            for event in events:
                index += 1
                yield orjson.dumps(event)
                if event.get("type") in _TERMINAL_TYPES:
                    return
            now = loop.time()
            if events:
                last_event = last_frame = now
                continue
            if now - last_event > _LOG_SETTLE:
                checkpoint = await _load(runner, run_id)
                over = checkpoint is None or checkpoint.status in ("finished", "suspended")
                if over and await runner.checkpoints.holder(run_id) is None:
                    return  # ended, and its terminal event never reached the log
            if now - last_frame >= self.keep_alive:
                last_frame = now
                yield None
            await asyncio.sleep(_LOG_POLL)

    async def steer(self, request: Request) -> Response:
        denied = self._denied(request)
        if denied is not None:
            return denied
        run_id = request.path_params["run_id"]
        body = await _read_body(request, 64 * 1024)
        if body is None:
            return _error(413, "a steering message is at most 64 KiB")
        try:
            text = orjson.loads(body).get("text")
        except (orjson.JSONDecodeError, AttributeError):
            return _error(400, 'send {"text": "..."} as JSON')
        if not isinstance(text, str) or not text.strip():
            return _error(400, 'send {"text": "..."} with some text')
        ended = await self._ended(run_id)
        if ended is not None:
            return ended
        await self.runner.control.steer(run_id, text)
        return JSONResponse({"queued": True}, status_code=202)

    async def cancel(self, request: Request) -> Response:
        denied = self._denied(request)
        if denied is not None:
            return denied
        run_id = request.path_params["run_id"]
        ended = await self._ended(run_id)
        if ended is not None:
            return ended
        await self.runner.control.request_cancel(run_id, "cancelled from the API")
        live = self.runner.live.get(run_id)
        if live is not None:
            live.cancel.cancel("cancelled from the API")  # here: at once, not at the next poll
        return JSONResponse({"cancelling": True}, status_code=202)

    async def _ended(self, run_id: str) -> Response | None:
        """404 for an unknown run, 409 for one that is over; None while it runs."""
        runner = self.runner
        live = runner.live.get(run_id)
        if live is not None:
            return _error(409, f"run {run_id!r} has ended") if live.done else None
        checkpoint = await _load(runner, run_id)
        if checkpoint is None:
            return _error(404, f"no run {run_id!r} in this server's store")
        if checkpoint.status in ("finished", "suspended"):
            return _error(409, f"run {run_id!r} is {checkpoint.status}; it takes no requests")
        return None


async def _load(runner: Runner, run_id: str) -> Any:
    try:
        return await runner.checkpoints.load(run_id)
    except NotFound:
        return None


def _is_live(runner: Runner, run_id: str) -> bool:
    live = runner.live.get(run_id)
    return live is not None and not live.done


def _accepts_sse(accept: str) -> bool:
    for part in accept.split(","):
        media, _, params = part.strip().partition(";")
        media = media.strip().lower()
        if media in ("text/event-stream", "text/*", "*/*") and "q=0" not in params.replace(
            " ", ""
        ).split(";"):
            return True
    return False


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The body, or None if it is over `limit` bytes (read no further than that)."""
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


def _issues(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": ".".join(str(p) for p in error["loc"]), "msg": error["msg"]}
        for error in exc.errors()[:20]
    ]


def _error(
    status: int,
    message: str,
    *,
    details: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {"error": message}
    if details:
        body["details"] = details
    return JSONResponse(body, status_code=status, headers=headers)
