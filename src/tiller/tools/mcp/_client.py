"""`McpClient`: one MCP server over stdio as a source of tiller tools; `open_mcp_tools`.

```python
async with open_mcp_tools(McpServers.from_config(config["mcp"])) as tools:
    registry = agent_registry.copy()
    for each in tools:
        registry.add(each)
    ...  # run the agent; closing stops every server
```

**Who owns what.** The SDK's stdio transport and session are anyio task groups, which
must be entered and left by one task, in order, and which a plain `task.cancel()` can
tear through (the SDK shields its shutdown against anyio cancellation only). So each
client runs its session in a task of its own (the *runner*), stopped through an anyio
cancel scope, never with `task.cancel()`: the SDK's shutdown (close stdin, wait, SIGTERM,
SIGKILL the process group) always runs to its end, and closing the client waits for it,
even if the closer is cancelled meanwhile. No server outlives its client.

**Calls** run in the caller's task (the loop's, under the call's token scope), through
the session the runner keeps open. Cancelling that task abandons the request, and the
SDK sends the server `notifications/cancelled`; a call that outlives the server's
`timeout` is abandoned the same way. A server that dies makes every pending and later
call fail with a `ToolError` that says so and quotes its last stderr lines.

**Start-up** (spawn, `initialize`, `tools/list`) is bounded by `startup_timeout`; any
failure is an `McpStartError` with the server's stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from ...errors import UsageError, first_leaf, leaves_of
from .._exec import ExecContext
from .._tool import ToolError, ToolOutput
from ._config import McpServerConfig, McpServers
from ._content import render_result
from ._errors import McpStartError
from ._naming import mcp_tool_name
from ._schema import ArgumentsCheck, InvalidSchema
from ._stderr import StderrTail
from ._tool import McpTool

if TYPE_CHECKING:
    import anyio
    import mcp_types
    from mcp import ClientSession
    from mcp.shared.dispatcher import ProgressFnT
    from mcp.shared.exceptions import MCPError

__all__ = ["McpClient", "McpClientState", "SkippedTool", "open_mcp_tools"]

_logger: Final = logging.getLogger("tiller.tools.mcp")

#: How long to wait for a dead server's last stderr lines before quoting them.
_STDERR_GRACE: Final = 2.0
#: At most this many pages of `tools/list` (a server whose cursor never ends).
_MAX_PAGES: Final = 100


#: The longest line (one JSON-RPC message) a server may write on stdout; a longer one
#: stops it (`_line_limit.py`, the relay every stdio server runs behind).
MAX_MESSAGE_BYTES: Final = 32 * 1024 * 1024
_LINE_LIMIT: Final = str(Path(__file__).with_name("_line_limit.py"))


class McpClientState(enum.Enum):
    UNOPENED = "unopened"
    OPENED = "opened"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class SkippedTool:
    """A tool the server listed that tiller does not offer, and why (an input schema
    that is not a valid JSON Schema object, a name that collides)."""

    remote_name: str
    reason: str


class McpClient:
    """One MCP server over stdio, started on `open()` (or `async with`) and stopped on
    `aclose()`; its tools are `tools` while it is open.

    Single use, like every tiller resource: UNOPENED → OPENED → CLOSED. `aclose` is
    idempotent, and a client whose `open` failed is already CLOSED.
    """

    __slots__ = (
        "_dead",
        "_runner",
        "_scope",
        "_session",
        "_skipped",
        "_state",
        "_stderr",
        "_tools",
        "config",
        "instructions",
        "server_name",
        "server_version",
    )

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self._state = McpClientState.UNOPENED
        self._tools: tuple[McpTool, ...] = ()
        self._skipped: tuple[SkippedTool, ...] = ()
        self._session: ClientSession | None = None
        self._runner: asyncio.Task[None] | None = None
        self._scope: anyio.CancelScope | None = None
        self._stderr: StderrTail | None = None
        self._dead = False
        #: What the server says about itself after `initialize` (informational, untrusted).
        self.server_name: str | None = None
        self.server_version: str | None = None
        self.instructions: str | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def state(self) -> McpClientState:
        return self._state

    @property
    def tools(self) -> tuple[McpTool, ...]:
        """The server's tools, named `server__tool`, in name order (empty until open)."""
        return self._tools

    @property
    def skipped(self) -> tuple[SkippedTool, ...]:
        return self._skipped

    @property
    def alive(self) -> bool:
        """Open, and the server has not been seen to die."""
        return self._state is McpClientState.OPENED and not self._dead

    def stderr_tail(self) -> str:
        """The last lines the server wrote to stderr."""
        return self._stderr.tail() if self._stderr is not None else ""

    def __repr__(self) -> str:
        return f"<McpClient {self.name!r} {self._state.value} tools={len(self._tools)}>"

    # ── lifecycle ───────────────────────────────────────────────────────────────

    async def __aenter__(self) -> McpClient:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Start the server, initialize the session and list the tools.

        Raises `McpStartError` (the client is then CLOSED, and no process is left), or
        `UsageError` if the client was opened before.
        """
        if self._state is not McpClientState.UNOPENED or self._runner is not None:
            raise UsageError(
                f"the MCP client {self.name!r} was already opened; make a new McpClient"
            )
        import anyio

        self._check_command()
        event_loop = asyncio.get_running_loop()
        ready: asyncio.Future[list[mcp_types.Tool]] = event_loop.create_future()
        self._stderr = StderrTail(self.name)
        self._scope = anyio.CancelScope()
        self._runner = asyncio.create_task(self._serve(ready), name=f"tiller-mcp-{self.name}")
        try:
            # `wait`, not `await ready`: cancelling this task must not cancel the future
            # the runner is about to settle.
            await asyncio.wait({ready})
            if ready.cancelled():
                raise McpStartError(self.name, "the client was closed while the server started")
            listing = ready.result()
            self._build_tools(listing)
        except BaseException:
            await self._shut_down()
            raise
        self._state = McpClientState.OPENED

    async def aclose(self) -> None:
        """Stop the server (the SDK closes its stdin, then terminates its process group)
        and wait until it is gone. Idempotent. If the caller is cancelled meanwhile, the
        shutdown still completes (it is bounded) before the cancellation propagates."""
        if self._state is McpClientState.CLOSED:
            return
        await self._shut_down()

    async def _shut_down(self) -> None:
        self._state = McpClientState.CLOSED
        self._session = None
        if self._scope is not None:
            self._scope.cancel()
        runner = self._runner
        if runner is not None:
            await _join(runner)
        if self._stderr is not None:
            self._stderr.close()

    def _check_command(self) -> None:
        """Refuse up front what would fail as an opaque `OSError` in the SDK."""
        config = self.config
        if config.cwd is not None and not config.cwd.is_dir():
            raise McpStartError(
                self.name,
                f"its working directory {str(config.cwd)!r} does not exist "
                f"(mcp.servers.{self.name}.cwd)",
            )
        path = config.env.get("PATH", os.environ.get("PATH", os.defpath))
        if shutil.which(config.command, path=path) is None:
            raise McpStartError(
                self.name,
                f"the command {config.command!r} was not found or is not executable "
                f"(mcp.servers.{self.name}.command; searched PATH={path})",
            )

    # ── the runner ──────────────────────────────────────────────────────────────

    async def _serve(self, ready: asyncio.Future[list[mcp_types.Tool]]) -> None:
        """The runner task: own the transport and the session until the scope is
        cancelled. Always settles `ready`; never raises an `Exception`."""
        try:
            await self._run_session(ready)
        except (Exception, BaseExceptionGroup) as exc:
            # (A bare `CancelledError` propagates: the runner itself was cancelled, which
            # only happens when the event loop shuts down.)
            if not ready.done():
                ready.set_exception(await self._start_error(exc))
            else:
                _logger.warning(
                    "MCP server %r: the session ended with an error", self.name, exc_info=exc
                )
        finally:
            if not ready.done():
                ready.cancel()

    async def _run_session(self, ready: asyncio.Future[list[mcp_types.Tool]]) -> None:
        import anyio
        from mcp import ClientSession, StdioServerParameters, stdio_client
        from mcp_types import Implementation

        from ... import __version__

        config = self.config
        # Through the line-limit relay: the SDK buffers a stdout line whole.
        params = StdioServerParameters(
            command=sys.executable,
            args=["-I", _LINE_LIMIT, str(MAX_MESSAGE_BYTES), "--", config.command, *config.args],
            env=dict(config.env) or None,
            cwd=config.cwd,
        )
        assert self._scope is not None and self._stderr is not None
        stderr = self._stderr
        await stderr.start()
        with self._scope:
            async with stdio_client(params, errlog=stderr.writer) as (read, write):
                stderr.spawned()
                async with ClientSession(
                    read, write, client_info=Implementation(name="tiller", version=__version__)
                ) as session:
                    with anyio.fail_after(config.startup_timeout):
                        init = await session.initialize()
                        listing = await _list_tools(session)
                    self.server_name = init.server_info.name
                    self.server_version = init.server_info.version
                    self.instructions = init.instructions
                    self._session = session
                    ready.set_result(listing)
                    await anyio.sleep_forever()

    async def _start_error(self, exc: BaseException) -> McpStartError:
        """What went wrong during start-up, in words, with the server's stderr."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED
        from pydantic import ValidationError

        leaf = first_leaf(exc)
        config = self.config
        if isinstance(leaf, McpStartError):
            return leaf
        if isinstance(leaf, TimeoutError):
            problem = (
                f"it did not finish starting (initialize, list its tools) within "
                f"{config.startup_timeout:g} s (mcp.servers.{self.name}.startup_timeout)"
            )
        elif isinstance(leaf, OSError):
            problem = f"cannot run {config.command!r}: {leaf.strerror or leaf}"
        elif isinstance(leaf, MCPError) and leaf.code == CONNECTION_CLOSED:
            problem = "it exited (or closed its stdout) before completing the MCP handshake"
        elif isinstance(leaf, MCPError):
            problem = f"it answered with an error: {leaf.message} (JSON-RPC error {leaf.code})"
        elif isinstance(leaf, ValidationError):
            problem = "it answered with something that is not valid MCP"
        else:
            problem = f"{type(leaf).__name__}: {leaf}"
        return McpStartError(self.name, problem, await self._last_words())

    def _build_tools(self, listing: list[mcp_types.Tool]) -> None:
        tools: list[McpTool] = []
        skipped: list[SkippedTool] = []
        taken: dict[str, str] = {}
        for remote in sorted(listing, key=lambda t: t.name):
            name = mcp_tool_name(self.name, remote.name)
            if name in taken:
                reason = (
                    f"the server lists {remote.name!r} twice"
                    if taken[name] == remote.name
                    else f"its tiller name {name!r} is already used by {taken[name]!r}"
                )
                skipped.append(SkippedTool(remote.name, reason))
                continue
            try:
                check = ArgumentsCheck(name, remote.input_schema)
            except InvalidSchema as exc:
                skipped.append(SkippedTool(remote.name, str(exc)))
                continue
            taken[name] = remote.name
            tools.append(
                McpTool(
                    name=name,
                    server=self.name,
                    remote=remote,
                    check=check,
                    send=self._send,
                    trust_annotations=self.config.trust_annotations,
                )
            )
        for each in skipped:
            _logger.warning(
                "MCP server %r: tool %r is not offered: %s",
                self.name,
                each.remote_name,
                each.reason,
            )
        self._tools = tuple(sorted(tools, key=lambda t: t.name))
        self._skipped = tuple(skipped)

    # ── calls ───────────────────────────────────────────────────────────────────

    async def _send(self, tool: McpTool, args: dict[str, Any], ctx: ExecContext) -> ToolOutput:
        """`tools/call` through the open session (see the module docstring)."""
        from mcp.client.extension import UnexpectedClaimedResult
        from mcp.shared.exceptions import MCPError
        from pydantic import ValidationError

        session = self._session
        if session is None or self._state is not McpClientState.OPENED:
            raise ToolError(
                f"the MCP server {self.name!r} is closed, so {tool.name} cannot be called; "
                "its tools are available only while tiller keeps the server running"
            )
        if self._dead:
            raise ToolError(self._dead_message(tool))
        try:
            result = await session.call_tool(
                tool.remote_name,
                args,
                read_timeout_seconds=self.config.timeout,
                progress_callback=_progress_relay(ctx),
            )
        except MCPError as exc:
            raise ToolError(await self._call_error(tool, exc)) from None
        except ValidationError:
            raise ToolError(
                f"the MCP server {self.name!r} answered {tool.name} with something that is "
                "not a valid MCP result; tell the user the server misbehaves"
            ) from None
        except (RuntimeError, UnexpectedClaimedResult) as exc:
            # The SDK's refusals: a result that breaks the tool's output schema, a
            # request for user input (not supported), an extension result.
            raise ToolError(f"the MCP server {self.name!r} failed {tool.name}: {exc}") from None
        return render_result(result, tool=tool.name, artifact=ctx.progress.artifact)

    async def _call_error(self, tool: McpTool, exc: MCPError) -> str:
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        if exc.code == CONNECTION_CLOSED:
            if self._state is McpClientState.CLOSED:
                return (
                    f"the MCP server {self.name!r} was shut down (tiller is closing its MCP "
                    f"servers) before {tool.name} finished"
                )
            self._dead = True
            await self._last_words()
            return self._dead_message(tool)
        if exc.code == REQUEST_TIMEOUT:
            return (
                f"the MCP server {self.name!r} did not answer {tool.name} within "
                f"{self.config.timeout:g} s, so tiller cancelled the call (the server was "
                "told to stop). Try a smaller request, or tell the user the server is slow"
            )
        return f"the MCP server {self.name!r} refused {tool.name}: {exc.message} (error {exc.code})"

    async def _last_words(self) -> str:
        """The end of the server's stderr, once it has ended (or after a short grace:
        a grandchild process may hold the pipe open)."""
        stderr = self._stderr
        if stderr is None:
            return ""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_STDERR_GRACE):
                await stderr.wait_closed()
        return stderr.tail()

    def _dead_message(self, tool: McpTool) -> str:
        message = (
            f"the MCP server {self.name!r} is not running any more (it exited or closed its "
            f"connection), so {tool.name} did not run or did not finish. Its tools cannot be "
            "used for the rest of this session; tell the user (restarting tiller restarts "
            "the server)"
        )
        tail = self.stderr_tail()
        if tail:
            message += f". Its last stderr lines:\n{tail}"
        return message


# ── several servers ─────────────────────────────────────────────────────────────────


@asynccontextmanager
async def open_mcp_tools(
    servers: McpServers | Iterable[McpServerConfig],
) -> AsyncIterator[list[McpTool]]:
    """Start every configured server (concurrently), yield all their tools, and stop
    them all on exit.

    If one server cannot start, the others are stopped too and its `McpStartError` is
    raised (the first in config order, if several fail). Tool names are distinct across
    servers by construction (`server__tool`, unique server names).
    """
    configs = servers if isinstance(servers, McpServers) else McpServers(tuple(servers))
    clients = [McpClient(config) for config in configs]
    try:
        await _open_all(clients)
        yield [tool for client in clients for tool in client.tools]
    finally:
        await _close_all(clients)


async def _open_all(clients: list[McpClient]) -> None:
    try:
        async with asyncio.TaskGroup() as group:
            for client in clients:
                group.create_task(client.open())
    except BaseExceptionGroup as failed:
        starts = [e for e in leaves_of(failed) if isinstance(e, McpStartError)]
        if not starts:
            raise
        order = {client.name: index for index, client in enumerate(clients)}
        first = min(starts, key=lambda e: order.get(e.server, len(order)))
        for other in starts:
            if other is not first:
                _logger.warning("%s", other)
        raise first from None


async def _close_all(clients: list[McpClient]) -> None:
    async with asyncio.TaskGroup() as group:
        for client in clients:
            group.create_task(client.aclose())


# ── helpers ─────────────────────────────────────────────────────────────────────────


async def _list_tools(session: ClientSession) -> list[mcp_types.Tool]:
    from mcp_types import PaginatedRequestParams

    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        params = PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _progress_relay(ctx: ExecContext) -> ProgressFnT:
    """Turn the server's progress notifications into the call's progress reports."""

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        fraction = progress / total if total and 0 <= progress <= total else None
        if message:
            text = message
        elif total:
            text = f"{progress:g} of {total:g}"
        else:
            text = f"{progress:g}"
        ctx.progress.status(text, fraction)

    return relay


async def _join(task: asyncio.Task[None]) -> None:
    """Wait until `task` is done even if this task is cancelled meanwhile (the runner's
    shutdown is bounded by the SDK's own timeouts), then let the cancellation go on."""
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = exc
    if not task.cancelled() and (error := task.exception()) is not None:
        _logger.warning("an MCP runner task failed", exc_info=error)
    if cancelled is not None:
        raise cancelled
