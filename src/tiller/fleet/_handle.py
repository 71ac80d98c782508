"""`RunHandle`: one fleet run, watched and steered from any process that reaches the store.

- `await handle.result()` waits for the run's result record (`RunOutcomeRecord`). It
  subscribes to the record's hint subject *before* its first read, so a record written
  before the call or while it starts is never missed; the hint only wakes it early, the
  record is polled all the same (a missed message costs one poll interval).
- `handle.events()` yields the run's AG-UI events from its event log, then follows it
  live, polling. A caller that reconnects passes `after=` the number of log events it
  saw (every event but the `WORKER_LOST` ones put in here) and gets no duplicate. A run
  continued by another worker appends a new segment (`RUN_STARTED` ... terminal) to the
  same log; a segment cut off by its worker's death has no terminal event, so a
  `RUN_ERROR` with code `WORKER_LOST` is put in before the next segment's `RUN_STARTED`:
  the stream stays valid AG-UI. It ends after the terminal event of the segment that
  wrote the run's result; a segment open after a `suspended` record while the run's
  checkpoint is `running` is its continuation's, followed to its end.
- `diff()` loads what the run changed in its snapshot workspace (the result's `diff_ref`).
- `cancel(reason)`, `steer(text)` go through `tiller.store.ControlStore`: the worker
  running the run applies them, wherever it is.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from ..store import (
    Bus,
    CheckpointStore,
    ControlStore,
    EventLog,
    NotFound,
    StoreError,
    Subscription,
)
from ._results import ResultStore, RunOutcomeRecord
from ._workspace_diff import WorkspaceDiff, load_diff

__all__ = ["WORKER_LOST", "RunHandle"]

#: The code of the `RUN_ERROR` that closes a segment cut off by its worker's death.
WORKER_LOST = "WORKER_LOST"
_TERMINAL = frozenset({"RUN_FINISHED", "RUN_ERROR"})


class RunHandle:
    """One fleet run by its id (see the module docstring)."""

    def __init__(self, bus: Bus, run_id: str, *, poll_interval: float = 0.2) -> None:
        self.bus = bus
        self.run_id = run_id
        self.poll_interval = poll_interval
        self._results = ResultStore(bus)
        self._control = ControlStore(bus)
        self._log = EventLog(bus)
        self._checkpoints = CheckpointStore(bus)

    def __repr__(self) -> str:
        return f"RunHandle({self.run_id!r})"

    async def peek(self) -> RunOutcomeRecord | None:
        """The run's result record now, or None."""
        return await self._results.get(self.run_id)

    async def result(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 (issue 16's API: result(timeout=...))
        *,
        through_holds: bool = False,
    ) -> RunOutcomeRecord:
        """The run's result, once it is written (`TimeoutError` after `timeout` seconds).
        A run held for a person (`suspended`, `blocked`) returns its held record, unless
        `through_holds`: then this waits for the record of the continuation that ends it."""
        async with asyncio.timeout(timeout):
            hints = await self._subscribe()
            try:
                while True:
                    record = await self._results.get(self.run_id)
                    if record is not None and (not record.held or not through_holds):
                        return record
                    await _wait_hint(hints, self.poll_interval)
            finally:
                if hints is not None:
                    with contextlib.suppress(Exception):
                        await hints.aclose()

    async def _subscribe(self) -> Subscription | None:
        try:
            return await self.bus.subscribe(ResultStore.subject(self.run_id))
        except StoreError:
            return None  # polling alone then

    async def events(
        self, *, after: int = 0, past: RunOutcomeRecord | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """The run's events as AG-UI JSON objects, from the `after`-th on (see the
        module docstring); ends after the terminal event of the run's last segment.
        `past` is a result record the stream does not end on: the held record of a run
        whose continuation was just queued (its record replaces the held one)."""
        index = after
        segment_open = False
        # When resuming mid-log, whether a segment is open there is read from the log.
        if after > 0:
            earlier = (await self._log.read(self.run_id))[:after]
            segment_open = _open_at_end(earlier)
        while True:
            record = await self._results.get(self.run_id)
            fresh = await self._log.read(self.run_id, after=index)
            for event in fresh:
                index += 1
                kind = event.get("type")
                if kind == "RUN_STARTED":
                    if segment_open:
                        yield _worker_lost()
                    segment_open = True
                yield event
                if kind in _TERMINAL:
                    segment_open = False
            if record is not None and record != past and not fresh:
                if segment_open and await self._continuing(record):
                    # A held run's continuation writes this segment: it goes on.
                    await asyncio.sleep(self.poll_interval)
                    continue
                # The result is written once its segment's log is complete, and the log
                # was read after the record: nothing more is coming. (A segment still
                # open here was cut off, and the run's result came from its checkpoint.)
                if segment_open:
                    yield _worker_lost()
                return
            if not fresh:
                await asyncio.sleep(self.poll_interval)

    async def diff(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 (as result(timeout=...))
    ) -> WorkspaceDiff | None:
        """What the run changed in its snapshot workspace, once its result is written
        (None for another kind of workspace, or a run that never started)."""
        record = await self.result(timeout)
        if record.diff_ref is None:
            return None
        return await load_diff(self.bus, record.diff_ref)

    async def _continuing(self, record: RunOutcomeRecord) -> bool:
        """The open segment after a `suspended` record is its continuation's, still
        running (its checkpoint says `running`), not a segment cut off: the record that
        ends it is not written yet. (`blocked` waits for a person: nothing comes.)"""
        if record.status != "suspended":
            return False
        try:
            checkpoint = await self._checkpoints.load(self.run_id)
        except NotFound:
            return False
        return checkpoint.status == "running"

    async def cancel(self, reason: str = "cancelled by its handle") -> None:
        """Ask the run to stop; the worker running it (or the next one) applies it."""
        await self._control.request_cancel(self.run_id, reason)

    async def steer(self, text: str) -> str:
        """Queue `text` for the run's next step; returns the steer's id."""
        return await self._control.steer(self.run_id, text)


def _worker_lost() -> dict[str, Any]:
    return {
        "type": "RUN_ERROR",
        "message": "the worker running this run was lost; another worker went on with it",
        "code": WORKER_LOST,
    }


def _open_at_end(events: list[dict[str, Any]]) -> bool:
    open_ = False
    for event in events:
        if event.get("type") == "RUN_STARTED":
            open_ = True
        elif event.get("type") in _TERMINAL:
            open_ = False
    return open_


async def _wait_hint(hints: Subscription | None, poll: float) -> None:
    """Until a hint arrives or `poll` seconds pass."""
    if hints is None:
        await asyncio.sleep(poll)
        return
    with contextlib.suppress(TimeoutError, StopAsyncIteration, StoreError):
        async with asyncio.timeout(poll):
            await anext(aiter(hints))
