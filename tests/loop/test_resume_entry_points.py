"""`agent.resume(checkpoint, decisions, ...)` for a suspended run, `recover(run_id, store,
force=...)` for a crashed one, and the deprecated `resume(...)` that did both."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiller.conversation import AssistantMessage, ToolCall, UserMessage
from tiller.errors import UsageError
from tiller.loop import (
    Agent,
    FromCheckpoint,
    PauseOnWrites,
    ResumeDecision,
    ResumeReplayBlocked,
    RunContext,
    RunOptions,
    record_policy,
    recover,
    resume,
)
from tiller.model import ScriptedModel
from tiller.policy import AllowAll
from tiller.state import RunState, StopCause
from tiller.store import AlreadyResumed, Bus, CheckpointStore, RunStillRunning, open_bus
from tiller.tools import ExecContext, tool


@tool
def append(text: str, ctx: ExecContext) -> str:
    """Append a line to notes.txt."""
    with (ctx.workdir / "notes.txt").open("a") as notes:
        notes.write(text + "\n")
    return f"appended {text}"


def write(text: str) -> dict[str, object]:
    return {"tool_calls": [{"name": "append", "arguments": {"text": text}}]}


def lines(workspace: Path) -> list[str]:
    path = workspace / "notes.txt"
    return path.read_text().splitlines() if path.exists() else []


OPTIONS = RunOptions(review_policy=PauseOnWrites(), checkpoint_bucket="cp")


async def paused(bus: Bus, workspace: Path, run_id: str = "r1") -> tuple[RunContext, ToolCall]:
    ctx = RunContext.sandboxed(workspace).with_store(bus)
    result = await Agent(ScriptedModel([write("hi")]), [append]).run_in(
        ctx, "note hi", OPTIONS, run_id=run_id
    )
    assert result.stop_cause is StopCause.SUSPENDED
    (call,) = result.state.unanswered_calls()
    return ctx, call


async def test_resume_takes_the_suspended_result_itself(tmp_path: Path) -> None:
    ctx = RunContext.sandboxed(tmp_path)
    agent = Agent(ScriptedModel([write("hi"), "Noted."]), [append])
    suspended = await agent.run_in(ctx, "note hi", RunOptions(review_policy=PauseOnWrites()))
    (call,) = suspended.state.unanswered_calls()
    done = await agent.resume(suspended, {call.id: ResumeDecision.approved()}, ctx=ctx)
    assert done.completed and done.text == "Noted."
    assert lines(tmp_path) == ["hi"]


async def test_a_result_that_did_not_suspend_cannot_be_resumed(tmp_path: Path) -> None:
    ctx = RunContext.sandboxed(tmp_path)
    agent = Agent(ScriptedModel(["Nothing to do."]), [append])
    finished = await agent.run_in(ctx, "hello")
    with pytest.raises(UsageError, match="only a suspended run can be resumed"):
        await agent.resume(finished, {}, ctx=ctx)


async def test_a_second_resume_is_told_the_run_was_already_resumed(tmp_path: Path) -> None:
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        ctx, call = await paused(bus, tmp_path)
        decisions = {call.id: ResumeDecision.approved()}
        later = Agent(ScriptedModel(["Noted."], per_run=False), [append])
        done = await later.resume("r1", decisions, ctx=ctx, bucket="cp")
        assert done.completed
        again = Agent(ScriptedModel(["Noted twice."], per_run=False), [append])
        with pytest.raises(AlreadyResumed, match="not suspended: another process resumed it"):
            await again.resume("r1", decisions, ctx=ctx, bucket="cp")
    assert lines(tmp_path) == ["hi"]  # once


async def test_resume_by_id_rebuilds_the_context_from_the_checkpoint(tmp_path: Path) -> None:
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        _, call = await paused(bus, tmp_path)
        later = Agent(ScriptedModel(["Noted."], per_run=False), [append])
        done = await later.resume(
            "r1", {call.id: ResumeDecision.approved()}, ctx=FromCheckpoint(store=bus), bucket="cp"
        )
    assert done.completed and lines(tmp_path) == ["hi"]


async def test_resume_by_id_needs_a_store(tmp_path: Path) -> None:
    agent = Agent(ScriptedModel(["Noted."]), [append])
    with pytest.raises(UsageError, match="resuming by run id needs a store"):
        await agent.resume("r1", {}, ctx=FromCheckpoint())


async def crashed(bus: Bus, workspace: Path) -> RunContext:
    """`running`, its one call recorded as started and never completed."""
    ctx = RunContext.sandboxed(workspace, AllowAll()).with_store(bus)
    state = RunState(run_id="crash", thread_id="t", messages=[UserMessage(text="go")])
    record_policy(state, ctx, RunOptions(checkpoint_bucket="cp"))
    call = ToolCall(id="crash-call-1", name="append", arguments='{"text": "x"}')
    state.messages.append(AssistantMessage(id="crash-msg-1", tool_calls=(call,)))
    state.step = 1
    store = CheckpointStore(bus, "cp")
    await store.save(state, "running")
    await store.call_started("crash", call.id)
    return ctx


async def test_recover_blocks_on_an_uncertain_call_until_it_is_reconciled(
    tmp_path: Path,
) -> None:
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        await crashed(bus, tmp_path)
        agent = Agent(ScriptedModel(["Recovered."]), [append])
        with pytest.raises(ResumeReplayBlocked, match="crash-call-1"):
            await recover("crash", bus, agent=agent, bucket="cp")
        assert (await CheckpointStore(bus, "cp").load("crash")).status == "running"  # unclaimed
        await CheckpointStore(bus, "cp").forget_call("crash", "crash-call-1")  # run it again
        done = await recover(
            "crash", bus, agent=agent, ctx=FromCheckpoint(approver=AllowAll()), bucket="cp"
        )
    assert done.completed and done.text == "Recovered."
    assert lines(tmp_path) == ["x"]


async def test_recover_waits_for_a_live_lease_and_force_breaks_it(tmp_path: Path) -> None:
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        await crashed(bus, tmp_path)
        store = CheckpointStore(bus, "cp")
        await store.forget_call("crash", "crash-call-1")
        await store.hold("crash", "a-live-process", ttl=60)
        agent = Agent(ScriptedModel(["Recovered."]), [append])
        rebuild = FromCheckpoint(approver=AllowAll())
        with pytest.raises(RunStillRunning):
            await recover("crash", bus, agent=agent, ctx=rebuild, bucket="cp")
        assert lines(tmp_path) == []
        done = await recover("crash", bus, agent=agent, ctx=rebuild, bucket="cp", force=True)
    assert done.completed and lines(tmp_path) == ["x"]


async def test_recover_takes_the_store_once(tmp_path: Path) -> None:
    async with await open_bus("memory://") as bus, await open_bus("memory://") as other:
        agent = Agent(ScriptedModel([]), [append])
        with pytest.raises(UsageError, match="the context's store must be `store`"):
            await recover(
                "r1", bus, agent=agent, ctx=RunContext.sandboxed(tmp_path).with_store(other)
            )
        with pytest.raises(UsageError, match="takes the store once"):
            await recover("r1", bus, agent=agent, ctx=FromCheckpoint(store=other))


async def test_the_old_resume_warns_and_names_the_replacement(tmp_path: Path) -> None:
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        ctx, call = await paused(bus, tmp_path)
        later = Agent(ScriptedModel(["Noted."], per_run=False), [append])
        with pytest.warns(DeprecationWarning, match=r"use agent\.resume\(\.\.\.\)"):
            done = await resume(
                later, "r1", {call.id: ResumeDecision.approved()}, run_ctx=ctx, bucket="cp"
            )
        assert done.completed  # and it still works
        warned = pytest.warns(DeprecationWarning, match=r"use recover\(run_id, store, \.\.\.\)")
        with warned, pytest.raises(AlreadyResumed):
            await resume(later, "r1", None, store=bus, bucket="cp")
    assert lines(tmp_path) == ["hi"]
