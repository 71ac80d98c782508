"""`tiller run`'s stdin lines: an answer to a pending prompt, `/bg` to detach the running
command, anything else steers the run."""

from __future__ import annotations

import asyncio

from tiller.cli._run import DETACH_LINE, LineRouter
from tiller.loop import DetachSwitch, SteeringQueue


async def test_lines_are_routed_to_the_prompt_the_detach_switch_or_the_queue() -> None:
    queue, switch = SteeringQueue(), DetachSwitch()
    router = LineRouter(asyncio.get_running_loop(), queue, switch)
    turn = switch.token_for_turn()
    router._route("use metric units")
    router._route(f"  {DETACH_LINE} ")
    assert turn.is_cancelled
    assert queue.drain() == ["use metric units"]
    answer = asyncio.ensure_future(router.ask())
    await asyncio.sleep(0)
    router._route("y")
    assert await answer == "y"
    assert not queue


async def test_without_a_switch_the_detach_line_is_just_text() -> None:
    queue = SteeringQueue()
    LineRouter(asyncio.get_running_loop(), queue)._route(DETACH_LINE)
    assert queue.drain() == [DETACH_LINE]
