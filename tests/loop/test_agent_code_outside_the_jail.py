"""Law 11: an agent whose code lives in its run's workspace is refused before it is
imported. The run's model can write the workspace, so an agent module there, imported
again to resume, approve or deny the run in another process, would run what the model
wrote, on the host (found by a review: a `tiller deny` ran a rewritten `myagent.py`)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tiller.errors import UsageError
from tiller.loop import (
    Agent,
    FromCheckpoint,
    PauseOnWrites,
    ResumeDecision,
    RunContext,
    RunOptions,
    load_agent,
)
from tiller.model import ScriptedModel
from tiller.ops import resume_run
from tiller.store import open_bus
from tiller.tools import tool

AGENT_MODULE = """
from pathlib import Path

Path({marker!r}).write_text("host code ran")

from tiller.loop import Agent
from tiller.model import ScriptedModel


def make():
    return Agent(ScriptedModel(["hi"]))
"""


@pytest.fixture
def places(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A workspace holding `inside_agent.py` and a package `inside_pkg`, and a directory
    outside it holding `outside_agent.py`, all importable; the marker each writes."""
    workspace, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    workspace.mkdir()
    elsewhere.mkdir()
    marker = tmp_path / "PWNED"
    code = AGENT_MODULE.format(marker=str(marker))
    (workspace / "inside_agent.py").write_text(code)
    (workspace / "inside_pkg").mkdir()
    (workspace / "inside_pkg" / "__init__.py").write_text(code)
    (elsewhere / "outside_agent.py").write_text(AGENT_MODULE.format(marker=str(tmp_path / "ok")))
    sys.path[:0] = [str(workspace), str(elsewhere)]
    try:
        yield workspace, marker
    finally:
        sys.path.remove(str(workspace))
        sys.path.remove(str(elsewhere))
        for name in ("inside_agent", "inside_pkg", "outside_agent"):
            sys.modules.pop(name, None)


@pytest.mark.parametrize("ref", ["inside_agent:make", "inside_pkg:make", "inside_pkg.sub:x"])
def test_code_in_the_workspace_is_refused_unimported(places: tuple[Path, Path], ref: str) -> None:
    workspace, marker = places
    with pytest.raises(UsageError, match="inside the run's workspace"):
        load_agent(ref, outside=workspace)
    assert not marker.exists()


def test_code_outside_the_workspace_loads(places: tuple[Path, Path]) -> None:
    workspace, _ = places
    assert isinstance(load_agent("outside_agent:make", outside=workspace), Agent)


@tool
def write(text: str) -> str:
    """Write (declares nothing: a review pause holds it)."""
    return "written"


async def test_a_resume_refuses_an_agent_whose_code_is_in_the_runs_workspace(
    places: tuple[Path, Path], tmp_path: Path
) -> None:
    workspace, marker = places
    turns = [{"tool_calls": [{"name": "write", "arguments": {"text": "x"}}]}, "done"]
    agent = Agent(ScriptedModel(turns), [write])
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        ctx = RunContext.sandboxed(workspace).with_store(bus)
        options = RunOptions(
            checkpoint_bucket="tiller-run-checkpoints", review_policy=PauseOnWrites()
        )
        paused = await agent.run_in(ctx, "go", options, run_id="r1")
        assert paused.checkpoint is not None
        with pytest.raises(UsageError, match="inside the run's workspace"):
            await resume_run(bus, "r1", {}, agent="inside_agent:make")
    assert not marker.exists()


async def test_a_resume_in_another_workspace_refuses_an_agent_whose_code_is_there(
    places: tuple[Path, Path], tmp_path: Path
) -> None:
    """The run continues in another workspace (`--workspace`): the model writes that one
    now, so the agent's code must not be in it either."""
    workspace, marker = places
    first = tmp_path / "first"
    first.mkdir()
    turns = [{"tool_calls": [{"name": "write", "arguments": {"text": "x"}}]}, "done"]
    agent = Agent(ScriptedModel(turns), [write])
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        ctx = RunContext.sandboxed(first).with_store(bus)
        options = RunOptions(
            checkpoint_bucket="tiller-run-checkpoints", review_policy=PauseOnWrites()
        )
        paused = await agent.run_in(ctx, "go", options, run_id="r2")
        assert paused.checkpoint is not None
        with pytest.raises(UsageError, match="inside the run's workspace"):
            await resume_run(
                bus,
                "r2",
                {"r2-call-1": ResumeDecision.approved()},
                agent="inside_agent:make",
                ctx=FromCheckpoint(workspace=workspace),
            )
    assert not marker.exists()
