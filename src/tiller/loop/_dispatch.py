"""Tool dispatch, one step's calls: the gate, concurrent execution, output caps, results.

Part of the `Loop` (a mixin, kept apart because it is a concept of its own): every call
of a step passes the gate in a fixed order — phase, withheld, unknown, then the approver for
calls that are not read-only (law 4: the refusal names who refused) — and the allowed ones
run concurrently. Results go back in call order, their outputs capped in call order so the
transcript does not depend on timing. A cancel keeps the results already returned and
answers the rest (law 1); durable runs record each call's start and completion (law 5);
calls held for a person suspend the run after the others ran. Calls to a client's tools
(AG-UI frontend tools) are not run here: the run ends with them open, for the client.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, assert_never

import orjson

from ..conversation import ToolCall, ToolResult, UserMessage
from ..errors import Cancelled
from ..events import APPROVAL_SCHEMA, AgUiContext, ToolCallHandle, approval_interrupt_id
from ..policy import Interlock, RiskClass, taint_of
from ..state import CallRecord, RunState, StopCause
from ..store._checkpoints import CheckpointStore
from ..tools import (
    ASK_USER,
    QUESTION_SCHEMA,
    Capability,
    Execution,
    InterruptQuestions,
    OutputBudget,
    StepSignals,
    Tool,
    question_interrupt_id,
    questions_metadata,
)
from ..tools._output import recorded_head
from ..tools._read_watch import stop_watching_reads, watch_reads
from ._agent_ref import record_policy
from ._capture import CaptureSink, ToolResultRecord, call_quietly
from ._gate_answer import ForClient, Hold, Refuse, Run, Stage, recorded_refuser, refusal_text
from ._result import ToolTraceEntry

if TYPE_CHECKING:
    from ._agent import Agent
    from ._context import RunContext
    from ._gate import Gate
    from ._options import RunOptions
    from ._services import RunServices
    from ._subagents import Subagents

__all__ = ["ToolDispatch"]


class ToolDispatch:
    """The `Loop`'s tool half; the attributes below are the `Loop`'s."""

    state: RunState
    agent: Agent
    run_ctx: RunContext
    options: RunOptions
    agui: AgUiContext[Any]
    trace: list[ToolTraceEntry]
    pause_reason: str | None
    _checkpoints: CheckpointStore | None
    _capture: CaptureSink | None
    _orphan_results: bool
    services: RunServices
    gate: Gate
    subagents: Subagents | None
    #: Why each held call needs a person, and its risk (for the held-approval records).
    _held_reasons: dict[str, tuple[str, RiskClass | None]]
    #: Held calls that are questions for the person (`ask_user` in a served run).
    _held_questions: set[str]
    #: Results of the calls of a suspended step that did not wait (they ran, or were
    #: refused): not in the transcript until the step completes, but the client saw them.
    answered_before_pause: list[ToolResult]
    #: Calls an earlier run of this conversation left for the client.
    _carried_client_calls: frozenset[str]

    def _remember_malformed(
        self, calls: Sequence[ToolCall], malformed: dict[str, str] | None
    ) -> None:
        """Keep the calls of a step about to suspend whose arguments were not JSON."""
        for call in calls:
            if malformed and call.id in malformed:
                self.state.calls[call.id] = CallRecord(
                    call_id=call.id,
                    name=call.name,
                    step=self.state.step,
                    malformed_arguments=True,
                    malformed_text=malformed[call.id],
                )

    def _suspend(self, calls: Sequence[ToolCall], reason: str) -> None:
        """`calls` wait for a person (a review pause, or Asks held in a headless durable
        run); the state is the checkpoint."""
        state = self.state
        for call in calls:
            if call.id not in state.calls:
                state.calls[call.id] = CallRecord(call_id=call.id, name=call.name, step=state.step)
        state.interrupts = []
        for call in calls:
            child = state.children.get(call.id)
            if child is not None:
                # An agent call whose subagent waits: the run waits on what the child does.
                state.interrupts.extend(child.interrupts)
            elif call.id in self._held_questions:
                state.interrupts.append(self._question_interrupt(call))
            else:
                why = self._held_reasons.get(call.id, (None,))[0] or reason
                state.interrupts.append(
                    {
                        "id": approval_interrupt_id(call.id),
                        "reason": "tool_call",
                        "toolCallId": call.id,
                        "message": f"Review: {why}. Allow {call.name}({call.arguments})?",
                        "responseSchema": APPROVAL_SCHEMA,
                        # What the person decides on: the answer is bound to it (law 10).
                        "metadata": {"tool": call.name, "arguments": call.canonical_arguments()},
                    }
                )
        ttl = self.options.interrupt_ttl
        if ttl is not None:
            expires = datetime.now(UTC) + timedelta(seconds=ttl)
            stamp = expires.isoformat(timespec="milliseconds").replace("+00:00", "Z")
            for interrupt in state.interrupts:
                interrupt["expiresAt"] = stamp
        self.pause_reason = reason
        # The run's policy travels with the checkpoint, in the store or in the result.
        record_policy(state, self.run_ctx, self.options)
        state.stop_cause = StopCause.SUSPENDED

    @staticmethod
    def _question_interrupt(call: ToolCall) -> dict[str, Any]:
        """The interrupt that puts an `ask_user` call's questions to the person."""
        try:
            arguments = orjson.loads(call.arguments)
        except orjson.JSONDecodeError:
            arguments = {}
        questions = questions_metadata(arguments if isinstance(arguments, dict) else {})
        first = questions[0]["question"] if questions else "The agent has a question."
        return {
            "id": question_interrupt_id(call.id),
            "reason": "question",
            "toolCallId": call.id,
            "message": first if len(questions) <= 1 else f"{first} (+{len(questions) - 1} more)",
            "responseSchema": QUESTION_SCHEMA,
            "metadata": {"questions": questions},
        }

    def _asks_served_question(self, call: ToolCall) -> bool:
        """Whether `call` is a question that must wait for the person: a served, durable
        run (the answer comes with a resume, which needs the checkpoint) whose `ask_user`
        call is well formed (a malformed one runs, and the tool says what is wrong)."""
        broker = self.run_ctx.questions
        if (
            call.name != ASK_USER
            or self._checkpoints is None
            or not isinstance(broker, InterruptQuestions)
            or not broker.holds(call.id)
        ):
            return False
        try:
            arguments = orjson.loads(call.arguments)
        except orjson.JSONDecodeError:
            return False
        return isinstance(arguments, dict) and bool(questions_metadata(arguments))

    def _keep_answered(self, calls: Sequence[ToolCall], results: dict[str, ToolResult]) -> None:
        """The step stops before its results reach the transcript (it pauses, or waits for
        the client): keep each answered call's result in its record, so a continuation
        answers the call with it instead of running it again (law 5)."""
        for call in calls:
            answered = results.get(call.id)
            if answered is not None:
                self.state.calls[call.id].result = answered.content

    async def _dispatch(
        self,
        calls: Sequence[ToolCall],
        handles: dict[str, ToolCallHandle],
        malformed: dict[str, str] | None = None,
        *,
        recorded: dict[str, tuple[str, bool]] | None = None,
    ) -> list[ToolResult] | None:
        """Gate every call, run the allowed ones concurrently, return results in call order.

        If the run is cancelled meanwhile (while an approver decides, or while tools run),
        results already returned are kept and every other call gets a "cancelled" error
        result, so the transcript stays legal. Returns None when calls were held for a
        person (a durable run with no approver): the run is then suspended, and the results
        of the calls that ran are in the store's call records.
        """
        state = self.state
        turn = state.step
        first_entry = len(self.trace)
        for call in calls:
            state.calls[call.id] = CallRecord(call_id=call.id, name=call.name, step=turn)
        held: list[ToolCall] = []
        #: Calls left open for the client (they passed the gate, or an earlier run's did).
        for_client: list[ToolCall] = []
        results: dict[str, ToolResult] = {}
        executed: dict[str, Execution] = {}
        budget = OutputBudget(self.run_ctx.jail.output_budget_bytes)
        signals = self.services.signals_for_step()
        # The interlock sees the whole batch: a read and a send in one parallel step
        # cannot slip through together. Each call is checked with the other calls'
        # capabilities ORed into the conversation's taint (its own output comes after it).
        flow = self.services.taint_flow
        flow.refresh()
        tools = [self.agent.registry.get(c.name) for c in calls]
        able = [flow.capabilities(tool) for tool in tools]
        # As the batch's other calls see them: a read may bring an earlier run's taint.
        seen = flow.for_batch(able)
        # With private data and untrusted input, jobs that hold the network stop first.
        whole = Interlock.batch_taint(state.taint_flags, seen)
        watched = flow.watches(whole)
        try:
            if watched:
                # Inside the try: a cancel while it walks the workspace or waits for a
                # stopped job still answers every call of the batch (laws 1, 8).
                await flow.before_batch(whole)
            allowed: list[tuple[ToolCall, Any]] = []
            for index, call in enumerate(calls):
                record = state.calls[call.id]
                if call.id in self._carried_client_calls:
                    # An earlier run gated it and left it to the client: still the client's.
                    for_client.append(call)
                    continue
                if recorded and call.id in recorded:
                    # Completed before a crash or suspension: never run twice (law 5).
                    content, is_error = recorded[call.id]
                    results[call.id] = self._finish_call(
                        call, record, handles, content, is_error=is_error
                    )
                    continue
                if malformed and call.id in malformed:
                    record.malformed_arguments = True
                    raw = malformed[call.id]
                    shown = raw if len(raw) <= 300 else raw[:300] + "…"
                    text = (
                        f"The arguments you wrote for {call.name} are not valid JSON, so the "
                        f"call did not run: {shown!r}. Call it again with a JSON object."
                    )
                    results[call.id] = self._finish_call(call, record, handles, text, is_error=True)
                    continue
                taint = Interlock.batch_taint(state.taint_flags, seen[:index] + seen[index + 1 :])
                # A write while a networked background job runs may be a send through it.
                through = flow.sends_through(tools[index], taint, _arguments_or_empty(call))
                can = able[index] | Capability.EXTERNAL_SEND if through else able[index]
                answer = await self.gate.check(call, record, taint, can, through=through)
                match answer:
                    case ForClient():
                        # Allowed: the client runs it, and its result comes with the next
                        # request, as untrusted as any outside input (law 6).
                        for_client.append(call)
                        state.add_taint(taint_of(able[index]))
                    case Run(risk=risk) if self._asks_served_question(call):
                        # Allowed to ask: the question goes to the page as an interrupt.
                        held.append(call)
                        self._held_questions.add(call.id)
                        self._held_reasons[call.id] = ("a question for the person", risk)
                    case Run(tool=tool):
                        allowed.append((call, tool))
                    case Hold(reason=reason, risk=risk):
                        held.append(call)
                        self._held_reasons[call.id] = (reason, risk)
                    case Stage(result=staged):
                        results[call.id] = self._finish_call(
                            call, record, handles, staged, is_error=False
                        )
                    case Refuse():
                        # The loop words the refusal from who refused (law 4).
                        record.refused_by = recorded_refuser(answer)
                        results[call.id] = self._finish_call(
                            call, record, handles, refusal_text(answer), is_error=True
                        )
                    case _:
                        assert_never(answer)
            if len(allowed) == 1:  # the common case: no task group, no extra loop pass
                await self._run_call(*allowed[0], executed, signals)
            elif allowed:
                async with asyncio.TaskGroup() as group:
                    for call, tool in allowed:
                        group.create_task(self._run_call(call, tool, executed, signals))
            self._finish_executed(calls, executed, budget, handles, results)
            # What the batch wrote carries the taint; the taint may now stop networked jobs.
            wrote = any(tool.read_only is not True for _, tool in allowed)
            if watched or flow.watches(state.taint_flags):
                await flow.after_batch(state.taint_flags, wrote=wrote)
            if self.subagents is not None and any(self.subagents.holds(c.id) for c, _ in allowed):
                # Agent calls whose subagent waits for a person are held with it.
                waiting = {c.id for c in held} | {c.id for c, _ in allowed if c.id not in executed}
                held = [call for call in calls if call.id in waiting]
            if held:
                # The allowed calls ran and are recorded; the refused, staged and malformed
                # ones are answered: record them too, so a resume (in any process) answers
                # them from the log and only the held ones wait for a person.
                self._keep_answered(calls, results)
                if self._checkpoints is not None:
                    for call in calls:
                        answered = results.get(call.id)
                        if answered is not None and call.id not in executed:
                            await self._checkpoints.call_completed(
                                state.run_id,
                                call.id,
                                answered.content,
                                is_error=answered.is_error,
                            )
                # Calls for the client stay open through the suspension: the resumed
                # run leaves them to the client again.
                state.client_calls = [call.id for call in for_client]
                self.answered_before_pause = [
                    results[call.id] for call in calls if call.id in results
                ]
                self._suspend(held, "these calls need a person's approval")
                return None
            if for_client:
                # The run ends here with the client's calls open (AG-UI frontend tools);
                # the client sends their results, with the others', in its next request.
                self._keep_answered(calls, results)
                state.client_calls = [call.id for call in for_client]
                state.stop_cause = StopCause.COMPLETED
                return None
        except BaseException as exc:
            # Keep what ran (the stream is closing, so nothing more is emitted for it).
            self._finish_executed(calls, executed, budget, {}, results)
            for call in calls:
                if call.id not in results:
                    results[call.id] = self._finish_call(
                        call,
                        state.calls[call.id],
                        {},
                        "The run was cancelled before this call finished.",
                        is_error=True,
                    )
            self._append_results(calls, results)
            if isinstance(exc, BaseExceptionGroup) and self.agui.is_cancelled:
                # The task group wraps the calls' `Cancelled` in a group, which the run's
                # edge would report as a crash: the run was cancelled, so say that.
                self.agui.check_cancelled()
            raise
        finally:
            # The trace lists a step's calls in call order, however they finished.
            order = {call.id: index for index, call in enumerate(calls)}
            self.trace[first_entry:] = sorted(
                self.trace[first_entry:], key=lambda entry: order[entry.call_id]
            )
        return [results[call.id] for call in calls]

    def _finish_executed(
        self,
        calls: Sequence[ToolCall],
        executed: dict[str, Execution],
        budget: OutputBudget,
        handles: dict[str, ToolCallHandle],
        results: dict[str, ToolResult],
    ) -> None:
        """Cap the outputs of the calls that ran in call order, so the transcript does not
        depend on which call finished first, and record their results."""
        for call in calls:
            execution = executed.get(call.id)
            if execution is None or call.id in results:
                continue
            result = budget.cap_result(execution.result, self.run_ctx.jail)
            interlock = self.run_ctx.interlock
            if interlock.wrap_untrusted and (
                _brings_untrusted(self.agent.registry.get(call.name))
                or bool(getattr(execution.data, "brings_untrusted", False))
            ):
                # (A subagent's answer is as untrusted as what the subagent read.)
                result = result.model_copy(
                    update={"content": interlock.wrap(call.name, result.content)}
                )
            results[call.id] = self._finish_call(
                call, self.state.calls[call.id], handles, result.content, is_error=result.is_error
            )

    def _append_results(self, calls: Sequence[ToolCall], results: dict[str, ToolResult]) -> None:
        """On an interrupted dispatch, put the (partial) results into the transcript now,
        because the normal path that appends them will not run."""
        self.state.messages.append(
            UserMessage(tool_results=tuple(results[call.id] for call in calls))
        )

    async def _run_call(
        self, call: ToolCall, tool: Any, executed: dict[str, Execution], signals: StepSignals
    ) -> None:
        record = self.state.calls[call.id]
        record.status = "started"
        ctx = self.services.context_for(call.id, record.step, signals)
        if self._checkpoints is not None:
            await self._checkpoints.call_started(self.state.run_id, call.id)
        read: list[str] = []
        try:
            watching = watch_reads(read.append)
            try:
                execution = await self.agent.registry.execute(call, ctx)
            finally:
                stop_watching_reads(watching)
        finally:
            ctx.progress.close()  # progress belongs to the call; detached work uses notify
        if self.subagents is not None and self.subagents.holds(call.id):
            # Its subagent suspended for a person: the call is not done, it waits with it.
            # It stays recorded as started: once the suspended checkpoint holds the child's
            # state a resume continues the child (not uncertain); before, it is uncertain.
            record.status = "pending"
            return
        # What the call read is now in the conversation (law 6: taint only grows).
        # A file an earlier tainted run wrote brings its taint along.
        flow = self.services.taint_flow
        self.state.add_taint(taint_of(flow.capabilities(tool)) | flow.taint_of_reads(read))
        record.malformed_arguments = execution.malformed_arguments
        executed[call.id] = execution
        if self._checkpoints is not None:
            result = execution.result
            # Bounded: an MCP or custom tool may return any size; the store keeps what the
            # transcript could show at most.
            content = recorded_head(result.content, self.run_ctx.jail.output_budget_bytes)
            await self._checkpoints.call_completed(
                self.state.run_id, call.id, content, is_error=result.is_error
            )
        hooks = self.run_ctx.hooks
        if hooks and hooks.watches("post_tool", call.name):
            await hooks.post_tool(
                tool=call.name,
                arguments=_arguments_or_empty(call),
                call_id=call.id,
                run_id=self.state.run_id,
                thread_id=self.state.thread_id,
                workspace=self.run_ctx.jail.root,
                result=execution.result.content,
                is_error=execution.result.is_error,
                taint=self.state.taint_flags,
            )

    def _finish_call(
        self,
        call: ToolCall,
        record: CallRecord,
        handles: dict[str, ToolCallHandle],
        content: str,
        *,
        is_error: bool,
    ) -> ToolResult:
        record.status = "failed" if is_error else "completed"
        record.is_error = is_error
        result = ToolResult(call_id=call.id, name=call.name, content=content, is_error=is_error)
        sink = self._capture
        if sink is not None:
            captured = ToolResultRecord(
                self.state.run_id, self.state.step, call.id, call.name, content, is_error
            )
            call_quietly(lambda: sink.tool_result(captured))
        handle = handles.get(call.id)
        result_ids = self.state.result_ids
        if handle is not None:
            result_ids[call.id] = handle.result_message_id
            # After a cancel the result cannot be shown, but it is kept (law 8): the loop
            # stops at its next check.
            with contextlib.suppress(Cancelled):
                handle.result(content)
        elif self._orphan_results:
            # A call of an earlier run: its result keeps the id it was first shown with.
            with contextlib.suppress(Cancelled):
                result_ids[call.id] = self.agui.tool_result(
                    call.id, content, message_id=result_ids.get(call.id)
                )
        self.trace.append(
            ToolTraceEntry(
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
                turn=record.step,
                is_error=is_error,
                refused_by=record.refused_by,
                unknown=record.refused_by == "unknown",
                malformed_arguments=record.malformed_arguments,
                staged=record.staged,
            )
        )
        return result


def _arguments_or_empty(call: ToolCall) -> dict[str, Any]:
    try:
        parsed = call.parsed_arguments()
    except ValueError:  # not JSON: the call was answered with an error anyway
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _brings_untrusted(tool: Tool | None) -> bool:
    return tool is not None and bool(tool.capabilities & Capability.UNTRUSTED_INPUT)
