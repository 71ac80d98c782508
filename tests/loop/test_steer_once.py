"""Steering reaches a run exactly once across a crash and a takeover (issue 16).

Worker A runs R durably on a real SQLite file, with a control watcher: a steer stored
before the run is folded at its first step and checkpointed. A's second call then hangs
(its process is as good as dead); a second steer arrives, which A's watcher pushes into
A's queue but A never folds. A's lease lapses (the fake clock) and R is recovered with a
new steering queue and a new watcher, as a process that continues the run starts them:
the first steer must not be folded again, and the second must not be lost.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tiller.cancel import CancellationToken
from tiller.conversation import UserMessage
from tiller.loop import Agent, RunContext, RunOptions, SteeringQueue, recover
from tiller.model import ScriptedModel
from tiller.policy import AllowAll
from tiller.state import RunState, StopCause
from tiller.store import CheckpointStore, ControlStore, open_bus
from tiller.tools import ExecContext, tool

TTL = 30.0
FIRST, SECOND = "use the blue one", "and keep it short"


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@tool
def note(ctx: ExecContext) -> str:
    """Do a harmless thing (the step whose boundary checkpoints the folded steer)."""
    return "noted"


class _Noticing(SteeringQueue):
    """A steering queue that says when a steer with an id was pushed into it."""

    def __init__(self) -> None:
        super().__init__()
        self.pushed: list[str] = []
        self.changed = asyncio.Event()

    def push(self, text: str, steer_id: str | None = None) -> None:
        super().push(text, steer_id)
        if steer_id is not None:
            self.pushed.append(steer_id)
            self.changed.set()


def _call(name: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": {}}]}


def _times_folded(state: RunState, text: str) -> int:
    return sum(
        message.text.count(text) for message in state.messages if isinstance(message, UserMessage)
    )


@pytest.mark.parametrize("told", [True, False], ids=["watcher-told", "watcher-not-told"])
async def test_a_steer_folded_before_a_crash_is_folded_once_and_a_pushed_one_is_not_lost(
    tmp_path: Path, told: bool
) -> None:
    clock = _Clock()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    entered, release = asyncio.Event(), asyncio.Event()

    @tool
    async def stuck(ctx: ExecContext) -> str:
        """Hang until released (the worker's process is paused, as good as dead)."""
        entered.set()
        await release.wait()
        return "stuck done"

    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}", clock=clock) as bus:
        control, checkpoints = ControlStore(bus), CheckpointStore(bus, "cp")
        first_id = await control.steer("R", FIRST)
        options = RunOptions(checkpoint_bucket="cp", lease_ttl=TTL)
        queue_a = _Noticing()
        ctx_a = RunContext.sandboxed(workspace, AllowAll()).with_store(bus)
        worker_a = Agent(ScriptedModel([_call("note"), _call("stuck"), "a done"]), [note, stuck])
        watcher_a = control.watch(
            "R", cancel=CancellationToken(), steering=queue_a, poll_interval=0.05
        )
        async with watcher_a:
            running = asyncio.create_task(
                worker_a.run_in(ctx_a.with_queued_input(queue_a), "go", options, run_id="R")
            )
            async with asyncio.timeout(10):
                await entered.wait()
            second_id = await control.steer("R", SECOND)
            async with asyncio.timeout(10):
                while second_id not in queue_a.pushed:  # pushed into A's queue, never folded
                    queue_a.changed.clear()
                    await queue_a.changed.wait()
            stored = await checkpoints.load("R")
            assert _times_folded(stored.state, FIRST) == 1
            assert stored.state.folded_steers == [first_id]

            # A is as good as dead: its lease lapses; a person says its stuck call ran.
            clock.now += TTL + 1
            calls = await checkpoints.calls("R")
            (stuck_call,) = (c for c, log in calls.items() if log.status != "completed")
            await checkpoints.mark_call("R", stuck_call, content="done", is_error=False)
            queue_b = SteeringQueue()
            skip = stored.state.folded_steers if told else ()
            watcher_b = control.watch(
                "R", cancel=CancellationToken(), steering=queue_b, poll_interval=0.05, skip=skip
            )
            worker_b = Agent(ScriptedModel(["b done"], per_run=False), [note, stuck])
            async with watcher_b:
                recovered = await recover(
                    "R",
                    bus,
                    agent=worker_b,
                    ctx=ctx_a.with_queued_input(queue_b),
                    bucket="cp",
                )
            assert recovered.completed
            assert _times_folded(recovered.state, FIRST) == 1
            assert _times_folded(recovered.state, SECOND) == 1
            assert recovered.state.folded_steers == [first_id, second_id]
            final = await checkpoints.load("R")
            assert _times_folded(final.state, FIRST) == 1
            assert _times_folded(final.state, SECOND) == 1

            release.set()  # A wakes up, and is fenced
            async with asyncio.timeout(10):
                stale = await running
            assert stale.stop_cause is StopCause.ERROR


def test_a_queue_carries_a_steers_id_and_local_text_has_none() -> None:
    queue = SteeringQueue()
    queue.push("  typed here ")
    queue.push("stored", "0000000000000001-abcdef01")
    queue.push("   ")
    assert queue.drain_with_ids() == [("typed here", None), ("stored", "0000000000000001-abcdef01")]
    queue.push("again")
    assert queue.drain() == ["again"] and not queue
