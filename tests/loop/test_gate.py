"""The gate for each call: phase, withheld, unknown tool, then the approver for calls
that are not read-only (DESIGN §3). Refusals say who refused (law 4), become error
results the model reads, and the run goes on."""

# Inline snapshots hold each transcript line whole, as the run wrote it.
# ruff: noqa: E501

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from inline_snapshot import snapshot

from tiller.conversation import ToolCall
from tiller.loop import Agent, RunContext
from tiller.model import ScriptedModel
from tiller.phase import Phase
from tiller.policy import AllowAll, Callback, Decision, ReadOnly
from tiller.state import StopCause
from tiller.tools import tool

from .._transcript import transcript_of
from ._support import Run, drive

ran: list[str] = []


@tool(read_only=True)
def look() -> str:
    """Look around."""
    ran.append("look")
    return "seen"


@tool
def write_note(text: str) -> str:
    """Write a note."""
    ran.append("write_note")
    return "noted"


@tool(denial_remedy="Describe the change in your answer instead.")
def edit() -> str:
    """Edit a file."""
    ran.append("edit")
    return "edited"


@pytest.fixture(autouse=True)
def _forget_runs() -> None:
    ran.clear()


def calling(*names: str) -> ScriptedModel:
    calls = [
        {"name": name, "arguments": {"text": "hi"} if name == "write_note" else {}}
        for name in names
    ]
    return ScriptedModel([{"tool_calls": calls}, "done"])


async def gate(context: RunContext, *names: str) -> tuple[Run, ScriptedModel]:
    model = calling(*names)
    run = await drive(Agent(model, [look, write_note, edit]), "go", context)
    assert run.result.stop_cause is StopCause.COMPLETED  # a refusal never stops the run
    return run, model


# ── phase, withheld, unknown ─────────────────────────────────────────────────────


async def test_plan_phase_hides_and_refuses_writing_tools(ctx: RunContext) -> None:
    run, model = await gate(ctx.with_phase(Phase.PLAN), "look", "write_note")
    assert [spec.name for spec in model.requests[0].tools] == ["look"]
    assert transcript_of(run) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1:",
            "call r1-call-1 look {}",
            'call r1-call-2 write_note {"text":"hi"}',
            "result r1-call-1 look: seen",
            "error r1-call-2 write_note: Refused by the plan phase: write_note changes things and is not available while planning.",
            "assistant r1-msg-4: done",
        ]
    )
    assert ran == ["look"]
    trace = run.result.tool_trace
    assert [(e.name, e.refused_by, e.denied, e.is_error) for e in trace] == [
        ("look", None, False, False),
        ("write_note", "phase", True, True),
    ]
    assert run.result.state.calls["r1-call-2"].refused_by == "phase"
    assert run.result.state.calls["r1-call-2"].status == "failed"
    assert run.result.state.phase is Phase.PLAN


async def test_execute_phase_shows_every_tool(ctx: RunContext) -> None:
    _, model = await gate(ctx, "look")
    assert [spec.name for spec in model.requests[0].tools] == ["look", "write_note", "edit"]


async def test_withheld_tools_are_hidden_and_refused(ctx: RunContext) -> None:
    run, model = await gate(ctx.with_withheld(["look"]), "look", "write_note")
    assert [spec.name for spec in model.requests[0].tools] == ["write_note", "edit"]
    assert transcript_of(run) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1:",
            "call r1-call-1 look {}",
            'call r1-call-2 write_note {"text":"hi"}',
            "error r1-call-1 look: Refused: the tool look is withheld from this run.",
            "result r1-call-2 write_note: noted",
            "assistant r1-msg-4: done",
        ]
    )
    assert ran == ["write_note"]
    assert run.result.tool_trace[0].refused_by == "withheld"


async def test_an_unknown_tool_gets_an_error_result_and_the_run_goes_on(ctx: RunContext) -> None:
    run, _ = await gate(ctx, "teleport", "look")
    assert transcript_of(run) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1:",
            "call r1-call-1 teleport {}",
            "call r1-call-2 look {}",
            "error r1-call-1 teleport: Unknown tool 'teleport'. The tools you can call are: edit, look, write_note.",
            "result r1-call-2 look: seen",
            "assistant r1-msg-4: done",
        ]
    )
    entry = run.result.tool_trace[0]
    assert (entry.name, entry.unknown, entry.refused_by) == ("teleport", True, "unknown")
    assert run.result.text == "done"


# ── approvers ────────────────────────────────────────────────────────────────────


async def test_no_approver_blocks_what_needs_approval(workspace: Path) -> None:
    run, _ = await gate(RunContext.sandboxed(workspace), "write_note", "look")
    assert transcript_of(run) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1:",
            'call r1-call-1 write_note {"text":"hi"}',
            "call r1-call-2 look {}",
            "error r1-call-1 write_note: Blocked by policy: this action needs approval and no approver is attached.",
            "result r1-call-2 look: seen",
            "assistant r1-msg-4: done",
        ]
    )
    assert ran == ["look"]
    assert run.result.tool_trace[0].refused_by == "policy"


async def test_read_only_approver(workspace: Path) -> None:
    run, _ = await gate(RunContext.sandboxed(workspace, ReadOnly()), "write_note", "look")
    assert transcript_of(run) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1:",
            'call r1-call-1 write_note {"text":"hi"}',
            "call r1-call-2 look {}",
            "error r1-call-1 write_note: Blocked by policy: write_note changes things, and this run is read-only.",
            "result r1-call-2 look: seen",
            "assistant r1-msg-4: done",
        ]
    )
    assert ran == ["look"]


async def test_the_denial_remedy_follows_the_refusal(workspace: Path) -> None:
    run, _ = await gate(RunContext.sandboxed(workspace, ReadOnly()), "edit")
    assert transcript_of(run) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1:",
            "call r1-call-1 edit {}",
            "error r1-call-1 edit: Blocked by policy: edit changes things, and this run is read-only. Describe the change in your answer instead.",
            "assistant r1-msg-3: done",
        ]
    )


async def test_allow_all(workspace: Path) -> None:
    run, _ = await gate(RunContext.sandboxed(workspace, AllowAll()), "write_note")
    assert run.results()[0].content == "noted"
    assert ran == ["write_note"]


@pytest.mark.parametrize(
    ("answer", "content"),
    [
        (Decision.deny("not on a Friday"), "Denied by the user: not on a Friday."),
        (False, "Denied by the user: the approver said no."),
        (Decision.blocked("rule 7"), "Blocked by policy: rule 7."),
    ],
)
async def test_callback_refusals_say_who_refused(
    workspace: Path, answer: Decision | bool, content: str
) -> None:
    approver = Callback(lambda call, tool: answer)
    run, _ = await gate(RunContext.sandboxed(workspace, approver), "write_note")
    result = run.results()[0]
    assert (result.content, result.is_error) == (content, True)
    expected = "policy" if isinstance(answer, Decision) and answer.by == "policy" else "user"
    assert run.result.tool_trace[0].refused_by == expected
    assert ran == []


async def test_read_only_calls_never_reach_the_approver(workspace: Path) -> None:
    asked: list[tuple[str, str]] = []

    async def approve(call: ToolCall, tool: Any) -> bool:
        asked.append((call.id, call.name))
        return True

    context = RunContext.sandboxed(workspace, Callback(approve))
    run, _ = await gate(context, "look", "write_note", "look")
    assert asked == [("r1-call-2", "write_note")]
    assert transcript_of(run) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1:",
            "call r1-call-1 look {}",
            'call r1-call-2 write_note {"text":"hi"}',
            "call r1-call-3 look {}",
            "result r1-call-1 look: seen",
            "result r1-call-2 write_note: noted",
            "result r1-call-3 look: seen",
            "assistant r1-msg-5: done",
        ]
    )


async def test_every_call_of_a_batch_is_gated_on_its_own(workspace: Path) -> None:
    """One call denied does not refuse its neighbours."""

    def approve(call: ToolCall, tool: Any) -> Decision:
        return Decision.deny("no edits") if call.name == "edit" else Decision.allow()

    context = RunContext.sandboxed(workspace, Callback(approve))
    run, _ = await gate(context, "edit", "write_note")
    assert transcript_of(run) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1:",
            "call r1-call-1 edit {}",
            'call r1-call-2 write_note {"text":"hi"}',
            "error r1-call-1 edit: Denied by the user: no edits. Describe the change in your answer instead.",
            "result r1-call-2 write_note: noted",
            "assistant r1-msg-4: done",
        ]
    )
    assert ran == ["write_note"]
