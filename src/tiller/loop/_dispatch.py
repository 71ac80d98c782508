"""The dispatch step: one step's calls through the gate, run, capped, answered.

Every call of a `Dispatch` passes the gate in a fixed order — phase, withheld, unknown,
the interlock, hooks, the policy engine, then the approver for calls that are not
read-only (law 4: the refusal names who refused) — and the allowed ones run concurrently.
Results go back in call order, their outputs capped in call order so the transcript does
not depend on timing. A cancel keeps the results already returned and answers the rest
(law 1); durable runs record each call's start and completion through the durability
port (law 5); calls held for a person suspend the run after the others ran. Calls to a
client's tools (AG-UI frontend tools) are not run here: the run ends with them open, for
the client.

A recovered run's calls of idempotent tools that a crash interrupted (`Dispatch.rerun`)
go through the gate again, as a person's "run it again" would have them; one that runs
emits a `tiller.call_rerun` event (`CALL_RERUN_EVENT`) before it starts, and its trace
entry says `rerun`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final, assert_never

import orjson

from ..conversation import Taint, ToolCall, ToolResult, UserMessage
from ..errors import Cancelled, first_leaf
from ..events import CustomEvent
from ..policy import Interlock, taint_of
from ..state import CallRecord, StopCause
from ..store import RunDurability
from ..tools import (
    ASK_USER,
    Capability,
    Execution,
    InterruptQuestions,
    OutputBudget,
    Tool,
    questions_metadata,
    recorded_head,
    stop_watching_reads,
    watch_reads,
)
from ._batch import Batch, arguments_or_empty, call_arguments
from ._call_capture import CallCapture
from ._gate_answer import ForClient, Hold, Refuse, Run, Stage, recorded_refuser, refusal_text
from ._model_turn import next_step
from ._result import ToolTraceEntry
from ._run_parts import RunParts
from ._steps import Dispatch, Finish, Step, Suspend
from ._suspension import Suspension
from ._telemetry_hooks import gate_facts, traced_call

if TYPE_CHECKING:
    from ._gate import Gate
    from ._services import RunServices
    from ._subagents import Subagents

__all__ = ["CALL_RERUN_EVENT", "Dispatcher"]

#: The `CUSTOM` event a call emits as it runs again after an interrupted attempt:
#: `{"callId", "toolName", "reason"}`.
CALL_RERUN_EVENT: Final = "tiller.call_rerun"
#: Its `reason`.
_RERUN_REASON: Final = (
    "an earlier attempt of this call was interrupted before it completed (its process "
    "stopped); the tool declares itself idempotent, so it runs again with the same call id"
)


class Dispatcher:
    """Takes one run's `Dispatch` steps (see the module docstring)."""

    def __init__(
        self,
        run: RunParts,
        *,
        services: RunServices,
        gate: Gate,
        suspension: Suspension,
        durability: RunDurability | None,
        capture: CallCapture,
    ) -> None:
        self._run = run
        self._services = services
        self._gate = gate
        self._suspension = suspension
        self._durability = durability
        self._capture = capture
        #: Every call the run answered, in call order within a step.
        self.trace: list[ToolTraceEntry] = []
        #: The run's children, when its agent can start them (set by the loop).
        self.subagents: Subagents | None = None
        self._carried_client_calls: frozenset[str] = frozenset()

    def carry_client_calls(self) -> None:
        """As the run starts: calls an earlier run of this conversation left for the
        client stay the client's, whatever tools this run was given (they are recorded
        again if they are still open)."""
        state = self._run.state
        self._carried_client_calls = frozenset(state.client_calls)
        state.client_calls = []

    async def resumed_batch(self) -> Dispatch:
        """The suspended step's calls, as a resumed run takes them first."""
        state = self._run.state
        calls = state.unanswered_calls()
        # Calls of the step that were answered before it paused (they ran, or were
        # refused): their results are in the state, and in the store's call records.
        recorded: dict[str, tuple[str, bool]] = {
            call.id: (record.result, record.is_error)
            for call in calls
            if (record := state.calls.get(call.id)) is not None and record.result is not None
        }
        rerun: frozenset[str] = frozenset()
        if self._durability is not None:
            recorded.update(await self._durability.completed_calls(state.run_id))
            rerun = await self._durability.rerun_calls(state.run_id)
            rerun = frozenset(call.id for call in calls if call.id in rerun)
        # Calls whose arguments never were JSON are answered with that error again (the
        # transcript holds `{}` for them: run, they would run with no arguments at all).
        malformed = {
            call.id: record.malformed_text or ""
            for call in calls
            if (record := state.calls.get(call.id)) is not None and record.malformed_arguments
        }
        return Dispatch(
            tuple(calls), resumed=True, malformed=malformed, recorded=recorded, rerun=rerun
        )

    async def take(self, step: Dispatch) -> Step:
        """Gate every call, run the allowed ones concurrently, answer them in call order.

        If the run is cancelled meanwhile (while an approver decides, or while tools run),
        results already returned are kept and every other call gets a "cancelled" error
        result, so the transcript stays legal. Calls held for a person make the next step
        a `Suspend`; the results of the calls that ran are then in their call records."""
        run, state = self._run, self._run.state
        for call in step.calls:
            state.calls[call.id] = CallRecord(call_id=call.id, name=call.name, step=state.step)
        batch = self._batch(step)
        first_entry = len(self.trace)
        try:
            after = await self._gate_and_run(batch)
        except BaseException as exc:
            self._interrupted(batch, exc)
            if isinstance(exc, BaseExceptionGroup) and run.agui.is_cancelled:
                # The task group wraps the calls' `Cancelled` in a group, which the run's
                # edge would report as a crash: the run was cancelled, so say that.
                run.agui.check_cancelled()
            raise
        finally:
            if len(step.calls) > 1:
                # The trace lists a step's calls in call order, however they finished.
                order = {call.id: index for index, call in enumerate(step.calls)}
                self.trace[first_entry:] = sorted(
                    self.trace[first_entry:], key=lambda entry: order[entry.call_id]
                )
        if after is not None:
            return after
        state.messages.append(
            UserMessage(tool_results=tuple(batch.results[c.id] for c in step.calls))
        )
        return next_step(run)

    def answer_stopped(
        self,
        calls: Sequence[ToolCall],
        *,
        recorded: Mapping[str, tuple[str, bool]] | None = None,
    ) -> None:
        """The run stopped (a cancel, a store that failed) before it took the step of
        `calls`: none of them ran now, and each is answered (law 1) — with its result if
        it was answered before (the step was held, or it is a resumed step and `recorded`
        has the call's completion), else as not run."""
        state = self._run.state
        step = Dispatch(tuple(calls))
        # The calls of a held step that ran (or were refused) are answered and traced once.
        shown = {result.call_id: result for result in self._suspension.answered_before}
        results = []
        for call in calls:
            if call.id in shown:
                results.append(shown[call.id])
                continue
            record = state.calls.setdefault(
                call.id, CallRecord(call_id=call.id, name=call.name, step=state.step)
            )
            if recorded is not None and call.id in recorded:
                content, is_error = recorded[call.id]
            elif record.result is not None:
                content, is_error = record.result, record.is_error
            else:
                content, is_error = "The run stopped before this call ran.", True
            results.append(self._finish_call(step, call, content, is_error=is_error, show=False))
        state.messages.append(UserMessage(tool_results=tuple(results)))

    def _batch(self, step: Dispatch) -> Batch:
        # The interlock sees the whole batch: a read and a send in one parallel step
        # cannot slip through together. Each call is checked with the other calls'
        # capabilities ORed into the conversation's taint (its own output comes after it).
        services = self._services
        flow = services.taint_flow
        flow.refresh()
        services.begin_step()
        tools = [self._run.agent.registry.get(c.name) for c in step.calls]
        able = [flow.capabilities(tool) for tool in tools]
        return Batch(
            step,
            step.calls,
            budget=OutputBudget(self._run.run_ctx.jail.output_budget_bytes),
            make_signals=services.signals_for_step,
            tools=tools,
            able=able,
            # As the batch's other calls see them: a read may bring an earlier run's taint.
            seen=flow.for_batch(able),
        )

    async def _gate_and_run(self, batch: Batch) -> Step | None:
        """The batch's calls through the gate, the allowed ones run; the next step when
        it is not the next model turn (calls held, or left for the client)."""
        state, flow = self._run.state, self._services.taint_flow
        # With private data and untrusted input, jobs that hold the network stop first.
        whole = Interlock.batch_taint(state.taint_flags, batch.seen)
        watched = flow.watches(whole)
        if watched:
            # Inside the caller's try: a cancel while it walks the workspace or waits for
            # a stopped job still answers every call of the batch (laws 1, 8).
            await flow.before_batch(whole)
        for index, call in enumerate(batch.calls):
            await self._gate_one(batch, index, call)
        allowed = batch.allowed
        # Each call inside its `execute_tool` span when traced; the wrapper is made per
        # batch, not kept on `self` (a bound method its own object holds is a reference
        # cycle, and a run's parts must go by reference counting).
        run_one = traced_call(self._run.trace, self._run_call)
        if len(allowed) == 1:  # the common case: no task group, no extra loop pass
            await run_one(*allowed[0], batch)
        elif allowed:
            async with asyncio.TaskGroup() as group:
                for call, tool in allowed:
                    group.create_task(run_one(call, tool, batch))
        self._finish_executed(batch, show=True)
        # What the batch wrote carries the taint; the taint may now stop networked jobs.
        wrote = any(tool.read_only is not True for _, tool in allowed)
        if watched or flow.watches(state.taint_flags):
            await flow.after_batch(state.taint_flags, wrote=wrote)
        if batch.held or batch.for_client or self.subagents is not None:
            return await self._held_or_for_client(batch)
        return None  # the common case: every call answered, the step goes on

    async def _gate_one(self, batch: Batch, index: int, call: ToolCall) -> None:
        """Answer `call` from its record, or as malformed, or put it through the gate."""
        state, step = self._run.state, batch.step
        record = state.calls[call.id]
        if call.id in self._carried_client_calls:
            # An earlier run gated it and left it to the client: still the client's.
            batch.for_client.append(call)
            return
        if self._run.trace is not None:
            self._run.trace.tool_opened(call, known=batch.tools[index] is not None)
        if call.id in step.recorded:
            # Completed before a crash or suspension: never run twice (law 5).
            content, is_error = step.recorded[call.id]
            batch.results[call.id] = self._finish_call(batch.step, call, content, is_error=is_error)
            return
        if call.id in step.malformed:
            record.malformed_arguments = True
            raw = step.malformed[call.id]
            shown = raw if len(raw) <= 300 else raw[:300] + "…"
            text = (
                f"The arguments you wrote for {call.name} are not valid JSON, so the "
                f"call did not run: {shown!r}. Call it again with a JSON object."
            )
            batch.results[call.id] = self._finish_call(batch.step, call, text, is_error=True)
            return
        taint = Interlock.batch_taint(
            state.taint_flags, batch.seen[:index] + batch.seen[index + 1 :]
        )
        # Parsed once: the gate reads these, and the registry runs the tool with them.
        arguments = batch.arguments[call.id] = call_arguments(call)
        # A write while a networked background job runs may be a send through it.
        flow = self._services.taint_flow
        through = flow.sends_through(batch.tools[index], taint, arguments or {})
        can = batch.able[index] | Capability.EXTERNAL_SEND if through else batch.able[index]
        answer = await self._gate.check(
            call, record, taint, can, through=through, arguments=arguments
        )
        if self._run.trace is not None:
            self._run.trace.tool_gated(call.id, *gate_facts(answer))
        match answer:
            case ForClient():
                # Allowed: the client runs it, and its result comes with the next
                # request, as untrusted as any outside input (law 6).
                batch.for_client.append(call)
                state.add_taint(taint_of(batch.able[index]))
            case Run(risk=risk) if self._asks_served_question(call):
                # Allowed to ask: the question goes to the page as an interrupt.
                batch.held.append(call)
                self._suspension.hold(call, "a question for the person", risk, question=True)
            case Run(tool=tool):
                batch.allowed.append((call, tool))
            case Hold(reason=reason, risk=risk):
                batch.held.append(call)
                self._suspension.hold(call, reason, risk, question=False)
            case Stage(result=staged):
                batch.results[call.id] = self._finish_call(batch.step, call, staged, is_error=False)
            case Refuse():
                # The loop words the refusal from who refused (law 4).
                record.refused_by = recorded_refuser(answer)
                batch.results[call.id] = self._finish_call(
                    batch.step, call, refusal_text(answer), is_error=True
                )
            case _:
                assert_never(answer)

    async def _held_or_for_client(self, batch: Batch) -> Step | None:
        """Calls held for a person suspend the run; calls left for the client end it."""
        state, calls = self._run.state, batch.calls
        held, subagents = batch.held, self.subagents
        if subagents is not None and any(subagents.holds(c.id) for c, _ in batch.allowed):
            # Agent calls whose subagent waits for a person are held with it.
            waiting = {c.id for c in held} | {
                c.id for c, _ in batch.allowed if c.id not in batch.executed
            }
            held = [call for call in calls if call.id in waiting]
        if not held and not batch.for_client:
            return None
        # The step stops before its results reach the transcript: each answered call's
        # result stays in its record, so a continuation answers the call with it instead
        # of running it again (law 5).
        for call in calls:
            answered = batch.results.get(call.id)
            if answered is not None:
                state.calls[call.id].result = answered.content
        # Calls for the client stay open through a suspension too: a resumed run leaves
        # them to the client again.
        state.client_calls = [call.id for call in batch.for_client]
        if not held:
            # The run ends here with the client's calls open (AG-UI frontend tools); the
            # client sends their results, with the others', in its next request.
            state.stop_cause = StopCause.COMPLETED
            return Finish(StopCause.COMPLETED)
        if self._durability is not None:
            # The allowed calls ran and are recorded; the refused, staged and malformed
            # ones are answered: record them too, so a resume (in any process) answers
            # them from the log and only the held ones wait for a person.
            for call in calls:
                answered = batch.results.get(call.id)
                if answered is not None and call.id not in batch.executed:
                    await self._durability.call_completed(
                        state.run_id, call.id, answered.content, is_error=answered.is_error
                    )
        self._suspension.answered_before = [
            batch.results[call.id] for call in calls if call.id in batch.results
        ]
        return Suspend(tuple(held), "these calls need a person's approval")

    def _interrupted(self, batch: Batch, exc: BaseException) -> None:
        """The dispatch was interrupted (a cancel, or an error such as a store that failed
        or a run taken over by another process): keep what ran (the stream is closing, so
        nothing more is shown for it), answer every other call, and put the results into
        the transcript now, because the normal path that appends them will not run."""
        cancelled = self._run.agui.is_cancelled or isinstance(
            exc, Cancelled | asyncio.CancelledError
        )
        why = (
            "The run was cancelled before this call finished."
            if cancelled
            else f"The run stopped before this call finished: {first_leaf(exc)}"
        )
        self._finish_executed(batch, show=False)
        for call in batch.calls:
            if call.id not in batch.results:
                batch.results[call.id] = self._finish_call(
                    batch.step,
                    call,
                    why,
                    is_error=True,
                    show=False,
                )
        self._run.state.messages.append(
            UserMessage(tool_results=tuple(batch.results[call.id] for call in batch.calls))
        )

    def _asks_served_question(self, call: ToolCall) -> bool:
        """Whether `call` is a question that must wait for the person: a served, durable
        run (the answer comes with a resume, which needs the checkpoint) whose `ask_user`
        call is well formed (a malformed one runs, and the tool says what is wrong)."""
        broker = self._run.run_ctx.questions
        if (
            call.name != ASK_USER
            or self._durability is None
            or not isinstance(broker, InterruptQuestions)
            or not broker.holds(call.id)
        ):
            return False
        try:
            arguments = orjson.loads(call.arguments)
        except orjson.JSONDecodeError:
            return False
        return isinstance(arguments, dict) and bool(questions_metadata(arguments))

    async def _run_call(self, call: ToolCall, tool: Tool, batch: Batch) -> None:
        run, state = self._run, self._run.state
        record = state.calls[call.id]
        record.status = "started"
        # Assembled only if the tool reads it (most take none).
        ctx = self._services.pending_context(call.id, record.step, batch.shared_signals)
        if self._durability is not None:
            # Idempotent (declared, law 12): should this attempt be cut short, recovery
            # runs it again instead of asking a person (law 5).
            await self._durability.call_started(
                state.run_id, call.id, idempotent=tool.idempotent is True
            )
        if call.id in batch.step.rerun:
            run.agui.emit(
                CustomEvent(
                    CALL_RERUN_EVENT,
                    {"callId": call.id, "toolName": call.name, "reason": _RERUN_REASON},
                )
            )
        read: list[str] = []
        try:
            watching = watch_reads(read.append)
            try:
                execution = await run.agent.registry.execute(
                    call, ctx, arguments=batch.arguments.get(call.id)
                )
            finally:
                stop_watching_reads(watching)
        finally:
            built = ctx.built
            if built is not None:
                built.progress.close()  # progress belongs to the call; detached work uses notify
        if self.subagents is not None and self.subagents.holds(call.id):
            # Its subagent suspended for a person: the call is not done, it waits with it.
            # It stays recorded as started: once the suspended checkpoint holds the child's
            # state a resume continues the child (not uncertain); before, it is uncertain.
            record.status = "pending"
            return
        # What the call read is now in the conversation (law 6: taint only grows).
        # A file an earlier tainted run wrote brings its taint along.
        flow = self._services.taint_flow
        brought, inherited = taint_of(flow.capabilities(tool)), flow.taint_of_reads(read)
        if brought is not Taint.NONE or inherited is not Taint.NONE:  # most calls bring none
            state.add_taint(brought | inherited)
        record.malformed_arguments = execution.malformed_arguments
        batch.executed[call.id] = execution
        if self._durability is not None:
            keep = run.options.before_call_recorded
            if keep is not None:
                await keep(call.id)  # every tool: a declared capability is not a file diff
            result = execution.result
            # Bounded: an MCP or custom tool may return any size; the store keeps what the
            # transcript could show at most.
            content = recorded_head(result.content, run.run_ctx.jail.output_budget_bytes)
            await self._durability.call_completed(
                state.run_id, call.id, content, is_error=result.is_error
            )
        hooks = run.run_ctx.hooks
        if hooks and hooks.watches("post_tool", call.name):
            await self._post_tool(call, execution)

    async def _post_tool(self, call: ToolCall, execution: Execution) -> None:
        run_ctx, state = self._run.run_ctx, self._run.state
        await run_ctx.hooks.post_tool(
            tool=call.name,
            arguments=arguments_or_empty(call),
            call_id=call.id,
            run_id=state.run_id,
            thread_id=state.thread_id,
            workspace=run_ctx.jail.materialize(),  # it runs there (a scratch root: made)
            result=execution.result.content,
            is_error=execution.result.is_error,
            taint=state.taint_flags,
        )

    def _finish_executed(self, batch: Batch, *, show: bool) -> None:
        """Cap the outputs of the calls that ran in call order, so the transcript does not
        depend on which call finished first, and record their results."""
        run_ctx = self._run.run_ctx
        interlock = run_ctx.interlock
        for call in batch.calls:
            execution = batch.executed.get(call.id)
            if execution is None or call.id in batch.results:
                continue
            result = batch.budget.cap_result(execution.result, run_ctx.jail)
            if interlock.wrap_untrusted and (
                _brings_untrusted(self._run.agent.registry.get(call.name))
                or bool(getattr(execution.data, "brings_untrusted", False))
            ):
                # (A subagent's answer is as untrusted as what the subagent read.)
                result = result.model_copy(
                    update={"content": interlock.wrap(call.name, result.content)}
                )
            batch.results[call.id] = self._finish_call(
                batch.step, call, result.content, is_error=result.is_error, show=show, result=result
            )

    def _finish_call(
        self,
        step: Dispatch,
        call: ToolCall,
        content: str,
        *,
        is_error: bool,
        show: bool = True,
        result: ToolResult | None = None,
    ) -> ToolResult:
        """Record the call's answer and show it: on the call's open handle, or, for a call
        an earlier run showed, as a result of its own. `show=False`: the dispatch was
        interrupted, and the calls' handles are not used again. `result`: the answer as a
        `ToolResult` already (the executed call's, capped), returned as it is."""
        run, state = self._run, self._run.state
        record = state.calls[call.id]
        record.status = "failed" if is_error else "completed"
        record.is_error = is_error
        if run.trace is not None:
            run.trace.tool_closed(call.id, content, is_error=is_error)
        self._capture.tool_result(call.id, call.name, content, is_error=is_error)
        handle = step.handles.get(call.id) if show else None
        result_ids = state.result_ids
        if handle is not None:
            result_ids[call.id] = handle.result_message_id
            # After a cancel the result cannot be shown, but it is kept (law 8): the loop
            # stops at its next check.
            try:  # noqa: SIM105 (not `contextlib.suppress`: three calls more, every call)
                handle.result(content)
            except Cancelled:
                pass
        elif step.resumed:
            # A call of an earlier run: its result keeps the id it was first shown with.
            with contextlib.suppress(Cancelled):
                result_ids[call.id] = run.agui.tool_result(
                    call.id, content, message_id=result_ids.get(call.id)
                )
        self.trace.append(
            ToolTraceEntry(
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
                step=record.step,
                is_error=is_error,
                refused_by=record.refused_by,
                unknown=record.refused_by == "unknown",
                malformed_arguments=record.malformed_arguments,
                staged=record.staged,
                rerun=call.id in step.rerun,
            )
        )
        if result is not None:
            return result
        return ToolResult(call_id=call.id, name=call.name, content=content, is_error=is_error)


def _brings_untrusted(tool: Tool | None) -> bool:
    return tool is not None and bool(tool.capabilities & Capability.UNTRUSTED_INPUT)
