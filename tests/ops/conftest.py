"""Durable runs on a real SQLite store file, set up with the library as a run leaves them:
held for a person, crashed mid-step. The operations then act on the file in a store
session of their own, as another process would."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

from tiller.conversation import AssistantMessage, ToolCall, UserMessage
from tiller.loop import RunContext, RunOptions, load_agent, record_policy
from tiller.policy import AllowAll
from tiller.state import RunState, StopCause
from tiller.store import ApprovalStore, Bus, CheckpointStore, HeldApproval, open_bus

AGENT_MODULE = '''
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.tools import ExecContext, tool


@tool
def append(text: str, ctx: ExecContext) -> str:
    """Append a line to log.txt."""
    with (ctx.workdir / "log.txt").open("a") as log:
        log.write(text + "\\n")
    return f"appended {text}"


def _script(texts):
    def answer(messages, info):
        results = getattr(messages[-1], "tool_results", ()) if messages else ()
        if results:
            return "finished: " + " | ".join(r.content for r in results)
        return {"tool_calls": [{"name": "append", "arguments": {"text": t}} for t in texts]}

    return answer


def one():
    return Agent(ScriptedModel(_script(["a"])), [append], name="one")


def two():
    return Agent(ScriptedModel(_script(["a", "b"])), [append], name="two")


def three():
    return Agent(ScriptedModel(_script(["a", "b", "c"])), [append], name="three")
'''


@pytest.fixture
def agent_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The name of a fresh importable module defining the test agents."""
    name = f"ops_agent_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(AGENT_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "path", list(sys.path))
    return name


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def lines(workspace: Path) -> list[str]:
    path = workspace / "log.txt"
    return path.read_text().splitlines() if path.exists() else []


async def held_run(
    url: str, workspace: Path, ref: str, run_id: str = "r-held"
) -> list[HeldApproval]:
    """A headless durable run with no approver: it holds its writes and suspends, and
    its held calls are recorded for a person (as the gate records them)."""
    async with await open_bus(url) as bus:
        ctx = RunContext.sandboxed(workspace).with_store(bus)
        options = RunOptions(checkpoint_bucket="tiller-run-checkpoints")
        state = RunState(run_id=run_id, thread_id=f"t-{run_id}", messages=[UserMessage(text="go")])
        record_policy(state, ctx, options, agent_ref=ref)
        result = await load_agent(ref).run_in(ctx, state, options)
        assert result.stop_cause is StopCause.SUSPENDED
        return await ApprovalStore(bus).hold_interrupts(result.state, reason="writes ask")


async def crashed_run(bus: Bus, workspace: Path, ref: str | None, run_id: str = "r-crash") -> None:
    """A run as a crash leaves it: `running` after a step that asked for three calls,
    `call-a` completed, `call-b` and `call-c` started and never completed."""
    ctx = RunContext.sandboxed(workspace, AllowAll()).with_store(bus)
    state = RunState(run_id=run_id, thread_id=f"t-{run_id}", messages=[UserMessage(text="go")])
    record_policy(state, ctx, agent_ref=ref)
    calls = tuple(
        ToolCall(id=f"call-{t}", name="append", arguments=f'{{"text": "{t}"}}') for t in "abc"
    )
    state.messages.append(AssistantMessage(id=f"{run_id}-msg-1", tool_calls=calls))
    state.step = 1
    store = CheckpointStore(bus)
    await store.save(state, "running")
    await store.call_completed(run_id, "call-a", "appended a", is_error=False)
    await store.call_started(run_id, "call-b")
    await store.call_started(run_id, "call-c")
