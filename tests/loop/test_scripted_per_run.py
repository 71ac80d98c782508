"""A `ScriptedModel` plays its script per run (issue 18): the turn a call gets is its
number in its run, so one agent serves run after run, concurrent runs each from turn 1, and
a resumed run goes on where it stopped, even on a fresh model in another process."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from tiller.conversation import AssistantMessage, UserMessage
from tiller.errors import UsageError
from tiller.loop import Agent, PauseOnWrites, ResumeDecision, RunContext, RunOptions
from tiller.model import ScriptedModel, TurnInfo
from tiller.policy import AllowAll
from tiller.state import RunState, StopCause
from tiller.tools import ExecContext, builtin, tool

SCRIPT = [
    {"tool_calls": [{"name": "note", "arguments": {"text": "one"}}]},
    {"tool_calls": [{"name": "note", "arguments": {"text": "two"}}]},
    "Noted twice.",
]


@tool
def note(text: str, ctx: ExecContext) -> str:
    """Append a line to notes.txt."""
    with (ctx.workdir / "notes.txt").open("a") as notes:
        notes.write(text + "\n")
    return f"noted {text}"


async def test_one_agent_serves_run_after_run_each_from_the_first_turn(ctx: RunContext) -> None:
    agent = Agent(ScriptedModel(SCRIPT), [note])  # module-level, as an app defines it
    for run_id in ("r1", "r2", "r3"):
        result = await agent.run_in(ctx, "note twice", run_id=run_id)
        assert result.completed, result.state.error  # was: "the script has no turn 4"
        assert result.text == "Noted twice."
    assert len(agent.model.requests) == 9  # every run's requests are still recorded


async def test_per_run_false_keeps_one_position_across_runs(ctx: RunContext) -> None:
    model = ScriptedModel(["first run", "second run"], per_run=False)
    agent = Agent(model, [note])
    assert (await agent.run_in(ctx, "go", run_id="r1")).text == "first run"
    assert (await agent.run_in(ctx, "go", run_id="r2")).text == "second run"
    failed = await agent.run_in(ctx, "go", run_id="r3")
    assert failed.stop_cause is StopCause.ERROR
    assert "the script has no turn 3" in (failed.state.error or "")


async def test_concurrent_runs_on_one_agent_each_get_their_own_position(
    workspace: Path,
) -> None:
    # Both runs must be at their first tool call at once before either goes on, so the two
    # are interleaved for sure: with one shared position the second run would get turn 2
    # (text), never call `meet`, and the barrier would never open.
    barrier = asyncio.Barrier(2)
    seen: list[tuple[str | None, int]] = []

    @tool
    async def meet() -> str:
        """Wait for the other run."""
        await barrier.wait()
        return "met"

    def turn(messages: Sequence[UserMessage | AssistantMessage], info: TurnInfo) -> object:
        seen.append((info.run_id, info.turn))
        if info.turn == 1:
            return {"tool_calls": [{"name": "meet"}]}
        return f"{info.run_id} done"

    agent = Agent(ScriptedModel(turn), [meet])
    async with asyncio.timeout(30):  # a hang guard, never a timing assertion
        first, second = await asyncio.gather(
            agent.run_in(RunContext.sandboxed(workspace, AllowAll()), "go", run_id="a"),
            agent.run_in(RunContext.sandboxed(workspace, AllowAll()), "go", run_id="b"),
        )
    assert (first.text, second.text) == ("a done", "b done")
    assert sorted(seen) == [("a", 1), ("a", 2), ("b", 1), ("b", 2)]


async def test_a_retried_call_takes_the_next_turn_of_its_run(ctx: RunContext) -> None:
    script = [{"error": {"status": 429}}, "after the retry"]
    agent = Agent(ScriptedModel(script), [note])
    for run_id in ("r1", "r2"):
        result = await agent.run_in(ctx, "go", run_id=run_id)
        assert result.text == "after the retry"
        assert result.state.model_calls == 2  # the failed attempt counts


async def test_a_resumed_run_continues_its_script_on_a_fresh_model(
    workspace: Path, ctx: RunContext
) -> None:
    options = RunOptions(review_policy=PauseOnWrites())
    suspended = await Agent(ScriptedModel(SCRIPT), [note]).run_in(ctx, "note twice", options)
    assert suspended.stop_cause is StopCause.SUSPENDED
    # Another process: the state comes back from JSON, the agent (and its model) is new.
    state = RunState.from_json(suspended.state.to_json())
    assert state.model_calls == 1
    later = Agent(ScriptedModel(SCRIPT), [note])
    (call,) = state.unanswered_calls()
    second = await later.resume(state, {call.id: ResumeDecision.approved()}, ctx=ctx)
    assert second.stop_cause is StopCause.SUSPENDED  # turn 2's call, not turn 1's again
    (call,) = second.state.unanswered_calls()
    assert call.arguments == '{"text":"two"}'
    done = await later.resume(second, {call.id: ResumeDecision.approved()}, ctx=ctx)
    assert done.completed and done.text == "Noted twice."
    assert (workspace / "notes.txt").read_text().splitlines() == ["one", "two"]


@pytest.mark.parametrize("value", ["yes", 1])
def test_per_run_must_be_a_bool(value: object) -> None:
    with pytest.raises(UsageError, match="per_run must be true or false"):
        ScriptedModel(["x"], per_run=value)  # type: ignore[arg-type]


async def test_a_subagent_on_the_parents_model_counts_its_own_turns(ctx: RunContext) -> None:
    seen: list[tuple[str | None, int]] = []

    def play(messages: Sequence[UserMessage | AssistantMessage], info: TurnInfo) -> object:
        seen.append((info.run_id, info.turn))
        if info.run_id == "p":
            if info.turn == 1:
                arguments = {"description": "look", "prompt": "look", "subagent_type": "explore"}
                return {"tool_calls": [{"name": "agent", "arguments": arguments}]}
            return "parent done"
        return "child done"

    result = await Agent(ScriptedModel(play), [builtin.agent]).run_in(ctx, "go", run_id="p")
    assert result.text == "parent done"
    # The child's first call is its turn 1 (it was the parent's turn 2 when they shared
    # one position), and the parent's next call is its own turn 2.
    assert seen == [("p", 1), ("p-sub-1", 1), ("p", 2)]
