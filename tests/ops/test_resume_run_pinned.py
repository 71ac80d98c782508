"""`tiller.ops.resume_run` continues a run that pinned its policy under that pinned record,
as `resume_decided` does, never the workspace's `tiller.toml` (law 11)."""

from __future__ import annotations

from pathlib import Path

from tiller import ops
from tiller.conversation import UserMessage
from tiller.loop import ResumeDecision, RunContext, RunOptions, load_agent, record_policy
from tiller.pinned_policy import PinnedPolicy
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
