"""Run control and reattach: `/runs`, `/runs/{id}`, `/runs/{id}/events`, steer, cancel.

Everything here reads and writes the store, so it reaches a run on any server process
that shares it. A control request (steer, cancel) is stored (`ControlStore`) and the run's
watcher applies it, wherever the run is. The events endpoint replays the run's stored
event log and then follows it as the run's process writes it (or this process's own copy,
when the run is here), until the run's terminal event; a run whose process died gets a
`RUN_ERROR{RUN_LOST}` that says how to recover it, so no reader waits forever.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import orjson
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..events import RunErrorEvent, encode_json
from ..store import Checkpoint, EventLog, NotFound, StoreError
from ._http import SSE_HEADERS, error, is_json, read_body
from ._run_view import run_summary
from ._runner import Runner
from ._sse import Indexed, sse_frames

__all__ = ["RunRoutes"]

_logger = logging.getLogger(__name__)

_TERMINAL = frozenset({"RUN_FINISHED", "RUN_ERROR"})
#: How often a run on another process is looked for in the store's event log (seconds).
_LOG_POLL = 0.1
#: How long a run that has stopped may take to write its last events to the log.
_LOG_SETTLE = 2.0
_MAX_STEER = 64 * 1024


class RunRoutes:
    """The `/runs` handlers; `runner()` gives the started app's `Runner`."""

    def __init__(self, runner: Callable[[], Runner], *, keep_alive: float) -> None:
        self._runner = runner
        self.keep_alive = keep_alive

    def routes(self) -> list[Route]:
        return [
            Route("/runs", self.list_runs, methods=["GET"]),
            Route("/runs/{run_id}", self.get_run, methods=["GET"]),
            Route("/runs/{run_id}/events", self.run_events, methods=["GET"]),
            Route("/runs/{run_id}/steer", self.steer, methods=["POST"]),
            Route("/runs/{run_id}/cancel", self.cancel, methods=["POST"]),
        ]

    # ── reading ──────────────────────────────────────────────────────────────────

    async def list_runs(self, request: Request) -> Response:
        try:
            limit = max(1, min(500, int(request.query_params.get("limit", "100"))))
        except ValueError:
            return error(400, "limit must be a number")
        runner = self._runner()
        ids = await runner.checkpoints.run_ids()
        loaded = await asyncio.gather(*(_load(runner, run_id) for run_id in ids))
        found = [c for c in loaded if c is not None]
        found.sort(key=lambda c: c.revision, reverse=True)  # newest write first
        runs = [
            run_summary(c, live=_live_here(runner, c.state.run_id), brief=True)
            for c in found[:limit]
        ]
        return JSONResponse({"runs": runs})

    async def get_run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        runner = self._runner()
        checkpoint = await _load(runner, run_id)
        if checkpoint is None:
            return error(404, f"no run {run_id!r} in this server's store")
        alive = _live_here(runner, run_id) or await _alive(runner, checkpoint)
        return JSONResponse(run_summary(checkpoint, live=alive))

    async def run_events(self, request: Request) -> Response:
        """The run's events from index `after` (the number already seen; default 0), or
        after the `Last-Event-ID` a reconnecting `EventSource` sends."""
        run_id = request.path_params["run_id"]
        start = 0
        last_seen = request.headers.get("last-event-id")
        raw_after = request.query_params.get("after")
        try:
            if raw_after is not None:
                start = max(0, int(raw_after))
            elif last_seen is not None:
                start = int(last_seen) + 1
        except ValueError:
            return error(400, "after (and Last-Event-ID) must be event indices: numbers")
        runner = self._runner()
        live = runner.live.get(run_id)
        frames: AsyncIterator[Indexed]
        if live is not None:
            frames = live.follow(start, idle=self.keep_alive)
        elif await _load(runner, run_id) is None:
            return error(404, f"no run {run_id!r} in this server's store")
        else:
            frames = self._follow_log(runner, run_id, start)
        return StreamingResponse(
            sse_frames(frames, ids=True), media_type="text/event-stream", headers=SSE_HEADERS
        )

    async def _follow_log(self, runner: Runner, run_id: str, start: int) -> AsyncIterator[Indexed]:
        """The run's stored events from index `start`, then new ones as its process writes
        them, until its terminal event (a run on another process, or one that ended).

        A terminal event ends the stream unless the run is still going (a server stopped
        it and someone is recovering it: the recovery's events follow). A run that stops
        without a terminal event in the log gets `RUN_ERROR{RUN_LOST}`, once no process
        holds it and it has had time to write its last events."""
        log = EventLog(runner.bus)
        clock = asyncio.get_running_loop().time
        read_whole: set[str] = set()  # batches read to their end: not fetched again
        index = start
        ended = False  # a terminal event went out: nothing but a new run may follow it
        last_event = last_frame = clock()
        while not runner.closing.is_set():
            fresh = False
            for batch in await log.batches(run_id, skip=read_whole):
                for offset, event in enumerate(batch.events):
                    position = batch.start + offset
                    if position < index:
                        continue
                    index, fresh = position + 1, True
                    ended = event.get("type") in _TERMINAL
                    yield position, orjson.dumps(event)
                if batch.start + len(batch.events) <= index:
                    read_whole.add(batch.key)
            now = clock()
            if fresh:
                last_event = last_frame = now
                if ended and not await self._still_going(runner, run_id):
                    return
                continue
            if ended or now - last_event > _LOG_SETTLE:
                checkpoint = await _load(runner, run_id)
                held = checkpoint is not None and await _held(runner, checkpoint)
                if ended and not held:
                    return
                if not held and not ended:
                    over = checkpoint is None or checkpoint.status not in ("running", "resumed")
                    # An ended run may still be writing its last batch: one more settle.
                    if not over or now - last_event > 2 * _LOG_SETTLE:
                        yield (
                            index,
                            encode_json(RunErrorEvent(_lost(run_id, checkpoint), "RUN_LOST")),
                        )
                        return
            if now - last_frame >= self.keep_alive:
                last_frame = now
                yield None
            await asyncio.sleep(_LOG_POLL)

    @staticmethod
    async def _still_going(runner: Runner, run_id: str) -> bool:
        """After a terminal event: whether the run goes on (stopped by a shutdown, and
        recovered by a process that holds it now)."""
        checkpoint = await _load(runner, run_id)
        return (
            checkpoint is not None
            and checkpoint.status in ("running", "resumed")
            and await _held(runner, checkpoint)
        )

    # ── control ──────────────────────────────────────────────────────────────────

    async def steer(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        if not is_json(request):
            return error(415, 'send {"text": "..."} as application/json')
        body = await read_body(request, _MAX_STEER)
        if body is None:
            return error(413, "a steering message is at most 64 KiB")
        try:
            text = orjson.loads(body).get("text")
        except (orjson.JSONDecodeError, AttributeError):
            return error(400, 'send {"text": "..."} as JSON')
        if not isinstance(text, str) or not text.strip():
            return error(400, 'send {"text": "..."} with some text')
        refused = await self._refuse_control(run_id)
        if refused is not None:
            return refused
        await self._runner().control.steer(run_id, text)
        return JSONResponse({"queued": True}, status_code=202)

    async def cancel(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        if not is_json(request):
            # Never a "simple" cross-site request: a page elsewhere cannot send it.
            return error(415, "send the cancel with Content-Type: application/json")
        refused = await self._refuse_control(run_id)
        if refused is not None:
            return refused
        runner = self._runner()
        await runner.control.request_cancel(run_id, "cancelled from the API")
        live = runner.live.get(run_id)
        if live is not None:
            live.cancel.cancel("cancelled from the API")  # here: at once
        return JSONResponse({"cancelling": True}, status_code=202)

    async def _refuse_control(self, run_id: str) -> Response | None:
        """404 for an unknown run, 409 for one that takes no more requests; None while
        it runs or is starting."""
        runner = self._runner()
        live = runner.live.get(run_id)
        if live is not None:
            return error(409, f"run {run_id!r} has ended") if live.done else None
        checkpoint = await _load(runner, run_id)
        if checkpoint is None:
            if await runner.checkpoints.is_reserved(run_id):
                # Accepted but not started yet (here or in another process sharing the
                # store): the request is stored, and the run's control watcher reads it
                # when the run starts. A client may steer as soon as it has sent the run.
                return None
            return error(404, f"no run {run_id!r} in this server's store")
        status = checkpoint.status
        if status == "continued":
            return error(
                409, f"run {run_id!r} was resumed as {checkpoint.continued_as!r}; send it there"
            )
        if status != "running":
            return error(409, f"run {run_id!r} is {status}; it takes no requests")
        if not await _alive(runner, checkpoint):
            return error(409, _lost(run_id, checkpoint))
        return None


async def _load(runner: Runner, run_id: str) -> Checkpoint | None:
    """The run's checkpoint; None when there is none, or it cannot be read (logged: one
    bad record must not break a listing)."""
    try:
        return await runner.checkpoints.load(run_id)
    except NotFound:
        return None
    except (StoreError, ValidationError, ValueError) as exc:
        _logger.warning("run %s: its checkpoint cannot be read: %s", run_id, exc)
        return None


def _live_here(runner: Runner, run_id: str) -> bool:
    live = runner.live.get(run_id)
    return live is not None and not live.done


async def _held(runner: Runner, checkpoint: Checkpoint) -> bool:
    """Whether a process holds the run, whatever its status says: the thread's lease (a
    served run, renewed all along) or the run's own (renewed while it runs)."""
    state = checkpoint.state
    holder = await runner.checkpoints.thread_holder(state.thread_id)
    if holder is not None and holder[0] == state.run_id:
        return True
    return await runner.checkpoints.holder(state.run_id) is not None


async def _alive(runner: Runner, checkpoint: Checkpoint) -> bool:
    """Whether the run is going on: not over, and held by a process."""
    return checkpoint.status in ("running", "resumed") and await _held(runner, checkpoint)


def _lost(run_id: str, checkpoint: Checkpoint | None) -> str:
    if checkpoint is None:
        return f"run {run_id!r} is gone from the store"
    if checkpoint.status not in ("running", "resumed"):
        return (
            f"run {run_id!r} is {checkpoint.status}, but its last events are not in the "
            f"store's log (a write failed); GET /runs/{run_id} shows how it ended"
        )
    return (
        f"run {run_id!r} stopped without ending: the process running it is gone. "
        f"Recover it with `tiller runs resume {run_id}` (add --force if that process is "
        "surely dead)"
    )
