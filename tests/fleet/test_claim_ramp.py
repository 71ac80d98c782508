"""A worker takes on jobs gradually (`ClaimRamp`): one at first, one more each time its
runs make progress. A worker that dies on its first job, before any of its runs finished
a step, has cost one job a delivery, not its whole concurrency; the chaos test found jobs
dead-lettered so, every fresh worker taking the jobs at the queue's head eight at once
and dying with them."""

from __future__ import annotations

import asyncio
from types import ModuleType

import pytest

from tiller.fleet import Fleet
from tiller.store import Bus

from .conftest import Store, ref, running_worker, until

pytestmark = pytest.mark.filterwarnings("error")


async def test_a_fresh_worker_holds_one_job_until_a_run_of_it_finishes_a_step(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    agents.GATES[1], agents.ENTERED[1] = held, started = asyncio.Event(), asyncio.Event()
    fleet = Fleet(bus)
    handles = [await fleet.submit(ref(agents, "three"), "go", run_id=f"ramp-{n}") for n in range(4)]
    async with running_worker(store, concurrency=4) as worker:
        async with asyncio.timeout(30):
            await started.wait()  # its first run is in its first step, and stays there
        await asyncio.sleep(0.5)  # the claim loop has had every chance to claim the rest
        assert worker.in_flight == 1
        held.set()
        records = [await handle.result(30) for handle in handles]

        async def all_settled() -> bool:
            return worker.in_flight == 0

        await until(all_settled)
    assert [record.status for record in records] == ["completed"] * 4
    assert len(agents.ledger_lines()) == 12  # four runs, three notes each, each once
