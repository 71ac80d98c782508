"""A fleet run cancelled, steered, drained, taken over and continued after an approval,
from other connections to the store (as other processes would)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tiller.conversation import UserMessage
from tiller.fleet import RUN_QUEUE, WORKER_LOST, Fleet, RunJob, Worker
from tiller.loop import RunContext, record_policy
from tiller.ops import approve, held_approvals
from tiller.policy import AllowAll
from tiller.state import RunState
from tiller.store import (
    DEFAULT_BUCKET,
    Bus,
    CheckpointStore,
    QueueDepth,
    StoreDurability,
    open_bus,
)
from tiller.testing import assert_valid_stream

from .conftest import Store, gate, ref, running_worker, until

pytestmark = pytest.mark.filterwarnings("error")


async def entered(event: asyncio.Event) -> None:
    async with asyncio.timeout(30):
        await event.wait()


async def all_events(fleet: Fleet, run_id: str) -> list[dict[str, object]]:
    async with asyncio.timeout(30):
        return [event async for event in fleet.handle(run_id).events()]


async def test_cancel_from_another_connection_stops_the_run(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    held, started = gate(agents, 2)
    handle = await Fleet(bus).submit(ref(agents, "three"), "go", run_id="to-cancel")
    async with running_worker(store), await store.open() as elsewhere:
        await entered(started)
        await Fleet(elsewhere).handle("to-cancel").cancel("changed my mind")
        record = await handle.result(30)
    held.set()
    assert record.status == "cancelled"
    assert len(agents.ledger_lines()) == 1  # step 2's note never finished
    assert (await CheckpointStore(bus).load("to-cancel")).status == "finished"
    assert_valid_stream(await all_events(Fleet(bus), "to-cancel"))


async def test_a_steer_from_another_connection_reaches_the_run(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    async with await store.open() as elsewhere:
        await Fleet(elsewhere).handle("steered").steer("also mind the docs")
    handle = await fleet.submit(ref(agents, "three"), "go", run_id="steered")
    async with running_worker(store):
        record = await handle.result(30)
    assert record.status == "completed"
    state = (await CheckpointStore(bus).load("steered")).state
    assert "also mind the docs" in state.model_dump_json()


async def test_drain_mid_step_hands_the_run_to_another_worker(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    held, started = gate(agents, 2)
    fleet = Fleet(bus)
    handle = await fleet.submit(ref(agents, "three"), "go", run_id="drained")
    async with running_worker(store, name="A") as first:
        await entered(started)
        first.drain()  # mid-step: the run stops once step 2 is done
        held.set()
    checkpoint = await CheckpointStore(bus).load("drained")
    assert (checkpoint.status, checkpoint.state.step) == ("running", 2)
    assert await handle.peek() is None
    async with running_worker(store, name="B"):
        record = await handle.result(30)
    assert (record.status, record.worker) == ("completed", "B")
    # Attempt 2, or 3 on NATS when A's last claim was in flight as the drain began (A
    # handed that delivery straight back).
    assert record.attempt >= 2
    ledger = Counter(agents.ledger_lines())
    assert len(ledger) == 3 and set(ledger.values()) == {1}  # each call ran once
    events = await all_events(fleet, "drained")
    assert [e["type"] for e in events].count("RUN_STARTED") == 2
    assert not any(e.get("code") == WORKER_LOST for e in events)  # the drain closed it
    assert_valid_stream(events)


async def test_approve_then_continue_on_the_fleet(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    handle = await fleet.submit(ref(agents, "writer"), "write it", run_id="needs-ok")
    async with running_worker(store):
        held = await handle.result(30)
        assert held.status == "suspended"
        [pending] = await held_approvals(bus)
        await approve(bus, pending.id)
        job_id = await fleet.continue_run("needs-ok")
        assert job_id.startswith("needs-ok.continue.")
        assert await fleet.continue_run("needs-ok") == job_id  # one continuation
        record = await handle.result(30, through_holds=True)
    assert (record.status, record.text) == ("completed", "wrote: written")
    assert_valid_stream(await all_events(fleet, "needs-ok"))


async def test_result_of_a_run_finished_before_the_call(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    handle = await Fleet(bus).submit(ref(agents, "three"), "go", run_id="early")
    async with running_worker(store):
        await handle.result(30)
    async with await store.open() as later:
        record = await Fleet(later).handle("early").result(timeout=5)
        events = await all_events(Fleet(later), "early")
    assert record.status == "completed"
    assert_valid_stream(events)
    again = [e async for e in Fleet(bus).handle("early").events(after=3)]
    assert again == events[3:]  # reconnecting after 3 events: no duplicate


async def test_a_worker_that_lost_its_job_writes_no_result_and_acks_nothing(
    agents: ModuleType, tmp_path: Path
) -> None:
    """Its job lease lapsed (it hung) and another worker claimed the job: the run ends
    on the first worker, which then must neither record a result nor settle the job."""
    now = [1_700_000_000.0]
    async with await open_bus("memory://", clock=lambda: now[0]) as bus:
        held, started = gate(agents, 2)
        fleet = Fleet(bus)
        handle = await fleet.submit(ref(agents, "three"), "go", run_id="lost")
        first = Worker(bus, name="A", lease=5.0, poll_interval=0.02)
        running = asyncio.create_task(first.run())
        await entered(started)
        now[0] += 6  # A's job lease lapses
        queue = await bus.queue(RUN_QUEUE, lease=5.0)
        taken = await queue.claim("B")
        assert taken is not None and taken.attempt == 2
        held.set()  # A's run goes on to its end (no one took the run over)

        async def idle() -> bool:
            return first.in_flight == 0

        await until(idle)
        first.drain()
        async with asyncio.timeout(30):
            await running
        assert await handle.peek() is None  # A wrote no result
        assert (await CheckpointStore(bus).load("lost")).status == "finished"
        await queue.nak(taken)  # B held it all along: A did not settle it
        async with running_worker_on(bus, "C"):
            record = await handle.result(30)
    assert (record.status, record.worker, record.text) == ("completed", "C", "done after 3 notes")
    assert len(agents.ledger_lines()) == 3


async def test_a_worker_that_notices_it_lost_its_job_hands_the_run_over_at_a_step(
    agents: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker that stalled past its job lease, once it notices, stops the run at its
    next step boundary (checkpoint `running`, run lease released) instead of going on
    renewing the run's lease, which would make the job's new delivery only wait (and
    spend its attempts until it is dead-lettered). The new delivery recovers the run;
    no call runs twice."""
    now = [1_700_000_000.0]
    async with await open_bus("memory://", clock=lambda: now[0]) as bus:
        held, started = gate(agents, 2)
        fleet = Fleet(bus)
        handle = await fleet.submit(ref(agents, "three"), "go", run_id="noticed")
        first = Worker(bus, name="A", lease=0.6, poll_interval=0.02)
        running = asyncio.create_task(first.run())
        await entered(started)
        now[0] += 1  # A's job lease lapses
        queue = await bus.queue(RUN_QUEUE, lease=0.6)
        taken = await queue.claim("B")
        assert taken is not None and taken.attempt == 2

        async def noticed() -> bool:
            return any("another worker's" in r.getMessage() for r in caplog.records)

        await until(noticed)  # A's next lease extension found the job gone
        held.set()  # A's call at step 2 finishes; A stops at the step boundary

        async def idle() -> bool:
            return first.in_flight == 0

        await until(idle)
        assert await handle.peek() is None  # A wrote no result
        assert (await CheckpointStore(bus).load("noticed")).status == "running"
        assert await CheckpointStore(bus).holder("noticed") is None  # run lease released
        first.drain()
        async with asyncio.timeout(30):
            await running
        await queue.nak(taken)  # B stood in for the new delivery: give it to C
        async with running_worker_on(bus, "C"):
            record = await handle.result(30)
        events = await all_events(fleet, "noticed")
    assert (record.status, record.worker) == ("completed", "C")
    assert len(agents.ledger_lines()) == 3  # each step's note once
    assert_valid_stream(events)
    assert [e["type"] for e in events].count("RUN_STARTED") == 2  # A's segment, then C's


def running_worker_on(bus: Bus, name: str):  # type: ignore[no-untyped-def]
    class _Run:
        async def __aenter__(self) -> Worker:
            self.worker = Worker(bus, name=name, lease=5.0, poll_interval=0.02)
            self.task = asyncio.create_task(self.worker.run())
            return self.worker

        async def __aexit__(self, *exc: object) -> None:
            self.worker.drain()
            async with asyncio.timeout(30):
                await self.task

    return _Run()


async def test_events_followed_live_from_before_the_run_starts(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    handle = await fleet.submit(ref(agents, "three"), "go", run_id="followed")
    following = asyncio.create_task(all_events(fleet, "followed"))
    async with running_worker(store, event_log_batch=1):
        await handle.result(30)
        live = await following
    assert live == [e async for e in fleet.handle("followed").events()]
    assert live[0]["type"] == "RUN_STARTED" and live[-1]["type"] == "RUN_FINISHED"
    assert_valid_stream(live)


async def test_a_run_whose_lease_is_live_elsewhere_waits_for_it(
    agents: ModuleType,
) -> None:
    """A checkpoint `running` whose run lease another process still renews: recovering
    now could run a call twice, so the job is nakked until the lease would lapse."""
    now = [1_700_000_000.0]
    async with await open_bus("memory://", clock=lambda: now[0]) as bus:
        run_ctx = RunContext.sandboxed(Path("."), AllowAll()).with_store(bus)
        state = RunState(run_id="busy", thread_id="busy", messages=[UserMessage(text="go")])
        record_policy(state, run_ctx, agent_ref=ref(agents, "three"))
        checkpoints = CheckpointStore(bus)
        await checkpoints.save(state, "running")
        await StoreDurability(bus).take_lease("busy", "another-process", 20.0)
        job = RunJob(run_id="busy", agent=ref(agents, "three"), prompt="go")
        queue = await bus.queue(RUN_QUEUE, lease=5.0)
        await queue.enqueue(job.encode(), job_id="busy")
        told: list[tuple[str, str]] = []
        worker = Worker(
            bus, name="A", lease=5.0, poll_interval=0.02, on_job=lambda *what: told.append(what)
        )
        running = asyncio.create_task(worker.run())
        try:

            async def nakked() -> bool:
                return ("busy", "released") in told

            await until(nakked)
            assert await queue.depth() == QueueDepth(waiting=1, in_flight=0)
            assert await queue.claim("peek") is None  # not due before the lease lapses
            now[0] += 21
            record = await Fleet(bus).handle("busy").result(30)
        finally:
            worker.drain()
            await running
        assert await queue.dead_letters() == []
    assert record.status == "completed" and record.attempt == 2


async def test_a_drain_ends_the_wait_for_a_lapsing_run_lease_at_once(
    store: Store, bus: Bus, agents: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recovery that waits for its run's lease to lapse (up to a lease: 20 s here) is
    drained meanwhile: the wait ends then, and the job goes back as a drain's does."""
    run_ctx = RunContext.sandboxed(Path("."), AllowAll()).with_store(bus)
    state = RunState(run_id="busy", thread_id="busy", messages=[UserMessage(text="go")])
    record_policy(state, run_ctx, agent_ref=ref(agents, "three"))
    await CheckpointStore(bus).save(state, "running")
    await StoreDurability(bus).take_lease("busy", "another-process", 20.0)
    queue = await bus.queue(RUN_QUEUE, lease=30.0)
    job = RunJob(run_id="busy", agent=ref(agents, "three"), prompt="go")
    await queue.enqueue(job.encode(), job_id="busy")
    told: list[tuple[str, str]] = []
    async with await store.open() as own:
        worker = Worker(
            own, name="A", lease=30.0, poll_interval=0.02, on_job=lambda *what: told.append(what)
        )
        # The wait begins as soon as the worker has read who holds the run's lease (no
        # await in between): the test drains it once it has.
        read = asyncio.Event()
        holder = worker.checkpoints.holder

        async def spied(run_id: str) -> tuple[str, float] | None:
            try:
                return await holder(run_id)
            finally:
                read.set()

        monkeypatch.setattr(worker.checkpoints, "holder", spied)
        running = asyncio.create_task(worker.run())
        async with asyncio.timeout(10):
            await read.wait()
        assert told == [("busy", "started")]
        worker.drain()
        async with asyncio.timeout(5):  # a hang guard: before the fix it slept 20 s
            await running
    assert told == [("busy", "started"), ("busy", "released")]
    assert (await CheckpointStore(bus).holder("busy") or ("",))[0] == "another-process"
    async with asyncio.timeout(10):
        while (again := await queue.claim("B")) is None:
            pass
    # Handed back at once (on NATS the draining worker's last fetch may have taken it
    # again and handed it back once more: attempt 3).
    assert again.id == "busy" and again.attempt >= 2
    assert await queue.dead_letters() == []


async def test_stop_hands_the_job_back_without_waiting_for_the_step(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    held, started = gate(agents, 2)
    handle = await Fleet(bus).submit(ref(agents, "three"), "go", run_id="stopped")
    async with running_worker(store) as worker:
        await entered(started)
        worker.stop()  # step 2's note is cut off: it is uncertain from now on
    held.set()
    assert await handle.peek() is None
    assert (await CheckpointStore(bus).load("stopped")).status == "running"
    depth = await (await bus.queue(RUN_QUEUE)).depth()
    # Waiting again (NATS counts a nakked job as in flight until it is fetched again).
    assert depth.waiting + depth.in_flight == 1
    async with running_worker(store):
        record = await handle.result(30)
    assert record.status == "blocked" and record.blocked_calls == ["note (stopped-call-2)"]


async def test_a_continuation_before_every_held_call_is_decided_changes_nothing(
    store: Store, bus: Bus, agents: ModuleType
) -> None:
    fleet = Fleet(bus)
    handle = await fleet.submit(ref(agents, "writer"), "write it", run_id="undecided")
    async with running_worker(store):
        held = await handle.result(30)
        early = RunJob(kind="continue", run_id="undecided")
        await (await bus.queue(RUN_QUEUE)).enqueue(early.encode(), job_id="undecided.early")

        async def termed() -> bool:
            return bool(await (await bus.queue(RUN_QUEUE)).dead_letters())

        await until(termed)
    [letter] = await (await bus.queue(RUN_QUEUE)).dead_letters()
    assert "still waits for" in letter.reason
    assert await handle.peek() == held  # still suspended, for a person
    assert (await CheckpointStore(bus).load("undecided")).status == "suspended"


class _RacedKeyValue:
    """The checkpoints bucket, where the run's lease is taken by "another worker" just
    before this one takes it: the previous holder renewing it after recovery's check."""

    def __init__(self, kv: Any, key: str) -> None:
        self._kv, self._key, self.fired = kv, key, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kv, name)

    async def acquire(self, key: str, owner: str, ttl: float) -> Any:
        if key == self._key and not self.fired:
            self.fired = True
            assert await self._kv.acquire(key, "the-previous-worker", ttl) is not None
        return await self._kv.acquire(key, owner, ttl)


class _RacedBus:
    def __init__(self, bus: Bus, key: str) -> None:
        self._bus, self._key = bus, key
        self.raced: _RacedKeyValue | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bus, name)

    async def kv(self, bucket: str, *args: Any, **kwargs: Any) -> Any:
        kv = await self._bus.kv(bucket, *args, **kwargs)
        if bucket != DEFAULT_BUCKET:
            return kv
        if self.raced is None:
            self.raced = _RacedKeyValue(kv, self._key)
        return self.raced


async def test_a_recovery_that_loses_the_lease_race_hands_the_job_back(
    agents: ModuleType,
) -> None:
    """Found by the chaos test: recovery saw the run's lease lapsed, but its previous
    worker (alive, only slow) renewed it before the run took it. The run's own take
    refused (`RunStillRunning`): the job goes back for later, the run is not failed."""
    async with await open_bus("memory://") as bus:
        store = Store("memory://", memory=bus)
        held, started = gate(agents, 2)
        handle = await Fleet(bus).submit(ref(agents, "three"), "go", run_id="raced")
        async with running_worker(store) as worker:
            await entered(started)
            worker.drain()
            held.set()
        assert (await CheckpointStore(bus).load("raced")).status == "running"
        raced = _RacedBus(bus, "raced/lease")
        worker = Worker(raced, lease=0.5, poll_interval=0.02, control_poll=0.05)  # type: ignore[arg-type]
        running = asyncio.create_task(worker.run())
        try:
            record = await handle.result(30)
        finally:
            worker.drain()
            async with asyncio.timeout(30):
                await running
    assert raced.raced is not None and raced.raced.fired
    assert record.status == "completed", record.error
    ledger = Counter(agents.ledger_lines())
    assert len(ledger) == 3 and set(ledger.values()) == {1}
