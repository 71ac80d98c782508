"""NATS-specific behaviour of the Bus, against the real server on 127.0.0.1:4222.

The contract suite (`test_contract.py`) covers what every backend shares; here: the
payload-limit path through the object store, namespaces, two connections racing,
reconnects (through a local TCP proxy the test can cut), and cleanup of the test's
streams so the shared server does not fill up. `asyncio.timeout` is a hang guard only.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import nats
import nats.errors
import pytest
from nats.aio.msg import Msg

from tiller.store import (
    BusClosed,
    DeadLetter,
    JobLeaseLost,
    RevisionConflict,
    StoreUnavailable,
)
from tiller.store._nats import NatsBus

from .._tcp_proxy import TcpProxy
from .conftest import NATS_URL, FakeClock

pytestmark = pytest.mark.filterwarnings("error")

MiB = 1024 * 1024


def _namespace() -> str:
    return f"tn{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def open_nats() -> AsyncIterator[Callable[..., Awaitable[NatsBus]]]:
    """Opens stores (each in a fresh namespace unless given one); at the end deletes every
    namespace's streams and closes the stores."""
    opened: list[NatsBus] = []

    async def open_one(
        namespace: str | None = None, url: str = NATS_URL, **options: Any
    ) -> NatsBus:
        async with asyncio.timeout(10):
            bus = await NatsBus.connect(
                url,
                namespace=namespace or _namespace(),
                **options,
            )
        opened.append(bus)
        return bus

    yield open_one
    async with asyncio.timeout(30):
        namespaces = {bus._namespace for bus in opened}
        for namespace in namespaces:
            async with await NatsBus.connect(NATS_URL, namespace=namespace) as cleaner:
                await cleaner.delete_namespace()
        for bus in opened:
            await bus.aclose()


async def _stream_names(prefix: str) -> list[str]:
    nc = await nats.connect(NATS_URL)
    try:
        names = await NatsBus._stream_names(nc.jetstream())
        return sorted(name for name in names if prefix in name)
    finally:
        await nc.close()


async def _object_chunks(stream: str) -> int:
    """Messages in an object store's stream (chunks and live metadata)."""
    nc = await nats.connect(NATS_URL)
    try:
        info = await nc.jetstream().stream_info(stream)
        return int(info.state.messages)
    finally:
        await nc.close()


# ── the payload limit ────────────────────────────────────────────────────────────────


async def test_max_payload_comes_from_the_server(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    bus = await open_nats()
    nc = await nats.connect(NATS_URL)
    try:
        assert bus.max_payload == nc.max_payload == MiB  # the server's default
    finally:
        await nc.close()


async def test_a_large_record_round_trips_with_compare_and_set(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    bus = await open_nats()
    kv = await bus.kv("big")
    first = bytes(range(256)) * (9 * 1024)  # 2.25 MiB, over the limit
    second = b"x" * (3 * MiB)
    assert len(first) > 2 * MiB

    revision = await kv.put("run/1", first)
    entry = await kv.get("run/1")
    assert entry is not None and entry.value == first and entry.revision == revision

    updated = await kv.update("run/1", second, expected=revision)
    assert updated > revision
    with pytest.raises(RevisionConflict) as conflict:
        await kv.update("run/1", first, expected=revision)  # stale: loses
    assert conflict.value.actual == updated
    entry = await kv.get("run/1")
    assert entry is not None and entry.value == second and entry.revision == updated
    with pytest.raises(RevisionConflict):
        await kv.create("run/1", first)
    assert await kv.keys() == ["run/1"]

    # Only the live object's chunks remain: replaced and rejected objects were removed.
    objects = f"OBJ_{bus._namespace}-big"
    chunks_of_second = -(-len(second) // (128 * 1024))
    assert await _object_chunks(objects) == chunks_of_second + 1  # + its metadata

    # Small again: the large object goes; then delete leaves nothing behind.
    small = await kv.update("run/1", b"small", expected=updated)
    assert await _object_chunks(objects) == 0
    big_again = await kv.update("run/1", first, expected=small)
    await kv.delete("run/1", expected=big_again)
    assert await kv.get("run/1") is None
    assert await _object_chunks(objects) == 0
    assert await kv.create("run/1", second) > big_again
    entry = await kv.get("run/1")
    assert entry is not None and entry.value == second


async def test_a_large_job_payload_goes_through_the_queue(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    bus = await open_nats(clock=FakeClock())
    queue = await bus.queue("work")
    payload = b"p" * (2 * MiB + 1)
    await queue.enqueue(payload, job_id="big")
    job = await queue.claim("w1")
    assert job is not None and job.payload == payload
    await queue.ack(job)
    assert await queue.claim("w1") is None


async def test_a_large_jobs_lapsed_dead_letter_is_announced_with_its_payload(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    """The claim's `on_dead_letter` gets the job's payload, not the empty message that
    points at its object."""
    bus = await open_nats(clock=FakeClock(), claim_wait=0.1)
    queue = await bus.queue("work", lease=1.0, max_deliver=1)
    payload = b"p" * (2 * MiB + 1)
    await queue.enqueue(payload, job_id="big")
    assert await queue.claim("w1") is not None  # and w1 dies holding it
    told: list[DeadLetter] = []

    async def tell(dead: DeadLetter) -> None:
        told.append(dead)

    async with asyncio.timeout(15):
        while not told:
            assert await queue.claim("w2", on_dead_letter=tell) is None
    assert [(d.id, d.payload, d.attempt) for d in told] == [("big", payload, 1)]
    (dead,) = await queue.dead_letters()
    assert dead.payload == payload


async def test_a_message_that_is_not_a_job_is_dead_lettered_and_never_blocks(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    bus = await open_nats(clock=FakeClock(), claim_wait=0.1)
    queue = await bus.queue("work")
    # Something other than tiller publishes on the queue's subject: no job header.
    await bus._js.publish(f"{queue._subject}.stray", b"stray")
    await queue.enqueue(b"real", job_id="j1")
    job = await queue.claim("w1")
    assert job is not None and (job.id, job.payload) == ("j1", b"real")
    await queue.ack(job)
    (dead,) = await queue.dead_letters()
    assert dead.payload == b"stray" and dead.reason.startswith("not a tiller job")


async def test_the_lease_and_limit_are_the_consumers(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    namespace = _namespace()
    one, two = await open_nats(namespace), await open_nats(namespace)
    first = await one.queue("work", lease=7.0, max_deliver=3)
    info = await one._js.consumer_info(f"TQ_{namespace}-work", "tiller")
    # The server delivers without limit; the limit is the claim's, kept in the consumer.
    assert (info.config.ack_wait, info.config.max_deliver) == (7.0, -1)
    assert info.config.description == "tiller job queue: max_deliver=3"
    # Another process opening the queue with other options changes them for everyone.
    queue = await two.queue("work", lease=11.0, max_deliver=2)
    assert (queue.lease, queue.max_deliver) == (11.0, 2)
    info = await one._js.consumer_info(f"TQ_{namespace}-work", "tiller")
    assert (info.config.ack_wait, info.config.max_deliver) == (11.0, -1)
    assert info.config.description == "tiller job queue: max_deliver=2"
    # The first handle reads them back from the consumer (on its next use).
    await asyncio.sleep(0.6)
    assert await first.claim("w1") is None
    assert (first.lease, first.max_deliver) == (11.0, 2)


# ── two connections, namespaces ──────────────────────────────────────────────────────


async def test_a_second_connection_sees_writes_and_loses_a_race(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    namespace = _namespace()
    one = await open_nats(namespace)
    two = await open_nats(namespace)
    kv_one, kv_two = await one.kv("checkpoints"), await two.kv("checkpoints")

    revision = await kv_one.create("run-1", b"v1")
    seen = await kv_two.get("run-1")
    assert seen is not None and (seen.value, seen.revision) == (b"v1", revision)

    # Both read revision `revision`; one update wins, the other gets the conflict.
    results = await asyncio.gather(
        kv_one.update("run-1", b"one", expected=revision),
        kv_two.update("run-1", b"two", expected=revision),
        return_exceptions=True,
    )
    wins = [result for result in results if isinstance(result, int)]
    losses = [result for result in results if isinstance(result, RevisionConflict)]
    assert len(wins) == 1 and len(losses) == 1
    assert losses[0].expected == revision and losses[0].actual in (wins[0], None)
    final = await kv_one.get("run-1")
    assert final is not None and final.revision == wins[0]

    # A lease taken on one connection is refused on the other.
    clock_lease = await kv_one.acquire("lock", "a", 30)
    assert clock_lease is not None
    assert await kv_two.acquire("lock", "b", 30) is None


async def test_two_workers_on_two_connections_claim_a_job_once(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    namespace, clock = _namespace(), FakeClock()
    one = await open_nats(namespace, clock=clock)
    two = await open_nats(namespace, clock=clock)
    await (await one.queue("jobs")).enqueue(b"payload", job_id="j1")
    queues = [await one.queue("jobs"), await two.queue("jobs")]
    claims = await asyncio.gather(*(q.claim(f"w{i}") for i, q in enumerate(queues)))
    assert sorted(job.id if job else "" for job in claims) == ["", "j1"]


async def test_namespaces_isolate(open_nats: Callable[..., Awaitable[NatsBus]]) -> None:
    first, second = await open_nats(), await open_nats()
    await (await first.kv("shared-name")).put("k", b"first")
    assert await (await second.kv("shared-name")).get("k") is None
    assert await (await second.kv("shared-name")).keys() == []

    received: list[bytes] = []
    subscription = await second.subscribe("run.r1.control")
    await first.publish("run.r1.control", b"not for you")
    await second.publish("run.r1.control", b"yours")
    async with asyncio.timeout(5):
        async for message in subscription:
            received.append(message.data)
            break
    await subscription.aclose()
    assert received == [b"yours"]


# ── closing and cleanup ──────────────────────────────────────────────────────────────


async def test_use_after_close_raises_and_close_is_idempotent(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    bus = await open_nats()
    kv = await bus.kv("b")
    await bus.aclose()
    await bus.aclose()
    with pytest.raises(BusClosed):
        await kv.get("k")
    with pytest.raises(BusClosed):
        await bus.kv("b")
    with pytest.raises(BusClosed):
        await bus.publish("s", b"")


async def test_delete_namespace_removes_its_streams_only(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    doomed, kept = await open_nats(), await open_nats()
    for bus in (doomed, kept):
        await (await bus.kv("b")).put("big", b"x" * (2 * MiB))
        await (await bus.queue("q")).enqueue(b"job")
    removed = await doomed.delete_namespace()
    assert sorted(removed) == await _stream_names_expected(doomed._namespace)
    assert await _stream_names(doomed._namespace) == []
    assert await _stream_names(kept._namespace) == await _stream_names_expected(kept._namespace)


async def test_two_teardowns_of_one_namespace_at_once_both_succeed(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    """A stream deleted by someone else between the listing and its deletion is deleted:
    two processes tearing one namespace down together (or another namespace's streams
    going meanwhile, which shifts the listing's pages) must not fail either."""
    one = await open_nats()
    two = await open_nats(one._namespace)
    for name in ("a", "b", "c"):
        await (await one.kv(name)).put("k", b"v")
    await asyncio.gather(one.delete_namespace(), two.delete_namespace())
    assert await _stream_names(one._namespace) == []


async def _stream_names_expected(namespace: str) -> list[str]:
    return sorted([f"KV_{namespace}-b", f"OBJ_{namespace}-b", f"TQ_{namespace}-q"])


async def test_an_unreachable_server_fails_fast_as_unavailable() -> None:
    async with asyncio.timeout(15):
        with pytest.raises(StoreUnavailable):
            await NatsBus.connect("nats://127.0.0.1:1", namespace=_namespace())


# ── reconnects ───────────────────────────────────────────────────────────────────────


async def test_reconnect_buffers_publishes_and_fails_jetstream_calls_meanwhile(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    """Documented behaviour: while the connection is down, a core publish is buffered by
    the client and delivered after the reconnect; a KV call raises `StoreUnavailable` once
    its request timeout passes. After the reconnect everything works again."""
    proxy = TcpProxy()
    await proxy.start()
    namespace = _namespace()
    flaky = await open_nats(namespace, url=f"nats://127.0.0.1:{proxy.port}", request_timeout=0.5)
    steady = await open_nats(namespace)
    kv = await flaky.kv("b")
    await kv.put("k", b"before")
    subscription = await steady.subscribe("events")

    async with asyncio.timeout(20):
        await proxy.cut()
        await flaky._disconnected.wait()
        await flaky.publish("events", b"sent while down")
        with pytest.raises(StoreUnavailable):
            await kv.put("k", b"during")

        await proxy.start()  # same port: the client's next attempt gets through
        await flaky._connected.wait()
        async for message in subscription:
            assert message.data == b"sent while down"
            break
        await kv.put("k", b"after")
        entry = await (await steady.kv("b")).get("k")
        assert entry is not None and entry.value == b"after"
    await subscription.aclose()
    await proxy.cut()


async def test_a_claim_while_the_server_is_away_is_unavailable_not_empty(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    """A fetch that gets no answer because the link is down raises `StoreUnavailable`
    (a worker must stop claiming, not conclude the queue is empty); after the reconnect
    the same queue handle claims again."""
    proxy = TcpProxy()
    await proxy.start()
    namespace = _namespace()
    flaky = await open_nats(
        namespace, url=f"nats://127.0.0.1:{proxy.port}", request_timeout=0.5, claim_wait=0.1
    )
    steady = await open_nats(namespace)
    queue = await flaky.queue("work")
    await (await steady.queue("work")).enqueue(b"p", job_id="j1")

    async with asyncio.timeout(30):
        await proxy.cut()
        await flaky._disconnected.wait()
        with pytest.raises(StoreUnavailable):
            await queue.claim("w1")
        await proxy.start()
        await flaky._connected.wait()
        job = None
        while job is None:
            job = await queue.claim("w1")
        assert job.id == "j1"
        await queue.ack(job)
    await proxy.cut()


async def test_a_late_delivery_left_from_a_timed_out_claim_is_not_handed_out_stale(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    """A claim's fetch that times out can still get its message a moment later: nats-py
    keeps it in the subscription's pending queue and the next fetch returns it at once,
    however old it is. Here a pull request of worker one's handle is answered while nobody
    waits for it (as when the server's answer loses the race with the local timeout); its
    lease lapses, worker two gets the job; worker one's next claim must not get it too."""
    namespace = _namespace()
    one = await open_nats(namespace, claim_wait=0.2)
    two = await open_nats(namespace, claim_wait=0.2)
    q1 = await one.queue("work", lease=1.0)
    q2 = await two.queue("work", lease=1.0)
    await q1.enqueue(b"payload", job_id="j1")
    # The lingering pull request, answered into q1's inbox with nobody waiting.
    await one._nc.publish(q1._sub._nms, b'{"batch":1}', reply=q1._sub._deliver)
    await asyncio.sleep(1.3)  # its AckWait lapses on the server
    assert q1._sub.pending_msgs == 1  # the late delivery waits for q1's next fetch
    theirs = await q2.claim("w2")
    assert theirs is not None and (theirs.id, theirs.attempt) == ("j1", 2)
    mine = await q1.claim("w1")
    assert mine is None, f"j1 is held by w2 and was handed to w1 too: {mine}"
    await q2.ack(theirs)


async def test_an_extend_while_the_server_is_away_is_unavailable_not_held(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    """`in_progress` is a core publish, which the client buffers while reconnecting: an
    extend that only sends it 'succeeds' and moves this process's fence ahead while the
    server's AckWait runs out, so the job is another worker's and this one still acks it.
    An extend the server has not confirmed must raise `StoreUnavailable`."""
    proxy = TcpProxy()
    await proxy.start()
    namespace = _namespace()
    flaky = await open_nats(
        namespace, url=f"nats://127.0.0.1:{proxy.port}", request_timeout=0.5, claim_wait=0.1
    )
    queue = await flaky.queue("work", lease=5.0)
    await queue.enqueue(b"p", job_id="j1")
    job = await queue.claim("w1")
    assert job is not None
    async with asyncio.timeout(20):
        await proxy.cut()
        await flaky._disconnected.wait()
        with pytest.raises(StoreUnavailable):
            await queue.extend(job)


async def test_a_shorter_lease_set_by_another_process_is_the_fence_of_every_handle(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    """The lease is the one consumer's AckWait, and the last `queue()` call sets it for every
    worker: a handle opened before with a longer lease must not go on fencing with its own
    (it would ack a job the server already gave to another worker)."""
    namespace = _namespace()
    one = await open_nats(namespace, claim_wait=0.2)
    two = await open_nats(namespace, claim_wait=0.2)
    q1 = await one.queue("work", lease=30.0)
    await q1.enqueue(b"p", job_id="j1")
    q2 = await two.queue("work", lease=1.0)  # now the consumer's AckWait for everyone
    mine = await q1.claim("w1")
    assert mine is not None
    await asyncio.sleep(1.3)
    theirs = None
    async with asyncio.timeout(10):
        while theirs is None:
            theirs = await q2.claim("w2")
    assert (theirs.id, theirs.attempt) == ("j1", 2)
    with pytest.raises(JobLeaseLost):
        await q1.ack(mine)  # w1's delivery lapsed on the server: j1 is w2's
    await q2.ack(theirs)


async def test_a_stale_delivery_past_the_last_attempt_is_still_dead_lettered(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    """A delivery past the last attempt that waited in the pending queue past its lease is
    dead-lettered like a fresh one (not dropped to wait for the next redelivery)."""
    queue = await (await open_nats(claim_wait=0.2)).queue("work", lease=1.0, max_deliver=1)
    await queue.enqueue(b"p", job_id="j1")
    assert await queue.claim("w1") is not None
    await asyncio.sleep(1.3)  # attempt 1's lease lapses
    # The redelivery answers a pull request nobody waits for, and waits past its lease.
    await queue._bus._nc.publish(queue._sub._nms, b'{"batch":1}', reply=queue._sub._deliver)
    await asyncio.sleep(1.3)
    assert queue._sub.pending_msgs == 1
    assert await queue.claim("w1") is None
    (dead,) = await queue.dead_letters()
    assert (dead.id, dead.attempt) == ("j1", 1) and "lapsed" in dead.reason


async def test_a_dead_letter_that_fails_to_be_written_is_not_lost(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    """If the claim that got the delivery after the last attempt cannot dead-letter it
    (NATS went away, or the worker died), the job must be delivered again and
    dead-lettered then, not be neither queued nor dead (the server's MaxDeliver was once
    the queue's limit plus one, so that delivery was its last)."""
    proxy = TcpProxy()
    await proxy.start()
    flaky = await open_nats(
        url=f"nats://127.0.0.1:{proxy.port}", request_timeout=0.5, claim_wait=0.2
    )
    queue = await flaky.queue("work", lease=1.0, max_deliver=1)
    await queue.enqueue(b"p", job_id="j1")
    assert await queue.claim("w1") is not None
    await asyncio.sleep(1.3)  # attempt 1's lease lapses
    # The redelivery (past the last attempt) reaches this handle, then the link goes.
    await flaky._nc.publish(queue._sub._nms, b'{"batch":1}', reply=queue._sub._deliver)
    await asyncio.sleep(0.2)
    assert queue._sub.pending_msgs == 1
    async with asyncio.timeout(30):
        await proxy.cut()
        await flaky._disconnected.wait()
        with pytest.raises(StoreUnavailable):
            await queue.claim("w1")  # it cannot write the dead letter
        await proxy.start()
        await flaky._connected.wait()
        dead: list[DeadLetter] = []
        claimed = []
        for _ in range(20):  # ten leases of claims
            claimed.append(await queue.claim("sweeper"))
            if dead := list(await queue.dead_letters()):
                break
            await asyncio.sleep(0.3)
    await proxy.cut()
    assert claimed == [None] * len(claimed)
    assert [letter.id for letter in dead] == ["j1"]


# ── known ids, dead letters written twice, missing payloads (issue 16) ─────────────────


async def _shorten_duplicate_window(bus: NatsBus, stream: str) -> None:
    """Make `stream`'s duplicate window (Nats-Msg-Id dedupe) tiny, as if its two minutes
    had gone by: a guard that rests on that window alone stops working here."""
    info = await bus._js.stream_info(stream)
    await bus._js.update_stream(replace(info.config, duplicate_window=0.1))
    await asyncio.sleep(0.3)


async def test_an_enqueue_retried_after_the_duplicate_window_is_still_refused(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    bus = await open_nats(claim_wait=0.2)
    queue = await bus.queue("work", lease=5.0)
    await queue.enqueue(b"first", job_id="j1")
    await queue.enqueue(b"other", job_id="j2")
    await _shorten_duplicate_window(bus, queue._stream)
    assert await queue.enqueue(b"retried", job_id="j1") == "j1"  # still waiting: refused
    first = await queue.claim("w1")
    assert first is not None and (first.id, first.payload) == ("j1", b"first")
    assert await queue.enqueue(b"retried", job_id="j1") == "j1"  # claimed: refused
    second = await queue.claim("w1")
    assert second is not None and second.id == "j2"  # enqueue order kept
    assert await queue.claim("w1") is None, "j1 was enqueued twice"
    await queue.ack(first)
    await queue.ack(second)


async def test_a_dead_letter_written_twice_is_recorded_once(
    open_nats: Callable[..., Awaitable[NatsBus]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker dies between writing the dead letter and terming the message: the
    message is delivered again, and dead-lettered again, past any duplicate window."""
    bus = await open_nats(claim_wait=0.2)
    queue = await bus.queue("work", lease=1.0, max_deliver=1)
    await queue.enqueue(b"poison", job_id="j1")
    job = await queue.claim("w1")
    assert job is not None

    async def dies(self: Msg, delay: float | None = None) -> None:
        raise nats.errors.ConnectionClosedError

    with monkeypatch.context() as patch:
        patch.setattr(Msg, "term", dies)
        with pytest.raises(StoreUnavailable):
            await queue.term(job, "cannot parse")
    await _shorten_duplicate_window(bus, queue._dead_stream)
    await asyncio.sleep(1.0)  # its lease lapses: delivered again, past the limit
    async with asyncio.timeout(10):
        while (await bus._js.stream_info(queue._stream)).state.messages != 0:
            assert await queue.claim("sweeper") is None
    dead = await queue.dead_letters()
    assert [(d.id, d.reason, d.attempt) for d in dead] == [("j1", "cannot parse", 1)]
    assert await queue.enqueue(b"again", job_id="j1") == "j1"  # dead: still refused
    assert await queue.claim("w1") is None


async def test_a_large_payload_whose_object_is_missing_is_dead_lettered(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    bus = await open_nats(clock=FakeClock(), claim_wait=0.2)
    queue = await bus.queue("work")
    await queue.enqueue(b"p" * (2 * MiB), job_id="big")
    await queue.enqueue(b"small", job_id="next")
    await bus._js.purge_stream(f"OBJ_{queue._stream}")  # the object store lost it
    job = await queue.claim("w1")
    assert job is not None and job.id == "next", f"handed out without its payload: {job}"
    await queue.ack(job)
    (dead,) = await queue.dead_letters()
    assert (dead.id, dead.payload, dead.attempt) == ("big", b"", 1)
    assert "payload is missing" in dead.reason


async def test_many_processes_opening_one_new_bucket_at_once_all_get_it() -> None:
    """Each connection looks the bucket up, finds none and creates it; the server refuses
    the creates that lose the race ("subjects overlap with an existing stream"). That is
    not an error: the bucket is there. (A race: many buckets at once, so it shows before the fix;
    each round's connections are closed and its namespace deleted before the next.)"""
    for _ in range(10):
        namespace = _namespace()
        async with asyncio.timeout(30):
            buses = [await NatsBus.connect(NATS_URL, namespace=namespace) for _ in range(6)]
            try:
                opened = await asyncio.gather(
                    *(bus.kv(f"race{n}") for n in range(10) for bus in buses),
                    return_exceptions=True,
                )
                failed = [repr(exc) for exc in opened if isinstance(exc, BaseException)]
                assert failed == []
                await (await buses[0].kv("race")).put("k", b"v")
                entry = await (await buses[-1].kv("race")).get("k")
                assert entry is not None and entry.value == b"v"
            finally:
                await buses[0].delete_namespace()
                for bus in buses:
                    await bus.aclose()


async def test_listing_keys_ends_while_the_bucket_is_being_written(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    """A fleet's checkpoint bucket is written all the time, and a scan's consumer is
    delivered those writes too: a listing that waited for "nothing pending" never ended
    (found by the 1,000-run chaos batch: recoveries hung taking their lease epoch, which
    lists the run's call records). Every key there from start to end is listed."""
    bus = await open_nats()
    kv = await bus.kv("busy")
    keys = [f"run-{n:03d}/calls/c{n}" for n in range(200)]
    for key in keys:
        await kv.put(key, b"0")
    for gone in ("gone/1", "gone/2"):  # a deleted record's marker is no key
        await kv.put(gone, b"0")
        await kv.delete(gone)
    writing, stop = asyncio.Event(), asyncio.Event()

    async def rewrite() -> None:
        # Stopped by an event, not a cancel: on Python 3.11 nats-py's request
        # (`asyncio.wait_for`) can swallow a cancel that races its reply.
        n = 0
        while not stop.is_set():
            n += 1
            await kv.put(keys[n % len(keys)], str(n).encode())
            writing.set()

    writer = asyncio.create_task(rewrite())
    try:
        await writing.wait()
        async with asyncio.timeout(20):
            listed = await kv.keys()
    finally:
        stop.set()
        async with asyncio.timeout(20):
            await writer
    assert listed == sorted(keys)


async def test_listing_one_runs_keys_among_many_leaves_out_the_deleted_and_the_others(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    """`keys(prefix)` (a run's event log batches, its call records) reads only the
    matching records, whatever else the bucket holds; deleted ones are not keys."""
    bus = await open_nats()
    kv = await bus.kv("runs")
    for run in range(30):
        for batch in range(3):
            await kv.put(f"run-{run}/{batch:04d}", b"x")
    await kv.delete("run-7/0001")
    await kv.put("run-7/0002", b"rewritten")
    await kv.put("run-70/0000", b"a longer id with the same start")
    assert await kv.keys("run-7/") == ["run-7/0000", "run-7/0002"]
    assert await kv.keys("run-70/") == ["run-70/0000"]
    assert await kv.keys("nobody/") == []
    assert len(await kv.keys()) == 30 * 3 - 1 + 1


async def test_a_queue_opened_by_two_connections_at_once_is_made_once(
    open_nats: Callable[..., Awaitable[NatsBus]],
) -> None:
    """A submitter and a worker open the queue together; the server may answer the
    create that loses with "subjects overlap with an existing stream" (a fleet test met
    it in CI), and that connection must check the stream the other made instead of
    failing. Forced here: the second connection's first look finds no stream, and its
    create gets the server's answer to a lost race."""
    first = await open_nats()
    second = await open_nats(namespace=first._namespace)
    await first.queue("runs", lease=30.0)
    js = second._js_context()
    real_info, real_add = js.stream_info, js.add_stream
    looks: list[str] = []

    async def not_there_yet(name: str, *args: Any, **kwargs: Any) -> Any:
        looks.append(name)
        if len(looks) == 1:
            raise nats.js.errors.NotFoundError
        return await real_info(name, *args, **kwargs)

    async def lost_the_race(*args: Any, **kwargs: Any) -> Any:
        raise nats.js.errors.BadRequestError(
            code=400, err_code=10065, description="subjects overlap with an existing stream"
        )

    js.stream_info = not_there_yet  # type: ignore[method-assign]
    js.add_stream = lost_the_race  # type: ignore[method-assign]
    try:
        queue = await second.queue("runs", lease=30.0)
    finally:
        js.stream_info, js.add_stream = real_info, real_add  # type: ignore[method-assign]
    await queue.enqueue(b"x", job_id="j1")
    assert (await (await first.queue("runs")).claim("w")) is not None
