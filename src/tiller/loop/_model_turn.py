"""The model turn: build the request, stream the answer, decide the next step.

One `ModelTurn` step, in order (DESIGN §3): compaction (`_compaction.Compaction`; a prompt
the provider rejects as too long is compacted and the call made again) → the request
(system, history window, tools visible in the phase, `max_tokens` capped by what the
budget has left, held on it until the call is settled) → pre-model guardrails → the model
stream (text and reasoning live; a tool call emitted once its arguments are complete
JSON; bytes capped) → post-model guardrails → the next step: the calls' `Dispatch`, a
`Suspend` when the review policy pauses, `Finish` with the final answer, or another
`ModelTurn` (an empty answer is nudged, an answer that does not validate is asked again,
steering that arrived meanwhile is read).

Structured output: in `tool` mode a call of the output tool is the answer, never a tool
call (`tiller.loop._output_call`).

Law 8: on a cancel or an error mid-stream, the half-written text and its usage stay in
the state; calls whose arguments never completed are dropped (law 1).
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..conversation import AssistantMessage, ToolCall, TranscriptChecker, Usage
from ..errors import TillerError
from ..events import MessageHandle, ReasoningHandle, ToolCallHandle
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
from ..state import StopCause
from ._call_capture import CallCapture
from ._compaction import Compaction
from ._guardrails import run_post, run_pre
from ._model_wrapper import model_to_call
from ._output import OUTPUT_SET_ASIDE
from ._output_call import OutputCall, output_tool_of, read_output_call, without_output_calls
from ._response_cap import fit_response_cap
from ._retry_event import retry_reporter
from ._run_calls import RunCalls
from ._run_parts import RunParts, weakly
from ._steps import Dispatch, Finish, ModelTurn, Step, Suspend
from ._telemetry_hooks import traced_stream
from ._window import history_window

__all__ = [
    "EMPTY_TURN_NUDGE",
    "FINAL_ANSWER_NUDGE",
    "ModelAnswer",
    "ModelTurns",
    "ResponseTooLarge",
    "next_step",
]

EMPTY_TURN_NUDGE = "Your last reply was empty. Continue with the task, or give your final answer."
FINAL_ANSWER_NUDGE = (
    "The run has reached its budget. Do not call any tools. Give your best final answer now "
    "from what you already know; an honest 'I could not finish X' is a correct answer."
)
_NO_MESSAGE_YET = AssistantMessage()  # a `ModelAnswer`'s until its stream ended


class ResponseTooLarge(TillerError):
    """One model response exceeded `RunOptions.max_response_bytes`."""


@dataclass(slots=True)
class ModelAnswer:
    """What one model call gave: the message and what came with it."""

    message: AssistantMessage
    handles: dict[str, ToolCallHandle] = field(default_factory=dict)
    usage: Usage | None = None
    finish_reason: str | None = None
    response_model: str | None = None  # who answered, if the provider said (for traces)
    #: The model's stream events, kept only when the run is captured (for replay).
    events: list[StreamEvent] | None = None
    #: Calls whose finished arguments were not JSON: call id -> the text the model wrote.
    malformed: dict[str, str] = field(default_factory=dict)
    #: The reply's call of the output tool (tool mode), if it made one.
    output: OutputCall | None = None


def next_step(run: RunParts) -> Step:
    """After a step: `Finish` if it set a stop cause, else the next model turn."""
    state = run.state
    if state.stop_cause is not None:
        return Finish(state.stop_cause)
    return ModelTurn(state.step + 1)


class ModelTurns:
    """Takes one run's `ModelTurn` steps (see the module docstring)."""

    def __init__(self, run: RunParts, capture: CallCapture) -> None:
        self._run = run
        self._capture = capture
        self._transcript = TranscriptChecker()
        #: Output tokens this run holds on the shared budget for the call being made.
        self._held: int | None = None
        self.compaction = Compaction(run, history_rewritten=weakly(self._history_rewritten))
        #: The validated structured answer, when the agent has an output type.
        self.final_output: Any = None
        #: Why the budget stop's final answer is no output (it did not validate).
        self.output_error: str | None = None
        #: The agent a guardrail handed the run to (stop cause `handoff`).
        self.handoff: str | None = None

    async def take(self, turn: ModelTurn) -> Step:
        """One model turn; returns the step it leads to."""
        if turn.final_answer is not None:
            return await self._final_answer(turn.final_answer)
        run, state = self._run, self._run.state
        try:
            # Compaction (and the loop guard it arms) before the request is built; False:
            # no call this step (the guard stopped the run, or a summary spent the budget).
            if not await self.compaction.before_request():
                return next_step(run)
            request = self._request(tools=True)
            verdict = await run_pre(run.options.guardrails, request)
            if verdict.kind != "allow":
                self._stop_by_guardrail(verdict.reason, verdict.agent)
                return next_step(run)
            answer = await self.compaction.model_turn(request, self._call)
        finally:
            self.release_unspent()
        if answer is None:  # the prompt was too long: compacted, the next step tries again
            return next_step(run)
        message = answer.message
        verdict = await run_post(run.options.guardrails, request, message)
        if verdict.kind != "allow":
            self._capture.model_call(answer, appended=False)  # a replay needs the call
            self._stop_by_guardrail(verdict.reason, verdict.agent)
            return next_step(run)
        if message.tool_calls:
            state.messages.append(message)
            self._capture.model_call(answer, appended=True)
            calls = tuple(message.tool_calls)
            if answer.output is not None and answer.output.set_aside:
                # Told with the next request, folded into the tool results at the top of
                # the next step (`take_steering`); in the state, so a suspension between
                # here and there keeps it for whichever process resumes the run.
                state.pending_input.append(OUTPUT_SET_ASIDE)
            reason = run.options.review_policy.should_pause(state.step, message, run.agent.registry)
            if reason is not None:
                return Suspend(calls, reason, malformed=answer.malformed)
            return Dispatch(calls, handles=answer.handles, malformed=answer.malformed)
        if message.is_empty:
            # Law 1: an empty assistant turn is never kept; the nudge joins the user turn.
            self._capture.model_call(answer, appended=False)
            if state.empty_turn_nudges >= run.options.empty_turn_nudges:
                state.stop_cause = StopCause.NO_OUTPUT
                return next_step(run)
            state.empty_turn_nudges += 1
            state.append_user_text(EMPTY_TURN_NUDGE)
            return next_step(run)
        state.messages.append(message)
        self._capture.model_call(answer, appended=True)
        if not run.run_ctx.queued_input:
            # (Steering that arrived during the final answer is read by another step.)
            output = answer.output
            self._finish_with(message, output.arguments if output is not None else None)
        return next_step(run)

    def release_unspent(self) -> None:
        """A step that made no model call (a guardrail refused first) gives its hold back."""
        if self._held is not None:
            self._run.run_ctx.budget.release(self._held)
            self._held = None

    def _history_rewritten(self, removed: int) -> None:
        """Compaction replaced the history: the incremental transcript check starts
        again, and the capture's offset moves with the history."""
        self._transcript = TranscriptChecker()
        self._capture.history_rewritten(removed=removed)

    def _finish_with(self, message: AssistantMessage, output_arguments: str | None) -> None:
        """The reply is final: done, or (with an output type) validated first; an answer
        that does not fit goes back with the error, `output_retries` times at most."""
        state = self._run.state
        structured = self._run.agent.structured_output()
        if structured is None:
            state.stop_cause = StopCause.COMPLETED
            return
        try:
            self.final_output = structured.validate(message.text, output_arguments)
        except ValidationError as exc:
            if state.output_retries >= self._run.options.output_retries:
                state.stop_cause = StopCause.ERROR
                state.error = f"the final answer did not validate as {structured.type_name}: {exc}"
                return
            state.output_retries += 1
            state.append_user_text(
                structured.retry_text(exc, from_tool=output_arguments is not None)
            )
            return
        state.stop_cause = StopCause.COMPLETED

    def _stop_by_guardrail(self, reason: str, agent: str | None) -> None:
        state = self._run.state
        if agent is not None:  # a handoff: a guardrail's deny that hands the run on
            state.stop_cause = StopCause.HANDOFF
            self.handoff = agent
        else:
            state.stop_cause = StopCause.REFUSED
        state.error = reason

    async def _final_answer(self, ceiling: StopCause) -> Step:
        """The ceiling is reached: one tool-less answer from the reserve."""
        run, state = self._run, self._run.state
        state.stop_cause = ceiling
        structured = run.agent.structured_output()
        nudge = FINAL_ANSWER_NUDGE
        state.append_user_text(structured.final_nudge(nudge) if structured is not None else nudge)
        request = self._request(tools=False, final_answer=True)
        try:
            # The guardrails judge this call like any step's: a refusal or a handoff
            # stops the run with that cause, and a refused answer is not kept.
            verdict = await run_pre(run.options.guardrails, request)
            if verdict.kind != "allow":
                self._stop_by_guardrail(verdict.reason, verdict.agent)
                return next_step(run)
            answer = await self._call(request)
        finally:
            self.release_unspent()
        # Calls are not run here; a reply that was only calls leaves nothing to keep (law 1).
        message = answer.message.model_copy(update={"tool_calls": ()})
        verdict = await run_post(run.options.guardrails, request, message)
        if verdict.kind != "allow":
            self._capture.model_call(answer, appended=False)  # a replay needs the call
            self._stop_by_guardrail(verdict.reason, verdict.agent)
            return next_step(run)
        if not message.is_empty:
            state.messages.append(message)
        self._capture.model_call(answer, appended=not message.is_empty)
        state.stop_cause = ceiling
        if structured is not None:  # validated; the reserve paid for one call: no retry
            output = answer.output
            arguments = output.arguments if output is not None else None
            self.final_output, self.output_error = structured.read_final(message.text, arguments)
            state.error = self.output_error
        return next_step(run)

    def _request(self, *, tools: bool, final_answer: bool = False) -> ModelRequest:
        run, state = self._run, self._run.state
        self._transcript.check(state.messages)
        specs = (
            run.agent.registry.specs_for(run.run_ctx.phase, withheld=run.run_ctx.withheld)
            if tools
            else []
        )
        budget, model = run.run_ctx.budget, run.agent.model
        max_tokens = budget.cap_max_tokens(
            run.options.max_tokens,
            final_answer=final_answer,
            price=budget.price_of(model.provider, model.name),
        )
        # Held from here until the call is settled: no `await` since the ceiling check.
        self._held = budget.reserve_call(max_tokens)
        window = history_window(state.messages, run.options.max_history_tokens)
        structured = run.agent.structured_output()
        request = ModelRequest(
            system=run.agent.system_prompt_for_run(),
            messages=window,
            tools=specs,
            max_tokens=max_tokens,
            temperature=run.options.temperature,
            output_schema=None if structured is None else structured.schema,
        )
        if structured is not None:
            request.tools, request.tool_choice, request.output = structured.request_parts(
                specs, final_answer=final_answer
            )
        self._capture.sent(request)
        return request

    def _call(self, request: ModelRequest) -> Awaitable[ModelAnswer]:
        """One model call: `_stream`, inside a `chat` span when the run is traced (not a
        wrapper kept on `self`: that would be a reference cycle)."""
        return traced_stream(self._run.trace, self._stream)(request)

    async def _stream(self, request: ModelRequest) -> ModelAnswer:
        """Stream one response: text and reasoning go out live, each tool call once its
        arguments are complete JSON. On cancel or error, the partial text is kept."""
        run = self._run
        agui = run.agui
        # Law 10: each call gets the run's id as it ends; the provider's is kept beside it.
        accumulator = ResponseAccumulator(call_ids=agui.new_tool_call_id)
        message_id = agui.new_message_id()
        answer = ModelAnswer(_NO_MESSAGE_YET)  # (a turn that fails is never returned)
        text: MessageHandle | None = None
        reasoning: ReasoningHandle | None = None
        limit = run.options.max_response_bytes
        recorded: list[StreamEvent] | None = [] if self._capture.on else None
        answer.events = recorded
        # Inside the retry: a wrapper (the fleet's limits) sees every attempt.
        model = model_to_call(
            run.run_ctx, RunCalls(run.agent.model, run.state), run.state.model_spec
        )
        output_tool = output_tool_of(request)
        try:
            retries = retry_reporter(agui, model)  # each retry shown, not a silent pause
            async for received in stream_with_retry(
                model, request, run.agent.retry, on_retry=retries
            ):
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
                    reasoning = _stream_reasoning(run, reasoning, event)
                elif isinstance(event, ToolCallEnd):
                    call = accumulator.completed_call(event.index)
                    if call is not None and call.name != output_tool:
                        answer.handles[call.id] = self._announce_call(call, message_id)
                if capped:
                    raise _too_large(limit)
            if output_tool is not None:
                text, reasoning = self._show_output_call(
                    accumulator, answer, message_id, text, reasoning
                )
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
        answer.message = response.message
        answer.usage, answer.finish_reason = response.usage, response.finish_reason
        answer.response_model = accumulator.response_model
        response = without_output_calls(response, answer.output)
        answer.message = response.message
        self._keep_malformed(answer, response, message_id)
        return answer

    def _show_output_call(
        self,
        accumulator: ResponseAccumulator,
        answer: ModelAnswer,
        message_id: str,
        text: MessageHandle | None,
        reasoning: ReasoningHandle | None,
    ) -> tuple[MessageHandle | None, ReasoningHandle | None]:
        """A complete reply's output call, alone, is the answer: its arguments are
        streamed as the message's text, as a text delta would be (the reasoning ends
        first); the open handles are returned."""
        answer.output = output = read_output_call(accumulator.get(id=message_id))
        if output is None or output.arguments is None:
            return text, reasoning
        if reasoning is not None:
            reasoning.end()
            reasoning = None
        if text is None:
            text = self._run.agui.message_with_id(message_id, "assistant")
        text.delta(output.shown)
        return text, reasoning

    def _keep_malformed(
        self, answer: ModelAnswer, response: AccumulatedResponse, message_id: str
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
            answer.malformed[call.id] = dropped.arguments
            answer.handles[call.id] = self._announce_call(call, message_id)
        answer.message = response.message.model_copy(
            update={"tool_calls": (*response.message.tool_calls, *calls)}
        )

    def _announce_call(self, call: ToolCall, message_id: str) -> ToolCallHandle:
        handle = self._run.agui.tool_call_with_id(call.id, call.name, parent_message_id=message_id)
        handle.args(call.arguments)
        handle.end()
        return handle

    def _charge(self, usage: Usage) -> None:
        run, state = self._run, self._run.state
        model = run.agent.model
        held, self._held = self._held or 0, None
        cost = run.run_ctx.budget.settle(
            usage, provider=model.provider, model=model.name, held_tokens=held
        )
        state.step += 1
        state.usage = state.usage + usage
        state.cost_usd += cost

    def _keep_partial(
        self, accumulator: ResponseAccumulator, message_id: str, exc: BaseException
    ) -> None:
        """Law 8: the half-written text and its usage stay; unfinished calls are dropped."""
        state = self._run.state
        response = accumulator.get(id=message_id)
        self._charge(response.usage)
        state.usage_complete = False
        partial = response.message.text
        if partial.strip():
            state.messages.append(AssistantMessage(id=message_id, text=partial))
        if isinstance(exc, ModelError | ResponseTooLarge):
            state.stop_cause = StopCause.ERROR
            state.error = str(exc)


def _stream_reasoning(
    run: RunParts, reasoning: ReasoningHandle | None, event: ReasoningDelta
) -> ReasoningHandle | None:
    """Stream one reasoning delta, opening the reasoning message on its first text; the
    open handle (or None) is returned for the next delta."""
    if event.text:
        if reasoning is None:
            reasoning = run.agui.reasoning()
        reasoning.delta(event.text)
    if event.redacted and reasoning is not None:
        reasoning.encrypted_value(event.redacted)
    return reasoning


def _too_large(limit: int) -> ResponseTooLarge:
    return ResponseTooLarge(
        f"the model's response passed {limit} bytes "
        "(RunOptions.max_response_bytes); the run was stopped"
    )
