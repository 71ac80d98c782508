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
- **Job queue**: a KV-shaped stream per queue (`TQ_<namespace>-<name>`, one record per job
  state and one per payload) rather than a work-queue stream. A work-queue consumer has one
  `ack_wait` for all claims (the Bus gives each claim its own lease), times leases on the
  server's clock (the contract moves an injected clock), deduplicates `Nats-Msg-Id` only
  inside a window, and cannot say that an ack came from a worker that lost its lease. Job
  state records compared-and-set on the injected clock give the same semantics as SQLite,
  at the price of a scan of the queue's live jobs per claim.

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
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, cast

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as CoreSubscription
from nats.js import JetStreamContext
from nats.js import api as js_api

from ..errors import UsageError
from ._bus import (
    BusClosed,
    BusMessage,
    Clock,
    Entry,
    Job,
    Lease,
    NotFound,
    RevisionConflict,
    StoreError,
    StoreUnavailable,
    acquire_lease,
    check_bucket,
    check_namespace,
    check_subject,
    decode_key,
    encode_key,
    release_lease,
    renew_lease,
    wall_clock,
)
from ._memory import check_claim, check_job_id

__all__ = ["NatsBus"]

_OBJECT_HEADER = "Tiller-Object"
_SIZE_HEADER = "Tiller-Size"
_KV_OPERATION = "KV-Operation"
_EXPECTED_LAST = "Nats-Expected-Last-Subject-Sequence"
_WRONG_LAST_SEQUENCE = (10071, 10164)
# Room left under `max_payload` for the subject and headers of a record's message.
_HEADROOM = 8 * 1024
# What precedes a namespaced name in the streams this backend creates.
_STREAM_KIND = re.compile(r"^(?:KV_|OBJ_TQ_|OBJ_|TQ_)")
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


@contextlib.contextmanager
def _translate(what: str) -> Iterator[None]:
    """Turn nats-py errors into the most specific store error, chained `from` the original.

    Callers above the store never see nats types (STYLE: translate at borders)."""
    try:
        yield
    except (StoreError, UsageError, _WrongLast):
        raise
    except nats.js.errors.APIError as exc:
        if exc.err_code in _WRONG_LAST_SEQUENCE:
            raise _WrongLast(str(exc)) from exc
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

    async def scan(self, token_filter: str, *, headers_only: bool) -> list[tuple[str, _Raw]]:
        """Every live record whose token matches `token_filter` (NATS wildcards), with its
        last message: an ordered consumer delivering the last message per subject."""
        js = self._bus._js_context()
        found: list[tuple[str, _Raw]] = []
        with _translate(f"{self.label}: scan"):
            sub = await js.subscribe(
                self._prefix + token_filter,
                stream=self._stream,
                ordered_consumer=True,
                deliver_policy=js_api.DeliverPolicy.LAST_PER_SUBJECT,
                headers_only=headers_only,
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
                            # A record rewritten while the scan ran can take the message
                            # the count promised: nothing more to come if none is pending.
                            if not (await sub.consumer_info()).num_pending:
                                break
                            continue
                        self._collect(msg, found)
                        if msg.metadata.num_pending == 0:
                            break
            finally:
                with contextlib.suppress(nats.errors.Error):
                    await sub.unsubscribe()
                    if consumer:
                        await js.delete_consumer(self._stream, consumer)
        return found

    def _collect(self, msg: Msg, found: list[tuple[str, _Raw]]) -> None:
        headers = msg.headers or {}
        if headers.get(_KV_OPERATION) in ("DEL", "PURGE"):
            return
        found.append(
            (
                msg.subject[len(self._prefix) :],
                _Raw(
                    revision=msg.metadata.sequence.stream,
                    data=msg.data,
                    object=headers.get(_OBJECT_HEADER),
                    deleted=False,
                ),
            )
        )

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
                await js.create_object_store(self._objects)
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
        found = await self._records.scan(">", headers_only=True)
        keys = (decode_key(token) for token, _ in found)
        return sorted(key for key in keys if key.startswith(prefix))

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


@dataclass(slots=True)
class _JobState:
    """A job's state record (JSON): where it is in its life, and its delivery count."""

    state: str  # "waiting" | "claimed" | "termed"
    attempt: int = 0
    worker: str | None = None
    expires_at: float = 0.0
    available_at: float = 0.0
    order: int = 0
    reason: str | None = None

    def dump(self) -> bytes:
        record: dict[str, Any] = {"schema_version": 1}
        for field in self.__slots__:
            record[field] = getattr(self, field)
        return json.dumps(record, separators=(",", ":")).encode()

    @classmethod
    def load(cls, data: bytes, revision: int) -> _JobState:
        record = json.loads(data)
        return cls(
            state=str(record["state"]),
            attempt=int(record["attempt"]),
            worker=record.get("worker"),
            expires_at=float(record["expires_at"]),
            available_at=float(record["available_at"]),
            # A job never claimed yet still has its creation revision: its place in line.
            order=int(record.get("order") or revision),
            reason=record.get("reason"),
        )


class NatsJobQueue:
    """A job queue on compare-and-set job records (see the module docstring for why)."""

    def __init__(self, bus: NatsBus, name: str, records: _Records) -> None:
        self.name = name
        self._bus = bus
        self._records = records

    async def enqueue(self, payload: bytes, *, job_id: str | None = None) -> str:
        job_id = check_job_id(job_id)
        token = encode_key(job_id)
        # The payload goes first, so a claimed job always has one. A payload left by an
        # enqueue that died before its state record is reused: same id, same job.
        staged = await self._records.stage("p." + token, payload)
        try:
            await self._records.publish("p." + token, staged, 0)
        except _WrongLast:
            await _safe_discard(self._records, staged)
        with contextlib.suppress(_WrongLast):
            await self._records.publish("s." + token, _JobState("waiting").dump(), 0)
        return job_id

    async def claim(self, worker: str, lease: float) -> Job | None:
        check_claim(worker, lease)
        now = self._bus._clock()
        candidates: list[tuple[int, str, int, _JobState]] = []
        for token, raw in await self._records.scan("s.>", headers_only=False):
            state = _JobState.load(raw.data, raw.revision)
            ready = state.state == "waiting" and state.available_at <= now
            lapsed = state.state == "claimed" and state.expires_at <= now
            if ready or lapsed:
                candidates.append((state.order, token[2:], raw.revision, state))
        candidates.sort(key=lambda candidate: candidate[0])
        for _, token, revision, state in candidates:
            state.state, state.worker = "claimed", worker
            state.attempt += 1
            state.expires_at = now + lease
            try:
                await self._records.publish("s." + token, state.dump(), revision)
            except _WrongLast:
                continue  # another worker claimed (or acked) it first
            found = await self._records.get("p." + token)
            return Job(
                queue=self.name,
                id=decode_key(token),
                payload=found[1] if found else b"",
                attempt=state.attempt,
                worker=worker,
                lease_expires_at=state.expires_at,
            )
        return None

    async def ack(self, job: Job) -> None:
        token = encode_key(job.id)
        revision, _ = await self._held(job, token)
        try:
            await self._records.publish("s." + token, None, revision)
        except _WrongLast:
            raise self._lost(job) from None
        payload = await self._records.read("p." + token)
        if payload is not None and not payload.deleted:
            with contextlib.suppress(_WrongLast):
                await self._records.publish("p." + token, None, payload.revision)
            await self._records.discard(payload.object)

    async def nak(self, job: Job, *, delay: float = 0.0) -> None:
        await self._settle(job, "waiting", available_at=self._bus._clock() + max(delay, 0.0))

    async def term(self, job: Job, reason: str) -> None:
        await self._settle(job, "termed", reason=reason)

    async def _settle(
        self, job: Job, to: str, *, available_at: float = 0.0, reason: str | None = None
    ) -> None:
        token = encode_key(job.id)
        revision, state = await self._held(job, token)
        state.state, state.worker, state.expires_at = to, None, 0.0
        state.available_at, state.reason = available_at, reason
        try:
            await self._records.publish("s." + token, state.dump(), revision)
        except _WrongLast:
            raise self._lost(job) from None

    async def _held(self, job: Job, token: str) -> tuple[int, _JobState]:
        """The job's state record if `job` (this worker, this delivery) still holds it."""
        raw = await self._records.read("s." + token)
        if raw is None or raw.deleted:
            raise self._lost(job)
        state = _JobState.load(raw.data, raw.revision)
        if state.state != "claimed" or state.worker != job.worker or state.attempt != job.attempt:
            raise self._lost(job)
        return raw.revision, state

    def _lost(self, job: Job) -> NotFound:
        return NotFound(
            f"queue {self.name}: job {job.id!r} (attempt {job.attempt}) is no longer held by "
            f"{job.worker!r}: its lease lapsed and it was claimed again, or it was settled"
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
        request_timeout: float,
        connected: asyncio.Event,
        disconnected: asyncio.Event,
    ) -> None:
        self.url = url
        self._nc = nc
        self._js = js
        self._clock = clock
        self.clock = clock  # public: callers compare lease expiries on the same clock
        self._namespace = namespace
        self._state = _State.OPENED
        self._request_timeout = request_timeout
        # Set and cleared by the client's callbacks: the state of the link, for tests
        # and diagnostics (operations never wait on them; they fail or succeed on their own).
        self._connected = connected
        self._disconnected = disconnected
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
    ) -> NatsBus:
        """Connect, failing fast (`StoreUnavailable`) if no server answers now; once
        connected, the client reconnects without limit (see the module docstring).

        `request_timeout` bounds each JetStream call: how long a KV or queue operation
        waits out a disconnect before raising `StoreUnavailable`."""
        check_namespace(namespace)

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
            request_timeout=request_timeout,
            connected=connected,
            disconnected=disconnected,
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
                    await js.create_key_value(bucket=name, history=1)
            records = _Records(self, bucket, f"KV_{name}", f"$KV.{name}.", name)
            self._buckets[bucket] = NatsKeyValue(self, bucket, records)
            return self._buckets[bucket]

    async def queue(self, name: str) -> NatsJobQueue:
        stream_name = f"TQ_{self._name(name)}"
        js = self._js_context()
        async with self._lock:
            if name in self._queues:
                return self._queues[name]
            config = js_api.StreamConfig(
                name=stream_name,
                subjects=[f"$TQ.{self._name(name)}.>"],
                max_msgs_per_subject=1,
                allow_rollup_hdrs=True,
                deny_delete=True,
                discard=js_api.DiscardPolicy.NEW,
            )
            with _translate(f"queue {name}"):
                try:
                    await js.stream_info(stream_name)
                except nats.js.errors.NotFoundError:
                    await js.add_stream(config)
            records = _Records(
                self, f"queue {name}", stream_name, f"$TQ.{self._name(name)}.", stream_name
            )
            self._queues[name] = NatsJobQueue(self, name, records)
            return self._queues[name]

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
                    await js.delete_stream(stream)
                    removed.append(stream)
        self._buckets.clear()
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
