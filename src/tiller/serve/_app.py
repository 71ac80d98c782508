"""The AG-UI HTTP server: `create_app(agent, ...)` is a Starlette application.

- `POST /agui` (and `POST /`): a `RunAgentInput` in, the run's AG-UI events out as SSE.
  400 bad JSON or input, 415 not JSON, 413 too large, 406 `Accept` refuses SSE, 405 other
  methods; a run that fails still answers 200 and ends its stream with `RUN_ERROR`.
- `/runs…`: run control and reattach (`_run_routes`), from the store, so they reach a run
  on any process that shares it.
- `GET /`: the web console (static files, no build step); `GET /console/settings.json`
  tells it whether a token is needed and which of the app's scripts to import (`_console`).

Every endpoint but the console needs `Authorization: Bearer <token>` unless the app was
made with `token=None`, and then it answers loopback `Host` names only (`_guard`).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Unpack

import orjson
from ag_ui.core import RunAgentInput
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import UsageError
from ..loop import Agent, RunOptions
from ..pinned_policy import PinnedPolicy
from ..store import open_bus
from ..tools.mcp import open_mcp_tools
from ._console import ConsoleRoutes
from ._fleet_runs import FleetRuns
from ._guard import Guard
from ._http import RunStreamResponse, accepts_sse, error, is_json, issues, read_body
from ._input import InvalidRunInput
from ._run_routes import RunRoutes
from ._runner import Runner, ServeSettings
from ._settings import DEFAULT_MAX_BODY, AppSettings, LegacyAppArgs
from ._sse import sse_frames

__all__ = ["DEFAULT_MAX_BODY", "AppSettings", "create_app"]

_CONSOLE = Path(__file__).parent / "console"


def create_app(
    agent: Agent,
    settings: AppSettings | None = None,
    /,
    **legacy: Unpack[LegacyAppArgs],
) -> Starlette:
    """Serve `agent` over AG-UI, as `settings` says (`AppSettings`: the store, the bearer
    token, the workspace, ...). The policy new runs start with is read once, now (unless
    `settings.policy` gives it), and never re-read per request.

    `create_app(agent, store=..., token=..., ...)`, the settings' fields as keywords, is
    the old form: it works for one release and warns."""
    if legacy:
        if settings is not None:
            raise UsageError("pass AppSettings or the old keyword arguments, not both")
        warnings.warn(
            "create_app(agent, store=..., token=..., ...) is deprecated; pass "
            "create_app(agent, AppSettings(store=..., token=..., ...)) (tiller.serve)",
            DeprecationWarning,
            stacklevel=2,
        )
        settings = _from_legacy(legacy)
    if settings is None:
        raise UsageError("create_app(agent, AppSettings(store=..., token=...)): settings missing")
    server = _Server(agent, settings)
    runs = RunRoutes(lambda: server.runner, keep_alive=settings.keep_alive)
    routes = [
        Route("/", server.root, methods=["GET", "POST"]),
        Route("/agui", server.agui, methods=["POST"]),
        *runs.routes(),
        *ConsoleRoutes(auth=settings.token is not None, scripts=settings.console_scripts).routes(),
        Mount("/console", StaticFiles(directory=_CONSOLE, check_dir=False), name="console"),
    ]
    middleware = [Middleware(Guard, token=settings.token)]
    if settings.cors_origins:
        # Outside the guard: a preflight carries no token, and its answer must still come.
        middleware.insert(
            0,
            Middleware(
                CORSMiddleware,
                allow_origins=list(settings.cors_origins),
                allow_methods=["GET", "POST", "OPTIONS"],
                allow_headers=["Authorization", "Content-Type", "Accept", "Last-Event-ID"],
            ),
        )
    app = Starlette(routes=routes, middleware=middleware, lifespan=server.lifespan)
    app.state.tiller = server
    return app


class _Server:
    """The AG-UI handlers, and what every handler shares: the store and this process's
    runs (the `Runner`, made when the app starts)."""

    def __init__(self, agent: Agent, app: AppSettings) -> None:
        root = Path(app.workspace).resolve()
        self.agent = agent
        self._store = app.store
        self.namespace = app.namespace
        self.settings = ServeSettings(
            workspace=root,
            detach=app.detach,
            interrupt_ttl=app.interrupt_ttl,
            options=app.options or RunOptions(),
            configure=app.configure,
            policy=app.policy if app.policy is not None else PinnedPolicy.read(root),
            transformers=app.transformers,
            mailbox=app.mailbox,
        )
        self.keep_alive = app.keep_alive
        self.max_body = app.max_body
        self._app = app
        self._runner: Runner | None = None
        #: With `AppSettings(fleet_queue=...)`: where each request's run goes instead.
        self.fleet: FleetRuns | None = None

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        if isinstance(self._store, str):
            bus = await open_bus(self._store, namespace=self.namespace)
        else:
            bus = self._store
        try:
            async with contextlib.AsyncExitStack() as stack:
                await self._open_mcp(stack)
                self._runner = Runner(self.agent, bus, self.settings)
                if self._app.fleet_queue is not None and self._app.fleet_agent is not None:
                    self.fleet = FleetRuns(
                        bus,
                        agent=self._app.fleet_agent,
                        model=self._app.fleet_model,
                        queue=self._app.fleet_queue,
                        workspace=self.settings.workspace,
                        detach=self.settings.detach,
                        keep_alive=self.keep_alive,
                    )
                try:
                    yield
                finally:
                    await self._runner.aclose()
                    if self.fleet is not None:
                        await self.fleet.aclose()
        finally:
            if isinstance(self._store, str):
                await bus.aclose()

    async def _open_mcp(self, stack: contextlib.AsyncExitStack) -> None:
        """Start the MCP servers of the server's pinned policy, for as long as the app
        runs, and give their tools to the agent (so a served run, or a served resume
        of an approved MCP call, finds them)."""
        policy = self.settings.policy
        if not policy.config.mcp:
            return
        policy.check_mcp_files()
        for each in await stack.enter_async_context(open_mcp_tools(policy.config.mcp)):
            if each.name not in self.agent.registry:
                self.agent.registry.add(each)

    @property
    def runner(self) -> Runner:
        if self._runner is None:
            raise RuntimeError("the app was not started (run it under an ASGI server)")
        return self._runner

    @property
    def live_runner(self) -> Runner | None:
        """The runner once the app has started (None before), for the server's shutdown."""
        return self._runner

    async def root(self, request: Request) -> Response:
        # Only a POST is a run: GET and HEAD (public, for the console) get the page.
        if request.method == "POST":
            return await self.agui(request)
        return FileResponse(_CONSOLE / "index.html", media_type="text/html")

    async def agui(self, request: Request) -> Response:
        accept = request.headers.get("accept", "")
        if accept and not accepts_sse(accept):
            return error(406, "this endpoint answers text/event-stream; accept it")
        if not is_json(request):
            return error(415, "send the RunAgentInput as application/json")
        body = await read_body(request, self.max_body)
        if body is None:
            return error(
                413,
                f"the request body is over {self.max_body} bytes; send a shorter thread, "
                "or raise the server's limit (AppSettings(max_body=...))",
            )
        try:
            raw = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return error(400, f"the body is not JSON: {exc}")
        try:
            run_input = RunAgentInput.model_validate(raw)
        except ValidationError as exc:
            return error(400, "the body is not a valid RunAgentInput", details=issues(exc))
        if self.fleet is not None:
            traceparent = request.headers.get("traceparent")
            return await self.fleet.respond(run_input, traceparent=traceparent)
        try:
            prepared = await self.runner.prepare(
                run_input, traceparent=request.headers.get("traceparent")
            )
        except InvalidRunInput as exc:
            return error(400, str(exc))
        live = await self.runner.launch(prepared)

        def on_close() -> None:
            if not live.done and not live.detached:
                # The client went away: this run stops (its own token, nothing shared).
                live.cancel.cancel("the client disconnected")

        return RunStreamResponse(
            sse_frames(live.follow(0, idle=self.keep_alive)), on_close=on_close
        )


def _from_legacy(legacy: LegacyAppArgs) -> AppSettings:
    """The settings the deprecated keywords describe (`store` and `token` required, as
    they were)."""
    missing = [name for name in ("store", "token") if name not in legacy]
    if missing:
        raise UsageError(f"create_app() needs {' and '.join(missing)}: pass AppSettings(...)")
    return AppSettings(**legacy)
