"""FilterToolCalls, ToolResultToState and SubagentVisibility, on real streams."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterable
from typing import Any

import jsonpatch
import pytest

from tiller import ProtocolViolation
from tiller.events import (
    AgUiContext,
    Event,
    FilterToolCalls,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    SubagentVisibility,
    ToolCallChunkEvent,
    ToolResultToState,
    Transformer,
    run_agent,
)
from tiller.testing import assert_valid_stream


def run(*transformers: Transformer) -> tuple[AgUiContext[Any], Any]:
    return AgUiContext.new(
        {"threadId": "t", "runId": "r", "messages": []}, transformers=transformers
    )


def valid(rx: Any) -> list[dict[str, Any]]:
    return assert_valid_stream([RunStartedEvent("t", "r"), *rx.drain(), RunFinishedEvent("t", "r")])


def calls(ctx: AgUiContext[Any]) -> None:
    for name in ("keep", "drop", "keep"):
        with ctx.tool_call(name) as call:
            call.args_json({"n": name})
            call.encrypted_value("sig")
            call.result("done")


def test_filter_deny_drops_whole_calls() -> None:
    ctx, rx = run(FilterToolCalls.deny(["drop"]))
    calls(ctx)
    wire = valid(rx)
    ids = {e.get("toolCallId") or e.get("entityId") for e in wire[1:-1]}
    assert ids == {"r-call-1", "r-call-3"}


def test_filter_allow_keeps_only_named_calls() -> None:
    ctx, rx = run(FilterToolCalls.allow(["drop"]))
    calls(ctx)
    wire = valid(rx)
    assert {e.get("toolCallId") or e.get("entityId") for e in wire[1:-1]} == {"r-call-2"}


def test_filter_handles_chunked_calls() -> None:
    ctx, rx = run(FilterToolCalls.deny(["drop"]))
    ctx.emit(ToolCallChunkEvent("c1", "drop", None, '{"a":'))
    ctx.emit(ToolCallChunkEvent(delta="1}"))
    ctx.emit(ToolCallChunkEvent("c2", "keep", None, "{}"))
    wire = valid(rx)
    assert [e.get("toolCallId") for e in wire[1:-1]] == ["c2"]


def test_tool_result_to_state_snapshot_and_delta() -> None:
    ctx, rx = run(ToolResultToState.snapshot("set_state"), ToolResultToState.delta("patch_state"))
    ctx.tool_call("set_state").result({"todo": ["a"]})
    ctx.tool_call("patch_state").result([{"op": "add", "path": "/todo/-", "value": "b"}])
    ctx.tool_call("patch_state").result("not json at all")
    ctx.tool_call("other").result({"ignored": True})
    wire = valid(rx)
    kinds = [e["type"] for e in wire]
    assert kinds.count("TOOL_CALL_RESULT") == 4
    assert [e for e in wire if e["type"] == "STATE_SNAPSHOT"] == [
        {"type": "STATE_SNAPSHOT", "snapshot": {"todo": ["a"]}}
    ]
    assert [e["delta"] for e in wire if e["type"] == "STATE_DELTA"] == [
        [{"op": "add", "path": "/todo/-", "value": "b"}]
    ]


def test_tool_result_to_state_replacing() -> None:
    ctx, rx = run(ToolResultToState.snapshot("set_state").replacing())
    ctx.tool_call("set_state").result({"x": 1})
    kinds = [e["type"] for e in valid(rx)]
    assert "TOOL_CALL_RESULT" not in kinds and "STATE_SNAPSHOT" in kinds


def subagent_work(ctx: AgUiContext[Any]) -> None:
    ctx.say("parent")
    with ctx.subagent("child"):
        ctx.say("child")
        with ctx.subagent("grandchild"):
            ctx.tool_call("t").result("x")
    ctx.say("parent again")


def test_subagent_visibility_modes() -> None:
    ctx, rx = run(SubagentVisibility.ATTRIBUTED)
    subagent_work(ctx)
    attributed = valid(rx)
    assert sum(1 for e in attributed if "subagentRunId" in e) > 4

    ctx, rx = run(SubagentVisibility.INLINE)
    subagent_work(ctx)
    inline = valid(rx)
    assert not any(e["type"].startswith("SUBAGENT_") or "subagentRunId" in e for e in inline)
    assert [e["delta"] for e in inline if e["type"] == "TEXT_MESSAGE_CONTENT"] == [
        "parent",
        "child",
        "parent again",
    ]

    ctx, rx = run(SubagentVisibility.HIDDEN)
    subagent_work(ctx)
    hidden = valid(rx)
    assert [e["delta"] for e in hidden if e["type"] == "TEXT_MESSAGE_CONTENT"] == [
        "parent",
        "parent again",
    ]
    assert not any(e["type"].startswith("TOOL_CALL") for e in hidden)


# ── state events the state manager did not make (issue 14, item 4) ─────────────────


def client_state(wire: list[dict[str, Any]]) -> Any:
    """The state a client rebuilds from the stream: last snapshot plus the deltas since."""
    state: Any = None
    for event in wire:
        if event["type"] == "STATE_SNAPSHOT":
            state = copy.deepcopy(event["snapshot"])
        elif event["type"] == "STATE_DELTA":
            state = jsonpatch.apply_patch(state, event["delta"])
    return state


FILLER = "x" * 200  # large enough that a small change goes out as a delta


def stateful(*transformers: Transformer) -> tuple[AgUiContext[Any], Any]:
    return AgUiContext.new(
        {
            "threadId": "t",
            "runId": "r",
            "messages": [],
            "state": {"todo": [], "filler": FILLER},
        },
        transformers=transformers,
    )


def test_a_tool_result_snapshot_becomes_the_state_the_next_publish_builds_on() -> None:
    """Broke on main: ToolResultToState's snapshot went past the state manager, so the
    next publish diffed against the old state: the client's todo list came out ["b", "a"]
    (a delta made for another base), and the live state never had "a"."""
    ctx, rx = stateful(ToolResultToState.snapshot("set_todo"))
    ctx.publish_state()
    ctx.tool_call("set_todo").result({"todo": ["a"], "filler": FILLER})
    assert ctx.state == {"todo": ["a"], "filler": FILLER}
    ctx.state_mut()["todo"].append("b")
    ctx.publish_state()
    wire = valid(rx)
    assert wire[-2]["type"] == "STATE_DELTA"  # a delta, and it applies
    assert client_state(wire) == {"todo": ["a", "b"], "filler": FILLER}


def test_a_tool_result_delta_is_applied_to_the_live_state_too() -> None:
    ctx, rx = stateful(ToolResultToState.delta("patch_todo").replacing())
    ctx.publish_state()
    ctx.tool_call("patch_todo").result([{"op": "add", "path": "/todo/-", "value": "a"}])
    ctx.state_mut()["todo"].append("b")
    ctx.publish_state()
    wire = valid(rx)
    assert client_state(wire) == ctx.state == {"todo": ["a", "b"], "filler": FILLER}


def test_a_tool_result_delta_that_does_not_apply_is_refused() -> None:
    """A tool's patch for another state is refused by the verifier, not sent for the
    client to fail on (AGUI302)."""
    ctx, rx = stateful(ToolResultToState.delta("patch_todo").replacing())
    ctx.publish_state()
    with pytest.raises(ProtocolViolation, match="DeltaDoesNotApply"):
        ctx.tool_call("patch_todo").result([{"op": "remove", "path": "/missing"}])
    assert ctx.state == {"todo": [], "filler": FILLER}
    assert "STATE_DELTA" not in [e.type for e in rx.drain()]


def test_a_snapshot_sent_by_hand_is_learned_too() -> None:
    """Broke on main: a STATE_SNAPSHOT the agent emitted itself left the manager behind,
    so the next publish's delta was made for a state the client no longer had."""
    ctx, rx = stateful()
    ctx.publish_state()
    ctx.emit(StateSnapshotEvent({"todo": ["by hand"], "filler": FILLER}))
    ctx.state_mut()["todo"].append("b")
    ctx.publish_state()
    assert client_state(valid(rx)) == {"todo": ["by hand", "b"], "filler": FILLER}


class DropDeltas:
    """Drops every STATE_DELTA: the client never gets what the manager sent."""

    def transform(self, event: Event) -> Iterable[Event]:
        return () if isinstance(event, StateDeltaEvent) else (event,)


def test_a_state_event_a_transformer_drops_makes_the_next_publish_a_snapshot() -> None:
    """Broke on main: the manager believed a dropped delta arrived, and based the next
    one on it (AGUI302 at the client)."""
    ctx, rx = stateful(DropDeltas())
    ctx.publish_state()
    ctx.state_mut()["todo"].append("a")
    ctx.publish_state()  # dropped
    ctx.state_mut()["todo"].append("b")
    ctx.publish_state()
    wire = valid(rx)
    assert [e["type"] for e in wire[1:-1]] == ["STATE_SNAPSHOT", "STATE_SNAPSHOT"]
    assert client_state(wire) == {"todo": ["a", "b"], "filler": FILLER}


class DropErrors:
    def transform(self, event: Event) -> Iterable[Event]:
        return () if isinstance(event, RunErrorEvent) else (event,)


async def test_a_transformer_that_drops_the_run_error_does_not_hang_the_stream() -> None:
    """The driver's last resort goes out past the transformers if they swallowed it."""

    async def agent(ctx: AgUiContext[Any]) -> None:
        raise RuntimeError("boom")

    stream = run_agent(
        agent, {"threadId": "t", "runId": "r", "messages": []}, transformers=[DropErrors()]
    )
    async with asyncio.timeout(10):  # a hang guard only: a healthy run takes milliseconds
        wire = assert_valid_stream(await stream.collect())
    assert wire[-1]["type"] == "RUN_ERROR"


def test_a_hand_sent_delta_is_judged_against_what_the_manager_sent_last() -> None:
    """The manager's own deltas are not re-applied by the verifier (they are valid by
    construction); a hand-sent delta after them is still judged against the client's
    current state, fetched from the manager."""
    ctx, rx = stateful()
    ctx.publish_state()
    ctx.state_mut()["todo"].append("a")
    ctx.publish_state()  # a trusted delta
    with pytest.raises(ProtocolViolation, match="DeltaDoesNotApply"):
        ctx.emit(StateDeltaEvent([{"op": "test", "path": "/todo", "value": []}]))
    ctx.emit(StateDeltaEvent([{"op": "replace", "path": "/todo/0", "value": "A"}]))
    ctx.state_mut()["todo"].append("b")
    ctx.publish_state()
    wire = valid(rx)
    assert client_state(wire) == ctx.state == {"todo": ["A", "b"], "filler": FILLER}


class DropOneDelta:
    def __init__(self) -> None:
        self.dropped = False

    def transform(self, event: Event) -> Iterable[Event]:
        if isinstance(event, StateDeltaEvent) and not self.dropped:
            self.dropped = True
            return ()
        return (event,)


def test_after_a_dropped_state_event_no_hand_sent_delta_goes_out_until_a_snapshot() -> None:
    """The manager's document is then ahead of the client's, so nothing can judge a
    delta until the snapshot the next publish sends."""
    ctx, rx = stateful(DropOneDelta())
    ctx.publish_state()
    ctx.state_mut()["todo"].append("a")
    ctx.publish_state()  # dropped
    with pytest.raises(ProtocolViolation, match="DeltaDoesNotApply"):
        ctx.emit(StateDeltaEvent([{"op": "add", "path": "/x", "value": 1}]))
    ctx.publish_state()  # the snapshot
    ctx.emit(StateSnapshotEvent({"todo": ["hand"], "filler": FILLER}))
    assert client_state(valid(rx)) == {"todo": ["hand"], "filler": FILLER}


def test_state_published_inside_an_inlined_subagent_is_not_applied_twice() -> None:
    """SubagentVisibility.INLINE copies each attributed event to strip its owner. The
    copy of the context's own delta must not read as a hand-sent one: applied again to
    the manager and the live state, it would append twice."""
    ctx, rx = stateful(SubagentVisibility.INLINE)
    ctx.publish_state()
    with ctx.subagent("helper"):
        ctx.state_mut()["todo"].append("a")
        ctx.publish_state()
        ctx.state_mut()["todo"].append("b")
        ctx.publish_state()
    wire = valid(rx)
    assert ctx.state == {"todo": ["a", "b"], "filler": FILLER}
    assert client_state(wire) == ctx.state
    assert [e["type"] for e in wire if e["type"].startswith("STATE")] == [
        "STATE_SNAPSHOT",
        "STATE_DELTA",
        "STATE_DELTA",
    ]
