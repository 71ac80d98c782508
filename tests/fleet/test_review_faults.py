"""Faults found in review of the fleet core: a run taken over elsewhere, a store that
goes away mid-run, hostile run ids and oversized jobs. Each settles honestly: no result
that is not the run's, no job acked that another holder still runs, a typed error."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from types import ModuleType

import pytest

from tiller.conversation import UserMessage
from tiller.events import RunFinishedEvent, RunStartedEvent, StepFinishedEvent, StepStartedEvent
from tiller.fleet import (
    RUN_QUEUE,
    WORKER_LOST,
    Fleet,
    ResultStore,
    RunHandle,
    RunJob,
    RunOutcomeRecord,
    Worker,
)
from tiller.loop import RunContext
from tiller.state import RunState
from tiller.store import CheckpointStore, EventLog, QueueDepth, StoreDurability, open_bus

from .._tcp_proxy import TcpProxy
from .conftest import NATS_URL, gate, ref, until

pytestmark = pytest.mark.filterwarnings("error")


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
                return ("taken", "released") in told and worker.in_flight == 0

            await until(settled)
        finally:
            worker.drain()
            async with asyncio.timeout(30):
                await running
        assert told == [("taken", "started"), ("taken", "released")]
        assert await handle.peek() is None  # no `error: LeaseLost` result stands
        queue = await bus.queue(RUN_QUEUE, lease=5.0)
        assert await queue.depth() == QueueDepth(waiting=1, in_flight=0)
        assert await queue.dead_letters() == []
        assert Counter(agents.ledger_lines())["taken-call-2"] == 1


async def test_nats_going_away_mid_run_the_worker_claims_again_when_it_returns(
    agents: ModuleType,
) -> None:
    """The issue's fault: NATS goes away while a run is inside a call. The run's next
    write fails (`StoreUnavailable`), the worker claims nothing meanwhile and survives;
    when NATS is back it claims again, the run goes on from its checkpoint (the call cut
    off is uncertain: held for a person, never run twice, law 5), and a run submitted
    during the outage completes. No result says `error`, nothing is dead-lettered."""
    namespace = f"rv{uuid.uuid4().hex[:12]}"
    proxy = TcpProxy()
    await proxy.start()
    async with (
        await open_bus(NATS_URL, namespace=namespace) as steady,
        await open_bus(f"nats://127.0.0.1:{proxy.port}", namespace=namespace) as flaky,
    ):
        try:
            held, started = gate(agents, 2)
            fleet = Fleet(steady, lease=3.0)
            first = await fleet.submit(ref(agents, "three"), "go", run_id="outage-1")
            told: list[tuple[str, str]] = []
            worker = Worker(
                flaky,
                name="A",
                lease=3.0,
                poll_interval=0.05,
                control_poll=0.1,
                on_job=lambda *what: told.append(what),
            )
            running = asyncio.create_task(worker.run())
            async with asyncio.timeout(30):
                await started.wait()
            await proxy.cut()
            held.set()  # the note ends while the store is away: its record cannot be written
            second = await fleet.submit(ref(agents, "three"), "go", run_id="outage-2")

            async def let_go() -> bool:
                return ("outage-1", "released") in told

            await until(let_go, within=60)
            assert not running.done()  # the claim loop lives on
            assert await first.peek() is None and await second.peek() is None
            await proxy.start()  # NATS is back
            async with asyncio.timeout(90):
                one = await first.result()
                two = await second.result()
            assert await (await steady.queue(RUN_QUEUE, lease=3.0)).dead_letters() == []
        finally:
            worker.drain()
            async with asyncio.timeout(30):
                await running
            await proxy.cut()
            await steady.delete_namespace()  # type: ignore[attr-defined]
    assert (two.status, two.text) == ("completed", "done after 3 notes")
    assert one.status == "blocked" and one.blocked_calls == ["note (outage-1-call-2)"]
    ledger = Counter(agents.ledger_lines())
    assert set(ledger.values()) == {1}  # no call ran twice
    assert ledger["outage-1-call-2"] == 1 and "outage-1-call-3" not in ledger


async def test_a_fresh_run_whose_lease_another_process_took_first_is_not_an_error(
    agents: ModuleType,
) -> None:
    """The job was redelivered while its first worker had taken the run's lease but not
    yet written its first checkpoint (a slow store, a worker paused between the two): the
    second worker finds no checkpoint, starts the run fresh, and the run's lease is
    refused (`RunStillRunning`). That is not the run failing: no `error` result (it would
    stand over the live run's own), and the job is handed back, not acked."""
    async with await open_bus("memory://") as bus:
        await StoreDurability(bus).take_lease("early", "the-first-worker", 20.0)
        handle = await Fleet(bus).submit(ref(agents, "three"), "go", run_id="early")
        told: list[tuple[str, str]] = []
        worker = Worker(
            bus, name="B", lease=5.0, poll_interval=0.02, on_job=lambda *what: told.append(what)
        )
        running = asyncio.create_task(worker.run())
        try:

            async def settled() -> bool:
                return len(told) >= 2 and worker.in_flight == 0

            await until(settled)
        finally:
            worker.drain()
            async with asyncio.timeout(30):
                await running
        # Handed back for once the lease would lapse, not at once (a hot loop of attempts).
        assert told == [("early", "started"), ("early", "released")]
        assert await (await bus.queue(RUN_QUEUE, lease=5.0)).depth() == QueueDepth(1, 0)
        assert await handle.peek() is None
        assert agents.ledger_lines() == []
        assert await (await bus.queue(RUN_QUEUE, lease=5.0)).dead_letters() == []


async def test_an_on_job_callback_that_raises_does_not_stop_the_worker(
    agents: ModuleType,
) -> None:
    """`on_job` is the caller's (a log line, a metric): its bug is logged, and neither
    kills the worker's claim loop (with every run it holds) nor loses the job."""
    async with await open_bus("memory://") as bus:
        fleet = Fleet(bus)
        first = await fleet.submit(ref(agents, "three"), "go", run_id="told-1")

        def on_job(run_id: str, what: str) -> None:
            raise RuntimeError(f"the caller's callback broke on {run_id} {what}")

        worker = Worker(bus, name="A", lease=5.0, poll_interval=0.02, on_job=on_job)
        running = asyncio.create_task(worker.run())
        try:
            async with asyncio.timeout(30):
                one = await first.result()
                second = await fleet.submit(ref(agents, "three"), "go", run_id="told-2")
                two = await second.result()
            assert not running.done()
        finally:
            worker.drain()
            async with asyncio.timeout(30):
                await running
    assert (one.status, two.status) == ("completed", "completed")


async def test_events_followed_during_a_continuation_are_not_cut_with_a_false_worker_lost(
    agents: ModuleType,
) -> None:
    """A run held for a person (its `suspended` record stands) is continued: a client that
    follows its events while the continuation runs reads an open segment. A pause between
    two of its event-log batches is not a dead worker: the stream follows the segment to
    its end, with no `WORKER_LOST` put in and cut off."""
    async with await open_bus("memory://") as bus:
        await CheckpointStore(bus).save(
            RunState(run_id="held", thread_id="held", messages=[UserMessage(text="go")]),
            "running",  # the continuation runs
        )
        results = ResultStore(bus)
        await results.record(RunOutcomeRecord(run_id="held", status="suspended"))
        log = EventLog(bus).writer("held", batch_size=1)
        for event in (
            RunStartedEvent(thread_id="held", run_id="held"),
            StepStartedEvent("step 1"),
            StepFinishedEvent("step 1"),
            RunFinishedEvent(thread_id="held", run_id="held"),  # the suspension
            RunStartedEvent(thread_id="held", run_id="held"),  # the continuation
            StepStartedEvent("step 2"),
        ):
            log(event)
        await log.wait()
        handle = RunHandle(bus, "held", poll_interval=0.01)
        seen: list[dict[str, object]] = []

        async def follow() -> None:
            async for event in handle.events():
                seen.append(event)

        following = asyncio.create_task(follow())

        async def mid_continuation() -> bool:
            return len(seen) >= 6 or following.done()

        await until(mid_continuation)
        await asyncio.sleep(0.2)  # many polls with nothing new: the continuation is slow
        log(StepFinishedEvent("step 2"))
        log(RunFinishedEvent(thread_id="held", run_id="held"))
        await log.wait()
        await results.record(RunOutcomeRecord(run_id="held", status="completed"))
        async with asyncio.timeout(30):
            await following
    assert [e["type"] for e in seen][4:] == [
        "RUN_STARTED",
        "STEP_STARTED",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]
    assert not any(e.get("code") == WORKER_LOST for e in seen)


class _BrokenGuard:
    """A guard with a bug: admitting any run raises."""

    @contextlib.asynccontextmanager
    async def admit(self, job: RunJob) -> AsyncIterator[Callable[[RunContext], RunContext]]:
        raise RuntimeError("the guard is broken")
        yield lambda ctx: ctx  # pragma: no cover (never reached)


async def test_a_run_that_fails_the_worker_on_every_attempt_gets_a_failed_result(
    agents: ModuleType,
) -> None:
    """A worker failure (not the run's) releases the job to try again; on its last
    attempt the job goes to the dead letters, and `handle.result()` must not wait for
    ever: the run gets a `failed` record saying why."""
    async with await open_bus("memory://") as bus:
        handle = await Fleet(bus, lease=0.2).submit(ref(agents, "three"), "go", run_id="poison")
        worker = Worker(bus, name="A", lease=0.2, poll_interval=0.02, guard=_BrokenGuard())
        running = asyncio.create_task(worker.run())
        try:
            record = await handle.result(30)
            queue = await bus.queue(RUN_QUEUE, lease=0.2)

            async def dead() -> bool:
                return bool(await queue.dead_letters())

            await until(dead)
        finally:
            worker.drain()
            async with asyncio.timeout(30):
                await running
    assert record.status == "failed" and record.attempt == 5
    assert record.error is not None and "RuntimeError: the guard is broken" in record.error
    assert agents.ledger_lines() == []
