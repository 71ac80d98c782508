"""Resume details the server relies on: "approve always" across a suspension, a new run
id for the continuation, and calls left for the client."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiller.loop import (
    Agent,
    ContinueAs,
    FromCheckpoint,
    ResumeDecision,
    RunContext,
    RunOptions,
    recover,
)
from tiller.model import ScriptedModel
from tiller.state import StopCause
from tiller.store import DEFAULT_BUCKET, CheckpointStore, open_bus
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
    result = await agent.resume(
        "r1",
        {call.id: ResumeDecision.approved(always=True)},
        ctx=ctx,
        options=options,
        continue_as=ContinueAs("r2"),
    )
    # The second write of the same tool needed no new approval: "always" was kept.
    assert result.stop_cause is StopCause.COMPLETED
    assert (tmp_path / "a.txt").read_text() == "2"
    assert result.state.run_id == "r2"
    store = CheckpointStore(bus)
    assert (await store.load("r1")).status == "continued"
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
    assert result.state.client_calls == [f"{result.state.run_id}-call-1"]
    # The server-side call ran (its result went out as an event); the client's did not.
    assert [entry.name for entry in result.tool_trace] == ["read_file"]


async def test_a_run_continued_under_a_new_id_can_never_be_recovered(tmp_path: Path) -> None:
    from tiller.policy import AllowAll
    from tiller.store import AlreadyResumed

    bus = await open_bus("memory://")
    agent = Agent(ScriptedModel([_write("a.txt", "1"), "done"]), [builtin.write_file])
    ctx = RunContext.sandboxed(tmp_path).with_store(bus)
    options = RunOptions().with_checkpoint_bucket(DEFAULT_BUCKET)
    first = await agent.run_in(ctx, "write", options, run_id="r1")
    (call,) = first.state.unanswered_calls()
    await agent.resume(
        "r1", {call.id: ResumeDecision.approved()}, ctx=ctx, continue_as=ContinueAs("r2")
    )
    loaded = await CheckpointStore(bus).load("r1")
    assert loaded.status == "continued"
    assert loaded.continued_as == "r2"
    (tmp_path / "a.txt").write_text("changed")
    # A recovery of the old id would run the approved write a second time: refused.
    with pytest.raises(AlreadyResumed):
        await recover("r1", bus, agent=agent, ctx=FromCheckpoint(approver=AllowAll()))
    assert (tmp_path / "a.txt").read_text() == "changed"
    await bus.aclose()


async def test_a_resume_under_the_same_id_never_reuses_a_message_id(tmp_path: Path) -> None:
    from tiller.events import Event
    from tiller.testing import assert_valid_stream

    bus = await open_bus("memory://")
    agent = Agent(
        ScriptedModel([{"text": "Writing.", **_write("a.txt", "1")}, "done"]),
        [builtin.write_file],
    )
    ctx = RunContext.sandboxed(tmp_path).with_store(bus)
    options = RunOptions().with_checkpoint_bucket(DEFAULT_BUCKET)
    first = await agent.run_in(ctx, "write", options, run_id="r1")
    (call,) = first.state.unanswered_calls()
    seen: list[Event] = []
    # By run id, from the store (as `tiller approve` does): the counters come from there.
    await agent.resume("r1", {call.id: ResumeDecision.approved()}, ctx=ctx, on_event=seen.append)
    assert_valid_stream(seen)
    ids: list[str] = []
    for event in seen:
        wire = event.to_wire()
        if wire["type"] == "MESSAGES_SNAPSHOT":
            ids.extend(m["id"] for m in wire["messages"])
        elif wire["type"] in ("TEXT_MESSAGE_START", "TOOL_CALL_RESULT"):
            ids.append(wire["messageId"])
    assert len(ids) == len(set(ids)), ids
    await bus.aclose()


async def test_a_client_tool_still_passes_the_gate(tmp_path: Path) -> None:
    banner = ClientTool("show_banner", "Show a banner.", {"type": "object"})
    model = ScriptedModel([{"tool_calls": [{"name": "show_banner", "arguments": {}}]}, "ok"])
    agent = Agent(model, [banner])
    ctx = RunContext.sandboxed(tmp_path).with_withheld(frozenset({"show_banner"}))
    result = await agent.run_in(ctx, "go")
    assert result.state.client_calls == []  # refused, not left for the client
    assert "withheld" in result.state.messages[2].tool_results[0].content


async def test_a_question_is_not_held_where_nothing_could_resume_it(tmp_path: Path) -> None:
    from tiller.tools import InterruptQuestions

    question = {"header": "Pick", "question": "Which?", "options": [{"label": "a"}]}
    model = ScriptedModel(
        [{"tool_calls": [{"name": "ask_user", "arguments": {"questions": [question]}}]}, "ok"]
    )
    agent = Agent(model, [builtin.ask_user])
    # No store: a suspension could only be resumed in this process, so it is not made.
    ctx = RunContext.sandboxed(tmp_path).with_questions(InterruptQuestions())
    result = await agent.run_in(ctx, "go")
    assert result.stop_cause is StopCause.COMPLETED
    assert "could not be put" in result.state.messages[2].tool_results[0].content
