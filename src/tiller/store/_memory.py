"""`MemoryBus`: the whole Bus contract in one process, for tests and throwaway runs.

Nothing survives the process. Every operation is a checkpoint (it yields to the event loop
once) and then runs without awaiting, so compare-and-set is atomic by construction and
concurrent tasks interleave the way they would against a real store.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import UsageError
from ._bus import (
    Bus,
    BusClosed,
    BusMessage,
    Clock,
    Entry,
    Job,
    Lease,
    NotFound,
    RevisionConflict,
    acquire_lease,
    check_bucket,
    check_namespace,
    check_subject,
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
    state: str  # "ready" | "claimed" | "term"
    attempt: int = 0
    worker: str = ""
    available_at: float = 0.0  # ready: deliverable from; claimed: the lease's expiry
    reason: str = ""


class MemoryJobQueue:
    """One job queue of a `MemoryBus`; jobs are claimed in enqueue order."""

    def __init__(self, bus: MemoryBus, name: str, jobs: dict[str, _JobRecord]) -> None:
        self.name = name
        self._bus = bus
        self._jobs = jobs

    async def enqueue(self, payload: bytes, *, job_id: str | None = None) -> str:
        await self._bus._checkpoint()
        job_id = check_job_id(job_id)
        if job_id not in self._jobs:
            self._jobs[job_id] = _JobRecord(job_id, bytes(payload), "ready")
        return job_id

    async def claim(self, worker: str, lease: float) -> Job | None:
        await self._bus._checkpoint()
        check_claim(worker, lease)
        now = self._bus._clock()
        for record in self._jobs.values():
            if record.state != "term" and record.available_at <= now:
                record.state = "claimed"
                record.attempt += 1
                record.worker = worker
                record.available_at = now + lease
                return Job(
                    self.name, record.id, record.payload, record.attempt, worker, now + lease
                )
        return None

    async def ack(self, job: Job) -> None:
        await self._bus._checkpoint()
        self._held(job)
        del self._jobs[job.id]

    async def nak(self, job: Job, *, delay: float = 0.0) -> None:
        await self._bus._checkpoint()
        record = self._held(job)
        record.state = "ready"
        record.available_at = self._bus._clock() + max(delay, 0.0)

    async def term(self, job: Job, reason: str) -> None:
        await self._bus._checkpoint()
        record = self._held(job)
        record.state = "term"
        record.reason = reason

    def _held(self, job: Job) -> _JobRecord:
        """The record, if `job` is still its current delivery (nobody re-claimed it)."""
        record = self._jobs.get(job.id)
        if record is None or record.state != "claimed" or record.attempt != job.attempt:
            raise NotFound(f"job {job.id!r} of queue {self.name!r} is no longer held by this lease")
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
        self._queues: dict[str, dict[str, _JobRecord]] = {}
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

    async def queue(self, name: str) -> MemoryJobQueue:
        await self._checkpoint()
        jobs = self._queues.setdefault(self._prefix + check_bucket(name), {})
        return MemoryJobQueue(self, name, jobs)

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


def check_claim(worker: str, lease: float) -> None:
    if not worker:
        raise UsageError("a worker name must not be empty")
    if not lease > 0:
        raise UsageError(f"a claim's lease must be positive seconds, not {lease!r}")


def _is_bus(bus: MemoryBus) -> Bus:
    """Type-level proof that MemoryBus satisfies the Bus protocol (checked by mypy)."""
    return bus
