"""`Agent.run_sync`: `run` for scripts, in an event loop of its own."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from tiller import Agent, AllowAll, ScriptedModel, StopCause, UsageError, tool


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def summing_model() -> ScriptedModel:
    return ScriptedModel(
        [{"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}, "2 + 3 = 5"]
    )


def test_run_sync_runs_the_agent_to_its_result(tmp_path: Path) -> None:
    result = Agent(summing_model(), [add]).run_sync(
        "2 + 3?", workspace=tmp_path, approver=AllowAll(), run_id="run-sync"
    )
    assert (result.text, result.stop_cause) == ("2 + 3 = 5", StopCause.COMPLETED)
    assert result.state.run_id == "run-sync"
    assert [entry.name for entry in result.tool_trace] == ["add"]
    assert result.refusals == ()


def test_run_sync_takes_the_parameters_of_run() -> None:
    sync = inspect.signature(Agent.run_sync).parameters
    run = inspect.signature(Agent.run).parameters
    assert [(p.name, p.kind, p.default) for p in sync.values()] == [
        (p.name, p.kind, p.default) for p in run.values()
    ]


async def test_run_sync_inside_a_running_loop_says_to_await_run() -> None:
    model = summing_model()
    with pytest.raises(UsageError, match=r"await agent\.run\(\.\.\.\)"):
        Agent(model, [add]).run_sync("2 + 3?")
    assert model.requests == [], "nothing ran"
