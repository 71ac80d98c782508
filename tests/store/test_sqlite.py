"""SqliteBus beyond the contract: URLs, the file and its schema, locking, several stores and
several processes on one file."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from pathlib import Path

import pytest

from tiller.errors import UsageError
from tiller.store import (
    QueueOptions,
    RevisionConflict,
    SqliteBus,
    StoreError,
    StoreUnavailable,
    Subscription,
    open_bus,
)
from tiller.store._sqlite import DUE_JOB, SCHEMA_VERSION

from .._slow_to_end import SlowToEnd, cancel_the_stopper


def url_of(path: Path, query: str = "") -> str:
    return f"sqlite:///{path}{'?' + query if query else ''}"


async def wait_for_message(subscription: Subscription) -> bytes:
    async with asyncio.timeout(5):
        return (await anext(aiter(subscription))).data


# ── URLs and files ───────────────────────────────────────────────────────────────────


async def test_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    async with await open_bus("sqlite:///data/nested/rel.db") as bus:
        assert isinstance(bus, SqliteBus)
        await (await bus.kv("b")).put("k", b"v")
    assert (tmp_path / "data" / "nested" / "rel.db").is_file()


async def test_absolute_path(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "abs.db"
    url = f"sqlite:///{target}"
    assert url.startswith("sqlite:////")
    async with await open_bus(url) as bus:
        assert bus.url == url
    assert target.is_file()


async def test_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    async with await open_bus("sqlite:///~/.tiller/tiller.db") as bus:
        assert isinstance(bus, SqliteBus)
        assert bus.path == tmp_path / ".tiller" / "tiller.db"
    assert (tmp_path / ".tiller" / "tiller.db").is_file()


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://host/file.db",
        "sqlite://",
        "sqlite:///",
        "sqlite:///x.db?bogus=1",
        "sqlite:///x.db?poll_interval=soon",
        "sqlite:///x.db?busy_timeout=0",
        "memory://somewhere",
        "redis://localhost",
        "not a url",
    ],
)
async def test_bad_urls(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError):
        await open_bus(url)


async def test_bad_namespace(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        await open_bus(url_of(tmp_path / "x.db"), namespace="no spaces")


async def test_options_from_the_query(tmp_path: Path) -> None:
    url = url_of(tmp_path / "x.db", "poll_interval=0.01&busy_timeout=2&retention=30")
    async with await open_bus(url) as bus:
        assert isinstance(bus, SqliteBus)
        assert (bus.poll_interval, bus.busy_timeout, bus.retention) == (0.01, 2.0, 30.0)


@pytest.mark.parametrize(("synced", "level"), [(True, 2), (False, 1)])  # FULL, NORMAL
async def test_commits_are_synced_unless_asked_not_to(
    tmp_path: Path, synced: bool, level: int
) -> None:
    async with await open_bus(url_of(tmp_path / "x.db"), synced=synced) as bus:
        assert isinstance(bus, SqliteBus) and bus.synced is synced

        def synchronous(conn: sqlite3.Connection) -> int:
            return int(conn.execute("PRAGMA synchronous").fetchone()[0])

        # The store's own connection (the setting is per connection).
        assert await bus._run(synchronous) == level


async def test_schema_is_versioned_and_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    async with await open_bus(url_of(path)):
        pass
    with sqlite3.connect(path) as conn:
        version = conn.execute("SELECT value FROM meta WHERE name = 'schema_version'")
        assert version.fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    conn.close()


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    async with await open_bus(url_of(path)):
        pass
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = 99 WHERE name = 'schema_version'")
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        await open_bus(url_of(path))


SCHEMA_1_JOBS = """
CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE jobs (
    queue TEXT NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, payload BLOB NOT NULL,
    state TEXT NOT NULL, attempt INTEGER NOT NULL DEFAULT 0,
    worker TEXT NOT NULL DEFAULT '', available_at REAL NOT NULL,
    reason TEXT NOT NULL DEFAULT '', PRIMARY KEY (queue, id)
) WITHOUT ROWID;
CREATE INDEX jobs_order ON jobs (queue, seq);
INSERT INTO meta VALUES ('schema_version', 1), ('revision', 3);
INSERT INTO jobs VALUES ('q', 'dead', 1, x'70', 'term', 2, '', 0, 'bad input');
INSERT INTO jobs VALUES ('q', 'live', 2, x'71', 'ready', 0, '', 0, '');
"""


async def test_a_schema_1_file_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(SCHEMA_1_JOBS)
    conn.close()
    async with await open_bus(url_of(path)) as bus:
        queue = await bus.queue("q")
        assert [(d.id, d.payload, d.reason, d.attempt) for d in await queue.dead_letters()] == [
            ("dead", b"p", "bad input", 2)
        ]
        job = await queue.claim("w")
        assert job is not None and (job.id, job.payload) == ("live", b"q")
        assert await queue.claim("w") is None
    with sqlite3.connect(path) as conn:
        version = conn.execute("SELECT value FROM meta WHERE name = 'schema_version'")
        assert version.fetchone() == (SCHEMA_VERSION,) == (3,)
        indexes = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert "jobs_due" in indexes and "jobs_order" not in indexes and "queues" in indexes
    conn.close()


async def test_a_schema_2_file_is_migrated_its_queues_on_the_defaults(tmp_path: Path) -> None:
    """Schema 3 keeps a queue's lease and limit in `queues`; a schema 2 file had none
    (each handle had its own): its queues get the defaults, and claims go on."""
    path = tmp_path / "x.db"
    async with await open_bus(url_of(path)) as bus:
        await (await bus.queue("q", lease=2.0)).enqueue(b"p", job_id="j")
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE queues")
        conn.execute("UPDATE meta SET value = 2 WHERE name = 'schema_version'")
    conn.close()
    with sqlite3.connect(path) as conn:  # what schema 2 left: a job, no `queues`
        assert conn.execute("SELECT id FROM jobs").fetchall() == [("j",)]
    conn.close()
    async with await open_bus(url_of(path)) as bus:
        queue = await bus.queue("q")
        assert await queue.options() == QueueOptions(30.0, 5)
        job = await queue.claim("w")
        assert job is not None and job.id == "j"
    with sqlite3.connect(path) as conn:
        version = conn.execute("SELECT value FROM meta WHERE name = 'schema_version'")
        assert version.fetchone() == (3,)
    conn.close()


async def test_a_claim_reads_the_due_index_not_the_table(tmp_path: Path) -> None:
    """The claim's query, as SQLite plans it: a search of `jobs_due`, never a scan."""
    path = tmp_path / "x.db"
    async with await open_bus(url_of(path)) as bus:
        queue = await bus.queue("q")
        for n in range(50):
            await queue.enqueue(b"", job_id=f"j{n}")
    with sqlite3.connect(path) as conn:
        conn.execute("ANALYZE")
        plan = " / ".join(
            row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {DUE_JOB}", ("q", 1.0))
        )
    conn.close()
    assert "jobs_due" in plan and "SCAN" not in plan and "TEMP B-TREE" not in plan, plan


async def test_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    path.write_bytes(b"this is not a database, just some bytes " * 100)
    with pytest.raises(StoreError) as caught:
        await open_bus(url_of(path))
    assert isinstance(caught.value.__cause__, sqlite3.Error)


async def test_records_and_revisions_survive_reopening(tmp_path: Path) -> None:
    url = url_of(tmp_path / "x.db")
    async with await open_bus(url) as bus:
        kv = await bus.kv("b")
        first = await kv.put("k", b"v")
        await (await bus.queue("q")).enqueue(b"job", job_id="j")
    async with await open_bus(url) as bus:
        kv = await bus.kv("b")
        entry = await kv.get("k")
        assert entry is not None and (entry.value, entry.revision) == (b"v", first)
        assert await kv.put("other", b"") > first
        job = await (await bus.queue("q")).claim("w")
        assert job is not None and job.id == "j"


# ── locking ──────────────────────────────────────────────────────────────────────────


async def test_a_lock_held_past_busy_timeout_is_store_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    async with await open_bus(url_of(path, "busy_timeout=0.05")) as bus:
        kv = await bus.kv("b")
        await kv.put("k", b"v")
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreUnavailable) as caught:
                await kv.put("k", b"blocked")
            assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
            entry = await kv.get("k")  # WAL: reads go on while another holds the write lock
            assert entry is not None and entry.value == b"v"
            holder.execute("ROLLBACK")
            await kv.put("k", b"free again")
        finally:
            holder.close()


async def test_a_waiting_write_does_not_block_the_event_loop(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    async with await open_bus(url_of(path, "busy_timeout=30")) as bus:
        kv = await bus.kv("b")
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            write = asyncio.create_task(kv.put("k", b"v"))
            ticks = 0
            for _ in range(5):
                await asyncio.sleep(0.001)
                ticks += 1
            assert ticks == 5 and not write.done()  # the loop ran while the write waited
            holder.execute("COMMIT")
            async with asyncio.timeout(10):
                revision = await write
        finally:
            holder.close()
        entry = await kv.get("k")
        assert entry is not None and entry.revision == revision


# ── several stores on one file ────────────────────────────────────────────────────────


async def test_pubsub_between_two_buses_on_one_file(tmp_path: Path) -> None:
    url = url_of(tmp_path / "x.db", "poll_interval=0.005")
    async with await open_bus(url) as listener, await open_bus(url) as speaker:
        subscription = await listener.subscribe("runs.r1.control")
        await speaker.publish("runs.r1.other", b"not this")
        await speaker.publish("runs.r1.control", b"cancel")
        assert await wait_for_message(subscription) == b"cancel"
        await speaker.publish("runs.r1.control", b"steer")
        assert await wait_for_message(subscription) == b"steer"


async def test_namespaces_keep_buses_apart(tmp_path: Path) -> None:
    url = url_of(tmp_path / "x.db", "poll_interval=0.005")
    async with await open_bus(url, namespace="a") as a, await open_bus(url, namespace="b") as b:
        await (await a.kv("bucket")).put("k", b"a")
        assert await (await b.kv("bucket")).get("k") is None
        await (await a.queue("q")).enqueue(b"a")
        assert await (await b.queue("q")).claim("w") is None
        heard_by_b = await b.subscribe("s")
        heard_by_a = await a.subscribe("s")
        await a.publish("s", b"for a")
        await b.publish("s", b"for b")
        assert await wait_for_message(heard_by_b) == b"for b"
        assert await wait_for_message(heard_by_a) == b"for a"


async def test_old_messages_are_pruned(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    async with await open_bus(url_of(path)) as bus:
        await bus.publish("s", b"warm up")
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO messages (subject, data, published_at) VALUES ('s', ?, 0)",
            [(b"ancient",)] * 10,
        )
    conn.close()
    async with await open_bus(url_of(path, "retention=3600")) as bus:
        await bus.publish("s", b"fresh")  # a store's first publish prunes
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT data FROM messages ORDER BY id").fetchall()
    conn.close()
    assert rows == [(b"warm up",), (b"fresh",)]


# ── several processes on one file ────────────────────────────────────────────────────

WORKER = r"""
import asyncio, json, sys
from tiller.store import RevisionConflict, open_bus

async def main(url: str, name: str, rounds: int) -> None:
    async with await open_bus(url) as bus:
        kv = await bus.kv("race")
        await kv.put(f"ready-{name}", b"")
        while await kv.get("go") is None:
            await asyncio.sleep(0.002)
        won, revisions = [], []
        for r in range(rounds):
            if await kv.acquire(f"round-{r}", name, 600) is not None:
                won.append(r)
            while True:
                entry = await kv.get("counter")
                value = str(int(entry.value) + 1).encode()
                try:
                    revisions.append(await kv.update("counter", value, expected=entry.revision))
                    break
                except RevisionConflict:
                    pass
        queue = await bus.queue("jobs", lease=600)
        jobs = []
        while (job := await queue.claim(name)) is not None:
            jobs.append(job.id)
            await queue.ack(job)
        print(json.dumps({"won": won, "revisions": revisions, "jobs": jobs}))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


async def test_processes_race_on_one_file(tmp_path: Path) -> None:
    """Real interpreters: each round's lease has one winner, no increment is lost, each
    job is taken once."""
    processes, rounds, jobs = 3, 40, 30
    url = url_of(tmp_path / "shared.db")
    async with await open_bus(url) as bus:
        kv = await bus.kv("race")
        await kv.put("counter", b"0")
        queue = await bus.queue("jobs")
        for n in range(jobs):
            await queue.enqueue(b"", job_id=f"job-{n}")
        children = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                WORKER,
                url,
                f"p{n}",
                str(rounds),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            for n in range(processes)
        ]
        try:
            async with asyncio.timeout(120):
                while len(await kv.keys("ready-")) < processes:
                    if any(child.returncode is not None for child in children):
                        break
                    await asyncio.sleep(0.005)
                await kv.put("go", b"")
                outputs = [await child.communicate() for child in children]
        finally:
            for child in children:
                if child.returncode is None:
                    child.kill()
                    await child.wait()
        for child, (_, err) in zip(children, outputs, strict=True):
            assert child.returncode == 0, err.decode()
        results = [json.loads(out) for out, _ in outputs]

        winners = sorted(r for result in results for r in result["won"])
        assert winners == list(range(rounds))  # every round exactly once
        revisions = [rev for result in results for rev in result["revisions"]]
        assert len(set(revisions)) == processes * rounds
        for result in results:  # each process saw its own writes in increasing order
            assert result["revisions"] == sorted(result["revisions"])
        counter = await kv.get("counter")
        assert counter is not None and counter.value == str(processes * rounds).encode()
        taken = sorted(job_id for result in results for job_id in result["jobs"])
        assert taken == sorted(f"job-{n}" for n in range(jobs))


async def test_update_conflicts_across_buses(tmp_path: Path) -> None:
    url = url_of(tmp_path / "x.db")
    async with await open_bus(url) as one, await open_bus(url) as two:
        kv_one, kv_two = await one.kv("b"), await two.kv("b")
        revision = await kv_one.put("k", b"1")
        await kv_two.update("k", b"2", expected=revision)
        with pytest.raises(RevisionConflict):
            await kv_one.update("k", b"lost", expected=revision)


def test_switching_a_new_file_to_wal_retries_a_lock_it_may_not_wait_for(tmp_path: Path) -> None:
    """Processes opening a new file at once: SQLite may answer "database is locked" at
    once to all but one (waiting could deadlock). Seen in CI: the open is tried again."""
    import sqlite3

    from tiller.store import SqliteBus

    class Contended:
        def __init__(self, refusals: int) -> None:
            self.refusals = refusals
            self.tries = 0

        def execute(self, sql: str) -> None:
            self.tries += 1
            if self.tries <= self.refusals:
                raise sqlite3.OperationalError("database is locked")

    bus = SqliteBus.__new__(SqliteBus)
    bus.busy_timeout = 5.0
    busy = Contended(refusals=3)
    bus._enter_wal(busy)  # type: ignore[arg-type]
    assert busy.tries == 4
    bus.busy_timeout = 0.0
    with pytest.raises(sqlite3.OperationalError):
        bus._enter_wal(Contended(refusals=1))  # type: ignore[arg-type]


async def test_aclose_cancelled_while_the_poller_ends_ends_cancelled_and_disconnects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Law 8: a cancellation of `aclose()`'s caller is not swallowed; the connection is
    closed all the same."""
    slow = SlowToEnd()
    bus = await open_bus(f"sqlite:///{tmp_path / 'bus.db'}?poll_interval=0.01")
    assert isinstance(bus, SqliteBus)
    monkeypatch.setattr(bus, "_poll_once", slow.block)
    await bus.subscribe("s")
    await slow.entered.wait()
    await cancel_the_stopper(slow, asyncio.create_task(bus.aclose()))
    assert bus._conn is None


@pytest.mark.parametrize("shape", ["under a file", "is a directory"])
async def test_a_path_that_cannot_be_a_store_is_one_clear_error(tmp_path: Path, shape: str) -> None:
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    path = tmp_path / ("afile/x.db" if shape == "under a file" else "adir")
    with pytest.raises(StoreUnavailable, match=r"cannot open the SQLite store .*: "):
        await open_bus(url_of(path))
