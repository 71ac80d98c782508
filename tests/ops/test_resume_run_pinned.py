"""`tiller.ops.resume_run` continues a run that pinned its policy under that pinned record,
as `resume_decided` does, never the workspace's `tiller.toml` (law 11)."""

from __future__ import annotations

from pathlib import Path

from tiller import ops
from tiller.conversation import UserMessage
from tiller.loop import (
    FromCheckpoint,
    ResumeDecision,
    RunContext,
    RunOptions,
    load_agent,
    record_policy,
)
from tiller.pinned_policy import PinnedPolicy, restore_pinned_policy
from tiller.state import RunState, StopCause
from tiller.store import open_bus

from .conftest import lines

ASK = '[policy]\nmode = "ask"\n'
#: What the model could write in the jail after the run started: it must change nothing.
DENY = '[policy]\nmode = "ask"\n[[policy.rules]]\naction = "deny"\ntool = "append"\n'


async def test_resume_run_uses_the_pinned_policy_not_the_jails(
    url: str, workspace: Path, agent_module: str
) -> None:
    (workspace / "tiller.toml").write_text(ASK)
    ref = f"{agent_module}:one"
    async with await open_bus(url) as bus:
        ctx = PinnedPolicy.read(workspace).apply(RunContext.sandboxed(workspace)).with_store(bus)
        options = RunOptions(checkpoint_bucket="tiller-run-checkpoints")
        state = RunState(run_id="r-pin", thread_id="t-pin", messages=[UserMessage(text="go")])
        record_policy(state, ctx, options, agent_ref=ref)
        held = await load_agent(ref).run_in(ctx, state, options)
        assert held.stop_cause is StopCause.SUSPENDED
    (workspace / "tiller.toml").write_text(DENY)
    async with await open_bus(url) as bus:
        result = await ops.resume_run(bus, "r-pin", {"r-pin-call-1": ResumeDecision(approve=True)})
    assert result.stop_cause is StopCause.COMPLETED
    assert result.text == "finished: appended a"
    assert lines(workspace) == ["a"]


async def test_the_pinned_policy_given_again_is_applied_once(
    url: str, workspace: Path, agent_module: str, tmp_path: Path
) -> None:
    # The refusal `Agent.resume` gives says to pass `configure=restore_pinned_policy`;
    # passed to the operation too, the pinned hook must still run once per call.
    count = tmp_path / "count.txt"
    (workspace / "count.sh").write_text(f"#!/bin/sh\necho x >> {count}\nexit 0\n")
    (workspace / "count.sh").chmod(0o755)
    hook = '[hooks]\npre_tool = [{ command = "./count.sh", tools = ["append"] }]\n'
    (workspace / "tiller.toml").write_text(ASK + hook)
    ref = f"{agent_module}:one"
    async with await open_bus(url) as bus:
        ctx = PinnedPolicy.read(workspace).apply(RunContext.sandboxed(workspace)).with_store(bus)
        options = RunOptions(checkpoint_bucket="tiller-run-checkpoints")
        state = RunState(run_id="r-two", thread_id="t-two", messages=[UserMessage(text="go")])
        record_policy(state, ctx, options, agent_ref=ref)
        held = await load_agent(ref).run_in(ctx, state, options)
        assert held.stop_cause is StopCause.SUSPENDED
    before = count.read_text().count("x") if count.exists() else 0
    async with await open_bus(url) as bus:
        result = await ops.resume_run(
            bus,
            "r-two",
            {"r-two-call-1": ResumeDecision(approve=True)},
            ctx=FromCheckpoint(configure=restore_pinned_policy),
        )
    assert result.stop_cause is StopCause.COMPLETED
    assert count.read_text().count("x") - before == 1
    assert lines(workspace) == ["a"]
