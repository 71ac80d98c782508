"""Faults found in review of the fleet core: a run taken over elsewhere, a store that
goes away mid-run, hostile run ids and oversized jobs. Each settles honestly: no result
that is not the run's, no job acked that another holder still runs, a typed error."""

from __future__ import annotations

import asyncio
from collections import Counter
from types import ModuleType

import pytest

from tiller.fleet import RUN_QUEUE, Fleet, Worker
from tiller.store import CheckpointStore, QueueDepth, StoreDurability, open_bus

from .conftest import ref, until

pytestmark = pytest.mark.filterwarnings("error")


def gate(agents: ModuleType, step: int) -> tuple[asyncio.Event, asyncio.Event]:
    agents.GATES[step], agents.ENTERED[step] = asyncio.Event(), asyncio.Event()
    return agents.GATES[step], agents.ENTERED[step]


async def test_a_run_taken_over_elsewhere_is_neither_recorded_nor_acked(
    agents: ModuleType,
) -> None:
    """Another process broke the run's lease and took it (an operator's `tiller recover
    --force`): the worker's run stops on `LeaseLost` at its next write. That is not how
    the run ended — its new holder goes on with it — so the worker writes no `error`
    result (it would stand for good) and hands the job back instead of acking it."""
    now = [1_700_000_000.0]
    async with await open_bus("memory://", clock=lambda: now[0]) as bus:
        held, started = gate(agents, 2)
        handle = await Fleet(bus).submit(ref(agents, "three"), "go", run_id="taken")
        told: list[tuple[str, str]] = []
        worker = Worker(
            bus, name="A", lease=5.0, poll_interval=0.02, on_job=lambda *what: told.append(what)
        )
        running = asyncio.create_task(worker.run())
        try:
            async with asyncio.timeout(30):
                await started.wait()
            await CheckpointStore(bus).break_hold("taken")
            await StoreDurability(bus).take_lease("taken", "operator", 60.0)
            held.set()

            async def settled() -> bool:
                # Handed back, then (the operator holds the run) nakked until its lease
                # would lapse.
                return told.count(("taken", "released")) >= 2 and worker.in_flight == 0

            await until(settled)
        finally:
            worker.drain()
            async with asyncio.timeout(30):
                await running
        assert {what for _, what in told} == {"started", "released"}
        assert await handle.peek() is None  # no `error: LeaseLost` result stands
        queue = await bus.queue(RUN_QUEUE, lease=5.0)
        assert await queue.depth() == QueueDepth(waiting=1, in_flight=0)
        assert await queue.dead_letters() == []
        assert Counter(agents.ledger_lines())["taken-call-2"] == 1
