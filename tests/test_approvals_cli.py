"""`tiller approvals list`, `tiller approve`, `tiller deny`, `tiller approvals resume`, on a
SQLite file, across a process restart.

Each test sets a run up with the library in one store session — a headless durable run
with no approver, which holds its writes and suspends — and holds its calls with
`ApprovalStore.hold_interrupts`, as the gate will. The commands then run against the
file in a fresh session: through typer's runner, and in one test as real subprocesses
(`python -m tiller`). The tool appends to `log.txt` in the workspace, so "the write
happened exactly once" is checked on disk.
"""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from typer.testing import CliRunner, Result

from tiller.cli import app
from tiller.cli._approvals import APPROVALS_BUCKET as CLI_APPROVALS_BUCKET
from tiller.conversation import UserMessage
from tiller.loop import Agent, RunContext, RunOptions, load_agent, record_policy
from tiller.state import RunState, StopCause
from tiller.store import (
    APPROVALS_BUCKET,
    DEFAULT_BUCKET,
    ApprovalStore,
    Bus,
    CheckpointStore,
    HeldApproval,
    open_bus,
)

from .cli_support import made_store

T = TypeVar("T")

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
'''


@pytest.fixture
def agent_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The name of a fresh importable module defining the test agents."""
    name = f"approvals_agent_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(AGENT_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    # The commands put the working directory on sys.path; keep that from leaking.
    monkeypatch.setattr(sys, "path", list(sys.path))
    return name


@pytest.fixture
def url(tmp_path: Path) -> str:
    # There, empty: the reading commands refuse a SQLite store that is not there.
    return made_store(tmp_path / "store.db")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def on_store(url: str, work: Callable[[Bus], Coroutine[Any, Any, T]]) -> T:
    """`work` in a store session of its own: what another process would see."""

    async def run() -> T:
        async with await open_bus(url) as bus:
            return await work(bus)

    return asyncio.run(run())


def tiller(*args: str, input: str | None = None) -> Result:
    assert "--store" in args, "never the default store: it is the user's own"
    return CliRunner().invoke(app, list(args), input=input)


def lines(workspace: Path) -> list[str]:
    path = workspace / "log.txt"
    return path.read_text().splitlines() if path.exists() else []


def held_run(
    url: str,
    workspace: Path,
    agent: Agent | str,
    run_id: str = "r-held",
) -> list[HeldApproval]:
    """A headless durable run with no approver: it holds its writes and suspends; its
    held calls are then recorded for a person, one per interrupt (as the gate will).
    `agent` as a reference is recorded in the checkpoint; as an `Agent`, it is not."""

    async def work(bus: Bus) -> list[HeldApproval]:
        ctx = RunContext.sandboxed(workspace).with_store(bus)
        options = RunOptions(checkpoint_bucket=DEFAULT_BUCKET)
        state = RunState(run_id=run_id, thread_id=f"t-{run_id}", messages=[UserMessage(text="go")])
        ref = agent if isinstance(agent, str) else None
        record_policy(state, ctx, options, agent_ref=ref)
        runner = load_agent(agent) if isinstance(agent, str) else agent
        result = await runner.run_in(ctx, state, options)
        assert result.stop_cause is StopCause.SUSPENDED
        return await ApprovalStore(bus).hold_interrupts(result.state, reason="writes ask")

    return on_store(url, work)


def checkpoint_of(url: str, run_id: str = "r-held") -> tuple[str, RunState]:
    async def load(bus: Bus) -> tuple[str, RunState]:
        checkpoint = await CheckpointStore(bus).load(run_id)
        return checkpoint.status, checkpoint.state

    return on_store(url, load)


def record(url: str, approval_id: str) -> HeldApproval:
    return on_store(url, lambda bus: ApprovalStore(bus).get(approval_id))


def tool_results(state: RunState) -> list[str]:
    return [
        result.content
        for message in state.messages
        if isinstance(message, UserMessage)
        for result in message.tool_results
    ]


def test_the_cli_bucket_name_is_the_stores() -> None:
    assert CLI_APPROVALS_BUCKET == APPROVALS_BUCKET


# ── approve ──────────────────────────────────────────────────────────────────────────


def test_approve_finishes_the_run_and_the_write_happens_once(
    url: str, workspace: Path, agent_module: str
) -> None:
    [held] = held_run(url, workspace, f"{agent_module}:one")
    assert lines(workspace) == []

    listed = tiller("approvals", "list", "--store", url)
    assert listed.exit_code == 0, listed.output
    header, row = listed.stdout.splitlines()
    assert header.split() == ["ID", "RUN", "TOOL", "ARGS", "AGE", "STATUS"]
    assert row.split()[:4] == [held.id, "r-held", "append", '{"text":"a"}']
    assert row.split()[-1] == "pending"

    done = tiller("approve", held.id, "--store", url)
    assert done.exit_code == 0, done.output
    assert f"approved {held.id}" in done.stdout
    assert "stop cause  completed" in done.stdout
    assert "final text  finished: appended a" in done.stdout
    assert lines(workspace) == ["a"]
    status, state = checkpoint_of(url)
    assert status == "finished" and state.stop_cause is StopCause.COMPLETED
    assert record(url, held.id).status == "approved"

    again = tiller("approve", held.id, "--store", url)
    assert again.exit_code == 2
    assert f"{held.id} is already decided (approved)" in again.stderr
    assert lines(workspace) == ["a"]  # once

    assert "no pending approvals" in tiller("approvals", "list", "--store", url).stdout
    everything = tiller("approvals", "list", "--all", "--store", url)
    assert everything.stdout.splitlines()[1].split()[-1] == "approved"


def test_deny_continues_the_run_with_the_reason(
    url: str, workspace: Path, agent_module: str
) -> None:
    [held] = held_run(url, workspace, f"{agent_module}:one")
    no_reason = tiller("deny", held.id, "--store", url)
    assert no_reason.exit_code == 2 and "--reason" in no_reason.output
    done = tiller("deny", held.id, "--reason", "not now", "--store", url)
    assert done.exit_code == 0, done.output
    assert f"denied {held.id} (append, run r-held): not now" in done.stdout
    assert "final text  finished: Denied by the user: not now." in done.stdout
    assert lines(workspace) == []  # untouched
    status, state = checkpoint_of(url)
    assert status == "finished"
    assert tool_results(state) == ["Denied by the user: not now."]
    denied = record(url, held.id)
    assert (denied.status, denied.decision_reason) == ("denied", "not now")
    twice = tiller("approve", held.id, "--store", url)
    assert twice.exit_code == 2 and "already decided (denied: not now)" in twice.stderr


def test_approve_with_edited_arguments(url: str, workspace: Path, agent_module: str) -> None:
    [held] = held_run(url, workspace, f"{agent_module}:one")
    done = tiller("approve", held.id, "--args", '{"text": "edited"}', "--store", url)
    assert done.exit_code == 0, done.output
    assert 'with {"text":"edited"}' in done.stdout
    assert lines(workspace) == ["edited"]
    assert record(url, held.id).edited_arguments == {"text": "edited"}
    assert tool_results(checkpoint_of(url)[1]) == ["appended edited"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("[1]", "--args must be a JSON object (the tool's arguments by name), not an array"),
        ('"text"', "not a string"),
        ("{text: a}", "--args is not JSON"),
        ('{"txt": "a"}', "invalid arguments for tool 'append'"),
        ('{"text": 3}', "invalid arguments for tool 'append'"),
    ],
)
def test_bad_edited_arguments_are_refused_before_anything_is_recorded(
    url: str, workspace: Path, agent_module: str, args: str, message: str
) -> None:
    [held] = held_run(url, workspace, f"{agent_module}:one")
    refused = tiller("approve", held.id, "--args", args, "--store", url)
    assert refused.exit_code == 2
    assert message in refused.stderr
    assert record(url, held.id).pending
    assert checkpoint_of(url)[0] == "suspended"
    # Nothing was used up: the person can still decide.
    done = tiller("approve", held.id, "--store", url)
    assert done.exit_code == 0, done.output
    assert lines(workspace) == ["a"]


def test_a_run_holding_two_calls_waits_for_both_decisions(
    url: str, workspace: Path, agent_module: str
) -> None:
    first, second = held_run(url, workspace, f"{agent_module}:two")
    assert (first.arguments, second.arguments) == ({"text": "a"}, {"text": "b"})

    waiting = tiller("approve", first.id, "--store", url)
    assert waiting.exit_code == 0, waiting.output
    assert f"waiting for: {second.id}" in waiting.stdout
    assert "resuming" not in waiting.stdout
    assert lines(workspace) == []
    assert checkpoint_of(url)[0] == "suspended"
    listed = tiller("approvals", "list", "--store", url)
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == [second.id]

    done = tiller("deny", second.id, "--reason", "only one", "--store", url)
    assert done.exit_code == 0, done.output
    assert "resuming run r-held" in done.stdout
    assert "finished: appended a | Denied by the user: only one." in done.stdout
    assert lines(workspace) == ["a"]
    assert tool_results(checkpoint_of(url)[1]) == ["appended a", "Denied by the user: only one."]


def test_unknown_ids_and_bad_stores(url: str) -> None:
    for command in (["approve", "ap-nope"], ["deny", "ap-nope", "--reason", "x"]):
        done = tiller(*command, "--store", url)
        assert done.exit_code == 2, command
        assert "no held approval 'ap-nope'" in done.stderr
    assert "no pending approvals" in tiller("approvals", "list", "--store", url).stdout
    bad = tiller("approvals", "list", "--store", "postgres://x")
    assert bad.exit_code == 2 and "is not a store URL" in bad.stderr


def test_a_run_that_went_on_without_the_decision(
    url: str, workspace: Path, agent_module: str
) -> None:
    """Resumed another way (`tiller runs resume --yes`): the record no longer leads
    anywhere. The run finished, so it is marked expired and leaves the list."""
    [held] = held_run(url, workspace, f"{agent_module}:one")
    resumed = tiller("runs", "resume", "r-held", "--yes", "--store", url)
    assert resumed.exit_code == 0, resumed.output
    assert lines(workspace) == ["a"]
    late = tiller("approve", held.id, "--store", url)
    assert late.exit_code == 2
    assert f"run r-held has finished; it no longer waits for {held.id}" in late.stderr
    assert record(url, held.id).status == "expired"
    assert "no pending approvals" in tiller("approvals", "list", "--store", url).stdout
    assert lines(workspace) == ["a"]


def test_a_run_being_resumed_elsewhere_is_refused(
    url: str, workspace: Path, agent_module: str
) -> None:
    [held] = held_run(url, workspace, f"{agent_module}:one")

    async def claim(bus: Bus) -> None:
        store = CheckpointStore(bus)
        await store.claim(await store.load("r-held"))

    on_store(url, claim)
    refused = tiller("approve", held.id, "--store", url)
    assert refused.exit_code == 2
    assert "run r-held is resumed, not suspended: it was already resumed" in refused.stderr
    assert record(url, held.id).pending  # not expired: that run may still need it
    assert lines(workspace) == []


def test_a_run_that_does_not_record_its_agent(url: str, workspace: Path, agent_module: str) -> None:
    unnamed = importlib.import_module(agent_module).one()
    [held] = held_run(url, workspace, unnamed)
    refused = tiller("approve", held.id, "--store", url)
    assert refused.exit_code == 2 and "pass --agent module:attr" in refused.stderr
    assert record(url, held.id).pending
    done = tiller("approve", held.id, "--agent", f"{agent_module}:one", "--store", url)
    assert done.exit_code == 0, done.output
    assert lines(workspace) == ["a"]


def test_approvals_resume_after_decisions_recorded_elsewhere(
    url: str, workspace: Path, agent_module: str
) -> None:
    """Decisions recorded, but the resume never happened (it failed, or was killed):
    `tiller approvals resume` picks the run up with them."""
    first, second = held_run(url, workspace, f"{agent_module}:two")

    async def decide_first(bus: Bus) -> None:
        await ApprovalStore(bus).decide(first.id, approve=True, edited_arguments={"text": "A"})

    on_store(url, decide_first)
    early = tiller("approvals", "resume", "r-held", "--store", url)
    assert early.exit_code == 2 and f"still waits for: {second.id}" in early.stderr

    async def decide_second(bus: Bus) -> None:
        await ApprovalStore(bus).decide(second.id, approve=False, reason="no b")

    on_store(url, decide_second)
    done = tiller("approvals", "resume", "r-held", "--store", url)
    assert done.exit_code == 0, done.output
    assert lines(workspace) == ["A"]
    again = tiller("approvals", "resume", "r-held", "--store", url)
    assert again.exit_code == 2 and "run r-held is finished, not suspended" in again.stderr


def test_a_failed_resume_keeps_the_decision_for_a_retry(
    url: str, workspace: Path, agent_module: str
) -> None:
    """The decision is recorded, then the resume refuses (here: the call is uncertain, as
    if a process had started it and died); once that is fixed, `tiller approvals resume`
    continues the run with the recorded decision."""
    [held] = held_run(url, workspace, f"{agent_module}:one")
    on_store(url, lambda bus: CheckpointStore(bus).call_started("r-held", held.call_id))
    blocked = tiller("approve", held.id, "--args", '{"text": "late"}', "--store", url)
    assert blocked.exit_code == 2
    assert "uncertain calls must be reconciled first" in blocked.stderr
    assert "tiller approvals resume r-held" in blocked.stderr
    assert record(url, held.id).status == "approved"
    assert checkpoint_of(url)[0] == "suspended" and lines(workspace) == []

    rerun = tiller("runs", "reconcile", "r-held", "--rerun", held.call_id, "--store", url)
    assert rerun.exit_code == 0, rerun.output
    done = tiller("approvals", "resume", "r-held", "--store", url)
    assert done.exit_code == 0, done.output
    assert lines(workspace) == ["late"]


def test_a_suspended_run_without_held_records_is_resumed_otherwise(
    url: str, workspace: Path, agent_module: str
) -> None:
    held_run(url, workspace, f"{agent_module}:one")

    async def forget(bus: Bus) -> None:
        kv = await bus.kv(APPROVALS_BUCKET)
        for key in await kv.keys():
            await kv.delete(key)

    on_store(url, forget)
    refused = tiller("approvals", "resume", "r-held", "--store", url)
    assert refused.exit_code == 2
    assert "not held for approval" in refused.stderr
    assert "tiller runs resume r-held" in refused.stderr


# ── as separate processes ────────────────────────────────────────────────────────────


def test_approve_in_another_process(url: str, workspace: Path, agent_module: str) -> None:
    """The headless round trip of issue 6: the run held a write and its process ended;
    `tiller approve` in another process finishes it, and the write happens once."""
    [held] = held_run(url, workspace, f"{agent_module}:one")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tiller", *args, "--store", url],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            stdin=subprocess.DEVNULL,
            cwd=workspace.parent,  # where the agent module is
        )

    listed = run("approvals", "list")
    assert listed.returncode == 0, listed.stderr
    assert held.id in listed.stdout
    done = run("approve", held.id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stop cause  completed" in done.stdout
    assert lines(workspace) == ["a"]
    again = run("approve", held.id)
    assert again.returncode == 2
    assert "already decided" in again.stderr
    assert lines(workspace) == ["a"]
