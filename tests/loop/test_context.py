"""`RunContext` is per run and copy-on-write; an `Agent` holds nothing of a run, so many
runs of one agent go side by side, each in its own world."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest

from tiller.cancel import CancellationToken
from tiller.conversation import AssistantMessage, UserMessage
from tiller.errors import UsageError
from tiller.loop import Agent, Budget, RunContext, SteeringQueue
from tiller.model import ScriptedModel, TurnInfo
from tiller.model.scripted import TurnLike
from tiller.phase import Phase
from tiller.policy import AllowAll, ReadOnly
from tiller.state import StopCause
from tiller.tools import ExecContext, Jail, tool

from ._support import drive


def test_builders_return_new_contexts_and_leave_the_original(workspace: Path) -> None:
    base = RunContext.sandboxed(workspace, AllowAll())
    before = dataclasses.replace(base)
    other_root = workspace / "other"
    other_root.mkdir()
    tools = Jail(other_root)
    approver = ReadOnly()
    budget = Budget(max_steps=3)
    token = CancellationToken()
    queue = SteeringQueue()
    changes = [
        (base.with_jail(tools), "jail", tools),
        (base.with_approver(approver), "approver", approver),
        (base.with_approver(None), "approver", None),
        (base.with_budget(budget), "budget", budget),
        (base.with_cancel(token), "cancel", token),
        (base.with_phase(Phase.PLAN), "phase", Phase.PLAN),
        (base.with_queued_input(queue), "queued_input", queue),
        (base.with_withheld(["a", "b", "a"]), "withheld", frozenset({"a", "b"})),
        (base.with_compact_at(5000), "compact_at_tokens", 5000),
    ]
    live = {"budget", "cancel", "queued_input"}
    for derived, name, value in changes:
        assert derived is not base
        assert getattr(derived, name) == value
        for field in dataclasses.fields(RunContext):
            # The jail is rebound to the derived context's own safety switch, and its
            # live controls are its own (law 13; `test_run_controls.py`).
            if field.name not in {name, "controls", "jail"} and name not in {"jail"}:
                assert getattr(derived, field.name) is getattr(base, field.name), field.name
        if name != "jail":
            assert derived.jail.root == base.jail.root
        if name not in live:
            assert derived.queued_input is not base.queued_input
    # The original is exactly as it was, field by field (identity, not just equality).
    for field in dataclasses.fields(RunContext):
        assert getattr(base, field.name) is getattr(before, field.name)
    assert base.phase is Phase.EXECUTE
    assert base.cancel is None


def test_contexts_are_frozen(workspace: Path) -> None:
    context = RunContext.sandboxed(workspace)
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.phase = Phase.PLAN  # type: ignore[misc]


def test_live_controls_are_shared_only_where_passed_on(workspace: Path) -> None:
    """Law 13 (it was the other way round): a derived context's queue and budget are its
    own; a queue passed on with `with_queued_input` is shared by what is derived."""
    base = RunContext.sandboxed(workspace, AllowAll())
    derived = base.with_phase(Phase.PLAN).with_withheld(["x"])
    assert derived.budget is not base.budget
    assert derived.queued_input is not base.queued_input
    derived.queued_input.push("steer")
    assert base.queued_input.drain() == []
    queue = SteeringQueue()
    shared = base.with_queued_input(queue).with_phase(Phase.PLAN)
    shared.queued_input.push("steer")
    assert queue.drain() == ["steer"]


def test_constructors(workspace: Path) -> None:
    fresh = workspace / "not-yet"
    context = RunContext.sandboxed(fresh)
    assert fresh.is_dir()
    assert context.jail.root == fresh.resolve()
    assert context.approver is None
    assert context.budget == Budget()
    tools = Jail(workspace)
    approver = AllowAll()
    made = RunContext.new(tools, approver)
    assert (made.jail, made.approver, made.phase) == (tools, approver, Phase.EXECUTE)
    # Each context gets its own budget and queue unless one is shared on purpose.
    assert RunContext.new(tools).budget is not made.budget
    assert RunContext.new(tools).queued_input is not made.queued_input


async def test_run_takes_a_context_or_a_workspace_not_both(workspace: Path) -> None:
    agent = Agent(ScriptedModel(["hi"]))
    with pytest.raises(UsageError):
        await agent.run("go", context=RunContext.sandboxed(workspace), workspace=workspace)


async def test_many_runs_of_one_agent_each_in_its_own_jail(tmp_path: Path) -> None:
    """One agent, three concurrent runs, three jails and phases: nothing leaks between."""
    reached = [asyncio.Event() for _ in range(3)]
    seen: dict[int, Path] = {}

    @tool(read_only=True)
    async def where(index: int, ctx: ExecContext) -> str:
        """Say where the run is jailed, once every run got here."""
        reached[index].set()
        for event in reached:
            await event.wait()
        seen[index] = ctx.workdir
        return ctx.workdir.name

    def turn(messages: Sequence[UserMessage | AssistantMessage], info: TurnInfo) -> TurnLike:
        # Each run's prompt is its index: one call, then the call's result as the answer.
        if len(messages) == 1:
            return {
                "tool_calls": [{"name": "where", "arguments": {"index": int(messages[0].text)}}]
            }
        last = messages[-1]
        assert isinstance(last, UserMessage)
        return last.tool_results[0].content

    agent = Agent(ScriptedModel(turn), [where])
    contexts = []
    for index in range(3):
        root = tmp_path / f"jail-{index}"
        contexts.append(RunContext.sandboxed(root, AllowAll()))
    runs = await asyncio.gather(
        *(drive(agent, str(i), contexts[i], run_id=f"r{i}") for i in range(3))
    )
    assert [run.result.text for run in runs] == ["jail-0", "jail-1", "jail-2"]
    assert all(run.result.stop_cause is StopCause.COMPLETED for run in runs)
    assert {index: path.name for index, path in seen.items()} == {
        0: "jail-0",
        1: "jail-1",
        2: "jail-2",
    }
