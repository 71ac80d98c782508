"""Recovery re-runs the uncertain calls of tools that declare themselves idempotent (issue 16).

A worker killed between a call's "started" and "completed" records leaves the call
uncertain, and recovery blocks on it for a person (law 5) — unless the tool declares
`idempotent` (running the call again with the same `ExecContext.call_id` has the effect of
running it once): then recovery runs it again, through the gate, and says so. What must
hold: such a call runs again once and the run completes; every other uncertain call still
blocks, and one that blocks holds the whole batch; the tool that decides is the one the
recovering agent has, and the record must say the first attempt was idempotent too (an
older tiller's record does not); an MCP server's `idempotentHint` grants nothing.

The ledger tool's effect is keyed on the call id, like an idempotency key: its ledger
holds each call id's effect once however often it runs, and its attempts file counts runs.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tiller.conversation import AssistantMessage, ToolCall, UserMessage
from tiller.events import Event
from tiller.loop import (
    CALL_RERUN_EVENT,
    Agent,
    FromCheckpoint,
    ResumeReplayBlocked,
    RunContext,
    RunOptions,
    record_policy,
    recover,
    resume,
)
from tiller.model import ScriptedModel
from tiller.policy import AllowAll
from tiller.state import RunState, StopCause
from tiller.store import Bus, CheckpointStore, open_bus
from tiller.testing import assert_valid_stream
from tiller.tools import BaseTool, ExecContext, ToolOutput, tool
from tiller.tools.mcp import McpClient, McpServerConfig

BUCKET = "cp"
MCP_FIXTURE = Path(__file__).parents[1] / "tools" / "mcp_server_fixture.py"
#: A hang guard, not a timing assertion.
HANG_GUARD = 120


def _ledger_effect(workdir: Path, call_id: str, entry: str) -> str:
    """Count the attempt; record `entry` under `call_id` unless it is there already."""
    with (workdir / "attempts.txt").open("a") as attempts:
        attempts.write(call_id + "\n")
    path = workdir / "ledger.json"
    ledger = json.loads(path.read_text()) if path.exists() else {}
    ledger.setdefault(call_id, entry)
    path.write_text(json.dumps(ledger))
    return f"booked {entry}"


@tool(idempotent=True)
def book(entry: str, ctx: ExecContext) -> str:
    """Book an entry in the ledger, once per call id."""
    return _ledger_effect(ctx.workdir, ctx.call_id, entry)


@tool(name="book")
def book_not_idempotent(entry: str, ctx: ExecContext) -> str:
    """Book an entry in the ledger (declares nothing about running twice)."""
    return _ledger_effect(ctx.workdir, ctx.call_id, entry)


@tool
def send(text: str, ctx: ExecContext) -> str:
    """Send a message (not idempotent: a second run sends it again)."""
    with (ctx.workdir / "sent.txt").open("a") as sent:
        sent.write(text + "\n")
    return f"sent {text}"


class Booker(BaseTool):
    """`book` written by hand: the class attribute declares it."""

    name = "book"
    description = "Book an entry in the ledger, once per call id."
    input_schema: dict[str, Any] = {  # noqa: RUF012  # the protocol's plain dict
        "type": "object",
        "properties": {"entry": {"type": "string"}},
    }
    idempotent = True

    async def call(self, args: dict[str, Any], ctx: ExecContext) -> ToolOutput:
        return ToolOutput(_ledger_effect(ctx.workdir, ctx.call_id, str(args["entry"])))


def ledger(workspace: Path) -> dict[str, str]:
    path = workspace / "ledger.json"
    return json.loads(path.read_text()) if path.exists() else {}


def attempts(workspace: Path) -> list[str]:
    path = workspace / "attempts.txt"
    return path.read_text().splitlines() if path.exists() else []


def sent(workspace: Path) -> list[str]:
    path = workspace / "sent.txt"
    return path.read_text().splitlines() if path.exists() else []


async def crashed(
    bus: Bus,
    workspace: Path,
    calls: list[tuple[str, str, dict[str, str]]],
    *,
    idempotent: set[str],
) -> None:
    """A `running` checkpoint whose step made `calls` (id, tool, arguments), each recorded
    as started and never completed, as a process killed mid-batch leaves them; the started
    records of `idempotent` say so, as the dispatch writes them for an idempotent tool."""
    ctx = RunContext.sandboxed(workspace, AllowAll()).with_store(bus)
    state = RunState(run_id="crash", thread_id="t", messages=[UserMessage(text="go")])
    record_policy(state, ctx, RunOptions(checkpoint_bucket=BUCKET))
    made = tuple(
        ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))
        for call_id, name, arguments in calls
    )
    state.messages.append(AssistantMessage(id="crash-msg-1", tool_calls=made))
    state.step = 1
    store = CheckpointStore(bus, BUCKET)
    await store.save(state, "running")
    for call in made:
        await store.call_started("crash", call.id, idempotent=call.id in idempotent)


def allowed() -> FromCheckpoint:
    return FromCheckpoint(approver=AllowAll())


async def test_an_idempotent_call_a_crash_interrupted_is_run_again_once(tmp_path: Path) -> None:
    """Before, recovery blocked on it like on any uncertain call; now it runs it again,
    and the stream, the trace and the store say it was a re-run."""
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        await crashed(
            bus, tmp_path, [("crash-call-1", "book", {"entry": "x"})], idempotent={"crash-call-1"}
        )
        events: list[Event] = []
        agent = Agent(ScriptedModel(["Recovered."]), [book])
        done = await recover(
            "crash", bus, agent=agent, ctx=allowed(), bucket=BUCKET, on_event=events.append
        )
        logs = await CheckpointStore(bus, BUCKET).calls("crash")
    assert done.completed and done.text == "Recovered."
    assert attempts(tmp_path) == ["crash-call-1"]  # the first attempt left no trace here
    assert ledger(tmp_path) == {"crash-call-1": "x"}
    (entry,) = done.tool_trace
    assert (entry.call_id, entry.rerun, entry.is_error) == ("crash-call-1", True, False)
    stream = assert_valid_stream(events)
    reruns = [e["value"] for e in stream if e["type"] == "CUSTOM" and e["name"] == CALL_RERUN_EVENT]
    assert [(r["callId"], r["toolName"]) for r in reruns] == [("crash-call-1", "book")]
    assert "interrupted" in reruns[0]["reason"]
    assert logs["crash-call-1"].status == "completed"
    result = done.state.messages[2]
    assert isinstance(result, UserMessage)
    assert [r.content for r in result.tool_results] == ["booked x"]


async def test_a_hand_written_idempotent_tool_is_run_again_too(tmp_path: Path) -> None:
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        await crashed(
            bus, tmp_path, [("crash-call-1", "book", {"entry": "x"})], idempotent={"crash-call-1"}
        )
        agent = Agent(ScriptedModel(["Recovered."]), [Booker()])
        done = await recover("crash", bus, agent=agent, ctx=allowed(), bucket=BUCKET)
    assert done.completed
    assert ledger(tmp_path) == {"crash-call-1": "x"}


async def test_a_rerun_that_never_started_is_still_a_rerun(tmp_path: Path) -> None:
    """Recovery marked the call to run again (`rerun`) and died before the new attempt
    started: the next recovery finds nothing uncertain, runs it, and still says it is a
    re-run after an interrupted attempt."""
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        await crashed(
            bus, tmp_path, [("crash-call-1", "book", {"entry": "x"})], idempotent={"crash-call-1"}
        )
        await CheckpointStore(bus, BUCKET).rerun_call("crash", "crash-call-1")
        agent = Agent(ScriptedModel(["Recovered."]), [book])
        done = await recover("crash", bus, agent=agent, ctx=allowed(), bucket=BUCKET)
    assert done.completed
    assert ledger(tmp_path) == {"crash-call-1": "x"}
    assert [(e.call_id, e.rerun) for e in done.tool_trace] == [("crash-call-1", True)]


async def test_a_call_of_a_tool_that_is_not_idempotent_still_blocks(tmp_path: Path) -> None:
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        await crashed(bus, tmp_path, [("crash-call-1", "send", {"text": "hi"})], idempotent=set())
        agent = Agent(ScriptedModel(["Recovered."]), [send])
        with pytest.raises(ResumeReplayBlocked, match="crash-call-1") as blocked:
            await recover("crash", bus, agent=agent, ctx=allowed(), bucket=BUCKET)
        assert blocked.value.reruns == []
        assert (await CheckpointStore(bus, BUCKET).load("crash")).status == "running"
    assert sent(tmp_path) == []


@pytest.mark.parametrize("now", ["not idempotent", "gone"])
async def test_the_recovering_agents_tool_decides(tmp_path: Path, now: str) -> None:
    """The record says the first attempt's tool was idempotent; the tool of that name the
    recovering agent has no longer declares it (or there is none): it blocks."""
    tools = [book_not_idempotent] if now == "not idempotent" else [send]
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        await crashed(
            bus, tmp_path, [("crash-call-1", "book", {"entry": "x"})], idempotent={"crash-call-1"}
        )
        agent = Agent(ScriptedModel(["Recovered."]), tools)
        with pytest.raises(ResumeReplayBlocked, match="crash-call-1"):
            await recover("crash", bus, agent=agent, ctx=allowed(), bucket=BUCKET)
    assert attempts(tmp_path) == []


async def test_an_older_record_that_does_not_say_idempotent_blocks(tmp_path: Path) -> None:
    """A started record without the flag (an older tiller's, or a tool that was not
    idempotent when the call started) blocks, whatever the tool declares now; the
    deprecated `resume()` (recovery's old name) behaves as before too."""
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        await crashed(bus, tmp_path, [("crash-call-1", "book", {"entry": "x"})], idempotent=set())
        agent = Agent(ScriptedModel(["Recovered."]), [book])
        with pytest.raises(ResumeReplayBlocked, match="crash-call-1"):
            await recover("crash", bus, agent=agent, ctx=allowed(), bucket=BUCKET)
        with (
            pytest.warns(DeprecationWarning),
            pytest.raises(ResumeReplayBlocked, match="crash-call-1"),
        ):
            await resume(agent, "crash", store=bus, approver=AllowAll(), bucket=BUCKET)
    assert attempts(tmp_path) == []


async def test_a_mixed_batch_waits_whole_for_the_call_a_person_must_mark(tmp_path: Path) -> None:
    """One uncertain call is idempotent, the other is not: neither runs until a person
    marks the other; then recovery runs the idempotent one again by itself."""
    calls = [("crash-call-1", "book", {"entry": "x"}), ("crash-call-2", "send", {"text": "hi"})]
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        await crashed(bus, tmp_path, calls, idempotent={"crash-call-1"})
        agent = Agent(ScriptedModel(["Recovered."]), [book, send])
        with pytest.raises(ResumeReplayBlocked) as blocked:
            await recover("crash", bus, agent=agent, ctx=allowed(), bucket=BUCKET)
        assert [c.id for c in blocked.value.calls] == ["crash-call-2"]
        assert [c.id for c in blocked.value.reruns] == ["crash-call-1"]
        assert "run again by recovery: book (crash-call-1)" in str(blocked.value)
        store = CheckpointStore(bus, BUCKET)
        assert (await store.load("crash")).status == "running"  # unclaimed
        assert {log.status for log in (await store.calls("crash")).values()} == {"started"}
        assert (attempts(tmp_path), sent(tmp_path)) == ([], [])
        await store.mark_call("crash", "crash-call-2", content="sent hi", is_error=False)
        done = await recover("crash", bus, agent=agent, ctx=allowed(), bucket=BUCKET)
    assert done.completed
    assert (ledger(tmp_path), sent(tmp_path)) == ({"crash-call-1": "x"}, [])
    assert [(e.call_id, e.rerun) for e in done.tool_trace] == [
        ("crash-call-1", True),
        ("crash-call-2", False),
    ]


async def test_a_rerun_goes_through_the_gate_as_on_its_first_run(tmp_path: Path) -> None:
    """As after a person's "run it again" (the call is then pending, and gated): rebuilt
    with no approver, the headless run holds the writing call for a person instead."""
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        await crashed(
            bus, tmp_path, [("crash-call-1", "book", {"entry": "x"})], idempotent={"crash-call-1"}
        )
        agent = Agent(ScriptedModel(["Recovered."]), [book])
        held = await recover("crash", bus, agent=agent, bucket=BUCKET)
    assert held.stop_cause is StopCause.SUSPENDED
    assert [c.id for c in held.state.unanswered_calls()] == ["crash-call-1"]
    assert attempts(tmp_path) == []


async def test_an_mcp_servers_idempotent_hint_grants_nothing(tmp_path: Path) -> None:
    """The fixture's `lookup` says `idempotentHint: true`; trusted or not, the tool is not
    `idempotent`, so its uncertain call blocks even with a record that says idempotent."""
    for trust in (False, True):
        async with await open_bus(f"sqlite:///{tmp_path / f'store-{trust}.db'}") as bus:
            config = McpServerConfig(
                "fx", sys.executable, (str(MCP_FIXTURE),), trust_annotations=trust
            )
            async with asyncio.timeout(HANG_GUARD), McpClient(config) as mcp:
                lookup = next(t for t in mcp.tools if t.name == "fx__lookup")
                assert lookup.idempotent_hint is True
                assert lookup.idempotent is False
                await crashed(
                    bus,
                    tmp_path,
                    [("crash-call-1", "fx__lookup", {"key": "k"})],
                    idempotent={"crash-call-1"},
                )
                agent = Agent(ScriptedModel(["Recovered."]), list(mcp.tools))
                with pytest.raises(ResumeReplayBlocked, match="crash-call-1"):
                    await recover("crash", bus, agent=agent, ctx=allowed(), bucket=BUCKET)


# ── a real crash: a worker killed mid-call ─────────────────────────────────────────────

WORKER = """
import asyncio, json, os, signal, sys
from pathlib import Path
from tiller.loop import Agent, FromCheckpoint, RunContext, RunOptions, recover
from tiller.model import ScriptedModel
from tiller.policy import AllowAll
from tiller.store import open_bus
from tiller.tools import ExecContext, tool

IDEMPOTENT = sys.argv[3] == "idempotent"


@tool(name="book", idempotent=IDEMPOTENT)
def book(entry: str, ctx: ExecContext) -> str:
    \"\"\"Book an entry in the ledger, once per call id; then the worker is killed.\"\"\"
    with (ctx.workdir / "attempts.txt").open("a") as attempts:
        attempts.write(ctx.call_id + "\\n")
    path = ctx.workdir / "ledger.json"
    ledger = json.loads(path.read_text()) if path.exists() else {}
    ledger.setdefault(ctx.call_id, entry)
    path.write_text(json.dumps(ledger))
    os.kill(os.getpid(), signal.SIGKILL)  # after the effect, before "completed"


async def main(url, workspace, mode):
    async with await open_bus(url) as bus:
        if mode == "recover":  # a recovering worker, killed in the re-run too
            agent = Agent(ScriptedModel(["Recovered."], per_run=False), [book])
            ctx = FromCheckpoint(approver=AllowAll())
            await recover("killed", bus, agent=agent, ctx=ctx, bucket="cp", force=True)
            return
        ctx = RunContext.sandboxed(workspace, AllowAll()).with_store(bus)
        turns = [{"tool_calls": [{"name": "book", "arguments": {"entry": "x"}}]}]
        agent = Agent(ScriptedModel(turns), [book])
        await agent.run_in(ctx, "go", RunOptions(checkpoint_bucket="cp"), run_id="killed")

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[4] if len(sys.argv) > 4 else "start"))
"""


async def killed_mid_call(tmp_path: Path, kind: str, mode: str = "start") -> tuple[str, Path]:
    """A worker process that SIGKILLs itself inside its one call, after the effect: as
    it starts the run (`mode` "start"), or as it recovers it ("recover")."""
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(WORKER))
    url, workspace = f"sqlite:///{tmp_path / 'store.db'}", tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        url,
        str(workspace),
        kind,
        mode,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(HANG_GUARD):
        _, stderr = await worker.communicate()
    assert worker.returncode == -9, stderr.decode()
    return url, workspace


async def test_a_recovery_killed_in_the_rerun_is_recovered_again(tmp_path: Path) -> None:
    """Killed as it starts the call, then killed again as a recovery re-runs it: the
    next recovery runs it a third time, and the ledger still holds its effect once."""
    await killed_mid_call(tmp_path, "idempotent")
    url, workspace = await killed_mid_call(tmp_path, "idempotent", "recover")
    (call_id, again) = attempts(workspace)
    assert again == call_id
    async with await open_bus(url) as bus:
        log = (await CheckpointStore(bus, BUCKET).calls("killed"))[call_id]
        assert (log.status, log.idempotent) == ("started", True)  # the re-run's own start
        agent = Agent(ScriptedModel(["Recovered."], per_run=False), [book])
        done = await recover("killed", bus, agent=agent, ctx=allowed(), bucket=BUCKET, force=True)
    assert done.completed and done.text == "Recovered."
    assert attempts(workspace) == [call_id] * 3
    assert ledger(workspace) == {call_id: "x"}
    assert [(e.call_id, e.rerun) for e in done.tool_trace] == [(call_id, True)]


@pytest.mark.parametrize("kind", ["idempotent", "plain"])
async def test_a_worker_killed_mid_call_is_recovered(tmp_path: Path, kind: str) -> None:
    """The dispatch records the call's start with its tool's declaration; recovery (its
    lease still live, so forced) runs an idempotent call again and the run completes, the
    ledger holding the call's effect once; a plain one blocks for a person."""
    url, workspace = await killed_mid_call(tmp_path, kind)
    (call_id,) = attempts(workspace)
    async with await open_bus(url) as bus:
        log = (await CheckpointStore(bus, BUCKET).calls("killed"))[call_id]
        assert (log.status, log.idempotent) == ("started", kind == "idempotent")
        tools = [book if kind == "idempotent" else book_not_idempotent]
        agent = Agent(ScriptedModel(["Recovered."], per_run=False), tools)
        if kind == "plain":
            with pytest.raises(ResumeReplayBlocked, match=call_id):
                await recover("killed", bus, agent=agent, ctx=allowed(), bucket=BUCKET, force=True)
            assert attempts(workspace) == [call_id]
            return
        done = await recover("killed", bus, agent=agent, ctx=allowed(), bucket=BUCKET, force=True)
    assert done.completed and done.text == "Recovered."
    assert attempts(workspace) == [call_id, call_id]  # run twice ...
    assert ledger(workspace) == {call_id: "x"}  # ... to the effect of once
    assert [(e.call_id, e.rerun) for e in done.tool_trace] == [(call_id, True)]
