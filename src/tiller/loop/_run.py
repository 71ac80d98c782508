"""The loop: ask the model, run the tools it asks for, feed back the results.

One `Loop` drives one run. Its whole memory is the `RunState` (the conversation, the step,
usage, every call's status): at each step boundary the state is complete, so the run can be
checkpointed and continued from a copy with an identical result. Everything it does is
emitted through the run's `AgUiContext`, so the terminal, the server, the tests and the
captures all see one AG-UI stream.

A step, in order (DESIGN §3): cancelled? → ceilings (and the optional tool-less final
answer) → steering → compaction (`_compaction.Compaction`; a prompt the provider rejects
as too long is compacted and the model call made again) → the request (system, history window,
tools visible in the phase, `max_tokens` capped by the budget) → pre-model guardrails →
the model stream (text and reasoning live; a tool call emitted once its arguments are
complete JSON; bytes capped) → post-model guardrails → no tool calls: done (or steer /
nudge / validate) → gate each call, run the allowed ones concurrently, cap their output,
append the results in order (that last part is `_dispatch.ToolDispatch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ValidationError

from ..conversation import (
    AssistantMessage,
    ToolCall,
    ToolResult,
    TranscriptChecker,
    Usage,
    UserMessage,
)
from ..errors import TillerError
from ..events import AgUiContext, CustomEvent, MessageHandle, ReasoningHandle, ToolCallHandle
from ..model import (
    AccumulatedResponse,
    ModelError,
    ModelRequest,
    ReasoningDelta,
    ResponseAccumulator,
    StreamEvent,
    TextDelta,
    ToolCallEnd,
    stream_with_retry,
)
from ..model._codec import stream_event_to_json
from ..policy import RiskClass
from ..state import RunState, StopCause
from ..store._approvals import ApprovalStore
from ..store._bus import StoreError
from ..store._checkpoints import CheckpointStore
from ..tools.builtin import AGENT_TOOL
from ._agent_ref import record_policy
from ._capture import CaptureSink, ModelCallRecord, call_quietly
from ._compaction import Compaction
from ._dispatch import ToolDispatch
from ._gate import Gate
from ._guardrails import run_post, run_pre
from ._lease_keeper import LeaseKeeper
from ._response_cap import fit_response_cap
from ._result import ToolTraceEntry
from ._services import RunServices
from ._subagents import Subagents
from ._window import history_window

if TYPE_CHECKING:
    from ._agent import Agent
    from ._context import RunContext
    from ._options import RunOptions

__all__ = ["Loop", "LoopFailed", "ResponseTooLarge"]

_logger = logging.getLogger(__name__)

EMPTY_TURN_NUDGE = "Your last reply was empty. Continue with the task, or give your final answer."
FINAL_ANSWER_NUDGE = (
    "The run has reached its budget. Do not call any tools. Give your best final answer now "
    "from what you already know; an honest 'I could not finish X' is a correct answer."
)


class ResponseTooLarge(TillerError):
    """One model response exceeded `RunOptions.max_response_bytes`."""


def _stream_reasoning(
    agui: AgUiContext[Any], reasoning: ReasoningHandle | None, event: ReasoningDelta
) -> ReasoningHandle | None:
    """Stream one reasoning delta, opening the reasoning message on its first text; the
    open handle (or None) is returned for the next delta."""
    if event.text:
        if reasoning is None:
            reasoning = agui.reasoning()
        reasoning.delta(event.text)
    if event.redacted and reasoning is not None:
        reasoning.encrypted_value(event.redacted)
    return reasoning


def _too_large(limit: int) -> ResponseTooLarge:
    return ResponseTooLarge(
        f"the model's response passed {limit} bytes "
        "(RunOptions.max_response_bytes); the run was stopped"
    )


class LoopFailed(TillerError):
    """The run stopped on an error; carries the AG-UI error code for the stream's end."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.agui_code = code


@dataclass(slots=True)
class _ModelAnswer:
    message: AssistantMessage
    handles: dict[str, ToolCallHandle] = field(default_factory=dict)
    usage: Usage | None = None
    finish_reason: str | None = None
    #: The model's stream events, kept only when the run is captured (for replay).
    events: list[StreamEvent] | None = None
    #: Calls whose finished arguments were not JSON: call id -> the text the model wrote.
    malformed: dict[str, str] = field(default_factory=dict)


class Loop(ToolDispatch):
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
    ) -> None:
        self.agent = agent
        self.run_ctx = run_ctx
        self.options = options
        self.agui = agui
        self.state = state
        self.trace: list[ToolTraceEntry] = []
        self._transcript = TranscriptChecker()
        #: Output tokens this run holds on the shared budget for the call being made.
        self._held: int | None = None
        self.final_output: Any = None
        self.pause_reason: str | None = None
        #: Keeps the run's lease ("a process runs this") while the run lasts.
        self._lease: LeaseKeeper | None = None
        self._orphan_results = False
        self._checkpoints = (
            CheckpointStore(run_ctx.store, options.checkpoint_bucket)
            if run_ctx.store is not None and options.checkpoint_bucket is not None
            else None
        )
        self._capture = _open_capture(options, state.run_id)
        #: Messages before this index were already captured. A fresh run captures its
        #: prompt with the first call; a continued one starts after what it was given.
        self._capture_from = 0 if state.step == 0 else len(state.messages)
        # The newest results as the last request sent them, shortened by the history
        # window, with their index: a capture records what the model was sent.
        self._sent_shortened: tuple[int, UserMessage | AssistantMessage] | None = None
        self.handoff: str | None = None
        self.parent = parent
        self.services = RunServices(agent, run_ctx, agui, state)
        if parent is not None:
            # The parent's networked background jobs can send what this child writes.
            self.services.taint_flow.watch_parent(parent.services.taint_flow)
        self.gate = Gate(
            agent.registry,
            run_ctx,
            state,
            self.services,
            durable=(parent if parent is not None else self)._checkpoints is not None,
            model=agent.model,
            retry=agent.retry,
        )
        self._held_reasons: dict[str, tuple[str, RiskClass | None]] = {}
        self._held_questions: set[str] = set()
        self.answered_before_pause: list[ToolResult] = []
        self._carried_client_calls: frozenset[str] = frozenset()
        self.services.attach_policy(classifier=self.gate.classifier(), approval=self.gate.approver)
        self.compaction = Compaction(self)
        #: The run's children, when its agent can start them (a subagent's never can).
        self.subagents: Subagents | None = None
        if parent is None and AGENT_TOOL in agent.registry:
            self.subagents = Subagents(self)
            self.services.attach_subagents(self.subagents)

    # ── the run ──────────────────────────────────────────────────────────────────

    async def run(self) -> None:
        """Run until a stop cause is set on the state. Cancellation propagates (the edge
        turns it into a cancelled result) after the partial step was kept."""
        try:
            if self._checkpoints is not None:
                # "A process is running this now": a recovery elsewhere checks it first.
                lease = await self._checkpoints.hold(
                    self.state.run_id, _lease_owner(), self.options.lease_ttl
                )
                self._lease = LeaseKeeper(self._checkpoints, lease, self.options.lease_ttl).start()
                # In the store from its start (with its policy, so it can be recovered),
                # so any process can find it before its first step ends.
                await self._checkpoint("running")
            await self.services.open()
            await self._run()
        finally:
            # Background work dies with the run, however it ended (and first, so a
            # cancelled run's processes are gone before the run reports it stopped).
            await self.services.close()
            if self.subagents is not None:
                await self.subagents.aclose()
            await self._session_end()
            if self._capture is not None:
                call_quietly(self._capture.close)
            if self._lease is not None and self._checkpoints is not None:
                keeper, self._lease = self._lease, None
                lease = await keeper.stop()
                with contextlib.suppress(StoreError):
                    await self._checkpoints.release_hold(lease)

    async def _run(self) -> None:
        state = self.state
        # Calls an earlier run left for the client stay the client's, whatever tools
        # this run was given; they are recorded again if they are still open.
        self._carried_client_calls = frozenset(state.client_calls)
        state.client_calls = []
        if state.unanswered_calls():
            # A resumed run: the suspended step's calls go first (the person decided them).
            await self._finish_suspended_batch()
            suspended = state.stop_cause is StopCause.SUSPENDED
            await self._checkpoint("suspended" if suspended else "running")
        while state.stop_cause is None:
            self.agui.check_cancelled()
            if state.step >= self.options.max_steps:
                state.stop_cause = StopCause.MAX_STEPS
                break
            ceiling = self.run_ctx.budget.exceeded()
            if ceiling is not None:
                if self.parent is not None:
                    # The reserve held back for a final answer is the whole run tree's,
                    # paid once, by the parent: a subagent stops with what it has.
                    state.stop_cause = ceiling
                    break
                await self._final_answer(ceiling)
                break
            self._take_steering()
            mail = self.services.mail  # then the mailbox: only for a run that goes on
            if mail is not None and await mail.deliver(state, self.agui):
                continue  # it waited on the store: cancel and ceilings are checked again
            try:
                await self._step()  # runs to its budget hold with no `await` in between
            finally:
                self._release_unspent()
            if self.options.publish_run_state:
                self._publish_run_state()
            suspended = state.stop_cause is StopCause.SUSPENDED
            await self._checkpoint("suspended" if suspended else "running")
            if state.stop_cause is StopCause.COMPLETED and await self._reports_unread():
                state.stop_cause = None  # the model reads the detached subagents' reports
        if state.stop_cause is not StopCause.SUSPENDED:
            await self._checkpoint("finished")

    async def _reports_unread(self) -> bool:
        """Wait for the subagents a person sent to the background; whether a report of
        theirs is still unread (then the run is not done: the next step reads it). With
        no turn left to read one (steps or budget spent), the answer stands: the run
        ends, and the children still running are cancelled with it."""
        if self.subagents is None or not self.subagents.detached.pending():
            return False
        if self.state.step >= self.options.max_steps or self.run_ctx.budget.exceeded():
            return False
        return await self.subagents.detached.wait_and_report()

    def history_rewritten(self, *, removed: int) -> None:
        """Compaction replaced the history (`removed` fewer messages): the incremental
        transcript check starts again, and the capture's offset moves with the history."""
        self._transcript = TranscriptChecker()
        self._capture_from = max(self._capture_from - removed, 0)

    def held_reasons(self) -> Mapping[str, tuple[str, RiskClass | None]]:
        """Why each call this run holds for a person waits (and its risk)."""
        return self._held_reasons

    def adopt_held_reasons(self, reasons: Mapping[str, tuple[str, RiskClass | None]]) -> None:
        """A child's held calls wait in this run's suspension: their reasons go with it."""
        self._held_reasons.update(reasons)

    def _publish_run_state(self) -> None:
        """The run's spending, limits and staged drafts, in its AG-UI state (`tiller`):
        one publish a step."""
        state, budget = self.state, self.run_ctx.budget
        limits = {
            "maxSteps": budget.max_steps,
            "maxOutputTokens": budget.max_output_tokens,
            "maxCostUsd": budget.max_cost_usd,
        }
        facts: dict[str, Any] = {
            "usage": {
                "inputTokens": state.usage.input_tokens,
                "outputTokens": state.usage.output_tokens,
                "totalTokens": state.usage.total_tokens,
                "costUsd": round(state.cost_usd, 6),
                "steps": state.step,
            },
            "budget": {
                **{key: value for key, value in limits.items() if value is not None},
                "spentSteps": budget.steps,
                "spentOutputTokens": budget.usage.output_tokens,
                "spentCostUsd": round(budget.cost_usd, 6),
            },
        }
        if self.gate.staged:
            facts["outbox"] = [
                {"toolCallId": record.call_id, "tool": record.name, "item": record.outbox_item}
                for record in self.gate.staged
            ]
        self.agui.update_runtime_state(facts)

    async def _session_end(self) -> None:
        """Tell the session_end hooks how the run stopped (their failures are logged)."""
        hooks = self.run_ctx.hooks
        if self.parent is not None or not hooks.watches("session_end"):
            return  # a subagent's end is not the session's
        cause = self.state.stop_cause or (
            StopCause.CANCELLED if self.agui.is_cancelled else StopCause.ERROR
        )
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(
                hooks.session_end(
                    run_id=self.state.run_id,
                    thread_id=self.state.thread_id,
                    workspace=self.run_ctx.jail.root,
                    stop_cause=cause,
                )
            )

    async def _checkpoint(self, status: Literal["running", "suspended", "finished"]) -> None:
        """Durable mode: the state at this step boundary goes to the store; a suspended
        run's held calls become held-approval records (`tiller approvals list`)."""
        if self._checkpoints is not None:
            record_policy(self.state, self.run_ctx, self.options)
            # The ids handed out so far, so a resume from this checkpoint never reuses one.
            self.state.id_counters = self.agui.ids.counters()
            await self._checkpoints.save(self.state, status)
            if status == "suspended" and self.state.interrupts:
                # After the save: `tiller approve` checks the run is suspended on the call.
                await ApprovalStore(self._checkpoints.bus).hold_interrupts(
                    self.state,
                    reason=self.pause_reason or "this call needs a person's approval",
                    risks={
                        call_id: risk.value
                        for call_id, (_, risk) in self._held_reasons.items()
                        if risk is not None
                    },
                    reasons={
                        call_id: why for call_id, (why, _) in self._held_reasons.items() if why
                    },
                )

    async def _finish_suspended_batch(self) -> None:
        state = self.state
        calls = state.unanswered_calls()
        # Calls of the step that were answered before it paused (they ran, or were
        # refused): their results are in the state, and in the store's call records.
        recorded: dict[str, tuple[str, bool]] = {
            call.id: (record.result, record.is_error)
            for call in calls
            if (record := state.calls.get(call.id)) is not None and record.result is not None
        }
        if self._checkpoints is not None:
            logs = await self._checkpoints.calls(state.run_id)
            recorded.update(
                (call_id, (log.content or "", log.is_error))
                for call_id, log in logs.items()
                if log.status == "completed"
            )
        # Calls whose arguments never were JSON are answered with that error again (the
        # transcript holds `{}` for them: run, they would run with no arguments at all).
        malformed = {
            call.id: record.malformed_text or ""
            for call in calls
            if (record := state.calls.get(call.id)) is not None and record.malformed_arguments
        }
        self._orphan_results = True  # their TOOL_CALL_START went out in an earlier run
        try:
            results = await self._dispatch(calls, {}, malformed, recorded=recorded)
        finally:
            self._orphan_results = False
        if results is not None:  # None: some calls are held for a person again
            state.messages.append(UserMessage(tool_results=tuple(results)))

    def _release_unspent(self) -> None:
        """A step that made no model call (a guardrail refused first) gives its hold back."""
        if self._held is not None:
            self.run_ctx.budget.release(self._held)
            self._held = None

    def _take_steering(self) -> None:
        drained = self.run_ctx.queued_input.drain()
        # Into the state before any emit: an emit that raises (a cancel) loses nothing.
        self.state.pending_input.extend(drained)
        for text in drained:
            self.agui.emit(CustomEvent("tiller.queued_input", {"text": text}))
        notices = self.services.take_notices()
        for notice in notices:
            self.state.pending_input.append(f"[background work: {notice.source}] {notice.text}")
        for notice in notices:
            self.agui.emit(
                CustomEvent("tiller.notice", {"source": notice.source, "text": notice.text})
            )
        if self.state.pending_input:
            for text in self.state.pending_input:
                self.state.append_user_text(text)
            self.state.pending_input.clear()

    async def _step(self) -> None:
        with self.agui.step(f"step {self.state.step + 1}"):
            await self._step_body()

    async def _step_body(self) -> None:
        state = self.state
        # Compaction (and the loop guard it arms) before the request is built; False: no
        # call this step (the guard stopped the run, or a summary spent the budget).
        if not await self.compaction.before_request():
            return
        request = self._request(tools=True)
        verdict = await run_pre(self.options.guardrails, request)
        if verdict.kind != "allow":
            self._stop_by_guardrail(verdict.kind, verdict.reason, verdict.agent)
            return
        turn = await self.compaction.model_turn(request, self._model_turn)
        if turn is None:  # the prompt was too long: compacted, the next step tries again
            return
        message = turn.message
        verdict = await run_post(self.options.guardrails, request, message)
        if verdict.kind != "allow":
            self._capture_call(turn, appended=False)  # the call happened; a replay needs it
            self._stop_by_guardrail(verdict.kind, verdict.reason, verdict.agent)
            return
        if message.tool_calls:
            state.messages.append(message)
            self._capture_call(turn, appended=True)
            reason = self.options.review_policy.should_pause(
                state.step, message, self.agent.registry
            )
            if reason is not None:
                self._remember_malformed(message.tool_calls, turn.malformed)
                self._suspend(message.tool_calls, reason)
                return
            # Durable mode: the calls are in the checkpoint before any of them runs, so a
            # crash leaves them recorded as pending, started or completed — never lost.
            await self._checkpoint("running")
            results = await self._dispatch(list(message.tool_calls), turn.handles, turn.malformed)
            if results is not None:
                state.messages.append(UserMessage(tool_results=tuple(results)))
            return
        if message.is_empty:
            # Law 1: an empty assistant turn is never kept; the nudge joins the user turn.
            self._capture_call(turn, appended=False)
            if state.empty_turn_nudges >= self.options.empty_turn_nudges:
                state.stop_cause = StopCause.NO_OUTPUT
                return
            state.empty_turn_nudges += 1
            state.append_user_text(EMPTY_TURN_NUDGE)
            return
        state.messages.append(message)
        self._capture_call(turn, appended=True)
        if self.run_ctx.queued_input:
            return  # steering arrived during the final answer: another step, not lost
        self._finish_with(message)

    def _finish_with(self, message: AssistantMessage) -> None:
        output_type = self.agent.output_type
        if output_type is None:
            self.state.stop_cause = StopCause.COMPLETED
            return
        try:
            self.final_output = _validate_output(output_type, message.text)
        except ValidationError as exc:
            if self.state.output_retries >= self.options.output_retries:
                self.state.stop_cause = StopCause.ERROR
                self.state.error = (
                    f"the final answer did not validate as {output_type.__name__}: {exc}"
                )
                return
            self.state.output_retries += 1
            self.state.append_user_text(
                f"Your answer did not validate against the required schema:\n{exc}\n"
                "Reply again with only the JSON object."
            )
            return
        self.state.stop_cause = StopCause.COMPLETED

    def _stop_by_guardrail(self, kind: str, reason: str, agent: str | None) -> None:
        if agent is not None:  # a handoff: a guardrail's deny that hands the run on
            self.state.stop_cause = StopCause.HANDOFF
            self.handoff = agent
        else:
            self.state.stop_cause = StopCause.REFUSED
        self.state.error = reason

    async def _final_answer(self, ceiling: StopCause) -> None:
        """The ceiling is reached: one tool-less answer from the reserve, if there is one."""
        state = self.state
        state.stop_cause = ceiling
        budget = self.run_ctx.budget
        if budget.final_answer_reserve <= 0:
            return
        state.append_user_text(FINAL_ANSWER_NUDGE)
        with self.agui.step("final answer"):
            request = self._request(tools=False, final_answer=True)
            try:
                # The guardrails judge this call like any step's: a refusal or a handoff
                # stops the run with that cause, and a refused answer is not kept.
                verdict = await run_pre(self.options.guardrails, request)
                if verdict.kind != "allow":
                    self._stop_by_guardrail(verdict.kind, verdict.reason, verdict.agent)
                    return
                turn = await self._model_turn(request)
            finally:
                self._release_unspent()
        # Calls are not run here; a reply that was only calls leaves nothing to keep (law 1).
        answer = turn.message.model_copy(update={"tool_calls": ()})
        verdict = await run_post(self.options.guardrails, request, answer)
        if verdict.kind != "allow":
            self._capture_call(turn, appended=False)  # the call happened; a replay needs it
            self._stop_by_guardrail(verdict.kind, verdict.reason, verdict.agent)
            return
        if not answer.is_empty:
            state.messages.append(answer)
        self._capture_call(turn, appended=not answer.is_empty)
        state.stop_cause = ceiling

    # ── the request ──────────────────────────────────────────────────────────────

    def _request(self, *, tools: bool, final_answer: bool = False) -> ModelRequest:
        state = self.state
        self._transcript.check(state.messages)
        specs = (
            self.agent.registry.specs_for(self.run_ctx.phase, withheld=self.run_ctx.withheld)
            if tools
            else []
        )
        budget = self.run_ctx.budget
        max_tokens = budget.cap_max_tokens(self.options.max_tokens, final_answer=final_answer)
        # Held from here until the call is settled: no `await` since the ceiling check.
        self._held = budget.reserve_call(max_tokens)
        window = history_window(state.messages, self.options.max_history_tokens)
        shortened = bool(window) and window[-1] is not state.messages[-1]
        self._sent_shortened = (len(state.messages) - 1, window[-1]) if shortened else None
        return ModelRequest(
            system=self.agent.system_prompt_for_run(),
            messages=window,
            tools=specs,
            max_tokens=max_tokens,
            temperature=self.options.temperature,
        )

    # ── one model call ───────────────────────────────────────────────────────────

    async def _model_turn(self, request: ModelRequest) -> _ModelAnswer:
        """Stream one response: text and reasoning go out live, each tool call once its
        arguments are complete JSON. On cancel or error, the partial text is kept."""
        agui = self.agui
        model = self.agent.model
        # Law 10: each call gets the run's id as it ends; the provider's is kept beside it.
        accumulator = ResponseAccumulator(call_ids=agui.new_tool_call_id)
        message_id = agui.new_message_id()
        outcome = _ModelAnswer(AssistantMessage(id=message_id))
        text: MessageHandle | None = None
        reasoning: ReasoningHandle | None = None
        limit = self.options.max_response_bytes
        recorded: list[StreamEvent] | None = [] if self._capture is not None else None
        outcome.events = recorded
        try:
            async for received in stream_with_retry(model, request, self.agent.retry):
                # Cut before keeping or streaming, so the kept text is what the client saw.
                event, capped = fit_response_cap(received, limit - accumulator.bytes)
                if event is None:
                    raise _too_large(limit)
                accumulator.feed(event)
                if recorded is not None:
                    recorded.append(event)
                if isinstance(event, TextDelta):
                    if reasoning is not None:
                        reasoning.end()
                        reasoning = None
                    if text is None:
                        text = agui.message_with_id(message_id, "assistant")
                    text.delta(event.text)
                elif isinstance(event, ReasoningDelta):
                    reasoning = _stream_reasoning(agui, reasoning, event)
                elif isinstance(event, ToolCallEnd):
                    call = accumulator.completed_call(event.index)
                    if call is not None:
                        outcome.handles[call.id] = self._announce_call(call, message_id)
                if capped:
                    raise _too_large(limit)
        except BaseException as exc:
            accumulator.interrupt()
            self._keep_partial(accumulator, message_id, exc)
            raise
        finally:
            if reasoning is not None:
                reasoning.end()
            if text is not None:
                text.end()
        response = accumulator.get(id=message_id)
        self._charge(response.usage)
        outcome.message = response.message
        outcome.usage = response.usage
        outcome.finish_reason = response.finish_reason
        self._keep_malformed(outcome, response, message_id)
        return outcome

    def _keep_malformed(
        self, outcome: _ModelAnswer, response: AccumulatedResponse, message_id: str
    ) -> None:
        """Calls the model finished writing, but not as JSON, stay in the transcript with
        `{}` and an error result the model can act on (they never run). A call cut off
        mid-stream is dropped instead (law 1)."""
        broken = [d for d in response.dropped if d.reason == "invalid_json"]
        if not broken or response.status != "complete":
            return
        calls = [
            ToolCall(id=d.id, name=d.name, arguments="{}", provider_id=d.provider_id)
            for d in broken
        ]
        for dropped, call in zip(broken, calls, strict=True):
            outcome.malformed[call.id] = dropped.arguments
            outcome.handles[call.id] = self._announce_call(call, message_id)
        outcome.message = response.message.model_copy(
            update={"tool_calls": (*response.message.tool_calls, *calls)}
        )

    def _capture_call(self, turn: _ModelAnswer, *, appended: bool) -> None:
        """Record one model call: the messages new since the last one, and the response."""
        if self._capture is None:
            return
        messages = self.state.messages
        end = len(messages) - 1 if appended else len(messages)
        sent = list(messages[self._capture_from : end])
        if self._sent_shortened is not None:
            index, message = self._sent_shortened
            if self._capture_from <= index < end:
                sent[index - self._capture_from] = message
        new = [m.model_dump(mode="json") for m in sent]
        self._capture_from = len(messages)
        record = ModelCallRecord(
            run_id=self.state.run_id,
            step=self.state.step,
            new_messages=new,
            response=turn.message.model_dump(mode="json"),
            usage=turn.usage.model_dump() if turn.usage is not None else {},
            finish_reason=turn.finish_reason,
            model=f"{self.agent.model.provider}:{self.agent.model.name}",
            stream=[stream_event_to_json(e) for e in turn.events or ()],
        )
        sink = self._capture
        call_quietly(lambda: sink.model_call(record))

    def _announce_call(self, call: ToolCall, message_id: str) -> ToolCallHandle:
        handle = self.agui.tool_call_with_id(call.id, call.name, parent_message_id=message_id)
        handle.args(call.arguments)
        handle.end()
        return handle

    def _charge(self, usage: Any) -> None:
        model = self.agent.model
        held, self._held = self._held or 0, None
        cost = self.run_ctx.budget.settle(
            usage, provider=model.provider, model=model.name, held_tokens=held
        )
        self.state.step += 1
        self.state.usage = self.state.usage + usage
        self.state.cost_usd += cost

    def _keep_partial(
        self, accumulator: ResponseAccumulator, message_id: str, exc: BaseException
    ) -> None:
        """Law 8: the half-written text and its usage stay; unfinished calls are dropped."""
        state = self.state
        response = accumulator.get(id=message_id)
        self._charge(response.usage)
        state.usage_complete = False
        partial = response.message.text
        if partial.strip():
            state.messages.append(AssistantMessage(id=message_id, text=partial))
        if isinstance(exc, ModelError | ResponseTooLarge):
            state.stop_cause = StopCause.ERROR
            state.error = str(exc)


def _lease_owner() -> str:
    """Who holds a run's lease: enough for a person to find the process."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _open_capture(options: RunOptions, run_id: str) -> CaptureSink | None:
    if options.capture_sink is None:
        return None
    try:
        return options.capture_sink(run_id)
    except Exception:
        _logger.exception("the capture sink factory failed; run %s is not captured", run_id)
        return None


def _validate_output(output_type: type[BaseModel], text: str) -> BaseModel:
    """Validate the final answer as JSON of `output_type`, tolerating a code fence."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    return output_type.model_validate_json(body)
