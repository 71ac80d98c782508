"""A batch made with a budget (`Fleet.create_batch`) shares it among its runs on every
worker: each run reserves before it starts, runs with its reservation as its budget and
settles when it ends; a run that finds nothing left never starts. On memory, SQLite and
NATS."""

from __future__ import annotations

import asyncio
from types import ModuleType

import pytest

from tiller.fleet import BatchBudget, Fleet, JobBudget, RunOutcomeRecord
from tiller.ops import approve, held_approvals
from tiller.store import Bus, CheckpointStore, NotFound

from .conftest import Store, gate, ref, running_worker

pytestmark = pytest.mark.filterwarnings("error")


async def results(fleet: Fleet, run_ids: list[str]) -> list[RunOutcomeRecord]:
    async with asyncio.timeout(60):
        return [await fleet.handle(run_id).result() for run_id in run_ids]


async def test_two_workers_never_spend_more_steps_than_the_batch_has(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    await fleet.create_batch("b", max_steps=10)
    run_ids = [
        (
            await fleet.submit(
                ref(agents, "three"), f"task {n}", batch="b", budget=JobBudget(max_steps=4)
            )
        ).run_id
        for n in range(6)
    ]
    async with (
        running_worker(store, name="A", concurrency=3),
        running_worker(store, name="B", concurrency=3),
    ):
        records = await results(fleet, run_ids)
    steps = sum(r.steps for r in records)
    assert steps <= 10  # 6 runs of 4 steps asked for 24
    never_started = [r for r in records if r.steps == 0]
    assert never_started  # the batch ran out before every run had its share
    assert {(r.status, r.stop_cause) for r in never_started} == {("stopped", "step_budget")}
    status = await BatchBudget(bus, "b").status()
    assert status.spent.steps == steps and status.reserved.steps == 0
    assert status.runs_settled == len(records) - len(never_started)
    assert status.runs_reserved == 0
    # Every note a run made is one of its steps (the final answer is the other).
    assert len(agents.ledger_lines()) <= steps


async def test_a_spent_batch_records_its_later_runs_without_starting_them(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    await fleet.create_batch("small", max_steps=4)
    first = await fleet.submit(
        ref(agents, "three"), "first", batch="small", budget=JobBudget(max_steps=4)
    )
    async with running_worker(store):
        done = await first.result(30)
        later = await (await fleet.submit(ref(agents, "three"), "later", batch="small")).result(30)
    assert (done.status, done.steps) == ("completed", 4)
    assert (later.status, later.stop_cause, later.steps) == ("stopped", "step_budget", 0)
    assert "has no steps left" in (later.error or "")
    with pytest.raises(NotFound):
        await CheckpointStore(bus).load(later.run_id)  # it never started
    assert len(agents.ledger_lines()) == 3  # the first run's notes only
    status = await BatchBudget(bus, "small").status()
    assert (status.spent.steps, status.left.steps, status.runs_settled) == (4, 0, 1)


async def test_a_run_recovered_on_another_worker_keeps_its_reservation(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    held, started = gate(agents, 2)
    fleet = Fleet(bus)
    await fleet.create_batch("kept", max_steps=6)
    handle = await fleet.submit(
        ref(agents, "three"), "go", run_id="moved", batch="kept", budget=JobBudget(max_steps=4)
    )
    async with running_worker(store, name="A") as first:
        async with asyncio.timeout(30):
            await started.wait()
        first.drain()  # the run stops once step 2 is done; B recovers it
        held.set()
    mid = await BatchBudget(bus, "kept").status()
    assert (mid.runs_reserved, mid.reserved.steps, mid.spent.steps) == (1, 4, 0)
    async with running_worker(store, name="B"):
        record = await handle.result(30)
    assert (record.status, record.worker, record.steps) == ("completed", "B", 4)
    status = await BatchBudget(bus, "kept").status()
    # One reservation of 4, settled at the 4 steps spent on both workers; 2 left.
    assert (status.runs_reserved, status.runs_settled) == (0, 1)
    assert (status.spent.steps, status.left.steps) == (4, 2)


async def test_a_batch_without_a_budget_runs_as_before(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    handle = await fleet.submit(ref(agents, "three"), "go", batch="unbudgeted")
    async with running_worker(store):
        record = await handle.result(30)
    assert (record.status, record.steps) == ("completed", 4)


async def test_a_started_run_of_a_cancelled_batch_gives_back_what_it_did_not_spend(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    held, started = gate(agents, 2)
    fleet = Fleet(bus)
    await fleet.create_batch("dropped", max_steps=8)
    handle = await fleet.submit(
        ref(agents, "three"), "go", run_id="halfway", batch="dropped", budget=JobBudget(max_steps=4)
    )
    async with running_worker(store, name="A") as first:
        async with asyncio.timeout(30):
            await started.wait()
        first.drain()  # stopped after step 2, its share still reserved
        held.set()
    await fleet.cancel_batch("dropped")
    async with running_worker(store, name="B"):
        record = await handle.result(30)
    assert record.status == "cancelled"
    status = await BatchBudget(bus, "dropped").status()
    # Settled at the 2 steps its checkpoint says it spent: the other 2 went back.
    assert (status.runs_reserved, status.runs_settled) == (0, 1)
    assert (status.spent.steps, status.left.steps) == (2, 6)


async def test_a_suspended_run_keeps_its_share_until_its_continuation_ends(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    await fleet.create_batch("asks", max_steps=10)
    handle = await fleet.submit(
        ref(agents, "writer"), "go", batch="asks", budget=JobBudget(max_steps=5)
    )
    async with running_worker(store):
        held = await handle.result(30)
        assert held.status == "suspended"
        waiting = await BatchBudget(bus, "asks").status()
        assert (waiting.runs_reserved, waiting.reserved.steps) == (1, 5)  # not settled
        [pending] = await held_approvals(bus)
        await approve(bus, pending.id)
        await fleet.continue_run(handle.run_id)
        record = await handle.result(30, through_holds=True)
    assert (record.status, record.batch) == ("completed", "asks")
    status = await BatchBudget(bus, "asks").status()
    assert (status.runs_reserved, status.runs_settled) == (0, 1)
    assert (status.spent.steps, status.left.steps) == (record.steps, 10 - record.steps)
