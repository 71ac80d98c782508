"""The loop guard: once a run has compacted, the same calls coming back with the same
results turn after turn stop the run (stop cause `loop`) before they eat its budget."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from tiller.conversation import AssistantMessage, Message, ToolCall, ToolResult, UserMessage
from tiller.loop import Agent, RunContext, RunOptions
from tiller.loop._compaction import COMPACTED_EVENT
from tiller.loop._loop_guard import LoopGuard, exchange_fingerprint
from tiller.loop._summary import SUMMARY_SYSTEM_PROMPT
from tiller.model import ScriptedModel, TurnInfo
from tiller.state import RunState, StopCause
from tiller.tools import tool

from ._support import drive

counter = itertools.count()


@tool(read_only=True)
def read_file(path: str) -> str:
    """Read a file."""
    return f"{path}: " + "the same text, line after line\n" * 30


@tool(read_only=True)
def clock() -> str:
    """What time it is (never the same twice)."""
    return f"tick {next(counter)}"


def looping(first: int, call: dict[str, Any]) -> Any:
    """A model that reads `first` different files, then makes `call` forever."""

    turns = itertools.count()

    def turn(messages: Sequence[Message], info: TurnInfo) -> Any:
        if info.system == SUMMARY_SYSTEM_PROMPT:
            return "Summary: several files were read."
        if next(turns) < first:
            return {"tool_calls": [{"name": "read_file", "arguments": {"path": f"f{info.turn}"}}]}
        return {"tool_calls": [call]}

    return turn


def state_with(*exchanges: tuple[str, str, str, str]) -> RunState:
    """A state whose transcript holds the given (call id, path, result, user text)."""
    state = RunState(run_id="r", thread_id="t", messages=[UserMessage(text="go")])
    state.compaction.compactions = 1
    for call_id, path, content, text in exchanges:
        state.messages.append(
            AssistantMessage(
                tool_calls=(
                    ToolCall(id=call_id, name="read_file", arguments=f'{{"path":"{path}"}}'),
                )
            )
        )
        state.messages.append(
            UserMessage(
                text=text,
                tool_results=(ToolResult(call_id=call_id, name="read_file", content=content),),
            )
        )
    return state


def feed(
    guard: LoopGuard, state: RunState, call_id: str, path: str, content: str, *, text: str = ""
) -> str | None:
    extra = state_with((call_id, path, content, text))
    state.messages.extend(extra.messages[1:])
    return guard.observe(state)


# ── the guard alone ──────────────────────────────────────────────────────────────


def test_the_same_call_and_result_three_times_stops_the_run() -> None:
    guard = LoopGuard(3)
    state = state_with()
    assert guard.armed(state)
    assert feed(guard, state, "c1", "a", "A") is None
    assert guard.observe(state) is None  # the same exchange is counted once
    assert feed(guard, state, "c2", "a", "A") is None
    assert state.compaction.guard_count == 2
    reason = feed(guard, state, "c3", "a", "A")
    assert reason is not None
    assert "same call (read_file)" in reason and "3 times" in reason
    assert state.stop_cause is StopCause.LOOP
    assert state.error == reason


def test_a_different_call_result_or_a_persons_words_break_the_streak() -> None:
    guard = LoopGuard(3)
    state = state_with()
    feed(guard, state, "c1", "a", "A")
    feed(guard, state, "c2", "a", "A")
    assert feed(guard, state, "c3", "a", "changed") is None  # new result
    assert state.compaction.guard_count == 1
    feed(guard, state, "c4", "a", "changed")
    assert feed(guard, state, "c5", "b", "changed") is None  # new arguments
    feed(guard, state, "c6", "b", "changed")
    assert feed(guard, state, "c7", "b", "changed", text="Stop reading b.") is None
    assert state.compaction.guard_count == 0
    assert state.stop_cause is None


def test_the_guard_is_armed_only_after_a_compaction_and_when_on() -> None:
    state = state_with()
    state.compaction.compactions = 0
    assert not LoopGuard(3).armed(state)
    state.compaction.compactions = 1
    assert not LoopGuard(None).armed(state)
    assert LoopGuard(3).armed(state)


def test_the_fingerprint_ignores_argument_order_and_call_ids() -> None:
    result = (ToolResult(call_id="x", name="grep", content="hit"),)
    one = exchange_fingerprint((ToolCall(id="x", name="grep", arguments='{"a":1,"b":2}'),), result)
    two = exchange_fingerprint(
        (ToolCall(id="y", name="grep", arguments='{"b": 2, "a": 1}'),),
        (ToolResult(call_id="y", name="grep", content="hit"),),
    )
    assert one == two
    error = (ToolResult(call_id="y", name="grep", content="hit", is_error=True),)
    assert exchange_fingerprint((ToolCall(id="y", name="grep", arguments="{}"),), error) != one


# ── in a run ─────────────────────────────────────────────────────────────────────


async def test_a_run_that_loops_after_a_compaction_is_stopped(ctx: RunContext) -> None:
    same = {"name": "read_file", "arguments": {"path": "notes.md"}}
    model = ScriptedModel(looping(8, same))
    run = await drive(
        Agent(model, [read_file]), "Read the files.", ctx.with_compact_at(1500), RunOptions()
    )
    result = run.result
    assert result.stop_cause is StopCause.LOOP
    assert result.error is not None and "same call (read_file)" in result.error
    assert run.custom(COMPACTED_EVENT)  # it had compacted
    assert run.terminal["type"] == "RUN_FINISHED"
    # Three identical turns after the compaction, then no more calls.
    repeated = [
        m
        for m in result.state.messages
        if isinstance(m, AssistantMessage) and m.tool_calls[0].arguments == '{"path":"notes.md"}'
    ]
    assert len(repeated) >= 3
    assert result.state.compaction.guard_count == 3
    assert model.requests[-1].system is None  # the last call was a step, not a summary


async def test_without_a_compaction_repetition_is_not_the_guards_business(
    ctx: RunContext,
) -> None:
    same = {"name": "read_file", "arguments": {"path": "notes.md"}}
    run = await drive(
        Agent(ScriptedModel(looping(2, same)), [read_file]),
        "Read the files.",
        ctx,
        RunOptions(max_steps=10),
    )
    assert run.result.stop_cause is StopCause.MAX_STEPS
    assert run.result.state.compaction.guard_count == 0


async def test_the_guard_can_be_turned_off(ctx: RunContext) -> None:
    same = {"name": "read_file", "arguments": {"path": "notes.md"}}
    run = await drive(
        Agent(ScriptedModel(looping(8, same)), [read_file]),
        "Read the files.",
        ctx.with_compact_at(1500),
        RunOptions(max_steps=20).with_loop_guard(None),
    )
    assert run.result.stop_cause is StopCause.MAX_STEPS
    assert run.custom(COMPACTED_EVENT)


async def test_the_same_call_with_new_results_is_not_a_loop(ctx: RunContext) -> None:
    run = await drive(
        Agent(ScriptedModel(looping(8, {"name": "clock"})), [read_file, clock]),
        "Read the files.",
        ctx.with_compact_at(1500),
        RunOptions(max_steps=20),
    )
    assert run.result.stop_cause is StopCause.MAX_STEPS
    assert run.custom(COMPACTED_EVENT)
