"""`Runner`: how a served request becomes a run, and where the runs of this process live.

A request is *prepared* first (`prepare`): everything that makes it a bad request — ids
that cannot be store keys, a run id already taken (here or by another process), an
illegal conversation, a client tool that clashes with the agent's — is found before the
response starts, so the server can answer 400. Then it is *launched*: a new run on the
request's conversation, or the resume of the thread's paused run, in a task of its own
that pushes its events into a `LiveRun`. What is wrong only in the light of the thread's
stored state (a resume that does not fit the open interrupts, new input while they are
open, another run going on the thread) ends the stream with `RUN_ERROR`, as the AG-UI
interrupt contract asks.

Nothing a run needs lives only here: its checkpoint, event log and control requests are
in the store, so a resume, a steer, a cancel or a reattach may reach any server process.
A run this process stops because it shuts down is left as it was (`running`, its lease
lapsing), so another process can recover it; a run someone cancelled is closed for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ag_ui.core import RunAgentInput

from ..cancel import CancellationToken
from ..conversation import Taint, UserMessage
from ..errors import InvalidResume, TillerError
from ..events import (
    RunErrorEvent,
    RunStartedEvent,
    TransformerFactory,
    encode_json,
)
from ..loop import (
    Agent,
    Budget,
    ContinueAs,
    MailboxRoute,
    ResumeReplayBlocked,
    RunContext,
    RunOptions,
    RunResult,
    SteeringQueue,
    run_context_from,
)
from ..ops import close_cancelled, pinned_policy_of
from ..pinned_policy import PinnedPolicy
from ..state import RunState, StopCause
from ..store import (
    DEFAULT_BUCKET,
    AlreadyResumed,
    Bus,
    CheckpointStore,
    ControlStore,
    ControlWatcher,
    Lease,
    RevisionConflict,
    StoreError,
)
from ..tools import ClientTool, DuplicateTool, InterruptQuestions, QuestionOutcome
from ._input import InvalidRunInput, conversation_from_agui
from ._live import LiveRun
from ._request import check_ids, client_state, detach_of, wire_context, wire_messages
from ._resume_plan import ResumePlan, plan_resume
from ._thread import ThreadView

__all__ = ["Runner", "ServeSettings", "ThreadBusy"]

_logger = logging.getLogger(__name__)

#: The event log's batch for served runs: small, so a client reattaching through another
#: process follows the run closely.
_SERVED_LOG_BATCH = 8
#: How long a run's end is remembered here for a client that reattaches right after it
#: (later ones read the store's event log).
_KEEP_ENDED = 30.0
_SHUTDOWN = (
    "the server stopped while this run worked; the run is kept as it was and can be "
    "recovered (`tiller runs resume`, or another server sharing the store)"
)
#: A run that just ended may still hold its thread's lease for a few store round trips.
_BUSY_RETRIES = 20
_BUSY_WAIT = 0.1


class ThreadBusy(TillerError):
    """Another run is going on the thread: one run at a time, so the thread's history
    stays one line. Wait for it, steer it, or cancel it."""

    agui_code = "THREAD_BUSY"


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
    #: The policy new runs start with, read once when the server started (law 11); a
    #: resumed run keeps the one it pinned when it started.
    policy: PinnedPolicy = field(default_factory=PinnedPolicy)
    bucket: str = DEFAULT_BUCKET
    #: How often a run re-reads its stored control requests (seconds). Pub/sub brings a
    #: steer or a cancel at once; the re-read only catches one whose message was lost, so
    #: it can be slow, and it costs a store read per run per interval.
    control_poll: float = 2.0
    #: Builds each run's stream transformers (one chain per run, new or resumed).
    transformers: TransformerFactory | None = None
    #: Every run's mailbox name (`AppSettings.mailbox`); None: no mailbox attached here.
    mailbox: str | None = None


@dataclass(slots=True)
class _Prepared:
    input: RunAgentInput
    agent: Agent
    detach: bool
    #: The request's W3C `traceparent`: a traced run's span goes under it.
    traceparent: str | None = None


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
        #: Set when the server starts shutting down: followers stop, stopped runs stay
        #: recoverable.
        self.closing = asyncio.Event()
        self.live: dict[str, LiveRun] = {}
        #: Run ids taken by requests of this process that have not launched yet.
        self._reserved: set[str] = set()

    # ── a request ────────────────────────────────────────────────────────────────

    async def prepare(self, input: RunAgentInput, *, traceparent: str | None = None) -> _Prepared:
        """Check what makes the request itself bad; `InvalidRunInput` is a 400. The run id
        is reserved on success (for every process sharing the store). `traceparent`: the
        request's, for the run's telemetry."""
        check_ids(input)
        taken = f"run id {input.run_id!r} is already in use; send a new one"
        if input.run_id in self.live or input.run_id in self._reserved:
            raise InvalidRunInput(taken)
        self._reserved.add(input.run_id)  # before any await: a concurrent twin sees it
        try:
            agent = _with_client_tools(self.agent, [t.model_dump() for t in input.tools or ()])
            thread = await ThreadView.load(self.checkpoints, input.thread_id)
            if not input.resume and not thread.paused:
                # Parsed now so a malformed conversation is a 400, not a failed run. (On a
                # thread with open interrupts their calls have no results yet: the run
                # refuses the input for that reason instead, as the contract says.)
                conversation_from_agui(
                    wire_messages(input), wire_context(input), known=thread.known_results()
                )
            if not await self.checkpoints.reserve(input.run_id):
                raise InvalidRunInput(taken)
        except BaseException:
            self._reserved.discard(input.run_id)
            raise
        return _Prepared(input, agent, detach_of(input, self.settings.detach), traceparent)

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
        self._reserved.discard(input.run_id)
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
            async with _watching(watcher), self._thread_lease(input.thread_id, input.run_id, live):
                result = await self._run(prepared, live)
                if result.stop_cause is StopCause.CANCELLED and not self.closing.is_set():
                    # Still under the thread's lease, before the client hears the end.
                    await close_cancelled(self.checkpoints, result.state)
        except TillerError as exc:  # a resume that does not fit, a busy thread, ...
            _fail(live, input, str(exc), _code(exc))
        except Exception:  # the server stays up; the client hears that something broke
            _logger.exception("served run %s failed", input.run_id)
            _fail(live, input, "the server failed to run this request; see its log", "SERVER_ERROR")
        finally:
            if self.closing.is_set():
                # Stopped by the shutdown, not by anyone's cancel: its checkpoint stays
                # `running` and its control requests stay stored, for whoever recovers it.
                live.finish(encode_json(RunErrorEvent(_SHUTDOWN, "SERVER_SHUTDOWN")))
            else:
                live.finish()
                with contextlib.suppress(Exception):
                    await self.control.clear(input.run_id)
            asyncio.get_running_loop().call_later(_KEEP_ENDED, self.live.pop, input.run_id, None)

    @contextlib.asynccontextmanager
    async def _thread_lease(
        self, thread_id: str, run_id: str, live: LiveRun
    ) -> AsyncIterator[None]:
        """One run at a time on a thread, across processes: its lease, renewed while the
        run lasts (it lapses by itself if this process dies). A run that just ended may
        still be letting go of it: a new one waits a moment before it is refused."""
        ttl = self.settings.options.lease_ttl
        lease = await self.checkpoints.hold_thread(thread_id, run_id, ttl)
        for _ in range(_BUSY_RETRIES):
            if lease is not None:
                break
            await asyncio.sleep(_BUSY_WAIT)
            lease = await self.checkpoints.hold_thread(thread_id, run_id, ttl)
        if lease is None:
            holder = await self.checkpoints.thread_holder(thread_id)
            other = (
                f" ({holder[0]}; if its process died, the thread frees itself within "
                f"{holder[1]:.0f} s)"
                if holder is not None
                else ""
            )
            raise ThreadBusy(
                f"thread {thread_id!r} has a run in progress{other}; wait for it to end, "
                "steer it or cancel it, then send the request again with a new runId"
            )
        held = [lease]
        renewing = asyncio.get_running_loop().create_task(self._renew(held, ttl, live))
        try:
            yield
        finally:
            renewing.cancel()
            await asyncio.wait([renewing])
            with contextlib.suppress(StoreError):
                await self.checkpoints.release_hold(held[0])

    async def _renew(self, held: list[Lease], ttl: float, live: LiveRun) -> None:
        """Keep the thread's lease (the latest one in `held`) while the run lasts. If it
        was lost (it lapsed while this process stalled) and another run took the thread,
        this run must not go on beside it: it is cancelled."""
        while True:
            await asyncio.sleep(ttl / 3)
            try:
                held[0] = await self.checkpoints.renew_hold(held[0], ttl)
            except RevisionConflict:
                taken = await self.checkpoints.hold_thread(live.thread_id, live.run_id, ttl)
                if taken is None:
                    _logger.error("run %s lost its thread to another run", live.run_id)
                    live.cancel.cancel("another run took this run's thread")
                    return
                held[0] = taken
            except StoreError as exc:  # an outage: try again at the next round
                _logger.warning("run %s: cannot renew its thread's lease: %s", live.run_id, exc)

    async def _run(self, prepared: _Prepared, live: LiveRun) -> RunResult:
        input = prepared.input
        # Read again under the thread's lease: what another run did meanwhile counts.
        thread = await ThreadView.load(self.checkpoints, input.thread_id)
        options = dataclasses.replace(
            self.settings.options.with_checkpoint_bucket(self.settings.bucket)
            .with_publish_run_state()
            .with_interrupt_ttl(self.settings.interrupt_ttl),
            event_log_batch=_SERVED_LOG_BATCH,
        )
        if options.telemetry is not None and prepared.traceparent:
            # The run's span goes under the request's (a resumed one links to it).
            options = options.with_telemetry(options.telemetry.with_parent(prepared.traceparent))
        if input.resume:
            entries = [entry.model_dump(by_alias=True, exclude_none=True) for entry in input.resume]
            latest = thread.latest
            plan = plan_resume(latest.state if latest else None, thread.status, entries)
            assert latest is not None  # plan_resume refuses a thread with no run
            return await self._resume(
                prepared, live, plan, options, latest.state, reclaim=thread.orphaned
            )
        if thread.paused:
            assert thread.latest is not None
            ids = ", ".join(str(i["id"]) for i in thread.latest.state.interrupts)
            raise InvalidResume(
                f"thread {input.thread_id!r} has open interrupts ({ids}); answer them with "
                "`resume` before sending new input"
            )
        messages = wire_messages(input)
        conversation = conversation_from_agui(
            messages, wire_context(input), known=thread.known_results()
        )
        taint = thread.taint
        if any(isinstance(m, UserMessage) and m.tool_results for m in conversation):
            # Tool results the client sends cannot be checked: untrusted (law 3), and
            # the thread keeps what its earlier runs read (law 6).
            taint |= Taint.UNTRUSTED_INPUT.value
        state = RunState(
            run_id=input.run_id,
            thread_id=input.thread_id,
            agent_name=prepared.agent.name,
            messages=list(conversation),
            agent_state=client_state(input.state),
            taint=taint,
            # Tool results keep the ids the client knows them by, in every snapshot.
            result_ids={
                str(m["toolCallId"]): str(m["id"])
                for m in messages
                if m.get("role") == "tool" and m.get("id") and m.get("toolCallId")
            },
        )
        run_ctx = self._context(live, {})
        waited = thread.waiting_on_client()
        if waited is not None:
            # The client ran the tools the last run left it: this run goes on with that
            # run's work, on its budget and its "approve always" answers (law 7).
            run_ctx = _spent_so_far(run_ctx, waited, self.settings.workspace)
            state.always_approved = list(waited.always_approved)
        return await prepared.agent.run_in(
            run_ctx,
            state,
            options,
            on_event=live.push,
            opening_messages=messages,
            transformers=self.settings.transformers,
        )

    async def _resume(
        self,
        prepared: _Prepared,
        live: LiveRun,
        plan: ResumePlan,
        options: RunOptions,
        paused: RunState,
        *,
        reclaim: bool = False,
    ) -> RunResult:
        run_ctx = _spent_so_far(
            self._context(live, plan.answers, pinned_policy_of(paused), resumed=paused),
            paused,
            self.settings.workspace,
        )
        return await prepared.agent.resume(
            plan.run_id,
            plan.decisions,
            ctx=run_ctx,
            options=options,
            bucket=self.settings.bucket,
            on_event=live.push,
            transformers=self.settings.transformers,
            # reclaim_orphan is safe only here: this request holds the thread's lease, so
            # a resume that claimed the run and never started is certainly gone.
            continue_as=ContinueAs(prepared.input.run_id, reclaim_orphan=reclaim),
        )

    def _context(
        self,
        live: LiveRun,
        answers: dict[str, QuestionOutcome],
        pinned: PinnedPolicy | None = None,
        *,
        resumed: RunState | None = None,
    ) -> RunContext:
        """A run's context under `pinned` (a resumed run's own), else the policy the
        server read at startup; never a file the model may have written since. A
        `resumed` run keeps the mailbox it recorded (none if it had none), whatever this
        server's `--mailbox`: it may have started on another server."""
        policy = pinned if pinned is not None else self.settings.policy
        run_ctx = policy.apply(
            RunContext.sandboxed(self.settings.workspace)
            .with_store(self.bus)
            .with_questions(InterruptQuestions(answers))
        )
        if resumed is not None:
            recorded = (resumed.policy or {}).get("mailbox")
            if recorded is not None:
                run_ctx = run_ctx.with_mailbox(MailboxRoute.from_data(self.bus, recorded))
        elif self.settings.mailbox is not None:
            route = MailboxRoute(self.bus, name=self.settings.mailbox, send_tool=True)
            run_ctx = run_ctx.with_mailbox(route)
        if self.settings.configure is not None:
            run_ctx = self.settings.configure(run_ctx)
        # The run's own cancel token and steering queue, whatever `configure` did.
        return run_ctx.with_cancel(live.cancel).with_queued_input(live.steering)

    # ── shutdown ─────────────────────────────────────────────────────────────────

    def begin_shutdown(self) -> None:
        """Stop every run of this process, leaving each recoverable elsewhere (its
        checkpoint stays `running` and its lease lapses), and end every follower."""
        self.closing.set()
        self.cancel.cancel("the server is shutting down")

    async def aclose(self, grace: float = 5.0) -> None:
        """`begin_shutdown`, then wait (up to `grace`) for the runs to unwind."""
        self.begin_shutdown()
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
        # Wait for the entry to settle, but let a cancellation of *this* task through.
        await asyncio.wait([entering])
        if not entering.cancelled() and entering.exception() is None:
            await watcher.__aexit__(None, None, None)


def _spent_so_far(run_ctx: RunContext, earlier: RunState, workspace: Path) -> RunContext:
    """`run_ctx` with what `earlier` (the same run, before a pause) had spent charged to
    its budget: one budget for the whole run (law 7)."""
    if earlier.policy is None:
        return run_ctx
    spent: Budget = run_context_from(earlier, store=None, workspace=workspace).budget
    return run_ctx.with_budget(
        dataclasses.replace(
            run_ctx.budget,
            steps=spent.steps,
            usage=spent.usage,
            cost_usd=spent.cost_usd,
            unpriced_models=set(spent.unpriced_models),
        )
    )


def _fail(live: LiveRun, input: RunAgentInput, message: str, code: str) -> None:
    """End the stream with `RUN_ERROR`, opening it first if the run never did."""
    if live.done:
        return
    if not live.frames:
        live.push(RunStartedEvent(input.thread_id, input.run_id, protocol_version="1.0"))
    live.push(RunErrorEvent(message, code))


def _code(exc: TillerError) -> str:
    code = getattr(exc, "agui_code", None)
    if isinstance(code, str):
        return code
    if isinstance(exc, InvalidResume):
        return "INVALID_RESUME"
    if isinstance(exc, AlreadyResumed):
        return "ALREADY_RESUMED"
    if isinstance(exc, ResumeReplayBlocked):
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
