"""`Agent`: a model, tools, a system prompt and an output type — and nothing per run.

An agent holds no run's policy: `agent.run_in(run_ctx, conversation, options)` is the
per-run entry point, and many runs of one agent go side by side, each with its own
`RunContext`. `agent.run(prompt, ...)` is the shorthand that builds a context.

Every run goes through the AG-UI driver, so a library call, the terminal and the server
produce the same event stream; `on_event` sees it live.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from .. import _public
from ..cancel import CancellationToken
from ..conversation import AssistantMessage, UserMessage
from ..errors import Cancelled, UsageError
from ..events import (
    AgUiContext,
    Event,
    Interrupt,
    RunOutcome,
    TransformerFactory,
    run_agent,
    transformers_of,
)
from ..model import OUTPUT_TOOL_NAME, Model, ModelError, RetryPolicy, resolve_model
from ..policy import Approver
from ..state import RunState, StopCause
from ..store import (
    DEFAULT_BUCKET,
    EventLog,
    EventLogWriter,
    LeaseLost,
    RunStillRunning,
    StoreUnavailable,
)
from ..tools import Jail, Registry, Tool
from ._agui_messages import agui_messages
from ._context import RunContext
from ._iter import AgentRun
from ._log_first import LogBeforeCheckpoint
from ._mailbox_route import give_send_tool
from ._options import RunOptions
from ._output import AgentOutputMode, StructuredOutput, choose_output_mode
from ._result import RunResult
from ._run import Loop, LoopFailed, ResponseTooLarge, StepWatcher
from ._subagents import nested_messages

if TYPE_CHECKING:  # `_resume` imports this module: its names are for the annotations only
    from ._resume import ContinueAs, FromCheckpoint, ResumeDecision

__all__ = ["Agent"]

_EXHAUSTING = frozenset(
    {StopCause.MAX_STEPS, StopCause.STEP_BUDGET, StopCause.TOKEN_BUDGET, StopCause.COST_BUDGET}
)


class Agent:
    """A model with tools. Build once, run many times, each run in its own world."""

    def __init__(  # noqa: PLR0913 (the public constructor: each keyword is API)
        self,
        model: Model | str,
        tools: Sequence[Tool] = (),
        *,
        system_prompt: str | None = None,
        name: str = "agent",
        state_type: type[BaseModel] | None = None,
        output_type: Any = None,
        output_mode: AgentOutputMode = "auto",
        retry: RetryPolicy | None = None,
        config: dict[str, Any] | None = None,
        ref: str | None = None,
    ) -> None:
        self.model: Model = resolve_model(model) if isinstance(model, str) else model
        #: The model string the agent was built from (`"openai:gpt-4.1"`), if it was: kept
        #: in checkpoints so a process that loads the agent to resume a run can rebuild
        #: the same model (`load_agent(ref, model=...)`).
        self.model_spec = model if isinstance(model, str) else None
        self.registry = Registry(tools)
        self.system_prompt = system_prompt
        self.name = name
        self.state_type = state_type
        self.output_type = output_type
        #: How the structured answer is asked for (`native`, `tool` or `prompted`; see
        #: `tiller.loop._output`): `output_mode`, or for `"auto"` the best the model
        #: declares, chosen now, so a copy on another model asks the same way.
        self.output_mode = choose_output_mode(output_mode, self.model, output_type)
        if (
            output_type is not None
            and self.output_mode == "tool"
            and self.registry.get(OUTPUT_TOOL_NAME) is not None
        ):
            raise UsageError(
                f"the agent has a tool named {OUTPUT_TOOL_NAME!r}, the name of the output "
                "tool in output_mode='tool'; rename the tool or pick another output_mode"
            )
        self._structured: StructuredOutput | None = None
        self.retry = retry if retry is not None else RetryPolicy()
        self.config = dict(config or {})
        #: "module:attr" naming this agent (or a factory of it), written into checkpoints so
        #: another process can load the agent to resume the run (`tiller runs resume`).
        self.ref = ref

    def structured_output(self) -> StructuredOutput | None:
        """The output type in the agent's mode (None without an output type); built once
        per type and mode, since the schema is the same for every request."""
        output_type = self.output_type
        if output_type is None:
            return None
        built = self._structured
        if built is None or built.output_type is not output_type or built.mode != self.output_mode:
            built = self._structured = StructuredOutput(output_type, self.output_mode)
        return built

    def parse_output(self, text: str) -> Any:
        """The final answer `text` as this agent's `output_type`, as a run's result holds
        it (`RunResult.output`); None when the agent has none. `pydantic.ValidationError`
        when `text` is not one. For a reader that has only a run's transcript (a fleet
        run's result read from its checkpoint). In tool mode the transcript's answer is
        what the model wrote, a blank line, then the output tool's arguments: those are
        the output."""
        structured = self.structured_output()
        if structured is None:
            return None
        try:
            return structured.validate(text, None)
        except ValidationError:
            for found in re.finditer("\n\n", text):
                with contextlib.suppress(ValidationError):
                    return structured.validate(text[found.end() :], None)
            raise

    def system_prompt_for_run(self) -> str | None:
        """The system prompt, plus what the output mode adds (the schema, when prompted)."""
        structured = self.structured_output()
        if structured is None:
            return self.system_prompt
        return structured.system_prompt(self.system_prompt)

    # ── entry points ─────────────────────────────────────────────────────────────

    async def run(  # noqa: PLR0913 (the public entry point: each keyword is API)
        self,
        prompt: str,
        *,
        workspace: str | Path | None = None,
        approver: Approver | None = None,
        context: RunContext | None = None,
        options: RunOptions | None = None,
        cancel: CancellationToken | None = None,
        on_event: Callable[[Event], None] | None = None,
        run_id: str | None = None,
        thread_id: str | None = None,
        transformers: TransformerFactory | None = None,
    ) -> RunResult:
        """Run on `prompt`. Without `context`, the run is jailed to `workspace` with
        `approver` (None: calls that need approval are blocked); with no workspace either,
        to a fresh temporary directory that is removed when the run ends. `cancel` runs
        `context` under that token, keeping the context's own live controls (its steering
        queue and budget are the run's). `transformers` builds the run's stream
        transformers (see `run_in`)."""
        context, scratch = _jailed(workspace, approver, context, cancel)
        try:
            return await self.run_in(
                context,
                prompt,
                options,
                on_event=on_event,
                run_id=run_id,
                thread_id=thread_id,
                transformers=transformers,
            )
        finally:
            if scratch is not None:
                scratch.remove_scratch()  # only if the run made it

    def run_sync(  # noqa: PLR0913 (mirrors run(): the same keywords)
        self,
        prompt: str,
        *,
        workspace: str | Path | None = None,
        approver: Approver | None = None,
        context: RunContext | None = None,
        options: RunOptions | None = None,
        cancel: CancellationToken | None = None,
        on_event: Callable[[Event], None] | None = None,
        run_id: str | None = None,
        thread_id: str | None = None,
        transformers: TransformerFactory | None = None,
    ) -> RunResult:
        """`run`, for scripts: the run gets an event loop of its own, closed when it ends.

        Code already inside an event loop (a notebook cell, a server, an `async def`)
        awaits `agent.run(...)` instead: one loop cannot wait on another in its own
        thread, so calling this there raises `UsageError` rather than deadlocking."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop running in this thread: the script's case
            pass
        else:
            raise UsageError(
                "Agent.run_sync() was called inside a running event loop; "
                "use `await agent.run(...)` there instead"
            )
        return asyncio.run(
            self.run(
                prompt,
                workspace=workspace,
                approver=approver,
                context=context,
                options=options,
                cancel=cancel,
                on_event=on_event,
                run_id=run_id,
                thread_id=thread_id,
                transformers=transformers,
            )
        )

    def iter(  # noqa: PLR0913 (mirrors run(): the same keywords)
        self,
        conversation: str | Sequence[UserMessage | AssistantMessage] | RunState,
        *,
        workspace: str | Path | None = None,
        approver: Approver | None = None,
        context: RunContext | None = None,
        options: RunOptions | None = None,
        cancel: CancellationToken | None = None,
        on_event: Callable[[Event], None] | None = None,
        run_id: str | None = None,
        thread_id: str | None = None,
        transformers: TransformerFactory | None = None,
    ) -> AgentRun:
        """The run `run` would make, step by step: `async with agent.iter(prompt) as run:
        async for step in run: ...`, then `run.result` (see `tiller.loop.AgentRun`).

        Each step (`ModelTurn`, `Dispatch`, `Suspend`, `Finish`) is yielded before the loop
        takes it, and the loop waits for the caller; leaving the block early cancels the
        run. `conversation` may also be a `RunState` (a checkpoint): the run continues at
        its step. The other keywords are `run`'s."""
        stop = _stop_token(context, cancel)
        jailed, scratch = _jailed(workspace, approver, context, stop)
        stream = _Stream(
            on_event=on_event, run_id=run_id, thread_id=thread_id, transformers=transformers
        )

        async def start(watch: StepWatcher) -> RunResult:
            try:
                return await self._run_in(jailed, conversation, options, stream, watch)
            finally:
                if scratch is not None:
                    scratch.remove_scratch()  # only if the run made it

        return AgentRun(start, stop)

    async def run_in(
        self,
        run_ctx: RunContext,
        conversation: str | Sequence[UserMessage | AssistantMessage] | RunState,
        options: RunOptions | None = None,
        *,
        on_event: Callable[[Event], None] | None = None,
        run_id: str | None = None,
        thread_id: str | None = None,
        opening_messages: list[dict[str, Any]] | None = None,
        transformers: TransformerFactory | None = None,
    ) -> RunResult:
        """Run under `run_ctx`. `conversation` is a prompt, a list of messages, or a
        `RunState` to continue from (its stop cause is cleared). `opening_messages` (AG-UI
        message dicts) are sent as the stream's first `MESSAGES_SNAPSHOT`; by default a
        continued run sends its conversation so far, and a new one sends none.

        `transformers` is a factory called once for this run, returning the transformers
        its events pass through before the verifier (and so before `on_event`, the event
        log and any client): `lambda: [FilterToolCalls.deny(["secret"])]`. A factory, not
        a list, because transformers keep per-run state.

        The run steers, switches modes, detaches and spends through `run_ctx.controls`,
        unless another run is using that context's own controls right now: then it gets
        fresh ones (`RunControls.for_run`). To reach a run's live parts from outside, pass
        them: `run_in(ctx.with_controls(controls), ...)`."""
        stream = _Stream(
            on_event=on_event,
            run_id=run_id,
            thread_id=thread_id,
            opening_messages=opening_messages,
            transformers=transformers,
        )
        return await self._run_in(run_ctx, conversation, options, stream, None)

    async def _run_in(
        self,
        run_ctx: RunContext,
        conversation: str | Sequence[UserMessage | AssistantMessage] | RunState,
        options: RunOptions | None,
        stream: _Stream,
        watch: StepWatcher | None,
    ) -> RunResult:
        # A mailbox route that gives `message_send` gives it to every run under it, a
        # continued one too (its agent reloaded by reference in another process): this
        # run gets a copy of the agent with it, since the agent is shared by its runs.
        agent = self
        registry = give_send_tool(self.registry, run_ctx.mailbox)
        if registry is not self.registry:
            agent = copy.copy(self)
            agent.registry = registry
        # The live controls this run uses (law 13): the context's own, unless another run
        # is using them now (then fresh ones), or the ones a caller passed on to share.
        with run_ctx.controls.for_run() as controls:
            return await agent._run_with(
                # Whatever the run derives while it works shares the run's controls.
                run_ctx.with_controls(controls.shared_by_all()),
                conversation,
                options,
                stream,
                watch,
            )

    async def resume(
        self,
        checkpoint: RunState | RunResult | str,
        decisions: Mapping[str, ResumeDecision],
        *,
        ctx: RunContext | FromCheckpoint | None = None,
        options: RunOptions | None = None,
        on_event: Callable[[Event], None] | None = None,
        transformers: TransformerFactory | None = None,
        bucket: str = DEFAULT_BUCKET,
        continue_as: ContinueAs | None = None,
    ) -> RunResult:
        """Continue a suspended run with a person's `decisions` (one per pending call, by
        its runtime id). `checkpoint` is the suspended `RunState`, the suspended
        `RunResult`, or a run id to load from the store (bucket `bucket`).

        `ctx` is the continued run's context, or how to rebuild it from the checkpoint's
        stored policy (`FromCheckpoint(store=..., approver=...)`); None rebuilds it with
        nothing. `options=None` uses the stored options. `continue_as` goes on under a new
        run id (an AG-UI resume). A run another process resumed first raises
        `AlreadyResumed`; uncertain calls raise `ResumeReplayBlocked`. For a run whose
        process died, see `tiller.loop.recover`."""
        from ._resume import FromCheckpoint, _Resumption, resume_checkpoint

        how = _Resumption(
            ctx if ctx is not None else FromCheckpoint(),
            options=options,
            bucket=bucket,
            on_event=on_event,
            transformers=transformers,
            continue_as=continue_as,
        )
        return await resume_checkpoint(self, checkpoint, decisions, how)

    async def _run_with(
        self,
        run_ctx: RunContext,
        conversation: str | Sequence[UserMessage | AssistantMessage] | RunState,
        options: RunOptions | None,
        stream: _Stream,
        watch: StepWatcher | None,
    ) -> RunResult:
        options = options if options is not None else RunOptions()
        chain = transformers_of(stream.transformers)
        state = self._initial_state(conversation, stream.run_id, stream.thread_id, run_ctx)
        adapter = _LoopRun(self, run_ctx, options, state, stream.opening_messages, watch=watch)
        on_event = stream.on_event
        listeners: list[Callable[[Event], None]] = [on_event] if on_event is not None else []
        # Durable mode: the run's AG-UI stream also goes to the store's event log, in
        # batches (DESIGN §7), for `tiller runs show`, replay and reattach. The writer is a
        # synchronous listener that only buffers; its writes are tasks, awaited below.
        event_log: EventLogWriter | None = None
        if run_ctx.store is not None and options.checkpoint_bucket is not None:
            event_log = EventLog(run_ctx.store).writer(
                state.run_id, batch_size=options.event_log_batch
            )
            listeners.append(event_log)
            adapter.event_log = event_log  # fenced by the run's lease once it takes it
        events = run_agent(
            adapter,
            {
                "threadId": state.thread_id,
                "runId": state.run_id,
                "messages": [],
                "state": state.agent_state,
            },
            state_type=self.state_type,
            transformers=chain,
            cancel=run_ctx.cancel,
            # Synchronous, so the observer sees the run as it is now (a budget line after a
            # step shows that step's spending; a steer pushed there reaches the next step).
            listeners=listeners,
        )
        # Everything that watches the run is a listener: no one reads the stream itself.
        await events.run_to_end()
        if event_log is not None:
            await event_log.wait()  # the log is complete when the run returns
        return adapter.result()

    def _initial_state(
        self,
        conversation: str | Sequence[UserMessage | AssistantMessage] | RunState,
        run_id: str | None,
        thread_id: str | None,
        run_ctx: RunContext,
    ) -> RunState:
        if isinstance(conversation, RunState):
            state = conversation.model_copy(deep=True)
            state.stop_cause = None
            state.error = None
            state.phase = run_ctx.phase  # the loop gates by the context's phase: record it
            if state.agent_ref is None:
                state.agent_ref = self.ref
            if state.model_spec is None:
                state.model_spec = self.model_spec
            if run_id is not None:
                state.run_id = run_id
            return state
        run_id = run_id or f"run-{uuid.uuid4().hex[:12]}"
        if isinstance(conversation, str):
            messages: list[UserMessage | AssistantMessage] = [UserMessage(text=conversation)]
        else:
            messages = list(conversation)
        return RunState(
            run_id=run_id,
            thread_id=thread_id or run_id,
            agent_name=self.name,
            messages=messages,
            phase=run_ctx.phase,
            agent_ref=self.ref,
            model_spec=self.model_spec,
        )


class _LoopRun:
    """The loop as an AG-UI agent: what `run_agent` drives for one run."""

    def __init__(
        self,
        agent: Agent,
        run_ctx: RunContext,
        options: RunOptions,
        state: RunState,
        opening_messages: list[dict[str, Any]] | None = None,
        *,
        watch: StepWatcher | None = None,
    ) -> None:
        self.agent = agent
        self.watch = watch
        self.run_ctx = run_ctx
        self.options = options
        self.state = state
        self.opening_messages = opening_messages
        #: How many messages the run was given (the rest are its own), and how often its
        #: history had been compacted then.
        self.input_length = len(state.messages)
        self.compactions_at_start = state.compaction.compactions
        self.loop: Loop | None = None
        #: The durable run's event log writer, fenced by the run's lease epoch.
        self.event_log: EventLogWriter | None = None
        #: The run stopped on a durable write refused or failed (`RunResult.store_failed`).
        self.store_failed = False

    async def run(self, ctx: AgUiContext[Any]) -> RunOutcome:
        state = self.state
        ctx.ids.restore(state.id_counters)
        # And past the ids the conversation already holds, so no call shares one (law 10).
        ctx.ids.skip(
            id_
            for message in state.messages
            for id_ in (message.id, *(call.id for call in getattr(message, "tool_calls", ())))
        )
        if self.opening_messages is not None:
            ctx.messages_snapshot(_with_children(self.opening_messages, state))
        elif state.step > 0:
            # A continued run starts with the conversation so far (law 2), and those of
            # the subagents suspended in it, which it continues.
            ctx.messages_snapshot(
                _with_children(
                    agui_messages(
                        state.messages, id_prefix=state.thread_id, result_ids=state.result_ids
                    ),
                    state,
                )
            )
        loop = self.loop = Loop(
            self.agent, self.run_ctx, self.options, ctx, state, watch=self.watch
        )
        durability = loop.durability
        if self.event_log is not None and durability is not None:
            # Once another process took the run over, no batch of this stream is written.
            self.event_log.fence = functools.partial(durability.check_lease, state.run_id)
            loop.durability = LogBeforeCheckpoint(durability, self.event_log)
        try:
            await loop.run()
        except BaseException as exc:
            if ctx.is_cancelled or isinstance(exc, Cancelled | asyncio.CancelledError):
                # `usage_complete` stays as the loop left it: false only if a model call
                # was cut short, not when the cancel came between calls or during tools.
                # A cancellation from outside (the run's task cancelled, not its token)
                # goes on, and the stream ends `RUN_ERROR{CANCELLED}`: the result tells
                # the same story, even when it came after the last step.
                state.stop_cause = StopCause.CANCELLED
                raise
            if isinstance(exc, ModelError | ResponseTooLarge):
                code = "MODEL_ERROR" if isinstance(exc, ModelError) else "RESPONSE_TOO_LARGE"
                raise LoopFailed(str(exc), code) from exc
            self.store_failed = _store_failure(exc)
            if state.stop_cause is None or isinstance(exc, LeaseLost):
                # Taken over as it finished (its last checkpoint was refused): the run
                # did not complete here, its new holder goes on with it.
                state.stop_cause = StopCause.ERROR
                state.error = _failure_text(exc)
            raise
        finally:
            state.agent_state = _dump_state(ctx.state)
            state.id_counters = ctx.ids.counters()
            ctx.run_usage = [_token_usage(self.agent.model, state)]
        if ctx.is_cancelled:
            # The token fired before the run ended (after its last step, say): the stream
            # will end cancelled, and the result must tell the same story.
            state.stop_cause = StopCause.CANCELLED
        ctx.run_result = self._run_result(loop)
        if state.stop_cause is StopCause.ERROR:
            raise LoopFailed(state.error or "the run failed", "RUN_FAILED")
        if state.stop_cause is StopCause.SUSPENDED:
            # One interrupt per pending call, ids stable per call; the driver sends the
            # state first, then the run's messages, so the client can show the calls.
            ctx.interrupt_messages = self._closing_messages(loop)
            return RunOutcome.interrupt([Interrupt.from_wire(i) for i in state.interrupts])
        return RunOutcome.success(state.client_calls)

    def _run_result(self, loop: Loop) -> dict[str, Any]:
        """`RUN_FINISHED.result`: the stop cause, and the validated structured answer
        (as JSON) when the run ended with one (completed, or a budget stop's final
        answer), or why a budget stop's final answer is none (`outputError`)."""
        state = self.state
        result: dict[str, Any] = {"stopCause": state.stop_cause.value if state.stop_cause else None}
        structured = self.agent.structured_output()
        output = loop.turns.final_output
        ended = state.stop_cause is StopCause.COMPLETED or state.stop_cause in _EXHAUSTING
        if structured is not None and output is not None and ended:
            result["output"] = structured.dump(output)
        if loop.turns.output_error is not None:
            result["outputError"] = loop.turns.output_error
        return result

    def _closing_messages(self, loop: Loop) -> list[dict[str, Any]]:
        """The conversation as the stream's last `MESSAGES_SNAPSHOT`. A run that opened
        with the client's own messages repeats them as they were (a client merges
        snapshots by id), followed by what this run added."""
        state = self.state
        start = self.input_length if self.opening_messages is not None else 0
        if state.compaction.compactions != self.compactions_at_start:
            # The history was compacted in this run: the messages the client sent are not
            # a prefix of it any more. The snapshot is the history as the run now has it.
            return _with_children(
                agui_messages(
                    state.messages,
                    id_prefix=state.thread_id,
                    pending_results=loop.suspension.answered_before,
                    result_ids=state.result_ids,
                ),
                state,
            )
        added = agui_messages(
            state.messages[start:],
            id_prefix=state.thread_id,
            pending_results=loop.suspension.answered_before,
            result_ids=state.result_ids,
            index_offset=start,
        )
        return _with_children([*(self.opening_messages or ()), *added], state)

    def result(self) -> RunResult:
        state = self.state
        loop = self.loop
        if state.stop_cause is None:
            # The run ended before the loop set a cause: its token had fired before it
            # began (the driver then never starts it), or the driver refused something.
            cancel = self.run_ctx.cancel
            cancelled = cancel is not None and cancel.is_cancelled
            state.stop_cause = StopCause.CANCELLED if cancelled else StopCause.ERROR
        last = state.last_assistant()
        return RunResult(
            text=last.text if last is not None else "",
            stop_cause=state.stop_cause,
            usage=state.usage,
            steps=state.step,
            cost_usd=state.cost_usd,
            usage_complete=state.usage_complete,
            state=state,
            output=loop.turns.final_output if loop is not None else None,
            exhausted=state.stop_cause in _EXHAUSTING,
            tool_trace=tuple(loop.dispatcher.trace) if loop is not None else (),
            error=state.error,
            handoff=loop.turns.handoff if loop is not None else None,
            checkpoint=state if state.stop_cause is StopCause.SUSPENDED else None,
            pause_reason=loop.suspension.reason if loop is not None else None,
            store_failed=self.store_failed,
        )


def _failure_text(exc: BaseException) -> str:
    """What went wrong, said by the errors themselves: a task group's wrapper ("unhandled
    errors in a TaskGroup") says nothing a person can act on, so its leaves are named,
    each once (calls that failed alike fail together or one by one, as timing has it)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(dict.fromkeys(_failure_text(inner) for inner in exc.exceptions))
    return f"{type(exc).__name__}: {exc}"


def _store_failure(exc: BaseException) -> bool:
    """`exc` (or, in a group, every one of its leaves) is the store refusing the run
    (`LeaseLost`; `RunStillRunning`: another process took its lease first) or unable to
    take a durable write (`StoreUnavailable`)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_store_failure(inner) for inner in exc.exceptions)
    return isinstance(exc, LeaseLost | RunStillRunning | StoreUnavailable)


def _with_children(messages: list[dict[str, Any]], state: RunState) -> list[dict[str, Any]]:
    """`messages`, and those of the subagents suspended in the run that are not among them
    (a client that keeps a subagent's messages sends them back tagged with its id)."""
    if not state.children:
        return messages
    known = {message.get("id") for message in messages}
    return [*messages, *(m for m in nested_messages(state) if m["id"] not in known)]


def _dump_state(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value


def _token_usage(model: Model, state: RunState) -> dict[str, Any]:
    usage = state.usage
    entry: dict[str, Any] = {
        "provider": model.provider,
        "model": model.name,
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "totalTokens": usage.total_tokens,
    }
    if usage.cached_input_tokens:
        entry["cachedInputTokens"] = usage.cached_input_tokens
    if usage.reasoning_tokens:
        entry["reasoningTokens"] = usage.reasoning_tokens
    return entry


@dataclass(frozen=True, slots=True)
class _Stream:
    """How one run's event stream is named and watched (`run_in`'s keywords)."""

    on_event: Callable[[Event], None] | None = None
    run_id: str | None = None
    thread_id: str | None = None
    opening_messages: list[dict[str, Any]] | None = None
    transformers: TransformerFactory | None = None


def _jailed(
    workspace: str | Path | None,
    approver: Approver | None,
    context: RunContext | None,
    cancel: CancellationToken | None,
) -> tuple[RunContext, Jail | None]:
    """The context `run` and `iter` use: the caller's, or one jailed to `workspace` with
    `approver` (with no workspace either, to a fresh temporary directory: its scratch
    jail is returned, to be ended when the run ends). `cancel` runs it under that token,
    keeping the context's own live controls (its steering queue and budget are the
    run's)."""
    scratch: Jail | None = None
    if context is None:
        if workspace is None:
            # Made only when a tool first needs it: most runs never touch a workspace,
            # and making and removing a directory costs more than a whole short run.
            scratch = Jail.scratch()
            context = RunContext(jail=scratch, approver=approver)
        else:
            context = RunContext.sandboxed(Path(workspace), approver)
    elif workspace is not None or approver is not None:
        raise UsageError("pass either a RunContext or workspace/approver, not both")
    if cancel is not None:
        # The caller's context, run under `cancel`: its own live parts stay the ones
        # this run uses (not a derived context's fresh ones).
        context = context.with_controls(context.controls.with_member("cancel", cancel))
    return context, scratch


def _stop_token(context: RunContext | None, cancel: CancellationToken | None) -> CancellationToken:
    """A token that stops one iterated run: a child of the caller's (so theirs still
    cancels it), or a fresh one."""
    outer = cancel if cancel is not None else (context.cancel if context is not None else None)
    return outer.child() if outer is not None else CancellationToken()


# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())
