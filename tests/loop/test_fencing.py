"""Fencing, end to end (issue 16): a run taken over while its worker was stuck stops there.

Worker A runs R through `Agent.run_in` with a durable store; its first tool call hangs
(a paused process). Meanwhile R is recovered elsewhere — after A's lease lapsed (the fake
clock), or forced (`tiller runs resume --force`) while it is still live — and the new
holder finishes it. When A's call returns, A's run stops with `LeaseLost`: it records
nothing more, and its next tool call (a line appended to a file) never runs. On memory,
SQLite and the real NATS.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tiller.loop import Agent, PauseOnWrites, ResumeReplayBlocked, RunContext, RunOptions, recover
from tiller.model import ScriptedModel
from tiller.policy import AllowAll
from tiller.state import StopCause
from tiller.store import Bus, CheckpointStore, EventLog, open_bus
from tiller.tools import ExecContext, tool

NATS_URL = "nats://127.0.0.1:4222"
TTL = 30.0


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@tool
def append(text: str, ctx: ExecContext) -> str:
    """Append a line to log.txt (the side effect a stale worker must not cause)."""
    with (ctx.workdir / "log.txt").open("a") as log:
        log.write(text + "\n")
    return f"appended {text}"


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _lines(workspace: Path) -> list[str]:
    path = workspace / "log.txt"
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture(params=["memory", "sqlite", "nats"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Bus, _Clock]]:
    clock = _Clock()
    namespace = f"fence{uuid.uuid4().hex[:12]}"
    url = {
        "memory": "memory://",
        "sqlite": f"sqlite:///{tmp_path / 'store.db'}",
        "nats": NATS_URL,
    }[request.param]
    bus = await open_bus(url, clock=clock, namespace=namespace if request.param == "nats" else "")
    try:
        yield bus, clock
    finally:
        if request.param == "nats":
            await bus.delete_namespace()  # type: ignore[attr-defined]
        await bus.aclose()


@pytest.mark.parametrize("how", ["lapsed", "forced"])
async def test_a_run_taken_over_stops_its_stale_worker_before_its_next_call(
    store: tuple[Bus, _Clock], tmp_path: Path, how: str
) -> None:
    bus, clock = store
    workspace = tmp_path / "ws"
    workspace.mkdir()
    entered, release = asyncio.Event(), asyncio.Event()

    @tool
    async def stuck(ctx: ExecContext) -> str:
        """Hang until released (the worker is paused, or cut off from the store)."""
        entered.set()
        await release.wait()
        return "stuck done"

    ctx = RunContext.sandboxed(workspace, AllowAll()).with_store(bus)
    options = RunOptions(checkpoint_bucket="cp", lease_ttl=TTL)
    worker_a = Agent(
        ScriptedModel([_call("stuck"), _call("append", text="by a"), "a done"]), [stuck, append]
    )
    running = asyncio.create_task(worker_a.run_in(ctx, "go", options, run_id="R"))
    async with asyncio.timeout(10):
        await entered.wait()

    checkpoints = CheckpointStore(bus, "cp")
    (stuck_call,) = (await checkpoints.calls("R")).keys()
    if how == "lapsed":
        clock.now += TTL + 1  # A's lease lapsed: as if its process had died
    # The stuck call is uncertain (started, never completed): a person says it was done.
    await checkpoints.mark_call("R", stuck_call, content="done, said a person", is_error=False)
    worker_b = Agent(
        ScriptedModel([_call("append", text="by b"), "b done"], per_run=False), [stuck, append]
    )
    recovered = await recover("R", bus, agent=worker_b, ctx=ctx, bucket="cp", force=how == "forced")
    assert recovered.completed
    after_b = await checkpoints.load("R")
    # The recovery's claim took epoch 2 (fencing A at once), the recovered run's lease 3.
    assert (after_b.status, after_b.epoch) == ("finished", 3)
    log_after_b = await EventLog(bus).read("R")

    release.set()  # A wakes up and goes on, not knowing it was taken over
    async with asyncio.timeout(10):
        stale = await running
    assert stale.stop_cause is StopCause.ERROR
    assert stale.error is not None and "LeaseLost" in stale.error
    assert "run 'R' was taken over by another process" in stale.error
    assert "holds epoch 1" in stale.error and "epoch is now 3" in stale.error
    # What A produced stays in its result (law 8): its call's result, in the transcript.
    assert any(
        result.call_id == stuck_call
        for message in stale.state.messages
        for result in getattr(message, "tool_results", ())
    )
    # A's next call never ran: only B's line is on disk.
    assert _lines(workspace) == ["by b"]
    # And A wrote nothing more: the checkpoint, the call records and the log are B's.
    final = await checkpoints.load("R")
    assert (final.revision, final.status, final.epoch) == (after_b.revision, "finished", 3)
    calls = await checkpoints.calls("R")
    assert calls[stuck_call].content == "done, said a person"
    assert await EventLog(bus).read("R") == log_after_b
    holder = await checkpoints.holder("R")
    assert holder is None  # B released its lease; A did not take or write one


async def test_the_stale_workers_lease_keeper_stops_renewing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The keeper renews every third of the lease's time to live (0.1 s here): after the
    takeover its next renewal is refused with `LeaseLost`, and it stops for good rather
    than fight the new holder."""
    clock = _Clock()
    entered, release = asyncio.Event(), asyncio.Event()

    @tool
    async def stuck(ctx: ExecContext) -> str:
        """Hang until released."""
        entered.set()
        await release.wait()
        return "stuck done"

    async with await open_bus("memory://", clock=clock) as bus:
        ctx = RunContext.sandboxed(tmp_path, AllowAll()).with_store(bus)
        options = RunOptions(checkpoint_bucket="cp", lease_ttl=0.3)
        worker_a = Agent(ScriptedModel([_call("stuck"), "a done"]), [stuck])
        running = asyncio.create_task(worker_a.run_in(ctx, "go", options, run_id="R"))
        async with asyncio.timeout(10):
            await entered.wait()
        await asyncio.sleep(0.25)  # A's keeper renews: it holds the run
        checkpoints = CheckpointStore(bus, "cp")
        holder = await checkpoints.holder("R")
        assert holder is not None
        (stuck_call,) = (await checkpoints.calls("R")).keys()
        await checkpoints.mark_call("R", stuck_call, content="done", is_error=False)
        worker_b = Agent(ScriptedModel(["b done"], per_run=False), [stuck])
        with caplog.at_level("WARNING", logger="tiller.loop._lease_keeper"):
            assert (
                await recover("R", bus, agent=worker_b, ctx=ctx, bucket="cp", force=True)
            ).completed
            await asyncio.sleep(0.5)  # several of A's renewal times
        kept = [r.getMessage() for r in caplog.records if r.name == "tiller.loop._lease_keeper"]
        assert len(kept) == 1 and kept[0].startswith("stopped renewing the lease R/lease")
        assert "holds epoch 1" in kept[0]
        release.set()
        async with asyncio.timeout(10):
            stale = await running
        assert stale.stop_cause is StopCause.ERROR


async def test_a_call_started_just_before_the_recovery_claimed_blocks_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recovery checks uncertain calls, then claims. A process that was alive after
    all may start a call in between: the claim fences it, and the calls are read again
    after the claim, so the recovery blocks on that call instead of running it twice."""
    async with await open_bus("memory://") as bus:
        workspace = tmp_path / "ws"
        ctx = RunContext.sandboxed(workspace, AllowAll()).with_store(bus)
        paused = await Agent(ScriptedModel([_call("append", text="x")]), [append]).run_in(
            ctx, "go", RunOptions(review_policy=PauseOnWrites(), checkpoint_bucket="cp"), run_id="R"
        )
        (call,) = paused.state.unanswered_calls()
        claim = CheckpointStore.claim

        async def started_just_before(self: CheckpointStore, *args: Any, **kw: Any) -> int:
            await self.call_started("R", call.id)  # the other process starts it
            return await claim(self, *args, **kw)

        monkeypatch.setattr(CheckpointStore, "claim", started_just_before)
        options = RunOptions(checkpoint_bucket="cp")
        recovering = Agent(ScriptedModel(["done"], per_run=False), [append])
        with pytest.raises(ResumeReplayBlocked, match=call.id):
            await recover("R", bus, agent=recovering, ctx=ctx, options=options, bucket="cp")
        assert _lines(workspace) == []
        checkpoints = CheckpointStore(bus, "cp")
        assert (await checkpoints.load("R")).status == "resumed"
        monkeypatch.undo()
        # A person says it never ran: a later recovery claims the `resumed` run and runs it.
        await checkpoints.forget_call("R", call.id)
        done = await recover("R", bus, agent=recovering, ctx=ctx, options=options, bucket="cp")
        assert done.completed
        assert _lines(workspace) == ["x"]
