"""Durable runs: review pauses, resume in this process and in another, races, crashes.

Cross-process tests start real interpreters that share a SQLite file or the NATS server;
the tool's side effect is a line appended to a file, so "exactly once" is checked on disk.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from tiller.events import Event
from tiller.loop import (
    Agent,
    PauseOnTools,
    PauseOnWrites,
    ResumeDecision,
    ResumeReplayBlocked,
    RunContext,
    RunOptions,
    recover,
)
from tiller.model import ScriptedModel
from tiller.policy import AllowAll
from tiller.state import RunState, StopCause
from tiller.store import AlreadyResumed, CheckpointStore, open_bus
from tiller.testing import assert_valid_stream
from tiller.tools import ExecContext, tool

NATS_URL = "nats://127.0.0.1:4222"


@tool
def append(text: str, ctx: ExecContext) -> str:
    """Append a line to log.txt (the side effect that must happen exactly once)."""
    with (ctx.workdir / "log.txt").open("a") as log:
        log.write(text + "\n")
    return f"appended {text}"


@tool(read_only=True)
def peek(ctx: ExecContext) -> str:
    """Read log.txt."""
    path = ctx.workdir / "log.txt"
    return path.read_text() if path.exists() else ""


def first_turn(*texts: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "append", "arguments": {"text": t}} for t in texts]}


def lines(workspace: Path) -> list[str]:
    path = workspace / "log.txt"
    return path.read_text().splitlines() if path.exists() else []


async def test_a_review_pause_suspends_before_any_call_and_resumes_in_process(
    tmp_path: Path,
) -> None:
    events: list[Event] = []
    ctx = RunContext.sandboxed(tmp_path)
    agent = Agent(ScriptedModel([first_turn("one", "two"), "done"]), [append, peek])
    options = RunOptions(review_policy=PauseOnWrites())
    paused = await agent.run_in(ctx, "go", options, on_event=events.append, run_id="r1")
    assert paused.stop_cause is StopCause.SUSPENDED
    assert paused.checkpoint is not None and "append" in (paused.pause_reason or "")
    assert lines(tmp_path) == []  # nothing ran: the person reviews the whole step
    wire = assert_valid_stream(events)
    outcome = wire[-1]["outcome"]
    assert outcome["type"] == "interrupt"
    ids = [i["toolCallId"] for i in outcome["interrupts"]]
    assert [i["id"] for i in outcome["interrupts"]] == [f"approve-{c}" for c in ids]
    assert all(i["reason"] == "tool_call" for i in outcome["interrupts"])

    resumed_events: list[Event] = []
    decisions = {ids[0]: ResumeDecision.approved(), ids[1]: ResumeDecision.rejected("not two")}
    done = await agent.resume(paused.checkpoint, decisions, ctx=ctx, on_event=resumed_events.append)
    assert done.stop_cause is StopCause.COMPLETED
    assert lines(tmp_path) == ["one"]
    resumed = assert_valid_stream(resumed_events)
    assert resumed[1]["type"] == "MESSAGES_SNAPSHOT"
    results = {e["toolCallId"]: e["content"] for e in resumed if e["type"] == "TOOL_CALL_RESULT"}
    assert results[ids[0]] == "appended one"
    assert results[ids[1]] == "Denied by the user: not two."


async def test_edited_arguments_replace_the_models(tmp_path: Path) -> None:
    ctx = RunContext.sandboxed(tmp_path)
    agent = Agent(ScriptedModel([first_turn("draft"), "done"]), [append])
    paused = await agent.run_in(ctx, "go", RunOptions(review_policy=PauseOnTools(["append"])))
    assert paused.checkpoint is not None
    (call,) = paused.checkpoint.unanswered_calls()
    await agent.resume(
        paused.checkpoint, {call.id: ResumeDecision.approved({"text": "final"})}, ctx=ctx
    )
    assert lines(tmp_path) == ["final"]
    again = Agent(ScriptedModel([first_turn("draft")]), [append])
    bad = await again.run_in(ctx, "go", RunOptions(review_policy=PauseOnWrites()), run_id="r2")
    assert bad.checkpoint is not None
    (call,) = bad.checkpoint.unanswered_calls()
    result = await Agent(ScriptedModel(["done"], per_run=False), [append]).resume(
        bad.checkpoint, {call.id: ResumeDecision.approved({"text": 3})}, ctx=ctx
    )
    assert result.tool_trace[0].malformed_arguments
    assert lines(tmp_path) == ["final"]


async def test_resume_needs_a_decision_for_every_pending_call(tmp_path: Path) -> None:
    ctx = RunContext.sandboxed(tmp_path)
    agent = Agent(ScriptedModel([first_turn("a", "b"), "done"]), [append])
    paused = await agent.run_in(ctx, "go", RunOptions(review_policy=PauseOnWrites()))
    assert paused.checkpoint is not None
    first = paused.checkpoint.unanswered_calls()[0]
    from tiller.errors import UsageError

    with pytest.raises(UsageError, match="missing"):
        await agent.resume(paused.checkpoint, {first.id: ResumeDecision.approved()}, ctx=ctx)


async def test_durable_mode_checkpoints_every_step_and_records_calls(tmp_path: Path) -> None:
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        ctx = RunContext.sandboxed(tmp_path / "ws", AllowAll()).with_store(bus)
        agent = Agent(ScriptedModel([first_turn("x"), first_turn("y"), "done"]), [append])
        options = RunOptions(checkpoint_bucket="tiller-run-checkpoints")
        result = await agent.run_in(ctx, "go", options, run_id="durable-1", thread_id="t-1")
        assert result.completed
        store = CheckpointStore(bus)
        checkpoint = await store.load("durable-1")
        assert checkpoint.status == "finished"
        assert checkpoint.state.messages == result.state.messages
        assert (await store.for_thread("t-1")) is not None
        logs = await store.calls("durable-1")
        assert sorted(log.status for log in logs.values()) == ["completed", "completed"]


@pytest.mark.parametrize("backend", ["sqlite", "nats"])
async def test_two_racing_resumes_one_proceeds(tmp_path: Path, backend: str) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}" if backend == "sqlite" else NATS_URL
    namespace = f"race{uuid.uuid4().hex[:10]}" if backend == "nats" else ""
    workspace = tmp_path / "ws"
    bus = await open_bus(url, namespace=namespace)
    try:
        ctx = RunContext.sandboxed(workspace).with_store(bus)
        options = RunOptions(review_policy=PauseOnWrites(), checkpoint_bucket="cp")
        agent = Agent(ScriptedModel([first_turn("once")]), [append])
        paused = await agent.run_in(ctx, "go", options, run_id="race-1")
        assert paused.stop_cause is StopCause.SUSPENDED
        (call,) = paused.state.unanswered_calls()
        buses = [await open_bus(url, namespace=namespace) for _ in range(2)]
        try:
            attempts = [
                Agent(ScriptedModel(["done"], per_run=False), [append]).resume(
                    "race-1",
                    {call.id: ResumeDecision.approved()},
                    ctx=RunContext.sandboxed(workspace).with_store(b),
                    bucket="cp",
                )
                for b in buses
            ]
            outcomes = await asyncio.gather(*attempts, return_exceptions=True)
        finally:
            for b in buses:
                await b.aclose()
        assert sum(isinstance(o, AlreadyResumed) for o in outcomes) == 1
        assert sum(getattr(o, "completed", False) for o in outcomes) == 1
        assert lines(workspace) == ["once"]
    finally:
        if backend == "nats":
            await bus.delete_namespace()  # type: ignore[attr-defined]
        await bus.aclose()


async def test_an_uncertain_call_blocks_until_reconciled(tmp_path: Path) -> None:
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        ctx = RunContext.sandboxed(tmp_path / "ws").with_store(bus)
        options = RunOptions(review_policy=PauseOnWrites(), checkpoint_bucket="cp")
        agent = Agent(ScriptedModel([first_turn("a", "b", "c")]), [append])
        paused = await agent.run_in(ctx, "go", options, run_id="crash-1")
        a, b, c = paused.state.unanswered_calls()
        store = CheckpointStore(bus, "cp")
        # As if a process died mid-batch: a completed, b started (unknown), c never started.
        await store.call_completed("crash-1", a.id, "appended a", is_error=False)
        await store.call_started("crash-1", b.id)
        decisions = {x.id: ResumeDecision.approved() for x in (a, b, c)}
        later = Agent(ScriptedModel(["done"], per_run=False), [append])
        with pytest.raises(ResumeReplayBlocked, match=b.id):
            await later.resume("crash-1", decisions, ctx=ctx, bucket="cp")
        await store.mark_call("crash-1", b.id, content="appended b", is_error=False)
        done = await later.resume("crash-1", decisions, ctx=ctx, bucket="cp")
        assert done.completed
        assert lines(tmp_path / "ws") == ["c"]  # a and b were done already: never again


AGENT_MODULE = """
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.policy import AllowAll
from tiller.tools import ExecContext, tool


@tool
def append(text: str, ctx: ExecContext) -> str:
    \"\"\"Append a line to log.txt.\"\"\"
    with (ctx.workdir / "log.txt").open("a") as log:
        log.write(text + "\\n")
    return f"appended {text}"


def build(turns):
    return Agent(ScriptedModel(turns), [append])
"""

PROCESS = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
from agent_def import build
from tiller.loop import PauseOnWrites, ResumeDecision, RunContext, RunOptions
from tiller.store import open_bus

BUCKET = "tiller-run-checkpoints"
FIRST = {"tool_calls": [{"name": "append", "arguments": {"text": "exactly once"}}]}


async def main(mode, url, namespace, workspace):
    async with await open_bus(url, namespace=namespace) as bus:
        ctx = RunContext.sandboxed(workspace).with_store(bus)
        if mode == "start":
            options = RunOptions(review_policy=PauseOnWrites(), checkpoint_bucket=BUCKET)
            result = await build([FIRST, "all done"]).run_in(ctx, "go", options, run_id="xproc-1")
            calls = [c.id for c in result.state.unanswered_calls()]
            print(json.dumps({"stop": result.stop_cause.value, "calls": calls}))
        else:
            decisions = {sys.argv[6]: ResumeDecision.approved()}
            result = await build([FIRST, "all done"]).resume("xproc-1", decisions, ctx=ctx)
            print(json.dumps({"stop": result.stop_cause.value, "text": result.text}))

asyncio.run(main(*sys.argv[2:6]))
"""


@pytest.mark.parametrize("backend", ["sqlite", "nats"])
def test_suspend_in_one_process_resume_in_another(tmp_path: Path, backend: str) -> None:
    (tmp_path / "agent_def.py").write_text(AGENT_MODULE)
    script = tmp_path / "process.py"
    script.write_text(textwrap.dedent(PROCESS))
    url = f"sqlite:///{tmp_path / 'store.db'}" if backend == "sqlite" else NATS_URL
    namespace = f"xp{uuid.uuid4().hex[:10]}" if backend == "nats" else ""
    workspace = tmp_path / "ws"

    def run(*args: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, str(script), str(tmp_path), *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    try:
        started = run("start", url, namespace, str(workspace))
        assert started["stop"] == "suspended"
        assert lines(workspace) == []
        (call_id,) = started["calls"]
        finished = run("resume", url, namespace, str(workspace), call_id)
        assert finished == {"stop": "completed", "text": "all done"}
        assert lines(workspace) == ["exactly once"]
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


async def test_headless_durable_asks_hold_the_call_after_the_allowed_ones_ran(
    tmp_path: Path,
) -> None:
    """DESIGN §3: headless with a store, an Ask suspends the run — after the batch's
    allowed (read-only) calls finish — and a person's decision resumes it."""
    events: list[Event] = []
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        workspace = tmp_path / "ws"
        ctx = RunContext.sandboxed(workspace).with_store(bus)  # no approver: headless
        options = RunOptions(checkpoint_bucket="cp")
        turn = {
            "tool_calls": [
                {"name": "peek", "arguments": {}},
                {"name": "append", "arguments": {"text": "held"}},
            ]
        }
        agent = Agent(ScriptedModel([turn]), [append, peek])
        paused = await agent.run_in(ctx, "go", options, on_event=events.append, run_id="held-1")
        assert paused.stop_cause is StopCause.SUSPENDED
        peek_call, append_call = paused.state.messages[-1].tool_calls  # type: ignore[union-attr]
        wire = assert_valid_stream(events)
        results = [e for e in wire if e["type"] == "TOOL_CALL_RESULT"]
        assert [r["toolCallId"] for r in results] == [peek_call.id]  # the read ran
        assert [i["toolCallId"] for i in wire[-1]["outcome"]["interrupts"]] == [append_call.id]
        assert lines(workspace) == []
        done = await Agent(ScriptedModel(["done"], per_run=False), [append, peek]).resume(
            "held-1",
            {append_call.id: ResumeDecision.approved()},
            ctx=ctx.with_approver(None),
            bucket="cp",
        )
        assert done.completed
        assert lines(workspace) == ["held"]
        (batch,) = [m for m in done.state.messages if getattr(m, "tool_results", ())]
        assert [r.call_id for r in batch.tool_results] == [peek_call.id, append_call.id]


@pytest.mark.parametrize("backend", ["sqlite", "nats"])
def test_two_processes_resume_one_checkpoint_at_once(tmp_path: Path, backend: str) -> None:
    (tmp_path / "agent_def.py").write_text(AGENT_MODULE)
    script = tmp_path / "process.py"
    script.write_text(textwrap.dedent(PROCESS))
    url = f"sqlite:///{tmp_path / 'store.db'}" if backend == "sqlite" else NATS_URL
    namespace = f"xr{uuid.uuid4().hex[:10]}" if backend == "nats" else ""
    workspace = tmp_path / "ws"
    base = [sys.executable, str(script), str(tmp_path)]
    try:
        started = subprocess.run(
            [*base, "start", url, namespace, str(workspace)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        (call_id,) = json.loads(started.stdout.strip().splitlines()[-1])["calls"]
        racers = [
            subprocess.Popen(
                [*base, "resume", url, namespace, str(workspace), call_id],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outputs = [racer.communicate(timeout=120) for racer in racers]
        codes = sorted(racer.returncode for racer in racers)
        assert codes[0] == 0 and codes[1] != 0, outputs
        assert any("AlreadyResumed" in err for _, err in outputs), outputs
        assert lines(workspace) == ["exactly once"]
    finally:
        if backend == "nats":
            asyncio.run(_drop_namespace(namespace))


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


async def test_a_live_run_holds_its_lease_so_recovery_waits_or_is_forced(tmp_path: Path) -> None:
    """law 5: recovering a run whose process is still alive would run its calls twice."""
    from tiller.store import RunStillRunning

    clock = _Clock()
    entered, release = asyncio.Event(), asyncio.Event()

    @tool
    async def slow(ctx: ExecContext) -> str:
        """Take a while."""
        entered.set()
        await release.wait()
        return "slow done"

    async with await open_bus("memory://", clock=clock) as bus:
        ctx = RunContext.sandboxed(tmp_path, AllowAll()).with_store(bus)
        options = RunOptions(checkpoint_bucket="cp", lease_ttl=30)
        turn = {"tool_calls": [{"name": "slow", "arguments": {}}]}
        running = asyncio.create_task(
            Agent(ScriptedModel([turn, "done"]), [slow]).run_in(ctx, "go", options, run_id="live")
        )
        async with asyncio.timeout(10):
            await entered.wait()
        store = CheckpointStore(bus, "cp")
        holder = await store.holder("live")
        assert holder is not None and holder[1] == 30
        recovering = Agent(ScriptedModel(["done"], per_run=False), [slow])
        with pytest.raises(RunStillRunning, match="--force"):
            await recover("live", bus, agent=recovering, ctx=ctx, bucket="cp")
        clock.now += 31  # the lease lapsed: as if the process had died 31 s ago
        assert await store.holder("live") is None
        release.set()
        result = await running  # it was alive after all: it finishes and lets go
        assert result.completed
        assert await store.holder("live") is None


@tool(read_only=True)
async def huge_report() -> str:
    """A tool (an MCP server's, a user's) that returns far more than a step can show."""
    return "r" * (8 * 1024 * 1024)


async def test_a_huge_result_is_recorded_bounded(tmp_path: Path) -> None:
    """The durable call record once kept a tool's whole result (8 MiB here) before the
    step's budget capped it: it keeps what the transcript could show at most."""
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        ctx = RunContext.sandboxed(tmp_path / "ws", AllowAll()).with_store(bus)
        turn = {"tool_calls": [{"name": "huge_report", "arguments": {}}]}
        agent = Agent(ScriptedModel([turn, "done"]), [huge_report])
        options = RunOptions(checkpoint_bucket="cp")
        result = await agent.run_in(ctx, "go", options, run_id="huge-1")
        assert result.completed
        (log,) = (await CheckpointStore(bus, "cp").calls("huge-1")).values()
        assert log.content is not None
        limit = ctx.jail.output_budget_bytes
        assert limit < len(log.content.encode()) < limit + 100
        assert log.content.endswith(f"[{8 * 1024 * 1024 - limit} bytes more were not recorded]")


class _KeysWritten:
    """A store whose buckets note the key of every write."""

    def __init__(self, bus: Any) -> None:
        self._bus = bus
        self.keys: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bus, name)

    async def kv(self, bucket: str) -> Any:
        kv = await self._bus.kv(bucket)
        keys = self.keys

        class Noted:
            def __getattr__(self, name: str) -> Any:
                if name in ("put", "create", "update"):
                    keys.append(f"{bucket}:{{}}")  # filled in below
                    written = getattr(kv, name)

                    async def write(key: str, *args: Any, **kwargs: Any) -> Any:
                        keys[-1] = f"{bucket}:{key}"
                        return await written(key, *args, **kwargs)

                    return write
                return getattr(kv, name)

        return Noted()


async def test_a_durable_step_writes_its_delta_and_every_boundary_loads_the_live_state(
    tmp_path: Path,
) -> None:
    """Issue 19: a 25-step durable run writes its whole state at its first checkpoint and
    its end (a step writes what it changed), and at every step boundary the checkpoint
    loaded from the store is the run's live state, field by field."""
    bucket = "tiller-run-checkpoints"
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        noted = _KeysWritten(bus)
        ctx = RunContext.sandboxed(tmp_path / "ws", AllowAll()).with_store(noted)  # type: ignore[arg-type]
        turns = [first_turn(f"line {n}") for n in range(24)]
        agent = Agent(ScriptedModel([*turns, "done"]), [append])
        options = RunOptions(max_steps=30, checkpoint_bucket=bucket)
        store = CheckpointStore(bus)
        boundaries = 0
        async with agent.iter("go", context=ctx, options=options, run_id="d-1") as run:
            async for step in run:
                if type(step).__name__ != "ModelTurn" or run.state is None:
                    continue
                boundaries += 1
                loaded = (await store.load("d-1")).state.model_dump()
                live = RunState.from_json(run.state.to_json()).model_dump()
                for name in RunState.model_fields:
                    assert loaded[name] == live[name], (boundaries, name)
        assert run.result.completed and boundaries == 25
        assert lines(tmp_path / "ws") == [f"line {n}" for n in range(24)]
        whole = [key for key in noted.keys if key == f"{bucket}:d-1"]
        assert len(whole) == 2  # the first checkpoint and the last
        finished = await store.load("d-1")
        assert finished.status == "finished"
        # The result's `agent_state` is the stream's, set after the last checkpoint (`{}`
        # where the checkpoint says None: so on main too, left alone here).
        ended = finished.state.model_dump(exclude={"agent_state"})
        assert ended == run.result.state.model_dump(exclude={"agent_state"})
