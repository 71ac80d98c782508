"""`stop_task` and `wait_ended`: a background task is stopped and waited for, and a
cancellation of the caller meanwhile is raised once the task has ended, never swallowed
(DESIGN §4 law 8). The task's own failure is logged, not raised."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tiller._task_stop import stop_task, wait_ended
from tiller.cancel import CancellationToken
from tiller.errors import Cancelled, UsageError

from ._slow_to_end import SlowToEnd


async def test_stop_task_cancels_the_task_and_waits_for_its_end() -> None:
    slow = SlowToEnd()
    task = asyncio.create_task(slow.block())
    await slow.entered.wait()
    stopping = asyncio.create_task(stop_task(task))
    await slow.cancelled.wait()
    slow.release.set()
    await stopping
    assert task.cancelled()
    assert slow.ended.is_set()


async def test_a_cancelled_caller_is_cancelled_once_the_task_has_ended() -> None:
    slow = SlowToEnd()
    task = asyncio.create_task(slow.block())
    await slow.entered.wait()
    stopping = asyncio.create_task(stop_task(task))
    await slow.cancelled.wait()
    stopping.cancel()
    await asyncio.sleep(0)  # one loop turn: the stopper takes the cancel and keeps waiting
    assert not stopping.done()
    assert not task.done()
    slow.release.set()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert task.cancelled()


async def test_the_first_cancellation_is_the_one_raised() -> None:
    """A token's scope around the stop recognises its own cancellation by its message:
    the token firing after an outside cancel must not turn that cancel into `Cancelled`."""
    slow = SlowToEnd()
    token = CancellationToken()
    task = asyncio.create_task(slow.block())

    async def stop_in_scope() -> None:
        with token.scope():
            await stop_task(task)

    await slow.entered.wait()
    stopping = asyncio.create_task(stop_in_scope())
    await slow.cancelled.wait()
    stopping.cancel("from outside")
    await asyncio.sleep(0)
    token.cancel("the token")
    slow.release.set()
    with pytest.raises(asyncio.CancelledError) as raised:
        await stopping
    assert raised.value.args == ("from outside",)


async def test_the_scope_of_a_token_that_fires_meanwhile_raises_cancelled() -> None:
    slow = SlowToEnd()
    token = CancellationToken()
    task = asyncio.create_task(slow.block())

    async def stop_in_scope() -> None:
        with token.scope():
            await stop_task(task)

    await slow.entered.wait()
    stopping = asyncio.create_task(stop_in_scope())
    await slow.cancelled.wait()
    token.cancel("the token")
    slow.release.set()
    with pytest.raises(Cancelled):
        await stopping
    assert slow.ended.is_set()


async def test_a_deadline_around_the_stop_still_times_out() -> None:
    slow = SlowToEnd()
    task = asyncio.create_task(slow.block())
    await slow.entered.wait()

    async def stop_within_a_deadline() -> None:
        async with asyncio.timeout(0):  # expires at the stopper's first wait
            await stop_task(task)

    stopping = asyncio.create_task(stop_within_a_deadline())
    await slow.cancelled.wait()
    slow.release.set()
    with pytest.raises(TimeoutError):
        await stopping
    assert task.cancelled()


async def test_the_task_failure_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    entered = asyncio.Event()

    async def fails_when_stopped() -> None:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise OSError("the store went away") from None

    task = asyncio.create_task(fails_when_stopped(), name="renewer")
    await entered.wait()
    with caplog.at_level(logging.ERROR, logger="tiller.tasks"):
        await stop_task(task)
    assert [(r.getMessage(), type(r.exc_info[1])) for r in caplog.records if r.exc_info] == [
        ("task renewer failed before it was stopped", OSError)
    ]


async def test_an_ended_task_is_not_waited_for() -> None:
    async def done() -> int:
        return 1

    task = asyncio.create_task(done())
    await task
    await stop_task(task)
    assert task.result() == 1


async def test_a_task_cannot_wait_for_its_own_end() -> None:
    with pytest.raises(UsageError, match="its own end"):
        await wait_ended(asyncio.current_task())  # type: ignore[arg-type]
