"""A durable run's event log is written up to each checkpoint before the checkpoint is:
a worker killed after a checkpoint never leaves a log that shows less than the checkpoint
says happened (found by the fleet's chaos test: a run that had finished came back with no
events at all, its one batch still buffered when its worker died)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tiller.loop import Agent, RunContext, RunOptions
from tiller.model import ScriptedModel
from tiller.policy import AllowAll
from tiller.state import StopCause
from tiller.store import CheckpointStore, EventLog, open_bus
from tiller.tools import tool


async def test_each_checkpoint_has_the_events_before_it_in_the_log(tmp_path: Path) -> None:
    seen: list[tuple[int, list[str]]] = []
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:

        @tool(read_only=True)
        async def look(step: int) -> str:
            """What another process would see of the run now: its checkpoint and its log."""
            checkpoint = await CheckpointStore(bus).load("logged")
            events = await EventLog(bus).read("logged")
            seen.append((checkpoint.state.step, [e["type"] for e in events]))
            return "looked"

        turns: list[Any] = [
            {"tool_calls": [{"name": "look", "arguments": {"step": n}}]} for n in (1, 2)
        ]
        agent = Agent(ScriptedModel([*turns, "done"]), tools=[look])
        ctx = RunContext.sandboxed(tmp_path, AllowAll()).with_store(bus)
        # One batch would hold the whole stream: only the checkpoints make it be written.
        options = RunOptions(checkpoint_bucket="tiller-run-checkpoints", event_log_batch=10_000)
        result = await agent.run_in(ctx, "look twice", options, run_id="logged")
    assert result.stop_cause is StopCause.COMPLETED
    assert len(seen) == 2
    for step, types in seen:
        assert step >= 1
        assert types[0] == "RUN_STARTED", (step, types)
        # The checkpoint of this step was taken with the step's model turn in it: so is the log.
        assert "TOOL_CALL_END" in types, (step, types)
