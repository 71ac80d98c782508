"""The run's event log: a durable run's stored log is its stream, exactly; it is written in
batches, not one record per event; `read(after=N)` picks up where a reader left off; a
resumed run appends to it; a store that fails never breaks the run."""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tiller.events import Event
from tiller.loop import Agent, PauseOnWrites, ResumeDecision, RunContext, RunOptions
from tiller.model import ScriptedModel, Turn
from tiller.policy import AllowAll
from tiller.state import StopCause
from tiller.store import Bus, EventLog, KeyValue, StoreUnavailable, open_bus
from tiller.store._event_log import EVENT_LOG_BUCKET
from tiller.testing import assert_valid_stream, wire_events
from tiller.tools import tool

NATS_URL = "nats://127.0.0.1:4222"
DURABLE = RunOptions(checkpoint_bucket="tiller-run-checkpoints")


@tool
def note(text: str) -> str:
    """Take a note."""
    return f"noted {text}"


@pytest.fixture(params=["memory", "sqlite", "nats"])
async def bus(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Bus]:
    if request.param == "memory":
        bus = await open_bus("memory://")
    elif request.param == "sqlite":
        bus = await open_bus(f"sqlite:///{tmp_path / 'store.db'}")
    else:
        bus = await open_bus(NATS_URL, namespace=f"evlog{uuid.uuid4().hex[:10]}")
    try:
        yield bus
    finally:
        if request.param == "nats":
            await bus.delete_namespace()  # type: ignore[attr-defined]
        await bus.aclose()


def turns(steps: int) -> list[Any]:
    call = {"tool_calls": [{"name": "note", "arguments": {"text": "x"}}]}
    return [*([call] * (steps - 1)), "All done."]


async def run(
    bus: Bus, tmp_path: Path, script: list[Any], run_id: str, options: RunOptions = DURABLE
) -> tuple[Any, list[Event]]:
    events: list[Event] = []
    ctx = RunContext.sandboxed(tmp_path / "ws", AllowAll()).with_store(bus)
    agent = Agent(ScriptedModel(script), [note])
    result = await agent.run_in(ctx, "go", options, on_event=events.append, run_id=run_id)
    return result, events


async def test_a_durable_runs_log_is_its_stream_exactly(bus: Bus, tmp_path: Path) -> None:
    result, events = await run(bus, tmp_path, turns(5), "log-1")
    assert result.completed
    stored = await EventLog(bus).read("log-1")
    assert stored == wire_events(events)  # ids, order, every field
    assert_valid_stream(stored)
    assert stored[0]["type"] == "RUN_STARTED" and stored[-1]["type"] == "RUN_FINISHED"


async def test_read_after_returns_the_rest(bus: Bus, tmp_path: Path) -> None:
    _, events = await run(bus, tmp_path, turns(3), "log-2")
    log = EventLog(bus)
    wire = wire_events(events)
    for after in (0, 1, len(wire) - 1, len(wire), len(wire) + 5):
        assert await log.read("log-2", after=after) == wire[after:]


async def test_batches_span_records_and_read_after_crosses_them(tmp_path: Path) -> None:
    async with await open_bus("memory://") as bus:
        log = EventLog(bus)
        events: list[Event] = []
        ctx = RunContext.sandboxed(tmp_path, AllowAll()).with_store(bus)
        writer = log.writer("small", batch_size=4)
        await Agent(ScriptedModel(turns(3)), [note]).run_in(
            ctx, "go", on_event=lambda e: (events.append(e), writer(e)), run_id="small"
        )
        await writer.wait()
        wire = wire_events(events)
        assert len(await log.batch_keys("small")) == math.ceil(len(wire) / 4)
        assert writer.written == math.ceil(len(wire) / 4) and writer.failed == 0
        for after in range(len(wire) + 1):
            assert await log.read("small", after=after) == wire[after:]


async def test_a_thousand_event_run_writes_a_few_batches_not_a_thousand_records(
    tmp_path: Path,
) -> None:
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        long_text = Turn(chunks=tuple(f"w{n} " for n in range(1000)))
        result, events = await run(bus, tmp_path, [long_text], "long-1")
        assert result.completed and len(events) >= 1000
        keys = await EventLog(bus).batch_keys("long-1")
        # Batches of 256, and what is buffered at each of the run's two checkpoints (its
        # first step's and its end) is written before the checkpoint is: at most 2 more.
        full = math.ceil(len(events) / 256)
        assert full == 4
        assert full <= len(keys) <= full + 2
        assert keys == [f"long-1/{n:08d}" for n in range(len(keys))]
        assert await EventLog(bus).read("long-1") == wire_events(events)


async def test_a_run_whose_id_extends_another_does_not_mix_logs(tmp_path: Path) -> None:
    async with await open_bus("memory://") as bus:
        _, short = await run(bus, tmp_path, turns(2), "a")
        _, longer = await run(bus, tmp_path, turns(3), "a/00000001x")
        assert await EventLog(bus).read("a") == wire_events(short)
        assert await EventLog(bus).read("a/00000001x") == wire_events(longer)


async def test_a_resumed_run_appends_to_its_log(tmp_path: Path) -> None:
    async with await open_bus(f"sqlite:///{tmp_path / 'store.db'}") as bus:
        options = RunOptions(review_policy=PauseOnWrites(), checkpoint_bucket="cp")
        first, paused_events = await run(bus, tmp_path, turns(2)[:1], "res-1", options)
        assert first.stop_cause is StopCause.SUSPENDED
        (call,) = first.state.unanswered_calls()
        resumed_events: list[Event] = []
        done = await Agent(ScriptedModel(["done"], per_run=False), [note]).resume(
            "res-1",
            {call.id: ResumeDecision.approved()},
            ctx=RunContext.sandboxed(tmp_path / "ws", AllowAll()).with_store(bus),
            bucket="cp",
            on_event=resumed_events.append,
        )
        assert done.completed
        log = EventLog(bus)
        stored = await log.read("res-1")
        assert stored == wire_events(paused_events) + wire_events(resumed_events)
        assert await log.read("res-1", after=len(paused_events)) == wire_events(resumed_events)
        assert_valid_stream(stored[len(paused_events) :])


class _FailingEvents:
    """A store whose event-log bucket refuses every write (the store went away)."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self.url = bus.url

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bus, name)

    async def kv(self, bucket: str) -> KeyValue:
        if bucket == EVENT_LOG_BUCKET:
            raise StoreUnavailable("the event log's bucket is down")
        return await self._bus.kv(bucket)


async def test_a_store_failure_does_not_break_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with await open_bus("memory://") as inner:
        bus: Any = _FailingEvents(inner)
        with caplog.at_level(logging.ERROR, logger="tiller.store._event_log"):
            result, events = await run(bus, tmp_path, turns(3), "fail-1")
        assert result.completed
        assert_valid_stream(events)
        assert "not written" in caplog.text
        assert await EventLog(inner).read("fail-1") == []


async def test_without_a_checkpoint_bucket_nothing_is_logged(tmp_path: Path) -> None:
    async with await open_bus("memory://") as bus:
        result, _ = await run(bus, tmp_path, turns(2), "plain-1", RunOptions())
        assert result.completed
        assert await EventLog(bus).read("plain-1") == []
