"""`SqliteBus`: the embedded default — one SQLite file, nothing to start, safe for several
processes on one machine.

Design, and why:

- **One connection, one thread.** Each store owns one connection, used only from its own
  single worker thread (a one-thread executor); the event loop never waits on SQLite, and
  operations of one store run in submission order. A dedicated thread measured about as fast
  as `asyncio.to_thread` and needs no lock around the connection.
- **WAL, `busy_timeout`, `BEGIN IMMEDIATE`.** Readers never block the writer; every write
  transaction takes the write lock up front, so a read-then-write compare-and-set cannot
  be overtaken by another process between its read and its write. A lock held past
  `busy_timeout` (5 s by default) surfaces as `StoreUnavailable`.
- **Synced commits** by default (SQLite's `synchronous=FULL`): a committed checkpoint or
  call record survives a power loss, as law 5 needs (a lost "started" record would let a
  call run twice). `synced=False` (`synchronous=NORMAL`, safe in WAL mode) commits without
  an fsync: still atomic, in order, and durable when the process is killed, but the last
  commits may roll back after a power loss or an OS crash. Only for stores whose writes
  can be made again: an eval's results (a lost record's case runs again on resume).
- **Revisions** come from one counter row in `meta`, bumped inside each write transaction:
  writes are serialized by SQLite, so revisions increase across processes too.
- **Pub/sub** messages are rows of `messages` (AUTOINCREMENT ids, never reused). One poller
  task per store reads rows past each subscriber's cursor every `poll_interval` (50 ms by
  default), and at once after a publish on the same store: in-process latency is one query;
  another process's messages arrive within about one poll interval. Rows older than
  `retention` (60 s, wall time) are pruned on publish; a subscriber lagging longer misses
  them (pub/sub is fast delivery only — what must survive is also in the KV).
- **Jobs** are rows of `jobs`, one per live job; a claim takes the first row of the index
  on (queue, `available_at`, seq) that is due (`available_at <= now`: one column for "waiting
  from" and "leased until"), so it reads one index entry however deep the queue is, and
  leases it in one IMMEDIATE transaction: several processes never take the same job. Fresh
  jobs are due from 0 (whatever the clocks of the processes say), so they come in enqueue
  order, ahead of redeliveries. Jobs that will never run again move to `dead_letters`.
  A queue's lease and delivery limit are its row of `queues`, written by `queue()` when
  given and read by each claim in the same statement as its due job (a primary-key
  lookup beside the index read), so every process applies the values set last.
- Keys and job ids are stored `encode_key`-encoded: ASCII, readable, and any Python string
  (even a lone surrogate) fits.

Cancelling a caller does not cancel its statement: an operation already handed to the
thread completes (or fails) there, as a request already sent to a server would.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from .._task_stop import stop_task
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
    Lease,
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
    encoded_prefix,
    lapsed_reason,
    nakked_reason,
    release_lease,
    renew_lease,
    wall_clock,
)
from ._memory import (
    LocalSubscription,
    check_job_id,
    check_key,
    check_own,
    check_worker,
    lease_lost,
)

__all__ = ["SCHEMA_VERSION", "SqliteBus"]

T = TypeVar("T")

SCHEMA_VERSION = 3

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kv (
    bucket   TEXT NOT NULL,
    key      TEXT NOT NULL,       -- encode_key(key)
    value    BLOB NOT NULL,
    revision INTEGER NOT NULL,
    PRIMARY KEY (bucket, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS messages (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    subject      TEXT NOT NULL,
    data         BLOB NOT NULL,
    published_at REAL NOT NULL    -- wall time, for pruning only
);
CREATE INDEX IF NOT EXISTS messages_published_at ON messages (published_at);
CREATE TABLE IF NOT EXISTS jobs (
    queue        TEXT NOT NULL,
    id           TEXT NOT NULL,   -- encode_key(job id)
    seq          INTEGER NOT NULL,
    payload      BLOB NOT NULL,
    state        TEXT NOT NULL,   -- 'ready' | 'claimed' ('term': schema 1 only)
    attempt      INTEGER NOT NULL DEFAULT 0,
    worker       TEXT NOT NULL DEFAULT '',
    available_at REAL NOT NULL,   -- ready: deliverable from, claimed: lease expiry (clock s)
    reason       TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (queue, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS jobs_due ON jobs (queue, available_at, seq);
CREATE TABLE IF NOT EXISTS queues (
    queue       TEXT PRIMARY KEY,
    lease       REAL NOT NULL,    -- seconds a claim holds a job
    max_deliver INTEGER NOT NULL  -- deliveries before a job is dead-lettered
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dead_letters (
    queue   TEXT NOT NULL,
    id      TEXT NOT NULL,        -- encode_key(job id)
    seq     INTEGER NOT NULL,     -- a revision: the order they died in
    payload BLOB NOT NULL,
    reason  TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    at      REAL NOT NULL,        -- clock s
    PRIMARY KEY (queue, id)
) WITHOUT ROWID;
"""

_UNAVAILABLE_CODES = {
    sqlite3.SQLITE_BUSY,
    sqlite3.SQLITE_LOCKED,
    sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_PROTOCOL,
}
#: A claim's read: the first due job of a queue, one entry of the `jobs_due` index, with
#: the queue's lease and limit now (its `queues` row, by primary key).
DUE_JOB = (
    "SELECT jobs.id, jobs.state, jobs.attempt, queues.lease, queues.max_deliver "
    "FROM jobs JOIN queues ON queues.queue = jobs.queue "
    "WHERE jobs.queue = ?1 AND jobs.available_at <= ?2 "
    "ORDER BY jobs.available_at, jobs.seq LIMIT 1"
)
#: A queue's lease and limit now.
_OPTIONS = "SELECT lease, max_deliver FROM queues WHERE queue = ?"
_KEY_CEILING = "\x7f"  # above every character encode_key emits
_POLL_BATCH = 1000
_PRUNE_EVERY = 64


@contextlib.contextmanager
def _translate(path: Path) -> Iterator[None]:
    """The border: callers never see `sqlite3` exceptions, only `StoreError`s."""
    try:
        yield
    except sqlite3.Error as exc:
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None and code & 0xFF in _UNAVAILABLE_CODES:
            raise StoreUnavailable(
                f"SQLite store {path} is unavailable ({exc}); if it is locked, another "
                "connection held the write lock past busy_timeout"
            ) from exc
        raise StoreError(f"SQLite store {path}: {exc}") from exc


def _next_revision(conn: sqlite3.Connection) -> int:
    row = conn.execute(
        "UPDATE meta SET value = value + 1 WHERE name = 'revision' RETURNING value"
    ).fetchone()
    return int(row[0])


def _revision_of(conn: sqlite3.Connection, bucket: str, key: str) -> int:
    row = conn.execute("SELECT revision FROM kv WHERE bucket = ? AND key = ?", (bucket, key))
    found = row.fetchone()
    return 0 if found is None else int(found[0])


class SqliteKeyValue:
    """One bucket of a `SqliteBus`."""

    def __init__(self, bus: SqliteBus, bucket: str, stored: str) -> None:
        self.bucket = bucket
        self._bus = bus
        self._stored = stored  # the bucket name with the store's namespace

    async def get(self, key: str) -> Entry | None:
        encoded = encode_key(check_key(key))

        def read(conn: sqlite3.Connection) -> Entry | None:
            row = conn.execute(
                "SELECT value, revision FROM kv WHERE bucket = ? AND key = ?",
                (self._stored, encoded),
            ).fetchone()
            return None if row is None else Entry(key, bytes(row[0]), int(row[1]))

        return await self._bus._run(read)

    async def put(self, key: str, value: bytes) -> int:
        return await self._write(key, value, None)

    async def create(self, key: str, value: bytes) -> int:
        return await self._write(key, value, 0)

    async def update(self, key: str, value: bytes, *, expected: int) -> int:
        return await self._write(key, value, expected)

    async def delete(self, key: str, *, expected: int | None = None) -> None:
        encoded = encode_key(check_key(key))

        def remove(conn: sqlite3.Connection) -> None:
            if expected is not None:
                actual = _revision_of(conn, self._stored, encoded)
                if actual != expected or actual == 0:
                    raise RevisionConflict(self.bucket, key, expected, actual)
            conn.execute("DELETE FROM kv WHERE bucket = ? AND key = ?", (self._stored, encoded))

        await self._bus._transact(remove)

    async def keys(self, prefix: str = "") -> list[str]:
        # A range over the encoded prefix holds every match (and maybe a few more: the
        # exact test runs on the decoded keys).
        coarse = encoded_prefix(prefix)

        def read(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "SELECT key FROM kv WHERE bucket = ? AND key >= ? AND key < ?",
                (self._stored, coarse, coarse + _KEY_CEILING),
            ).fetchall()
            return [decode_key(row[0]) for row in rows]

        return sorted(key for key in await self._bus._run(read) if key.startswith(prefix))

    async def acquire(self, key: str, owner: str, ttl: float) -> Lease | None:
        return await acquire_lease(self, self._bus._clock, key, owner, ttl)

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        return await renew_lease(self, self._bus._clock, lease, ttl)

    async def release(self, lease: Lease) -> None:
        await release_lease(self, lease)

    async def _write(self, key: str, value: bytes, expected: int | None) -> int:
        """put (expected None), create (0) or update: compare and write in one IMMEDIATE
        transaction, so no other process can write between the two."""
        encoded = encode_key(check_key(key))
        data = bytes(value)

        def write(conn: sqlite3.Connection) -> int:
            if expected is not None:
                actual = _revision_of(conn, self._stored, encoded)
                if actual != expected:
                    raise RevisionConflict(self.bucket, key, expected, actual)
            revision = _next_revision(conn)
            conn.execute(
                "INSERT INTO kv (bucket, key, value, revision) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (bucket, key) DO UPDATE "
                "SET value = excluded.value, revision = excluded.revision",
                (self._stored, encoded, data, revision),
            )
            return revision

        return await self._bus._transact(write)


class SqliteJobQueue:
    """One job queue of a `SqliteBus` (see the module docstring for how a claim works).
    `lease` and `max_deliver` are the queue's row as this handle last read it."""

    def __init__(self, bus: SqliteBus, name: str, stored: str, options: QueueOptions) -> None:
        self.name = name
        self.lease = options.lease
        self.max_deliver = options.max_deliver
        self._bus = bus
        self._stored = stored

    async def options(self) -> QueueOptions:
        def read(conn: sqlite3.Connection) -> QueueOptions:
            return self._read_options(conn)

        return await self._bus._run(read)

    def _read_options(self, conn: sqlite3.Connection) -> QueueOptions:
        row = conn.execute(_OPTIONS, (self._stored,)).fetchone()
        return self._seen(float(row[0]), int(row[1]))

    def _seen(self, lease: float, max_deliver: int) -> QueueOptions:
        """Keep the queue's options as just read (the handle's view for callers)."""
        self.lease, self.max_deliver = lease, max_deliver
        return QueueOptions(lease, max_deliver)

    async def enqueue(self, payload: bytes, *, job_id: str | None = None) -> str:
        job_id = check_job_id(job_id)
        encoded, data = encode_key(job_id), bytes(payload)

        def insert(conn: sqlite3.Connection) -> None:
            exists = conn.execute(
                "SELECT 1 FROM jobs WHERE queue = ?1 AND id = ?2 "
                "UNION ALL SELECT 1 FROM dead_letters WHERE queue = ?1 AND id = ?2",
                (self._stored, encoded),
            ).fetchone()
            if exists is None:
                conn.execute(
                    "INSERT INTO jobs (queue, id, seq, payload, state, available_at) "
                    "VALUES (?, ?, ?, ?, 'ready', 0)",  # ready at once, whatever the clocks say
                    (self._stored, encoded, _next_revision(conn), data),
                )

        await self._bus._transact(insert)
        return job_id

    async def claim(
        self,
        worker: str,
        *,
        on_dead_letter: Callable[[DeadLetter], Awaitable[None]] | None = None,
    ) -> Job | None:
        check_worker(worker)
        now = self._bus._clock()

        def take(conn: sqlite3.Connection) -> Job | DeadLetter | None:
            while True:
                row = conn.execute(DUE_JOB, (self._stored, now)).fetchone()
                if row is None:
                    return None
                encoded, state, attempt = str(row[0]), str(row[1]), int(row[2])
                options = self._seen(float(row[3]), int(row[4]))
                expires_at = now + options.lease
                if state == "claimed" and attempt >= options.max_deliver:
                    reason = lapsed_reason(attempt)
                    if on_dead_letter is None:
                        self._bury(conn, encoded, reason, now)
                        continue
                    # Announced outside the transaction, then buried (`_bury_lapsed`).
                    (payload,) = conn.execute(
                        "SELECT payload FROM jobs WHERE queue = ? AND id = ?",
                        (self._stored, encoded),
                    ).fetchone()
                    job_id = decode_key(encoded)
                    return DeadLetter(self.name, job_id, bytes(payload), reason, attempt, now)
                claimed = conn.execute(
                    "UPDATE jobs SET state = 'claimed', attempt = attempt + 1, worker = ?, "
                    "available_at = ? WHERE queue = ? AND id = ? RETURNING payload, attempt",
                    (worker, expires_at, self._stored, encoded),
                ).fetchone()
                return Job(
                    self.name,
                    decode_key(encoded),
                    bytes(claimed[0]),
                    int(claimed[1]),
                    worker,
                    expires_at,
                )

        while True:
            taken = await self._bus._transact(take)
            if isinstance(taken, DeadLetter) and on_dead_letter is not None:
                await on_dead_letter(taken)  # raising: the job stays due, for the next claim
                await self._bus._transact(self._bury_lapsed(taken))
                continue
            return taken if isinstance(taken, Job) else None

    def _bury_lapsed(self, dead: DeadLetter) -> Callable[[sqlite3.Connection], None]:
        """Bury the job a claim announced, if it is still that lapsed last delivery
        (a racing claim may have buried it first: it announced it too)."""
        encoded = encode_key(dead.id)

        def bury(conn: sqlite3.Connection) -> None:
            lapsed = conn.execute(
                "SELECT 1 FROM jobs WHERE queue = ? AND id = ? AND state = 'claimed' "
                "AND attempt = ? AND available_at <= ?",
                (self._stored, encoded, dead.attempt, dead.at),
            ).fetchone()
            if lapsed is not None:
                self._bury(conn, encoded, dead.reason, dead.at)

        return bury

    async def extend(self, job: Job) -> Job:
        now = self._bus._clock()
        expires_at = now

        def reschedule(conn: sqlite3.Connection, encoded: str) -> None:
            nonlocal expires_at
            expires_at = now + self._read_options(conn).lease
            self._reschedule(conn, encoded, expires_at)

        await self._settle(job, reschedule)
        return replace(job, lease_expires_at=expires_at)

    async def ack(self, job: Job) -> None:
        def delete(conn: sqlite3.Connection, encoded: str) -> None:
            conn.execute("DELETE FROM jobs WHERE queue = ? AND id = ?", (self._stored, encoded))

        await self._settle(job, delete)

    async def nak(self, job: Job, *, delay: float = 0.0, error: str | None = None) -> None:
        now = self._bus._clock()

        def ready(conn: sqlite3.Connection, encoded: str) -> None:
            if job.attempt >= self._read_options(conn).max_deliver:
                self._bury(conn, encoded, nakked_reason(job.attempt, error), now)
                return
            conn.execute(
                "UPDATE jobs SET state = 'ready', worker = '', available_at = ? "
                "WHERE queue = ? AND id = ?",
                (now + max(delay, 0.0), self._stored, encoded),
            )

        await self._settle(job, ready)

    async def term(self, job: Job, reason: str) -> None:
        now = self._bus._clock()
        await self._settle(job, lambda conn, encoded: self._bury(conn, encoded, reason, now))

    async def dead_letters(self) -> list[DeadLetter]:
        def read(conn: sqlite3.Connection) -> list[DeadLetter]:
            rows = conn.execute(
                "SELECT id, payload, reason, attempt, at FROM dead_letters WHERE queue = ? "
                "ORDER BY seq",
                (self._stored,),
            ).fetchall()
            return [
                DeadLetter(self.name, decode_key(r[0]), bytes(r[1]), r[2], int(r[3]), float(r[4]))
                for r in rows
            ]

        return await self._bus._run(read)

    async def depth(self) -> QueueDepth:
        now = self._bus._clock()

        def count(conn: sqlite3.Connection) -> QueueDepth:
            row = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(state = 'claimed' AND available_at > ?), 0) "
                "FROM jobs WHERE queue = ?",
                (now, self._stored),
            ).fetchone()
            total, in_flight = int(row[0]), int(row[1])
            return QueueDepth(total - in_flight, in_flight)

        return await self._bus._run(count)

    def _reschedule(self, conn: sqlite3.Connection, encoded: str, expires_at: float) -> None:
        conn.execute(
            "UPDATE jobs SET available_at = ? WHERE queue = ? AND id = ?",
            (expires_at, self._stored, encoded),
        )

    def _bury(self, conn: sqlite3.Connection, encoded: str, reason: str, now: float) -> None:
        """Move the job to `dead_letters` (inside the caller's transaction)."""
        row = conn.execute(
            "DELETE FROM jobs WHERE queue = ? AND id = ? RETURNING payload, attempt",
            (self._stored, encoded),
        ).fetchone()
        conn.execute(
            "INSERT OR REPLACE INTO dead_letters (queue, id, seq, payload, reason, attempt, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (self._stored, encoded, _next_revision(conn), row[0], reason, row[1], now),
        )

    async def _settle(self, job: Job, then: Callable[[sqlite3.Connection, str], None]) -> None:
        """Run `then` only if `job` is still the current delivery and its lease has not
        lapsed (nobody could have claimed it again), else `JobLeaseLost`; one transaction."""
        check_own(self.name, job)
        encoded = encode_key(job.id)
        now = self._bus._clock()

        def settle(conn: sqlite3.Connection) -> None:
            held = conn.execute(
                "SELECT 1 FROM jobs WHERE queue = ? AND id = ? AND state = 'claimed' "
                "AND attempt = ? AND available_at > ?",
                (self._stored, encoded, job.attempt, now),
            ).fetchone()
            if held is None:
                raise lease_lost(self.name, job)
            then(conn, encoded)

        await self._bus._transact(settle)


class SqliteBus:
    """The Bus on one SQLite file. Open it with `await SqliteBus.open(path)` (or
    `open_bus("sqlite:///path")`); close it with `aclose` or `async with`."""

    def __init__(
        self,
        path: Path,
        *,
        clock: Clock,
        namespace: str,
        url: str,
        poll_interval: float,
        busy_timeout: float,
        retention: float,
        synced: bool = True,
    ) -> None:
        self.url = url
        #: Whether each commit is synced to disk (see the module docstring).
        self.synced = synced
        self.path = path
        self.poll_interval = poll_interval
        self.busy_timeout = busy_timeout
        self.retention = retention
        self._clock = clock
        self.clock = clock  # public: callers compare lease expiries on the same clock
        self._prefix = f"{check_namespace(namespace)}:" if namespace else ""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tiller-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._cursors: dict[LocalSubscription, int] = {}
        self._wake = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None
        self._publishes = 0

    @classmethod
    async def open(
        cls,
        path: str | Path,
        *,
        clock: Clock = wall_clock,
        namespace: str = "",
        url: str | None = None,
        poll_interval: float = 0.05,
        busy_timeout: float = 5.0,
        retention: float = 60.0,
        synced: bool = True,
    ) -> SqliteBus:
        """Open (creating the file, its parent directories and the schema if needed; `~`
        is expanded, in the worker thread like every other file-system call). `synced`:
        see the module docstring (this connection's commits only)."""
        path = Path(path)
        bus = cls(
            path,
            clock=clock,
            namespace=namespace,
            url=url or f"sqlite:///{path}",
            poll_interval=poll_interval,
            busy_timeout=busy_timeout,
            retention=retention,
            synced=synced,
        )
        try:
            await bus._in_thread(bus._connect)
        except BaseException:
            bus._executor.shutdown(wait=False)
            raise
        return bus

    async def kv(self, bucket: str) -> SqliteKeyValue:
        self._check_open()
        return SqliteKeyValue(self, bucket, self._prefix + check_bucket(bucket))

    async def publish(self, subject: str, data: bytes) -> None:
        stored, payload = self._prefix + check_subject(subject), bytes(data)
        self._publishes += 1
        prune_before = time.time() - self.retention if self._publishes % _PRUNE_EVERY == 1 else None

        def insert(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO messages (subject, data, published_at) VALUES (?, ?, ?)",
                (stored, payload, time.time()),
            )
            if prune_before is not None:
                conn.execute("DELETE FROM messages WHERE published_at < ?", (prune_before,))

        await self._transact(insert)
        self._wake.set()

    async def subscribe(self, subject: str) -> LocalSubscription:
        check_subject(subject)

        def last_id(conn: sqlite3.Connection) -> int:
            row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'messages'")
            found = row.fetchone()
            return 0 if found is None else int(found[0])

        start = await self._run(last_id)
        self._check_open()
        subscription = LocalSubscription(subject, self._unsubscribe)
        self._cursors[subscription] = start
        if self._poller is None:
            self._poller = asyncio.get_running_loop().create_task(
                self._poll(), name=f"tiller-sqlite-poller {self.path}"
            )
        return subscription

    async def queue(
        self, name: str, *, lease: float | None = None, max_deliver: int | None = None
    ) -> SqliteJobQueue:
        self._check_open()
        check_queue_options(lease, max_deliver)
        stored = self._prefix + check_bucket(name)

        def upsert(conn: sqlite3.Connection) -> QueueOptions:
            # A value given is the queue's from now on; None keeps the row's (or, for a
            # new queue, the default).
            row = conn.execute(
                "INSERT INTO queues (queue, lease, max_deliver) "
                "VALUES (?1, COALESCE(?2, ?4), COALESCE(?3, ?5)) "
                "ON CONFLICT (queue) DO UPDATE SET lease = COALESCE(?2, lease), "
                "max_deliver = COALESCE(?3, max_deliver) RETURNING lease, max_deliver",
                (stored, lease, max_deliver, DEFAULT_LEASE, DEFAULT_MAX_DELIVER),
            ).fetchone()
            return QueueOptions(float(row[0]), int(row[1]))

        return SqliteJobQueue(self, name, stored, await self._transact(upsert))

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        for subscription in list(self._cursors):
            subscription.close()
        try:
            if self._poller is not None:
                await stop_task(self._poller)
        finally:
            # Cancelled while the poller ended: the connection is closed all the same.
            try:
                await self._in_thread(self._disconnect)
            finally:
                self._executor.shutdown(wait=False)

    async def __aenter__(self) -> SqliteBus:
        self._check_open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"SqliteBus({self.url!r}{', closed' if self._closed else ''})"

    # ── the worker thread ──

    def _connect(self) -> None:
        self.path = self.path.expanduser()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=self.busy_timeout)
        except (OSError, sqlite3.Error) as exc:
            # A path under a file, a directory not writable, a file that is a directory:
            # the caller's store URL is wrong, said in one line (never a traceback).
            raise StoreUnavailable(
                f"cannot open the SQLite store {self.path}: {_why_not(exc)}; give a "
                "sqlite:/// path whose directory exists or can be made, and is writable"
            ) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            self._enter_wal(conn)
            if not self.synced:
                conn.execute("PRAGMA synchronous = NORMAL")
            self._conn = conn
            self._transaction(self._migrate)
        except BaseException:
            self._conn = None
            conn.close()
            raise

    def _enter_wal(self, conn: sqlite3.Connection) -> None:
        """Switch the file to WAL. When processes open a new file at the same moment,
        SQLite answers "database is locked" at once to all but one of them (waiting could
        deadlock, so the busy timeout is not used): this tries again, with a growing pause,
        for up to the busy timeout."""
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.005
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.2)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        # (executescript would COMMIT first: the schema goes inside this transaction. No
        # statement of _SCHEMA, comments included, holds a semicolon.)
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute(
            "INSERT OR IGNORE INTO meta (name, value) VALUES ('schema_version', ?), "
            "('revision', 0)",
            (SCHEMA_VERSION,),
        )
        version = int(
            conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()[0]
        )
        if version == 1:
            # Schema 2: termed jobs leave `jobs` for `dead_letters`; claims use `jobs_due`.
            conn.execute(
                "INSERT OR IGNORE INTO dead_letters "
                "(queue, id, seq, payload, reason, attempt, at) "
                "SELECT queue, id, seq, payload, reason, attempt, 0 FROM jobs WHERE state = 'term'"
            )
            conn.execute("DELETE FROM jobs WHERE state = 'term'")
            conn.execute("DROP INDEX IF EXISTS jobs_order")
        if version < SCHEMA_VERSION:
            # Schema 3: a queue's lease and limit are its `queues` row (claims join it).
            # A queue of an older file had them per handle: it starts with the defaults.
            conn.execute(
                "INSERT OR IGNORE INTO queues (queue, lease, max_deliver) "
                "SELECT DISTINCT queue, ?, ? FROM jobs",
                (DEFAULT_LEASE, DEFAULT_MAX_DELIVER),
            )
            conn.execute(
                "UPDATE meta SET value = ? WHERE name = 'schema_version'", (SCHEMA_VERSION,)
            )
        elif version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has schema version {version}, newer than this tiller's "
                f"{SCHEMA_VERSION}: upgrade tiller to open it"
            )

    def _disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _transaction(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run `body` inside `BEGIN IMMEDIATE` … `COMMIT` (rolled back if it raises)."""
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = body(conn)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise BusClosed(f"{self.url} is closed")
        return self._conn

    # ── from the event loop ──

    async def _in_thread(self, call: Callable[[], T]) -> T:
        def translated() -> T:
            with _translate(self.path):
                return call()

        return await asyncio.get_running_loop().run_in_executor(self._executor, translated)

    async def _run(self, read: Callable[[sqlite3.Connection], T]) -> T:
        """A read, on the connection's thread (autocommit: one consistent snapshot per
        statement)."""
        self._check_open()
        return await self._in_thread(lambda: read(self._connection()))

    async def _transact(self, body: Callable[[sqlite3.Connection], T]) -> T:
        self._check_open()
        return await self._in_thread(lambda: self._transaction(body))

    def _check_open(self) -> None:
        if self._closed:
            raise BusClosed(f"{self.url} is closed")

    def _unsubscribe(self, subscription: LocalSubscription) -> None:
        self._cursors.pop(subscription, None)

    async def _poll(self) -> None:
        """Deliver new messages to the subscribers until the store closes."""
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_interval):
                    await self._wake.wait()
            self._wake.clear()
            if self._cursors:
                try:
                    await self._poll_once()
                except (StoreError, BusClosed):
                    # Locked, failing or closing: the next round tries again or stops. The
                    # subscribers stay open, as a NATS subscription survives a reconnect.
                    continue

    async def _poll_once(self) -> None:
        cursors = dict(self._cursors)
        subjects = sorted({self._prefix + sub.subject for sub in cursors})
        since = min(cursors.values())
        marks = ", ".join("?" * len(subjects))

        def read(conn: sqlite3.Connection) -> tuple[int, list[tuple[int, str, bytes]]]:
            conn.execute("BEGIN")  # one snapshot for both statements
            try:
                row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'messages'")
                found = row.fetchone()
                rows = conn.execute(
                    f"SELECT id, subject, data FROM messages WHERE id > ? "
                    f"AND subject IN ({marks}) ORDER BY id LIMIT {_POLL_BATCH}",
                    (since, *subjects),
                ).fetchall()
            finally:
                conn.execute("COMMIT")
            return (0 if found is None else int(found[0])), rows

        latest, rows = await self._run(read)
        # A full batch may stop short of `latest`: resume after its last row next time.
        reached = rows[-1][0] if len(rows) == _POLL_BATCH else latest
        for subscription, cursor in cursors.items():
            stored = self._prefix + subscription.subject
            for message_id, subject, data in rows:
                if message_id > cursor and subject == stored:
                    subscription.deliver(BusMessage(subscription.subject, bytes(data)))
            if subscription in self._cursors:
                self._cursors[subscription] = max(cursor, reached)


def _is_bus(bus: SqliteBus) -> Bus:
    """Type-level proof that SqliteBus satisfies the Bus protocol (checked by mypy)."""
    return bus


def _why_not(exc: BaseException) -> str:
    if isinstance(exc, FileExistsError | NotADirectoryError) and exc.filename:
        return f"{exc.filename} is in the way: it is a file, not a directory"
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return str(exc)
