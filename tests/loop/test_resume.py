"""The loop is a function of `RunState` plus the contexts: stopped at any step boundary,
serialized, loaded and continued, a run ends exactly as an uninterrupted one would."""

# Inline snapshots hold each transcript line whole, as the run wrote it.
# ruff: noqa: E501

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from inline_snapshot import snapshot

from tiller.cancel import CancellationToken
from tiller.conversation import AssistantMessage, UserMessage
from tiller.loop import Agent, RunContext, RunOptions
from tiller.model import ScriptedModel
from tiller.policy import AllowAll
from tiller.state import RunState, StopCause
from tiller.tools import tool

from .._transcript import event_lines, transcript_of
from ._support import Messages, drive

SCRIPT: list[Any] = [
    {
        "text": "Let me look.",
        "tool_calls": [{"id": "c1", "name": "look", "arguments": {"at": "a"}}],
    },
    {
        "tool_calls": [
            {"id": "c2", "name": "note", "arguments": {"text": "found a"}},
            {"id": "c3", "name": "look", "arguments": {"at": "b"}},
        ]
    },
    "",  # an empty turn: nudged
    {"reasoning": "Nearly there.", "text": "Almost.", "tool_calls": [{"id": "c4", "name": "look"}]},
    "All done: a and b.",
]


class World:
    """One chain of runs: its tools record their side effects, and steer the run."""

    def __init__(self, workspace: Path) -> None:
        self.notes: list[str] = []
        self.ctx = RunContext.sandboxed(workspace, AllowAll())
        notes = self.notes
        queue = self.ctx.queued_input

        @tool(read_only=True)
        def look(at: str = "here") -> str:
            """Look at something."""
            return f"saw {at}"

        @tool
        def note(text: str) -> str:
            """Write a note (a side effect)."""
            notes.append(text)
            queue.push(f"(noted: {text})")
            return "noted"

        self.tools = [look, note]

    def agent(self, turns: list[Any]) -> Agent:
        return Agent(ScriptedModel(turns), self.tools, system_prompt="be thorough")


def without_ids(messages: Messages) -> list[UserMessage | AssistantMessage]:
    """Message ids restart with each run's AG-UI context; the content must not."""
    return [m.model_copy(update={"id": ""}) for m in messages]


def comparable(state: RunState) -> tuple[Any, ...]:
    return (
        without_ids(state.messages),
        state.model_dump(mode="json", exclude={"messages"}),
    )


async def test_continuing_from_every_step_boundary(tmp_path: Path) -> None:
    whole_world = World(tmp_path / "whole")
    whole = await drive(whole_world.agent(SCRIPT), "Find a and b.", whole_world.ctx)
    assert whole.result.stop_cause is StopCause.COMPLETED
    assert whole.result.steps == len(SCRIPT)
    assert whole_world.notes == ["found a"]
    assert transcript_of(whole) == snapshot(
        [
            "user: Find a and b.",
            "assistant r1-msg-1: Let me look.",
            'call r1-call-1 look {"at":"a"}',
            "result r1-call-1 look: saw a",
            "assistant r1-msg-3:",
            'call r1-call-2 note {"text":"found a"}',
            'call r1-call-3 look {"at":"b"}',
            "result r1-call-2 note: noted",
            "result r1-call-3 look: saw b",
            "and user: (noted: found a)¶¶Your last reply was empty. Continue with the task, or give your final answer.",
            "assistant r1-msg-7: Almost.",
            "reasoning: Nearly there.",
            "call r1-call-4 look {}",
            "result r1-call-4 look: saw here",
            "assistant r1-msg-10: All done: a and b.",
        ]
    )
    expected = comparable(whole.result.state)

    for k in range(1, len(SCRIPT)):
        world = World(tmp_path / f"split-{k}")
        first = await drive(
            world.agent(SCRIPT), "Find a and b.", world.ctx, RunOptions(max_steps=k)
        )
        assert first.result.stop_cause is StopCause.MAX_STEPS
        assert first.result.steps == k
        saved = first.result.state.to_json()
        loaded = RunState.from_json(saved)
        assert loaded == first.result.state
        rest = await drive(world.agent(SCRIPT), loaded, world.ctx)
        assert rest.result.stop_cause is StopCause.COMPLETED, k
        assert comparable(rest.result.state) == expected, k
        assert rest.result.text == whole.result.text
        # No side effect ran twice (law 5), whichever step the run was split at.
        assert world.notes == ["found a"], k


async def test_continuing_after_a_cancel(workspace: Path) -> None:
    """A cancelled run's state is legal as it stands: the model is told which call was
    cut, and the run finishes from there."""
    started = asyncio.Event()
    cut: list[str] = []

    @tool(read_only=True)
    async def slow() -> str:
        """Never return."""
        started.set()
        cut.append("started")
        await asyncio.Event().wait()
        return "unreachable"

    token = CancellationToken()
    ctx = RunContext.sandboxed(workspace, AllowAll())
    model = ScriptedModel([{"text": "Working.", "tool_calls": [{"name": "slow"}]}])

    async def cancel_when_started() -> None:
        await started.wait()
        token.cancel()

    first, _ = await asyncio.gather(
        drive(Agent(model, [slow]), "go", ctx.with_cancel(token)), cancel_when_started()
    )
    assert first.result.stop_cause is StopCause.CANCELLED
    loaded = RunState.from_json(first.result.state.to_json())
    loaded.append_user_text("Never mind, just say hi.")  # folded: law 1

    resumed = ScriptedModel(["Hi."], per_run=False)
    rest = await drive(Agent(resumed, [slow]), loaded, ctx, run_id="r2")
    assert rest.result.stop_cause is StopCause.COMPLETED
    assert rest.result.text == "Hi."
    assert rest.result.state.run_id == "r2"
    assert rest.result.state.thread_id == "r1"
    assert rest.result.error is None
    # What the model read: the cut call's result and the new text, folded into one message.
    assert transcript_of(resumed.requests[0].messages) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1: Working.",
            "call r1-call-1 slow {}",
            "error r1-call-1 slow: The run was cancelled before this call finished.",
            "and user: Never mind, just say hi.",
        ]
    )
    assert cut == ["started"]


async def test_continuing_a_finished_run_with_a_new_question(ctx: RunContext) -> None:
    first = await drive(Agent(ScriptedModel(["Paris."])), "Capital of France?", ctx)
    state = first.result.state
    state.messages.append(UserMessage(text="And of Italy?"))
    model = ScriptedModel(["Rome."], per_run=False)
    rest = await drive(Agent(model), state, ctx, run_id="r2")
    assert transcript_of(model.requests[0].messages) == snapshot(
        ["user: Capital of France?", "assistant r1-msg-1: Paris.", "user: And of Italy?"]
    )
    assert rest.result.text == "Rome."
    assert rest.result.steps == 2
    # The caller's state was copied, not changed.
    assert state.stop_cause is StopCause.COMPLETED
    assert len(state.messages) == 3


async def test_a_continued_run_never_reuses_a_message_id(ctx: RunContext) -> None:
    world_script: list[Any] = [{"tool_calls": [{"id": "c1", "name": "look"}]}, "done"]

    @tool(read_only=True)
    def look() -> str:
        """Look."""
        return "seen"

    first = await drive(
        Agent(ScriptedModel(world_script), [look]), "go", ctx, RunOptions(max_steps=1)
    )
    rest = await drive(Agent(ScriptedModel(world_script), [look]), first.result.state, ctx)
    ids = [m.id for m in rest.result.state.messages if isinstance(m, AssistantMessage)]
    assert len(set(ids)) == len(ids), ids
    # The continued stream starts with the conversation so far, so the client knows the
    # earlier call and its result (law 2).
    assert event_lines(rest.wire) == snapshot(
        [
            'RUN_STARTED r1 {"protocolVersion":"1.0"}',
            "MESSAGES_SNAPSHOT",
            "  r1-hist-0 user: go",
            "  r1-msg-1 assistant:",
            "  r1-msg-1 call r1-call-1 look {}",
            "  r1-msg-2 tool r1-call-1: seen",
            "STEP_STARTED step 2",
            "TEXT_MESSAGE_START r1-msg-3",
            "TEXT_MESSAGE_CONTENT r1-msg-3 done",
            "TEXT_MESSAGE_END r1-msg-3",
            "STEP_FINISHED step 2",
            'RUN_FINISHED r1 {"result":{"stopCause":"completed"},"outcome":{"type":"success"}}',
        ]
    )


async def test_a_plan_continued_under_execute_records_the_new_phase(ctx: RunContext) -> None:
    from tiller.phase import Phase

    planned = await drive(
        Agent(ScriptedModel(["Plan: edit a.py."])), "Plan it.", ctx.with_phase(Phase.PLAN)
    )
    assert planned.result.state.phase is Phase.PLAN
    state = planned.result.state
    state.append_user_text("Go ahead.")
    done = await drive(Agent(ScriptedModel(["Done."], per_run=False)), state, ctx, run_id="r2")
    assert done.result.state.phase is Phase.EXECUTE
