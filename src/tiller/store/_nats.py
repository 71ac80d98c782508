"""The NATS JetStream backend of the Bus (`nats://host:port`).

How each port maps onto JetStream, and why:

- **KV**: one JetStream KV bucket per tiller bucket (`<namespace>-<bucket>`, history 1,
  created on first use), so `nats kv` can browse it. Records are written with a plain
  JetStream publish carrying `Nats-Expected-Last-Subject-Sequence` (what nats-py's
  `kv.update(last=)` does) and read with a stream "last message by subject" get, because a
  record over the payload limit is a *manifest*: an empty message whose `Tiller-Object`
  header names an object in the bucket's JetStream object store, written first under a
  unique name. The manifest is the KV record, so compare-and-set, revisions and deletes
  keep working; whoever replaces or deletes a manifest (knowing it did, because every write
  is compare-and-set against the record it read) removes the old object. Revisions are
  stream sequence numbers: increasing per bucket, not per key.
- **Leases**: the shared compare-and-set helpers of `_bus`, expiry from the injected
  clock, so they behave exactly as on the other backends.
- **Pub/sub**: core NATS subjects, prefixed with the namespace.
- **Job queue**: JetStream's own work queue. Each queue is a WorkQueue-retention stream
  (`TQ_<namespace>-<name>`, one subject per job id, `$TQ.<name>.<id>`, holding at most one
  message and refusing a second: that is how an id the queue holds is refused) with one
  durable pull consumer (`tiller`) over all of them, so claims come in enqueue order: a
  claim is a `fetch` of one message (waiting `claim_wait` seconds, then None), so it costs
  the same at any depth; the lease is the consumer's `AckWait`, `extend` is `in_progress`,
  a nak with a delay is JetStream's, an ack removes the message from the stream, and
  `Job.attempt` is the message's `num_delivered`. `max_deliver` is enforced by the claim,
  not the server (the consumer's `MaxDeliver` is unlimited; the limit is kept in its
  description, so every handle reads the same one): a delivery past the limit is
  dead-lettered (the last attempt's lease lapsed) instead of handed out, and if that
  write fails the message stays unsettled and is delivered again, so it is never lost.
  A nak on the last attempt and a `term` dead-letter at once. Dead letters go to a second
  stream (`TQD_<namespace>-<name>`, created on the first; one subject per job id, one
  message each, so writing a job's dead letter twice records it once), as the job's
  payload with a `Tiller-Dead-Letter` header (id, reason, attempt, time), and the message
  is then termed. A message without a tiller job header (published by something else) is
  dead-lettered as not a job, so it never blocks the queue; so is a job whose large
  payload's object is missing. A payload over the server's limit goes through the queue's
  object store, as a KV record does. `NatsJobQueue` says what enqueueing a known id does
  and what fencing an ack can and cannot do.

Connection trouble: the client reconnects on its own, forever, once connected. A core
publish made while it is reconnecting is buffered and sent after the reconnect; a
JetStream call (every KV and queue operation) waits for its reply up to the request timeout
and raises `StoreUnavailable` if the server is not back by then. Nothing is retried above
the client, because a retried compare-and-set could have succeeded the first time.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import enum
import functools
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, replace
from typing import cast

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as CoreSubscription
from nats.js import JetStreamContext
from nats.js import api as js_api

from .._schema_ledger import tiller_version
from ..errors import UsageError
from ._bus import (
    DEFAULT_LEASE,
    DEFAULT_MAX_DELIVER,
    BusClosed,
    BusMessage,
    Clock,
    DeadLetter,
    Entry,
    Job,
    JobLeaseLost,
    Lease,
    NotFound,
    QueueDepth,
    QueueOptions,
    RevisionConflict,
    StoreError,
    StoreUnavailable,
    acquire_lease,
    check_bucket,
    check_namespace,
    check_queue_options,
    check_subject,
    decode_key,
    encode_key,
    lapsed_reason,
    nakked_reason,
    release_lease,
    renew_lease,
    wall_clock,
)
from ._memory import check_job_id, check_own, check_worker

__all__ = ["NatsBus"]

_OBJECT_HEADER = "Tiller-Object"
_SIZE_HEADER = "Tiller-Size"
_KV_OPERATION = "KV-Operation"
_EXPECTED_LAST = "Nats-Expected-Last-Subject-Sequence"
_WRONG_LAST_SEQUENCE = (10071, 10164)
# A publish refused because its subject already holds its one message (a queue's job or
# dead letter with that id is there).
_SUBJECT_FULL = 10077
# Room left under `max_payload` for the subject and headers of a record's message.
_HEADROOM = 8 * 1024
# What precedes a namespaced name in the streams this backend creates.
_STREAM_KIND = re.compile(r"^(?:KV_|OBJ_TQ_|OBJ_|TQD_|TQ_)")
#: A job message's id (encode_key'd); a dead letter's record.
_JOB_HEADER = "Tiller-Job"
_DEAD_HEADER = "Tiller-Dead-Letter"
_NOT_A_JOB = f"not a tiller job: the message has no {_JOB_HEADER} header"
_NO_PAYLOAD = (
    "the job's payload is missing: its object ({name}) is gone from the queue's object "
    "store; enqueue the job again"
)
#: The durable pull consumer every worker of a queue fetches from.
_CONSUMER = "tiller"
#: Where the consumer keeps the queue's delivery limit (its own `MaxDeliver` is unlimited).
_LIMIT_NOTE = "tiller job queue: max_deliver={}"
_LIMIT_PATTERN = re.compile(r"^tiller job queue: max_deliver=([1-9][0-9]*)$")
#: How long a handle trusts the lease and limit it last read from the consumer (another
#: process's `queue()` call may change them): seconds, read once per interval at most.
_LIMITS_REFRESH = 0.5
# Reads of a manifest whose object vanished (overwritten meanwhile) start over this often.
_READ_ATTEMPTS = 8
#: How long a scan waits for its next message before asking the consumer whether any is
#: still pending (a record overwritten mid-scan leaves the promised message undelivered).
_SCAN_WAIT = 0.5

_UNAVAILABLE: tuple[type[BaseException], ...] = (
    nats.errors.TimeoutError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.ConnectionDrainingError,
    nats.errors.NoServersError,
    nats.errors.NoRespondersError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
    OSError,
)


class _State(enum.Enum):
    OPENED = "opened"
    CLOSED = "closed"


class _WrongLast(Exception):
    """Internal: a publish lost its compare-and-set (the caller decides what that means)."""


class _SubjectFull(Exception):
    """Internal: a publish was refused because its subject holds its one message."""


@contextlib.contextmanager
def _translate(what: str) -> Iterator[None]:
    """Turn nats-py errors into the most specific store error, chained `from` the original.

    Callers above the store never see nats types (STYLE: translate at borders)."""
    try:
        yield
    except (StoreError, UsageError, _WrongLast, _SubjectFull):
        raise
    except nats.js.errors.APIError as exc:
        if exc.err_code in _WRONG_LAST_SEQUENCE:
            raise _WrongLast(str(exc)) from exc
        if exc.err_code == _SUBJECT_FULL:
            raise _SubjectFull(str(exc)) from exc
        if isinstance(exc, nats.js.errors.ServiceUnavailableError):
            raise StoreUnavailable(f"{what}: {exc}") from exc
        if isinstance(exc, nats.js.errors.NotFoundError):
            raise NotFound(f"{what}: {exc}") from exc
        raise StoreError(f"{what}: {exc}") from exc
    except _UNAVAILABLE as exc:
        raise StoreUnavailable(f"{what}: NATS is unavailable ({exc!r})") from exc
    except nats.errors.Error as exc:
        raise StoreError(f"{what}: {exc!r}") from exc


@dataclass(slots=True, frozen=True)
class _Raw:
    """The last message of a record's subject: a value, a manifest or a delete marker."""

    revision: int
    data: bytes
    object: str | None
    deleted: bool


class _Records:
    """Compare-and-set records on one KV-shaped stream, with the large-value path.

    Tokens are already-encoded subject suffixes. Shared by the KV buckets and the job
    queues (which keep job state and payloads as records of their own stream).
    """

    def __init__(self, bus: NatsBus, label: str, stream: str, prefix: str, objects: str) -> None:
        self._bus = bus
        self.label = label
        self._stream = stream
        self._prefix = prefix
        self._objects = objects
        self._object_stream = f"OBJ_{objects}"
        self._object_store_ready = False

    # ── reading ──

    async def read(self, token: str) -> _Raw | None:
        """The record's last message (a delete marker included), or None if never written."""
        js = self._bus._js_context()
        with _translate(f"{self.label}: read"):
            try:
                msg = await js.get_msg(self._stream, subject=self._prefix + token)
            except nats.js.errors.NotFoundError:
                return None
        headers = msg.headers or {}
        return _Raw(
            revision=int(msg.seq or 0),
            data=msg.data or b"",
            object=headers.get(_OBJECT_HEADER),
            deleted=headers.get(_KV_OPERATION) in ("DEL", "PURGE"),
        )

    async def get(self, token: str) -> tuple[int, bytes] | None:
        """(revision, value) of a live record, following a manifest to its object."""
        for _ in range(_READ_ATTEMPTS):
            raw = await self.read(token)
            if raw is None or raw.deleted:
                return None
            if raw.object is None:
                return raw.revision, raw.data
            data = await self._load_object(raw.object)
            if data is not None:
                return raw.revision, data
            # The object went between our two reads: the record was overwritten; read again.
        raise StoreError(f"{self.label}: a record kept changing while it was read")

    async def tokens(self, token_filter: str) -> list[str]:
        """The tokens of the live records matching `token_filter` (NATS wildcards).

        No listing of a stream that is being written (a fleet's checkpoints) is one
        instant's; this one lists every record live both when it began and when it
        ended, and perhaps some written meanwhile. It takes the stream's subjects as they
        are now (one request; a deleted record's marker is a subject too) and reads an
        ordered consumer of each subject's last message, headers only, to tell live from
        deleted, up to the stream's last message as of the start: past it the consumer
        delivers every write made meanwhile, which on a busy bucket never ends (the
        1,000-run chaos batch found recoveries hung in it). A subject it did not show by
        then (rewritten while it ran, so its earlier message was gone) is read alone."""
        js = self._bus._js_context()
        with _translate(f"{self.label}: list"):
            info = await js.stream_info(self._stream, subjects_filter=self._prefix + token_filter)
            subjects = set((info.state.subjects or {}).keys())
            shown = await self._last_per_subject(js, token_filter, int(info.state.last_seq or 0))
            tokens = [subject for subject, live in shown.items() if live]
            for subject in subjects - shown.keys():
                raw = await self.read(subject[len(self._prefix) :])
                if raw is not None and not raw.deleted:
                    tokens.append(subject)
        return [subject[len(self._prefix) :] for subject in tokens]

    async def subjects(self) -> list[str]:
        """The tokens of every subject the stream holds a message of now (live records
        and deleted ones' markers alike): one request, however many there are."""
        js = self._bus._js_context()
        with _translate(f"{self.label}: list"):
            info = await js.stream_info(self._stream, subjects_filter=self._prefix + ">")
        return [subject[len(self._prefix) :] for subject in info.state.subjects or {}]

    async def _last_per_subject(
        self, js: JetStreamContext, token_filter: str, last: int
    ) -> dict[str, bool]:
        """Subject → live, from an ordered consumer of each matching subject's last
        message, read until it passes stream sequence `last` (see `tokens`)."""
        shown: dict[str, bool] = {}
        sub = await js.subscribe(
            self._prefix + token_filter,
            stream=self._stream,
            ordered_consumer=True,
            deliver_policy=js_api.DeliverPolicy.LAST_PER_SUBJECT,
            headers_only=True,
            # A backstop only: the consumer is deleted below as soon as the scan ends.
            inactive_threshold=5.0,
        )
        consumer: str | None = None
        try:
            info = await sub.consumer_info()
            consumer = info.name
            delivered = info.delivered.consumer_seq if info.delivered else 0
            if (info.num_pending or 0) + (delivered or 0) > 0:
                while True:
                    try:
                        msg = await sub.next_msg(timeout=_SCAN_WAIT)
                    except nats.errors.TimeoutError:
                        if not (await sub.consumer_info()).num_pending:
                            break
                        continue
                    headers = msg.headers or {}
                    shown[msg.subject] = headers.get(_KV_OPERATION) not in ("DEL", "PURGE")
                    if msg.metadata.num_pending == 0 or msg.metadata.sequence.stream >= last:
                        break
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
                if consumer:
                    await js.delete_consumer(self._stream, consumer)
        return shown

    # ── writing ──

    async def publish(self, token: str, body: bytes | str | None, last: int | None) -> int:
        """Write a value (bytes), a manifest (str: the object's name) or a delete marker
        (None), compare-and-set against the subject's last sequence `last` (0: never
        written; None: unconditionally). `_WrongLast` if that lost."""
        headers: dict[str, str] = {}
        if last is not None:
            headers[_EXPECTED_LAST] = str(last)
        if body is None:
            headers[_KV_OPERATION] = "DEL"
            payload = b""
        elif isinstance(body, str):
            headers[_OBJECT_HEADER] = body
            payload = b""
        else:
            payload = body
        js = self._bus._js_context()
        with _translate(f"{self.label}: write"):
            ack = await js.publish(self._prefix + token, payload, headers=headers or None)
        return int(ack.seq)

    async def stage(self, token: str, value: bytes) -> bytes | str:
        """What to publish for `value`: itself, or (over the payload limit) the name of an
        object holding it, written now under a name no other write uses."""
        if len(value) <= self._bus._inline_limit:
            return value
        await self._ensure_object_store()
        name = f"{token}/{uuid.uuid4().hex}"
        js = self._bus._js_context()
        with _translate(f"{self.label}: write a large record"):
            store = await js.object_store(self._objects)
            await store.put(name, value)
        return name

    async def discard(self, staged: bytes | str | None) -> None:
        """Remove the object a replaced, deleted or never-committed record pointed at."""
        if not isinstance(staged, str):
            return
        js = self._bus._js_context()
        meta = f"$O.{self._objects}.M.{base64.urlsafe_b64encode(staged.encode()).decode()}"
        with _translate(f"{self.label}: remove a large record's object"):
            try:
                msg = await js.get_msg(self._object_stream, subject=meta)
            except nats.js.errors.NotFoundError:
                return
            nuid = json.loads(msg.data or b"{}").get("nuid")
            if nuid:
                await js.purge_stream(self._object_stream, subject=f"$O.{self._objects}.C.{nuid}")
            await js.purge_stream(self._object_stream, subject=meta)

    async def _load_object(self, name: str) -> bytes | None:
        js = self._bus._js_context()
        with _translate(f"{self.label}: read a large record"):
            try:
                store = await js.object_store(self._objects)
                result = await store.get(name)
            except nats.js.errors.NotFoundError:
                return None
        return cast(bytes, result.data)

    async def _ensure_object_store(self) -> None:
        if self._object_store_ready:
            return
        js = self._bus._js_context()
        with _translate(f"{self.label}: create the object store"):
            try:
                await js.object_store(self._objects)
            except nats.js.errors.NotFoundError:
                try:
                    await js.create_object_store(self._objects)
                except nats.js.errors.BadRequestError:
                    await js.object_store(self._objects)  # another process's, just made
        self._object_store_ready = True


async def _safe_discard(records: _Records, staged: bytes | str | None) -> None:
    """Best-effort object cleanup: never masks a write's own outcome or error."""
    if isinstance(staged, str):
        with contextlib.suppress(StoreError, UsageError):
            await records.discard(staged)


class NatsKeyValue:
    """One tiller bucket as a JetStream KV bucket (see the module docstring)."""

    def __init__(self, bus: NatsBus, bucket: str, records: _Records) -> None:
        self.bucket = bucket
        self._bus = bus
        self._records = records

    async def get(self, key: str) -> Entry | None:
        found = await self._records.get(encode_key(key))
        return None if found is None else Entry(key, found[1], found[0])

    # A staged object is removed when its write certainly did not happen (a lost
    # compare-and-set, a failed read before publishing). When the outcome is unknown (a
    # timeout or a cancellation while publishing) it stays: the record may point at it,
    # and a leaked object is better than a manifest pointing at nothing. Removing the
    # replaced record's object is best-effort for the same reason: the write succeeded.

    async def put(self, key: str, value: bytes) -> int:
        token = encode_key(key)
        staged = await self._records.stage(token, value)
        while True:
            try:
                current = await self._records.read(token)
            except BaseException:
                await _safe_discard(self._records, staged)
                raise
            try:
                revision = await self._records.publish(
                    token, staged, current.revision if current else 0
                )
            except _WrongLast:
                continue  # another writer got in between: read what it wrote, go again
            if current is not None:
                await _safe_discard(self._records, current.object)
            return revision

    async def create(self, key: str, value: bytes) -> int:
        token = encode_key(key)
        staged = await self._records.stage(token, value)
        last = 0
        while True:
            try:
                return await self._records.publish(token, staged, last)
            except _WrongLast:
                pass
            try:
                current = await self._records.read(token)
            except BaseException:
                await _safe_discard(self._records, staged)
                raise
            if current is not None and not current.deleted:
                await _safe_discard(self._records, staged)
                raise RevisionConflict(self.bucket, key, 0, current.revision)
            # A delete marker stands where the record was: create on top of it.
            last = current.revision if current else 0

    async def update(self, key: str, value: bytes, *, expected: int) -> int:
        token = encode_key(key)
        current = await self._records.read(token)
        # `expected=0` never matches: "the key must not exist" is `create`.
        if current is None or current.deleted or current.revision != expected:
            raise RevisionConflict(self.bucket, key, expected, self._actual(current))
        staged = await self._records.stage(token, value)
        try:
            revision = await self._records.publish(token, staged, expected)
        except _WrongLast:
            await _safe_discard(self._records, staged)
            now = await self._records.read(token)
            raise RevisionConflict(self.bucket, key, expected, self._actual(now)) from None
        await _safe_discard(self._records, current.object)
        return revision

    async def delete(self, key: str, *, expected: int | None = None) -> None:
        token = encode_key(key)
        while True:
            current = await self._records.read(token)
            if current is None or current.deleted:
                if expected is not None:
                    raise RevisionConflict(self.bucket, key, expected, 0)
                return
            if expected is not None and current.revision != expected:
                raise RevisionConflict(self.bucket, key, expected, current.revision)
            try:
                await self._records.publish(token, None, current.revision)
            except _WrongLast:
                continue  # re-read: a plain delete retries, an expected one now conflicts
            await _safe_discard(self._records, current.object)
            return

    async def keys(self, prefix: str = "") -> list[str]:
        # Encoding does not preserve prefixes at dot edges, so filter after decoding.
        if not prefix:
            keys = (decode_key(token) for token in await self._records.tokens(">"))
            return sorted(keys)
        # One run's keys (its event log's batches, its call records) among every run's:
        # the stream's subject names in one request, and only the matching records read
        # (to leave out deleted ones), rather than a consumer delivering every record of
        # the bucket (what made a fleet's run start cost more the more runs the store held).
        matching = sorted(
            (key, token)
            for token in await self._records.subjects()
            if (key := decode_key(token)).startswith(prefix)
        )
        live = []
        for key, token in matching:
            raw = await self._records.read(token)
            if raw is not None and not raw.deleted:
                live.append(key)
        return live

    async def acquire(self, key: str, owner: str, ttl: float) -> Lease | None:
        return await acquire_lease(self, self._bus._clock, key, owner, ttl)

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        return await renew_lease(self, self._bus._clock, lease, ttl)

    async def release(self, lease: Lease) -> None:
        await release_lease(self, lease)

    @staticmethod
    def _actual(raw: _Raw | None) -> int:
        return 0 if raw is None or raw.deleted else raw.revision


class NatsSubscription:
    """Core NATS messages on one subject, from the moment `subscribe` returned."""

    def __init__(self, bus: NatsBus, subject: str, sub: CoreSubscription) -> None:
        self._bus = bus
        self._subject = subject
        self._sub = sub
        self._closed = False

    def __aiter__(self) -> AsyncIterator[BusMessage]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[BusMessage]:
        if self._closed:
            return
        with _translate(f"subscription {self._subject}"):
            async for msg in self._sub.messages:
                yield BusMessage(self._subject, msg.data)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Unsubscribing ends the iterator; after the store closed there is nothing to undo.
        with contextlib.suppress(nats.errors.Error):
            await self._sub.unsubscribe()


@dataclass(slots=True, frozen=True)
class _QueueNames:
    """A queue's streams and subjects, namespaced."""

    stream: str
    subject: str
    dead_stream: str
    dead_subject: str


@dataclass(slots=True, frozen=True)
class _Settings:
    """A store's timing options (see `NatsBus.connect`)."""

    request_timeout: float
    claim_wait: float


@dataclass(slots=True)
class _Delivery:
    """What a claimed `Job` carries on NATS: the JetStream message (its reply subject is the
    delivery's ack handle) and this process's view of when its lease started."""

    msg: Msg
    # time.monotonic() no later than the server (re)started the delivery's AckWait: the
    # lease ends `AckWait` after it, whatever the AckWait is by the time we settle.
    started: float
    object: str | None  # the payload's object, for a payload over the server's limit
    settled: bool = False


class NatsJobQueue:
    """A job queue as JetStream's own work queue (see the module docstring).

    **Known ids.** Each job is the one message of its id's subject, and the stream refuses
    a second message there (`discard_new_per_subject`), so enqueueing an id that is waiting
    or claimed does nothing, however long after; an id that was dead-lettered is refused
    because its dead letter is found first (one lookup by subject). An acked job's message
    is gone, so its id is accepted as a new job, as on the other backends. One race is
    left: an enqueue of an id made while that very job is being dead-lettered (between the
    enqueue's lookup of the dead letter and its publish) can add it again.

    **Leases.** The lease is the durable consumer's `AckWait`, on the server's clock, and
    the last `queue()` call that gives one sets it for every process (a call with None
    reads it and writes nothing): each handle reads it (and the delivery limit) back from
    the consumer, at most every `_LIMITS_REFRESH` seconds, and judges its deliveries by it.
    JetStream takes an ack from a delivery whose AckWait already lapsed (even after the job
    went to another worker) and cannot tell us it did, so this process fences itself: it
    keeps when each delivery's lease started on its monotonic clock (restarted by
    `extend`) and raises `JobLeaseLost` instead of settling a delivery past it. That
    closes the gap except for an ack racing the server's timer in the last moment of the
    lease; the fencing of issue 16 (each durable write of a run carries its lease epoch)
    is what stops a worker that lost that race from writing.
    """

    def __init__(
        self,
        bus: NatsBus,
        name: str,
        names: _QueueNames,
        records: _Records,
        sub: JetStreamContext.PullSubscription,
        *,
        options: QueueOptions,
    ) -> None:
        self.name = name
        self.lease = options.lease
        self.max_deliver = options.max_deliver
        self._bus = bus
        self._stream = names.stream
        self._subject = names.subject
        self._dead_stream = names.dead_stream
        self._dead_subject = names.dead_subject
        self._dead_ready = False
        self._records = records  # only its large-payload path (object store) is used
        self._sub = sub
        # When `lease` and `max_deliver` were last read from the consumer (monotonic).
        self._limits_read = time.monotonic()
        # One pull request in flight per queue handle: a fetch that timed out can still
        # receive its message late, and the next fetch must be the one to take it.
        self._fetching = asyncio.Lock()
        # The last moment this handle's pending queue was seen empty before a fetch: a
        # message found in it later was delivered after then, so its AckWait started no
        # earlier (a late answer to a timed-out fetch can wait there for any length of time).
        self._pending_since = time.monotonic()

    async def enqueue(self, payload: bytes, *, job_id: str | None = None) -> str:
        job_id = check_job_id(job_id)
        token = encode_key(job_id)
        if await self._dead_letter_of(token) is not None:
            return job_id  # dead-lettered: the queue still holds the id
        staged = await self._records.stage(f"p.{token}", bytes(payload))
        headers = {_JOB_HEADER: token}
        if isinstance(staged, str):
            headers[_OBJECT_HEADER] = staged
        js = self._bus._js_context()
        try:
            with _translate(f"queue {self.name}: enqueue"):
                await js.publish(
                    f"{self._subject}.{token}",
                    staged if isinstance(staged, bytes) else b"",
                    headers=headers,
                )
        except _SubjectFull:
            await _safe_discard(self._records, staged)  # waiting or claimed already
        return job_id

    async def _dead_letter_of(self, token: str) -> js_api.RawStreamMsg | None:
        """The dead letter of the job id `token`, or None (also before any was written)."""
        js = self._bus._js_context()
        with _translate(f"queue {self.name}: look up a dead letter"):
            try:
                return await js.get_msg(self._dead_stream, subject=f"{self._dead_subject}.{token}")
            except nats.js.errors.NotFoundError:
                return None

    def limits_read(self, options: QueueOptions) -> None:
        """This process just read or set the consumer's lease and limit: they are known
        as of now."""
        self.lease, self.max_deliver = options.lease, options.max_deliver
        self._limits_read = time.monotonic()

    async def options(self) -> QueueOptions:
        js = self._bus._js_context()
        with _translate(f"queue {self.name}: read its lease"):
            info = await js.consumer_info(self._stream, _CONSUMER)
        options = _options_of(info.config, QueueOptions(self.lease, self.max_deliver))
        self.limits_read(options)
        return options

    async def _limits(self) -> tuple[float, int]:
        """The lease and delivery limit as the consumer has them now (another process's
        `queue()` call may have changed them), read at most every `_LIMITS_REFRESH` s."""
        if time.monotonic() - self._limits_read >= _LIMITS_REFRESH:
            await self.options()
        return self.lease, self.max_deliver

    async def claim(
        self,
        worker: str,
        *,
        on_dead_letter: Callable[[DeadLetter], Awaitable[None]] | None = None,
    ) -> Job | None:
        check_worker(worker)
        self._bus._js_context()
        async with self._fetching:
            while True:
                lease, max_deliver = await self._limits()
                if self._pending_deliveries() == 0:
                    self._pending_since = time.monotonic()
                delivered_after = self._pending_since
                with _translate(f"queue {self.name}: claim"):
                    try:
                        msgs = await self._sub.fetch(1, timeout=self._bus._claim_wait)
                    except nats.errors.TimeoutError:
                        if not self._bus._nc.is_connected:
                            # No answer because no server: not an empty queue.
                            raise StoreUnavailable(
                                f"queue {self.name}: claim: NATS is unavailable"
                            ) from None
                        return None
                job = await self._take(
                    msgs[0], worker, delivered_after, lease, max_deliver, on_dead_letter
                )
                if job is not None:
                    return job

    def _pending_deliveries(self) -> int:
        """How many messages wait in the pull subscription's pending queue, after dropping
        its status messages (the late 408 of an expired pull request: the next fetch would
        drop them too, so they say nothing about when a delivery was made)."""
        pending = self._sub._sub._pending_queue  # nats-py keeps late answers here
        kept: list[Msg] = []
        while not pending.empty():
            msg = pending.get_nowait()
            # (A status message has no body: nats-py's pending byte count does not move.)
            if not JetStreamContext.is_status_msg(msg):
                kept.append(msg)
        for msg in kept:
            pending.put_nowait(msg)
        return len(kept)

    async def _take(  # noqa: PLR0917 (one delivery, and what the claim judges it by)
        self,
        msg: Msg,
        worker: str,
        delivered_after: float,
        lease: float,
        max_deliver: int,
        on_dead_letter: Callable[[DeadLetter], Awaitable[None]] | None,
    ) -> Job | None:
        """The delivery as a Job, or None after dead-lettering it (not a tiller job, its
        payload's object is missing, or a delivery past `max_deliver`: its last attempt's
        lease lapsed; each announced to `on_dead_letter` first), or after leaving it
        unsettled because its lease may already have lapsed (it waited in the pending
        queue: JetStream delivers it again, or already has, to someone else). A dead
        letter that cannot be written, or whose announcement raises, raises, leaving the
        message unsettled: the server delivers it again (its `MaxDeliver` is unlimited)."""
        attempt = int(msg.metadata.num_delivered or 1)
        headers = msg.headers or {}
        token = headers.get(_JOB_HEADER)
        bury = functools.partial(self._announce_and_bury, msg, on_dead_letter)
        if not token:
            seq = msg.metadata.sequence.stream
            await bury(f"seq-{seq}", msg.data or b"", None, _NOT_A_JOB, attempt)
            return None
        job_id, name = decode_key(token), headers.get(_OBJECT_HEADER)
        payload = msg.data or b""
        if attempt > max_deliver:
            await bury(job_id, payload, name, lapsed_reason(attempt - 1), attempt - 1)
            return None
        if name is not None:
            loaded = await self._records._load_object(name)
            if loaded is None:
                await bury(job_id, b"", None, _NO_PAYLOAD.format(name=name), attempt)
                return None
            payload = loaded
        if time.monotonic() >= delivered_after + lease:
            return None  # (after the checks above: a dead letter is buried even if stale)
        return Job(
            self.name,
            job_id,
            payload,
            attempt,
            worker,
            self._bus._clock() + lease,
            handle=_Delivery(msg, delivered_after, name),
        )

    async def extend(self, job: Job) -> Job:
        delivery, lease, _ = await self._held(job)
        sent = time.monotonic()  # the server restarts the AckWait no earlier than this
        with _translate(f"queue {self.name}: extend"):
            # `Msg.in_progress` is a core publish, buffered while the client reconnects:
            # as a request, the server's answer says it restarted the AckWait (else the
            # fence would move ahead of a lease the server lets lapse).
            await self._bus._nc.request(
                delivery.msg.reply, b"+WPI", timeout=self._bus._request_timeout
            )
        delivery.started = sent
        return replace(job, lease_expires_at=self._bus._clock() + lease)

    async def ack(self, job: Job) -> None:
        delivery, _, _ = await self._held(job)
        with _translate(f"queue {self.name}: ack"):
            await delivery.msg.ack_sync(timeout=self._bus._request_timeout)
        delivery.settled = True
        await _safe_discard(self._records, delivery.object)

    async def nak(self, job: Job, *, delay: float = 0.0, error: str | None = None) -> None:
        delivery, _, max_deliver = await self._held(job)
        if job.attempt >= max_deliver:
            reason = nakked_reason(job.attempt, error)
            await self._bury_job(job, delivery, reason)
        else:
            with _translate(f"queue {self.name}: nak"):
                await delivery.msg.nak(delay=delay if delay > 0 else None)
        delivery.settled = True

    async def term(self, job: Job, reason: str) -> None:
        delivery, _, _ = await self._held(job)
        await self._bury_job(job, delivery, reason)
        delivery.settled = True

    async def _bury_job(self, job: Job, delivery: _Delivery, reason: str) -> None:
        await self._bury(
            delivery.msg,
            job_id=job.id,
            payload=job.payload,
            name=delivery.object,
            reason=reason,
            attempt=job.attempt,
        )

    async def dead_letters(self) -> list[DeadLetter]:
        js = self._bus._js_context()
        found: list[DeadLetter] = []
        with _translate(f"queue {self.name}: dead letters"):
            try:
                info = await js.stream_info(self._dead_stream)
            except nats.js.errors.NotFoundError:
                return []
            first, last = info.state.first_seq, info.state.last_seq
            for seq in range(first, last + 1) if info.state.messages else ():
                try:
                    msg = await js.get_msg(self._dead_stream, seq)
                except nats.js.errors.NotFoundError:
                    continue
                headers = msg.headers or {}
                record = json.loads(headers.get(_DEAD_HEADER) or "{}")
                payload = msg.data or b""
                if headers.get(_OBJECT_HEADER):
                    payload = await self._records._load_object(headers[_OBJECT_HEADER]) or b""
                found.append(
                    DeadLetter(
                        self.name,
                        str(record.get("id", "")),
                        payload,
                        str(record.get("reason", "")),
                        int(record.get("attempt", 0)),
                        float(record.get("at", 0.0)),
                    )
                )
        return found

    async def depth(self) -> QueueDepth:
        self._bus._js_context()
        with _translate(f"queue {self.name}: depth"):
            info = await self._sub.consumer_info()
        # Not yet delivered, plus delivered and unacked (in flight, or nakked with a delay:
        # JetStream counts those as pending acks too, so a nakked job reads as in flight).
        return QueueDepth(int(info.num_pending or 0), int(info.num_ack_pending or 0))

    async def _announce_and_bury(  # noqa: PLR0917 (a dead letter's fields, and its message)
        self,
        msg: Msg,
        on_dead_letter: Callable[[DeadLetter], Awaitable[None]] | None,
        job_id: str,
        payload: bytes,
        name: str | None,
        reason: str,
        attempt: int,
    ) -> None:
        """A claim's dead letter: told to `on_dead_letter` (with the job's payload, from
        its object if it is a large one), then buried (`JobQueue.claim`)."""
        if on_dead_letter is not None:
            told = payload
            if name is not None:
                told = await self._records._load_object(name) or b""
            await on_dead_letter(
                DeadLetter(self.name, job_id, told, reason, attempt, self._bus._clock())
            )
        await self._bury(
            msg, job_id=job_id, payload=payload, name=name, reason=reason, attempt=attempt
        )

    async def _bury(
        self,
        msg: Msg,
        *,
        job_id: str,
        payload: bytes,
        name: str | None,
        reason: str,
        attempt: int,
    ) -> None:
        """Record the dead letter, then `term` the message. A crash in between leaves the
        message to be delivered again and dead-lettered again: the dead letter is the one
        message of its job id's subject, and the stream refuses a second one, so it is
        recorded once (the first reason stands)."""
        js = self._bus._js_context()
        record = {
            "schema_version": 1,
            "written_by": tiller_version(),
            "id": job_id,
            "reason": reason,
            "attempt": attempt,
            "at": self._bus._clock(),
        }
        headers = {_DEAD_HEADER: json.dumps(record, separators=(",", ":"))}
        if name is not None:
            headers[_OBJECT_HEADER] = name  # the large payload's object stays, for inspection
        body = b"" if name is not None else payload
        what = f"queue {self.name}: dead-letter {job_id!r}"
        if not self._dead_ready:
            with _translate(what):
                await self._bus._per_id_stream(
                    js, self.name, self._dead_stream, self._dead_subject, work_queue=False
                )
            self._dead_ready = True
        subject = f"{self._dead_subject}.{encode_key(job_id)}"
        with contextlib.suppress(_SubjectFull), _translate(what):  # full: recorded already
            await js.publish(subject, body, headers=headers)
        with _translate(what):
            await msg.term()

    async def _unsubscribe(self) -> None:
        with contextlib.suppress(nats.errors.Error, OSError):
            await self._sub.unsubscribe()

    async def _held(self, job: Job) -> tuple[_Delivery, float, int]:
        """The delivery, if this process still holds it, with the lease and limit now."""
        self._bus._js_context()
        delivery = job.handle
        check_own(self.name, job)
        if not isinstance(delivery, _Delivery):
            raise UsageError(f"queue {self.name}: job {job.id!r} was not claimed from it")
        if delivery.settled:
            raise JobLeaseLost(self.name, job.id, job.attempt, "was already settled")
        lease, max_deliver = await self._limits()
        if time.monotonic() >= delivery.started + lease:
            raise JobLeaseLost(
                self.name,
                job.id,
                job.attempt,
                f"is no longer held by {job.worker!r}: its lease (the consumer's AckWait of "
                f"{lease:g} s) lapsed, so JetStream delivers it again",
            )
        return delivery, lease, max_deliver


_DEFAULT_OPTIONS = QueueOptions(DEFAULT_LEASE, DEFAULT_MAX_DELIVER)


def _options_of(
    config: js_api.ConsumerConfig, otherwise: QueueOptions = _DEFAULT_OPTIONS
) -> QueueOptions:
    """The lease (`AckWait`) and delivery limit (kept in the description) of a queue's
    consumer; `otherwise`'s for what it does not say."""
    found = _LIMIT_PATTERN.match(config.description or "")
    return QueueOptions(
        float(config.ack_wait) if config.ack_wait else otherwise.lease,
        int(found.group(1)) if found is not None else otherwise.max_deliver,
    )


class NatsBus:
    """The Bus on a NATS server with JetStream. Open with `await NatsBus.connect(url)`."""

    def __init__(
        self,
        url: str,
        nc: Client,
        js: JetStreamContext,
        *,
        clock: Clock,
        namespace: str,
        link: tuple[asyncio.Event, asyncio.Event],
        settings: _Settings,
    ) -> None:
        self.url = url
        self._nc = nc
        self._js = js
        self._clock = clock
        self.clock = clock  # public: callers compare lease expiries on the same clock
        self._namespace = namespace
        self._state = _State.OPENED
        self._request_timeout = settings.request_timeout
        self._claim_wait = settings.claim_wait
        # Set and cleared by the client's callbacks: the state of the link, for tests
        # and diagnostics (operations never wait on them; they fail or succeed on their own).
        self._connected, self._disconnected = link
        max_payload = int(nc.max_payload or 1024 * 1024)
        self._max_payload = max_payload
        self._inline_limit = max(max_payload - _HEADROOM, 1)
        self._buckets: dict[str, NatsKeyValue] = {}
        self._queues: dict[str, NatsJobQueue] = {}
        self._lock = asyncio.Lock()

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        clock: Clock = wall_clock,
        namespace: str = "",
        request_timeout: float = 5.0,
        claim_wait: float = 0.2,
    ) -> NatsBus:
        """Connect, failing fast (`StoreUnavailable`) if no server answers now; once
        connected, the client reconnects without limit (see the module docstring).

        `request_timeout` bounds each JetStream call: how long a KV or queue operation
        waits out a disconnect before raising `StoreUnavailable`. `claim_wait` is how long
        a claim waits for a job before answering None."""
        check_namespace(namespace)
        if not claim_wait > 0:
            raise UsageError(f"claim_wait must be positive seconds, not {claim_wait!r}")

        async def quiet(_: Exception) -> None:
            """Connection errors surface on the calls that hit them; don't log each retry."""

        connected, disconnected = asyncio.Event(), asyncio.Event()

        async def on_disconnect() -> None:
            connected.clear()
            disconnected.set()

        async def on_reconnect() -> None:
            disconnected.clear()
            connected.set()

        with _translate(f"connect to {url}"):
            nc = await nats.connect(
                url,
                connect_timeout=2,
                reconnect_time_wait=0.5,
                max_reconnect_attempts=2,
                error_cb=quiet,
                disconnected_cb=on_disconnect,
                reconnected_cb=on_reconnect,
            )
        connected.set()
        # Attempts were bounded for the first connect only; a connected store rides out
        # server restarts. The option is read on every reconnect attempt.
        nc.options["max_reconnect_attempts"] = -1
        return cls(
            url,
            nc,
            nc.jetstream(timeout=request_timeout),
            clock=clock,
            namespace=namespace,
            link=(connected, disconnected),
            settings=_Settings(request_timeout, claim_wait),
        )

    @property
    def max_payload(self) -> int:
        """The server's payload limit; larger records go through the object store."""
        return self._max_payload

    def _name(self, name: str) -> str:
        check_bucket(name)
        return f"{self._namespace}-{name}" if self._namespace else name

    def _subject(self, subject: str) -> str:
        check_subject(subject)
        return f"{self._namespace}.{subject}" if self._namespace else subject

    def _js_context(self) -> JetStreamContext:
        if self._state is _State.CLOSED:
            raise BusClosed(f"the store {self.url} was closed")
        return self._js

    async def kv(self, bucket: str) -> NatsKeyValue:
        name = self._name(bucket)
        js = self._js_context()
        async with self._lock:
            if bucket in self._buckets:
                return self._buckets[bucket]
            with _translate(f"bucket {bucket}"):
                try:
                    await js.key_value(name)
                except nats.js.errors.BucketNotFoundError:
                    try:
                        await js.create_key_value(bucket=name, history=1)
                    except nats.js.errors.BadRequestError:
                        # Another process created it between our look and our create
                        # (the server says its subjects overlap): it is there, use it.
                        await js.key_value(name)
            records = _Records(self, bucket, f"KV_{name}", f"$KV.{name}.", name)
            self._buckets[bucket] = NatsKeyValue(self, bucket, records)
            return self._buckets[bucket]

    async def queue(
        self, name: str, *, lease: float | None = None, max_deliver: int | None = None
    ) -> NatsJobQueue:
        check_queue_options(lease, max_deliver)
        full = self._name(name)
        stream_name, subject = f"TQ_{full}", f"$TQ.{full}"
        js = self._js_context()
        async with self._lock:
            cached = self._queues.get(name)
            with _translate(f"queue {name}"):
                if cached is None:
                    await self._per_id_stream(js, name, stream_name, subject, work_queue=True)
                options = await self._consumer(js, stream_name, subject, lease, max_deliver)
                if cached is not None:
                    cached.limits_read(options)
                    return cached
                sub = await js.pull_subscribe_bind(durable=_CONSUMER, stream=stream_name)
            records = _Records(self, f"queue {name}", stream_name, f"{subject}.", stream_name)
            names = _QueueNames(stream_name, subject, f"TQD_{full}", f"$TQD.{full}")
            queue = NatsJobQueue(self, name, names, records, sub, options=options)
            self._queues[name] = queue
            return queue

    async def _consumer(
        self,
        js: JetStreamContext,
        stream_name: str,
        subject: str,
        lease: float | None,
        max_deliver: int | None,
    ) -> QueueOptions:
        """The queue's one durable consumer, created if missing, with the lease and limit
        given (None: the consumer's own, or the default for a new one); written only when
        they change, so opening a queue with None changes nothing for its workers."""
        kept: QueueOptions | None = None
        if lease is None or max_deliver is None:
            try:
                kept = _options_of((await js.consumer_info(stream_name, _CONSUMER)).config)
            except nats.js.errors.NotFoundError:
                kept = None
        base = kept or _DEFAULT_OPTIONS
        wanted = QueueOptions(
            base.lease if lease is None else float(lease),
            base.max_deliver if max_deliver is None else max_deliver,
        )
        if wanted == kept:
            return kept
        # The server delivers without limit; the claim keeps `max_deliver` (module docstring).
        await js.add_consumer(
            stream_name,
            js_api.ConsumerConfig(
                durable_name=_CONSUMER,
                description=_LIMIT_NOTE.format(wanted.max_deliver),
                ack_policy=js_api.AckPolicy.EXPLICIT,
                ack_wait=wanted.lease,
                max_deliver=-1,
                max_ack_pending=-1,
                filter_subject=f"{subject}.>",
            ),
        )
        return wanted

    async def _per_id_stream(
        self, js: JetStreamContext, name: str, stream_name: str, subject: str, *, work_queue: bool
    ) -> None:
        """Create (or check) a queue's stream of one message per job id (`subject.<id>`),
        refusing a second: the work queue (WorkQueue retention) or its dead letters.

        Two connections may open the queue at once (a submitter and a worker): the one
        whose create loses finds the stream made meanwhile (the server answers "subjects
        overlap" or "name already in use") and checks it as if it had been there."""
        try:
            info = await js.stream_info(stream_name)
        except nats.js.errors.NotFoundError:
            try:
                await js.add_stream(
                    js_api.StreamConfig(
                        name=stream_name,
                        subjects=[f"{subject}.>"],
                        retention=(
                            js_api.RetentionPolicy.WORK_QUEUE
                            if work_queue
                            else js_api.RetentionPolicy.LIMITS
                        ),
                        max_msgs_per_subject=1,
                        discard=js_api.DiscardPolicy.NEW,
                        discard_new_per_subject=True,
                    )
                )
                return
            except nats.js.errors.BadRequestError:
                info = await js.stream_info(stream_name)  # made meanwhile: check it below
        config = info.config
        if work_queue and config.retention != js_api.RetentionPolicy.WORK_QUEUE:
            raise StoreError(
                f"queue {name}: stream {stream_name} is not a work queue (an older tiller "
                "kept queues as job records); delete it (`nats stream rm`) to start afresh"
            )
        if config.subjects != [f"{subject}.>"] or not config.discard_new_per_subject:
            raise StoreError(
                f"queue {name}: stream {stream_name} was made by an older tiller (one subject "
                "for every job, so a job id is not refused after the duplicate window): let "
                "its workers drain it, then delete it (`nats stream rm`) to start afresh"
            )

    async def publish(self, subject: str, data: bytes) -> None:
        nats_subject = self._subject(subject)
        self._js_context()
        with _translate(f"publish {subject}"):
            await self._nc.publish(nats_subject, data)

    async def subscribe(self, subject: str) -> NatsSubscription:
        nats_subject = self._subject(subject)
        self._js_context()
        with _translate(f"subscribe {subject}"):
            sub = await self._nc.subscribe(nats_subject)
            # The server registers the interest before we return: "from that moment".
            await self._nc.flush(timeout=max(1, round(self._request_timeout)))
        return NatsSubscription(self, subject, sub)

    async def delete_namespace(self) -> list[str]:
        """Delete every stream of this store's namespace (buckets, object stores, queues):
        for tests and teardown of a throwaway namespace on a shared server. Returns the
        stream names removed. Refuses on the empty namespace, which would mean everything."""
        if not self._namespace:
            raise UsageError("delete_namespace needs a namespace; this store has none")
        js = self._js_context()
        removed: list[str] = []
        with _translate("delete the namespace"):
            for stream in await self._stream_names(js):
                if _STREAM_KIND.sub("", stream).startswith(f"{self._namespace}-"):
                    # Gone already is deleted: the listing comes in pages by offset, so a
                    # stream deleted meanwhile elsewhere can shift another into a page twice.
                    with contextlib.suppress(nats.js.errors.NotFoundError):
                        await js.delete_stream(stream)
                        removed.append(stream)
        self._buckets.clear()
        for queue in self._queues.values():
            await queue._unsubscribe()
        self._queues.clear()
        return removed

    @staticmethod
    async def _stream_names(js: JetStreamContext) -> list[str]:
        """Every stream of the account: the listing comes in pages."""
        names: list[str] = []
        while page := await js.streams_info(offset=len(names)):
            names.extend(info.config.name or "" for info in page)
        return names

    async def aclose(self) -> None:
        """Flush what was published, close the connection; idempotent."""
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        # A pull subscription would hold the drain up for its whole timeout (a pull request
        # may be lingering on the server): nothing is owed to it, so it goes first.
        for queue in self._queues.values():
            await queue._unsubscribe()
        with contextlib.suppress(nats.errors.Error, OSError):
            await self._nc.drain()
        if not self._nc.is_closed:
            with contextlib.suppress(nats.errors.Error, OSError):
                await self._nc.close()

    async def __aenter__(self) -> NatsBus:
        self._js_context()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
