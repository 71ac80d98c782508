"""What the loop gives each tool call (`RunServices`): the assembled `ExecContext`, notes
from detached work at the next step, the scratchpad and the Plan phase's rule for it, the
detach switch, and progress that ends with its call."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import jsonpatch

from tiller.conversation import UserMessage
from tiller.events import Event
from tiller.loop import (
    Agent,
    DetachSwitch,
    PauseOnTools,
    ResumeDecision,
    RunContext,
    RunOptions,
)
from tiller.model import ScriptedModel
from tiller.phase import Phase
from tiller.policy import AllowAll
from tiller.state import StopCause
from tiller.testing import assert_valid_stream
from tiller.tools import ExecContext, SafetyMode, tool
from tiller.tools.builtin import task_create, task_update

from ._support import drive


async def test_every_call_gets_an_assembled_context(ctx: RunContext, workspace: Path) -> None:
    seen: list[ExecContext] = []

    @tool(read_only=True)
    def inspect(ctx: ExecContext) -> str:
        """Look at the context."""
        seen.append(ctx)
        return "ok"

    ctx.jail.safety.set(SafetyMode.AUTO)
    model = ScriptedModel([{"tool_calls": [{"name": "inspect"}, {"name": "inspect"}]}, "done"])
    agent = Agent(model, [inspect], config={"region": "eu"})
    run = await drive(agent, "look", ctx, run_id="r7")
    assert run.result.stop_cause is StopCause.COMPLETED
    first, second = seen
    assert first.session_id == run.result.state.thread_id
    assert first.message_index == 2  # the prompt and the assistant turn with the calls
    assert first.safety_mode is SafetyMode.AUTO
    assert first.config == {"region": "eu"} and first.model_id == model.name
    assert first.goal.requests == ("look",)
    from tiller.policy import ApprovalBroker, AutoClassifier

    assert isinstance(first.classifier, AutoClassifier)
    assert isinstance(first.approval, ApprovalBroker)  # the context's AllowAll, brokered
    assert first.notify is not None and first.notify is second.notify
    # One turn: one background token and one web budget, shared by the batch.
    assert first.background is second.background and first.web_bytes is second.web_bytes
    _check_scratchpad(first.scratchpad, workspace)


def _check_scratchpad(pad: Path | None, workspace: Path) -> None:
    assert pad is not None and pad.is_dir()
    assert pad.is_relative_to(workspace.resolve() / ".tiller" / "scratch")
    assert (workspace / ".tiller" / ".gitignore").read_text() == "*\n"


async def test_a_note_from_detached_work_reaches_the_next_turn(ctx: RunContext) -> None:
    @tool(read_only=True)
    async def start_job(ctx: ExecContext) -> str:
        """Start work that finishes later."""
        notify = ctx.notify
        assert notify is not None

        async def later() -> None:
            await asyncio.sleep(0)
            notify.send("bg-1", "exited with code 0")

        task = asyncio.get_running_loop().create_task(later())
        await task
        return "started bg-1"

    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "start_job"}]},
            "Waiting for it.",
        ]
    )
    run = await drive(Agent(model, [start_job]), "build", ctx)
    # The note arrived after the call returned, so it rides into the *next* request,
    # folded into the message that carries the tool results (law 1).
    last = model.requests[-1].messages[-1]
    assert isinstance(last, UserMessage)
    assert last.tool_results[0].content == "started bg-1"
    assert "[background work: bg-1] exited with code 0" in last.text
    assert run.custom("tiller.notice") == [{"source": "bg-1", "text": "exited with code 0"}]


async def test_progress_after_the_call_returned_is_dropped(ctx: RunContext) -> None:
    kept: list[ExecContext] = []

    @tool(read_only=True)
    def report(ctx: ExecContext) -> str:
        """Report progress."""
        ctx.progress("working")
        kept.append(ctx)
        return "ok"

    model = ScriptedModel([{"tool_calls": [{"name": "report"}]}, "done"])
    run = await drive(Agent(model, [report]), "go", ctx)
    kept[0].progress("too late")  # a stray thread reporting after the call ended
    assert [v["message"] for v in run.custom("tiller.progress")] == ["working"]


async def test_plan_phase_shows_writers_but_they_write_only_the_scratchpad(
    workspace: Path,
) -> None:
    wrote: list[str] = []

    @tool(plan_scratchpad=True)
    def jot(path: str, ctx: ExecContext) -> str:
        """Write a note."""
        target = ctx.jail.resolve(path)
        ctx.require_writable(target)
        wrote.append(path)
        return "written"

    @tool
    def deploy() -> str:
        """Deploy."""
        return "deployed"

    plan = RunContext.sandboxed(workspace, AllowAll()).with_phase(Phase.PLAN)
    pad = ".tiller/scratch/t1"
    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "jot", "arguments": {"path": f"{pad}/plan.md"}},
                    {"name": "jot", "arguments": {"path": "src/app.py"}},
                ]
            },
            "planned",
        ]
    )
    agent = Agent(model, [jot, deploy])
    result = await agent.run_in(plan, "plan it", thread_id="t1")
    assert [spec.name for spec in model.requests[0].tools] == ["jot"]
    assert wrote == [f"{pad}/plan.md"]
    results = [
        r for m in result.state.messages if isinstance(m, UserMessage) for r in m.tool_results
    ]
    assert results[0].content == "written"
    assert results[1].is_error and "outside the scratchpad" in results[1].content


async def test_the_detach_switch_fires_only_the_running_turn() -> None:
    switch = DetachSwitch()
    assert not switch.detach()  # no turn yet
    first = switch.token_for_turn()
    assert switch.detach() and first.is_cancelled
    assert not switch.detach()  # already fired
    second = switch.token_for_turn()
    assert not second.is_cancelled


async def test_a_detach_before_any_call_asked_for_the_token_reaches_the_one_that_asks() -> None:
    """A step's background token is made when a call first reads it; a detach that came
    earlier in the step is not lost (nor does it reach the next step)."""
    switch = DetachSwitch()
    switch.begin_turn()
    assert switch.detach()
    assert switch.token().is_cancelled
    switch.begin_turn()
    assert not switch.token().is_cancelled


async def test_the_checklist_is_in_the_state_document_and_survives_resume(
    ctx: RunContext,
) -> None:
    update = {"id": "t1", "status": "completed"}
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "task_create", "arguments": {"subject": "Fix it"}}]},
            {"tool_calls": [{"name": "task_update", "arguments": update}]},
            "Done.",
        ]
    )
    options = RunOptions(review_policy=PauseOnTools(["task_update"]))
    agent = Agent(model, [task_create, task_update])
    paused_events: list[Event] = []
    paused = await agent.run_in(ctx, "fix it", options, on_event=paused_events.append)
    assert paused.stop_cause is StopCause.SUSPENDED
    wire = assert_valid_stream(paused_events)
    snapshots = [e["snapshot"] for e in wire if e["type"] == "STATE_SNAPSHOT"]
    assert snapshots[-1]["tiller"]["tasks"][0]["status"] == "pending"
    assert paused.state.tasks[0]["subject"] == "Fix it"
    assert paused.state.agent_state == {}  # the agent's own state never holds it

    # Resumed: the checklist is shown at once, then the change is a delta on it.
    (call,) = paused.state.unanswered_calls()
    events: list[Event] = []
    done = await agent.resume(
        paused.state, {call.id: ResumeDecision.approved()}, ctx=ctx, on_event=events.append
    )
    assert done.stop_cause is StopCause.COMPLETED
    state_events = [
        e for e in assert_valid_stream(events) if e["type"] in ("STATE_SNAPSHOT", "STATE_DELTA")
    ]
    assert state_events[0]["type"] == "STATE_SNAPSHOT"
    assert state_events[0]["snapshot"]["tiller"]["tasks"][0]["status"] == "pending"
    # What a client holds after the run (a delta or a snapshot, whichever was smaller).
    document: Any = None
    for event in state_events:
        document = (
            event["snapshot"]
            if event["type"] == "STATE_SNAPSHOT"
            else jsonpatch.apply_patch(document, event["delta"])
        )
    assert document["tiller"]["tasks"][0]["status"] == "completed"
    assert done.state.tasks[0]["status"] == "completed"


async def test_a_run_that_calls_no_tool_makes_no_directory(tmp_path: Path) -> None:
    """The scratchpad is made for the first tool call, not for every run: a one-turn
    run (an eval's case, a chat answer) leaves its workspace as it found it."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ctx = RunContext.sandboxed(workspace, AllowAll())
    result = await Agent(ScriptedModel(["just an answer"])).run_in(ctx, "hi")
    assert result.text == "just an answer"
    assert list(workspace.iterdir()) == []


async def test_calls_whose_tools_take_no_context_assemble_none(tmp_path: Path) -> None:
    """A call's context is assembled only if its tool reads one: a run whose tools take
    none makes no scratchpad directory (and its calls pay for no context)."""
    from tiller.policy import AllowAll

    workspace = tmp_path / "ws"
    workspace.mkdir()

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    model = ScriptedModel([{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}, "3"])
    ctx = RunContext.sandboxed(workspace, AllowAll())
    result = await Agent(model, [add]).run_in(ctx, "add")
    assert result.text == "3"
    assert list(workspace.iterdir()) == []
