"""A worker runs the fleet's jobs: each submitted run once, as a durable run, with its
result recorded; on memory, SQLite and NATS."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from types import ModuleType

import pytest

from tiller.conversation import Taint, UserMessage
from tiller.fleet import Fleet, JobBudget, RunOutcomeRecord
from tiller.state import RunState
from tiller.store import Bus, CheckpointStore

from .conftest import Store, ref, running_worker, until

pytestmark = pytest.mark.filterwarnings("error")


async def results_of(fleet: Fleet, run_ids: list[str]) -> dict[str, RunOutcomeRecord]:
    async with asyncio.timeout(60):
        return {run_id: await fleet.handle(run_id).result() for run_id in run_ids}


async def test_each_submitted_run_completes_once(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    handles = [
        await fleet.submit(ref(agents, "three"), f"task {n}", run_id=f"run-{n}") for n in range(6)
    ]
    async with running_worker(store, concurrency=3, name="w1", heartbeat=0.05):
        results = await results_of(fleet, [h.run_id for h in handles])

        async def listed() -> bool:
            return [w.name for w in (await fleet.status()).workers] == ["w1"]

        await until(listed)
        [info] = (await fleet.status()).workers
        assert (info.concurrency, info.queue, info.pid) == (3, "tiller-runs", os.getpid())
    assert {r.status for r in results.values()} == {"completed"}
    assert {r.text for r in results.values()} == {"done after 3 notes"}
    assert all(r.steps == 4 and r.worker == "w1" and r.attempt == 1 for r in results.values())
    ledger = Counter(agents.ledger_lines())
    assert len(ledger) == 18 and set(ledger.values()) == {1}  # 6 runs, 3 calls each, each once
    for run_id in results:
        assert (await CheckpointStore(bus).load(run_id)).status == "finished"
    status = await fleet.status()
    assert (status.depth.waiting, status.depth.in_flight, status.dead_letters) == (0, 0, 0)


async def test_submitting_a_run_id_twice_is_one_run(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    await fleet.submit(ref(agents, "three"), "once", run_id="twice")
    await fleet.submit(ref(agents, "three"), "once", run_id="twice")
    async with running_worker(store):
        record = await (await fleet.submit(ref(agents, "three"), "x", run_id="twice")).result(30)
        # A job that would have come after it has had its chance to be claimed.
        await (await fleet.submit(ref(agents, "three"), "marker", run_id="after")).result(30)
    assert record.status == "completed"
    assert len(agents.ledger_lines()) == 6  # three for `twice`, three for `after`


async def test_a_run_on_a_thread_starts_with_what_the_thread_read(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    """Taint only grows within a conversation (law 6): a job on a thread whose earlier
    run read untrusted input (a served thread's last run) starts tainted, as a served
    request's run in the server's own process does; a job on a new thread does not."""
    earlier = RunState(
        run_id="earlier",
        thread_id="read-the-web",
        messages=[UserMessage(text="go")],
        taint=Taint.UNTRUSTED_INPUT.value,
    )
    await CheckpointStore(bus).save(earlier, "finished")
    fleet = Fleet(bus)
    later = await fleet.submit(ref(agents, "three"), "go", run_id="later", thread_id="read-the-web")
    fresh = await fleet.submit(ref(agents, "three"), "go", run_id="fresh", thread_id="new")
    async with running_worker(store):
        await results_of(fleet, ["later", "fresh"])
    checkpoints = CheckpointStore(bus)
    assert (await checkpoints.load(later.run_id)).state.taint == Taint.UNTRUSTED_INPUT.value
    assert (await checkpoints.load(fresh.run_id)).state.taint == Taint.NONE.value


async def test_model_budget_and_structured_output_reach_the_run(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    on_b = await fleet.submit(ref(agents, "factory"), "which model?", model="scripted-b")
    capped = await fleet.submit(ref(agents, "five"), "go", budget=JobBudget(max_steps=2))
    typed = await fleet.submit(ref(agents, "structured"), "the answer?")
    async with running_worker(store):
        results = await results_of(fleet, [on_b.run_id, capped.run_id, typed.run_id])
    assert results[on_b.run_id].text == "scripted-b after 1 notes"
    assert (await CheckpointStore(bus).load(on_b.run_id)).state.model_spec == "scripted-b"
    stopped = results[capped.run_id]
    assert (stopped.status, stopped.stop_cause) == ("stopped", "step_budget")
    assert results[typed.run_id].output == {"value": 42}
