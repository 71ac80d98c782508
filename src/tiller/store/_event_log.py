"""The run's event log: its AG-UI stream in the store, appended in batches (DESIGN §7).

`tiller runs show`, reattaching a client and offline inspection read a run from here, so
the log must hold the stream exactly as clients saw it. Writing one KV record per event
would cost a store round trip per event (a 1,000-event run: 1,000 SQLite transactions or
NATS publishes); the writer batches instead:

- `EventLogWriter` is a *synchronous* listener (`EventSink.listen`): per event it only
  encodes it (AG-UI JSON, the same bytes an SSE client gets) and appends the bytes to a
  list, so emitting never waits on the store;
- a full batch (`batch_size` events, 256 by default), and the run's terminal event, hand
  the batch to a write task on the running loop; the batches are written in order, one
  KV record each, `"<run_id>/<batch_no:08d>"` in the `tiller-run-events` bucket:
  `{"schema_version": 1, "written_by": <tiller version>, "start": <index of its first
  event>, "events": [...]}`;
- `await writer.wait()` flushes what is left and waits for the writes; `Agent.run_in` does
  it after the stream ends, so a durable run's log is complete when `run_in` returns.

A failed write is logged and counted (`writer.failed`), never raised into the run: the
log serves observers, and an observer never breaks the run. A durable run *fences* its
log (`writer.fence`, set by the loop to the durability port's `check_lease`): each batch
is checked before it is written, and once the run was taken over by another process
(`LeaseLost`) this writer writes no batch of it again (they count as failed), so a stale
worker's stream never lands in the log after the new holder's. Batches are created with
`KeyValue.create` (never overwritten), so a resumed run — which keeps its run id —
appends after the batches already stored, and the log reads as one run: the first
stream, then the resumed one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any

import orjson

from .._schema_ledger import LEDGER, newer_problem, tiller_version, written_by_of
from ..errors import NewerSchemaError
from ..events import Event, encode_json
from ._bus import Bus, KeyValue, RevisionConflict
from ._checkpoints import LeaseLost

__all__ = ["EVENT_LOG_BUCKET", "EventLog", "EventLogFromNewerTiller", "EventLogWriter"]

_logger = logging.getLogger(__name__)

#: The event log bucket's default name (DESIGN §7).
EVENT_LOG_BUCKET = "tiller-run-events"
SCHEMA_VERSION = LEDGER["event_log_batch"].current
DEFAULT_BATCH_SIZE = 256
_TERMINAL = frozenset({"RUN_FINISHED", "RUN_ERROR"})
_DIGITS = 8
#: How often a batch is retried under a new number when another writer took its key.
_CREATE_ATTEMPTS = 5

#: Write tasks in flight, held strongly: the loop keeps only weak references to tasks, and
#: a writer dropped by a run that was cancelled must still finish its writes.
_IN_FLIGHT: set[asyncio.Task[None]] = set()


@dataclass(frozen=True, slots=True)
class _Batch:
    key: str
    start: int
    events: list[dict[str, Any]]


class EventLog:
    """A run's event log in a KV bucket of `bus`: `writer(run_id)` appends, `read` reads."""

    def __init__(self, bus: Bus, bucket: str = EVENT_LOG_BUCKET) -> None:
        self.bus = bus
        self.bucket = bucket
        self._kv: KeyValue | None = None

    async def kv(self) -> KeyValue:
        """The bucket (opened once)."""
        if self._kv is None:
            self._kv = await self.bus.kv(self.bucket)
        return self._kv

    def writer(self, run_id: str, *, batch_size: int = DEFAULT_BATCH_SIZE) -> EventLogWriter:
        """A listener appending `run_id`'s events to this log."""
        return EventLogWriter(self, run_id, batch_size=batch_size)

    async def batch_keys(self, run_id: str) -> list[str]:
        """The run's batch keys, in order (keys of runs whose id merely starts with
        `run_id/` are left out: a batch key ends in exactly eight digits)."""
        kv = await self.kv()
        prefix = f"{run_id}/"
        return [
            key
            for key in await kv.keys(prefix)
            if len(key) == len(prefix) + _DIGITS and key[len(prefix) :].isdigit()
        ]

    async def read(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        """The run's events as AG-UI JSON objects, from index `after` (0: all of them).

        Indices count events from the log's first; a batch lost to a failed write leaves
        its events out without shifting the others' indices.
        """
        events: list[dict[str, Any]] = []
        for batch in await self.batches(run_id):
            if batch.start + len(batch.events) > after:
                events.extend(batch.events[max(0, after - batch.start) :])
        return events

    def _batch(self, key: str, value: bytes) -> tuple[int, list[dict[str, Any]]]:
        record: dict[str, Any] = orjson.loads(value)
        version = record.get("schema_version")
        if version != SCHEMA_VERSION:
            problem = (
                f"{self.bucket}/{key} has schema version {version!r}; "
                f"this tiller reads {SCHEMA_VERSION}"
            )
            if isinstance(version, int) and version > SCHEMA_VERSION:
                writer = written_by_of(record)
                raise EventLogFromNewerTiller(f"{problem}: {newer_problem(writer)}", writer)
            raise ValueError(problem)
        return record["start"], record["events"]

    async def batches(self, run_id: str, *, skip: Collection[str] = ()) -> list[_Batch]:
        """The run's batches not in `skip`: key, index of the first event, the events."""
        kv = await self.kv()
        found: list[_Batch] = []
        for key in await self.batch_keys(run_id):
            if key in skip:
                continue
            entry = await kv.get(key)
            if entry is not None:
                start, batch = self._batch(key, entry.value)
                found.append(_Batch(key, start, batch))
        return found


class EventLogFromNewerTiller(NewerSchemaError, ValueError):
    """A batch of the event log written by a newer tiller (`written_by`, None when it does
    not say): upgrade tiller to read the log. A `ValueError` too, as a malformed batch is."""

    def __init__(self, message: str, written_by: str | None) -> None:
        super().__init__(message)
        self.written_by = written_by


class EventLogWriter:
    """Appends one run's events to an `EventLog`; pass it as a listener of the run's sink.

    Calling it never blocks and never raises: it encodes the event and buffers the bytes;
    full batches are written by a task on the running loop (see the module docstring).
    """

    def __init__(self, log: EventLog, run_id: str, *, batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        if batch_size < 1:
            raise ValueError("an event log batch holds at least one event")
        self.log = log
        self.run_id = run_id
        self.batch_size = batch_size
        #: Events handed to the writer so far (the next event's index in this stream).
        self.count = 0
        #: Batches whose write failed (logged as well).
        self.failed = 0
        #: Batches written.
        self.written = 0
        #: Awaited before each batch is written: raises `LeaseLost` once the run was taken
        #: over by another process (a durable run's loop sets it; None: not fenced).
        self.fence: Callable[[], Awaitable[None]] | None = None
        #: Set when the fence refused a batch: nothing more is written.
        self.lost: LeaseLost | None = None
        self._buffer: list[bytes] = []
        self._start = 0  # the index of the buffer's first event
        self._queue: list[tuple[int, list[bytes]]] = []
        self._task: asyncio.Task[None] | None = None
        self._next_batch: int | None = None  # found from the store on the first write
        self._offset: int | None = None  # events already logged by earlier runs of the id

    def __call__(self, event: Event) -> None:
        try:
            self._buffer.append(encode_json(event))
        except Exception:  # an observer never breaks the run
            _logger.exception("event %s of run %s not logged", event.type, self.run_id)
            return
        self.count += 1
        if len(self._buffer) >= self.batch_size or event.type in _TERMINAL:
            self.flush()

    def flush(self) -> None:
        """Hand the buffered events to the write task now (synchronous, never waits)."""
        if not self._buffer:
            return
        self._queue.append((self._start, self._buffer))
        self._start += len(self._buffer)
        self._buffer = []
        if self._task is None or self._task.done():
            try:
                event_loop = asyncio.get_running_loop()
            except RuntimeError:
                _logger.error("event log of run %s: no running event loop to write", self.run_id)
                self.failed += len(self._queue)
                self._queue.clear()
                return
            task = event_loop.create_task(self._drain(), name=f"tiller-event-log-{self.run_id}")
            _IN_FLIGHT.add(task)
            task.add_done_callback(_IN_FLIGHT.discard)
            self._task = task

    @property
    def pending(self) -> int:
        """Events buffered or queued but not yet written (or failed)."""
        return len(self._buffer) + sum(len(batch) for _, batch in self._queue)

    async def wait(self) -> None:
        """Flush what is buffered and wait until every batch is written (or has failed:
        failures are logged and counted in `failed`, not raised)."""
        self.flush()
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def _drain(self) -> None:
        # One task writes the batches in order; `flush` starts a new one only when this
        # one is done, so at most one write of a run is in flight.
        while self._queue:
            start, batch = self._queue.pop(0)
            try:
                await self._write(start, batch)
                self.written += 1
            except LeaseLost as exc:  # taken over: expected, and said once per batch
                self.failed += 1
                _logger.warning(
                    "event log of run %s: batch of %d events (from %d) not written: %s",
                    self.run_id,
                    len(batch),
                    start,
                    exc,
                )
            except Exception:
                self.failed += 1
                _logger.exception(
                    "event log of run %s: batch of %d events (from %d) not written to %r",
                    self.run_id,
                    len(batch),
                    start,
                    self.log.bucket,
                )

    async def _write(self, start: int, batch: list[bytes]) -> None:
        if self.lost is not None:
            raise self.lost
        if self.fence is not None:
            try:
                await self.fence()
            except LeaseLost as exc:
                self.lost = exc
                raise
        kv = await self.log.kv()
        for _ in range(_CREATE_ATTEMPTS):
            if self._next_batch is None:
                self._next_batch, logged = await self._tail()
                if self._offset is None:
                    self._offset = logged  # fixed by the first write: indices stay put
            number = self._next_batch
            # Built around the encoded events, so nothing is decoded and encoded again.
            value = b'{"schema_version":%d,"written_by":%s,"start":%d,"events":[%s]}' % (
                SCHEMA_VERSION,
                orjson.dumps(tiller_version()),
                (self._offset or 0) + start,
                b",".join(batch),
            )
            try:
                await kv.create(f"{self.run_id}/{number:0{_DIGITS}d}", value)
            except RevisionConflict:
                self._next_batch = None  # another writer appended: find the end again
                continue
            self._next_batch = number + 1
            return
        raise RevisionConflict(self.log.bucket, self.run_id, 0, None)

    async def _tail(self) -> tuple[int, int]:
        """(next batch number, events logged so far) for the run id: a resumed run keeps
        its run id, and appends to the log of its first part."""
        keys = await self.log.batch_keys(self.run_id)
        if not keys:
            return 0, 0
        kv = await self.log.kv()
        last = keys[-1]
        number = int(last.rsplit("/", 1)[1]) + 1
        entry = await kv.get(last)
        if entry is None:
            return number, 0
        record = orjson.loads(entry.value)
        return number, int(record["start"]) + len(record["events"])
