"""A run closes each attempt's model stream, even through a wrapper that only iterates it.

`RunCalls` hands out the model's own stream (no generator of its own per event). A
wrapper (the fleet's `LimitedModel`, a user's `model_wrapper`) that reads the stream with
`async for` never closes it; an async generator is still closed when it is let go, but a
stream that is an object of its own (a connection's iterator) would be left open.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path

from tiller import Agent, AllowAll, StopCause
from tiller.conversation import Usage
from tiller.loop import RunContext
from tiller.model import (
    Finish,
    Model,
    ModelError,
    ModelRequest,
    RetryPolicy,
    StreamEvent,
    TextDelta,
    UsageReport,
)


class _Connection:
    """One attempt's stream: an async iterator with `aclose`, not a generator."""

    def __init__(self, number: int, events: list[StreamEvent], closed: list[int]) -> None:
        self._number = number
        self._events = events
        self._closed = closed

    def __aiter__(self) -> _Connection:
        return self

    async def __anext__(self) -> StreamEvent:
        if self._number == 1:
            raise ModelError("overloaded", retryable=True, provider="conn")
        if not self._events:
            raise StopAsyncIteration
        return self._events.pop(0)

    async def aclose(self) -> None:
        self._closed.append(self._number)


class _ConnectionModel:
    provider = "conn"
    name = "conn-1"
    context_window: int | None = None

    def __init__(self) -> None:
        self.closed: list[int] = []
        self._attempts = 0

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self._attempts += 1
        events: list[StreamEvent] = [
            TextDelta("ok"),
            UsageReport(Usage(input_tokens=1, output_tokens=1, requests=1)),
            Finish("stop"),
        ]
        return _Connection(self._attempts, events, self.closed)

    async def aclose(self) -> None:
        pass


class _PassThrough:
    """A wrapper as the fleet's limits are one: it reads the stream, nothing more."""

    def __init__(self, wrapped: Model) -> None:
        self.wrapped = wrapped
        self.provider = wrapped.provider
        self.name = wrapped.name
        self.context_window = wrapped.context_window

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        async for event in self.wrapped.stream(request):
            yield event

    async def aclose(self) -> None:
        await self.wrapped.aclose()


async def test_each_attempt_s_stream_is_closed_through_a_wrapper(tmp_path: Path) -> None:
    model = _ConnectionModel()
    ctx = RunContext.sandboxed(tmp_path, AllowAll()).with_model_wrapper(
        lambda inner, _: _PassThrough(inner)
    )
    agent = Agent(model, retry=RetryPolicy(base_delay=0, max_delay=0, jitter=0))
    result = await agent.run_in(ctx, "hi")
    assert (result.text, result.stop_cause) == ("ok", StopCause.COMPLETED)
    assert model.closed == [1, 2], "the failed attempt's stream and the finished one's"
