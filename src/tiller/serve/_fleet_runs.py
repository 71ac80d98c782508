"""`FleetRuns`: a served request's run goes to a fleet (`tiller serve --fleet`), and its
response streams the run's events from the store, so the server holds no run in memory.

- New input: the request is read as the in-process path reads it (`_request`: the ids
  checked, `detach`; `_input`: the conversation, its context and content parts), and its
  last user turn is the run's prompt (`prompt_from_agui`): a job carries a prompt, so the
  worker's run does not see the turns before it. The job is submitted with `Fleet.submit`
  under the request's `runId` and `threadId`, jailed to the server's workspace (a path
  every worker shares). What is bad input, or what the job cannot carry, is refused with
  400 before anything is queued: ids that cannot be store keys, an illegal conversation,
  a last turn without text, frontend tools (a worker cannot hand a call back to this
  client), a client state (a job has no room for one), a run id already used. New input
  on a thread whose last run waits for answers (`INVALID_RESUME`) or is still going
  (`THREAD_BUSY`) ends the stream with `RUN_ERROR`, as in the in-process path, and
  queues nothing.
- A resume (`resume: [...]`, the answers to a suspended run's interrupts): checked against
  the thread's open interrupts as in the in-process path (`plan_resume`), then each held
  call's decision is recorded (`tiller.ops.approve` / `deny`) and the run's continuation
  is queued (`Fleet.continue_run`): a worker resumes it. Questions (`ask` interrupts) need
  their answers inside the run, which a worker cannot get: they are refused.
- The stream is `RunHandle.events()`: the run's event log from the store, followed until
  its segment's terminal event. The events are the worker's run's, so the run id in them
  is the run's: for a resume, the suspended run's (a continuation goes on under its id).
- Cancel and steer (`/runs/{id}/cancel`, `/steer`) already go through `ControlStore`,
  which the worker watches. A client that disconnects from a run that is not detached
  cancels it the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
from ag_ui.core import RunAgentInput
from starlette.responses import Response

from .._task_stop import stop_task
from ..errors import InvalidResume, TillerError, UsageError
from ..events import RunErrorEvent, RunStartedEvent, encode_json
from ..fleet import Fleet, ResultStore, RunOutcomeRecord
from ..ops import approve, deny
from ..store import ApprovalStore, Bus, CheckpointStore, ControlStore, EventLog, NotFound
from ._http import RunStreamResponse, error
from ._input import InvalidRunInput, prompt_from_agui
from ._request import check_ids, client_state, detach_of, wire_context, wire_messages
from ._resume_plan import plan_resume
from ._sse import Indexed, sse_frames
from ._thread import ThreadView

__all__ = ["FleetRuns"]

_logger = logging.getLogger(__name__)


class FleetRuns:
    """Submits the server's requests to the fleet on `queue` (see the module docstring)."""

    def __init__(
        self,
        bus: Bus,
        *,
        agent: str,
        queue: str,
        workspace: Path,
        detach: bool,
        keep_alive: float,
        lease: float | None = None,
        model: str | None = None,
    ) -> None:
        self.bus = bus
        self.agent = agent
        self.model = model
        self.workspace = workspace
        self.detach = detach
        self.keep_alive = keep_alive
        self.queue = queue
        self.lease = lease
        # None: the queue's lease, as its workers set it, is kept (`Bus.queue`).
        self.fleet = Fleet(bus, queue, lease=lease)
        self.checkpoints = CheckpointStore(bus)
        self.control = ControlStore(bus)
        self.results = ResultStore(bus)
        self._tasks: set[asyncio.Task[None]] = set()

    async def respond(self, input: RunAgentInput, *, traceparent: str | None = None) -> Response:
        """The request's response: 400 for what no worker could run, else the stream.
        `traceparent` (the request's) goes with a new run's job to the worker."""
        try:
            check_ids(input)
            if await self._taken(input.run_id):
                return error(400, f"run id {input.run_id!r} is already in use; send a new one")
            # The run the stream follows: a resume's is the suspended run it continues.
            target = input.run_id
            if input.resume:
                target, frames = await self._resume(input)
            else:
                frames = await self._start(input, traceparent)
        except (InvalidRunInput, _Refused) as exc:
            return error(400, str(exc))
        detached = detach_of(input, self.detach)
        finished = False

        async def tracked() -> AsyncIterator[Indexed]:
            nonlocal finished
            async for item in frames:
                yield item
            finished = True

        def on_close() -> None:
            if not finished and not detached:
                # The client went away: the run stops, on whichever worker has it.
                task = asyncio.get_running_loop().create_task(self._cancel(target))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

        return RunStreamResponse(sse_frames(_idle(tracked(), self.keep_alive)), on_close=on_close)

    async def _start(
        self, input: RunAgentInput, traceparent: str | None = None
    ) -> AsyncIterator[Indexed]:
        """Queue the request's new run, or say why the thread cannot take it now."""
        thread = await ThreadView.load(self.checkpoints, input.thread_id)
        # Read first, so a bad request is a 400 whatever the thread's state, as in the
        # in-process path; except on a thread with open interrupts, whose calls have no
        # results yet (the input is refused for that reason instead).
        prompt = "" if thread.paused else _prompt(input, thread)
        if (refusal := _thread_refuses(thread, input.thread_id)) is not None:
            return _failed(input, *refusal)
        try:
            handle = await self.fleet.submit(
                self.agent,
                prompt,
                workspace=str(self.workspace),
                run_id=input.run_id,
                thread_id=input.thread_id,
                model=self.model,
                traceparent=traceparent,
            )
        except UsageError as exc:  # what a fleet job refuses (its run id's own rules)
            raise _Refused(str(exc)) from exc
        return self._follow(handle.run_id, after=0, past=None)

    async def _taken(self, run_id: str) -> bool:
        if await self.results.get(run_id) is not None:
            return True
        try:
            await self.checkpoints.load(run_id)
        except NotFound:
            return False
        return True

    async def _cancel(self, run_id: str) -> None:
        with contextlib.suppress(Exception):
            await self.control.request_cancel(run_id, "the client disconnected")

    async def _resume(self, input: RunAgentInput) -> tuple[str, AsyncIterator[Indexed]]:
        """Decide the paused run's held calls and queue its continuation, before the
        response starts (a client that leaves cannot cut it in half); returns the run the
        stream follows, and the stream. What does not fit the thread's open interrupts
        ends the stream with `RUN_ERROR`."""
        try:
            thread = await ThreadView.load(self.checkpoints, input.thread_id)
            entries = [e.model_dump(by_alias=True, exclude_none=True) for e in input.resume or ()]
            latest = thread.latest
            plan = plan_resume(latest.state if latest else None, thread.status, entries)
            if plan.answers:
                raise InvalidResume(
                    "a fleet server cannot answer a question inside a run a worker holds; "
                    "serve this agent without --fleet to use `ask`"
                )
            held = {r.call_id: r for r in await ApprovalStore(self.bus).for_run(plan.run_id)}
            for call_id, decision in plan.decisions.items():
                record = held.get(call_id)
                if record is None:
                    raise InvalidResume(
                        f"run {plan.run_id} holds no call {call_id!r} in the store; it was "
                        "not suspended by a fleet worker"
                    )
                if not record.pending:
                    continue  # a repeated resume: decided already, nothing runs twice
                if decision.approve:
                    await approve(self.bus, record.id, arguments=decision.arguments)
                else:
                    await deny(self.bus, record.id, decision.reason or "the person said no")
            past = await self.results.get(plan.run_id)
            seen = len(await EventLog(self.bus).read(plan.run_id))
            await self.fleet.continue_run(plan.run_id)
        except TillerError as exc:
            return input.run_id, _failed(input, str(exc), _code(exc))
        return plan.run_id, self._follow(plan.run_id, after=seen, past=past)

    async def _follow(
        self, run_id: str, *, after: int, past: RunOutcomeRecord | None
    ) -> AsyncIterator[Indexed]:
        index = 0
        async for event in self.fleet.handle(run_id).events(after=after, past=past):
            yield index, orjson.dumps(event)
            index += 1

    async def aclose(self) -> None:
        for task in list(self._tasks):
            with contextlib.suppress(Exception):
                await task


class _Refused(TillerError):
    """A request no worker could run (a 400)."""


async def _failed(input: RunAgentInput, message: str, code: str) -> AsyncIterator[Indexed]:
    """A stream that opens and ends at once with `RUN_ERROR{code}`: nothing ran."""
    yield 0, encode_json(RunStartedEvent(input.thread_id, input.run_id, protocol_version="1.0"))
    yield 1, encode_json(RunErrorEvent(message, code))


def _prompt(input: RunAgentInput, thread: ThreadView) -> str:
    """The job's prompt: the request's last user turn, as the in-process path reads it;
    `_Refused` for what a job cannot carry."""
    if input.tools:
        raise _Refused(
            "a fleet server's runs run on workers, which cannot hand a call back to this "
            "client: send no frontend tools (or serve without --fleet)"
        )
    if client_state(input.state) is not None:
        raise _Refused(
            "a fleet server's runs start on workers from a prompt, which carries no client "
            "state: send no state (or an empty one), or serve without --fleet"
        )
    return prompt_from_agui(wire_messages(input), wire_context(input), known=thread.known_results())


def _thread_refuses(thread: ThreadView, thread_id: str) -> tuple[str, str] | None:
    """Why new input cannot start a run on the thread now (the AG-UI contract): its last
    run waits for answers to its interrupts, or is still going (queued, or on a worker).
    None when it may."""
    if thread.paused and thread.latest is not None:
        ids = ", ".join(str(i["id"]) for i in thread.latest.state.interrupts)
        return (
            f"thread {thread_id!r} has open interrupts ({ids}); answer them with "
            "`resume` before sending new input",
            "INVALID_RESUME",
        )
    if thread.status in ("running", "resumed") and thread.latest is not None:
        return (
            f"thread {thread_id!r} has a run in progress ({thread.latest.state.run_id}); "
            "wait for it to end, steer it or cancel it, then send the request again "
            "with a new runId",
            "THREAD_BUSY",
        )
    return None


def _code(exc: TillerError) -> str:
    return "INVALID_RESUME" if isinstance(exc, InvalidResume) else "RUN_FAILED"


async def _idle(frames: AsyncIterator[Indexed], every: float) -> AsyncIterator[Indexed]:
    """`frames`, with a None (a keep-alive) after each `every` seconds without one."""
    iterator = aiter(frames)
    pending: asyncio.Task[Indexed] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(iterator))
            done, _ = await asyncio.wait([pending], timeout=every)
            if not done:
                yield None
                continue
            try:
                item = pending.result()
            except StopAsyncIteration:
                return
            finally:
                pending = None
            yield item
    finally:
        if pending is not None:
            await stop_task(pending)  # a cancel of our consumer meanwhile goes on (law 8)
