"""`MemoryBus`: the whole Bus contract in one process, for tests and throwaway runs.

Nothing survives the process. Every operation is a checkpoint (it yields to the event loop
once) and then runs without awaiting, so compare-and-set is atomic by construction and
concurrent tasks interleave the way they would against a real store.
"""

from __future__ import annotations

import asyncio
import heapq
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from ..errors import UsageError
from ._bus import (
    DEFAULT_LEASE,
    DEFAULT_MAX_DELIVER,
    Bus,
    BusClosed,
    BusMessage,
    Clock,
    DeadLetter,
    Entry,
    Job,
    JobLeaseLost,
    Lease,
    QueueDepth,
    QueueOptions,
    RevisionConflict,
    acquire_lease,
    check_bucket,
    check_namespace,
    check_queue_options,
    check_subject,
    lapsed_reason,
    nakked_reason,
    release_lease,
    renew_lease,
    wall_clock,
)

__all__ = ["LocalSubscription", "MemoryBus"]


class LocalSubscription:
    """A subscription fed by its store through an unbounded in-process queue.

    The store calls `deliver`; `aclose` (by the subscriber or by the store closing) ends the
    iteration at once, dropping what was not read: pub/sub is fast delivery only, anything
    that must not be lost is also in the KV.
    """

    def __init__(self, subject: str, on_close: Callable[[LocalSubscription], None]) -> None:
        self.subject = subject
        self._on_close = on_close
        self._queue: asyncio.Queue[BusMessage | None] = asyncio.Queue()
        self._closed = False

    def deliver(self, message: BusMessage) -> None:
        if not self._closed:
            self._queue.put_nowait(message)

    def __aiter__(self) -> LocalSubscription:
        return self

    async def __anext__(self) -> BusMessage:
        if self._closed:
            raise StopAsyncIteration
        message = await self._queue.get()
        if message is None or self._closed:
            raise StopAsyncIteration
        return message

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        """Synchronous close, for the store's own `aclose`. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._on_close(self)
        self._queue.put_nowait(None)  # wake a reader blocked in __anext__


class MemoryKeyValue:
    """One bucket of a `MemoryBus`."""

    def __init__(self, bus: MemoryBus, bucket: str, records: dict[str, Entry]) -> None:
        self.bucket = bucket
        self._bus = bus
        self._records = records

    async def get(self, key: str) -> Entry | None:
        await self._bus._checkpoint()
        check_key(key)
        return self._records.get(key)

    async def put(self, key: str, value: bytes) -> int:
        await self._bus._checkpoint()
        return self._write(check_key(key), value)

    async def create(self, key: str, value: bytes) -> int:
        await self._bus._checkpoint()
        current = self._records.get(check_key(key))
        if current is not None:
            raise RevisionConflict(self.bucket, key, 0, current.revision)
        return self._write(key, value)

    async def update(self, key: str, value: bytes, *, expected: int) -> int:
        await self._bus._checkpoint()
        current = self._records.get(check_key(key))
        actual = 0 if current is None else current.revision
        if actual != expected or current is None:
            raise RevisionConflict(self.bucket, key, expected, actual)
        return self._write(key, value)

    async def delete(self, key: str, *, expected: int | None = None) -> None:
        await self._bus._checkpoint()
        current = self._records.get(check_key(key))
        if expected is not None:
            actual = 0 if current is None else current.revision
            if actual != expected or current is None:
                raise RevisionConflict(self.bucket, key, expected, actual)
        self._records.pop(key, None)

    async def keys(self, prefix: str = "") -> list[str]:
        await self._bus._checkpoint()
        return sorted(key for key in self._records if key.startswith(prefix))

    async def acquire(self, key: str, owner: str, ttl: float) -> Lease | None:
        return await acquire_lease(self, self._bus._clock, key, owner, ttl)

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        return await renew_lease(self, self._bus._clock, lease, ttl)

    async def release(self, lease: Lease) -> None:
        await release_lease(self, lease)

    def _write(self, key: str, value: bytes) -> int:
        revision = self._bus._next_revision()
        self._records[key] = Entry(key, bytes(value), revision)
        return revision


@dataclass(slots=True)
class _JobRecord:
    id: str
    payload: bytes
    seq: int
    state: str = "ready"  # "ready" | "claimed"
    attempt: int = 0
    worker: str = ""
    available_at: float = 0.0  # ready: deliverable from; claimed: the lease's expiry
    version: int = 0  # bumped by every change: older entries of the due heap are stale


@dataclass(slots=True)
class _QueueState:
    """One queue's jobs, shared by every handle on it: the records, a heap of due times
    (so a claim takes the first due job without looking at the others), the dead, and
    the queue's lease and delivery limit (the queue's, not a handle's)."""

    options: QueueOptions = field(
        default_factory=lambda: QueueOptions(DEFAULT_LEASE, DEFAULT_MAX_DELIVER)
    )
    jobs: dict[str, _JobRecord] = field(default_factory=dict)
    due: list[tuple[float, int, str, int]] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    dead_ids: set[str] = field(default_factory=set)
    seq: int = 0

    def schedule(self, record: _JobRecord) -> None:
        record.version += 1
        heapq.heappush(self.due, (record.available_at, record.seq, record.id, record.version))


class MemoryJobQueue:
    """One job queue of a `MemoryBus`: fresh jobs in enqueue order, then redeliveries in
    the order they fell due (a heap on (due time, enqueue order): a claim is O(log n))."""

    def __init__(self, bus: MemoryBus, name: str, state: _QueueState) -> None:
        self.name = name
        self._bus = bus
        self._state = state

    @property
    def lease(self) -> float:
        return self._state.options.lease

    @property
    def max_deliver(self) -> int:
        return self._state.options.max_deliver

    async def options(self) -> QueueOptions:
        await self._bus._checkpoint()
        return self._state.options

    async def enqueue(self, payload: bytes, *, job_id: str | None = None) -> str:
        await self._bus._checkpoint()
        job_id = check_job_id(job_id)
        state = self._state
        if job_id not in state.jobs and job_id not in state.dead_ids:
            state.seq += 1
            record = _JobRecord(job_id, bytes(payload), state.seq)
            state.jobs[job_id] = record
            state.schedule(record)
        return job_id

    async def claim(
        self,
        worker: str,
        *,
        on_dead_letter: Callable[[DeadLetter], Awaitable[None]] | None = None,
    ) -> Job | None:
        await self._bus._checkpoint()
        check_worker(worker)
        now = self._bus._clock()
        state = self._state
        while state.due and state.due[0][0] <= now:
            _, _, job_id, version = heapq.heappop(state.due)
            record = state.jobs.get(job_id)
            if record is None or record.version != version:
                continue  # settled or rescheduled since this entry was pushed
            if record.state == "claimed" and record.attempt >= self.max_deliver:
                await self._bury_lapsed(record, on_dead_letter)
                continue
            record.state, record.worker = "claimed", worker
            record.attempt += 1
            record.available_at = now + self.lease
            state.schedule(record)
            return Job(
                self.name, record.id, record.payload, record.attempt, worker, now + self.lease
            )
        return None

    async def extend(self, job: Job) -> Job:
        await self._bus._checkpoint()
        record = self._held(job)
        record.available_at = self._bus._clock() + self.lease
        self._state.schedule(record)
        return replace(job, lease_expires_at=record.available_at)

    async def ack(self, job: Job) -> None:
        await self._bus._checkpoint()
        self._held(job)
        del self._state.jobs[job.id]

    async def nak(self, job: Job, *, delay: float = 0.0, error: str | None = None) -> None:
        await self._bus._checkpoint()
        record = self._held(job)
        if job.attempt >= self.max_deliver:
            self._bury(record, nakked_reason(job.attempt, error))
            return
        record.state, record.worker = "ready", ""
        record.available_at = self._bus._clock() + max(delay, 0.0)
        self._state.schedule(record)

    async def term(self, job: Job, reason: str) -> None:
        await self._bus._checkpoint()
        self._bury(self._held(job), reason)

    async def dead_letters(self) -> list[DeadLetter]:
        await self._bus._checkpoint()
        return list(self._state.dead)

    async def depth(self) -> QueueDepth:
        await self._bus._checkpoint()
        now = self._bus._clock()
        in_flight = sum(
            1 for r in self._state.jobs.values() if r.state == "claimed" and r.available_at > now
        )
        return QueueDepth(len(self._state.jobs) - in_flight, in_flight)

    async def _bury_lapsed(
        self,
        record: _JobRecord,
        on_dead_letter: Callable[[DeadLetter], Awaitable[None]] | None,
    ) -> None:
        """Dead-letter a job whose last lease lapsed, announced first (`JobQueue.claim`):
        if the announcement raises, the job is due again for the next claim."""
        reason = lapsed_reason(record.attempt)
        if on_dead_letter is not None:
            version = record.version
            try:
                await on_dead_letter(self._dead_letter(record, reason))
            except BaseException:
                self._state.schedule(record)
                raise
            if self._state.jobs.get(record.id) is not record or record.version != version:
                return  # another claim took care of it meanwhile
        self._bury(record, reason)

    def _dead_letter(self, record: _JobRecord, reason: str) -> DeadLetter:
        return DeadLetter(
            self.name, record.id, record.payload, reason, record.attempt, self._bus._clock()
        )

    def _bury(self, record: _JobRecord, reason: str) -> None:
        state = self._state
        del state.jobs[record.id]
        state.dead_ids.add(record.id)
        state.dead.append(self._dead_letter(record, reason))

    def _held(self, job: Job) -> _JobRecord:
        """The record, if `job` is still its current delivery and its lease has not lapsed."""
        check_own(self.name, job)
        record = self._state.jobs.get(job.id)
        if (
            record is None
            or record.state != "claimed"
            or record.attempt != job.attempt
            or record.available_at <= self._bus._clock()
        ):
            raise lease_lost(self.name, job)
        return record


class MemoryBus:
    """The Bus in one process's memory. Revisions are one counter for the whole store."""

    def __init__(
        self, *, clock: Clock = wall_clock, namespace: str = "", url: str = "memory://"
    ) -> None:
        self.url = url
        self._clock = clock
        self.clock = clock  # public: callers compare lease expiries on the same clock
        self._prefix = f"{check_namespace(namespace)}:" if namespace else ""
        self._revision = 0
        self._buckets: dict[str, dict[str, Entry]] = {}
        self._queues: dict[str, _QueueState] = {}
        self._subscribers: dict[str, set[LocalSubscription]] = {}
        self._closed = False

    async def kv(self, bucket: str) -> MemoryKeyValue:
        await self._checkpoint()
        records = self._buckets.setdefault(self._prefix + check_bucket(bucket), {})
        return MemoryKeyValue(self, bucket, records)

    async def publish(self, subject: str, data: bytes) -> None:
        await self._checkpoint()
        message = BusMessage(check_subject(subject), bytes(data))
        for subscription in list(self._subscribers.get(self._prefix + subject, ())):
            subscription.deliver(message)

    async def subscribe(self, subject: str) -> LocalSubscription:
        await self._checkpoint()
        name = self._prefix + check_subject(subject)
        subscription = LocalSubscription(subject, self._unsubscribe)
        self._subscribers.setdefault(name, set()).add(subscription)
        return subscription

    async def queue(
        self, name: str, *, lease: float | None = None, max_deliver: int | None = None
    ) -> MemoryJobQueue:
        await self._checkpoint()
        check_queue_options(lease, max_deliver)
        state = self._queues.setdefault(self._prefix + check_bucket(name), _QueueState())
        kept = state.options
        state.options = QueueOptions(
            kept.lease if lease is None else float(lease),
            kept.max_deliver if max_deliver is None else max_deliver,
        )
        return MemoryJobQueue(self, name, state)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        for subscriptions in list(self._subscribers.values()):
            for subscription in list(subscriptions):
                subscription.close()

    async def __aenter__(self) -> MemoryBus:
        self._check_open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"MemoryBus({self.url!r}{', closed' if self._closed else ''})"

    # ── internals shared with the bucket and queue objects ──

    async def _checkpoint(self) -> None:
        self._check_open()
        await asyncio.sleep(0)
        self._check_open()

    def _check_open(self) -> None:
        if self._closed:
            raise BusClosed(f"{self.url} is closed")

    def _next_revision(self) -> int:
        self._revision += 1
        return self._revision

    def _unsubscribe(self, subscription: LocalSubscription) -> None:
        name = self._prefix + subscription.subject
        subscriptions = self._subscribers.get(name)
        if subscriptions is not None:
            subscriptions.discard(subscription)
            if not subscriptions:
                del self._subscribers[name]


# The argument checks below are shared by the embedded backends, so both refuse the same
# misuse with the same message.


def check_key(key: str) -> str:
    if not key:
        raise UsageError("a key must not be empty")
    return key


def check_job_id(job_id: str | None) -> str:
    if job_id is None:
        return uuid.uuid4().hex
    if not job_id:
        raise UsageError("a job id must not be empty (pass None to get a generated one)")
    return job_id


def check_worker(worker: str) -> None:
    if not worker:
        raise UsageError("a worker name must not be empty")


def check_own(queue: str, job: Job) -> None:
    if job.queue != queue:
        raise UsageError(f"queue {queue}: job {job.id!r} was claimed from queue {job.queue}")


def lease_lost(queue: str, job: Job) -> JobLeaseLost:
    return JobLeaseLost(
        queue,
        job.id,
        job.attempt,
        f"is no longer held by {job.worker!r}: its lease lapsed (it may be another "
        "worker's now) or it was settled",
    )


def _is_bus(bus: MemoryBus) -> Bus:
    """Type-level proof that MemoryBus satisfies the Bus protocol (checked by mypy)."""
    return bus
