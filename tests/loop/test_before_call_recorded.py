"""`RunOptions.before_call_recorded`: a durable run awaits it after a call ran and before
the call's completion is journaled (a fleet worker keeps a snapshot run's files there, so
a journaled completion never outlives what the call wrote); one that raises leaves the
call recorded as started (uncertain), never as completed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tiller.loop import Agent, RunContext, RunOptions
from tiller.model import ScriptedModel
from tiller.policy import AllowAll
from tiller.state import StopCause
from tiller.store import Bus, CheckpointStore, open_bus
from tiller.tools import tool


@tool
def touch(name: str) -> str:
    """Pretend to write a file."""
    return f"touched {name}"


def _agent() -> Agent:
    calls = [{"name": "touch", "arguments": {"name": n}} for n in ("a", "b")]
    return Agent(ScriptedModel([{"tool_calls": calls}, "done"]), tools=[touch])


def _ctx(tmp_path: Path, bus: Bus) -> RunContext:
    return RunContext.sandboxed(tmp_path, AllowAll()).with_store(bus)


async def test_it_runs_after_each_call_and_before_its_completion_is_recorded(
    tmp_path: Path,
) -> None:
    seen: list[tuple[str, str]] = []
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:

        async def keep(call_id: str) -> None:
            log = (await CheckpointStore(bus, "cp").calls("kept"))[call_id]
            seen.append((call_id, log.status))

        options = RunOptions(checkpoint_bucket="cp", before_call_recorded=keep)
        result = await _agent().run_in(_ctx(tmp_path, bus), "go", options, run_id="kept")
        logs = await CheckpointStore(bus, "cp").calls("kept")
    assert result.text == "done"
    assert sorted(seen) == [("kept-call-1", "started"), ("kept-call-2", "started")]
    assert {log.status for log in logs.values()} == {"completed"}


async def test_one_that_raises_leaves_the_call_uncertain(tmp_path: Path) -> None:
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:

        async def fail(call_id: str) -> None:
            raise OSError("the disk is full")

        options = RunOptions(checkpoint_bucket="cp", before_call_recorded=fail)
        result = await _agent().run_in(_ctx(tmp_path, bus), "go", options, run_id="unkept")
        logs = await CheckpointStore(bus, "cp").calls("unkept")
    assert result.stop_cause is StopCause.ERROR
    # Named by the error itself, not by the task group the calls ran in.
    assert result.error == "OSError: the disk is full"
    assert logs and {log.status for log in logs.values()} == {"started"}


async def test_calls_that_fail_alike_are_named_once(tmp_path: Path) -> None:
    """Both calls of the step fail with the same error (each waits for the other first,
    so both do, whatever the timing): the run's error says it once."""
    reached: list[str] = []
    both = asyncio.Event()
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:

        async def fail(call_id: str) -> None:
            reached.append(call_id)
            if len(reached) == 2:
                both.set()
            await both.wait()
            raise OSError("the disk is full")

        options = RunOptions(checkpoint_bucket="cp", before_call_recorded=fail)
        result = await _agent().run_in(_ctx(tmp_path, bus), "go", options, run_id="both")
    assert len(reached) == 2
    assert result.error == "OSError: the disk is full"


async def test_a_run_without_a_store_never_calls_it(tmp_path: Path) -> None:
    called: list[str] = []

    async def keep(call_id: str) -> None:
        called.append(call_id)

    options = RunOptions(before_call_recorded=keep)
    result = await _agent().run_in(RunContext.sandboxed(tmp_path, AllowAll()), "go", options)
    assert (result.text, called) == ("done", [])
