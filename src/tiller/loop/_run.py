"""The loop: a run as explicit steps, `ModelTurn → Dispatch → (Suspend | ModelTurn | Finish)`.

One `Loop` drives one run. Its whole memory is the `RunState` (the conversation, the step,
usage, every call's status): at each step boundary the state is complete, so the run can be
checkpointed and continued from a copy with an identical result. Everything it does is
emitted through the run's `AgUiContext`, so the terminal, the server, the tests and the
captures all see one AG-UI stream.

A newcomer reads one run in three files: this one (the order of the steps and what happens
between them: cancel, ceilings, steering, mail, checkpoints, the lease), `_model_turn.py`
(one model call and what it leads to) and `_dispatch.py` (one step's calls through the gate).
The steps themselves are values (`_steps.py`); `agent.iter(...)` yields each before the loop
takes it. Durability (checkpoints, call records, the lease, held calls) reaches the steps
as a port (`tiller.store.RunDurability`), capture as another (`_call_capture.CallCapture`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from ..conversation import ToolCall
from ..errors import TillerError
from ..events import AgUiContext
from ..state import RunState, StopCause
from ..store import RunDurability, StoreDurability
from ..tools.builtin import AGENT_TOOL
from ._agent_ref import record_policy
from ._call_capture import CallCapture
from ._dispatch import Dispatcher
from ._gate import Gate
from ._lease_keeper import LeaseKeeper, lease_owner
from ._model_turn import ModelTurns, ResponseTooLarge, next_step
from ._run_facts import publish_run_facts
from ._run_parts import RunParts
from ._services import RunServices
from ._session_end import tell_session_end
from ._steering import take_steering
from ._steps import Dispatch, Finish, ModelTurn, Step, Suspend
from ._subagents import Subagents
from ._suspension import Suspension

if TYPE_CHECKING:
    from ._agent import Agent
    from ._context import RunContext
    from ._options import RunOptions

__all__ = ["Loop", "LoopFailed", "ResponseTooLarge", "StepWatcher"]

#: Called with each step before the loop takes it (`agent.iter` waits there).
StepWatcher = Callable[[Step, RunState], Awaitable[None]]


class LoopFailed(TillerError):
    """The run stopped on an error; carries the AG-UI error code for the stream's end."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.agui_code = code


class Loop:
    """Drives one run of `agent` under `run_ctx` and `options`, emitting through `agui`.

    A subagent's loop has a `parent` (`_subagents`): it keeps no checkpoint or lease of
    its own (its state travels in its parent's), holds calls for a person only where its
    parent could suspend durably, and reports no session end.
    """

    def __init__(
        self,
        agent: Agent,
        run_ctx: RunContext,
        options: RunOptions,
        agui: AgUiContext[Any],
        state: RunState,
        *,
        parent: Loop | None = None,
        watch: StepWatcher | None = None,
    ) -> None:
        self.agent, self.run_ctx, self.options = agent, run_ctx, options
        self.agui, self.state, self.parent = agui, state, parent
        self.parts = parts = RunParts.of(agent, run_ctx, options, agui, state, parent=parent)
        self._watch = watch
        store, bucket = run_ctx.store, options.checkpoint_bucket
        self.durability: RunDurability | None = (
            StoreDurability(store, bucket) if store is not None and bucket is not None else None
        )
        #: Keeps the run's lease ("a process runs this") while the run lasts.
        self._lease: LeaseKeeper | None = None
        model = agent.model
        self.capture = CallCapture.open(options, state, f"{model.provider}:{model.name}")
        self.services = RunServices(agent, run_ctx, agui, state)
        if parent is not None:
            # The parent's networked background jobs can send what this child writes.
            self.services.taint_flow.watch_parent(parent.services.taint_flow)
        self.gate = Gate(
            agent.registry,
            run_ctx,
            state,
            self.services,
            durable=(parent if parent is not None else self).durability is not None,
            model=model,
            retry=agent.retry,
        )
        self.services.attach_policy(classifier=self.gate.classifier(), approval=self.gate.approver)
        self.suspension = Suspension(parts)
        self.turns = ModelTurns(parts, self.capture)
        self.dispatcher = Dispatcher(
            parts,
            services=self.services,
            gate=self.gate,
            suspension=self.suspension,
            durability=self.durability,
            capture=self.capture,
        )
        #: The run's children, when its agent can start them (a subagent's never can).
        self.subagents: Subagents | None = None
        if parent is None and AGENT_TOOL in agent.registry:
            self.subagents = self.dispatcher.subagents = Subagents(self)
            self.services.attach_subagents(self.subagents)

    async def run(self) -> None:
        """Run until a stop cause is set on the state. Cancellation propagates (the edge
        turns it into a cancelled result) after the partial step was kept."""
        try:
            if self.parts.trace is not None:  # in the `try`: the `finally` ends its span
                self.parts.trace.started()
            if self.durability is not None:
                # "A process is running this now": a recovery elsewhere checks it first.
                ttl = self.options.lease_ttl
                lease = await self.durability.take_lease(self.state.run_id, lease_owner(), ttl)
                self._lease = LeaseKeeper(self.durability, lease, ttl).start()
                # In the store from its start (with its policy, so it can be recovered),
                # so any process can find it before its first step ends.
                await self._checkpoint("running")
            await self.services.open()
            await self._steps()
        except asyncio.CancelledError:
            # From outside (not the token): the edge says cancelled, so must the session_end
            # hooks below (they heard `error`). A subagent's cause is its parent's to set.
            if self.parent is None:
                self.state.stop_cause = StopCause.CANCELLED
            raise
        finally:
            try:
                # Background work dies with the run, however it ended (and first, so a
                # cancelled run's processes are gone before the run reports it stopped).
                await self.services.close()
                if self.subagents is not None:
                    await self.subagents.aclose()
                await self._session_end()
            finally:
                # Also when a cancellation from outside came during the above: the capture
                # is complete and the lease given back (a recovery need not wait it out).
                self.capture.close()
                keeper, self._lease = self._lease, None
                if keeper is not None:
                    await keeper.release()
                if self.parts.trace is not None:
                    self.parts.trace.ended()

    async def _steps(self) -> None:
        state = self.state
        self.dispatcher.carry_client_calls()
        step: Step = ModelTurn(state.step + 1)
        if state.unanswered_calls():
            # A resumed run continues at its step: the suspended step's calls go first
            # (the person decided them).
            step = await self._take_calls(await self.dispatcher.resumed_batch())
            suspended = state.stop_cause is StopCause.SUSPENDED
            await self._checkpoint("suspended" if suspended else "running")
        while isinstance(step, ModelTurn):
            step = await self._before_turn()
            if isinstance(step, ModelTurn):
                step = await self._turn(step)
        if self._watch is not None:
            await self._watch(step, self.state)
        if state.stop_cause is not StopCause.SUSPENDED:
            await self._checkpoint("finished")

    async def _before_turn(self) -> ModelTurn | Finish:
        """At a step boundary: cancelled? out of steps, tokens or money? Then the
        steering queue and the mailbox, which only a run that goes on reads."""
        state, budget = self.state, self.run_ctx.budget
        while True:
            self.agui.check_cancelled()
            if state.step >= self.options.max_steps:
                state.stop_cause = StopCause.MAX_STEPS
                return Finish(StopCause.MAX_STEPS)
            ceiling = budget.exceeded()
            if ceiling is not None:
                # The reserve held back for a final answer is the whole run tree's, paid
                # once, by the parent: a subagent stops with what it has.
                if self.parent is not None or budget.final_answer_reserve <= 0:
                    state.stop_cause = ceiling
                    return Finish(ceiling)
                return ModelTurn(state.step + 1, final_answer=ceiling)
            take_steering(self.parts, self.services.take_notices())
            mail = self.services.mail
            if mail is None or not await mail.deliver(state, self.agui, self.durability):
                return ModelTurn(state.step + 1)
            # It waited on the store: cancel and ceilings are checked again.

    async def _turn(self, turn: ModelTurn) -> Step:
        """One step: the model turn and the calls it led to, inside one AG-UI step; then
        the step boundary (a final answer's is the run's end)."""
        if self._watch is not None:
            await self._watch(turn, self.state)
            # What the boundary checked may have moved while the caller held the run
            # (another run spent the budget): checked again after the wait (law 7).
            again = await self._before_turn()
            if again != turn:
                return again
        final = turn.final_answer is not None
        with self.agui.step("final answer" if final else f"step {turn.number}"):
            try:
                step = await self._take_calls(await self.turns.take(turn))
            finally:
                self.turns.release_unspent()
        if final:
            return step
        state = self.state
        if self.options.publish_run_state:
            publish_run_facts(self.parts, self.gate.staged)
        suspended = state.stop_cause is StopCause.SUSPENDED
        await self._checkpoint("suspended" if suspended else "running")
        if state.stop_cause is StopCause.COMPLETED and await self._reports_unread():
            state.stop_cause = None  # the model reads the detached subagents' reports
        return next_step(self.parts)

    async def _take_calls(self, step: Step) -> Step:
        """Take the dispatch (and the suspension) a model turn led to."""
        # A `Suspend` after a dispatch names only the held calls: law 1 needs the batch.
        batch: tuple[ToolCall, ...] = step.calls if isinstance(step, Dispatch | Suspend) else ()
        while isinstance(step, Dispatch | Suspend):
            try:
                if self._watch is not None:
                    await self._watch(step, self.state)
                if isinstance(step, Dispatch) and not step.resumed:
                    # Durable mode: the calls are in the checkpoint before any of them
                    # runs, so a crash leaves them recorded as pending, started or done.
                    await self._checkpoint("running")
            except BaseException:
                if isinstance(step, Suspend):  # those that ran answer with their results
                    self.dispatcher.answer_stopped(batch)
                else:  # law 1: none of them ran (a resumed step's may have, before)
                    self.dispatcher.answer_stopped(step.calls, recorded=step.recorded)
                raise
            if isinstance(step, Suspend):
                step = self.suspension.take(step)
            else:
                step = await self.dispatcher.take(step)
        return step

    async def _reports_unread(self) -> bool:
        """Wait for the subagents a person sent to the background; whether a report of
        theirs is still unread (then the run is not done: the next step reads it). With
        no step left to read one (steps or budget spent), the answer stands: the run
        ends, and the children still running are cancelled with it."""
        if self.subagents is None or not self.subagents.detached.pending():
            return False
        if self.state.step >= self.options.max_steps or self.run_ctx.budget.exceeded():
            return False
        return await self.subagents.detached.wait_and_report()

    async def _session_end(self) -> None:
        """Tell the session_end hooks how the run stopped, in the (made) workspace."""
        hooks = self.run_ctx.hooks
        if self.parent is not None or not hooks.watches("session_end"):
            return  # a subagent's end is not the session's
        cause = self.state.stop_cause or (
            StopCause.CANCELLED if self.agui.is_cancelled else StopCause.ERROR
        )
        await tell_session_end(hooks, self.state, self.run_ctx.jail.materialize(), cause)

    async def _checkpoint(self, status: Literal["running", "suspended", "finished"]) -> None:
        """Durable mode: the state at this step boundary goes to the store; a suspended
        run's held calls become held-approval records (`tiller approvals list`)."""
        if self.durability is None:
            return
        state = self.state
        record_policy(state, self.run_ctx, self.options)
        # The ids handed out so far, so a resume from this checkpoint never reuses one.
        state.id_counters = self.agui.ids.counters()
        await self.durability.save(state, status)
        if status == "suspended" and state.interrupts:
            risks, reasons = self.suspension.records()
            await self.durability.hold_calls(
                state,
                reason=self.suspension.reason or "this call needs a person's approval",
                risks=risks,
                reasons=reasons,
            )
