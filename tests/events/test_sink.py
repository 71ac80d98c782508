"""The sink: cancellation check, transformers, verifier, bounded subscribers, threads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable

import pytest

from tiller import CancellationToken, Cancelled, ProtocolViolation, SubscriberLagged, UsageError
from tiller.events import (
    CLOSING_TYPES,
    CustomEvent,
    Event,
    EventSink,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)


def test_after_cancel_only_closing_and_terminal_events_pass() -> None:
    token = CancellationToken()
    sink = EventSink(cancel=token)
    rx = sink.subscribe()
    sink.emit(RunStartedEvent("t", "r"))
    sink.emit(TextMessageStartEvent("m"))
    token.cancel()
    with pytest.raises(Cancelled):
        sink.emit(TextMessageContentEvent("m", "x"))
    with pytest.raises(Cancelled):
        sink.emit(CustomEvent("tiller.note", 1))
    sink.emit(TextMessageEndEvent("m"))
    sink.emit(RunFinishedEvent("t", "r", outcome={"type": "cancelled"}))
    assert [e.type for e in rx.drain()] == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert {"RUN_FINISHED", "RUN_ERROR", "TEXT_MESSAGE_END", "SUBAGENT_ERROR"} <= CLOSING_TYPES


def test_emit_forced_skips_the_cancel_check_but_not_the_verifier() -> None:
    token = CancellationToken()
    token.cancel()
    sink = EventSink(cancel=token)
    sink.emit_forced(RunStartedEvent("t", "r"))
    with pytest.raises(ProtocolViolation):
        sink.emit_forced(TextMessageEndEvent("never"))


class Doubler:
    def transform(self, event: Event) -> Iterable[Event]:
        if isinstance(event, CustomEvent):
            return (event, CustomEvent(event.name + ".copy", event.value))
        return (event,)


class DropCustom:
    def transform(self, event: Event) -> Iterable[Event]:
        return () if isinstance(event, CustomEvent) and event.name.endswith(".copy") else (event,)


def test_transformer_chain_maps_one_event_to_many_or_none() -> None:
    sink = EventSink(transformers=[Doubler()])
    rx = sink.subscribe()
    sink.emit(CustomEvent("a.b", 1))
    assert [e.name for e in rx.drain()] == ["a.b", "a.b.copy"]  # type: ignore[attr-defined]
    sink = EventSink(transformers=[Doubler(), DropCustom()])
    rx = sink.subscribe()
    sink.emit(CustomEvent("a.b", 1))
    assert [e.name for e in rx.drain()] == ["a.b"]  # type: ignore[attr-defined]


def test_verifier_can_be_turned_off() -> None:
    sink = EventSink(verify=False)
    rx = sink.subscribe()
    sink.emit(TextMessageEndEvent("unopened"))
    assert len(rx.drain()) == 1
    assert sink.verifier is None


async def test_slow_subscriber_is_detached_and_the_run_goes_on() -> None:
    sink = EventSink()
    slow = sink.subscribe(maxsize=3)
    fast = sink.subscribe(maxsize=None)
    sink.emit(RunStartedEvent("t", "r"))
    for i in range(10):
        sink.emit(CustomEvent("tiller.tick", i))
    sink.emit(RunFinishedEvent("t", "r"))
    assert len(fast.drain()) == 12  # the others got everything
    assert slow.detached and isinstance(slow.error, SubscriberLagged)
    got = []
    with pytest.raises(SubscriberLagged, match="detached"):
        async for event in slow:
            got.append(event)
    assert len(got) == 3  # what it had buffered is still readable


async def test_subscription_iterates_until_the_terminal_event() -> None:
    sink = EventSink()
    rx = sink.subscribe()

    async def produce() -> None:
        sink.emit(RunStartedEvent("t", "r"))
        for i in range(3):
            await asyncio.sleep(0)
            sink.emit(CustomEvent("tiller.tick", i))
        sink.emit(RunErrorEvent("done"))

    task = asyncio.create_task(produce())
    events = [event async for event in rx]
    await task
    assert [e.type for e in events] == ["RUN_STARTED", "CUSTOM", "CUSTOM", "CUSTOM", "RUN_ERROR"]
    late = sink.subscribe()
    assert late.detached and [e async for e in late] == []


def test_subscribe_needs_room() -> None:
    with pytest.raises(UsageError):
        EventSink().subscribe(maxsize=0)


def test_closed_subscription_stops_receiving() -> None:
    sink = EventSink()
    rx = sink.subscribe()
    sink.emit(CustomEvent("tiller.a", 1))
    rx.close()
    sink.emit(CustomEvent("tiller.b", 2))
    assert [e.name for e in rx.drain()] == ["tiller.a"]  # type: ignore[attr-defined]


async def test_thread_emits_keep_order_and_surface_refusals() -> None:
    sink = EventSink()
    rx = sink.subscribe(maxsize=None)
    sink.emit(RunStartedEvent("t", "r"))

    def worker(n: int) -> None:
        for i in range(50):
            sink.emit(CustomEvent(f"tiller.w{n}", i))

    await asyncio.gather(*(asyncio.to_thread(worker, n) for n in range(4)))
    events = rx.drain()
    assert len(events) == 201
    for n in range(4):
        assert [e.value for e in events if getattr(e, "name", "") == f"tiller.w{n}"] == list(
            range(50)
        )  # type: ignore[attr-defined]


def test_thread_emit_without_a_loop_uses_a_lock() -> None:
    sink = EventSink()
    rx = sink.subscribe(maxsize=None)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for i in range(100):
                sink.emit(CustomEvent("tiller.t", i))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(rx.drain()) == 400
