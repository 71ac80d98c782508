"""A run handed back on its job's last delivery (its worker drained or stopped mid-run):
the nak dead-letters the job, so the worker writes the run's result first. Without it no
worker ever would, and `RunHandle.result()` (an eval on the fleet, a batch's submitter)
would wait for ever."""

from __future__ import annotations

import uuid
from types import ModuleType

import pytest

from tiller.fleet import Fleet

from .conftest import Store, gate, ref, running_worker

pytestmark = pytest.mark.filterwarnings("error")


async def test_a_run_stopped_on_its_jobs_last_delivery_gets_a_failed_result(
    store: Store, agents: ModuleType
) -> None:
    release, entered = gate(agents, 2)
    async with await store.open() as bus:
        fleet = Fleet(bus, max_deliver=1)
        handle = await fleet.submit(ref(agents, "three"), "go", run_id=f"last-{uuid.uuid4().hex}")
        async with running_worker(store, name="first") as worker:
            await entered.wait()
            worker.stop()
        release.set()
        record = await handle.result(timeout=20)
        queue = await bus.queue("tiller-runs")
        dead = [letter.id for letter in await queue.dead_letters()]
    assert record.status == "failed"
    assert record.error is not None
    assert "dead-lettered after 1 deliveries" in record.error
    assert record.worker == "first"
    assert dead == [handle.run_id]
