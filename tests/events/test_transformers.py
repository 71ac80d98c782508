"""FilterToolCalls, ToolResultToState and SubagentVisibility, on real streams."""

from __future__ import annotations

from typing import Any

from tiller.events import (
    AgUiContext,
    FilterToolCalls,
    RunFinishedEvent,
    RunStartedEvent,
    SubagentVisibility,
    ToolCallChunkEvent,
    ToolResultToState,
    Transformer,
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
