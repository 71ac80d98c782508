"""A run whose job runs out of deliveries gets a result all the same: a worker killed on
the job's last attempt writes nothing, so the claim that dead-letters the job tells the
worker that made it, which writes the run's `failed` record with the dead letter's
reason (else `RunHandle.result()` would wait for ever), and gives its batch share back
(else the batch would start fewer runs than its budget allows)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from types import ModuleType

import pytest

from tiller.conversation import AssistantMessage, UserMessage
from tiller.fleet import (
    RESULTS_BUCKET,
    RUN_QUEUE,
    BatchAmounts,
    BatchBudget,
    Fleet,
    ResultStore,
    RunJob,
    RunOutcomeRecord,
)
from tiller.loop import Budget, RunContext, record_policy
from tiller.policy import AllowAll
from tiller.state import RunState, StopCause
from tiller.store import DEFAULT_BUCKET, Bus, CheckpointStore, Job, JobQueue

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


async def killed_after_reserving(
    fleet: Fleet, agents: ModuleType, run_id: str, *, status: str, steps: int
) -> None:
    """Submit a run of batch `nightly` (100 steps; a run's share is 10) and play its
    worker killed on the last attempt: it claimed the job, reserved the run's share,
    checkpointed the run (`status`, `steps` spent), and never settled anything."""
    bus = fleet.bus
    await fleet.submit(ref(agents, "three"), "go", run_id=run_id, batch="nightly")
    await claim_fresh(await bus.queue(RUN_QUEUE, lease=LEASE, max_deliver=1), "killed")
    share = await BatchBudget(bus, "nightly").reserve(run_id)  # as `reserve_share` does
    assert share is not None and share.max_steps == 10
    run_ctx = RunContext.sandboxed(Path("."), AllowAll()).with_store(bus)
    run_ctx = run_ctx.with_budget(Budget(max_steps=10, steps=steps))
    state = RunState(run_id=run_id, thread_id=run_id, messages=[UserMessage(text="go")])
    if status == "finished":
        state.messages.append(AssistantMessage(text="done early"))
        state.stop_cause = StopCause.COMPLETED
    record_policy(state, run_ctx, agent_ref=ref(agents, "three"))
    await CheckpointStore(bus).save(state, status)


async def test_a_dead_lettered_runs_batch_share_goes_back(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus, lease=LEASE, max_deliver=1)
    budget = await fleet.create_batch("nightly", max_steps=100)
    await killed_after_reserving(fleet, agents, "killed", status="running", steps=3)
    assert (await budget.status()).left.steps == 90  # its share counts while it runs
    async with running_worker(store, name="B", lease=LEASE, max_deliver=1):
        record = await fleet.handle("killed").result(20)
    assert record.status == "failed" and "lease lapsed" in (record.error or "")
    status = await budget.status()
    # Its reservation went back; what its checkpoint says it spent is counted.
    assert (status.reserved, status.spent, status.left) == (
        BatchAmounts(0, None, None),
        BatchAmounts(3, 0, 0.0),
        BatchAmounts(97, None, None),
    )
    assert (status.runs_reserved, status.runs_reclaimed) == (0, 1)


async def test_a_run_finished_before_its_worker_died_gets_its_checkpoints_result(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    """Its worker finished it and was killed before writing the result: the dead
    letter's claim writes the result from the checkpoint and settles its share."""
    fleet = Fleet(bus, lease=LEASE, max_deliver=1)
    budget = await fleet.create_batch("nightly", max_steps=100)
    await killed_after_reserving(fleet, agents, "finished", status="finished", steps=4)
    async with running_worker(store, name="B", lease=LEASE, max_deliver=1):
        record = await fleet.handle("finished").result(20)
    assert (record.status, record.text, record.worker) == ("completed", "done early", "B")
    status = await budget.status()
    assert (status.left.steps, status.runs_settled, status.runs_reserved) == (96, 1, 0)


async def test_a_run_recovered_after_its_worker_died_settles_its_share_once(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    """With deliveries left, the recovery takes the same reservation back (nothing more)
    and settles it when the run ends: no dead letter, nothing left pending."""
    fleet = Fleet(bus, lease=LEASE, max_deliver=2)
    budget = await fleet.create_batch("nightly", max_steps=100)
    handle = await fleet.submit(ref(agents, "three"), "go", run_id="recovered", batch="nightly")
    queue = await bus.queue(RUN_QUEUE, lease=LEASE, max_deliver=2)
    await claim_fresh(queue, "killed")
    assert await BatchBudget(bus, "nightly").reserve("recovered") is not None
    async with running_worker(store, name="B", lease=LEASE, max_deliver=2):
        record = await handle.result(20)
    assert (record.status, record.attempt) == ("completed", 2)
    status = await budget.status()
    assert (status.runs_reserved, status.runs_settled, status.reserved.steps) == (0, 1, 0)
    assert status.left.steps == 100 - record.steps
    assert await queue.dead_letters() == []


class BrokenGuard:
    """A guard that fails every run it is asked to admit (a bug, not a `Deferred`)."""

    def admit(self, job: RunJob) -> AbstractAsyncContextManager[Callable[[RunContext], RunContext]]:
        raise RuntimeError("the guard broke")


async def test_a_run_its_worker_failed_on_the_last_attempt_gives_its_share_back(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    """The worker's own last attempt failed after the run reserved its share: the run
    gets its `failed` record and the share goes back (nothing was spent)."""
    fleet = Fleet(bus, lease=LEASE, max_deliver=1)
    budget = await fleet.create_batch("nightly", max_steps=100)
    handle = await fleet.submit(ref(agents, "three"), "go", run_id="broken", batch="nightly")
    async with running_worker(store, lease=LEASE, max_deliver=1, guard=BrokenGuard()):
        record = await handle.result(20)
    assert record.status == "failed" and "the guard broke" in (record.error or "")
    status = await budget.status()
    assert (status.left.steps, status.runs_reserved, status.runs_reclaimed) == (100, 0, 1)


async def test_damaged_records_of_a_dead_run_neither_stop_the_worker_nor_block_the_queue(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    """A dead-lettered run whose checkpoint, or whose result record, is damaged gets no
    result (said in the log): its job is dead-lettered all the same and the next runs."""
    fleet = Fleet(bus, lease=LEASE, max_deliver=1)
    queue = await bus.queue(RUN_QUEUE, lease=LEASE, max_deliver=1)
    for run_id in ("bad-checkpoint", "bad-result"):
        await fleet.submit(ref(agents, "three"), "go", run_id=run_id)
        await claim_fresh(queue, "killed")
    await (await bus.kv(DEFAULT_BUCKET)).put("bad-checkpoint", b"not json")
    await (await bus.kv(RESULTS_BUCKET)).put("bad-result", b"not json")
    async with running_worker(store, name="B", lease=LEASE, max_deliver=1):
        await until(lambda: dead_letters_are(queue, {"bad-checkpoint", "bad-result"}))
        handle = await fleet.submit(ref(agents, "three"), "go", run_id="next")
        record = await handle.result(20)
    assert record.status == "completed"
    assert await fleet.handle("bad-checkpoint").peek() is None


async def dead_letters_are(queue: JobQueue, ids: set[str]) -> bool:
    return {dead.id for dead in await queue.dead_letters()} == ids


@pytest.mark.parametrize(
    "checkpoint",
    [
        pytest.param(b'{"schema_version": 99, "written_by": "tiller 99"}', id="newer"),
        pytest.param(b'{"status": "running"}', id="no-version"),
    ],
)
async def test_an_unreadable_checkpoint_of_a_dead_run_does_not_block_the_queue(
    store: Store, bus: Bus, agents: ModuleType, checkpoint: bytes
) -> None:
    """A dead-lettered run whose checkpoint this tiller cannot read (a newer tiller's, or
    one without a schema version) is a `StoreError` that no retry mends: the job is
    dead-lettered (said in the log) and the next job runs. Only a store that is away
    leaves the job for a later claim."""
    fleet = Fleet(bus, lease=LEASE, max_deliver=1)
    queue = await bus.queue(RUN_QUEUE, lease=LEASE, max_deliver=1)
    await fleet.submit(ref(agents, "three"), "go", run_id="unreadable")
    await claim_fresh(queue, "killed")
    await (await bus.kv(DEFAULT_BUCKET)).put("unreadable", checkpoint)
    async with running_worker(store, name="B", lease=LEASE, max_deliver=1):
        await until(lambda: dead_letters_are(queue, {"unreadable"}), within=15)
        handle = await fleet.submit(ref(agents, "three"), "go", run_id="next")
        record = await handle.result(20)
    assert record.status == "completed"


@pytest.mark.parametrize("deliveries", [1, 2])
async def test_a_structured_run_finished_before_its_worker_died_keeps_its_output(
    store: Store, bus: Bus, agents: ModuleType, deliveries: int
) -> None:
    """Read from its checkpoint (by the dead letter's claim, or by the next delivery),
    the result's structured output is its last answer parsed again with its agent's
    output type, as the worker that finished it would have written it."""
    run_id = f"answered-{deliveries}"
    fleet = Fleet(bus, lease=LEASE, max_deliver=deliveries)
    handle = await fleet.submit(ref(agents, "structured"), "go", run_id=run_id)
    await claim_fresh(await bus.queue(RUN_QUEUE, lease=LEASE, max_deliver=deliveries), "killed")
    state = RunState(run_id=run_id, thread_id=run_id, messages=[UserMessage(text="go")])
    state.messages.append(AssistantMessage(text='{"value": 42}'))
    state.stop_cause = StopCause.COMPLETED
    run_ctx = RunContext.sandboxed(Path("."), AllowAll()).with_store(bus)
    record_policy(state, run_ctx, agent_ref=ref(agents, "structured"))
    await CheckpointStore(bus).save(state, "finished")
    async with running_worker(store, name="B", lease=LEASE, max_deliver=deliveries):
        record = await handle.result(20)
    assert (record.status, record.text, record.output) == (
        "completed",
        '{"value": 42}',
        {"value": 42},
    )
