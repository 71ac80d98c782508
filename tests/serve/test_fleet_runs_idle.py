"""The served fleet run's keep-alive wrapper (`_idle`): closed while the frame it waits
for is slow to stop, a cancellation of whoever closes it goes on (DESIGN §4 law 8)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from tiller.serve._fleet_runs import _idle

from .._slow_to_end import SlowToEnd, cancel_the_stopper


async def test_closing_the_keep_alive_stream_does_not_swallow_a_cancel() -> None:
    slow = SlowToEnd()

    async def frames() -> AsyncIterator[Any]:
        await slow.block()  # the next frame never comes; stopped, it is slow to end
        yield None

    stream = _idle(frames(), 0.01)
    assert await anext(stream) is None  # a keep-alive: the frame is still pending
    await slow.entered.wait()
    await cancel_the_stopper(slow, asyncio.create_task(stream.aclose()))
