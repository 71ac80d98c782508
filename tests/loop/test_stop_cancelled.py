"""A run's background work is stopped without swallowing a cancellation (DESIGN §4 law 8):
`LeaseKeeper.stop()` cancelled meanwhile ends cancelled once the renewing has ended, and
the session_end hooks, told in a task of their own, finish before a cancellation of the
run goes on; the run still gives its lease back, its stream still ends, and its result
says it was cancelled."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tiller.cancel import CancellationToken
from tiller.events import Event
from tiller.loop import Agent, RunContext, RunOptions
from tiller.loop._lease_keeper import LeaseKeeper
from tiller.model import ScriptedModel
from tiller.policy import AllowAll, FunctionHook, HookSet, SessionEndEvent
from tiller.state import StopCause
from tiller.store import MemoryBus, StoreDurability
from tiller.tools import tool

from .._slow_to_end import SlowToEnd, cancel_the_stopper


async def test_a_cancelled_lease_keeper_stop_ends_cancelled_after_the_renewing() -> None:
    slow = SlowToEnd()
    durability: Any = SimpleNamespace(renew_lease=slow.block)
    keeper = LeaseKeeper(durability, SimpleNamespace(key="run-1"), 0.03).start()  # type: ignore[arg-type]
    await slow.entered.wait()
    await cancel_the_stopper(slow, asyncio.create_task(keeper.stop()))


async def test_a_cancelled_lease_keeper_release_still_gives_the_lease_back() -> None:
    slow = SlowToEnd()
    released: list[Any] = []

    async def release_lease(lease: Any) -> None:
        released.append(lease)

    durability: Any = SimpleNamespace(renew_lease=slow.block, release_lease=release_lease)
    lease = SimpleNamespace(key="run-1")
    keeper = LeaseKeeper(durability, lease, 0.03).start()  # type: ignore[arg-type]
    await slow.entered.wait()
    await cancel_the_stopper(slow, asyncio.create_task(keeper.release()))
    assert released == [lease]


class _HeldSessionEnd:
    """A session_end hook that holds the run's end until released; the run's events and
    the hook's end go to one `timeline`, and the task the run's steps run in is noted."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.timeline: list[str] = []
        self.events: list[Event] = []
        self.run_task: asyncio.Task[Any] | None = None

    async def hook(self, event: SessionEndEvent) -> None:
        self.entered.set()
        await self.release.wait()
        self.timeline.append(f"session_end hook ended ({event.stop_cause})")

    def on_event(self, event: Event) -> None:
        self.events.append(event)
        if event.type in {"RUN_FINISHED", "RUN_ERROR"}:
            self.timeline.append(event.type)
        task = asyncio.current_task()
        if self.run_task is None and task is not None and task.get_name().startswith("tiller-"):
            self.run_task = task

    def context(self, workspace: Path, bus: MemoryBus) -> RunContext:
        hooks = HookSet(session_end=[FunctionHook(self.hook, timeout=None)])
        return RunContext.sandboxed(workspace, AllowAll()).with_store(bus).with_hooks(hooks)


async def test_a_cancel_from_outside_waits_for_the_session_end_hooks_then_goes_on(
    workspace: Path,
) -> None:
    bus = MemoryBus()
    held = _HeldSessionEnd()
    agent = Agent(ScriptedModel(["done"]))
    caller = asyncio.create_task(
        agent.run(
            "hi",
            context=held.context(workspace, bus),
            options=RunOptions(checkpoint_bucket="cp"),
            on_event=held.on_event,
            run_id="run-1",
        )
    )
    async with asyncio.timeout(10):  # a hang guard
        await held.entered.wait()
        assert held.run_task is not None and held.run_task is not caller
        held.run_task.cancel()  # not the run's token: someone killed the run's task
        await asyncio.sleep(0)  # one loop turn: the run takes the cancel, waits for the hook
        assert not held.run_task.done()
        held.release.set()
        result = await caller  # the caller was not cancelled: it is told the run was
    assert held.run_task.cancelled()
    assert result.stop_cause is StopCause.CANCELLED
    assert held.timeline == ["session_end hook ended (completed)", "RUN_ERROR"]
    assert held.events[-1].code == "CANCELLED"  # type: ignore[attr-defined]
    # The lease was given back: another process may take the run over at once.
    await StoreDurability(bus, "cp").take_lease("run-1", "another-process", 30)


async def test_a_token_fired_during_the_session_end_hooks_still_gives_a_cancelled_result(
    workspace: Path,
) -> None:
    bus = MemoryBus()
    held = _HeldSessionEnd()
    token = CancellationToken()
    agent = Agent(ScriptedModel(["done"]))
    running = asyncio.create_task(
        agent.run(
            "hi",
            context=held.context(workspace, bus),
            options=RunOptions(checkpoint_bucket="cp"),
            on_event=held.on_event,
            cancel=token,
            run_id="run-1",
        )
    )
    async with asyncio.timeout(10):  # a hang guard
        await held.entered.wait()
        token.cancel("the person pressed stop")
        held.release.set()
        result = await running
    assert result.stop_cause is StopCause.CANCELLED
    assert held.timeline == ["session_end hook ended (completed)", "RUN_FINISHED"]
    assert held.events[-1].outcome == {"type": "cancelled"}  # type: ignore[attr-defined]
    await StoreDurability(bus, "cp").take_lease("run-1", "another-process", 30)


async def test_a_cancel_from_outside_mid_step_tells_the_session_end_hooks_cancelled(
    workspace: Path,
) -> None:
    """The run's task is cancelled (not its token) while a tool runs: its result says
    `cancelled`, and so does what the session_end hooks are told (they heard `error`)."""
    entered = asyncio.Event()
    told: list[str] = []

    @tool(read_only=True)
    async def wait_for_ever() -> str:
        """Waits until cancelled."""
        entered.set()
        await asyncio.Event().wait()
        return "never"

    async def hook(event: SessionEndEvent) -> None:
        told.append(event.stop_cause)

    hooks = HookSet(session_end=[FunctionHook(hook, timeout=None)])
    agent = Agent(
        ScriptedModel([{"tool_calls": [{"name": "wait_for_ever"}]}, "done"]),
        tools=[wait_for_ever],
    )
    run_tasks: list[asyncio.Task[Any]] = []

    def on_event(_event: Event) -> None:
        task = asyncio.current_task()
        if not run_tasks and task is not None and task.get_name().startswith("tiller-"):
            run_tasks.append(task)

    caller = asyncio.create_task(
        agent.run(
            "hi",
            context=RunContext.sandboxed(workspace, AllowAll()).with_hooks(hooks),
            on_event=on_event,
        )
    )
    async with asyncio.timeout(10):  # a hang guard
        await entered.wait()
        (run_task,) = run_tasks
        assert run_task is not caller
        run_task.cancel()  # not the run's token: someone killed the run's task
        result = await caller
    assert result.stop_cause is StopCause.CANCELLED
    assert told == ["cancelled"]
