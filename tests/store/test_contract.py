"""The Bus contract, run against every backend (see `conftest.bus`).

Time is a `FakeClock` moved by hand; `asyncio.timeout` is only a hang guard.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import pytest

from tiller.errors import UsageError
from tiller.store import (
    Bus,
    BusMessage,
    KeyValue,
    RevisionConflict,
    Subscription,
    decode_key,
    encode_key,
)

from .conftest import FakeClock

AWKWARD_KEYS = [
    "plain",
    "with space",
    "a/b/c",
    "dotted.key",
    ".leading",
    "trailing.",
    "double..dot",
    "...",
    "equals=sign",
    "=",
    "ünïcödé",
    "emoji 😀",
    "tab\tand\nnewline",
    "*",
    ">",
    "run 1/step 2",
]


async def next_message(messages: AsyncIterator[BusMessage]) -> BusMessage:
    async with asyncio.timeout(5):
        return await anext(messages)


async def take(subscription: Subscription, count: int) -> list[BusMessage]:
    messages = aiter(subscription)
    return [await next_message(messages) for _ in range(count)]


# ── KV ───────────────────────────────────────────────────────────────────────────────


async def test_bus_satisfies_the_protocols(bus: Bus) -> None:
    assert isinstance(bus, Bus)
    kv = await bus.kv("things")
    assert isinstance(kv, KeyValue)
    assert kv.bucket == "things"
    assert (await bus.queue("work")).name == "work"


async def test_get_missing_is_none(bus: Bus) -> None:
    kv = await bus.kv("things")
    assert await kv.get("nope") is None


async def test_put_then_get_and_revisions_increase(bus: Bus) -> None:
    kv = await bus.kv("things")
    first = await kv.put("k", b"one")
    other = await kv.put("other", b"x")
    second = await kv.put("k", b"two")
    assert first < other < second
    entry = await kv.get("k")
    assert entry is not None
    assert (entry.key, entry.value, entry.revision) == ("k", b"two", second)


async def test_empty_value_round_trips(bus: Bus) -> None:
    kv = await bus.kv("things")
    revision = await kv.put("k", b"")
    entry = await kv.get("k")
    assert entry is not None
    assert (entry.value, entry.revision) == (b"", revision)


async def test_create_only_when_missing(bus: Bus) -> None:
    kv = await bus.kv("things")
    revision = await kv.create("k", b"v")
    with pytest.raises(RevisionConflict) as caught:
        await kv.create("k", b"again")
    assert caught.value.expected == 0
    assert caught.value.actual in (revision, None)
    entry = await kv.get("k")
    assert entry is not None and entry.value == b"v"


async def test_update_compares_the_revision(bus: Bus) -> None:
    kv = await bus.kv("things")
    first = await kv.create("k", b"1")
    second = await kv.update("k", b"2", expected=first)
    assert second > first
    with pytest.raises(RevisionConflict) as caught:
        await kv.update("k", b"stale", expected=first)
    assert caught.value.expected == first
    assert caught.value.actual in (second, None)
    entry = await kv.get("k")
    assert entry is not None and (entry.value, entry.revision) == (b"2", second)


async def test_stale_revision_after_another_write(bus: Bus) -> None:
    kv = await bus.kv("things")
    mine = await kv.put("k", b"read by me")
    await kv.put("k", b"written by someone else")
    with pytest.raises(RevisionConflict):
        await kv.update("k", b"mine", expected=mine)


async def test_update_on_missing_key_conflicts(bus: Bus) -> None:
    kv = await bus.kv("things")
    with pytest.raises(RevisionConflict) as caught:
        await kv.update("missing", b"v", expected=1)
    assert caught.value.actual in (0, None)
    assert await kv.get("missing") is None


async def test_delete(bus: Bus) -> None:
    kv = await bus.kv("things")
    await kv.delete("never-existed")  # not an error without `expected`
    revision = await kv.put("k", b"v")
    await kv.delete("k")
    assert await kv.get("k") is None
    assert await kv.keys() == []
    again = await kv.create("k", b"back")  # a deleted key can be created again
    assert again > revision


async def test_delete_with_expected_revision(bus: Bus) -> None:
    kv = await bus.kv("things")
    first = await kv.put("k", b"1")
    second = await kv.put("k", b"2")
    with pytest.raises(RevisionConflict):
        await kv.delete("k", expected=first)
    assert await kv.get("k") is not None
    await kv.delete("k", expected=second)
    assert await kv.get("k") is None
    with pytest.raises(RevisionConflict):
        await kv.delete("k", expected=second)


async def test_awkward_keys_round_trip_and_list(bus: Bus) -> None:
    kv = await bus.kv("things")
    revisions = {key: await kv.put(key, key.encode()) for key in AWKWARD_KEYS}
    for key in AWKWARD_KEYS:
        assert decode_key(encode_key(key)) == key
        entry = await kv.get(key)
        assert entry is not None
        assert (entry.key, entry.value, entry.revision) == (key, key.encode(), revisions[key])
    assert await kv.keys() == sorted(AWKWARD_KEYS)


@pytest.mark.parametrize("prefix", ["", "a", "a/", "do", "double.", "trailing.", ".", "ü", "="])
async def test_keys_by_prefix(bus: Bus, prefix: str) -> None:
    kv = await bus.kv("things")
    keys = [*AWKWARD_KEYS, "a", "a.b", "ab", "b.a", "trailing.more", "..x"]
    for key in keys:
        await kv.put(key, b"")
    assert await kv.keys(prefix) == sorted(key for key in keys if key.startswith(prefix))


async def test_buckets_are_separate(bus: Bus) -> None:
    left, right = await bus.kv("left"), await bus.kv("right")
    await left.put("k", b"left")
    assert await right.get("k") is None
    assert await right.keys() == []
    await right.put("k", b"right")
    entry = await left.get("k")
    assert entry is not None and entry.value == b"left"
    assert await (await bus.kv("left")).keys() == ["k"]  # same bucket, asked for again


async def test_large_values(bus: Bus) -> None:
    kv = await bus.kv("things")
    big = os.urandom(2 * 1024 * 1024 + 12345)
    revision = await kv.put("big", big)
    entry = await kv.get("big")
    assert entry is not None and entry.value == big and entry.revision == revision
    bigger = big + os.urandom(1024 * 1024)
    updated = await kv.update("big", bigger, expected=revision)
    entry = await kv.get("big")
    assert entry is not None and entry.value == bigger and entry.revision == updated
    small = await kv.update("big", b"small again", expected=updated)
    entry = await kv.get("big")
    assert entry is not None and entry.value == b"small again" and entry.revision == small
    await kv.delete("big")
    assert await kv.get("big") is None
    assert await kv.keys() == []


async def test_bad_names_are_usage_errors(bus: Bus) -> None:
    with pytest.raises(UsageError):
        await bus.kv("no spaces")
    with pytest.raises(UsageError):
        await bus.kv("")
    with pytest.raises(UsageError):
        await bus.queue("no.dots")
    kv = await bus.kv("things")
    with pytest.raises(UsageError):
        await kv.put("", b"v")
    with pytest.raises(UsageError):
        await bus.publish("has space", b"")
    with pytest.raises(UsageError):
        await bus.subscribe("wild.*")


# ── leases ───────────────────────────────────────────────────────────────────────────


async def test_lease_free_held_and_reentrant(bus: Bus, clock: FakeClock) -> None:
    kv = await bus.kv("leases")
    lease = await kv.acquire("run 1", "alice", 30)
    assert lease is not None
    assert (lease.bucket, lease.key, lease.owner) == ("leases", "run 1", "alice")
    assert lease.expires_at == clock() + 30
    assert await kv.acquire("run 1", "bob", 30) is None
    clock.advance(10)
    again = await kv.acquire("run 1", "alice", 30)  # the owner may take it again
    assert again is not None and again.expires_at == clock() + 30
    assert again.revision > lease.revision


async def test_lease_expires_by_the_clock(bus: Bus, clock: FakeClock) -> None:
    kv = await bus.kv("leases")
    lease = await kv.acquire("k", "alice", 30)
    assert lease is not None
    clock.advance(29)
    assert await kv.acquire("k", "bob", 30) is None
    clock.advance(2)
    taken = await kv.acquire("k", "bob", 30)
    assert taken is not None and taken.owner == "bob"
    with pytest.raises(RevisionConflict):
        await kv.renew(lease, 30)  # alice lost it
    await kv.release(lease)  # releasing a lost lease is not an error...
    assert await kv.acquire("k", "carol", 30) is None  # ...and leaves bob's alone


async def test_lease_renew_and_release(bus: Bus, clock: FakeClock) -> None:
    kv = await bus.kv("leases")
    lease = await kv.acquire("k", "alice", 10)
    assert lease is not None
    clock.advance(8)
    renewed = await kv.renew(lease, 10)
    assert renewed.expires_at == clock() + 10 and renewed.revision > lease.revision
    clock.advance(8)  # past the first expiry, within the renewed one
    assert await kv.acquire("k", "bob", 10) is None
    with pytest.raises(RevisionConflict):
        await kv.renew(lease, 10)  # the old lease object is stale after a renew
    await kv.release(renewed)
    taken = await kv.acquire("k", "bob", 10)
    assert taken is not None and taken.owner == "bob"


async def test_concurrent_acquire_has_one_winner(bus: Bus) -> None:
    kv = await bus.kv("leases")
    async with asyncio.timeout(30):
        leases = await asyncio.gather(*(kv.acquire("k", f"w{n}", 60) for n in range(20)))
    winners = [lease for lease in leases if lease is not None]
    assert len(winners) == 1


# ── pub/sub ──────────────────────────────────────────────────────────────────────────


async def test_messages_after_subscribing_arrive_in_order(bus: Bus) -> None:
    await bus.publish("runs.r1.control", b"before")
    subscription = await bus.subscribe("runs.r1.control")
    for n in range(5):
        await bus.publish("runs.r1.control", f"m{n}".encode())
    got = await take(subscription, 5)
    assert [m.data for m in got] == [f"m{n}".encode() for n in range(5)]
    assert {m.subject for m in got} == {"runs.r1.control"}
    await subscription.aclose()


async def test_every_subscriber_gets_every_message(bus: Bus) -> None:
    first = await bus.subscribe("news")
    second = await bus.subscribe("news")
    elsewhere = await bus.subscribe("other")
    await bus.publish("news", b"a")
    await bus.publish("other", b"x")
    await bus.publish("news", b"b")
    assert [m.data for m in await take(first, 2)] == [b"a", b"b"]
    assert [m.data for m in await take(second, 2)] == [b"a", b"b"]
    assert [m.data for m in await take(elsewhere, 1)] == [b"x"]
    for subscription in (first, second, elsewhere):
        await subscription.aclose()


async def test_encoded_ids_make_valid_subjects(bus: Bus) -> None:
    subject = f"runs.{encode_key('.odd run/1 ü.')}.control"
    subscription = await bus.subscribe(subject)
    await bus.publish(subject, b"cancel")
    assert [m.data for m in await take(subscription, 1)] == [b"cancel"]
    await subscription.aclose()


async def test_aclose_ends_the_subscription(bus: Bus) -> None:
    subscription = await bus.subscribe("s")
    received: list[bytes] = []
    got_one = asyncio.Event()

    async def read() -> None:
        async for message in subscription:
            received.append(message.data)
            got_one.set()

    async with asyncio.timeout(5), asyncio.TaskGroup() as group:
        reader = group.create_task(read())
        await bus.publish("s", b"one")
        await got_one.wait()
        await subscription.aclose()  # ends the reader's `async for`
        await subscription.aclose()  # idempotent
    assert reader.done() and received == [b"one"]
    await bus.publish("s", b"after")  # publishing with no subscriber is fine


async def test_closing_the_bus_ends_its_subscriptions(bus: Bus) -> None:
    subscription = await bus.subscribe("s")
    await bus.aclose()
    async with asyncio.timeout(5):
        assert [m async for m in subscription] == []


# ── concurrency ──────────────────────────────────────────────────────────────────────


async def test_one_update_wins_per_revision(bus: Bus) -> None:
    kv = await bus.kv("counters")
    start = await kv.put("n", b"0")

    async def attempt(n: int) -> int | None:
        try:
            return await kv.update("n", str(n).encode(), expected=start)
        except RevisionConflict:
            return None

    async with asyncio.timeout(30):
        results = await asyncio.gather(*(attempt(n) for n in range(50)))
    assert len([r for r in results if r is not None]) == 1


async def test_compare_and_set_increments_lose_no_update(bus: Bus) -> None:
    kv = await bus.kv("counters")
    await kv.put("n", b"0")

    async def increment() -> int:
        while True:
            entry = await kv.get("n")
            assert entry is not None
            try:
                return await kv.update(
                    "n", str(int(entry.value) + 1).encode(), expected=entry.revision
                )
            except RevisionConflict:
                await asyncio.sleep(0)

    async with asyncio.timeout(60):
        revisions = await asyncio.gather(*(increment() for _ in range(50)))
    assert len(set(revisions)) == 50
    entry = await kv.get("n")
    assert entry is not None and entry.value == b"50"
    assert entry.revision == max(revisions)


# ── lifecycle ────────────────────────────────────────────────────────────────────────


async def test_aclose_is_idempotent_and_use_after_close_is_refused(bus: Bus) -> None:
    kv = await bus.kv("things")
    queue = await bus.queue("work")
    await bus.aclose()
    await bus.aclose()
    with pytest.raises(UsageError):
        await bus.kv("things")
    with pytest.raises(UsageError):
        await kv.get("k")
    with pytest.raises(UsageError):
        await kv.put("k", b"v")
    with pytest.raises(UsageError):
        await queue.enqueue(b"p")
    with pytest.raises(UsageError):
        await bus.publish("s", b"")
    with pytest.raises(UsageError):
        await bus.subscribe("s")


async def test_async_with(bus: Bus) -> None:
    async with bus as same:
        assert same is bus
        await (await same.kv("things")).put("k", b"v")
    with pytest.raises(UsageError):
        await bus.kv("things")
