"""Refusals are visible: a call nothing can approve is listed in `RunResult.refusals`,
and the first one of a run logs one warning naming the two remedies.

Before, a plain `@tool` run with no approver ended `completed` while the model had read
"Blocked by policy: ... no approver is attached", and nothing told the user why.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tiller import Agent, ScriptedModel, StopCause, tool
from tiller.loop import RefusedCall, RunContext
from tiller.phase import Phase

BLOCKED = "Blocked by policy: this action needs approval and no approver is attached."


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool(read_only=True)
def peek(path: str) -> str:
    """Read a note."""
    return "a note"


def two_calls(name: str) -> ScriptedModel:
    return ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": name, "arguments": {"a": 2, "b": 3}},
                    {"name": name, "arguments": {"a": 1, "b": 1}},
                ]
            },
            "done",
        ]
    )


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("tiller")
    ]


async def test_two_unapprovable_calls_are_listed_and_warned_about_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    result = await Agent(two_calls("add"), [add]).run("sum", workspace=tmp_path, run_id="r")
    assert result.stop_cause is StopCause.COMPLETED
    assert result.refusals == (
        RefusedCall(call_id="r-call-1", tool="add", by="policy", reason=BLOCKED),
        RefusedCall(call_id="r-call-2", tool="add", by="policy", reason=BLOCKED),
    )
    [warning] = warnings_of(caplog)
    message = warning.getMessage()
    assert "'add'" in message
    assert "@tool(read_only=True)" in message and "risk=" in message
    assert "approver=AllowAll()" in message


async def test_a_run_without_refusals_lists_none_and_warns_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    model = ScriptedModel([{"tool_calls": [{"name": "peek", "arguments": {"path": "n"}}]}, "ok"])
    result = await Agent(model, [peek]).run("read", workspace=tmp_path)
    assert result.stop_cause is StopCause.COMPLETED
    assert result.refusals == ()
    assert warnings_of(caplog) == []


async def test_each_run_warns_for_its_own_first_refusal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    agent = Agent(two_calls("add"), [add])
    await agent.run("sum", workspace=tmp_path)
    agent.model = two_calls("add")
    await agent.run("sum again", workspace=tmp_path)
    assert len(warnings_of(caplog)) == 2


async def test_refusals_say_who_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Any refusal is listed with who made it (law 4); only the unapprovable ones warn."""
    caplog.set_level(logging.WARNING)
    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "nosuch", "arguments": {}},
                    {"name": "add", "arguments": {"a": 1, "b": 2}},
                ]
            },
            "done",
        ]
    )
    ctx = RunContext.sandboxed(tmp_path, None).with_phase(Phase.PLAN)
    result = await Agent(model, [add]).run("sum", context=ctx, run_id="r")
    assert [(r.call_id, r.tool, r.by) for r in result.refusals] == [
        ("r-call-1", "nosuch", "unknown"),
        ("r-call-2", "add", "phase"),
    ]
    assert all(r.reason for r in result.refusals)
    assert warnings_of(caplog) == []
