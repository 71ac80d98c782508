"""Resume details the server relies on: "approve always" across a suspension, a new run
id for the continuation, and calls left for the client."""

from __future__ import annotations

from pathlib import Path

from tiller.loop import Agent, ResumeDecision, RunContext, RunOptions, resume
from tiller.model import ScriptedModel
from tiller.state import StopCause
from tiller.store import open_bus
from tiller.store._checkpoints import DEFAULT_BUCKET, CheckpointStore
from tiller.tools import ClientTool, builtin


def _write(path: str, content: str) -> dict[str, object]:
    return {"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]}


async def test_approve_always_holds_after_the_resume_under_a_new_run_id(tmp_path: Path) -> None:
    bus = await open_bus("memory://")
    agent = Agent(
        ScriptedModel([_write("a.txt", "1"), _write("a.txt", "2"), "done"]),
        [builtin.write_file],
    )
    ctx = RunContext.sandboxed(tmp_path).with_store(bus)
    options = RunOptions().with_checkpoint_bucket(DEFAULT_BUCKET)
    first = await agent.run_in(ctx, "write twice", options, run_id="r1")
    assert first.stop_cause is StopCause.SUSPENDED
    (call,) = first.state.unanswered_calls()
    result = await resume(
        agent,
        "r1",
        {call.id: ResumeDecision.approved(always=True)},
        run_ctx=ctx,
        options=options,
        run_id="r2",
    )
    # The second write of the same tool needed no new approval: "always" was kept.
    assert result.stop_cause is StopCause.COMPLETED
    assert (tmp_path / "a.txt").read_text() == "2"
    assert result.state.run_id == "r2"
    store = CheckpointStore(bus)
    assert (await store.load("r1")).status == "resumed"
    assert (await store.for_thread("r1")) is not None
    await bus.aclose()


async def test_a_call_to_a_client_tool_ends_the_run_with_it_open(tmp_path: Path) -> None:
    banner = ClientTool("show_banner", "Show a banner.", {"type": "object"})
    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "show_banner", "arguments": {}},
                    {"name": "read_file", "arguments": {"path": "missing.txt"}},
                ]
            }
        ]
    )
    agent = Agent(model, [builtin.read_file, banner])
    result = await agent.run_in(RunContext.sandboxed(tmp_path), "go")
    assert result.stop_cause is StopCause.COMPLETED
    assert result.state.client_calls == ["call-1-0"]
    # The server-side call ran (its result went out as an event); the client's did not.
    assert [entry.name for entry in result.tool_trace] == ["read_file"]
