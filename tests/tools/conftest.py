"""Fixtures for the tool tests: a context over a fresh jail, and running a built-in tool
the way the loop does (through a registry, one call)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tiller.conversation import ToolCall
from tiller.tools import ExecContext, Execution, Registry, coding_tools

RunTool = Callable[..., Awaitable[Execution]]


@pytest.fixture
def ctx(tmp_path: Path) -> ExecContext:
    root = tmp_path / "ws"
    root.mkdir()
    return ExecContext.for_test(root)


@pytest.fixture
def run_tool(ctx: ExecContext) -> RunTool:
    registry = Registry(coding_tools())

    async def run(name: str, *, context: ExecContext | None = None, **args: Any) -> Execution:
        call = ToolCall(id="call-1", name=name, arguments=orjson.dumps(args).decode())
        return await registry.execute(call, context or ctx)

    return run
