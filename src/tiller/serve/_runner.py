"""`Runner`: how a served request becomes a run, and where the runs of this process live.

A request is *prepared* first (`prepare`): everything that makes it a bad request — an
illegal conversation, a client tool that clashes with the agent's — is found before the
response starts, so the server can answer 400. Then it is *launched*: a new run on the
request's conversation, or the resume of the thread's paused run, in a task of its own
that pushes its events into a `LiveRun`. What is wrong with the request only in the light
of the thread's stored state (a resume that does not match the open interrupts, new input
while interrupts are open, a thread with a run in progress) becomes a stream that ends
with `RUN_ERROR`, as the AG-UI interrupt contract asks.

Nothing a run needs lives only here: its checkpoint, event log and control requests are in
the store, so a resume, a steer, a cancel or a reattach may reach any server process.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import logging
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ag_ui.core import RunAgentInput

from ..cancel import CancellationToken
from ..config import workspace_policy
from ..errors import InvalidResume, TillerError
from ..events import RUNTIME_STATE_KEY, RunErrorEvent, RunStartedEvent
from ..loop import Agent, RunContext, RunOptions, SteeringQueue, resume, run_context_from
from ..state import RunState
from ..store import Bus, CheckpointStore, NotFound
from ..store._checkpoints import DEFAULT_BUCKET, Checkpoint
from ..store._control import ControlStore, ControlWatcher
from ..tools import ClientTool, DuplicateTool, InterruptQuestions, QuestionOutcome
from ._input import InvalidRunInput, conversation_from_agui
from ._live import LiveRun
from ._resume_plan import ResumePlan, plan_resume

__all__ = ["Runner", "ServeSettings"]

_logger = logging.getLogger(__name__)

#: The event log's batch for served runs: small, so a client reattaching through another
#: process follows the run closely.
_SERVED_LOG_BATCH = 8
#: Thread and run ids come from clients and become store keys: no '/' (it separates a
#: run's own records), nothing a log line or a URL would mangle.
_ID = re.compile(r"[A-Za-z0-9._:-]{1,200}")


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """How the server runs its agent."""

    workspace: Path
    #: Runs keep going when their client disconnects (else only when the request asks,
    #: with `forwardedProps.tiller.detach`).
    detach: bool = False
    #: How long an interrupt stays answerable, in seconds (None: until answered).
    interrupt_ttl: float | None = None
    options: RunOptions = field(default_factory=RunOptions)
    #: Adjusts each run's context (a budget, hooks, a classifier) after the defaults.
    configure: Callable[[RunContext], RunContext] | None = None
    bucket: str = DEFAULT_BUCKET
    #: How often a run re-reads its stored control requests (seconds). Pub/sub brings a
    #: steer or a cancel at once; the re-read only catches one whose message was lost, so
    #: it can be slow, and it costs a store read per run per interval.
    control_poll: float = 2.0


@dataclass(slots=True)
class _Prepared:
    input: RunAgentInput
    agent: Agent
    detach: bool
    #: The thread's latest checkpoint when the request arrived.
    latest: Checkpoint | None


class Runner:
    """Starts, resumes and keeps the runs of one server process."""

    def __init__(self, agent: Agent, bus: Bus, settings: ServeSettings) -> None:
        self.agent = agent
        self.bus = bus
        self.settings = settings
        self.checkpoints = CheckpointStore(bus, settings.bucket)
        self.control = ControlStore(bus)
        #: Cancelled when the server shuts down: every run here works under a child of it.
        self.cancel = CancellationToken()
        self.live: dict[str, LiveRun] = {}

    # ── a request ────────────────────────────────────────────────────────────────

    async def prepare(self, input: RunAgentInput) -> _Prepared:
        """Check what makes the request itself bad; `InvalidRunInput` is a 400."""
        for name, value in (("threadId", input.thread_id), ("runId", input.run_id)):
            if not _ID.fullmatch(value):
                raise InvalidRunInput(
                    f"{name} {value!r} must be 1 to 200 letters, digits, '.', '_', ':' or '-'"
                )
        if input.run_id in self.live or await _exists(self.checkpoints, input.run_id):
            raise InvalidRunInput(f"run id {input.run_id!r} is already in use; send a new one")
        agent = _with_client_tools(self.agent, [t.model_dump() for t in input.tools or ()])
        latest = await self.checkpoints.for_thread(input.thread_id)
        paused = latest is not None and latest.status == "suspended" and _open(latest.state)
        if not input.resume and not paused:
            # Parsed now so a malformed conversation is a 400, not a failed run. (On a
            # thread with open interrupts the calls they hold have no results yet: the run
            # refuses the input for that reason instead, as the contract says.)
            conversation_from_agui(_wire_messages(input), _wire_context(input))
        props = input.forwarded_props if isinstance(input.forwarded_props, dict) else {}
        tiller_props = props.get("tiller")
        detach = self.settings.detach
        if isinstance(tiller_props, dict) and "detach" in tiller_props:
            detach = bool(tiller_props["detach"])
        return _Prepared(input, agent, detach, latest)

    async def launch(self, prepared: _Prepared) -> LiveRun:
        """Start the run in a task of its own; its events go to the returned `LiveRun`."""
        input = prepared.input
        live = LiveRun(
            input.run_id,
            input.thread_id,
            self.cancel.child(),
            SteeringQueue(),
            detached=prepared.detach,
        )
        self.live[input.run_id] = live
        live.task = asyncio.get_running_loop().create_task(
            self._drive(prepared, live), name=f"tiller-serve-{input.run_id}"
        )
        return live

    async def _drive(self, prepared: _Prepared, live: LiveRun) -> None:
        input = prepared.input
        try:
            watcher = self.control.watch(
                input.run_id,
                cancel=live.cancel,
                steering=live.steering,
                poll_interval=self.settings.control_poll,
            )
            async with _watching(watcher):
                await self._run(prepared, live)
        except TillerError as exc:  # a resume that does not fit, a blocked replay, ...
            _fail(live, input, str(exc), getattr(exc, "agui_code", None) or _code(exc))
        except Exception as exc:  # the server stays up; the client hears what happened
            _logger.exception("served run %s failed", input.run_id)
            _fail(live, input, f"{type(exc).__name__}: {exc}", "AGENT_ERROR")
        finally:
            live.finish()
            with contextlib.suppress(Exception):
                await self.control.clear(input.run_id)
            # Kept a moment for a client that reattaches right after the end; the store's
            # event log serves later ones.
            asyncio.get_running_loop().call_later(30.0, self.live.pop, input.run_id, None)

    async def _run(self, prepared: _Prepared, live: LiveRun) -> None:
        input = prepared.input
        latest = prepared.latest
        await self._check_thread_free(latest, input)
        options = (
            self.settings.options.with_checkpoint_bucket(self.settings.bucket)
            .with_publish_run_state()
            .with_interrupt_ttl(self.settings.interrupt_ttl)
        )
        options = _with_log_batch(options)
        if input.resume:
            entries = [entry.model_dump(by_alias=True, exclude_none=True) for entry in input.resume]
            plan = plan_resume(
                latest.state if latest else None, latest.status if latest else None, entries
            )
            assert latest is not None  # plan_resume refuses a thread with no run
            await self._resume(prepared, live, plan, options, latest.state)
            return
        if latest is not None and latest.status == "suspended" and _open(latest.state):
            ids = ", ".join(str(i["id"]) for i in latest.state.interrupts)
            raise InvalidResume(
                f"thread {input.thread_id!r} has open interrupts ({ids}); answer them with "
                "`resume` before sending new input"
            )
        messages = _wire_messages(input)
        conversation = conversation_from_agui(messages, _wire_context(input))
        state = RunState(
            run_id=input.run_id,
            thread_id=input.thread_id,
            agent_name=prepared.agent.name,
            messages=list(conversation),
            state=_client_state(input.state),
            # Taint only grows within a conversation (law 6): a new request on the thread
            # does not wash out what earlier runs read.
            taint=latest.state.taint if latest is not None else 0,
        )
        await prepared.agent.run_in(
            self._context(live, {}),
            state,
            options,
            on_event=live.push,
            opening_messages=messages,
        )

    async def _resume(
        self,
        prepared: _Prepared,
        live: LiveRun,
        plan: ResumePlan,
        options: RunOptions,
        paused: RunState,
    ) -> None:
        run_ctx = self._context(live, plan.answers)
        if paused.policy is not None:
            # One budget for the whole run (law 7): what it spent before the pause counts.
            spent = run_context_from(paused, store=None, workspace=self.settings.workspace)
            run_ctx = run_ctx.with_budget(
                dataclasses.replace(
                    run_ctx.budget,
                    turns=spent.budget.turns,
                    usage=spent.budget.usage,
                    cost_usd=spent.budget.cost_usd,
                    unpriced_models=set(spent.budget.unpriced_models),
                )
            )
        await resume(
            prepared.agent,
            plan.run_id,
            plan.decisions,
            run_ctx=run_ctx,
            options=options,
            bucket=self.settings.bucket,
            on_event=live.push,
            run_id=prepared.input.run_id,
        )

    async def _check_thread_free(self, latest: Checkpoint | None, input: RunAgentInput) -> None:
        if latest is None or latest.status not in ("running", "resumed"):
            return
        if await self.checkpoints.holder(latest.state.run_id) is not None:
            raise InvalidResume(
                f"thread {input.thread_id!r} has a run in progress ({latest.state.run_id}); "
                "wait for it to end, steer it, or cancel it first"
            )

    def _context(self, live: LiveRun, answers: dict[str, QuestionOutcome]) -> RunContext:
        run_ctx = workspace_policy(
            RunContext.sandboxed(self.settings.workspace)
            .with_store(self.bus)
            .with_questions(InterruptQuestions(answers))
        )
        if self.settings.configure is not None:
            run_ctx = self.settings.configure(run_ctx)
        # The run's own cancel token and steering queue, whatever `configure` did.
        return run_ctx.with_cancel(live.cancel).with_queued_input(live.steering)

    # ── shutdown ─────────────────────────────────────────────────────────────────

    async def aclose(self, grace: float = 5.0) -> None:
        """Cancel every run of this process and wait (up to `grace`) for them to end."""
        self.cancel.cancel("the server is shutting down")
        tasks = [live.task for live in self.live.values() if live.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=grace)


@contextlib.asynccontextmanager
async def _watching(watcher: ControlWatcher) -> AsyncIterator[None]:
    """Watch the run's control requests, without making the run wait for the watch to be
    set up: its first reads go on beside the run's start (a request made meanwhile is in
    those reads), so the client's first event does not queue behind them."""
    entering = asyncio.ensure_future(watcher.__aenter__())
    try:
        yield
    finally:
        if not entering.done():
            entering.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await entering
        if entering.done() and not entering.cancelled() and entering.exception() is None:
            await watcher.__aexit__(None, None, None)


def _open(state: RunState) -> bool:
    """Whether the run has interrupts that can still be answered."""
    now = datetime.now(UTC)
    for interrupt in state.interrupts:
        stamp = interrupt.get("expiresAt")
        if not isinstance(stamp, str):
            return True
        try:
            if datetime.fromisoformat(stamp.replace("Z", "+00:00")) > now:
                return True
        except ValueError:
            return True
    return False


def _fail(live: LiveRun, input: RunAgentInput, message: str, code: str) -> None:
    """End the stream with `RUN_ERROR`, opening it first if the run never did."""
    if live.done:
        return
    if not live.frames:
        live.push(RunStartedEvent(input.thread_id, input.run_id, protocol_version="1.0"))
    live.push(RunErrorEvent(message, code))


def _code(exc: BaseException) -> str:
    if isinstance(exc, InvalidResume):
        return "INVALID_RESUME"
    name = type(exc).__name__
    if name == "AlreadyResumed":
        return "ALREADY_RESUMED"
    if name == "ResumeReplayBlocked":
        return "RESUME_BLOCKED"
    return "RUN_FAILED"


def _with_client_tools(agent: Agent, tools: list[dict[str, Any]]) -> Agent:
    """The agent with the client's tools added (a copy: the agent is shared by runs)."""
    if not tools:
        return agent
    clone = copy.copy(agent)
    clone.registry = agent.registry.copy()
    for wire in tools:
        try:
            clone.registry.add(ClientTool.from_wire(wire))
        except DuplicateTool as exc:
            raise InvalidRunInput(
                f"the client offers a tool named {wire.get('name')!r}, which the agent already "
                "has; rename the client's tool"
            ) from exc
    return clone


def _wire_messages(input: RunAgentInput) -> list[dict[str, Any]]:
    return [m.model_dump(by_alias=True, exclude_none=True) for m in input.messages]


def _wire_context(input: RunAgentInput) -> list[dict[str, Any]]:
    return [c.model_dump(by_alias=True, exclude_none=True) for c in input.context or ()]


def _client_state(raw: Any) -> Any:
    """The client's state without the runtime's own section (the run publishes it); an
    empty state is no state (the agent's typed state then starts from its defaults)."""
    if isinstance(raw, dict):
        own = {key: value for key, value in raw.items() if key != RUNTIME_STATE_KEY}
        return own or None
    return raw


async def _exists(checkpoints: CheckpointStore, run_id: str) -> bool:
    try:
        await checkpoints.load(run_id)
    except NotFound:
        return False
    return True


def _with_log_batch(options: RunOptions) -> RunOptions:
    return dataclasses.replace(options, event_log_batch=_SERVED_LOG_BATCH)
