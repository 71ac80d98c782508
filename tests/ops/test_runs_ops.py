"""`tiller.ops` list_runs, uncertain_calls, reconcile, recover_run and close_cancelled, on
a SQLite file: a crash's uncertain calls settled by a person, then the run recovered."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiller import ops
from tiller.conversation import AssistantMessage, ToolCall, UserMessage
from tiller.errors import UsageError
from tiller.loop import ResumeReplayBlocked
from tiller.policy import AllowAll
from tiller.state import RunState, StopCause
from tiller.store import CheckpointStore, ControlStore, RunStillRunning, open_bus

from .conftest import crashed_run, held_run, lines


async def test_list_runs_gives_every_checkpointed_run(
    url: str, workspace: Path, agent_module: str
) -> None:
    await held_run(url, workspace, f"{agent_module}:one", run_id="r-1")
    async with await open_bus(url) as bus:
        await crashed_run(bus, workspace, f"{agent_module}:three", run_id="r-2")
        listed = await ops.list_runs(bus)
    assert [(c.state.run_id, c.status) for c in listed] == [
        ("r-1", "suspended"),
        ("r-2", "running"),
    ]


async def test_reconcile_marks_then_recover_runs_only_what_is_left(
    url: str, workspace: Path, agent_module: str
) -> None:
    async with await open_bus(url) as bus:
        await crashed_run(bus, workspace, f"{agent_module}:three")
        report = await ops.reconcile(bus, "r-crash")  # no marks: only says what is uncertain
        assert report.marked == [] and [c.id for c in report.uncertain] == ["call-b", "call-c"]
        with pytest.raises(ResumeReplayBlocked, match="call-b"):
            await ops.recover_run(bus, "r-crash", approver=AllowAll())
        done = await ops.reconcile(
            bus, "r-crash", [("call-b", "done"), ("call-c", "rerun")], result="b was appended"
        )
        assert [(c.id, verdict) for c, verdict in done.marked] == [
            ("call-b", "done"),
            ("call-c", "rerun"),
        ]
        assert done.uncertain == []
        result = await ops.recover_run(bus, "r-crash", approver=AllowAll())
    assert result.completed
    assert result.text == "finished: appended a | b was appended | appended c"
    assert lines(workspace) == ["c"]  # a and b happened before the crash: never again


@pytest.mark.parametrize(
    ("marks", "result", "message"),
    [
        ([("call-b", "done"), ("call-b", "failed")], None, "marked twice"),
        ([("call-a", "done")], None, "is not uncertain; the uncertain calls are: call-b, call-c"),
        ([("call-b", "rerun")], "text", "--result goes with --done or --failed"),
    ],
)
async def test_reconcile_checks_every_mark_before_writing_any(
    url: str,
    workspace: Path,
    marks: list[tuple[str, ops.CallVerdict]],
    result: str | None,
    message: str,
) -> None:
    async with await open_bus(url) as bus:
        await crashed_run(bus, workspace, None)
        with pytest.raises(UsageError, match=message):
            await ops.reconcile(bus, "r-crash", marks, result=result)
        logs = await CheckpointStore(bus).calls("r-crash")
        assert {k: v.status for k, v in logs.items()} == {
            "call-a": "completed",
            "call-b": "started",
            "call-c": "started",
        }


async def test_recover_run_waits_for_a_live_lease_unless_forced(
    url: str, workspace: Path, agent_module: str
) -> None:
    async with await open_bus(url) as bus:
        await crashed_run(bus, workspace, f"{agent_module}:three")
        await ops.reconcile(bus, "r-crash", [("call-b", "rerun"), ("call-c", "rerun")])
        await CheckpointStore(bus).hold("r-crash", "another-process", ttl=60)
        with pytest.raises(RunStillRunning):
            await ops.recover_run(bus, "r-crash", approver=AllowAll())
        assert lines(workspace) == []
        result = await ops.recover_run(bus, "r-crash", approver=AllowAll(), force=True)
    # The two re-run calls run side by side (allowed calls of a batch are concurrent), so
    # the file's order is theirs; the result keeps call order.
    assert result.completed and sorted(lines(workspace)) == ["b", "c"]
    assert result.text == "finished: appended a | appended b | appended c"


async def test_close_cancelled_answers_every_open_call_and_finishes_the_run(
    url: str, workspace: Path
) -> None:
    async with await open_bus(url) as bus:
        await crashed_run(bus, workspace, None)
        checkpoints = CheckpointStore(bus)
        state = (await checkpoints.load("r-crash")).state
        await ops.close_cancelled(checkpoints, state)
        closed = await checkpoints.load("r-crash")
    assert closed.status == "finished"
    assert closed.state.stop_cause is StopCause.CANCELLED
    assert closed.state.unanswered_calls() == []
    results = {r.call_id: (r.content, r.is_error) for r in closed.state.messages[-1].tool_results}
    assert results == {
        "call-a": (ops.CANCELLED_CALL, True),
        "call-b": (ops.CANCELLED_CALL, True),
        "call-c": (ops.CANCELLED_CALL, True),
    }


async def test_close_cancelled_keeps_a_result_the_state_has(url: str, workspace: Path) -> None:
    """A call whose result the run had recorded keeps it: only calls that never ran are
    answered "cancelled"."""
    from tiller.state import CallRecord

    async with await open_bus(url) as bus:
        checkpoints = CheckpointStore(bus)
        call = ToolCall(id="c1", name="append", arguments='{"text": "x"}')
        state = RunState(run_id="r-c", thread_id="t", messages=[UserMessage(text="go")])
        state.messages.append(AssistantMessage(id="r-c-msg-1", tool_calls=(call,)))
        state.calls["c1"] = CallRecord(
            call_id="c1", name="append", step=1, status="completed", result="appended x"
        )
        await checkpoints.save(state, "running")
        await ops.close_cancelled(checkpoints, state)
        closed = await checkpoints.load("r-c")
    (result,) = closed.state.messages[-1].tool_results
    assert (result.content, result.is_error) == ("appended x", False)


async def test_close_cancelled_leaves_a_run_someone_claimed(url: str, workspace: Path) -> None:
    async with await open_bus(url) as bus:
        await crashed_run(bus, workspace, None)
        checkpoints = CheckpointStore(bus)
        loaded = await checkpoints.load("r-crash")
        await checkpoints.save(loaded.state, "finished", expected=loaded.revision)
        await ops.close_cancelled(checkpoints, loaded.state)
        after = await checkpoints.load("r-crash")
    assert after.state.stop_cause is None  # the other writer's checkpoint stands


async def test_a_recovered_run_folds_a_stored_steer_once_and_not_one_folded_before(
    url: str, workspace: Path, agent_module: str
) -> None:
    """The run's stored steers reach its recovery (issue 16): one sent while it was down
    is folded, once; one its checkpoint says was folded before the crash is not again."""
    async with await open_bus(url) as bus:
        await crashed_run(bus, workspace, f"{agent_module}:three")
        await ops.reconcile(bus, "r-crash", [("call-b", "rerun"), ("call-c", "rerun")])
        control, checkpoints = ControlStore(bus), CheckpointStore(bus)
        before = await control.steer("r-crash", "folded before the crash")
        crashed = await checkpoints.load("r-crash")
        crashed.state.folded_steers.append(before)
        await checkpoints.save(crashed.state, "running")
        await control.steer("r-crash", "sent while it was down")
        result = await ops.recover_run(bus, "r-crash", approver=AllowAll())
    assert result.completed
    texts = [m.text for m in result.state.messages if isinstance(m, UserMessage)]
    assert sum(t.count("sent while it was down") for t in texts) == 1
    assert not any("folded before the crash" in t for t in texts)


async def test_a_cancel_requested_while_the_run_was_down_stops_its_recovery(
    url: str, workspace: Path, agent_module: str
) -> None:
    async with await open_bus(url) as bus:
        await crashed_run(bus, workspace, f"{agent_module}:three")
        await ops.reconcile(bus, "r-crash", [("call-b", "rerun"), ("call-c", "rerun")])
        await ControlStore(bus).request_cancel("r-crash", "stop it, please")
        result = await ops.recover_run(bus, "r-crash", approver=AllowAll())
    assert result.stop_cause is StopCause.CANCELLED
    assert lines(workspace) == []
