"""Crash recovery: a process is killed (SIGKILL) while three parallel calls run, and
`tiller runs resume` continues the run from another process without running a completed
call again (law 5).

Everything is real: the run is an interpreter of its own on a SQLite file (or the NATS
server), killed with no chance to clean up; the CLI commands are subprocesses. Each tool
appends its name to `log.txt` in the workspace before doing anything else, so "exactly
once" is checked on disk. The slow tools then wait for a `release` file that only appears
after the crash, so the kill always lands while they run. Timeouts are hang guards only.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tiller.store import CheckpointStore, open_bus

NATS_URL = "nats://127.0.0.1:4222"
RUN_ID = "crash-1"
HANG_GUARD = 60.0

AGENT_MODULE = '''
"""The agent under test: one step asks for three parallel calls, the next answers."""
import asyncio

from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.tools import ExecContext, tool


def _mark(ctx, name):
    with (ctx.workdir / "log.txt").open("a") as log:
        log.write(name + "\\n")


async def _wait_for_release(ctx):
    while not (ctx.workdir / "release").exists():
        await asyncio.sleep(0.02)


@tool
def quick(ctx: ExecContext) -> str:
    """Append quick to the log."""
    _mark(ctx, "quick")
    return "quick done"


@tool
async def slow_a(ctx: ExecContext) -> str:
    """Append slow_a to the log, then wait for the release file."""
    _mark(ctx, "slow_a")
    await _wait_for_release(ctx)
    return "slow_a done"


@tool
async def slow_b(ctx: ExecContext) -> str:
    """Append slow_b to the log, then wait for the release file."""
    _mark(ctx, "slow_b")
    await _wait_for_release(ctx)
    return "slow_b done"


def _answer(messages, info):
    if messages and getattr(messages[-1], "tool_results", ()):
        return "all three handled"
    names = ("quick", "slow_a", "slow_b")
    return {"tool_calls": [{"name": n, "arguments": {}} for n in names]}


def build():
    return Agent(ScriptedModel(_answer), [quick, slow_a, slow_b], name="crashy")
'''

START = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from crash_agent import build
from tiller.conversation import UserMessage
from tiller.loop import RunContext, RunOptions
from tiller.loop._agent_ref import record_policy
from tiller.policy import AllowAll
from tiller.state import RunState
from tiller.store import open_bus


async def main(url, namespace, workspace):
    async with await open_bus(url, namespace=namespace) as bus:
        ctx = RunContext.sandboxed(workspace, AllowAll()).with_store(bus)
        options = RunOptions(checkpoint_bucket="tiller-run-checkpoints")
        state = RunState(
            run_id="crash-1", thread_id="t-crash", agent_name="crashy",
            messages=[UserMessage(text="do the three things")],
        )
        # The loop will record these itself once it stamps checkpoints; until then, the
        # run starts from a state that carries them.
        record_policy(state, ctx, options, agent_ref="crash_agent:build")
        await build().run_in(ctx, state, options)
        print("the run finished, which it must not do before it is killed")

asyncio.run(main(*sys.argv[2:5]))
"""


def tiller(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tiller", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )


def logged(workspace: Path) -> collections.Counter[str]:
    path = workspace / "log.txt"
    return collections.Counter(path.read_text().splitlines() if path.exists() else [])


async def _call_ids_and_statuses(url: str, namespace: str) -> tuple[dict[str, str], dict[str, str]]:
    """The run's calls by tool name, and what the store recorded for each."""
    async with await open_bus(url, namespace=namespace) as bus:
        store = CheckpointStore(bus)
        try:
            checkpoint = await store.load(RUN_ID)
        except Exception:
            return {}, {}
        ids = {call.name: call.id for call in checkpoint.state.unanswered_calls()}
        logs = await store.calls(RUN_ID)
        return ids, {name: logs[i].status for name, i in ids.items() if i in logs}


async def _status(url: str, namespace: str) -> str:
    async with await open_bus(url, namespace=namespace) as bus:
        return (await CheckpointStore(bus).load(RUN_ID)).status


async def _drop_namespace(namespace: str) -> None:
    from tiller.store._nats import NatsBus

    bus = await NatsBus.connect(NATS_URL, namespace=namespace)
    try:
        await bus.delete_namespace()
    finally:
        await bus.aclose()


@pytest.mark.parametrize("backend", ["sqlite", "nats"])
def test_a_killed_run_resumes_only_what_did_not_complete(tmp_path: Path, backend: str) -> None:
    (tmp_path / "crash_agent.py").write_text(AGENT_MODULE)
    (tmp_path / "start.py").write_text(START)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    url = f"sqlite:///{tmp_path / 'store.db'}" if backend == "sqlite" else NATS_URL
    namespace = f"crash{uuid.uuid4().hex[:10]}" if backend == "nats" else ""
    store_args = ["--store", url, *(["--namespace", namespace] if namespace else [])]
    process = subprocess.Popen(
        [sys.executable, str(tmp_path / "start.py"), str(tmp_path), url, namespace, str(workspace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Wait (hang guard only) until quick has completed and both slow calls have
        # started, as recorded in the store and on disk: then the process dies mid-batch.
        deadline = time.monotonic() + HANG_GUARD
        while True:
            assert process.poll() is None, process.communicate()
            ids, statuses = asyncio.run(_call_ids_and_statuses(url, namespace))
            wanted = {"quick": "completed", "slow_a": "started", "slow_b": "started"}
            if statuses == wanted and set(logged(workspace)) == set(wanted):
                break
            assert time.monotonic() < deadline, f"the run never reached the state: {statuses}"
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
        process.communicate(timeout=HANG_GUARD)
        assert process.returncode == -signal.SIGKILL
        assert asyncio.run(_status(url, namespace)) == "running"

        (workspace / "release").touch()  # from now on the slow tools finish at once
        # The dead process's lease has not lapsed yet: recovery refuses, since for all it
        # knows that process still runs; --force says the person knows it is dead.
        held = tiller(tmp_path, "runs", "resume", RUN_ID, "--yes", *store_args)
        assert held.returncode == 1, held.stdout + held.stderr
        assert "still held" in held.stderr and "--force" in held.stderr
        assert logged(workspace) == {"quick": 1, "slow_a": 1, "slow_b": 1}  # nothing ran

        # Forced, it still refuses while calls are uncertain, naming them (exit 3).
        refused = tiller(tmp_path, "runs", "resume", RUN_ID, "--yes", "--force", *store_args)
        assert refused.returncode == 3, refused.stderr
        assert ids["slow_a"] in refused.stderr and ids["slow_b"] in refused.stderr
        assert ids["quick"] not in refused.stderr
        assert logged(workspace) == {"quick": 1, "slow_a": 1, "slow_b": 1}  # nothing ran

        shown = tiller(tmp_path, "runs", "reconcile", RUN_ID, *store_args)
        assert shown.returncode == 0, shown.stderr
        assert ids["slow_a"] in shown.stdout and ids["slow_b"] in shown.stdout

        # A person checked: slow_a did its work; slow_b must run again.
        marked = tiller(
            tmp_path,
            "runs",
            "reconcile",
            RUN_ID,
            "--done",
            ids["slow_a"],
            "--result",
            "slow_a done (checked by hand)",
            "--rerun",
            ids["slow_b"],
            *store_args,
        )
        assert marked.returncode == 0, marked.stderr
        assert "no uncertain calls" in marked.stdout

        # The agent is named by the checkpoint; --agent says it again, as a person would.
        resumed = tiller(
            tmp_path,
            "runs",
            "resume",
            RUN_ID,
            "--agent",
            "crash_agent:build",
            "--yes",
            "--force",
            *store_args,
        )
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert "all three handled" in resumed.stdout
        assert "stop cause  completed" in resumed.stdout
        # quick completed before the crash and slow_a was marked done: neither ran again;
        # only slow_b, which the person asked to rerun.
        assert logged(workspace) == {"quick": 1, "slow_a": 1, "slow_b": 2}
        assert asyncio.run(_status(url, namespace)) == "finished"

        shown = tiller(tmp_path, "runs", "show", RUN_ID, *store_args)
        assert shown.returncode == 0, shown.stderr
        assert "quick done" in shown.stdout
        assert "slow_a done (checked by hand)" in shown.stdout
        assert "slow_b done" in shown.stdout

        again = tiller(tmp_path, "runs", "resume", RUN_ID, "--yes", *store_args)
        assert again.returncode == 1
        assert "finished" in again.stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        if backend == "nats":
            asyncio.run(_drop_namespace(namespace))
