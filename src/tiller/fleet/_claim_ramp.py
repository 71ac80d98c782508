"""`ClaimRamp`: a worker takes on jobs gradually, one more each time its runs make progress.

A worker that has just started has shown nothing yet: it may die on its first job (a bad
host, an agent that kills its process, a deploy that is being rolled back), and on a busy
fleet it is the likeliest to hold the jobs at the queue's head, which are the ones whose
last worker just died. Claiming its whole concurrency at once would put all of those on
an unproven process, and its death would cost each of them one of its deliveries (a job
is dead-lettered after `max_deliver`, so a crash-looping worker would dead-letter jobs
eight at a time). So a worker claims one job at first and opens one more slot each time
one of its runs finishes a step or one of its jobs ends, up to its concurrency: TCP's slow
start, for claims. A warm worker ramps up in its first few steps (tens of milliseconds).
"""

from __future__ import annotations

import asyncio

__all__ = ["ClaimRamp"]


class ClaimRamp:
    """A worker's job slots: `open` of them usable (one at first), at most `concurrency`."""

    def __init__(self, concurrency: int, *, start: int = 1) -> None:
        self.concurrency = concurrency
        self.open = max(1, min(start, concurrency))
        self._free = asyncio.Semaphore(self.open)

    async def acquire(self) -> None:
        """Wait for a free slot, and take it."""
        await self._free.acquire()

    def release(self) -> None:
        """Give back a slot taken by `acquire`."""
        self._free.release()

    def progressed(self) -> None:
        """A run here made progress: one more slot opens (until all are open)."""
        if self.open < self.concurrency:
            self.open += 1
            self._free.release()
