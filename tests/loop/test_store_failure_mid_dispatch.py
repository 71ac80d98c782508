"""A durable write that fails mid-dispatch (an outage, or the run taken over by another
process) stops the run; the calls it cut short are answered as stopped, not cancelled."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests._transcript import transcript_of
from tiller.loop import Agent, RunContext, RunOptions
from tiller.model import ScriptedModel
from tiller.policy import AllowAll
from tiller.state import StopCause
from tiller.store import MemoryBus, StoreDurability, StoreUnavailable
from tiller.tools import tool


async def test_a_failed_call_record_stops_the_run_and_says_so_to_the_cut_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    @tool(read_only=True)
    async def fast() -> str:
        """Return at once."""
        return "fast done"

    @tool(read_only=True)
    async def slow() -> str:
        """Never return."""
        await asyncio.Event().wait()
        return "never"

    real = StoreDurability.call_completed

    async def failing(self: StoreDurability, run_id: str, call_id: str, *a: Any, **k: Any) -> None:
        if call_id.endswith("-call-1"):
            raise StoreUnavailable("the store went away")
        await real(self, run_id, call_id, *a, **k)

    monkeypatch.setattr(StoreDurability, "call_completed", failing)
    calls = {"tool_calls": [{"name": "fast"}, {"name": "slow"}]}
    ctx = RunContext.sandboxed(tmp_path, AllowAll()).with_store(MemoryBus())
    agent = Agent(ScriptedModel([calls, "done"]), [fast, slow])
    async with asyncio.timeout(10):
        result = await agent.run_in(ctx, "go", RunOptions(checkpoint_bucket="cp"), run_id="r")
    assert result.stop_cause is StopCause.ERROR
    assert transcript_of(result)[-2:] == [
        "result r-call-1 fast: fast done",
        "error r-call-2 slow: The run stopped before this call finished: the store went away",
    ]
