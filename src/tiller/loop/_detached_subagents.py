"""`DetachedSubagents`: the subagents a person sent to the background, and their reports.

A subagent runs inside its parent's `agent` call, in a task of its own, and that call
waits for it, or for the step's background token (`ExecContext.background`, fired by
`DetachSwitch.detach()`), whichever comes first — as `execute_command` waits for its
command. When the token fires first, the child is handed over here: the call returns at
once (the step goes on), and the child keeps running, owned by the run, not the step.

Its report then arrives as a background command's exit does: a note through the run's
`Notifier`, folded into the next user turn (`[background work: {subagent_run_id}] ...`).
A run whose model gives its final answer while a detached child still works, or before
the child's note was read, is not finished: the loop waits for the children
(`wait_and_report`) and gives the model a step to read their reports. A run that ends any
other way (cancelled, failed, a ceiling) cancels the children still running (`aclose`),
as it kills its background commands: no task outlives the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import Any, Final

from ..cancel import CancellationToken
from ..tools import Notifier
from ..tools.builtin import SubagentReport, describe_report

__all__ = ["DetachedSubagents", "until_detached"]

_logger: Final = logging.getLogger(__name__)


async def until_detached(task: asyncio.Task[SubagentReport], background: CancellationToken) -> bool:
    """Wait until `task` ends or `background` fires; returns whether it fired first (or
    had fired already). Cancelled, it cancels `task` and waits for it to unwind."""
    event_loop = asyncio.get_running_loop()
    fired: asyncio.Future[None] = event_loop.create_future()
    handle = background.add_callback(_resolve_on, event_loop, fired)
    try:
        either: list[asyncio.Future[Any]] = [task, fired]
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        await asyncio.wait([task])  # its own exception is its own; ours propagates
        raise
    finally:
        handle.remove()
        fired.cancel()
    return not task.done()


class DetachedSubagents:
    """A run's children sent to the background, by subagent run id; see the module
    docstring. `notifier` is the run's (its notes are read at the next step)."""

    __slots__ = ("_notifier", "_reported", "_running")

    def __init__(self, notifier: Notifier) -> None:
        self._notifier = notifier
        self._running: dict[str, tuple[str, asyncio.Task[SubagentReport]]] = {}
        #: Subagent run ids whose report was posted (to tell their notes from others').
        self._reported: set[str] = set()

    def __len__(self) -> int:
        return len(self._running)

    def adopt(self, run_id: str, description: str, task: asyncio.Task[SubagentReport]) -> None:
        """From now on the run owns `task` (the child `run_id`); its report is posted as a
        note when it ends."""
        self._running[run_id] = (description, task)
        task.add_done_callback(functools.partial(self._ended, run_id))

    def pending(self) -> bool:
        """Whether a detached child still runs, or its report waits unread."""
        return bool(self._running) or any(
            source in self._reported for source in self._notifier.sources()
        )

    async def wait_and_report(self) -> bool:
        """Wait for every detached child; returns whether one's report is still unread
        (waiting in the notifier), so the run must give the model a step to read it."""
        while self._running:
            await asyncio.wait([task for _, task in self._running.values()])
            for run_id in [r for r, (_, task) in self._running.items() if task.done()]:
                self._report(run_id)
        return any(source in self._reported for source in self._notifier.sources())

    async def aclose(self) -> None:
        """Cancel the children still running and wait for them to unwind (their reports
        are not posted: the run is over)."""
        running, self._running = self._running, {}
        tasks = [task for _, task in running.values()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def _ended(self, run_id: str, _task: asyncio.Task[SubagentReport]) -> None:
        self._report(run_id)

    def _report(self, run_id: str) -> None:
        """Post the report of the ended child `run_id` (once)."""
        entry = self._running.pop(run_id, None)
        if entry is None:
            return
        description, task = entry
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            _logger.error("subagent %s failed in the background", run_id, exc_info=error)
            text = f"the subagent ({description}) failed in the background: {error}"
        else:
            text = f"the subagent ({description}) ended:\n{describe_report(task.result())}"
        self._reported.add(run_id)
        self._notifier.send(run_id, text)


def _resolve_on(event_loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
    """Token callback (any thread): resolve `future` on its loop."""
    with contextlib.suppress(RuntimeError):  # the loop closed: no one waits any more
        event_loop.call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
