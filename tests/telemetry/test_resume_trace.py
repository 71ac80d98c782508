"""A run suspended here and resumed in another process is one trace: the resumed
segment goes under the span the checkpoint names and links to the segment before it."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import orjson

from tiller.loop import PauseOnTools, RunContext, RunOptions
from tiller.state import RunState, StopCause

from ._resume_agent import agent
from ._tree import Recorded

HERE = Path(__file__).parent
SRC = HERE.parents[1] / "src"


async def test_suspend_here_resume_in_another_process_is_one_linked_trace(
    recorded: Recorded, ctx: RunContext, tmp_path: Path
) -> None:
    options = RunOptions(review_policy=PauseOnTools(["write_note"])).with_telemetry(
        recorded.telemetry
    )
    paused = await agent.run_in(ctx, "note it", options=options)
    assert paused.stop_cause is StopCause.SUSPENDED
    first = recorded.one("invoke_agent writer")
    attrs = dict(first.attributes or {})
    assert attrs["tiller.suspended"] is True
    assert attrs["tiller.stop_cause"] == "suspended"
    assert paused.checkpoint is not None
    trace_context = paused.checkpoint.trace_context
    assert trace_context is not None
    first_id = f"00-{first.context.trace_id:032x}-{first.context.span_id:016x}-"
    assert trace_context.parent == trace_context.previous
    assert trace_context.parent.startswith(first_id)
    # The checkpoint carries it through JSON (run-state schema 8).
    checkpoint = tmp_path / "checkpoint.json"
    checkpoint.write_bytes(paused.checkpoint.to_json())
    assert RunState.from_json(checkpoint.read_bytes()).trace_context == trace_context

    env = {**os.environ, "PYTHONPATH": str(SRC)}
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "_resume_child.py"),
        str(checkpoint),
        str(ctx.jail.root),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    async with asyncio.timeout(120):  # a hang guard
        out, err = await child.communicate()
    assert child.returncode == 0, err.decode()
    lines = [orjson.loads(line) for line in out.decode().splitlines()]
    assert lines[-1] == {"stop_cause": "completed"}
    spans = {s["name"]: s for s in lines[:-1]}
    resumed = spans["invoke_agent writer"]
    trace_id, span_id = f"{first.context.trace_id:032x}", f"{first.context.span_id:016x}"
    assert resumed["trace_id"] == trace_id  # one logical run, one trace
    assert resumed["parent_id"] == span_id
    assert resumed["links"] == [[trace_id, span_id]]
    assert resumed["attributes"]["tiller.resumed"] is True
    assert resumed["attributes"]["tiller.stop_cause"] == "completed"
    tool = spans["execute_tool write_note"]
    assert tool["parent_id"] == resumed["span_id"]
    assert tool["attributes"]["tiller.gate.decided_by"] == "user"  # the person's decision


async def test_a_run_resumed_from_the_store_continues_its_trace(
    recorded: Recorded, tmp_path: Path
) -> None:
    """The store's checkpoint (a held call, headless) keeps the trace context: resumed by
    run id, twice, every segment is in one trace, each linked to the one before."""
    from tiller.loop import ResumeDecision
    from tiller.store import open_bus

    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        ctx = RunContext.sandboxed(workspace).with_store(bus)  # no approver: held
        options = RunOptions(checkpoint_bucket="cp").with_telemetry(recorded.telemetry)
        paused = await agent.run_in(ctx, "go", options, run_id="traced-1")
        assert paused.stop_cause is StopCause.SUSPENDED
        (pending,) = paused.state.waiting_calls()
        done = await agent.resume(
            "traced-1",
            {pending.id: ResumeDecision.approved()},
            ctx=ctx.with_approver(None),
            options=options,
            bucket="cp",
        )
        assert done.stop_cause is StopCause.COMPLETED
    first, second = sorted(recorded.named("invoke_agent writer"), key=lambda s: s.start_time or 0)
    assert second.context.trace_id == first.context.trace_id
    assert second.parent is not None and second.parent.span_id == first.context.span_id
    assert [link.context.span_id for link in second.links] == [first.context.span_id]
    held = sorted(recorded.named("execute_tool write_note"), key=lambda s: s.start_time or 0)
    assert dict(held[0].attributes or {})["tiller.gate.decision"] == "hold"
    assert dict(held[0].attributes or {})["tiller.suspended"] is True
