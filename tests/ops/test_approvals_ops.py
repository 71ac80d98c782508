"""`tiller.ops` approve, deny, held_approvals, decided_records and resume_decided, on a
SQLite file: what `tiller approve` / `tiller deny` do, without the terminal."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiller import ops
from tiller.errors import InvalidToolArguments, UsageError
from tiller.state import StopCause
from tiller.store import AlreadyDecided, CheckpointStore, open_bus

from .conftest import held_run, lines


async def test_the_last_decision_leaves_nothing_waiting_and_the_run_resumes(
    url: str, workspace: Path, agent_module: str
) -> None:
    (held,) = await held_run(url, workspace, f"{agent_module}:one")
    async with await open_bus(url) as bus:
        assert [r.id for r in await ops.held_approvals(bus)] == [held.id]
        decided = await ops.approve(bus, held.id)
        assert decided.record.status == "approved" and decided.waiting == []
        assert lines(workspace) == []  # deciding runs nothing by itself
        result = await ops.resume_decided(bus, decided.records)
    assert result.stop_cause is StopCause.COMPLETED
    assert result.text == "finished: appended a"
    assert lines(workspace) == ["a"]


async def test_a_run_holding_two_calls_waits_for_both(
    url: str, workspace: Path, agent_module: str
) -> None:
    first, second = await held_run(url, workspace, f"{agent_module}:two")
    async with await open_bus(url) as bus:
        partial = await ops.approve(bus, first.id)
        assert partial.waiting == [second.id]
        with pytest.raises(UsageError, match=f"still waits for: {second.id}"):
            await ops.decided_records(bus, "r-held")
        done = await ops.deny(bus, second.id, "not b")
        assert done.waiting == []
        records = await ops.decided_records(bus, "r-held")
        assert {r.id for r in records.values()} == {first.id, second.id}
        result = await ops.resume_decided(bus, records)
    assert lines(workspace) == ["a"]
    assert result.text == "finished: appended a | Denied by the user: not b."
    # Decided once: the held list is empty, and every record is still there with --all.
    async with await open_bus(url) as bus:
        assert await ops.held_approvals(bus) == []
        every = await ops.held_approvals(bus, include_decided=True)
        assert sorted(r.status for r in every) == ["approved", "denied"]


async def test_a_second_decision_is_refused(url: str, workspace: Path, agent_module: str) -> None:
    (held,) = await held_run(url, workspace, f"{agent_module}:one")
    async with await open_bus(url) as bus:
        await ops.deny(bus, held.id, "no")
        with pytest.raises(AlreadyDecided):
            await ops.approve(bus, held.id)


async def test_edited_arguments_that_do_not_fit_record_nothing(
    url: str, workspace: Path, agent_module: str
) -> None:
    (held,) = await held_run(url, workspace, f"{agent_module}:one")
    async with await open_bus(url) as bus:
        with pytest.raises(InvalidToolArguments):
            await ops.approve(bus, held.id, arguments={"text": 3})
        assert [r.id for r in await ops.held_approvals(bus)] == [held.id]
        decided = await ops.approve(bus, held.id, arguments={"text": "edited"})
        await ops.resume_decided(bus, decided.records)
    assert lines(workspace) == ["edited"]


async def test_a_decision_for_a_finished_run_expires_its_records(
    url: str, workspace: Path, agent_module: str
) -> None:
    (held,) = await held_run(url, workspace, f"{agent_module}:one")
    async with await open_bus(url) as bus:
        checkpoints = CheckpointStore(bus)
        current = await checkpoints.load("r-held")
        await checkpoints.save(current.state, "finished", expected=current.revision)
        with pytest.raises(UsageError, match="has finished"):
            await ops.approve(bus, held.id)
        assert await ops.held_approvals(bus) == []  # expired: it leaves the list
        (expired,) = await ops.held_approvals(bus, include_decided=True)
        assert expired.status == "expired"
    assert lines(workspace) == []


async def test_a_run_that_records_no_agent_needs_one(url: str, workspace: Path) -> None:
    from tiller.conversation import UserMessage
    from tiller.loop import Agent, RunContext, RunOptions, record_policy
    from tiller.model import ScriptedModel
    from tiller.state import RunState
    from tiller.store import ApprovalStore
    from tiller.tools import ExecContext, tool

    @tool
    def append(text: str, ctx: ExecContext) -> str:
        """Append a line."""
        return text

    async with await open_bus(url) as bus:
        ctx = RunContext.sandboxed(workspace).with_store(bus)
        options = RunOptions(checkpoint_bucket="tiller-run-checkpoints")
        state = RunState(run_id="r-anon", thread_id="t", messages=[UserMessage(text="go")])
        record_policy(state, ctx, options)
        script = [{"tool_calls": [{"name": "append", "arguments": {"text": "x"}}]}]
        result = await Agent(ScriptedModel(script), [append]).run_in(ctx, state, options)
        (held,) = await ApprovalStore(bus).hold_interrupts(result.state, reason="ask")
        with pytest.raises(UsageError, match="does not record its agent"):
            await ops.approve(bus, held.id)
        assert [r.id for r in await ops.held_approvals(bus)] == [held.id]  # not decided
