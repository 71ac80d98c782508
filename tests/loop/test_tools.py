"""Running tool calls: malformed arguments, failures the model reads, parallel calls in
call order, the step's shared output budget, and state published by tools."""

# Inline snapshots hold each transcript line whole, as the run wrote it.
# ruff: noqa: E501

from __future__ import annotations

import asyncio
from pathlib import Path

from inline_snapshot import snapshot
from pydantic import BaseModel

from tiller.conversation import UserMessage
from tiller.loop import Agent, RunContext, RunOptions
from tiller.model import ScriptedModel
from tiller.state import StopCause
from tiller.tools import ExecContext, Jail, ToolError, tool

from .._transcript import event_lines, transcript_of
from ._support import drive


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


# ── malformed arguments ──────────────────────────────────────────────────────────


async def test_arguments_that_end_as_non_json_are_an_error_result(ctx: RunContext) -> None:
    """A call the model finished writing, but not as JSON, is never run: it stays in the
    transcript with `{}` and an error result quoting what the model wrote, so the model can
    correct it, and it counts as malformed. (A call cut off mid-stream is dropped: law 1.)"""
    model = ScriptedModel([{"tool_calls": [{"name": "add", "arguments": '{"a": 1, "b":'}]}, "3"])
    run = await drive(Agent(model, [add]), "add", ctx)
    assert run.result.stop_cause is StopCause.COMPLETED
    assert transcript_of(run) == snapshot(
        [
            "user: add",
            "assistant r1-msg-1:",
            "call r1-call-1 add {}",
            'error r1-call-1 add: The arguments you wrote for add are not valid JSON, so the call did not run: \'{"a": 1, "b":\'. Call it again with a JSON object.',
            "assistant r1-msg-3: 3",
        ]
    )
    assert run.result.malformed_arguments == 1
    (entry,) = run.result.tool_trace
    assert entry.malformed_arguments and entry.arguments == "{}"
    # The model saw the error and answered in the next step.
    assert model.requests[1].messages[-1].tool_results[0].is_error


async def test_arguments_that_fail_the_schema_are_an_error_result(ctx: RunContext) -> None:
    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "add", "arguments": {"a": "one", "b": 2}},
                    {"name": "add", "arguments": "[1, 2]"},
                    {"name": "add", "arguments": {"a": 1, "b": 2, "c": 3}},
                    {"name": "add", "arguments": {"a": 1, "b": 2}},
                ]
            },
            "3",
        ]
    )
    run = await drive(Agent(model, [add]), "add", ctx)
    assert run.result.stop_cause is StopCause.COMPLETED
    assert transcript_of(run) == snapshot(
        [
            "user: add",
            "assistant r1-msg-1:",
            'call r1-call-1 add {"a":"one","b":2}',
            "call r1-call-2 add [1, 2]",
            'call r1-call-3 add {"a":1,"b":2,"c":3}',
            'call r1-call-4 add {"a":1,"b":2}',
            "error r1-call-1 add: invalid arguments for tool 'add': a: Input should be a valid integer, unable to parse string as an integer (got 'one')",
            "error r1-call-2 add: the arguments must be a JSON object, not an array. Send the arguments of 'add' as one JSON object.",
            "error r1-call-3 add: invalid arguments for tool 'add': c: is not a parameter of this tool",
            "result r1-call-4 add: 3",
            "assistant r1-msg-6: 3",
        ]
    )
    assert run.result.malformed_arguments == 3
    flags = [entry.malformed_arguments for entry in run.result.tool_trace]
    assert flags == [True, True, True, False]
    assert run.result.state.calls["r1-call-1"].malformed_arguments
    # The model reads every error and the run goes on.
    assert len(model.requests) == 2
    assert [r.call_id for r in model.requests[1].messages[-1].tool_results] == [  # type: ignore[union-attr]
        "r1-call-1",
        "r1-call-2",
        "r1-call-3",
        "r1-call-4",
    ]


async def test_tool_failures_are_results_the_model_reads(ctx: RunContext) -> None:
    @tool(read_only=True)
    def missing(path: str) -> str:
        """Read a file."""
        raise ToolError(f"no such file: {path}")

    @tool(read_only=True)
    async def broken() -> str:
        """Crash."""
        raise RuntimeError("boom")

    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "missing", "arguments": {"path": "a.txt"}},
                    {"name": "broken"},
                ]
            },
            "Both failed.",
        ]
    )
    run = await drive(Agent(model, [missing, broken]), "go", ctx)
    assert run.result.stop_cause is StopCause.COMPLETED
    assert transcript_of(run) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1:",
            'call r1-call-1 missing {"path":"a.txt"}',
            "call r1-call-2 broken {}",
            "error r1-call-1 missing: no such file: a.txt",
            "error r1-call-2 broken: tool broken failed: RuntimeError: boom",
            "assistant r1-msg-4: Both failed.",
        ]
    )
    assert [e.is_error for e in run.result.tool_trace] == [True, True]
    assert run.result.malformed_arguments == 0
    assert {r.status for r in run.result.state.calls.values()} == {"failed"}


async def test_a_tool_turn_whatever_its_finish_reason(ctx: RunContext) -> None:
    model = ScriptedModel(
        [{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}], "finish": "stop"}, "3"]
    )
    run = await drive(Agent(model, [add]), "add", ctx)
    assert run.results()[0].content == "3"
    assert len(model.requests) == 2


# ── parallel calls ───────────────────────────────────────────────────────────────


async def test_parallel_calls_run_concurrently_and_answer_in_call_order(
    ctx: RunContext,
) -> None:
    """Each tool waits for the other's event, so the step only finishes if they run at
    the same time; `second` finishes first, yet results follow call order."""
    first_waiting = asyncio.Event()
    second_done = asyncio.Event()
    finished: list[str] = []

    @tool(read_only=True)
    async def first() -> str:
        """First."""
        first_waiting.set()
        await second_done.wait()
        finished.append("first")
        return "one"

    @tool(read_only=True)
    async def second() -> str:
        """Second."""
        await first_waiting.wait()
        finished.append("second")
        second_done.set()
        return "two"

    model = ScriptedModel([{"tool_calls": [{"name": "first"}, {"name": "second"}]}, "done"])
    run = await drive(Agent(model, [first, second]), "go", ctx)
    assert finished == ["second", "first"]
    assert transcript_of(run) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1:",
            "call r1-call-1 first {}",
            "call r1-call-2 second {}",
            "result r1-call-1 first: one",
            "result r1-call-2 second: two",
            "assistant r1-msg-4: done",
        ]
    )
    assert [e.name for e in run.result.tool_trace] == ["first", "second"]
    assert event_lines(run.wire) == snapshot(
        [
            'RUN_STARTED r1 {"protocolVersion":"1.0"}',
            "STEP_STARTED step 1",
            "TOOL_CALL_START r1-call-1 first in r1-msg-1",
            "TOOL_CALL_ARGS r1-call-1 {}",
            "TOOL_CALL_END r1-call-1",
            "TOOL_CALL_START r1-call-2 second in r1-msg-1",
            "TOOL_CALL_ARGS r1-call-2 {}",
            "TOOL_CALL_END r1-call-2",
            "TOOL_CALL_RESULT r1-call-1 (r1-msg-2): one",
            "TOOL_CALL_RESULT r1-call-2 (r1-msg-3): two",
            "STEP_FINISHED step 1",
            "STEP_STARTED step 2",
            "TEXT_MESSAGE_START r1-msg-4",
            "TEXT_MESSAGE_CONTENT r1-msg-4 done",
            "TEXT_MESSAGE_END r1-msg-4",
            "STEP_FINISHED step 2",
            'RUN_FINISHED r1 {"result":{"stopCause":"completed"},"outcome":{"type":"success"}}',
        ]
    )
    assert {r.status for r in run.result.state.calls.values()} == {"completed"}


async def test_sync_tools_run_in_worker_threads_concurrently(ctx: RunContext) -> None:
    import threading

    barrier = threading.Barrier(2, timeout=5)

    @tool(read_only=True)
    def meet(name: str) -> str:
        """Wait for the other call at a barrier."""
        barrier.wait()
        return name

    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "meet", "arguments": {"name": "a"}},
                    {"name": "meet", "arguments": {"name": "b"}},
                ]
            },
            "done",
        ]
    )
    run = await drive(Agent(model, [meet]), "go", ctx)
    assert [r.content for r in run.results()] == ["a", "b"]


# ── the step's output budget ─────────────────────────────────────────────────────


async def test_the_output_budget_is_shared_in_call_order_and_spills(
    ctx: RunContext, workspace: Path
) -> None:
    """100 bytes for the step: the first call's 80 fit, the second keeps 20 and points
    to a spill file with all of its output — even though the second finished first."""
    second_done = asyncio.Event()

    @tool(read_only=True)
    async def big_a() -> str:
        """A lot of a."""
        await second_done.wait()
        return "a" * 80

    @tool(read_only=True)
    async def big_b() -> str:
        """A lot of b."""
        second_done.set()
        return "b" * 80

    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "big_a"}, {"name": "big_b"}]},
            {"tool_calls": [{"name": "big_b"}]},
            "done",
        ]
    )
    context = ctx.with_jail(Jail(workspace, output_budget_bytes=100))
    run = await drive(Agent(model, [big_a, big_b]), "go", context)
    a, b, next_turn = run.results()
    assert a.content == "a" * 80
    assert (
        b.content == "b" * 20 + "\n[output truncated: 60 bytes more in .tiller/spill/r1-call-2.txt]"
    )
    spilled = workspace / ".tiller" / "spill" / "r1-call-2.txt"
    assert spilled.read_text() == "b" * 80
    # Each turn has a budget of its own.
    assert next_turn.content == "b" * 80
    # What the UI saw is what the model read.
    emitted = {e["toolCallId"]: e["content"] for e in run.wire if e["type"] == "TOOL_CALL_RESULT"}
    assert emitted["r1-call-2"] == b.content


# ── state ────────────────────────────────────────────────────────────────────────


class Counter(BaseModel):
    count: int = 0


@tool(read_only=True)
def bump(ctx: ExecContext) -> str:
    """Count one more."""

    def increment(state: Counter) -> None:
        state.count += 1

    ctx.update_state(increment)
    return f"count is {ctx.state.count}"


async def test_tools_update_the_typed_state(ctx: RunContext) -> None:
    model = ScriptedModel(
        [{"tool_calls": [{"name": "bump"}]}, {"tool_calls": [{"name": "bump"}]}, "2"]
    )
    agent = Agent(model, [bump], state_type=Counter)
    run = await drive(agent, "go", ctx)
    assert transcript_of(run) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1:",
            "call r1-call-1 bump {}",
            "result r1-call-1 bump: count is 1",
            "assistant r1-msg-3:",
            "call r1-call-2 bump {}",
            "result r1-call-2 bump: count is 2",
            "assistant r1-msg-5: 2",
        ]
    )
    assert run.result.state.agent_state == {"count": 2}
    assert event_lines(run.wire) == snapshot(
        [
            'RUN_STARTED r1 {"protocolVersion":"1.0"}',
            "STEP_STARTED step 1",
            "TOOL_CALL_START r1-call-1 bump in r1-msg-1",
            "TOOL_CALL_ARGS r1-call-1 {}",
            "TOOL_CALL_END r1-call-1",
            'STATE_SNAPSHOT {"snapshot":{"count":1}}',
            "TOOL_CALL_RESULT r1-call-1 (r1-msg-2): count is 1",
            "STEP_FINISHED step 1",
            "STEP_STARTED step 2",
            "TOOL_CALL_START r1-call-2 bump in r1-msg-3",
            "TOOL_CALL_ARGS r1-call-2 {}",
            "TOOL_CALL_END r1-call-2",
            'STATE_SNAPSHOT {"snapshot":{"count":2}}',
            "TOOL_CALL_RESULT r1-call-2 (r1-msg-4): count is 2",
            "STEP_FINISHED step 2",
            "STEP_STARTED step 3",
            "TEXT_MESSAGE_START r1-msg-5",
            "TEXT_MESSAGE_CONTENT r1-msg-5 2",
            "TEXT_MESSAGE_END r1-msg-5",
            "STEP_FINISHED step 3",
            'RUN_FINISHED r1 {"result":{"stopCause":"completed"},"outcome":{"type":"success"}}',
        ]
    )

    # A continued run starts from the state the first one left.
    again = ScriptedModel(
        [{"tool_calls": [{"name": "bump", "id": "call-3-0"}]}, "3"], per_run=False
    )
    state = run.result.state.model_copy(deep=True)
    state.messages.append(UserMessage(text="once more"))
    agent = Agent(again, [bump], state_type=Counter)
    more = await drive(agent, state, ctx, RunOptions(), run_id="r2")
    assert more.results()[-1].content == "count is 3"
    assert more.result.state.agent_state == {"count": 3}
