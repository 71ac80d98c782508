"""Cancellation (DESIGN §4 laws 1, 2, 8): wherever the token fires — in the model stream,
mid tool-call arguments, while an approver decides, while tools run, between turns — the
run stops with `cancelled`, keeps what was produced, leaves a legal transcript and ends
its stream with `RUN_FINISHED{cancelled}`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from inline_snapshot import snapshot

from tiller.cancel import CancellationToken
from tiller.conversation import Usage
from tiller.events import Event
from tiller.loop import Agent, RunContext, SteeringQueue
from tiller.model import (
    ModelRequest,
    ScriptedModel,
    StreamEvent,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    TurnInfo,
    UsageReport,
)
from tiller.policy import AllowAll, Callback, Decision
from tiller.state import StopCause
from tiller.testing import assert_valid_stream
from tiller.tools import tool

from .._transcript import event_lines, event_types, transcript_of
from ._support import Run, assert_legal, drive

CANCELLED = {"type": "cancelled"}


async def cancel_when(reached: asyncio.Event, token: CancellationToken) -> None:
    await reached.wait()
    token.cancel("the test cancelled it")


def assert_cancelled(run: Run) -> None:
    assert run.result.stop_cause is StopCause.CANCELLED
    assert run.terminal["type"] == "RUN_FINISHED"
    assert run.terminal["outcome"] == CANCELLED
    assert not run.result.exhausted


async def stall(reached: asyncio.Event, *chunks: str) -> AsyncIterator[str]:
    """A turn that writes `chunks`, then never finishes (until cancelled)."""
    for chunk in chunks:
        yield chunk
    reached.set()
    await asyncio.Event().wait()


class StallingModel:
    """A model that streams `events`, then blocks: for cuts a script cannot express."""

    provider = "test"
    name = "stalling"
    context_window: int | None = None

    def __init__(self, events: Sequence[StreamEvent]) -> None:
        self.events = events
        self.requests: list[ModelRequest] = []
        self.blocked = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        for event in self.events:
            yield event
        self.blocked.set()
        await asyncio.Event().wait()

    async def aclose(self) -> None:
        pass


# ── during the model stream ──────────────────────────────────────────────────────


async def test_cancel_mid_text_keeps_the_partial_text(ctx: RunContext) -> None:
    reached = asyncio.Event()
    model = ScriptedModel(lambda messages, info: stall(reached, "Hello", " wor"))
    agent = Agent(model)
    token = CancellationToken()
    events: list[Event] = []
    async with asyncio.timeout(10):
        result, _ = await asyncio.gather(
            agent.run("hi", context=ctx, cancel=token, on_event=events.append, run_id="r1"),
            cancel_when(reached, token),
        )
    wire = assert_valid_stream(events)
    assert result.stop_cause is StopCause.CANCELLED
    assert result.text == "Hello wor"
    assert transcript_of(result) == snapshot(["user: hi", "assistant r1-msg-1: Hello wor"])
    assert result.usage_complete is False
    assert result.usage.requests == 1
    assert result.steps == 1
    assert event_types(wire) == snapshot(
        [
            "RUN_STARTED",
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STEP_FINISHED",
            "RUN_FINISHED",
        ]
    )
    assert event_lines(wire) == snapshot(
        [
            'RUN_STARTED r1 {"protocolVersion":"1.0"}',
            "STEP_STARTED step 1",
            "TEXT_MESSAGE_START r1-msg-1",
            "TEXT_MESSAGE_CONTENT r1-msg-1 Hello wor",
            "TEXT_MESSAGE_END r1-msg-1",
            "STEP_FINISHED step 1",
            'RUN_FINISHED r1 {"outcome":{"type":"cancelled"}}',
        ]
    )
    assert wire[-1]["outcome"] == CANCELLED
    assert_legal(result.state.messages)


async def test_cancel_during_a_delayed_turn(ctx: RunContext) -> None:
    """The scripted `delay` is interrupted at once: the model said nothing, so nothing
    is added, but the call was made and cut, so usage is incomplete."""
    model = ScriptedModel([{"text": "never said", "delay": 60}])
    token = CancellationToken()
    reached = asyncio.Event()

    def on_event(event: Event) -> None:
        if event.type == "STEP_STARTED":
            reached.set()

    run, _ = await asyncio.gather(
        drive(Agent(model), "hi", ctx.with_cancel(token), on_event=on_event),
        cancel_when(reached, token),
    )
    assert_cancelled(run)
    assert transcript_of(run) == snapshot(["user: hi"])
    assert run.result.usage_complete is False
    assert event_lines(run.wire) == snapshot(
        [
            'RUN_STARTED r1 {"protocolVersion":"1.0"}',
            "STEP_STARTED step 1",
            "STEP_FINISHED step 1",
            'RUN_FINISHED r1 {"outcome":{"type":"cancelled"}}',
        ]
    )


async def test_cancel_mid_tool_call_arguments_drops_the_call(ctx: RunContext) -> None:
    """Law 1: a call whose arguments never completed is neither announced nor run, and
    is not in the transcript; the text before it and the usage reported so far stay."""
    ran: list[str] = []

    @tool
    def write(path: str) -> str:
        """Write a file."""
        ran.append(path)
        return "written"

    model = StallingModel(
        [
            TextDelta("Writing the file."),
            UsageReport(Usage(input_tokens=10, output_tokens=3)),
            ToolCallStart(0, "c1", "write"),
            ToolCallArgsDelta(0, '{"path": "a.t'),
        ]
    )
    token = CancellationToken()
    run, _ = await asyncio.gather(
        drive(Agent(model, [write]), "go", ctx.with_cancel(token)),
        cancel_when(model.blocked, token),
    )
    assert_cancelled(run)
    assert transcript_of(run) == snapshot(["user: go", "assistant r1-msg-1: Writing the file."])
    assert run.result.usage == Usage(input_tokens=10, output_tokens=3, requests=1)
    assert run.result.usage_complete is False
    assert event_lines(run.wire) == snapshot(
        [
            'RUN_STARTED r1 {"protocolVersion":"1.0"}',
            "STEP_STARTED step 1",
            "TEXT_MESSAGE_START r1-msg-1",
            "TEXT_MESSAGE_CONTENT r1-msg-1 Writing the file.",
            "TEXT_MESSAGE_END r1-msg-1",
            "STEP_FINISHED step 1",
            'RUN_FINISHED r1 {"outcome":{"type":"cancelled"}}',
        ]
    )
    assert run.result.state.calls == {}
    assert ran == []


async def test_cancel_after_one_call_completed_mid_stream(ctx: RunContext) -> None:
    """A call that completed before the cut was announced, but the step never finished:
    nothing of it runs, and the transcript keeps only the text (no call without result)."""
    ran: list[str] = []

    @tool
    def write(path: str) -> str:
        """Write a file."""
        ran.append(path)
        return "written"

    model = StallingModel(
        [
            TextDelta("Two files."),
            ToolCallStart(0, "c1", "write"),
            ToolCallArgsDelta(0, '{"path": "a.txt"}'),
            ToolCallEnd(0),
            ToolCallStart(1, "c2", "write"),
            ToolCallArgsDelta(1, '{"pa'),
        ]
    )
    token = CancellationToken()
    run, _ = await asyncio.gather(
        drive(Agent(model, [write]), "go", ctx.with_cancel(token)),
        cancel_when(model.blocked, token),
    )
    assert_cancelled(run)
    assert transcript_of(run) == snapshot(["user: go", "assistant r1-msg-1: Two files."])
    assert event_lines(run.wire) == snapshot(
        [
            'RUN_STARTED r1 {"protocolVersion":"1.0"}',
            "STEP_STARTED step 1",
            "TEXT_MESSAGE_START r1-msg-1",
            "TEXT_MESSAGE_CONTENT r1-msg-1 Two files.",
            "TOOL_CALL_START r1-call-1 write in r1-msg-1",
            'TOOL_CALL_ARGS r1-call-1 {"path": "a.txt"}',
            "TOOL_CALL_END r1-call-1",
            "TEXT_MESSAGE_END r1-msg-1",
            "STEP_FINISHED step 1",
            'RUN_FINISHED r1 {"outcome":{"type":"cancelled"}}',
        ]
    )
    assert ran == []


# ── during tools and approvals ───────────────────────────────────────────────────


async def test_cancel_during_tool_execution(ctx: RunContext) -> None:
    """Results already returned are kept (law 8); the call still running gets a
    "cancelled" result, so every call has exactly one (law 1)."""
    started = asyncio.Event()

    @tool(read_only=True)
    async def fast() -> str:
        """Return at once."""
        return "fast done"

    @tool(read_only=True)
    async def slow() -> str:
        """Never return."""
        started.set()
        await asyncio.Event().wait()
        return "unreachable"

    model = ScriptedModel(
        [{"text": "Both.", "tool_calls": [{"name": "fast"}, {"name": "slow"}]}, "never"]
    )
    token = CancellationToken()
    run, _ = await asyncio.gather(
        drive(Agent(model, [fast, slow]), "go", ctx.with_cancel(token)),
        cancel_when(started, token),
    )
    assert_cancelled(run)
    assert len(model.requests) == 1
    assert transcript_of(run) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1: Both.",
            "call r1-call-1 fast {}",
            "call r1-call-2 slow {}",
            "result r1-call-1 fast: fast done",
            "error r1-call-2 slow: The run was cancelled before this call finished.",
        ]
    )
    calls = run.result.state.calls
    assert (calls["r1-call-1"].status, calls["r1-call-2"].status) == ("completed", "failed")
    assert [entry.call_id for entry in run.result.tool_trace] == ["r1-call-1", "r1-call-2"]
    # No model call was cut: the usage is all there.
    assert run.result.usage_complete is True
    assert run.result.text == "Both."


async def test_cancel_on_a_tool_progress_event(ctx: RunContext) -> None:
    """The cancel fires inside the tool's own task (an observer reacts to its progress):
    the tool's `Cancelled` reaches the task group first, and the run still ends as
    cancelled, not as a crash."""
    from tiller.tools import ExecContext

    @tool(read_only=True)
    async def build(ctx: ExecContext) -> str:
        """Build, reporting progress."""
        ctx.progress("compiling", 0.5)
        await asyncio.sleep(0)
        await asyncio.Event().wait()
        return "unreachable"

    model = ScriptedModel([{"tool_calls": [{"name": "build"}]}, "never"])
    token = CancellationToken()

    def on_event(event: Event) -> None:
        if event.type == "CUSTOM" and event.name == "tiller.progress":  # type: ignore[attr-defined]
            token.cancel("the user pressed stop")

    run = await drive(Agent(model, [build]), "go", ctx.with_cancel(token), on_event=on_event)
    assert_cancelled(run)
    assert run.results()[0].content == "The run was cancelled before this call finished."
    assert run.custom("tiller.progress") == [
        {"toolCallId": "r1-call-1", "kind": "status", "message": "compiling", "fraction": 0.5}
    ]
    assert run.result.error is None


async def test_cancel_while_the_batch_is_gated(ctx: RunContext) -> None:
    """The cancel fires as a refusal is shown, before the allowed calls start: each call
    that starts then fails at once with `Cancelled`, which the task group wraps in an
    exception group; the run still ends as cancelled, and no tool ran."""
    ran: list[str] = []

    @tool(read_only=True)
    async def look() -> str:
        """Look."""
        ran.append("look")
        return "seen"

    @tool
    def write() -> str:
        """Write."""
        ran.append("write")
        return "written"

    calls = [{"name": "look"}, {"name": "write"}, {"name": "write"}]
    model = ScriptedModel([{"tool_calls": calls}, "never"])
    token = CancellationToken()

    def on_event(event: Event) -> None:
        if event.type == "TOOL_CALL_RESULT":
            token.cancel("stopped while the refusal was shown")

    context = ctx.with_approver(Callback(lambda call, tool: False)).with_cancel(token)
    run = await drive(Agent(model, [look, write]), "go", context, on_event=on_event)
    assert_cancelled(run)
    assert ran == []
    # A decided refusal is kept even though, after the cancel, it could not be shown;
    # the call whose approval was still to come never runs: the cancel cut it.
    assert transcript_of(run) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1:",
            "call r1-call-1 look {}",
            "call r1-call-2 write {}",
            "call r1-call-3 write {}",
            "error r1-call-1 look: The run was cancelled before this call finished.",
            "error r1-call-2 write: Denied by the user: the approver said no.",
            "error r1-call-3 write: The run was cancelled before this call finished.",
        ]
    )
    assert [e.refused_by for e in run.result.tool_trace] == [None, "user", None]
    assert event_lines(run.wire) == snapshot(
        [
            'RUN_STARTED r1 {"protocolVersion":"1.0"}',
            "STEP_STARTED step 1",
            "TOOL_CALL_START r1-call-1 look in r1-msg-1",
            "TOOL_CALL_ARGS r1-call-1 {}",
            "TOOL_CALL_END r1-call-1",
            "TOOL_CALL_START r1-call-2 write in r1-msg-1",
            "TOOL_CALL_ARGS r1-call-2 {}",
            "TOOL_CALL_END r1-call-2",
            "TOOL_CALL_START r1-call-3 write in r1-msg-1",
            "TOOL_CALL_ARGS r1-call-3 {}",
            "TOOL_CALL_END r1-call-3",
            "TOOL_CALL_RESULT r1-call-2 (r1-msg-3): Denied by the user: the approver said no.",
            "STEP_FINISHED step 1",
            'RUN_FINISHED r1 {"outcome":{"type":"cancelled"}}',
        ]
    )


async def test_cancel_while_the_approver_decides(ctx: RunContext) -> None:
    """A person may take long to answer; a cancel meanwhile still answers every call."""
    asked = asyncio.Event()

    @tool(read_only=True)
    def look() -> str:
        """Look."""
        return "seen"

    @tool
    def write() -> str:
        """Write."""
        return "written"

    async def decide(call: Any, tool: Any) -> Decision:
        asked.set()
        await asyncio.Event().wait()
        return Decision.allow()

    model = ScriptedModel([{"tool_calls": [{"name": "look"}, {"name": "write"}]}])
    token = CancellationToken()
    context = ctx.with_approver(Callback(decide)).with_cancel(token)
    run, _ = await asyncio.gather(
        drive(Agent(model, [look, write]), "go", context),
        cancel_when(asked, token),
    )
    assert_cancelled(run)
    assert transcript_of(run) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1:",
            "call r1-call-1 look {}",
            "call r1-call-2 write {}",
            "error r1-call-1 look: The run was cancelled before this call finished.",
            "error r1-call-2 write: The run was cancelled before this call finished.",
        ]
    )
    assert {record.status for record in run.result.state.calls.values()} == {"failed"}


# ── between turns ────────────────────────────────────────────────────────────────


class CancelOnDrain(SteeringQueue):
    """A steering queue that cancels the run when the loop drains it for turn `at`: the
    drain happens at the top of a step, so the cancel lands exactly between turns."""

    def __init__(self, token: CancellationToken, at: int) -> None:
        super().__init__()
        self.token = token
        self.at = at
        self.drains = 0

    def drain_with_ids(self) -> list[tuple[str, str | None]]:  # what the loop drains
        self.drains += 1
        if self.drains == self.at:
            self.token.cancel("between turns")
        return super().drain_with_ids()


async def test_cancel_exactly_between_turns(ctx: RunContext) -> None:
    @tool(read_only=True)
    def look() -> str:
        """Look."""
        return "seen"

    model = ScriptedModel([{"text": "Looking.", "tool_calls": [{"name": "look"}]}, "never"])
    token = CancellationToken()
    context = ctx.with_cancel(token).with_queued_input(CancelOnDrain(token, at=2))
    run = await drive(Agent(model, [look]), "go", context)
    assert_cancelled(run)
    assert len(model.requests) == 1
    assert run.result.steps == 1
    assert run.result.usage_complete is True
    assert transcript_of(run) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1: Looking.",
            "call r1-call-1 look {}",
            "result r1-call-1 look: seen",
        ]
    )
    # The next step never opened: its step is not in the stream.
    assert event_lines(run.wire) == snapshot(
        [
            'RUN_STARTED r1 {"protocolVersion":"1.0"}',
            "STEP_STARTED step 1",
            "TEXT_MESSAGE_START r1-msg-1",
            "TEXT_MESSAGE_CONTENT r1-msg-1 Looking.",
            "TOOL_CALL_START r1-call-1 look in r1-msg-1",
            "TOOL_CALL_ARGS r1-call-1 {}",
            "TOOL_CALL_END r1-call-1",
            "TEXT_MESSAGE_END r1-msg-1",
            "TOOL_CALL_RESULT r1-call-1 (r1-msg-2): seen",
            "STEP_FINISHED step 1",
            'RUN_FINISHED r1 {"outcome":{"type":"cancelled"}}',
        ]
    )


async def test_cancel_from_on_event_at_a_step_boundary(ctx: RunContext) -> None:
    """`on_event` sees each event as it is emitted, so a cancel when turn 1 finishes
    lands before turn 2 begins: no second model call, and nothing was cut."""

    @tool(read_only=True)
    def look() -> str:
        """Look."""
        return "seen"

    model = ScriptedModel(
        [
            {"text": "Looking.", "tool_calls": [{"name": "look"}]},
            {"text": "never said", "delay": 60},
        ]
    )
    token = CancellationToken()

    def on_event(event: Event) -> None:
        if event.type == "STEP_FINISHED":
            token.cancel("seen the step finish")

    run = await drive(Agent(model, [look]), "go", ctx.with_cancel(token), on_event=on_event)
    assert_cancelled(run)
    assert transcript_of(run) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1: Looking.",
            "call r1-call-1 look {}",
            "result r1-call-1 look: seen",
        ]
    )
    assert len(model.requests) == 1
    assert run.result.usage_complete is True
    assert event_lines(run.wire) == snapshot(
        [
            'RUN_STARTED r1 {"protocolVersion":"1.0"}',
            "STEP_STARTED step 1",
            "TEXT_MESSAGE_START r1-msg-1",
            "TEXT_MESSAGE_CONTENT r1-msg-1 Looking.",
            "TOOL_CALL_START r1-call-1 look in r1-msg-1",
            "TOOL_CALL_ARGS r1-call-1 {}",
            "TOOL_CALL_END r1-call-1",
            "TEXT_MESSAGE_END r1-msg-1",
            "TOOL_CALL_RESULT r1-call-1 (r1-msg-2): seen",
            "STEP_FINISHED step 1",
            'RUN_FINISHED r1 {"outcome":{"type":"cancelled"}}',
        ]
    )


async def test_a_token_cancelled_before_the_run_starts(ctx: RunContext) -> None:
    token = CancellationToken()
    token.cancel()
    model = ScriptedModel(["never"])
    run = await drive(Agent(model), "go", ctx.with_cancel(token))
    assert_cancelled(run)
    assert model.requests == []
    assert event_lines(run.wire) == snapshot(
        [
            'RUN_STARTED r1 {"protocolVersion":"1.0"}',
            'RUN_FINISHED r1 {"outcome":{"type":"cancelled"}}',
        ]
    )
    assert run.result.usage_complete is True


# ── a batch ──────────────────────────────────────────────────────────────────────


async def test_one_token_cancels_a_batch(workspace: Path) -> None:
    """Every run of a batch works under its own child of the shared token; cancelling
    the batch token stops them all, each keeping its own partial text. A run outside
    the batch is untouched."""
    token = CancellationToken()
    reached = [asyncio.Event() for _ in range(3)]

    def stalling(index: int) -> ScriptedModel:
        def turn(messages: Any, info: TurnInfo) -> AsyncIterator[str]:
            return stall(reached[index], f"run {index} was")

        return ScriptedModel(turn)

    async def cancel_when_all_stalled() -> None:
        for event in reached:
            await event.wait()
        token.cancel("batch cancelled")

    batch = RunContext.sandboxed(workspace, AllowAll()).with_cancel(token)
    outside = RunContext.sandboxed(workspace, AllowAll())
    *runs, lone, _ = await asyncio.gather(
        *(drive(Agent(stalling(i)), "go", batch, run_id=f"b{i}") for i in range(3)),
        drive(Agent(ScriptedModel(["finished"])), "go", outside, run_id="lone"),
        cancel_when_all_stalled(),
    )
    for index, run in enumerate(runs):
        assert_cancelled(run)
        assert run.result.text == f"run {index} was"
    assert lone.result.stop_cause is StopCause.COMPLETED
    assert token.is_cancelled
