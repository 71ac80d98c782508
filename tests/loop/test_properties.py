"""Property test (DESIGN §9): random interleavings of cancel and steer during scripted
runs keep the transcript legal (every tool call has exactly one result), the event
stream valid, and never run a side effect twice (laws 1, 2, 5, 8).

A script is a list of steps (text chunks and tool calls, some to tools that are
denied or unknown). The model yields control between every event it streams, tool
arguments arrive in fragments, and tools yield control while they work, so a cancel
issued from `on_event` after event *i* lands right there: mid text, mid arguments,
while a tool runs, or between turns. Steering messages are pushed at other indexes.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiller.cancel import CancellationToken
from tiller.conversation import ToolCall, Usage, UserMessage
from tiller.events import Event
from tiller.loop import Agent, RunContext, RunOptions, RunResult
from tiller.model import (
    Finish,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageReport,
)
from tiller.policy import Callback, Decision
from tiller.state import RunState, StopCause
from tiller.testing import assert_valid_stream
from tiller.tools import ExecContext, tool

from ._support import assert_legal, tool_results

TOOLS = ("record", "look", "forbidden", "ghost")


@dataclass(frozen=True)
class ScriptTurn:
    chunks: tuple[str, ...]
    calls: tuple[tuple[str, int], ...]  # (tool name, how often the tool yields)


@dataclass(frozen=True)
class Case:
    turns: tuple[ScriptTurn, ...]
    steer_at: frozenset[int]
    cancel_at: int | None


class YieldingModel:
    """Streams a script, yielding to the event loop before every event."""

    provider = "test"
    name = "yielding"
    context_window: int | None = None

    def __init__(self, turns: tuple[ScriptTurn, ...]) -> None:
        self.turns = turns
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        number = len(self.requests)
        self.requests.append(request)
        turn = self.turns[number] if number < len(self.turns) else ScriptTurn(("Done.",), ())
        for chunk in turn.chunks:
            await asyncio.sleep(0)
            yield TextDelta(chunk)
        for index, (name, pauses) in enumerate(turn.calls):
            arguments = orjson.dumps({"pauses": pauses}).decode()
            await asyncio.sleep(0)
            yield ToolCallStart(index, f"c{number}-{index}", name)
            for fragment in (arguments[:5], arguments[5:]):
                await asyncio.sleep(0)
                yield ToolCallArgsDelta(index, fragment)
            await asyncio.sleep(0)
            yield ToolCallEnd(index)
        await asyncio.sleep(0)
        yield UsageReport(Usage(input_tokens=3, output_tokens=2))
        yield Finish("tool_calls" if turn.calls else "stop")

    async def aclose(self) -> None:
        pass


@dataclass
class Played:
    result: RunResult
    events: list[Event]
    effects: list[str]
    steered: list[str]
    left_in_queue: list[str]


async def play(case: Case) -> Played:
    effects: list[str] = []

    @tool
    async def record(pauses: int, ctx: ExecContext) -> str:
        """A side effect: appends the call id to a list."""
        effects.append(ctx.call_id)
        for step in range(pauses):
            ctx.progress(f"step {step}")  # an event: a cancel may land while the tool works
            await asyncio.sleep(0)
        return "recorded"

    @tool(read_only=True)
    async def look(pauses: int, ctx: ExecContext) -> str:
        """Look (read-only)."""
        for step in range(pauses):
            ctx.progress(f"step {step}")
            await asyncio.sleep(0)
        return "seen"

    @tool
    async def forbidden(pauses: int) -> str:
        """Always denied by the approver."""
        effects.append("forbidden ran")
        return "should never run"

    async def approve(call: ToolCall, _tool: Any) -> Decision:
        await asyncio.sleep(0)  # a person takes a while: a cancel may land meanwhile
        return Decision.deny("not this one") if call.name == "forbidden" else Decision.allow()

    token = CancellationToken()
    steered: list[str] = []
    events: list[Event] = []

    with tempfile.TemporaryDirectory() as workspace:
        ctx = RunContext.sandboxed(workspace, Callback(approve)).with_cancel(token)

        def on_event(event: Event) -> None:
            index = len(events)
            events.append(event)
            if index in case.steer_at:
                text = f"steer {index}"
                steered.append(text)
                ctx.queued_input.push(text)
            if index == case.cancel_at:
                token.cancel("property test")

        agent = Agent(YieldingModel(case.turns), [record, look, forbidden])
        options = RunOptions(max_steps=len(case.turns) + 4)
        async with asyncio.timeout(10):  # a hang guard only
            result = await agent.run_in(ctx, "go", options, on_event=on_event, run_id="p")
        left = ctx.queued_input.drain()
    return Played(result, events, effects, steered, left)


texts_ = st.lists(st.sampled_from(["Hi", " there", " friend", ".", " \n"]), max_size=3)
calls_ = st.lists(st.tuples(st.sampled_from(TOOLS), st.integers(0, 2)), max_size=3)
turns_ = st.builds(ScriptTurn, texts_.map(tuple), calls_.map(tuple))


@st.composite
def cases(draw: st.DrawFn) -> Case:
    turns = tuple(draw(st.lists(turns_, min_size=1, max_size=5)))
    steer_at = frozenset(draw(st.lists(st.integers(0, 40), max_size=3)))
    cancel_at = draw(st.none() | st.integers(0, 40))
    return Case(turns, steer_at, cancel_at)


def check(case: Case, played: Played) -> None:
    result = played.result
    state = result.state
    # The stream is valid AG-UI, and its end agrees with the result.
    wire = assert_valid_stream(played.events)
    terminal = wire[-1]
    if result.stop_cause is StopCause.CANCELLED:
        assert terminal["type"] == "RUN_FINISHED"
        assert terminal["outcome"] == {"type": "cancelled"}
        assert case.cancel_at is not None
    else:
        expected = (StopCause.COMPLETED, StopCause.MAX_STEPS, StopCause.NO_OUTPUT)
        assert result.stop_cause in expected, result.error
        assert terminal["type"] == "RUN_FINISHED"
        assert terminal["outcome"] == {"type": "success"}
    # The transcript is legal, and the state survives JSON.
    assert_legal(state.messages)
    assert RunState.from_json(state.to_json()) == state
    # No side effect ran twice, none ran for a denied call, and each belongs to a call of
    # the transcript.
    assert len(set(played.effects)) == len(played.effects)
    assert "forbidden ran" not in played.effects
    answered = {r.call_id: r for r in tool_results(state.messages)}
    assert set(played.effects) <= set(answered)
    for call_id, record in state.calls.items():
        assert record.status in ("completed", "failed"), (call_id, record)
        assert call_id in answered
    cut = "The run was cancelled before this call finished."
    for entry in result.tool_trace:
        content = answered[entry.call_id].content
        if entry.refused_by == "user":
            assert entry.name == "forbidden"
            assert content.startswith("Denied by the user: ")
        if entry.name == "forbidden":
            assert entry.refused_by == "user" or content == cut
        if entry.name == "ghost":
            assert entry.unknown or content == cut
    # Steering is never lost nor doubled: each message is in the transcript once, or
    # taken into the state (a cancel came before it was sent), or still queued.
    user_parts = [
        part
        for message in state.messages
        if isinstance(message, UserMessage)
        for part in message.text.split("\n\n")
    ]
    for text in played.steered:
        kept = user_parts.count(text) + state.pending_input.count(text)
        assert kept + played.left_in_queue.count(text) == 1, text
    # A run that was not cancelled and not cut short ends with an answer.
    if result.stop_cause is StopCause.COMPLETED:
        assert state.messages[-1].role == "assistant"
        assert result.usage_complete


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(cases())
def test_random_cancel_and_steer_keep_the_laws(case: Case) -> None:
    check(case, asyncio.run(play(case)))


def test_an_example_that_cancels_mid_arguments() -> None:
    """A fixed case, so the interesting path is always taken: cancel right after the
    first argument fragment of a `record` call (events: RUN_STARTED, STEP_STARTED)."""
    case = Case((ScriptTurn((), (("record", 0),)),), frozenset(), cancel_at=1)
    played = asyncio.run(play(case))
    check(case, played)
    assert played.result.stop_cause is StopCause.CANCELLED
    assert played.effects == []
