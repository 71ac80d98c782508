"""Tests for `stream_with_retry` and `RetryPolicy`. No real waiting: `sleep` is recorded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from random import Random
from typing import Any

import pytest

from tiller.conversation import UserMessage
from tiller.errors import Cancelled, UsageError
from tiller.model import (
    Finish,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelRequest,
    RetryNotice,
    RetryPolicy,
    ScriptedModel,
    StreamEvent,
    TextDelta,
    TurnInfo,
    stream_with_retry,
)

REQUEST = ModelRequest(system=None, messages=[UserMessage(text="hi")])


class Sleeps:
    """A `sleep` that returns at once and remembers what it was asked to wait."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


class Fixed(Random):
    """`random()` always answers `value`, so the jitter is known."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


async def drain(
    model: Any, policy: RetryPolicy | None = None, *, sleeps: Sleeps, jitter: float = 0.0
) -> list[StreamEvent]:
    async with asyncio.timeout(5):  # a hang guard, never a timing assertion
        return [
            event
            async for event in stream_with_retry(
                model, REQUEST, policy, sleep=sleeps, random=Fixed(jitter)
            )
        ]


def errors(*statuses: int) -> list[dict[str, Any]]:
    return [{"error": {"status": status}} for status in statuses]


async def test_an_error_before_the_stream_is_retried_then_succeeds() -> None:
    model = ScriptedModel([*errors(429, 503), "ok"])
    sleeps = Sleeps()
    events = await drain(model, sleeps=sleeps)
    assert [e for e in events if isinstance(e, TextDelta | Finish)] == [
        TextDelta("ok"),
        Finish("stop"),
    ]
    assert len(model.requests) == 3
    assert sleeps.delays == [0.5, 1.0]


async def test_backoff_doubles_is_capped_and_jitter_only_shortens() -> None:
    policy = RetryPolicy(max_attempts=6, base_delay=1.0, max_delay=5.0, jitter=0.5)
    sleeps = Sleeps()
    await drain(ScriptedModel([*errors(500, 500, 500, 500, 500), "ok"]), policy, sleeps=sleeps)
    assert sleeps.delays == [1.0, 2.0, 4.0, 5.0, 5.0]
    jittered = Sleeps()
    await drain(ScriptedModel([*errors(500, 500), "ok"]), policy, sleeps=jittered, jitter=0.5)
    assert jittered.delays == [0.75, 1.5]  # shortened by jitter * random() = 25%


async def test_retry_after_is_a_floor() -> None:
    model = ScriptedModel([{"error": {"status": 429, "retry_after": 7}}, "ok"])
    sleeps = Sleeps()
    await drain(model, sleeps=sleeps, jitter=0.99)
    assert sleeps.delays == [7.0]
    short = ScriptedModel([{"error": {"status": 429, "retry_after": 0.1}}, "ok"])
    short_sleeps = Sleeps()
    await drain(short, sleeps=short_sleeps)
    assert short_sleeps.delays == [0.5]  # the backoff is longer than the advice


async def test_a_retry_after_longer_than_max_delay_is_not_retried() -> None:
    model = ScriptedModel([{"error": {"status": 429, "retry_after": 600}}, "ok"])
    sleeps = Sleeps()
    with pytest.raises(ModelHTTPError) as info:
        await drain(model, RetryPolicy(max_delay=30), sleeps=sleeps)
    assert sleeps.delays == []
    assert len(model.requests) == 1
    assert "asked to wait 600s, longer than RetryPolicy.max_delay (30s)" in info.value.__notes__[-1]


async def test_a_non_retryable_error_is_raised_at_once() -> None:
    model = ScriptedModel([*errors(400), "never"])
    sleeps = Sleeps()
    with pytest.raises(ModelHTTPError) as info:
        await drain(model, sleeps=sleeps)
    assert info.value.status == 400
    assert sleeps.delays == []
    assert len(model.requests) == 1
    assert info.value.__notes__ == [
        "tiller: model call gave up after 1 attempt: the error is not retryable"
    ]


async def test_the_last_error_is_raised_when_attempts_run_out() -> None:
    model = ScriptedModel([*errors(500, 502, 503, 504), "never"])
    sleeps = Sleeps()
    with pytest.raises(ModelHTTPError) as info:
        await drain(model, RetryPolicy(max_attempts=4), sleeps=sleeps)
    assert info.value.status == 504
    assert len(sleeps.delays) == 3
    assert info.value.__notes__ == [
        "tiller: model call gave up after 4 attempts: RetryPolicy.max_attempts is 4"
    ]


async def test_nothing_is_retried_after_the_first_event() -> None:
    model = ScriptedModel([{"text": "half", "error": {"kind": "connection"}}, "the whole answer"])
    sleeps = Sleeps()
    received: list[StreamEvent] = []
    with pytest.raises(ModelConnectionError) as info:
        async for event in stream_with_retry(model, REQUEST, sleep=sleeps):
            received.append(event)
    assert received == [TextDelta("half")]  # delivered once, never repeated
    assert len(model.requests) == 1
    assert sleeps.delays == []
    assert "failed mid-stream" in info.value.__notes__[-1]


async def test_a_foreign_exception_becomes_a_chained_model_error() -> None:
    def turn(messages: Any, info: TurnInfo) -> str:
        raise KeyError("adapter bug")

    sleeps = Sleeps()
    with pytest.raises(ModelError, match="scripted model adapter failed: KeyError") as info:
        await drain(ScriptedModel(turn), sleeps=sleeps)
    assert isinstance(info.value.__cause__, KeyError)
    assert not info.value.retryable
    assert sleeps.delays == []


class SyncFailure:
    """A model whose `stream` fails before returning an iterator."""

    provider = "odd"
    name = "odd"
    context_window: int | None = None

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        raise RuntimeError("eager failure")

    async def aclose(self) -> None:
        pass


async def test_a_stream_call_that_fails_eagerly_is_translated_too() -> None:
    with pytest.raises(ModelError, match="odd model adapter failed: RuntimeError") as info:
        await drain(SyncFailure(), sleeps=Sleeps())
    assert isinstance(info.value.__cause__, RuntimeError)


async def test_tiller_cancelled_propagates_untouched() -> None:
    def turn(messages: Any, info: TurnInfo) -> str:
        raise Cancelled()

    with pytest.raises(Cancelled):
        await drain(ScriptedModel(turn), sleeps=Sleeps())


async def test_cancellation_during_a_delay_turn_propagates() -> None:
    model = ScriptedModel([{"text": "never", "delay": 60}])
    task = asyncio.create_task(drain(model, sleeps=Sleeps()))
    await asyncio.sleep(0)  # one step runs the task into the delay (ready tasks run FIFO)
    assert model.requests
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(model.requests) == 1  # not retried


async def test_cancellation_during_the_backoff_propagates() -> None:
    started = asyncio.Event()

    async def forever(delay: float) -> None:
        started.set()
        await asyncio.Event().wait()

    model = ScriptedModel([*errors(503), "ok"])

    async def consume() -> None:
        async for _ in stream_with_retry(model, REQUEST, sleep=forever):
            pass

    task = asyncio.create_task(consume())
    async with asyncio.timeout(5):
        await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(model.requests) == 1


async def test_leaving_early_closes_the_adapter_stream() -> None:
    closed = False

    class Tracked:
        provider = "tracked"
        name = "tracked"
        context_window: int | None = None

        async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
            nonlocal closed
            try:
                yield TextDelta("a")
                yield TextDelta("b")
            finally:
                closed = True

        async def aclose(self) -> None:
            pass

    stream = stream_with_retry(Tracked(), REQUEST)
    assert await anext(stream) == TextDelta("a")
    await stream.aclose()
    assert closed


async def test_a_default_random_is_made_per_call() -> None:
    sleeps = Sleeps()
    async for _ in stream_with_retry(ScriptedModel([*errors(500), "ok"]), REQUEST, sleep=sleeps):
        pass
    assert len(sleeps.delays) == 1
    assert 0.25 <= sleeps.delays[0] <= 0.5


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"base_delay": -1}, {"max_delay": -1}, {"jitter": 1.5}],
)
def test_policy_rejects_nonsense(kwargs: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        RetryPolicy(**kwargs)


def test_policy_is_frozen() -> None:
    policy = RetryPolicy()
    with pytest.raises(AttributeError):
        policy.max_attempts = 9  # type: ignore[misc]


async def test_each_retry_is_told_to_on_retry_before_its_wait() -> None:
    """Issue 18: retries were invisible; the caller now hears of each one (the loop turns
    it into a `tiller.model_retry` event), in order, with the delay slept after it."""
    model = ScriptedModel([*errors(500, 503), "ok"])
    sleeps = Sleeps()
    heard: list[tuple[int, int, float, int, int]] = []

    def on_retry(notice: RetryNotice) -> None:
        assert isinstance(notice.error, ModelHTTPError)
        # Told before the wait: the sleeps so far are the earlier retries'.
        status, slept = notice.error.status, len(sleeps.delays)
        heard.append((notice.attempt, notice.max_attempts, notice.delay, status, slept))

    async with asyncio.timeout(5):  # a hang guard
        events = [
            e
            async for e in stream_with_retry(
                model, REQUEST, sleep=sleeps, random=Fixed(0.0), on_retry=on_retry
            )
        ]
    assert TextDelta("ok") in events
    assert heard == [(1, 4, 0.5, 500, 0), (2, 4, 1.0, 503, 1)]
    assert sleeps.delays == [0.5, 1.0]
