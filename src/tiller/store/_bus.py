"""The Bus: the three ports every durable feature stands on, shaped after NATS JetStream.

- a revisioned **KV** (`Bus.kv(bucket)`): get, create, put, update with an expected revision
  (compare-and-set, `RevisionConflict` otherwise), delete, key listing, and **leases** —
  compare-and-set records with an expiry, for "exactly one process proceeds";
- **pub/sub** subjects (`Bus.publish`, `Bus.subscribe`): fast delivery only; anything that
  must survive a reconnect is also written to the KV (control messages are);
- a **job queue** (`Bus.queue(name, lease=..., max_deliver=...)`, both kept with the
  queue for every process): enqueue (idempotent by job id), claim with the queue's lease,
  extend, ack / nak (with a delay) / term (with a reason), redelivery when a lease lapses,
  and a dead-letter list for jobs that will never run (termed, or out of deliveries), for
  worker fleets.

Backends (`open_bus(url)`): `memory://` (tests), `sqlite:///path` (the embedded default),
`nats://host:port` (JetStream). One contract test suite runs against all three.

Revisions are opaque increasing integers: a later write of a bucket has a larger revision
than an earlier one, nothing more (they are not per-key counters). Values are bytes;
records are versioned JSON written by the layers above. Bucket names use
`[A-Za-z0-9_-]`; keys may be any non-empty string (run and thread ids come from clients)
and are encoded for the backend with `encode_key`, which maps them into `[-/_=.A-Za-z0-9]`
as NATS requires, reversibly.

Time comes from a `Clock` (seconds, monotonic enough for leases), so tests move it by
hand instead of sleeping.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ..errors import TillerError, UsageError

__all__ = [
    "Bus",
    "BusClosed",
    "BusMessage",
    "Clock",
    "DeadLetter",
    "Entry",
    "Job",
    "JobQueue",
    "KeyValue",
    "Lease",
    "JobLeaseLost",
    "NotFound",
    "QueueDepth",
    "QueueOptions",
    "RevisionConflict",
    "StoreError",
    "StoreUnavailable",
    "Subscription",
    "check_bucket",
    "check_namespace",
    "check_subject",
    "decode_key",
    "encode_key",
    "encoded_prefix",
    "wall_clock",
]


# ── errors ───────────────────────────────────────────────────────────────────────────


class StoreError(TillerError):
    """A store operation failed; subclasses say how."""


class NotFound(StoreError):
    """The key, bucket or job does not exist (or no longer does)."""


class RevisionConflict(StoreError):
    """A compare-and-set lost: the record's revision is not the one expected.

    `expected` is what the caller assumed (0: "the key must not exist"); `actual` is what
    the store holds (0: "no such key"), when the backend can tell.
    """

    def __init__(self, bucket: str, key: str, expected: int, actual: int | None) -> None:
        super().__init__(
            f"{bucket}/{key}: expected revision {expected}, the store has "
            f"{'no record' if actual == 0 else actual if actual is not None else 'another'}"
        )
        self.bucket = bucket
        self.key = key
        self.expected = expected
        self.actual = actual


class JobLeaseLost(NotFound):
    """A claimed job was settled or extended by a delivery that no longer holds it: its
    lease lapsed (and it may already be another worker's), or it was settled before.

    A `NotFound`: for this delivery, the job is gone."""

    def __init__(self, queue: str, job_id: str, attempt: int, why: str) -> None:
        super().__init__(f"queue {queue}: job {job_id!r} (attempt {attempt}) {why}")
        self.queue = queue
        self.job_id = job_id
        self.attempt = attempt


class StoreUnavailable(StoreError):
    """The store cannot be reached (NATS down, SQLite file locked past its timeout)."""


class BusClosed(UsageError):
    """The store (or a bucket, queue or subscription taken from it) was used after `aclose`."""


# ── names ────────────────────────────────────────────────────────────────────────────

_BUCKET = re.compile(r"[A-Za-z0-9_-]{1,64}")
_KEY_SAFE = re.compile(r"[-/_.A-Za-z0-9]")
_SUBJECT = re.compile(r"[-/_=A-Za-z0-9]+(?:\.[-/_=A-Za-z0-9]+)*")


def check_bucket(name: str) -> str:
    """Return `name` if it is a valid bucket name, else raise `UsageError` saying why."""
    if not _BUCKET.fullmatch(name):
        raise UsageError(
            f"bucket name {name!r} must be 1 to 64 characters of letters, digits, '_' and '-'"
        )
    return name


def check_namespace(namespace: str) -> str:
    """Return `namespace` if valid (empty, or a bucket-like name), else raise `UsageError`.

    A namespace prefixes every bucket, subject and queue of a store, so tests (or tenants)
    sharing one server or file never see each other's records.
    """
    if namespace and not _BUCKET.fullmatch(namespace):
        raise UsageError(
            f"namespace {namespace!r} must be empty or 1 to 64 characters of letters, "
            "digits, '_' and '-'"
        )
    return namespace


def check_subject(subject: str) -> str:
    """Return `subject` if it is a valid pub/sub subject, else raise `UsageError`.

    Dot-separated tokens of `[-/_=A-Za-z0-9]` (an `encode_key` output is a valid token
    sequence), at most 255 characters: what every backend accepts, NATS included. Wildcards
    are not part of the contract, so they are refused here rather than behave differently
    per backend.
    """
    if len(subject) > 255 or not _SUBJECT.fullmatch(subject):
        raise UsageError(
            f"subject {subject!r} must be dot-separated tokens of letters, digits, "
            "'-', '_', '=' and '/' (encode ids with encode_key), at most 255 characters"
        )
    return subject


def encode_key(key: str) -> str:
    """Map any non-empty key into `[-/_=.A-Za-z0-9]`, reversibly.

    Safe characters stay as they are (so ordinary run ids stay readable); `=` escapes
    every other character as `=XXXX` (its code point in hex, four digits, or `==XXXXXX`
    for those beyond the BMP). Leading/trailing dots and empty path segments, which NATS
    rejects, are escaped too.
    """
    if not key:
        raise UsageError("a key must not be empty")
    out: list[str] = []
    last = len(key) - 1
    for index, char in enumerate(key):
        dot_at_edge = char == "." and (index in (0, last) or key[index - 1] == ".")
        if _KEY_SAFE.fullmatch(char) and not dot_at_edge and char != "=":
            out.append(char)
        elif ord(char) <= 0xFFFF:
            out.append(f"={ord(char):04X}")
        else:
            out.append(f"=={ord(char):06X}")
    return "".join(out)


def decode_key(encoded: str) -> str:
    """The inverse of `encode_key`."""
    out: list[str] = []
    index = 0
    while index < len(encoded):
        char = encoded[index]
        if char != "=":
            out.append(char)
            index += 1
        elif encoded.startswith("==", index):
            out.append(chr(int(encoded[index + 2 : index + 8], 16)))
            index += 8
        else:
            out.append(chr(int(encoded[index + 1 : index + 5], 16)))
            index += 5
    return "".join(out)


def encoded_prefix(prefix: str) -> str:
    """A string that `encode_key(k)` starts with for every `k` starting with `prefix`, for
    backends that list keys by their encoded form (filter the decoded keys afterwards).

    A character encodes the same wherever it sits except a dot, which is escaped at the
    edges and after another dot; so the prefix is encoded as if more followed, and a final
    dot (whose encoding depends on whether the key ends there) is left out.
    """
    stem = prefix[:-1] if prefix.endswith(".") else prefix
    return encode_key(stem + "x")[:-1]


# ── values ───────────────────────────────────────────────────────────────────────────

Clock = Callable[[], float]


def wall_clock() -> float:
    """Seconds since the epoch: leases must agree across processes and machines."""
    return time.time()


@dataclass(slots=True, frozen=True)
class Entry:
    """One KV record: its key (decoded), value and revision."""

    key: str
    value: bytes
    revision: int


@dataclass(slots=True, frozen=True)
class Lease:
    """Proof of holding `key` until `expires_at` (clock seconds); renew before then.

    `epoch` is the holder's fencing number where the layer above keeps one (a run's lease:
    `RunDurability.take_lease`), else 0: it goes up each time a new holder takes the key,
    and stays the same through renewals."""

    bucket: str
    key: str
    owner: str
    revision: int
    expires_at: float
    epoch: int = 0


@dataclass(slots=True, frozen=True)
class BusMessage:
    """One message received on a subject."""

    subject: str
    data: bytes


@dataclass(slots=True, frozen=True)
class Job:
    """A claimed job: one delivery of it. `attempt` is the delivery count, from 1 (on NATS,
    JetStream's own `num_delivered`). Settle it (`ack`, `nak`, `term`) or `extend` it
    before `lease_expires_at` (the store's clock), or it is delivered again."""

    queue: str
    id: str
    payload: bytes
    attempt: int
    worker: str
    lease_expires_at: float
    #: The backend's handle on this delivery (NATS: the JetStream message).
    handle: object = field(default=None, compare=False, repr=False)


@dataclass(slots=True, frozen=True)
class DeadLetter:
    """A job that will never be delivered again, with why: termed by a worker (`reason` is
    the worker's), or out of deliveries (`reason` is the last attempt's error: the error
    its `nak` gave, or that its lease lapsed). `attempt` is the last delivery's count;
    `payload` is the job's, so it can be inspected or enqueued again by hand."""

    queue: str
    id: str
    payload: bytes
    reason: str
    attempt: int
    at: float  # the store's clock when it was dead-lettered


@dataclass(slots=True, frozen=True)
class QueueDepth:
    """How many jobs a queue holds now: `waiting` to be claimed (fresh, nakked, or whose
    lease lapsed) and `in_flight` (claimed, lease live). Dead letters are not counted.
    A snapshot for status lines: it may be stale by the time it is read. On NATS a
    nakked job, and one whose lease lapsed, count as in flight until a claim fetches it
    again (JetStream counts them as pending acks), and settles land a moment late."""

    waiting: int
    in_flight: int


@dataclass(slots=True, frozen=True)
class QueueOptions:
    """A queue's lease length (seconds) and delivery limit, as the store keeps them for
    every process (`JobQueue.options()`)."""

    lease: float
    max_deliver: int


#: A queue's lease when none was ever set: long enough for a model call, short enough
#: that a dead worker's job is taken again within a minute.
DEFAULT_LEASE = 30.0
#: Deliveries a job gets when the queue was never given a limit.
DEFAULT_MAX_DELIVER = 5


def check_queue_options(lease: float | None, max_deliver: int | None) -> None:
    """The shared argument check of `Bus.queue` (None: keep the queue's own)."""
    if lease is not None and (
        isinstance(lease, bool) or not isinstance(lease, int | float) or not lease > 0
    ):
        raise UsageError(
            f"a queue's lease must be positive seconds (or None: the queue's own), not {lease!r}"
        )
    if max_deliver is not None and (
        isinstance(max_deliver, bool) or not isinstance(max_deliver, int) or max_deliver < 1
    ):
        raise UsageError(
            "a queue's max_deliver must be a positive int (or None: the queue's own), "
            f"not {max_deliver!r}"
        )


def lapsed_reason(attempt: int) -> str:
    """A dead letter's reason when its last delivery's lease lapsed (the worker died or
    hung): the same words on every backend."""
    return f"attempt {attempt}'s lease lapsed without an ack (the worker died or hung)"


def nakked_reason(attempt: int, error: str | None) -> str:
    return error if error else f"attempt {attempt} was nakked without an error"


# ── ports ────────────────────────────────────────────────────────────────────────────


@runtime_checkable
class KeyValue(Protocol):
    """One bucket of the revisioned KV."""

    bucket: str

    async def get(self, key: str) -> Entry | None:
        """The record, or None if there is none."""
        ...

    async def put(self, key: str, value: bytes) -> int:
        """Write unconditionally; returns the new revision."""
        ...

    async def create(self, key: str, value: bytes) -> int:
        """Write only if the key does not exist (`RevisionConflict` otherwise)."""
        ...

    async def update(self, key: str, value: bytes, *, expected: int) -> int:
        """Write only if the record's revision is `expected` (`RevisionConflict` otherwise)."""
        ...

    async def delete(self, key: str, *, expected: int | None = None) -> None:
        """Remove the key (if `expected` is given, only at that revision). Deleting a missing
        key without `expected` is not an error."""
        ...

    async def keys(self, prefix: str = "") -> list[str]:
        """Keys (decoded) that start with `prefix`, sorted."""
        ...

    async def acquire(self, key: str, owner: str, ttl: float) -> Lease | None:
        """Take the lease on `key` for `ttl` seconds: a lease if it was free, expired, or
        already `owner`'s; None if someone else holds it."""
        ...

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        """Extend a held lease (`RevisionConflict` if it was lost meanwhile)."""
        ...

    async def release(self, lease: Lease) -> None:
        """Give the lease up (a lease already lost is not an error)."""
        ...


@runtime_checkable
class Subscription(Protocol):
    """Messages published on a subject from the moment of subscribing."""

    def __aiter__(self) -> AsyncIterator[BusMessage]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class JobQueue(Protocol):
    """A durable work queue: each job is processed by one worker at a time.

    The lease length and the delivery limit belong to the queue, not to a handle or a
    claim (`Bus.queue` says who sets them): every process's claims and settlements apply
    the values the store holds now, read again whenever they may have changed (on NATS
    they are the durable consumer's, re-read at most every half second). A worker that
    needs longer calls `extend` (a heartbeat) before its lease lapses.

    Delivery is at least once: a job whose lease lapses is delivered again, with `attempt`
    one higher. A job delivered `max_deliver` times whose last delivery fails (nakked, or
    its lease lapsed) is dead-lettered with that last error instead of delivered again.
    """

    name: str

    @property
    def lease(self) -> float:
        """Seconds a claim holds a job before it is delivered again (unless extended), as
        this handle last read it (`options()` reads the queue's now)."""
        ...

    @property
    def max_deliver(self) -> int:
        """Deliveries a job gets before it is dead-lettered, as this handle last read it."""
        ...

    async def options(self) -> QueueOptions:
        """The queue's lease and delivery limit as the store holds them now (another
        process may have set them since this handle was opened), for status lines."""
        ...

    async def enqueue(self, payload: bytes, *, job_id: str | None = None) -> str:
        """Add a job; returns its id. Enqueueing an id the queue still holds (waiting,
        claimed or dead-lettered) does nothing, for as long as it holds it: given ids make
        a retried submission idempotent. An id whose job was acked is no longer held: it
        is accepted as a new job, on every backend (the queue is not a registry of every
        id ever seen; what a job's run already did is the run's checkpoint's business)."""
        ...

    async def claim(
        self,
        worker: str,
        *,
        on_dead_letter: Callable[[DeadLetter], Awaitable[None]] | None = None,
    ) -> Job | None:
        """The next due job (waiting, or its lease lapsed), leased to `worker` for the
        queue's `lease`; None if there is none now. Fresh jobs come in enqueue order.

        A job whose last delivery's lease lapsed (its worker died or hung on its last
        attempt) is dead-lettered by the claim that finds it, since no worker settled it
        to say so; so are, on NATS, messages that are not jobs at all. No one else hears
        of such a dead letter: `on_dead_letter` is awaited with each one the claim is
        about to make, *before* it is written, so that whoever waits on the job can be
        told (the fleet writes its run's `failed` result). If it raises, that job is not
        dead-lettered (a later claim finds it again and announces it again) and the
        error propagates: each such dead letter is announced at least once, and after a
        crash or between racing claims more than once."""
        ...

    async def extend(self, job: Job) -> Job:
        """Restart the lease: the job is `worker`'s for another `lease` seconds from now;
        returns the delivery with its new expiry (`JobLeaseLost` if it no longer holds it)."""
        ...

    async def ack(self, job: Job) -> None:
        """Done: remove it (`JobLeaseLost` if this delivery no longer holds it)."""
        ...

    async def nak(self, job: Job, *, delay: float = 0.0, error: str | None = None) -> None:
        """Not done: deliver it again after `delay` seconds; or, if this was its last
        delivery, dead-letter it with `error` (`JobLeaseLost` if it no longer holds it)."""
        ...

    async def term(self, job: Job, reason: str) -> None:
        """Never deliver it again (it cannot succeed): dead-letter it with `reason`
        (`JobLeaseLost` if this delivery no longer holds it)."""
        ...

    async def dead_letters(self) -> list[DeadLetter]:
        """The queue's dead letters, oldest first (for inspection: it reads them all)."""
        ...

    async def depth(self) -> QueueDepth:
        """The jobs waiting and in flight now (`tiller fleet status`); cheap: it counts,
        it reads no payload."""
        ...


@runtime_checkable
class Bus(Protocol):
    """The store: KV buckets, pub/sub subjects and job queues. An async context manager."""

    url: str
    #: The clock leases are written with; compare expiries against it.
    clock: Clock

    async def kv(self, bucket: str) -> KeyValue:
        """The bucket (created on first use)."""
        ...

    async def publish(self, subject: str, data: bytes) -> None: ...

    async def subscribe(self, subject: str) -> Subscription: ...

    async def queue(
        self, name: str, *, lease: float | None = None, max_deliver: int | None = None
    ) -> JobQueue:
        """The job queue (created on first use).

        Its lease length (seconds) and delivery limit are the queue's, kept in the store
        for every process (NATS: its consumer; SQLite: a row beside its jobs; memory: the
        bus). `None` means "the queue's own": what was last set explicitly, or
        `DEFAULT_LEASE` / `DEFAULT_MAX_DELIVER` for a queue that never had one. A value
        sets it for the queue, for every process, until another value is given. So give
        one only where a person chose it (`tiller worker --lease 2`); a submitter, a status
        line or an approver opens the queue with None and changes nothing.

        (On NATS the two live in one consumer config: a call setting only one reads the
        other first, so a concurrent call setting the other one may be undone; two calls
        racing to create the queue, one with values and one without, may leave the
        defaults. Set both where it matters.)"""
        ...

    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Bus: ...

    async def __aexit__(self, *exc: object) -> None: ...


# ── leases, on any KeyValue ──────────────────────────────────────────────────────────
#
# A lease is an ordinary record whose value holds the owner and the expiry, written by
# compare-and-set. The expiry comes from the store's injected clock and is compared on
# acquire, not enforced by a server-side TTL, so every backend (NATS included) behaves the
# same under a fake clock, and a lease outlives a reconnect. Backends call these from their
# `acquire` / `renew` / `release`.


def lease_value(owner: str, expires_at: float) -> bytes:
    """The record a lease is stored as (JSON, so it reads well in a store browser)."""
    return json.dumps(
        {"schema_version": 1, "owner": owner, "expires_at": expires_at}, separators=(",", ":")
    ).encode()


def parse_lease(bucket: str, key: str, value: bytes) -> tuple[str, float]:
    """(owner, expires_at) of a lease record; `UsageError` if the key holds something else."""
    try:
        record = json.loads(value)
        return str(record["owner"]), float(record["expires_at"])
    except (ValueError, TypeError, KeyError) as exc:
        raise UsageError(f"{bucket}/{key} holds a record that is not a lease") from exc


def _check_lease_args(owner: str, ttl: float) -> None:
    if not owner:
        raise UsageError("a lease owner must not be empty")
    if not ttl > 0:
        raise UsageError(f"a lease ttl must be positive seconds, not {ttl!r}")


async def acquire_lease(
    kv: KeyValue, clock: Clock, key: str, owner: str, ttl: float
) -> Lease | None:
    """`KeyValue.acquire` on top of get/create/update: loops only while other writers
    change the record between our read and our compare-and-set."""
    _check_lease_args(owner, ttl)
    while True:
        now = clock()
        entry = await kv.get(key)
        value = lease_value(owner, now + ttl)
        try:
            if entry is None:
                revision = await kv.create(key, value)
            else:
                holder, expires_at = parse_lease(kv.bucket, key, entry.value)
                if holder != owner and expires_at > now:
                    return None
                revision = await kv.update(key, value, expected=entry.revision)
        except RevisionConflict:
            continue
        return Lease(kv.bucket, key, owner, revision, now + ttl)


async def renew_lease(kv: KeyValue, clock: Clock, lease: Lease, ttl: float) -> Lease:
    """`KeyValue.renew`: `RevisionConflict` if anyone wrote the record since `lease`."""
    _check_lease_args(lease.owner, ttl)
    expires_at = clock() + ttl
    revision = await kv.update(
        lease.key, lease_value(lease.owner, expires_at), expected=lease.revision
    )
    return Lease(lease.bucket, lease.key, lease.owner, revision, expires_at, lease.epoch)


async def release_lease(kv: KeyValue, lease: Lease) -> None:
    """`KeyValue.release`: deletes the record only if it is still this lease's."""
    with contextlib.suppress(RevisionConflict):
        await kv.delete(lease.key, expected=lease.revision)
