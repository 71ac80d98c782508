"""Subagents: the child runs a run starts through its `agent` tool, and their registry.

A child is a `Loop` of its own — its own `RunState`, gate, services and transcript — run
inside the parent's `agent` call, not through a second `run_agent` driver: its events go
into the parent's stream, between `SUBAGENT_STARTED` (with `parentToolCallId`, the agent
call's id) and `SUBAGENT_FINISHED` / `SUBAGENT_ERROR`, and the event sink attributes them
to its `subagentRunId` (`{run_id}-sub-{n}`) because they are emitted by the task that
opened the subagent's segment. The child sees the parent's AG-UI context through a view
(`_SubagentView`): the same sink, its own ids and cancel token, no state stream of its own.

What a child inherits, and what it does not:

- the model and the agent's config, unless its type names another model; the type's
  tools (never `agent`: no recursion) and the type's preamble before the parent's prompt;
- the jail, the policy engine, hooks, interlock, outbox, store, approver and phase; a
  safety mode that is the stricter of the parent's live mode and the type's ceiling;
- the budget object itself (law 7: the run tree spends from one purse);
- a cancel token that is a child of the parent's (cancelling the parent cancels it; its
  timeout cancels only it);
- not the steering queue, the mailbox (it would take the parent's mail), the detach switch
  or the question broker (a subagent cannot ask the person; `ask_user` says no one is
  available);
- the parent's taint, and the parent gets the child's back with its answer (law 6).

A person's detach (the step's background token, `DetachSwitch`) sends a running child to
the background, as it does a command: the `agent` call returns at once, the child keeps
running, owned by the run, and its report comes as a note at a later step
(`_detached_subagents`). A detached child that would need a person fails instead of
suspending: no one holds its call any more.

At most `SubagentConfig.max_concurrent` children of one run work at once: a further one
*waits* for a slot (it is not refused), and its timeout starts when it gets one.

A child that needs a person (an approval held in a durable run, a review pause) suspends
its parent: its `RunState` goes into `RunState.children` under the agent call's id, its
segment closes with `SUBAGENT_FINISHED{outcome: suspended, interruptIds}`, its interrupts
become the parent's (tagged with its `subagentRunId`), and the agent call is held, not
answered. On resume, in any process, the agent call runs again, finds the nested state and
continues the child under the same `subagentRunId`; the decisions for the child's calls
reach its gate through the approver it inherits. A child that crashed with its parent is
not resumed: the agent call is then uncertain, like any call that started and never
finished (law 5).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ..cancel import CancellationToken
from ..conversation import ToolResult, Usage, UserMessage
from ..errors import Cancelled, TillerError
from ..events import AgUiContext, StepHandle, SubagentStartedEvent
from ..model import Model, ModelError, resolve_model
from ..state import RunState, StopCause
from ..tools import LiveSafetyMode, Tool, ToolError, least_permissive
from ..tools.builtin import AGENT_TOOL, SubagentReport
from ._agui_messages import agui_messages
from ._controls import RunControls
from ._detach import DetachSwitch
from ._detached_subagents import DetachedSubagents, until_detached
from ._steering import SteeringQueue
from ._subagent_types import SubagentType

if TYPE_CHECKING:
    from ._context import RunContext
    from ._run import Loop

__all__ = ["Subagents", "nested_messages"]

_T = TypeVar("_T")


class Subagents:
    """One run's children: starts them, continues suspended ones, counts what they spend.

    Built by the parent's `Loop` when its agent has the `agent` tool; the tool reaches it
    as `ExecContext.subagents`.
    """

    def __init__(self, parent: Loop) -> None:
        self._parent = parent
        #: Children a person sent to the background, and the agent calls they came from.
        self.detached = DetachedSubagents(parent.services.notifier)
        self._detached_calls: set[str] = set()
        self._config = parent.run_ctx.subagents
        self._slots = asyncio.Semaphore(self._config.max_concurrent)
        #: Agent calls whose child suspended in this run: the parent holds them.
        self._held: set[str] = set()
        #: Models built from a type's model string, once per run, closed with it.
        self._models: dict[str, Model] = {}

    def holds(self, call_id: str) -> bool:
        """Whether the agent call `call_id` waits for its suspended child."""
        return call_id in self._held

    async def aclose(self) -> None:
        """Cancel the children still working in the background; close the models this run
        built for its children."""
        await self.detached.aclose()
        models, self._models = self._models, {}
        for model in models.values():
            await model.aclose()

    # ── one child ────────────────────────────────────────────────────────────────

    async def run(
        self,
        *,
        call_id: str,
        subagent_type: str,
        prompt: str,
        description: str,
        background: CancellationToken | None = None,
    ) -> SubagentReport:
        """Run the child of agent call `call_id` (or continue it, if it is suspended in
        the parent's state) and report how it ended; or, if `background` (the step's
        background token) fires first, leave it running detached and report that."""
        parent = self._parent
        kind = self._config.types.get(subagent_type)
        try:
            if kind is None:
                raise ToolError(
                    f"there is no subagent type {subagent_type!r}; the types are:\n"
                    f"{self._config.describe()}"
                )
            tools = self._tools_for(kind)
            model, model_spec = self._model_for(kind)
        except ToolError:
            # A suspended child whose type is gone (the workspace's types changed): the
            # agent call is answered with the error, and the child is given up.
            parent.state.children.pop(call_id, None)
            raise
        state = parent.state.children.get(call_id)
        if state is None:
            state = RunState(
                run_id=parent.agui.new_subagent_run_id(),
                thread_id=parent.state.thread_id,
                agent_name=kind.name,
                messages=[UserMessage(text=prompt)],
                taint=parent.state.taint,
                phase=parent.run_ctx.phase,
                model_spec=model_spec,
            )
        else:
            # Suspended in an earlier run of the parent: it goes on where it stopped.
            state.stop_cause = None
            state.error = None
            state.interrupts = []
            state.add_taint(parent.state.taint_flags)
        work = self._in_slot(call_id, kind, tools, model, state=state, description=description)
        if background is None:
            return await work
        # Its own task from the start, so attribution (which follows the task) and the
        # child's scopes stay the same when the call stops waiting for it.
        task = asyncio.get_running_loop().create_task(work, name=f"tiller-{state.run_id}")
        if not await until_detached(task, background):
            return task.result()
        self._detached_calls.add(call_id)
        self.detached.adopt(state.run_id, description or kind.name, task)
        return SubagentReport(
            subagent_run_id=state.run_id,
            subagent_type=kind.name,
            text="",
            stop_cause="running",
            detached=True,
        )

    async def _in_slot(
        self,
        call_id: str,
        kind: SubagentType,
        tools: list[Tool],
        model: Model,
        *,
        state: RunState,
        description: str,
    ) -> SubagentReport:
        async with self._slots:
            return await self._run(
                call_id, kind, tools, model, state=state, description=description
            )

    async def _run(
        self,
        call_id: str,
        kind: SubagentType,
        tools: list[Tool],
        model: Model,
        *,
        state: RunState,
        description: str,
    ) -> SubagentReport:
        from ._agent import Agent
        from ._run import Loop, ResponseTooLarge

        parent = self._parent
        agui = parent.agui
        token = agui.cancel_token.child()
        timeout = self._config.timeout_for(kind)
        timer = asyncio.get_running_loop().call_later(
            timeout, token.cancel, f"the subagent ran out of time ({timeout:g} s)"
        )
        system = kind.preamble
        if parent.agent.system_prompt:
            system = f"{system}\n\n{parent.agent.system_prompt}"
        child = Agent(
            model,
            tools,
            system_prompt=system,
            name=kind.name,
            config=parent.agent.config,
            retry=parent.agent.retry,
        )
        view = _SubagentView(agui, state.run_id, token)
        view.ids.restore(state.id_counters)
        options = dataclasses.replace(
            parent.options, checkpoint_bucket=None, publish_run_state=False
        )
        loop = Loop(child, self._context_for(kind, token), options, view, state, parent=parent)
        spent_before, cost_before = state.usage, state.cost_usd
        error: tuple[str, str] | None = None
        started = SubagentStartedEvent(
            state.run_id, kind.name, description or None, parent_tool_call_id=call_id
        )
        try:
            with agui.subagent_with(started) as handle:
                try:
                    with token.scope():
                        await loop.run()
                except Cancelled:
                    outer = parent.run_ctx.cancel
                    if agui.is_cancelled or (outer is not None and outer.is_cancelled):
                        raise  # the parent was cancelled, and its children with it
                    state.stop_cause = StopCause.CANCELLED
                    timed_out = token.is_cancelled  # its own token fired: its timeout
                    reason = token.reason if timed_out else None
                    error = (
                        reason or "the subagent was cancelled",
                        "TIMEOUT" if timed_out else "CANCELLED",
                    )
                except (ModelError, ResponseTooLarge) as exc:
                    error = (str(exc), "MODEL_ERROR")
                except TillerError as exc:
                    error = (f"{type(exc).__name__}: {exc}", "AGENT_ERROR")
                finally:
                    timer.cancel()
                    state.id_counters = view.ids.counters()
                    self._account(state, spent_before, cost_before)
                if error is None and state.stop_cause is StopCause.ERROR:
                    error = (state.error or "the subagent failed", "RUN_FAILED")
                if state.stop_cause is StopCause.SUSPENDED and call_id in self._detached_calls:
                    # Its agent call was answered when it was detached: nothing would
                    # hold it for a person, so it stops here.
                    state.stop_cause = StopCause.ERROR
                    error = (
                        "it needs a person's approval for a call, which a subagent in the "
                        "background cannot wait for; start it again in the foreground",
                        "NEEDS_PERSON",
                    )
                if error is not None:
                    state.stop_cause = state.stop_cause or StopCause.ERROR
                    state.error = error[0]
                    handle.fail_with_code(*error)
                elif state.stop_cause is StopCause.SUSPENDED:
                    self._nest(call_id, state, loop)
                    handle.suspend([str(i["id"]) for i in state.interrupts])
                else:
                    handle.finish_with({"text": _answer(state), "stopCause": _cause(state)})
        finally:
            if state.stop_cause is not StopCause.SUSPENDED:
                parent.state.children.pop(call_id, None)  # done with, however it ended
        return SubagentReport(
            subagent_run_id=state.run_id,
            subagent_type=kind.name,
            text=_answer(state),
            stop_cause=_cause(state),
            turns=state.step,
            usage=state.usage,
            cost_usd=state.cost_usd,
            error=state.error if error is not None else None,
            suspended=state.stop_cause is StopCause.SUSPENDED,
            taint=state.taint,
        )

    def _nest(self, call_id: str, state: RunState, loop: Loop) -> None:
        """The child waits for a person: its state goes into the parent's, its interrupts
        become the parent's (tagged with it), and the parent holds the agent call."""
        for interrupt in state.interrupts:
            interrupt.setdefault("subagentRunId", state.run_id)
        self._parent.state.children[call_id] = state
        # Why each of the child's calls waits, for the parent's held-approval records.
        self._parent.suspension.adopt(loop.suspension.held_reasons())
        self._held.add(call_id)

    def _account(self, state: RunState, spent_before: Usage, cost_before: float) -> None:
        """What the child spent in this segment is the parent's too (the budget was charged
        as it went); what it read, the parent now has in its conversation."""
        parent = self._parent.state
        parent.usage = parent.usage + _minus(state.usage, spent_before)
        parent.cost_usd += state.cost_usd - cost_before
        if not state.usage_complete:
            parent.usage_complete = False
        parent.add_taint(state.taint_flags)

    # ── what a child gets ────────────────────────────────────────────────────────

    def _tools_for(self, kind: SubagentType) -> list[Tool]:
        registry = self._parent.agent.registry
        if kind.tools is None:
            tools = [t for t in registry if t.name != AGENT_TOOL]
        else:
            missing = [name for name in kind.tools if name not in registry]
            if missing:
                raise ToolError(
                    f"the subagent type {kind.name!r} names tools this agent does not have "
                    f"({', '.join(missing)}); use another type"
                )
            tools = [
                tool
                for name in kind.tools
                if name != AGENT_TOOL and (tool := registry.get(name)) is not None
            ]
        if kind.read_only:
            tools = [t for t in tools if t.read_only is True]
        return tools

    def _model_for(self, kind: SubagentType) -> tuple[Model, str | None]:
        agent = self._parent.agent
        if kind.model is None:
            # The parent's model, under the string the run names it by (a fleet job's
            # model, say), so a model wrapper keys the child's calls as the parent's.
            return agent.model, self._parent.state.model_spec or agent.model_spec
        if not isinstance(kind.model, str):
            return kind.model, None
        model = self._models.get(kind.model)
        if model is None:
            try:
                model = self._models[kind.model] = resolve_model(kind.model)
            except TillerError as exc:
                raise ToolError(
                    f"the subagent type {kind.name!r} names a model that cannot be used: {exc}"
                ) from None
        return model, kind.model

    def _context_for(self, kind: SubagentType, token: CancellationToken) -> RunContext:
        """The parent's policy, narrowed for a child (see the module docstring)."""
        run_ctx = self._parent.run_ctx
        # Never above the parent's own ceiling: a subagent type narrows, it cannot widen.
        ceiling = least_permissive(kind.safety_ceiling, run_ctx.jail.safety.ceiling)
        mode = least_permissive(run_ctx.jail.safety.mode, ceiling)
        # Passed on deliberately (law 13): the parent's budget (one for the run tree,
        # law 7) and a child of its token; the child's own steering, detach and switch.
        controls = RunControls(
            steering=SteeringQueue(),
            safety=LiveSafetyMode(mode, ceiling=ceiling),
            detach=DetachSwitch(),
            cancel=token,
            budget=run_ctx.budget,
        )
        return run_ctx.with_controls(controls).with_questions(None).with_mailbox(None)


class _SubagentView(AgUiContext[Any]):
    """The run's AG-UI context as one of its subagents sees it.

    The same sink (so its events go into the run's stream, attributed by the subagent's
    scope) and the same book of open handles (so a cancelled run closes what the child
    left open); its own ids (`{subagent_run_id}-msg-{n}`, so a continued child goes on
    numbering from its own state) and its own cancel token (a timeout stops the child
    alone). The typed state is the run's: a child's tool that changes it changes the one
    document the client sees; the runtime's facts (usage, the task list) stay the
    parent's. Step names carry the subagent's id: the stream has one namespace of step
    names, and two children's `step 1` must not collide.
    """

    def __init__(self, parent: AgUiContext[Any], run_id: str, cancel: CancellationToken) -> None:
        input = parent.input.model_copy(update={"run_id": run_id, "messages": [], "resume": None})
        super().__init__(input, sink=parent.sink, state=None)
        self._parent = parent
        self._token = cancel
        self._open_handles = parent._open_handles

    # cancellation: the child's own token
    @property
    def cancel_token(self) -> CancellationToken:
        return self._token

    @property
    def is_cancelled(self) -> bool:
        return self._token.is_cancelled

    def check_cancelled(self) -> None:
        self._token.check()

    async def cancelled(self) -> None:
        await self._token.cancelled()

    async def until_cancelled(self, awaitable: Awaitable[_T]) -> _T | None:
        return await self._token.until_cancelled(awaitable)

    # state: the run's one document
    @property
    def state(self) -> Any:
        return self._parent.state

    def state_mut(self) -> Any:
        return self._parent.state_mut()

    def set_state(self, state: Any) -> None:
        self._parent.set_state(state)

    def update_state(self, fn: Callable[[Any], Any]) -> None:
        self._parent.update_state(fn)

    def patch_state(self, ops: list[dict[str, Any]]) -> None:
        self._parent.patch_state(ops)

    def publish_state(self) -> None:
        self._parent.publish_state()

    def set_runtime_state(self, key: str, value: Any) -> None:
        """The runtime's facts in the state document are the parent run's."""

    def update_runtime_state(self, facts: Mapping[str, Any]) -> None:
        """The runtime's facts in the state document are the parent run's."""

    def reset_state_stream(self) -> None:
        """The state stream is the parent's."""

    def step(self, name: str) -> StepHandle:
        return StepHandle(self, f"{name} ({self.run_id})")


def nested_messages(state: RunState) -> list[dict[str, Any]]:
    """The conversations of the subagents suspended inside `state`, as AG-UI messages
    tagged with their `subagentRunId`: what a snapshot adds so that a client knows the
    calls those subagents wait on (and a continued child's results refer to known calls).
    Results of a child's calls that were answered before it paused follow its messages."""
    out: list[dict[str, Any]] = []
    for child in state.children.values():
        answered = [
            (call, record)
            for call in child.unanswered_calls()
            if (record := child.calls.get(call.id)) is not None and record.result is not None
        ]
        pending = [
            ToolResult(
                call_id=call.id,
                name=call.name,
                content=record.result or "",
                is_error=record.is_error,
            )
            for call, record in answered
        ]
        for message in agui_messages(
            child.messages,
            id_prefix=child.run_id,
            pending_results=pending,
            result_ids=child.result_ids,
        ):
            message["subagentRunId"] = child.run_id
            out.append(message)
        out.extend(nested_messages(child))
    return out


def _answer(state: RunState) -> str:
    last = state.last_assistant()
    return last.text if last is not None else ""


def _cause(state: RunState) -> str:
    return state.stop_cause.value if state.stop_cause is not None else StopCause.ERROR.value


def _minus(total: Usage, before: Usage) -> Usage:
    return Usage(
        input_tokens=total.input_tokens - before.input_tokens,
        output_tokens=total.output_tokens - before.output_tokens,
        cached_input_tokens=total.cached_input_tokens - before.cached_input_tokens,
        reasoning_tokens=total.reasoning_tokens - before.reasoning_tokens,
        requests=total.requests - before.requests,
    )
