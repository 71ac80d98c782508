"""Retrying a model call: bounded exponential backoff with jitter, only before the stream.

`stream_with_retry` is also the border where whatever an adapter lets slip becomes a
`ModelError`: anything else it raises (a bug, an untranslated httpx error) arrives at the
caller as a non-retryable `ModelError` chained `from` the original. Two exceptions are
never touched, because they are not failures of the call: `asyncio.CancelledError` (someone
cancelled the task) and `tiller.errors.Cancelled` (the run's token fired).

**A call is retried only while nothing has been yielded.** Once an event reached the
caller, it may already be on a user's screen or in the transcript; replaying the call
would show the text twice and could repeat a tool call. So a failure mid-stream
propagates, and the caller keeps the partial response (law 8) and decides what to do.

**Waits.** Attempt *n* (1-based) that fails waits `base_delay * 2**(n-1)`, capped at
`max_delay`, then shortened by up to `jitter` of itself (so clients that failed together
do not retry together). A provider's `retry_after` is a floor: the wait is never shorter
than it says. `max_delay` is the longest this policy ever waits at once, so when a
provider asks for more than `max_delay` the call is not retried at all — sleeping less
would be refused again, and sleeping longer is a decision for the caller, not a hidden one.

**Seen, not hidden.** Each retry is logged, and handed to the caller's `on_retry` (a
`RetryNotice`: which attempt failed, why, and how long until the next) before the wait, so
a person watching sees "retrying in 2 s: HTTP 500 …" instead of a pause. The model layer
prints nothing itself: the loop turns the notice into a `tiller.model_retry` event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from random import Random
from typing import Final

from ..errors import Cancelled, UsageError
from ._base import Model, ModelRequest, StreamEvent
from ._errors import ModelError

__all__ = ["RetryNotice", "RetryPolicy", "stream_with_retry"]

_logger: Final = logging.getLogger(__name__)


@dataclass(slots=True, frozen=True)
class RetryPolicy:
    """How often, and how patiently, to retry a model call that failed before streaming.

    `max_attempts` counts the first try (1 means never retry). Delays are seconds. `jitter`
    is the fraction (0 to 1) by which a backoff delay may be randomly shortened.
    """

    max_attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 30.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise UsageError(
                f"RetryPolicy.max_attempts must be at least 1, not {self.max_attempts}"
            )
        if self.base_delay < 0 or self.max_delay < 0:
            raise UsageError("RetryPolicy delays must not be negative")
        if not 0 <= self.jitter <= 1:
            raise UsageError(f"RetryPolicy.jitter must be between 0 and 1, not {self.jitter}")

    def delay(self, attempt: int, error: ModelError, random: Random) -> float | None:
        """Seconds to wait after failed attempt `attempt` (1-based), or None: do not retry
        (the error is final, attempts are used up, or the provider asks for a longer wait
        than `max_delay`)."""
        if not error.retryable or attempt >= self.max_attempts:
            return None
        floor = error.retry_after or 0.0
        if floor > self.max_delay:
            return None
        backoff = min(self.max_delay, self.base_delay * 2.0 ** (attempt - 1))
        backoff *= 1 - self.jitter * random.random()
        return max(backoff, floor)


@dataclass(slots=True, frozen=True)
class RetryNotice:
    """A failed attempt that will be retried: attempt `attempt` (1-based) of at most
    `max_attempts` failed with `error`; the next starts after `delay` seconds."""

    attempt: int
    max_attempts: int
    delay: float
    error: ModelError


async def stream_with_retry(
    model: Model,
    request: ModelRequest,
    policy: RetryPolicy | None = None,
    *,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    random: Random | None = None,
    on_retry: Callable[[RetryNotice], None] | None = None,
) -> AsyncGenerator[StreamEvent, None]:
    """Stream `model`'s response to `request`, retrying failures that happen before the
    first event (see the module docstring for when, and how long it waits).

    The error that ends the stream is the last attempt's, with a note saying how many
    attempts were made and why no more were. `sleep` and `random` are seams for tests
    (record delays, fix the jitter); by default a fresh `Random` is made when a retry
    first needs one (seeding costs microseconds, and most calls never retry). `on_retry`
    hears of each retry before its wait (it must not block: it is called synchronously).

    It is an async generator: `aclose()` it (or leave `async for` with `break`) to close
    the adapter's stream, and with it the connection, at once.
    """
    policy = RetryPolicy() if policy is None else policy
    rng = random
    attempt = 0
    while True:
        attempt += 1
        yielded = False
        error: ModelError
        stream: AsyncIterator[StreamEvent] | None = None
        try:
            while True:
                # Only the adapter's own work is inside the handlers: an exception thrown
                # into this generator at `yield` by its consumer is not an adapter failure.
                try:
                    if stream is None:
                        stream = model.stream(request)
                    event = await anext(stream)
                except StopAsyncIteration:
                    return
                except (asyncio.CancelledError, Cancelled):
                    raise
                except ModelError as exc:
                    error = exc
                    break
                except Exception as exc:
                    error = _translate(model, exc)
                    break
                yielded = True
                yield event
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

        if rng is None and not yielded:
            rng = Random()
        delay = None if yielded or rng is None else policy.delay(attempt, error, rng)
        if delay is None:
            error.add_note(_why_not_retried(attempt, error, policy, yielded=yielded))
            raise error
        _logger.info(
            "model %s:%s failed on attempt %d of %d (%s); retrying in %.2fs",
            model.provider,
            model.name,
            attempt,
            policy.max_attempts,
            error,
            delay,
        )
        if on_retry is not None:
            on_retry(RetryNotice(attempt, policy.max_attempts, delay, error))
        await sleep(delay)


def _translate(model: Model, exc: Exception) -> ModelError:
    """An adapter let a foreign exception through: wrap it, as `raise ... from exc` would."""
    error = ModelError(
        f"the {model.provider} model adapter failed: {type(exc).__name__}: {exc}",
        provider=model.provider,
    )
    error.__cause__ = exc
    error.__suppress_context__ = True
    return error


def _why_not_retried(attempt: int, error: ModelError, policy: RetryPolicy, *, yielded: bool) -> str:
    tries = f"{attempt} attempt{'s' if attempt != 1 else ''}"
    if yielded:
        why = "it failed mid-stream, after events were delivered (a retry would repeat them)"
    elif not error.retryable:
        why = "the error is not retryable"
    elif error.retry_after is not None and error.retry_after > policy.max_delay:
        why = (
            f"the provider asked to wait {error.retry_after:g}s, "
            f"longer than RetryPolicy.max_delay ({policy.max_delay:g}s)"
        )
    else:
        why = f"RetryPolicy.max_attempts is {policy.max_attempts}"
    return f"tiller: model call gave up after {tries}: {why}"
