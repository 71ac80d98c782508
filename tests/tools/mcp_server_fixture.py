"""A real MCP server over stdio, for `test_mcp.py`: run it as
`python tests/tools/mcp_server_fixture.py [--fail-on-start] [--dotted-names]`.

It is written with the official SDK's `MCPServer`, the way users write servers, and
exposes one tool per behaviour tiller must handle:

- `lookup` carries `readOnlyHint` and `idempotentHint` (tiller must not trust them);
- `echo` repeats its text (a round trip; strict schema: `text` required, `times` >= 1);
- `fail` raises, which the SDK turns into an `isError` result;
- `slow` writes "started" into a marker file, reports progress, then sleeps for an hour;
  when the client cancels it, it writes "cancelled" (proof the cancellation arrived);
- `stats` returns structured content, without text (or with a summary, `with_text`);
- `picture` returns text, a PNG image and an embedded binary resource;
- `protocol_error` is answered by the middleware with a JSON-RPC error;
- `pid` returns the server's process id, so a test can kill it or check it is gone;
- `received` lists the `tools/call` requests that reached the server (recorded by a
  middleware, before the SDK validates anything), so a test can prove a call was
  refused before it was sent.

`--fail-on-start` writes a line to stderr and exits with status 3 before speaking MCP.
`--dotted-names` adds tools whose names tiller must rewrite (`a.b`, `a_b`, and one of
100 characters); `--bad-schema` adds `bad_schema`, whose input schema is not valid JSON
Schema.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import (
    BlobResourceContents,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    TextContent,
    ToolAnnotations,
)

# A 1x1 transparent PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082"
)

RECEIVED: list[str] = []


class RecordCalls:
    """Middleware: remember the name of every `tools/call` that reaches the server."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method == "tools/call" and ctx.params is not None:
            name = str(ctx.params.get("name"))
            RECEIVED.append(name)
            if name == "protocol_error":
                raise MCPError(code=-32602, message="refused by the fixture's middleware")
        return await call_next(ctx)


server: MCPServer[Any] = MCPServer("fixture", middleware=[RecordCalls()])


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def lookup(key: str) -> str:
    """Look a key up in the fixture's table."""
    return f"value of {key}"


@server.tool()
def echo(text: str, times: int = 1) -> str:
    """Repeat the text."""
    if times < 1:
        raise ValueError("times must be at least 1")
    return " ".join([text] * times)


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the reason."""
    raise ToolError(f"failed on purpose: {reason}")


@server.tool()
async def slow(marker: str, ctx: Context) -> str:
    """Sleep for an hour (for cancellation tests)."""
    path = Path(marker)
    path.write_text("started")  # noqa: ASYNC240 (a test fixture; a tiny file)
    await ctx.report_progress(1, 4, "warming up")
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        path.write_text("cancelled")  # noqa: ASYNC240 (no await: it is being cancelled)
        raise
    return "woke up"


@server.tool()
def stats(text: str, with_text: bool = False) -> CallToolResult:
    """Count the words of a text; the result is structured content, and also text if
    `with_text`."""
    words = text.split()
    data = {"count": len(words), "words": words}
    content: list[ContentBlock] = (
        [TextContent(type="text", text=f"{len(words)} words")] if with_text else []
    )
    return CallToolResult(content=content, structured_content=data)


@server.tool(structured_output=False)
def picture() -> list[Any]:
    """A picture and its raw data."""
    blob = EmbeddedResource(
        type="resource",
        resource=BlobResourceContents(
            uri="file:///pixel.bin", mime_type="application/octet-stream", blob="AAECAw=="
        ),
    )
    return ["a 1x1 pixel", Image(data=PNG, format="png"), blob]


@server.tool()
def protocol_error() -> str:
    """Never runs: the middleware answers its calls with a JSON-RPC error."""
    return "unreachable"


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def received() -> list[str]:
    """The names of the tool calls that reached this server, in order."""
    return list(RECEIVED)


def add_dotted_names() -> None:
    def dotted() -> str:
        return "dotted"

    def underscored() -> str:
        return "underscored"

    def long_name() -> str:
        return "long"

    server.add_tool(dotted, name="a.b", description="A dotted name.")
    server.add_tool(underscored, name="a_b", description="An underscored name.")
    server.add_tool(long_name, name="x" * 100, description="A long name.")


def add_bad_schema() -> None:
    def bad_schema(x: str) -> str:
        return x

    server.add_tool(bad_schema, description="Its input schema is broken.")
    broken = server._tool_manager.get_tool("bad_schema")
    assert broken is not None
    broken.parameters = {"type": "object", "properties": {"x": {"type": "no-such-type"}}}


def main() -> None:
    if "--fail-on-start" in sys.argv:
        print("fixture: refusing to start (--fail-on-start)", file=sys.stderr, flush=True)
        sys.exit(3)
    if "--dotted-names" in sys.argv:
        add_dotted_names()
    if "--bad-schema" in sys.argv:
        add_bad_schema()
    server.run("stdio")


if __name__ == "__main__":
    main()
