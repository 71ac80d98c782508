"""`ControlStore` and `ControlWatcher`: cancel and steer requests kept in the store, on
every backend (memory, a SQLite file, the NATS server).

What matters: a request made before the watch is applied on entry; one made during it
arrives by the message (fast path) or, if the message is lost, by the poll; a request
made through a second connection (another process) arrives too; each steer is pushed
once, in order; a cancel keeps its reason; store failures never reach the run; leaving
the watch leaves no task behind.

Waiting is on conditions (`until`), with a timeout that only guards against hangs. A
watcher with `poll_interval=3600` never polls inside a test, so what it receives came
by message; one with a muted store gets no message, so what it receives came by polling.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tiller.cancel import CancellationToken
from tiller.errors import UsageError
from tiller.loop import SteeringQueue
from tiller.store import (
    CONTROL_BUCKET,
    Bus,
    BusMessage,
    ControlStore,
    ControlWatcher,
    Entry,
    JobQueue,
    KeyValue,
    Lease,
    MalformedControl,
    StoreUnavailable,
    Subscription,
    check_subject,
)

from .conftest import BACKENDS, NATS_URL, FakeClock, make_bus

HANG_GUARD = 20.0  # seconds; never reached unless something is broken
NO_POLLING = 3600.0  # a watcher that only polls on entry


async def until(condition: Callable[[], bool]) -> None:
    """Wait until `condition()` holds (the timeout is a hang guard, not a measurement)."""
    async with asyncio.timeout(HANG_GUARD):
        # Polled: the conditions read a queue, a token and counters, which share no event.
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.002)


class Run:
    """What a run hands its watcher: a token and a steering queue; `received` collects
    every steer pushed so far."""

    def __init__(self, run_id: str = "run-1") -> None:
        self.id = run_id
        self.token = CancellationToken()
        self.steering = SteeringQueue()
        self._received: list[str] = []

    @property
    def received(self) -> list[str]:
        self._received.extend(self.steering.drain())
        return self._received

    def watch(self, store: ControlStore, poll_interval: float = NO_POLLING) -> ControlWatcher:
        return store.watch(
            self.id, cancel=self.token, steering=self.steering, poll_interval=poll_interval
        )


def watcher_tasks() -> list[asyncio.Task[object]]:
    return [
        task
        for task in asyncio.all_tasks()
        if task.get_name().startswith("tiller-control-watch") and not task.done()
    ]


# ── store doubles: a real store, with its messages dropped or its calls failing ──────────


class MutedBus:
    """`inner` with every publish dropped: a request whose message was lost."""

    def __init__(self, inner: Bus) -> None:
        self.inner = inner
        self.url = inner.url
        self.clock = inner.clock

    async def kv(self, bucket: str) -> KeyValue:
        return await self.inner.kv(bucket)

    async def publish(self, subject: str, data: bytes) -> None:
        check_subject(subject)

    async def subscribe(self, subject: str) -> Subscription:
        return await self.inner.subscribe(subject)

    async def queue(self, name: str, *, lease: float = 30.0, max_deliver: int = 5) -> JobQueue:
        return await self.inner.queue(name, lease=lease, max_deliver=max_deliver)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> MutedBus:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class FlakyKeyValue:
    """A bucket whose every call fails while its store is `broken`."""

    def __init__(self, bus: FlakyBus, inner: KeyValue) -> None:
        self.bucket = inner.bucket
        self._bus = bus
        self._inner = inner

    async def get(self, key: str) -> Entry | None:
        self._bus.check()
        return await self._inner.get(key)

    async def put(self, key: str, value: bytes) -> int:
        self._bus.check()
        return await self._inner.put(key, value)

    async def create(self, key: str, value: bytes) -> int:
        self._bus.check()
        return await self._inner.create(key, value)

    async def update(self, key: str, value: bytes, *, expected: int) -> int:
        self._bus.check()
        return await self._inner.update(key, value, expected=expected)

    async def delete(self, key: str, *, expected: int | None = None) -> None:
        self._bus.check()
        await self._inner.delete(key, expected=expected)

    async def keys(self, prefix: str = "") -> list[str]:
        self._bus.check()
        return await self._inner.keys(prefix)

    async def acquire(self, key: str, owner: str, ttl: float) -> Lease | None:
        self._bus.check()
        return await self._inner.acquire(key, owner, ttl)

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        self._bus.check()
        return await self._inner.renew(lease, ttl)

    async def release(self, lease: Lease) -> None:
        self._bus.check()
        await self._inner.release(lease)


class FlakyBus(MutedBus):
    """`inner`, except that while `broken` every call fails as a lost connection does."""

    def __init__(self, inner: Bus) -> None:
        super().__init__(inner)
        self.broken = False
        self.failures = 0

    def check(self) -> None:
        if self.broken:
            self.failures += 1
            raise StoreUnavailable("the test cut the connection")

    async def kv(self, bucket: str) -> KeyValue:
        self.check()
        return FlakyKeyValue(self, await self.inner.kv(bucket))

    async def publish(self, subject: str, data: bytes) -> None:
        self.check()
        await self.inner.publish(subject, data)

    async def subscribe(self, subject: str) -> Subscription:
        self.check()
        return await self.inner.subscribe(subject)


class TrackingBus(MutedBus):
    """`inner`, publishing too, and remembering each subscription and whether it closed."""

    def __init__(self, inner: Bus) -> None:
        super().__init__(inner)
        self.subscriptions: list[TrackedSubscription] = []

    async def publish(self, subject: str, data: bytes) -> None:
        await self.inner.publish(subject, data)

    async def subscribe(self, subject: str) -> Subscription:
        tracked = TrackedSubscription(await self.inner.subscribe(subject))
        self.subscriptions.append(tracked)
        return tracked

    @property
    def open_subscriptions(self) -> int:
        return sum(not tracked.closed for tracked in self.subscriptions)


class TrackedSubscription:
    def __init__(self, inner: Subscription) -> None:
        self.inner = inner
        self.closed = False

    def __aiter__(self) -> AsyncIterator[BusMessage]:
        return aiter(self.inner)

    async def aclose(self) -> None:
        self.closed = True
        await self.inner.aclose()


# ── a second connection to the same store ────────────────────────────────────────────


@pytest.fixture(params=[backend for backend in BACKENDS if backend != "memory"])
async def two_buses(
    request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path
) -> AsyncIterator[tuple[Bus, Bus]]:
    """Two handles on one store (the same SQLite file, the same NATS namespace), as two
    processes would have."""
    namespace = f"t{uuid.uuid4().hex[:16]}"
    first = await make_bus(request.param, clock, tmp_path, namespace)
    second = await make_bus(request.param, clock, tmp_path, namespace)
    try:
        yield first, second
    finally:
        await first.aclose()
        await second.aclose()
        if request.param == "nats":
            from tiller.store._nats import NatsBus

            async with await NatsBus.connect(NATS_URL, namespace=namespace) as cleaner:
                await cleaner.delete_namespace()


# ── requests ─────────────────────────────────────────────────────────────────────────


async def test_requests_are_stored_and_read_back(bus: Bus) -> None:
    store = ControlStore(bus)
    assert await store.cancel_requested("run-1") is None
    assert await store.steers("run-1") == []

    first = await store.steer("run-1", "look at the tests first")
    second = await store.steer("run-1", "  and keep it short  ")
    await store.request_cancel("run-1", "the user pressed stop")

    assert first < second
    assert await store.steers("run-1") == [
        (first, "look at the tests first"),
        (second, "  and keep it short  "),
    ]
    assert await store.cancel_requested("run-1") == "the user pressed stop"
    kv = await bus.kv(CONTROL_BUCKET)
    assert f"run-1/steer/{first}" in await kv.keys("run-1/")
    assert "run-1/cancel" in await kv.keys("run-1/")


async def test_steer_ids_increase_within_a_process(bus: Bus) -> None:
    store = ControlStore(bus)
    ids = [await store.steer("run-1", f"steer {n}") for n in range(20)]
    assert ids == sorted(ids)
    assert len(set(ids)) == 20
    assert [text for _, text in await store.steers("run-1")] == [f"steer {n}" for n in range(20)]


async def test_the_first_cancel_reason_stands(bus: Bus) -> None:
    store = ControlStore(bus)
    await store.request_cancel("run-1", "the user pressed stop")
    await store.request_cancel("run-1", "the server is shutting down")
    assert await store.cancel_requested("run-1") == "the user pressed stop"

    await store.request_cancel("run-2")
    await store.request_cancel("run-3", "   ")
    assert await store.cancel_requested("run-2") == "cancelled by request"
    assert await store.cancel_requested("run-3") == "cancelled by request"


async def test_blank_steers_and_run_ids_are_refused(bus: Bus) -> None:
    store = ControlStore(bus)
    for text in ("", "   ", "\n\t"):
        with pytest.raises(UsageError, match="needs some text"):
            await store.steer("run-1", text)
    with pytest.raises(UsageError, match="run id"):
        await store.steer("", "hello")
    with pytest.raises(UsageError, match="run id"):
        await store.request_cancel("")
    with pytest.raises(UsageError, match="poll_interval"):
        store.watch("run-1", cancel=CancellationToken(), steering=SteeringQueue(), poll_interval=0)
    assert await store.steers("run-1") == []


async def test_clear_drops_the_runs_records_and_no_one_elses(bus: Bus) -> None:
    store = ControlStore(bus)
    # Run ids that continue the first one's keys: clearing "r" must not touch them.
    for run_id in ("r", "r/steer", "r/steer/x", "r2"):
        await store.steer(run_id, f"steer {run_id}")
        await store.request_cancel(run_id, f"stop {run_id}")

    await store.clear("r")

    assert await store.steers("r") == []
    assert await store.cancel_requested("r") is None
    for run_id in ("r/steer", "r/steer/x", "r2"):
        assert [text for _, text in await store.steers(run_id)] == [f"steer {run_id}"]
        assert await store.cancel_requested(run_id) == f"stop {run_id}"
    kv = await bus.kv(CONTROL_BUCKET)
    assert not [key for key in await kv.keys("r/") if key.count("/") == 1]
    await store.clear("never-seen")  # nothing to drop is not an error


async def test_a_malformed_record_is_named(bus: Bus) -> None:
    store = ControlStore(bus)
    steer_id = await store.steer("run-1", "fine")
    kv = await bus.kv(CONTROL_BUCKET)
    await kv.put(f"run-1/steer/{steer_id}", b"not json")
    with pytest.raises(MalformedControl, match=f"run-1/steer/{steer_id}"):
        await store.steers("run-1")

    # A record copied under another run's key belongs to its own run.
    await store.request_cancel("run-2", "stop")
    entry = await kv.get("run-2/cancel")
    assert entry is not None
    await kv.put("run-3/cancel", entry.value)
    with pytest.raises(MalformedControl, match="belongs to run 'run-2'"):
        await store.cancel_requested("run-3")


# ── watching ─────────────────────────────────────────────────────────────────────────


async def test_requests_made_before_the_watch_are_applied_on_entry(bus: Bus) -> None:
    store = ControlStore(bus)
    run = Run()
    await store.steer(run.id, "first")
    await store.steer(run.id, "second")
    await store.request_cancel(run.id, "the user pressed stop")

    async with run.watch(store) as watcher:
        # Applied before the block starts: no waiting.
        assert run.received == ["first", "second"]
        assert run.token.is_cancelled
        assert run.token.reason == "the user pressed stop"
        assert watcher.polls == 1


async def test_requests_during_the_watch_arrive_by_message(bus: Bus) -> None:
    store = ControlStore(bus)
    run = Run()
    async with run.watch(store) as watcher:  # never polls: only messages can deliver
        await store.steer(run.id, "look at the tests first")
        await until(lambda: run.received == ["look at the tests first"])
        assert not run.token.is_cancelled

        await store.request_cancel(run.id, "the user pressed stop")
        await until(lambda: run.token.is_cancelled)
        assert run.token.reason == "the user pressed stop"

        ids = [await store.steer(run.id, f"steer {n}") for n in range(5)]
        await until(lambda: len(run.received) == 6)
        assert run.received[1:] == [f"steer {n}" for n in range(5)]
        assert watcher.polls == 1
        assert set(ids) < watcher.applied


async def test_a_lost_message_is_made_up_for_by_polling(bus: Bus) -> None:
    muted = ControlStore(MutedBus(bus))
    run = Run()
    async with run.watch(ControlStore(bus), poll_interval=0.01) as watcher:
        await muted.steer(run.id, "first")
        await muted.steer(run.id, "second")
        await until(lambda: len(run.received) == 2)
        await muted.request_cancel(run.id, "stopped while the message was lost")
        await until(lambda: run.token.is_cancelled)
        polls = watcher.polls
        await until(lambda: watcher.polls >= polls + 3)
    assert run.received == ["first", "second"]
    assert run.token.reason == "stopped while the message was lost"


async def test_each_steer_is_pushed_once_when_message_and_poll_both_see_it(bus: Bus) -> None:
    store = ControlStore(bus)
    run = Run()
    async with run.watch(store, poll_interval=0.01) as watcher:
        ids = [await store.steer(run.id, f"steer {n}") for n in range(15)]
        await store.request_cancel(run.id, "enough")
        await until(lambda: len(run.received) >= 15 and run.token.is_cancelled)
        # Let several more polls read the same records.
        polls = watcher.polls
        await until(lambda: watcher.polls >= polls + 3)
        await store.request_cancel(run.id, "a second request")
        polls = watcher.polls
        await until(lambda: watcher.polls >= polls + 2)
    assert run.received == [f"steer {n}" for n in range(15)]
    assert watcher.applied == set(ids)
    assert run.token.reason == "enough"


async def test_a_request_made_on_another_connection_reaches_the_watcher(
    two_buses: tuple[Bus, Bus],
) -> None:
    here, there = two_buses
    run = Run()
    remote = ControlStore(there)
    await remote.steer(run.id, "made before the watch")
    async with run.watch(ControlStore(here)) as watcher:  # messages only
        assert run.received == ["made before the watch"]
        await remote.steer(run.id, "made during the watch")
        await until(lambda: len(run.received) == 2)
        await remote.request_cancel(run.id, "stopped from another process")
        await until(lambda: run.token.is_cancelled)
        assert watcher.polls == 1
    assert run.received == ["made before the watch", "made during the watch"]
    assert run.token.reason == "stopped from another process"


async def test_another_connection_whose_messages_are_lost_is_polled(
    two_buses: tuple[Bus, Bus],
) -> None:
    here, there = two_buses
    run = Run()
    remote = ControlStore(MutedBus(there))
    async with run.watch(ControlStore(here), poll_interval=0.01) as watcher:
        for n in range(3):
            await remote.steer(run.id, f"steer {n}")
        await remote.request_cancel(run.id, "stopped, silently")
        await until(lambda: len(run.received) == 3 and run.token.is_cancelled)
        polls = watcher.polls
        await until(lambda: watcher.polls >= polls + 2)
    assert run.received == ["steer 0", "steer 1", "steer 2"]
    assert run.token.reason == "stopped, silently"


async def test_runs_do_not_see_each_others_requests(bus: Bus) -> None:
    store = ControlStore(bus)
    run, other, nested = Run("r"), Run("r2"), Run("r/steer")
    async with (
        run.watch(store, poll_interval=0.01) as watcher,
        other.watch(store, poll_interval=0.01),
        nested.watch(store, poll_interval=0.01),
    ):
        await store.steer("r2", "for r2")
        await store.steer("r/steer", "for r/steer")
        await store.request_cancel("r2")
        await until(lambda: other.received == ["for r2"] and other.token.is_cancelled)
        await until(lambda: nested.received == ["for r/steer"])
        polls = watcher.polls
        await until(lambda: watcher.polls >= polls + 2)
    assert run.received == []
    assert not run.token.is_cancelled
    assert not nested.token.is_cancelled


@pytest.mark.parametrize("run_id", ["run ü/with spaces..and dots.", "r" * 300])
async def test_any_run_id_has_a_subject(bus: Bus, run_id: str) -> None:
    store = ControlStore(bus)
    assert check_subject(ControlStore.subject(run_id))
    run = Run(run_id)
    async with run.watch(store):
        await store.steer(run_id, "hello")
        await until(lambda: run.received == ["hello"])


async def test_a_malformed_record_is_skipped_and_a_malformed_cancel_still_cancels(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    store = ControlStore(bus)
    run = Run()
    bad = await store.steer(run.id, "to be damaged")
    await store.steer(run.id, "fine")
    kv = await bus.kv(CONTROL_BUCKET)
    await kv.put(f"{run.id}/steer/{bad}", b"not json")
    await kv.put(f"{run.id}/cancel", b'{"schema_version": 99}')
    with caplog.at_level(logging.WARNING, logger="tiller.store._control"):
        async with run.watch(store) as watcher:
            assert run.received == ["fine"]
            assert bad in watcher.applied  # skipped for good, not read again
            assert run.token.reason == "cancelled by request"
    assert "steer skipped" in caplog.text
    assert "schema version 99" in caplog.text


async def test_store_failures_never_reach_the_run(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    flaky = FlakyBus(bus)
    writer = ControlStore(bus)
    run = Run()
    flaky.broken = True
    with caplog.at_level(logging.WARNING, logger="tiller.store._control"):
        async with run.watch(ControlStore(flaky), poll_interval=0.01) as watcher:
            assert watcher.polls == 0  # the read on entry failed, quietly
            await writer.steer(run.id, "sent while the watcher's store was down")
            await writer.request_cancel(run.id, "stopped while down")
            failures = flaky.failures
            await until(lambda: flaky.failures >= failures + 3)  # it keeps trying
            assert run.received == []

            flaky.broken = False
            await until(lambda: len(run.received) == 1 and run.token.is_cancelled)
            await writer.steer(run.id, "sent after it came back")
            await until(lambda: len(run.received) == 2)
    assert run.received == [
        "sent while the watcher's store was down",
        "sent after it came back",
    ]
    assert run.token.reason == "stopped while down"
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert warnings and "the test cut the connection" in warnings[0].getMessage()


async def test_a_failed_message_does_not_fail_the_request(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    class NoPublish(MutedBus):
        async def publish(self, subject: str, data: bytes) -> None:
            raise StoreUnavailable("publish failed")

    store = ControlStore(NoPublish(bus))
    with caplog.at_level(logging.WARNING, logger="tiller.store._control"):
        steer_id = await store.steer("run-1", "stored all the same")
        await store.request_cancel("run-1")
    assert await store.steers("run-1") == [(steer_id, "stored all the same")]
    assert await store.cancel_requested("run-1") == "cancelled by request"
    assert "next poll" in caplog.text


# ── leaving ──────────────────────────────────────────────────────────────────────────


async def test_leaving_the_watch_leaves_no_task(bus: Bus) -> None:
    tracking = TrackingBus(bus)
    store = ControlStore(tracking)
    run = Run()
    watcher = run.watch(store, poll_interval=0.01)
    async with watcher:
        assert len(watcher_tasks()) == 2
        assert tracking.open_subscriptions == 1
        await store.steer(run.id, "hello")
        await until(lambda: run.received == ["hello"])
    assert watcher_tasks() == []
    assert tracking.open_subscriptions == 0
    # Requests after the watch reach no one.
    await store.steer(run.id, "too late")
    assert run.received == ["hello"]
    with pytest.raises(UsageError, match="entered once"):
        async with watcher:
            pass


async def test_leaving_at_once_closes_the_subscription(bus: Bus) -> None:
    # The tasks are cancelled before they ever ran: the subscription is still closed.
    tracking = TrackingBus(bus)
    async with Run().watch(ControlStore(tracking), poll_interval=0.01):
        pass
    assert watcher_tasks() == []
    assert len(tracking.subscriptions) == 1
    assert tracking.open_subscriptions == 0


async def test_leaving_while_the_store_fails_or_after_the_bus_closed(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    flaky = FlakyBus(bus)
    run = Run()
    async with run.watch(ControlStore(flaky), poll_interval=0.01):
        flaky.broken = True
        failures = flaky.failures
        await until(lambda: flaky.failures >= failures + 2)
    assert watcher_tasks() == []

    other = Run("run-2")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tiller.store._control"):
        async with other.watch(ControlStore(bus), poll_interval=0.01):
            await bus.aclose()
            await until(lambda: "closed" in caplog.text)  # it failed, and kept going
    assert watcher_tasks() == []


async def test_a_cancelled_watcher_block_still_cleans_up(bus: Bus) -> None:
    store = ControlStore(bus)
    run = Run()
    entered = asyncio.Event()

    async def watch_forever() -> None:
        async with run.watch(store, poll_interval=0.01):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(watch_forever())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert watcher_tasks() == []
