"""`ExecContext`: safe test defaults, progress events, and the run's state from tools."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tiller import CancellationToken, Cancelled, UsageError
from tiller.conversation import ToolCall
from tiller.events import AgUiContext, CustomEvent, Event, StateSnapshotEvent
from tiller.tools import (
    PROGRESS_EVENT,
    ExecContext,
    Jail,
    LocalState,
    Outcome,
    Registry,
    StateAccess,
    tool,
)


def agui(state: Any = None) -> tuple[AgUiContext[Any], Any]:
    return AgUiContext.new({"threadId": "t1", "runId": "r1", "messages": [], "state": state})


def test_for_test_gives_safe_defaults(tmp_path: Path) -> None:
    ctx = ExecContext.for_test(tmp_path)
    assert ctx.workdir == ctx.jail.root == tmp_path.resolve()
    assert ctx.jail == Jail(tmp_path)
    assert not ctx.token.is_cancelled
    assert (ctx.call_id, ctx.step) == ("call-test", 1)
    assert ctx.state == {}
    ctx.progress("nobody listens")  # dropped, not an error
    assert isinstance(ctx.state_access, StateAccess)


def test_for_test_takes_overrides(tmp_path: Path) -> None:
    token = CancellationToken()
    tools = Jail(tmp_path, shell_timeout=3)
    ctx = ExecContext.for_test(tmp_path, call_id="c9", step=4, token=token, jail=tools, state=[1])
    assert (ctx.call_id, ctx.step, ctx.token, ctx.jail, ctx.state) == ("c9", 4, token, tools, [1])


def test_progress_emits_a_custom_event(tmp_path: Path) -> None:
    seen: list[Event] = []
    ctx = ExecContext.for_test(tmp_path, call_id="r1-call-2", emit=seen.append)
    ctx.progress("indexing", 0.25)
    ctx.progress("still going")
    assert seen == [
        CustomEvent(
            name=PROGRESS_EVENT,
            value={
                "toolCallId": "r1-call-2",
                "kind": "status",
                "message": "indexing",
                "fraction": 0.25,
            },
        ),
        CustomEvent(
            name=PROGRESS_EVENT,
            value={"toolCallId": "r1-call-2", "kind": "status", "message": "still going"},
        ),
    ]
    with pytest.raises(UsageError, match="between 0 and 1"):
        ctx.progress("too far", 1.5)


def test_local_state_updates_in_place_or_by_replacement() -> None:
    state = LocalState({"n": 1})
    state.update_state(lambda s: s.update(n=2))
    assert state.state == {"n": 2}
    state.update_state(lambda s: {"n": s["n"] + 1})
    assert state.state == {"n": 3} and state.updates == 2


@tool
def count_up(ctx: ExecContext) -> str:
    """Count up in the run's state, from a worker thread."""
    ctx.progress("counting", 0.5)
    ctx.update_state(lambda s: s.update(count=s.get("count", 0) + 1, thread=threading.get_ident()))
    return f"count is {ctx.state['count']}"


@tool
async def count_up_async(ctx: ExecContext) -> str:
    """Count up in the run's state, on the loop."""
    ctx.update_state(lambda s: {**s, "count": s.get("count", 0) + 1})
    return f"count is {ctx.state['count']}"


async def test_tools_change_the_run_state_and_it_is_published(tmp_path: Path) -> None:
    run, receiver = agui({"count": 0})
    registry = Registry([count_up, count_up_async])
    ctx = ExecContext(
        token=CancellationToken(),
        call_id="r1-call-1",
        step=1,
        workdir=tmp_path,
        jail=Jail(tmp_path),
        emit=run.emit,
        state_access=run,
    )
    first = await registry.execute(ToolCall(id="r1-call-1", name="count_up"), ctx)
    second = await registry.execute(ToolCall(id="r1-call-1", name="count_up_async"), ctx)
    assert (first.result.content, second.result.content) == ("count is 1", "count is 2")
    # The sync tool's change ran on the loop's thread, not the worker's.
    assert run.state["thread"] == threading.get_ident()
    events = receiver.drain()
    assert events[0] == CustomEvent(
        name=PROGRESS_EVENT,
        value={
            "toolCallId": "r1-call-1",
            "kind": "status",
            "message": "counting",
            "fraction": 0.5,
        },
    )
    assert isinstance(events[1], StateSnapshotEvent)
    assert events[1].snapshot == {"count": 1, "thread": threading.get_ident()}
    # The async tool's change is published too (a delta or a snapshot, whichever is smaller).
    assert [e.type for e in events[2:]] in (["STATE_DELTA"], ["STATE_SNAPSHOT"])
    assert run.state["count"] == 2


async def test_progress_after_the_run_was_cancelled_stops_the_tool(tmp_path: Path) -> None:
    token = CancellationToken()
    run, _ = AgUiContext.new({"threadId": "t1", "runId": "r1", "messages": []}, cancel=token)
    ctx = ExecContext.for_test(tmp_path, emit=run.emit)
    token.cancel()
    with pytest.raises(Cancelled):
        await Registry([count_up]).execute(ToolCall(id="c", name="count_up"), ctx)


def test_update_state_without_a_loop_applies_directly(tmp_path: Path) -> None:
    ctx = ExecContext.for_test(tmp_path, state={"n": 0})
    ctx.update_state(lambda s: s.update(n=1))
    assert ctx.state == {"n": 1}
    assert isinstance(ctx.state_access, LocalState) and ctx.state_access.updates == 1


async def test_a_context_is_immutable(tmp_path: Path) -> None:
    ctx = ExecContext.for_test(tmp_path)
    with pytest.raises(AttributeError):
        ctx.step = 2  # type: ignore[misc]
    done = await Registry([count_up_async]).execute(ToolCall(id="c", name="count_up_async"), ctx)
    assert done.outcome is Outcome.OK
