"""`SlowToEnd`: the body of a background task that is slow to end once cancelled, for the
tests that cancel whoever is stopping it (DESIGN §4 law 8)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest


class SlowToEnd:
    """Stands in for what a background task awaits (a renewal, a heartbeat, a poll): it
    blocks until cancelled, then holds its end (a `finally`) until `release` is set."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.release = asyncio.Event()
        self.ended = asyncio.Event()

    async def block(self, *_args: Any, **_kwargs: Any) -> Any:
        self.entered.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.cancelled.set()
            await self.release.wait()
            self.ended.set()


async def cancel_the_stopper(slow: SlowToEnd, stopping: asyncio.Task[Any]) -> None:
    """Cancel `stopping` (a task stopping the one `slow` blocks) while it waits for that
    task's end; the cancellation must come out of `stopping` once the task has ended."""
    await slow.cancelled.wait()  # the stopper cancelled the task and waits for its end
    stopping.cancel()
    slow.release.set()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert stopping.cancelled()
    assert slow.ended.is_set()
