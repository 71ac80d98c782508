"""The event sink: one run's pipe from emitters to subscribers.

Per event, in order: the cancellation check (after cancel only closing and terminal
events pass, so a cancelled run can still close what it opened), subagent attribution,
the transformer chain (each maps one event to zero or more), the verifier, then delivery
to every subscriber, and, for a state event, to the state observer (the run context's
state manager, which so learns of state events it did not make itself: a transformer's,
or one the agent emitted by hand, and the next delta it makes applies).

Emitting is synchronous: it returns once the event is in every subscriber's buffer, and
it raises right there if the event was refused. A worker thread's emit is handed to the
event loop that owns the sink and waits for it, so events keep one order and refusals
still reach the emitting code.

Each subscriber has a bounded buffer. One that falls too far behind is detached: it reads
what it already has, then gets `SubscriberLagged`; the run goes on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

from ..cancel import CancellationToken
from ..errors import Cancelled, ProtocolViolation, SubscriberLagged, UsageError
from ._types import Event
from ._verifier import Verifier

__all__ = [
    "EventSink",
    "Subscription",
    "Transformer",
    "TransformerFactory",
    "check_transformer_factory",
    "transformers_of",
]

_logger = logging.getLogger(__name__)

#: Events that close something, plus the terminal events: always let through after cancel.
CLOSING_TYPES = frozenset(
    {
        "TEXT_MESSAGE_END",
        "TOOL_CALL_END",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "STEP_FINISHED",
        "SUBAGENT_FINISHED",
        "SUBAGENT_ERROR",
        "RUN_FINISHED",
        "RUN_ERROR",
    }
)
_TERMINAL = frozenset({"RUN_FINISHED", "RUN_ERROR"})
_STATE_TYPES = frozenset({"STATE_SNAPSHOT", "STATE_DELTA"})

DEFAULT_BUFFER = 10_000


class Transformer(Protocol):
    """Maps one outgoing event to zero or more. Stateful transformers belong to one run."""

    def transform(self, event: Event) -> Iterable[Event]: ...


#: What a long-lived owner of many runs (an `Agent`, a server) takes: a function that
#: builds a fresh chain for each run, because transformers keep per-run state (the calls
#: they dropped, the ids they saw) and two runs must never share it.
TransformerFactory = Callable[[], Sequence[Transformer]]


def check_transformer_factory(factory: object) -> None:
    """Refuse a list (or one transformer) passed where a factory belongs, with a message,
    before any run starts."""
    if factory is not None and (not callable(factory) or hasattr(factory, "transform")):
        raise UsageError(
            "transformers= takes a factory that builds each run's transformers, e.g. "
            "transformers=lambda: [FilterToolCalls.deny(['secret'])]; transformers keep "
            "per-run state, so runs must not share them"
        )


def transformers_of(factory: TransformerFactory | None) -> list[Transformer]:
    """One run's chain from `factory` (none without one)."""
    check_transformer_factory(factory)
    if factory is None:
        return []
    chain = list(factory())
    for transformer in chain:
        if not callable(getattr(transformer, "transform", None)):
            raise UsageError(
                f"the transformers factory returned {transformer!r}, which has no "
                "transform(event) method"
            )
    return chain


@dataclass(slots=True, eq=False)
class SubagentScope:
    """Which subagent the current task's events belong to; one per open subagent handle."""

    sink: EventSink
    subagent_run_id: str
    parent: SubagentScope | None
    closed: bool = False


#: The subagent scope of the running task. A ContextVar, so attribution follows the task
#: (and threads started with `asyncio.to_thread`), never a shared stack.
SCOPE: ContextVar[SubagentScope | None] = ContextVar("tiller_subagent_scope", default=None)


class Subscription:
    """A subscriber's bounded buffer of events; async-iterable, or `drain()`ed synchronously."""

    __slots__ = ("_buffer", "_closed", "_error", "_maxsize", "_sink", "_waiter")

    def __init__(self, sink: EventSink, maxsize: int | None) -> None:
        self._sink = sink
        self._buffer: deque[Event] = deque()
        self._maxsize = maxsize
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False
        self._error: SubscriberLagged | None = None

    @property
    def detached(self) -> bool:
        """True once the sink stopped delivering here (lagged, closed, or run ended)."""
        return self._closed

    @property
    def error(self) -> SubscriberLagged | None:
        return self._error

    def drain(self) -> list[Event]:
        """Everything buffered so far, removed from the buffer. Never waits."""
        events = list(self._buffer)
        self._buffer.clear()
        return events

    def close(self) -> None:
        """Stop receiving; the buffered events can still be read."""
        self._sink._unsubscribe(self)
        self._finish()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        while not self._buffer:
            if self._error is not None:
                raise self._error
            if self._closed:
                raise StopAsyncIteration
            event_loop = asyncio.get_running_loop()
            self._sink._bind_loop(event_loop)
            self._waiter = event_loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._buffer.popleft()

    # Called by the sink, always on the loop thread (or the only thread).

    def _put(self, event: Event) -> bool:
        if self._maxsize is not None and len(self._buffer) >= self._maxsize:
            self._error = SubscriberLagged(
                f"subscriber fell {self._maxsize} events behind and was detached; "
                "read faster, use a larger buffer, or reattach from the event log"
            )
            self._finish()
            return False
        self._buffer.append(event)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        return True

    def _finish(self) -> None:
        self._closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class EventSink:
    """Cancellation check, attribution, transformers, verifier, delivery: one run's stream."""

    def __init__(
        self,
        *,
        cancel: CancellationToken | None = None,
        transformers: Sequence[Transformer] = (),
        verify: bool = True,
    ) -> None:
        self.cancel = cancel if cancel is not None else CancellationToken()
        self._transformers = tuple(transformers)
        self.verifier: Verifier | None = Verifier() if verify else None
        self._subscribers: list[Subscription] = []
        self._listeners: list[Callable[[Event], object]] = []
        self._state_observer: Callable[[Event], None] | None = None
        self._terminated = False
        self._owner_thread = threading.get_ident()
        self._lock = threading.Lock()
        self._event_loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):  # no loop yet: bound on first async read
            self._event_loop = asyncio.get_running_loop()

    @property
    def terminated(self) -> bool:
        """True once `RUN_FINISHED` or `RUN_ERROR` went out."""
        return self._terminated

    def subscribe(self, maxsize: int | None = DEFAULT_BUFFER) -> Subscription:
        """A new subscriber that receives every event emitted from now on.

        `maxsize=None` is unbounded (the test harness and the run's own driver use it).
        """
        if maxsize is not None and maxsize < 1:
            raise UsageError("a subscription buffer needs room for at least one event")
        subscription = Subscription(self, maxsize)
        if self._terminated:
            subscription._finish()
        else:
            self._subscribers.append(subscription)
        return subscription

    def listen(self, listener: Callable[[Event], object]) -> None:
        """Call `listener` with every delivered event, synchronously, as it is emitted.

        For observers that must see the run as it is now (a terminal view, a test that
        steers at a given step), unlike a subscription, which is read later. A listener
        that raises is logged and skipped: an observer never breaks the run.
        """
        self._listeners.append(listener)

    def observe_state(self, observer: Callable[[Event], None]) -> None:
        """Call `observer` with every delivered `STATE_SNAPSHOT` / `STATE_DELTA`, after the
        subscribers have it (one observer: the run context's state manager)."""
        self._state_observer = observer

    def emit(self, event: Event, *, attribute: bool = True) -> None:
        """Send one event through the pipeline; raises `Cancelled` or `ProtocolViolation`.

        With `attribute=False` the event keeps the `subagent_run_id` it carries (even
        none): handles use it so a message keeps its opener's owner wherever it goes on.
        """
        if threading.get_ident() != self._owner_thread:
            self._emit_from_thread(event, forced=False, attribute=attribute)
            return
        if attribute:
            self._attribute(event)
        self._emit(event, forced=False)

    def emit_forced(self, event: Event, *, attribute: bool = True) -> None:
        """Like `emit`, but past the cancellation check (terminal events from the driver)."""
        if threading.get_ident() != self._owner_thread:
            self._emit_from_thread(event, forced=True, attribute=attribute)
            return
        if attribute:
            self._attribute(event)
        self._emit(event, forced=True)

    def emit_terminal(self, event: Event) -> None:
        """Deliver a `RUN_ERROR` that must end the stream whatever the verifier thinks.

        The driver's last resort, so readers never wait forever: a chunked call's half
        written arguments are completed first (`_deliver`), and if a transformer dropped
        or replaced the terminal event, or the verifier still refuses it, it goes out as
        it is. A stream that ends beats one that hangs.
        """
        with contextlib.suppress(ProtocolViolation):
            self.emit_forced(event)
        if self._terminated:
            return
        if self.verifier is not None:
            self.verifier.ended = True
        verifier, self.verifier = self.verifier, None
        try:
            self._deliver(event)
        finally:
            self.verifier = verifier

    # ── internals ────────────────────────────────────────────────────────────────

    def _bind_loop(self, event_loop: asyncio.AbstractEventLoop) -> None:
        if self._event_loop is None:
            self._event_loop = event_loop

    def current_scope(self) -> SubagentScope | None:
        """The innermost open subagent scope of this sink in the calling task, if any."""
        scope = SCOPE.get()
        while scope is not None and (scope.closed or scope.sink is not self):
            scope = scope.parent
        return scope

    def _attribute(self, event: Event) -> None:
        if event.attributable and event.subagent_run_id is None:  # type: ignore[attr-defined]
            scope = self.current_scope()
            if scope is not None:
                event.subagent_run_id = scope.subagent_run_id  # type: ignore[attr-defined]

    def _emit(self, event: Event, *, forced: bool) -> None:
        if not forced and event.type not in CLOSING_TYPES and self.cancel.is_cancelled:
            raise Cancelled()
        if self._transformers:
            for out in self._transform(event):
                self._deliver(out)
        else:
            self._deliver(event)

    def _transform(self, event: Event) -> list[Event]:
        events = [event]
        for transformer in self._transformers:
            events = [out for each in events for out in transformer.transform(each)]
        return events

    def _deliver(self, event: Event) -> None:
        verifier = self.verifier
        if verifier is not None:
            if event.type == "RUN_ERROR" and not verifier.ended:
                # Clients judge a chunked call's arguments at the next event, whatever it
                # is: half-written ones are completed first, so the error ends validly.
                completion = verifier.completion_before_error()
                if completion is not None:
                    self._deliver(completion)
            verifier.check(event)
        elif self._terminated:
            return
        lagged: list[Subscription] | None = None
        for subscription in self._subscribers:
            if not subscription._put(event):
                lagged = [subscription] if lagged is None else [*lagged, subscription]
        if lagged is not None:
            for subscription in lagged:
                self._subscribers.remove(subscription)
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                _logger.exception("an event listener failed on %s; it was skipped", event.type)
        if self._state_observer is not None and event.type in _STATE_TYPES:
            self._state_observer(event)
        if event.type in _TERMINAL:
            self._terminated = True
            # No state event comes after the end: the observer (the run's context, which
            # holds this sink) is let go, so the two make no reference cycle.
            self._state_observer = None
            for subscription in self._subscribers:
                subscription._finish()
            self._subscribers.clear()

    def _emit_from_thread(self, event: Event, *, forced: bool, attribute: bool) -> None:
        # Attribution reads the thread's own context (copied by asyncio.to_thread).
        if attribute:
            self._attribute(event)
        event_loop = self._event_loop
        if event_loop is None or event_loop.is_closed():
            with self._lock:
                self._emit(event, forced=forced)
            return
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def run_on_loop() -> None:
            try:
                self._emit(event, forced=forced)
            except BaseException as exc:  # handed back to the emitting thread
                done.set_exception(exc)
            else:
                done.set_result(None)

        event_loop.call_soon_threadsafe(run_on_loop)
        done.result()

    def _unsubscribe(self, subscription: Subscription) -> None:
        if subscription in self._subscribers:
            self._subscribers.remove(subscription)
