"""Stopping a background task without swallowing the stopper's own cancellation.

The obvious spellings lose a cancellation that came from outside (DESIGN.md, law 8):
`task.cancel(); with suppress(CancelledError): await task` cannot tell the task's own
`CancelledError` from one thrown into its caller, and `with suppress(CancelledError):
await asyncio.wait([task])` only ever suppresses the caller's (`asyncio.wait` never raises
the waited task's). `stop_task` cancels, waits for the end, collects the task's outcome, and
lets a cancellation of the caller go on once the task has ended.

Waiting for the end before re-raising (rather than at once) is the point of stopping a
task: its owner is about to let go of what the task uses (the lease it renews, the
connection it polls, the record it beats), and doing that under a task still running
races it; nothing outlives its owner. The wait is bounded because the tasks stopped here
end at their next await once cancelled (a task that ignores its cancellation would hold
its stopper, which is why this is for tiller's own background loops, not for any task).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

from tiller.errors import UsageError

__all__ = ["stop_task", "wait_ended"]

_logger: Final = logging.getLogger("tiller.tasks")


async def stop_task(task: asyncio.Task[Any]) -> None:
    """Cancel `task` and wait until it has ended (see `wait_ended`)."""
    task.cancel()
    await wait_ended(task)


async def wait_ended(task: asyncio.Task[Any]) -> None:
    """Wait until `task` has ended, even if the calling task is cancelled meanwhile, then
    raise that cancellation. The task's failure, if it failed, is logged rather than
    raised: the caller is stopping it, and a `finally` that stops it must not lose its
    own exception to the task's; fetching it also spares asyncio's "exception was never
    retrieved" warning."""
    if task is asyncio.current_task():
        raise UsageError("a task cannot wait for its own end; stop it from another task")
    caller_cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError as exc:
            # The first cancellation is the one raised at the end: a later one (a cancel
            # scope's, say) must not pass for it, or the scope would take it as its own.
            # Each still counts in `Task.cancelling()`, so their owners see them all.
            if caller_cancelled is None:
                caller_cancelled = exc
    if not task.cancelled() and (failure := task.exception()) is not None:
        _logger.error("task %s failed before it was stopped", task.get_name(), exc_info=failure)
    if caller_cancelled is not None:
        raise caller_cancelled
