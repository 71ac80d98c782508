"""Workers' heartbeats in the `tiller-fleet-workers` bucket: each worker rewrites its
record every few seconds with an expiry (a TTL lease, on the store's clock); `tiller fleet
status` lists the records that have not expired and removes those that have (a worker
killed with SIGKILL writes no goodbye)."""

from __future__ import annotations

import contextlib
from typing import ClassVar

from ..store import (
    Bus,
    KeyValue,
    MalformedRecord,
    Record,
    RevisionConflict,
    decode_record,
    encode_record,
)

__all__ = ["WORKERS_BUCKET", "WorkerInfo", "WorkerRegistry"]

#: The workers bucket's default name.
WORKERS_BUCKET = "tiller-fleet-workers"


class WorkerInfo(Record):
    """One worker, as its last heartbeat left it."""

    ledger_kind: ClassVar[str] = "fleet_worker"

    name: str
    host: str
    pid: int
    queue: str
    concurrency: int
    in_flight: int
    started_at: float
    #: When it beat (the store's clock); 0.0 from a worker that did not say.
    beat_at: float = 0.0
    #: Its queue's job lease (seconds); None from a worker that did not say.
    lease: float | None = None
    expires_at: float


class WorkerRegistry:
    """The workers bucket of `bus`."""

    def __init__(self, bus: Bus, bucket: str = WORKERS_BUCKET) -> None:
        self.bus = bus
        self.bucket = bucket
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self.bus.kv(self.bucket)
        return self._kv

    async def beat(self, info: WorkerInfo) -> None:
        await (await self._bucket()).put(info.name, encode_record(info))

    async def leave(self, name: str) -> None:
        await (await self._bucket()).delete(name)

    async def lease_of(self, queue: str) -> float | None:
        """The job lease the live workers of `queue` said they use (the longest, if they
        differ), or None with none live. (The queue's own lease is `JobQueue.options()`:
        a submitter opens the queue without one to keep it.)"""
        leases = [w.lease for w in await self.live() if w.queue == queue and w.lease]
        return max(leases) if leases else None

    async def live(self) -> list[WorkerInfo]:
        """The workers whose heartbeat has not expired, by name; expired records are
        removed (compare-and-set: a worker that beat meanwhile keeps its record)."""
        kv = await self._bucket()
        now = self.bus.clock()
        found: list[WorkerInfo] = []
        for name in await kv.keys():
            entry = await kv.get(name)
            if entry is None:
                continue
            try:
                info = decode_record(WorkerInfo, self.bucket, name, entry.value)
            except MalformedRecord:
                continue
            if info.expires_at > now:
                found.append(info)
            else:
                # A beat or another cleanup that came first stands.
                with contextlib.suppress(RevisionConflict):
                    await kv.delete(name, expected=entry.revision)
        return found
