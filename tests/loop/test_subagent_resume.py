"""A subagent that needs a person suspends its parent; the resume continues it.

The run is durable with no approver, so an Ask is held (DESIGN §3): the child's segment
closes `suspended`, its state is nested in the parent's checkpoint, the parent's interrupt
names the child's call (with its `subagentRunId`), and a resume — here, or in another
process that only has the store and the run id — continues the child under the same
`subagentRunId` and answers the parent's `agent` call with what the child then said.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tiller.errors import UsageError
from tiller.events import Event
from tiller.loop import (
    Agent,
    ContinueAs,
    FromCheckpoint,
    ResumeDecision,
    RunContext,
    RunOptions,
    RunResult,
    recover,
)
from tiller.state import StopCause
from tiller.store import DEFAULT_BUCKET, ApprovalStore, Bus, CheckpointStore, open_bus
from tiller.testing import assert_valid_stream

from ._support import assert_legal, assert_round_trips

NATS_URL = "nats://127.0.0.1:4222"
OPTIONS = RunOptions(checkpoint_bucket=DEFAULT_BUCKET)


AGENT_SOURCE = '''
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.tools import ExecContext, builtin, tool


@tool
def append(text: str, ctx: ExecContext) -> str:
    """Append a line to log.txt (the side effect that must happen exactly once)."""
    with (ctx.workdir / "log.txt").open("a") as log:
        log.write(text + "\\n")
    return f"appended {text}"


@tool(read_only=True)
def peek(ctx: ExecContext) -> str:
    """Read log.txt."""
    path = ctx.workdir / "log.txt"
    return path.read_text() if path.exists() else "(empty)"


def play(messages, info):
    """The parent starts a writer and a reader; the writer appends (held for a person),
    the reader peeks; each answers with its tool's result."""
    if any(spec.name == "agent" for spec in info.tools):
        if len(messages) == 1:
            write = {"description": "write", "prompt": "append hello"}
            read = {"description": "read", "prompt": "peek", "subagent_type": "explore"}
            return {
                "tool_calls": [
                    {"id": "p-write", "name": "agent", "arguments": write},
                    {"id": "p-read", "name": "agent", "arguments": read},
                ]
            }
        answers = [r.content.split("\\n")[0] for r in messages[-1].tool_results]
        return "parent: " + " | ".join(answers)
    prompt = messages[0].text
    if len(messages) == 1:
        writes = prompt == "append hello"
        name, arguments = ("append", {"text": "hello"}) if writes else ("peek", {})
        return {"tool_calls": [{"id": f"c-{name}", "name": name, "arguments": arguments}]}
    return f"{prompt}: {messages[-1].tool_results[0].content.strip()}"


def build_agent():
    return Agent(ScriptedModel(play), [append, peek, builtin.agent])
'''


@pytest.fixture
def agent_def(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The agent, from a module of its own (so another process can load it by name)."""
    name = f"subagent_def_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(AGENT_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "path", list(sys.path))  # the CLI adds the cwd: keep it local
    return importlib.import_module(name)


def lines(workspace: Path) -> list[str]:
    path = workspace / "log.txt"
    return path.read_text().splitlines() if path.exists() else []


async def start(agent: Agent, bus: Bus, workspace: Path, events: list[Event]) -> RunResult:
    ctx = RunContext.sandboxed(workspace).with_store(bus)
    async with asyncio.timeout(10):
        return await agent.run_in(ctx, "go", OPTIONS, on_event=events.append, run_id="r1")


async def test_a_held_call_in_a_child_suspends_the_parent_and_resumes_under_the_same_id(
    tmp_path: Path, agent_def: ModuleType
) -> None:
    workspace = tmp_path / "ws"
    bus = await open_bus("memory://")
    events: list[Event] = []
    paused = await start(agent_def.build_agent(), bus, workspace, events)

    assert paused.stop_cause is StopCause.SUSPENDED
    assert lines(workspace) == []
    wire = assert_valid_stream(events)
    # The writer's segment closes suspended on its interrupt; the reader finished.
    closed = {
        e["subagentRunId"]: e
        for e in wire
        if e["type"].startswith("SUBAGENT_") and e["type"] != "SUBAGENT_STARTED"
    }
    assert closed["r1-sub-1"]["outcome"] == {
        "type": "suspended",
        "interruptIds": ["approve-r1-sub-1-call-1"],
    }
    assert closed["r1-sub-2"]["result"]["text"] == "peek: (empty)"
    # The parent's interrupt is the child's, naming it.
    (interrupt,) = wire[-1]["outcome"]["interrupts"]
    assert interrupt["id"] == "approve-r1-sub-1-call-1"
    assert interrupt["toolCallId"] == "r1-sub-1-call-1"
    assert interrupt["subagentRunId"] == "r1-sub-1"
    # The closing snapshot lets a client show the call it is asked about.
    snapshot = [e for e in wire if e["type"] == "MESSAGES_SNAPSHOT"][-1]["messages"]
    child_calls = [
        c["id"]
        for m in snapshot
        if m.get("subagentRunId") == "r1-sub-1"
        for c in m.get("toolCalls", ())
    ]
    assert child_calls == ["r1-sub-1-call-1"]
    # The checkpoint carries the child's state; the person's record names the child's call.
    stored = (await CheckpointStore(bus).load("r1")).state
    assert list(stored.children) == ["r1-call-1"]
    assert stored.children["r1-call-1"].run_id == "r1-sub-1"
    assert_round_trips(stored)
    (held,) = await ApprovalStore(bus).for_run("r1")
    assert (held.call_id, held.tool) == ("r1-sub-1-call-1", "append")
    assert [c.id for c in stored.waiting_calls()] == ["r1-sub-1-call-1"]

    resumed: list[Event] = []
    ctx = RunContext.sandboxed(workspace).with_store(bus)
    done = await agent_def.build_agent().resume(
        "r1",
        {"r1-sub-1-call-1": ResumeDecision.approved()},
        ctx=ctx,
        on_event=resumed.append,
        continue_as=ContinueAs("r2"),
    )
    assert done.stop_cause is StopCause.COMPLETED
    assert lines(workspace) == ["hello"]
    assert done.text == "parent: append hello: appended hello | peek: (empty)"
    assert done.state.children == {}
    assert_legal(done.state.messages)
    wire = assert_valid_stream(resumed)
    started = [e for e in wire if e["type"] == "SUBAGENT_STARTED"]
    assert [(e["subagentRunId"], e["parentToolCallId"]) for e in started] == [
        ("r1-sub-1", "r1-call-1")
    ]
    results = {e["toolCallId"]: e for e in wire if e["type"] == "TOOL_CALL_RESULT"}
    assert results["r1-sub-1-call-1"]["subagentRunId"] == "r1-sub-1"
    assert results["r1-sub-1-call-1"]["content"] == "appended hello"
    assert "subagentRunId" not in results["r1-call-1"]
    # The reader finished before the pause: its answer is given again, it is not re-run.
    assert results["r1-call-2"]["content"].startswith("peek: (empty)")
    # Usage: the parent's includes both children, across both runs.
    assert done.usage.requests == 2 + 2 + 2


async def test_decisions_address_the_childs_calls_not_the_agent_call(
    tmp_path: Path, agent_def: ModuleType
) -> None:
    bus = await open_bus("memory://")
    await start(agent_def.build_agent(), bus, tmp_path / "ws", [])
    ctx = RunContext.sandboxed(tmp_path / "ws").with_store(bus)
    with pytest.raises(UsageError, match=r"missing \['r1-sub-1-call-1'\]"):
        await agent_def.build_agent().resume("r1", {}, ctx=ctx)
    with pytest.raises(UsageError, match=r"unknown \['r1-call-1'\]"):
        await agent_def.build_agent().resume(
            "r1",
            {"r1-sub-1-call-1": ResumeDecision.approved(), "r1-call-1": ResumeDecision.approved()},
            ctx=ctx,
        )


async def test_a_denied_call_is_the_childs_answer_and_it_goes_on(
    tmp_path: Path, agent_def: ModuleType
) -> None:
    workspace = tmp_path / "ws"
    bus = await open_bus("memory://")
    await start(agent_def.build_agent(), bus, workspace, [])
    seen: list[Event] = []
    done = await agent_def.build_agent().resume(
        "r1",
        {"r1-sub-1-call-1": ResumeDecision.rejected("not today")},
        ctx=RunContext.sandboxed(workspace).with_store(bus),
        on_event=seen.append,
    )
    assert_valid_stream(seen)
    assert done.completed
    assert lines(workspace) == []
    assert done.text.startswith("parent: append hello: Denied by the user: not today.")


async def test_edited_arguments_reach_the_childs_call(
    tmp_path: Path, agent_def: ModuleType
) -> None:
    workspace = tmp_path / "ws"
    bus = await open_bus("memory://")
    await start(agent_def.build_agent(), bus, workspace, [])
    done = await agent_def.build_agent().resume(
        "r1",
        {"r1-sub-1-call-1": ResumeDecision.approved({"text": "edited"})},
        ctx=RunContext.sandboxed(workspace).with_store(bus),
    )
    assert done.completed
    assert lines(workspace) == ["edited"]


PROCESS = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
from tiller.loop import Agent, ResumeDecision, RunContext, RunOptions
from tiller.ops import resume_run
from tiller.store import open_bus
from tiller.testing import assert_valid_stream

async def main(mode, url, namespace, workspace):
    events = []
    async with await open_bus(url, namespace=namespace) as bus:
        if mode == "start":
            from agent_def import build_agent
            ctx = RunContext.sandboxed(workspace).with_store(bus)
            options = RunOptions(checkpoint_bucket="tiller-run-checkpoints")
            run = build_agent()
            run.ref = "agent_def:build_agent"
            result = await run.run_in(ctx, "go", options, on_event=events.append, run_id="x-1")
            out = {"interrupts": result.state.interrupts}
        else:
            # Only the store and the run id: the agent is loaded from the checkpoint.
            result = await resume_run(
                bus, "x-1", {"x-1-sub-1-call-1": ResumeDecision.approved()},
                on_event=events.append,
            )
            out = {"text": result.text}
        wire = assert_valid_stream(events)
        out["stop"] = result.stop_cause.value
        out["subagents"] = [
            [e["type"], e["subagentRunId"]] for e in wire if e["type"].startswith("SUBAGENT_")
        ]
        print(json.dumps(out))

asyncio.run(main(*sys.argv[2:6]))
"""


@pytest.mark.parametrize("backend", ["sqlite", "nats"])
def test_a_suspended_child_continues_in_another_process(tmp_path: Path, backend: str) -> None:
    (tmp_path / "agent_def.py").write_text(AGENT_SOURCE)
    script = tmp_path / "process.py"
    script.write_text(textwrap.dedent(PROCESS))
    url = f"sqlite:///{tmp_path / 'store.db'}" if backend == "sqlite" else NATS_URL
    namespace = f"sub{uuid.uuid4().hex[:10]}" if backend == "nats" else ""
    workspace = tmp_path / "ws"

    def run(mode: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, str(script), str(tmp_path), mode, url, namespace, str(workspace)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        parsed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return parsed

    try:
        first = run("start")
        assert first["stop"] == "suspended"
        assert [i["subagentRunId"] for i in first["interrupts"]] == ["x-1-sub-1"]
        assert ["SUBAGENT_FINISHED", "x-1-sub-1"] in first["subagents"]
        assert lines(workspace) == []
        second = run("resume")
        assert second["stop"] == "completed"
        assert second["subagents"] == [
            ["SUBAGENT_STARTED", "x-1-sub-1"],
            ["SUBAGENT_FINISHED", "x-1-sub-1"],
        ]
        assert second["text"] == "parent: append hello: appended hello | peek: (empty)"
        assert lines(workspace) == ["hello"]
    finally:
        if backend == "nats":
            asyncio.run(_drop_namespace(namespace))


async def _drop_namespace(namespace: str) -> None:
    from tiller.store._nats import NatsBus

    bus = await NatsBus.connect(NATS_URL, namespace=namespace)
    try:
        await bus.delete_namespace()
    finally:
        await bus.aclose()


def test_tiller_approve_decides_a_childs_call_and_resumes_the_run(
    tmp_path: Path, agent_def: ModuleType
) -> None:
    from typer.testing import CliRunner

    from tiller.cli import app

    url = f"sqlite:///{tmp_path / 'store.db'}"
    workspace = tmp_path / "ws"

    async def suspend() -> list[Any]:
        async with await open_bus(url) as bus:
            agent = agent_def.build_agent()
            agent.ref = f"{agent_def.__name__}:build_agent"
            await start(agent, bus, workspace, [])
            return list(await ApprovalStore(bus).for_run("r1"))

    (held,) = asyncio.run(suspend())
    assert (held.call_id, held.tool) == ("r1-sub-1-call-1", "append")
    done = CliRunner().invoke(app, ["approve", held.id, "--store", url])
    assert done.exit_code == 0, done.output
    assert "stop cause  completed" in done.stdout
    assert "final text  parent: append hello: appended hello | peek: (empty)" in done.stdout
    assert lines(workspace) == ["hello"]


async def test_a_review_pause_in_a_child_resumes_in_process_from_the_checkpoint(
    tmp_path: Path, agent_def: ModuleType
) -> None:
    from tiller.loop import PauseOnWrites
    from tiller.policy import AllowAll

    # No store: the checkpoint travels in the result, with the child's state inside it.
    workspace = tmp_path / "ws"
    ctx = RunContext.sandboxed(workspace, AllowAll())
    options = RunOptions(review_policy=PauseOnWrites())
    events: list[Event] = []
    paused = await agent_def.build_agent().run_in(
        ctx, "go", options, on_event=events.append, run_id="r1"
    )
    assert paused.stop_cause is StopCause.SUSPENDED
    assert paused.checkpoint is not None
    assert list(paused.checkpoint.children) == ["r1-call-1"]
    assert [i["subagentRunId"] for i in paused.checkpoint.interrupts] == ["r1-sub-1"]
    assert_valid_stream(events)
    assert lines(workspace) == []

    resumed: list[Event] = []
    done = await agent_def.build_agent().resume(
        paused.checkpoint,
        {"r1-sub-1-call-1": ResumeDecision.approved()},
        ctx=ctx,
        options=options,
        on_event=resumed.append,
    )
    assert done.completed
    assert lines(workspace) == ["hello"]
    wire = assert_valid_stream(resumed)
    assert [e["subagentRunId"] for e in wire if e["type"] == "SUBAGENT_STARTED"] == ["r1-sub-1"]


async def test_a_crash_while_a_child_was_continued_blocks_recovery_instead_of_rerunning(
    tmp_path: Path,
) -> None:
    """Between the resume and the parent's next checkpoint, the child ran the approved
    call with no record of it: recovering the run must not run it again (law 5). The
    crash is played back from the store as it stood the moment that call ran."""
    from tiller.loop import ResumeReplayBlocked
    from tiller.model import ScriptedModel
    from tiller.policy import AllowAll
    from tiller.tools import ExecContext, builtin, tool

    bus = await open_bus("memory://")
    at_the_crash: dict[str, bytes] = {}

    @tool
    async def append(text: str, ctx: ExecContext) -> str:
        """Append a line."""
        with (ctx.workdir / "log.txt").open("a") as log:
            log.write(text + "\n")
        kv = await bus.kv(DEFAULT_BUCKET)
        for key in await kv.keys():
            entry = await kv.get(key)
            if entry is not None:
                at_the_crash[key] = entry.value
        return f"appended {text}"

    def play(messages: Any, info: Any) -> Any:
        if any(spec.name == "agent" for spec in info.tools):
            if len(messages) == 1:
                arguments = {"description": "write", "prompt": "append hello"}
                return {"tool_calls": [{"id": "p-write", "name": "agent", "arguments": arguments}]}
            return "parent done"
        if len(messages) == 1:
            call = {"id": "c-append", "name": "append", "arguments": {"text": "hello"}}
            return {"tool_calls": [call]}
        return "child done"

    def build() -> Agent:
        return Agent(ScriptedModel(play), [append, builtin.agent])

    workspace = tmp_path / "ws"
    ctx = RunContext.sandboxed(workspace).with_store(bus)
    options = RunOptions().with_checkpoint_bucket(DEFAULT_BUCKET)
    paused = await build().run_in(ctx, "go", options, run_id="r1")
    assert paused.stop_cause is StopCause.SUSPENDED
    decisions = {"r1-sub-1-call-1": ResumeDecision.approved()}
    await build().resume("r1", decisions, ctx=FromCheckpoint(store=bus, workspace=workspace))
    assert (workspace / "log.txt").read_text().splitlines() == ["hello"]
    # The process "dies" right after the child's call: the store goes back to that moment.
    kv = await bus.kv(DEFAULT_BUCKET)
    for key in await kv.keys():
        if key not in at_the_crash:
            await kv.delete(key)
    for key, value in at_the_crash.items():
        await kv.put(key, value)
    with pytest.raises(ResumeReplayBlocked):
        await recover(
            "r1",
            bus,
            agent=build(),
            force=True,
            ctx=FromCheckpoint(workspace=workspace, approver=AllowAll()),
        )
    assert (workspace / "log.txt").read_text().splitlines() == ["hello"]  # never twice
    await bus.aclose()
