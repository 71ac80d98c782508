"""`LiveRun`: one served run in this process, its events kept for every reader.

The run emits synchronously; `push` encodes each event once (the bytes every SSE reader
gets) and wakes the readers. The request that started the run is one reader; a client
reattaching (`GET /runs/{id}/events`) is another, reading from any index. Readers never
slow the run down: they read the shared list at their own pace.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from ..cancel import CancellationToken
from ..events import Event, encode_json
from ..loop import SteeringQueue

__all__ = ["LiveRun"]

_TERMINAL = frozenset({"RUN_FINISHED", "RUN_ERROR"})


@dataclass(eq=False)
class LiveRun:
    """A run going on in this process (or just ended here)."""

    run_id: str
    thread_id: str
    cancel: CancellationToken
    steering: SteeringQueue
    #: Whether the run goes on when the client that started it disconnects.
    detached: bool = False
    #: Each event as AG-UI JSON, in order.
    frames: list[bytes] = field(default_factory=list)
    #: The stream's terminal event was pushed, or the run's task ended.
    done: bool = False
    task: asyncio.Task[None] | None = None
    _terminal: bytes | None = None
    _waiters: list[asyncio.Future[None]] = field(default_factory=list)

    def push(self, event: Event) -> None:
        """The run's event listener (synchronous, on the run's loop). The terminal event
        is held back until `finish`: a client that answers the moment it reads it (a
        resume, a frontend tool's result) must find the run's thread free and its
        checkpoint final."""
        if self.done or self._terminal is not None:
            return
        if event.type in _TERMINAL:
            self._terminal = encode_json(event)
            return
        self.frames.append(encode_json(event))
        self._wake()

    def finish(self, replacement: bytes | None = None) -> None:
        """The run's task ended, its thread released: the terminal event goes out (or
        `replacement`, e.g. a shutdown's `RUN_ERROR`), and readers stop after it."""
        if self.done:
            return
        terminal = replacement if replacement is not None else self._terminal
        if terminal is not None:
            self.frames.append(terminal)
        self.done = True
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def follow(
        self, start: int = 0, *, idle: float | None = None
    ) -> AsyncIterator[tuple[int, bytes] | None]:
        """The frames from index `start` on, with their indices, as they come, until the
        run is done. Yields None after `idle` seconds without a frame (for a keep-alive)."""
        index = max(0, start)
        while True:
            while index < len(self.frames):
                yield index, self.frames[index]
                index += 1
            if self.done:
                return
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, idle)
            except TimeoutError:
                yield None
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
