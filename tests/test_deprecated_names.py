"""The names issue 15 renamed still work for one release: each warns, says what it is now,
and gives the same thing the new name does."""

from __future__ import annotations

import importlib
from pathlib import Path

import orjson
import pytest

import tiller.tools
from tiller.errors import UsageError
from tiller.loop import Budget, RunContext
from tiller.state import RunState, StopCause
from tiller.tools import ExecContext, Jail


def test_toolctx_from_tiller_tools_warns_and_is_jail() -> None:
    with pytest.warns(DeprecationWarning, match="ToolCtx is now Jail; ToolCtx goes in the next"):
        from tiller.tools import ToolCtx  # type: ignore[attr-defined]
    assert ToolCtx is Jail
    with pytest.warns(DeprecationWarning, match="ToolCtx is now Jail"):
        assert tiller.tools.ToolCtx is Jail  # type: ignore[attr-defined]


def test_toolctx_is_not_listed_and_other_missing_names_still_fail() -> None:
    assert "ToolCtx" not in tiller.tools.__all__
    assert "Jail" in tiller.tools.__all__
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        _ = tiller.tools.NoSuchName  # type: ignore[attr-defined]
    # The front door never had it, and does not grow it.
    with pytest.raises(AttributeError):
        _ = importlib.import_module("tiller").ToolCtx


def test_run_context_tools_warns_and_returns_the_jail(tmp_path: Path) -> None:
    run_ctx = RunContext.sandboxed(tmp_path)
    with pytest.warns(DeprecationWarning, match=r"RunContext\.tools is now RunContext\.jail"):
        jail = run_ctx.tools
    assert jail is run_ctx.jail
    assert jail.root == tmp_path.resolve()


def test_run_context_with_tools_warns_and_builds_what_with_jail_builds(tmp_path: Path) -> None:
    run_ctx = RunContext.sandboxed(tmp_path)
    other = Jail(tmp_path, shell_timeout=7)
    with pytest.warns(DeprecationWarning, match=r"with_tools is now with_jail"):
        old = run_ctx.with_tools(other)
    new = run_ctx.with_jail(other)
    assert old.jail == new.jail == other
    assert old.jail.shell_timeout == 7


def test_exec_context_tools_warns_and_returns_the_jail(tmp_path: Path) -> None:
    ctx = ExecContext.for_test(tmp_path)
    with pytest.warns(DeprecationWarning, match=r"ExecContext\.tools is now ExecContext\.jail"):
        jail = ctx.tools
    assert jail is ctx.jail


def test_budget_max_turns_warns_and_sets_max_steps() -> None:
    with pytest.warns(
        DeprecationWarning, match=r"Budget\(max_turns=\) is now Budget\(max_steps=\)"
    ):
        old = Budget(max_turns=5)
    assert old.max_steps == 5
    assert old == Budget(max_steps=5)
    assert old.exceeded() is None
    old.steps = 5
    assert old.exceeded() is StopCause.STEP_BUDGET


def test_budget_refuses_both_names() -> None:
    with pytest.raises(UsageError, match="give max_steps only"):
        Budget(max_steps=3, max_turns=3)


def test_turn_budget_still_reads_as_the_step_budget() -> None:
    assert StopCause("turn_budget") is StopCause.STEP_BUDGET
    assert StopCause.TURN_BUDGET is StopCause.STEP_BUDGET  # an alias, not a new member
    assert "TURN_BUDGET" not in [cause.name for cause in StopCause]
    stored = RunState.from_json(
        b'{"schema_version": 2, "run_id": "r", "thread_id": "t", "stop_cause": "turn_budget"}'
    )
    assert stored.stop_cause is StopCause.STEP_BUDGET
    assert orjson.loads(stored.to_json())["stop_cause"] == "step_budget"


async def test_run_result_turns_and_trace_turn_warn_and_are_the_step_numbers(
    tmp_path: Path,
) -> None:
    from tiller import Agent, AllowAll, ScriptedModel, tool

    @tool
    def note(text: str) -> str:
        """Take a note."""
        return text

    calls = {"tool_calls": [{"name": "note", "arguments": {"text": "a"}}]}
    result = await Agent(ScriptedModel([calls, "done"]), [note]).run(
        "go", workspace=tmp_path, approver=AllowAll()
    )
    assert result.steps == 2
    with pytest.warns(DeprecationWarning, match=r"RunResult\.turns is now RunResult\.steps"):
        assert result.turns == 2
    (entry,) = result.tool_trace
    assert entry.step == 1
    with pytest.warns(DeprecationWarning, match=r"ToolTraceEntry\.turn is now .*\.step"):
        assert entry.turn == 1
