"""The fleet's background work is stopped without swallowing a cancellation (DESIGN §4
law 8): `JobLeaseKeeper.stop()`, `FleetLimits.aclose()` and the worker's `run()` (its
heartbeat, stopped on the way out), cancelled while the stopped task is slow to end, end
cancelled once it has ended."""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace
from typing import Any

import pytest

from tiller.fleet import FleetLimits, Worker
from tiller.fleet._job_lease import JobLeaseKeeper
from tiller.store import MemoryBus

from .._slow_to_end import SlowToEnd, cancel_the_stopper


async def test_a_cancelled_job_lease_keeper_stop_ends_cancelled_after_the_extending() -> None:
    slow = SlowToEnd()
    queue: Any = SimpleNamespace(lease=0.03, extend=slow.block)
    keeper = JobLeaseKeeper(queue, SimpleNamespace(id="job-1")).start()  # type: ignore[arg-type]
    await slow.entered.wait()
    await cancel_the_stopper(slow, asyncio.create_task(keeper.stop()))


async def test_a_cancelled_fleet_limits_aclose_ends_cancelled_after_the_renewing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow = SlowToEnd()
    limits = FleetLimits(MemoryBus(), max_runs=1, lease=30.0, renew_every=0.01)
    monkeypatch.setattr(limits, "_renew", slow.block)
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(limits.run_slot("run-1"))
        await slow.entered.wait()
        await cancel_the_stopper(slow, asyncio.create_task(limits.aclose()))


async def test_a_worker_cancelled_while_its_heartbeat_stops_ends_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow = SlowToEnd()
    worker = Worker(MemoryBus(), poll_interval=0.01)
    monkeypatch.setattr(worker._registry, "beat", slow.block)
    left: list[str] = []

    async def leave(name: str) -> None:
        left.append(name)

    monkeypatch.setattr(worker._registry, "leave", leave)
    running = asyncio.create_task(worker.run())
    await slow.entered.wait()
    worker.drain()  # run() ends its claim loop, then stops the heartbeat
    await cancel_the_stopper(slow, running)
    assert left == [worker.name]  # it still said it left
