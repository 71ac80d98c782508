"""A run whose job runs out of deliveries gets a result all the same: a worker killed on
the job's last attempt writes nothing, so the claim that dead-letters the job tells the
worker that made it, which writes the run's `failed` record with the dead letter's
reason (else `RunHandle.result()` would wait for ever)."""

from __future__ import annotations

import asyncio
from types import ModuleType

import pytest

from tiller.fleet import RUN_QUEUE, Fleet, ResultStore, RunOutcomeRecord
from tiller.store import Bus, Job, JobQueue

from .conftest import Store, ref, running_worker, until

pytestmark = pytest.mark.filterwarnings("error")

#: Short, so the killed worker's lease lapses soon (real seconds: NATS times it).
LEASE = 1.0


async def claim_fresh(queue: JobQueue, worker: str) -> Job:
    """The queue's waiting job, claimed (a NATS fetch may come back empty once)."""
    async with asyncio.timeout(10):
        while (job := await queue.claim(worker)) is None:
            pass
    return job


async def test_a_run_whose_worker_died_on_its_last_attempt_fails_with_why(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus, lease=LEASE, max_deliver=2)
    handle = await fleet.submit(ref(agents, "three"), "go", run_id="killed")
    queue = await bus.queue(RUN_QUEUE, lease=LEASE, max_deliver=2)
    first = await claim_fresh(queue, "flaky")
    await queue.nak(first, error="the first worker gave it back")
    # A worker claims the last attempt and is SIGKILLed: it never settles it.
    last = await claim_fresh(queue, "killed")
    assert last.attempt == 2
    async with running_worker(store, name="B", lease=LEASE, max_deliver=2):
        record = await handle.result(20)
    assert (record.status, record.worker, record.attempt) == ("failed", "B", 2)
    assert record.error == (
        "its job was dead-lettered after 2 deliveries: "
        "attempt 2's lease lapsed without an ack (the worker died or hung)"
    )
    (dead,) = await queue.dead_letters()
    assert (dead.id, dead.attempt) == ("killed", 2)
    assert agents.ledger_lines() == []  # nothing ran after the killed worker


async def test_a_run_that_already_has_a_record_keeps_it(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    """Its worker wrote the result and was killed before the ack: the record stands."""
    fleet = Fleet(bus, lease=LEASE, max_deliver=1)
    handle = await fleet.submit(ref(agents, "three"), "go", run_id="written")
    queue = await bus.queue(RUN_QUEUE, lease=LEASE, max_deliver=1)
    await claim_fresh(queue, "killed")
    written = RunOutcomeRecord(run_id="written", status="completed", text="done", worker="A")
    await ResultStore(bus).record(written)
    async with running_worker(store, name="B", lease=LEASE, max_deliver=1):

        async def buried() -> bool:
            return len(await queue.dead_letters()) == 1

        await until(buried)
    assert await handle.result(5) == written
