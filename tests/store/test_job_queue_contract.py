"""The job queue's contract, run against memory, SQLite and the real nats-server (see
`conftest.bus`: a fresh namespace per test).

Leases on memory and SQLite run on the store's injected `FakeClock`; on NATS they are the
consumer's `AckWait`, timed by the server, so there the clock is moved *and* real time
passes (`QueueTime.passes`), with a short lease. A check that something is *not* delivered
yet is made early in the interval that forbids it (a quarter of a lease); a check that it
is delivered retries claims for a while on NATS (`claim_due`), since the server's timer
decides the moment. `asyncio.timeout` is only a hang guard.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest

from tiller.errors import UsageError
from tiller.store import (
    Bus,
    DeadLetter,
    Job,
    JobLeaseLost,
    JobQueue,
    NotFound,
    QueueDepth,
    QueueOptions,
)

from .conftest import FakeClock

pytestmark = pytest.mark.filterwarnings("error")

#: The lease on the fake clock, and on the server's real one (short, so tests are quick).
FAKE_LEASE = 30.0
REAL_LEASE = 2.0


@dataclass
class QueueTime:
    """Time as the queue under test sees it."""

    clock: FakeClock
    real: bool
    lease: float

    async def passes(self, leases: float) -> None:
        """`leases` lease lengths go by."""
        self.clock.advance(leases * self.lease)
        if self.real:
            await asyncio.sleep(leases * self.lease)

    async def claim_due(self, queue: JobQueue, worker: str) -> Job | None:
        """A claim of a job that is due by now: on NATS, retried until the server has
        delivered it (or 10 s went by)."""
        job = await queue.claim(worker)
        if not self.real:
            return job
        async with asyncio.timeout(15):
            for _ in range(100):
                if job is not None:
                    return job
                job = await queue.claim(worker)
        return job

    async def dead_letters_after_claims(self, queue: JobQueue, count: int) -> list[DeadLetter]:
        """Claims (none may return a job) until `count` dead letters exist."""
        async with asyncio.timeout(15):
            while True:
                assert await queue.claim("sweeper") is None
                dead = await queue.dead_letters()
                if len(dead) >= count or not self.real:
                    return dead


@pytest.fixture
def qtime(bus: Bus, clock: FakeClock) -> QueueTime:
    real = bus.url.startswith("nats")
    return QueueTime(clock, real, REAL_LEASE if real else FAKE_LEASE)


async def open_queue(bus: Bus, qtime: QueueTime, name: str = "work", **options: int) -> JobQueue:
    return await bus.queue(name, lease=qtime.lease, **options)


# ── the basics ───────────────────────────────────────────────────────────────────────


async def test_the_queue_has_its_options(bus: Bus) -> None:
    queue = await bus.queue("work", lease=12.5, max_deliver=3)
    assert (queue.name, queue.lease, queue.max_deliver) == ("work", 12.5, 3)
    for bad in ({"lease": 0.0}, {"lease": -1.0}, {"max_deliver": 0}):
        with pytest.raises(UsageError):
            await bus.queue("work", **bad)  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        await bus.queue("no.dots")
    with pytest.raises(UsageError):
        await queue.claim("")


async def test_a_new_queue_opened_without_options_has_the_defaults(bus: Bus) -> None:
    queue = await bus.queue("work")
    assert await queue.options() == QueueOptions(30.0, 5)
    assert (queue.lease, queue.max_deliver) == (30.0, 5)


async def test_another_process_opening_the_queue_without_a_lease_keeps_it(
    bus: Bus, other_process_bus: Bus, clock: FakeClock
) -> None:
    """The lease is the queue's: a submitter opening it with no lease (`tiller submit`)
    neither resets it nor has claims of its own with another one."""
    workers = await bus.queue("work", lease=2.0)
    submitter = await other_process_bus.queue("work")
    assert await submitter.options() == QueueOptions(2.0, 5)
    assert await workers.options() == QueueOptions(2.0, 5)
    await submitter.enqueue(b"p", job_id="j")
    job = await submitter.claim("w1")
    assert job is not None and job.lease_expires_at == clock() + 2.0
    clock.advance(1.0)
    extended = await submitter.extend(job)
    assert extended.lease_expires_at == clock() + 2.0


async def test_another_process_opening_the_queue_without_a_limit_keeps_it(
    bus: Bus, other_process_bus: Bus
) -> None:
    await bus.queue("work", lease=REAL_LEASE, max_deliver=1)
    submitter = await other_process_bus.queue("work")
    assert await submitter.options() == QueueOptions(REAL_LEASE, 1)
    await submitter.enqueue(b"flaky", job_id="j")
    job = await submitter.claim("w1")
    assert job is not None and job.attempt == 1
    await submitter.nak(job, error="boom")  # its one delivery: dead-lettered, not retried
    assert [(d.id, d.reason) for d in await submitter.dead_letters()] == [("j", "boom")]


async def test_a_value_given_later_sets_it_for_every_process(
    bus: Bus, other_process_bus: Bus, clock: FakeClock
) -> None:
    first = await bus.queue("work", lease=2.0, max_deliver=3)
    await other_process_bus.queue("work", lease=4.0)  # the limit is kept
    assert await first.options() == QueueOptions(4.0, 3)
    await other_process_bus.queue("work", max_deliver=7)  # the lease is kept
    assert await first.options() == QueueOptions(4.0, 7)
    assert await (await bus.queue("work")).options() == QueueOptions(4.0, 7)
    await first.enqueue(b"p", job_id="j")
    job = await first.claim("w1")  # the first handle's claims apply the queue's lease now
    assert job is not None and job.lease_expires_at == clock() + 4.0


async def test_claim_on_empty_is_none(bus: Bus, qtime: QueueTime) -> None:
    queue = await open_queue(bus, qtime)
    assert await queue.claim("w1") is None
    assert await queue.dead_letters() == []


async def test_enqueue_claim_ack(bus: Bus, qtime: QueueTime, clock: FakeClock) -> None:
    queue = await open_queue(bus, qtime)
    job_id = await queue.enqueue(b"payload")
    job = await queue.claim("w1")
    assert job is not None
    assert (job.queue, job.id, job.payload, job.attempt, job.worker) == (
        "work",
        job_id,
        b"payload",
        1,
        "w1",
    )
    assert job.lease_expires_at == clock() + qtime.lease
    assert await queue.claim("w2") is None  # leased to w1
    await queue.ack(job)
    await qtime.passes(1.5)
    assert await queue.claim("w2") is None  # gone for good
    with pytest.raises(JobLeaseLost):
        await queue.ack(job)  # settled already


async def test_generated_ids_are_distinct(bus: Bus, qtime: QueueTime) -> None:
    queue = await open_queue(bus, qtime)
    ids = {await queue.enqueue(b"same payload") for _ in range(5)}
    assert len(ids) == 5


async def test_enqueue_with_job_id_is_idempotent(bus: Bus, qtime: QueueTime) -> None:
    queue = await open_queue(bus, qtime)
    job_id = "run 1/ü"  # ids come from clients
    assert await queue.enqueue(b"first", job_id=job_id) == job_id
    assert await queue.enqueue(b"second", job_id=job_id) == job_id
    job = await queue.claim("w1")
    assert job is not None and (job.id, job.payload) == (job_id, b"first")
    assert await queue.enqueue(b"third", job_id=job_id) == job_id  # while claimed
    assert await queue.claim("w2") is None
    await queue.term(job, "given up")
    assert await queue.enqueue(b"fourth", job_id=job_id) == job_id  # while dead
    assert await queue.claim("w2") is None
    with pytest.raises(UsageError):
        await queue.enqueue(b"", job_id="")


async def test_an_acked_id_is_accepted_as_a_new_job(bus: Bus, qtime: QueueTime) -> None:
    """The queue holds an id while its job waits, is claimed or is dead; once acked it does
    not (it is no registry of every id ever seen): the same on every backend."""
    queue = await open_queue(bus, qtime)
    await queue.enqueue(b"first", job_id="j")
    job = await queue.claim("w1")
    assert job is not None
    await queue.ack(job)
    assert await queue.enqueue(b"second", job_id="j") == "j"
    again = await queue.claim("w2")
    assert again is not None and (again.id, again.payload, again.attempt) == ("j", b"second", 1)
    await queue.ack(again)
    assert await queue.claim("w2") is None


async def test_jobs_are_claimed_in_order_each_by_one_worker(bus: Bus, qtime: QueueTime) -> None:
    queue = await open_queue(bus, qtime)
    ids = [await queue.enqueue(f"job {n}".encode(), job_id=f"j{n}") for n in range(6)]
    claimed: list[Job] = []
    for n in range(6):
        job = await queue.claim(f"w{n % 2}")
        assert job is not None
        claimed.append(job)
    assert [job.id for job in claimed] == ids
    assert [job.payload for job in claimed] == [f"job {n}".encode() for n in range(6)]
    assert await queue.claim("w9") is None


async def test_queues_are_separate(bus: Bus, qtime: QueueTime) -> None:
    left, right = await open_queue(bus, qtime, "left"), await open_queue(bus, qtime, "right")
    await left.enqueue(b"l", job_id="j")
    assert await right.claim("w") is None
    job = await left.claim("w")
    assert job is not None and job.queue == "left"
    with pytest.raises(UsageError):
        await right.ack(job)  # not this queue's
    await left.ack(job)


# ── many workers ─────────────────────────────────────────────────────────────────────


async def test_concurrent_claims_never_share_a_job(bus: Bus, qtime: QueueTime) -> None:
    queue = await open_queue(bus, qtime)
    for n in range(40):
        await queue.enqueue(str(n).encode(), job_id=f"j{n}")

    async def worker(name: str) -> list[str]:
        mine: list[str] = []
        handle = await open_queue(bus, qtime)  # each worker its own handle
        while (job := await handle.claim(name)) is not None:
            mine.append(job.id)
            await asyncio.sleep(0)
            await handle.ack(job)
        return mine

    async with asyncio.timeout(60):
        results = await asyncio.gather(*(worker(f"w{n}") for n in range(8)))
    everything = [job_id for mine in results for job_id in mine]
    assert sorted(everything) == sorted(f"j{n}" for n in range(40))


# ── leases ───────────────────────────────────────────────────────────────────────────


async def test_lapsed_lease_redelivers_with_the_next_attempt(
    bus: Bus, qtime: QueueTime, clock: FakeClock
) -> None:
    queue = await open_queue(bus, qtime)
    await queue.enqueue(b"p", job_id="j")
    first = await queue.claim("w1")
    assert first is not None and first.attempt == 1
    await qtime.passes(0.25)
    assert await queue.claim("w2") is None
    await qtime.passes(1.0)
    second = await qtime.claim_due(queue, "w2")
    assert second is not None
    assert (second.id, second.payload, second.attempt, second.worker) == ("j", b"p", 2, "w2")
    assert second.lease_expires_at == clock() + qtime.lease
    with pytest.raises(JobLeaseLost) as lost:
        await queue.ack(first)  # w1 lost it to w2
    assert isinstance(lost.value, NotFound)
    assert (lost.value.job_id, lost.value.attempt) == ("j", 1)
    with pytest.raises(JobLeaseLost):
        await queue.extend(first)
    await queue.ack(second)
    await qtime.passes(1.5)
    assert await queue.claim("w3") is None


async def test_extend_keeps_the_job(bus: Bus, qtime: QueueTime, clock: FakeClock) -> None:
    queue = await open_queue(bus, qtime)
    await queue.enqueue(b"p", job_id="j")
    job = await queue.claim("w1")
    assert job is not None
    for _ in range(3):  # 1.8 leases in all: held only because it was extended
        await qtime.passes(0.6)
        job = await queue.extend(job)
        assert job.lease_expires_at == clock() + qtime.lease
        assert await queue.claim("w2") is None
    assert job.attempt == 1
    await queue.ack(job)
    await qtime.passes(1.5)
    assert await queue.claim("w2") is None


async def test_nak_redelivers(bus: Bus, qtime: QueueTime) -> None:
    queue = await open_queue(bus, qtime)
    await queue.enqueue(b"p", job_id="j")
    job = await queue.claim("w1")
    assert job is not None
    await queue.nak(job, error="transient")
    again = await qtime.claim_due(queue, "w2")
    assert again is not None
    assert (again.id, again.payload, again.attempt, again.worker) == ("j", b"p", 2, "w2")
    with pytest.raises(JobLeaseLost):
        await queue.nak(job)  # that delivery was settled


async def test_nak_with_delay_waits(bus: Bus, qtime: QueueTime) -> None:
    queue = await open_queue(bus, qtime)
    await queue.enqueue(b"p", job_id="j")
    await queue.enqueue(b"q", job_id="k")
    job = await queue.claim("w1")
    assert job is not None and job.id == "j"
    await queue.nak(job, delay=2 * qtime.lease)
    other = await queue.claim("w2")  # the delayed job does not hold up the next one
    assert other is not None and other.id == "k"
    await queue.ack(other)
    await qtime.passes(0.25)
    assert await queue.claim("w2") is None
    await qtime.passes(2.0)
    again = await qtime.claim_due(queue, "w2")
    assert again is not None and (again.id, again.attempt) == ("j", 2)


# ── dead letters ─────────────────────────────────────────────────────────────────────


async def test_term_dead_letters_with_the_reason(
    bus: Bus, qtime: QueueTime, clock: FakeClock
) -> None:
    queue = await open_queue(bus, qtime)
    await queue.enqueue(b"poison", job_id="bad")
    await queue.enqueue(b"fine", job_id="good")
    job = await queue.claim("w1")
    assert job is not None and job.id == "bad"
    await queue.term(job, "cannot parse the payload")
    assert await queue.dead_letters() == [
        DeadLetter("work", "bad", b"poison", "cannot parse the payload", 1, clock())
    ]
    with pytest.raises(JobLeaseLost):
        await queue.ack(job)
    good = await queue.claim("w1")
    assert good is not None and good.id == "good"
    await queue.ack(good)
    await qtime.passes(1.5)
    assert await queue.claim("w1") is None


async def test_max_deliver_dead_letters_the_last_error(bus: Bus, qtime: QueueTime) -> None:
    queue = await open_queue(bus, qtime, max_deliver=3)
    await queue.enqueue(b"flaky", job_id="j")
    for attempt in (1, 2, 3):
        job = await qtime.claim_due(queue, f"w{attempt}")
        assert job is not None and job.attempt == attempt
        await queue.nak(job, error=f"boom {attempt}")
    assert await queue.claim("w4") is None
    dead = await queue.dead_letters()
    assert [(d.id, d.payload, d.reason, d.attempt) for d in dead] == [("j", b"flaky", "boom 3", 3)]


async def test_a_last_lease_that_lapses_dead_letters_the_job(bus: Bus, qtime: QueueTime) -> None:
    queue = await open_queue(bus, qtime, max_deliver=2)
    await queue.enqueue(b"slow", job_id="j")
    first = await queue.claim("w1")
    assert first is not None and first.id == "j"
    await queue.nak(first)
    second = await qtime.claim_due(queue, "w2")
    assert second is not None and (second.id, second.attempt) == ("j", 2)
    await queue.enqueue(b"next", job_id="k")
    nxt = await queue.claim("w2")
    assert nxt is not None and nxt.id == "k"
    await queue.ack(nxt)
    await qtime.passes(1.25)  # w2 died holding its last attempt
    dead = await qtime.dead_letters_after_claims(queue, 1)
    assert [(d.id, d.payload, d.attempt) for d in dead] == [("j", b"slow", 2)]
    assert "lease lapsed" in dead[0].reason
    with pytest.raises(JobLeaseLost):
        await queue.ack(second)


async def announced(
    queue: JobQueue, on_dead_letter: Callable[[DeadLetter], Awaitable[None]]
) -> None:
    """Claims (none may return a job) until one has told `on_dead_letter` of a dead
    letter it made (on NATS the server's timer decides when the lapsed job comes back);
    a claim that raises counts as telling (the hook raised)."""
    calls: list[DeadLetter] = []

    async def hook(dead: DeadLetter) -> None:
        calls.append(dead)
        await on_dead_letter(dead)

    async with asyncio.timeout(15):
        while not calls:
            try:
                assert await queue.claim("sweeper", on_dead_letter=hook) is None
            except RuntimeError:
                assert calls, "a claim failed without announcing"


async def test_a_claims_dead_letter_is_announced_before_it_is_written(
    bus: Bus, qtime: QueueTime, clock: FakeClock
) -> None:
    """No worker settled a job whose last lease lapsed, so only the claim that
    dead-letters it knows: it tells `on_dead_letter`, before the dead letter exists."""
    queue = await open_queue(bus, qtime, max_deliver=1)
    await queue.enqueue(b"slow", job_id="j")
    held = await queue.claim("w1")
    assert held is not None and held.attempt == 1
    await qtime.passes(1.25)  # w1 died holding its only attempt
    told: list[tuple[DeadLetter, list[DeadLetter]]] = []

    async def tell(dead: DeadLetter) -> None:
        told.append((dead, await queue.dead_letters()))

    await announced(queue, tell)
    reason = "attempt 1's lease lapsed without an ack (the worker died or hung)"
    dead = DeadLetter("work", "j", b"slow", reason, 1, clock())
    assert told == [(dead, [])]  # told first: not written yet
    assert await queue.dead_letters() == [dead]
    assert await queue.claim("w2", on_dead_letter=tell) is None
    assert len(told) == 1  # announced once


async def test_a_refused_announcement_leaves_the_job_for_a_later_claim(
    bus: Bus, qtime: QueueTime
) -> None:
    """If `on_dead_letter` raises (the fleet could not write the run's result), the
    claim raises it and writes no dead letter: a later claim announces the job again."""
    queue = await open_queue(bus, qtime, max_deliver=1)
    await queue.enqueue(b"slow", job_id="j")
    assert await queue.claim("w1") is not None
    await qtime.passes(1.25)
    refused: list[DeadLetter] = []

    async def refuse(dead: DeadLetter) -> None:
        refused.append(dead)
        raise RuntimeError("the results store is away")

    await announced(queue, refuse)
    assert [(d.id, d.payload, d.attempt) for d in refused] == [("j", b"slow", 1)]
    assert await queue.dead_letters() == []
    await qtime.passes(1.25)  # (on NATS the refused delivery's AckWait lapses too)
    told: list[DeadLetter] = []

    async def tell(dead: DeadLetter) -> None:
        told.append(dead)

    await announced(queue, tell)
    assert [(d.id, d.payload) for d in told] == [("j", b"slow")]
    assert "lease lapsed" in told[0].reason
    assert await queue.dead_letters() == told


async def test_a_malformed_payload_does_not_block_the_queue(bus: Bus, qtime: QueueTime) -> None:
    queue = await open_queue(bus, qtime)
    await queue.enqueue(b"\xff not json", job_id="bad")
    await queue.enqueue(b'{"run": 1}', job_id="good")
    done: list[object] = []
    async with asyncio.timeout(30):
        while (job := await queue.claim("w1")) is not None:
            try:
                done.append(json.loads(job.payload))
            except ValueError as exc:
                await queue.term(job, f"malformed payload: {exc}")
            else:
                await queue.ack(job)
    assert done == [{"run": 1}]
    (dead,) = await queue.dead_letters()
    assert (dead.id, dead.payload) == ("bad", b"\xff not json")
    assert dead.reason.startswith("malformed payload:")


# ── depth ────────────────────────────────────────────────────────────────────────────


async def depth_becomes(queue: JobQueue, expected: QueueDepth) -> QueueDepth:
    """The queue's depth once it reads `expected` (NATS settles an ack or a term
    asynchronously: the consumer's counts follow a moment later), or the last one read."""
    async with asyncio.timeout(10):
        while True:
            depth = await queue.depth()
            if depth == expected:
                return depth
            await asyncio.sleep(0.05)


async def test_depth_counts_waiting_and_in_flight(bus: Bus, qtime: QueueTime) -> None:
    queue = await open_queue(bus, qtime)
    assert await queue.depth() == QueueDepth(waiting=0, in_flight=0)
    for n in range(3):
        await queue.enqueue(b"x", job_id=f"job-{n}")
    assert await depth_becomes(queue, QueueDepth(3, 0)) == QueueDepth(waiting=3, in_flight=0)
    first = await qtime.claim_due(queue, "w1")
    assert first is not None
    assert await depth_becomes(queue, QueueDepth(2, 1)) == QueueDepth(waiting=2, in_flight=1)
    await queue.ack(first)
    second = await qtime.claim_due(queue, "w1")
    assert second is not None
    await queue.term(second, "cannot run")  # dead letters are not counted
    assert await depth_becomes(queue, QueueDepth(1, 0)) == QueueDepth(waiting=1, in_flight=0)
