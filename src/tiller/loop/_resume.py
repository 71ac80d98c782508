"""Resume a suspended run with a person's decisions — in this process, or in another one.

`resume(agent, checkpoint, decisions, run_ctx=...)` takes the suspended `RunState` (from a
`RunResult.checkpoint`, or by run id from the store), claims it with a compare-and-set so
two racing processes cannot both continue it (`AlreadyResumed`), refuses while a call is
*uncertain* — recorded as started but never completed, as after a crash —
(`ResumeReplayBlocked`, until a person marks it), and continues the loop: completed calls
are not run again, approved calls run through the gate with the person's decision in place
of the approver (edited arguments are validated against the tool's schema like any
others), rejected ones answer "Denied by the user: ...". Each decision is keyed by the
call's runtime id and bound to its tool and canonical arguments (law 10): it answers that
call once, and a call it does not fit is held again. The resumed stream starts with a
`MESSAGES_SNAPSHOT`, so the results refer to calls the client knows.

A process that never saw the run's code resumes it from the checkpoint alone:
`resume(None, run_id, decisions, store=bus, approver=...)` loads the agent the checkpoint
names (`RunState.agent_ref`) and rebuilds the context from its stored policy
(`RunState.policy`; see `_agent_ref`), the caller giving only what is not data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import orjson

from ..cancel import CancellationToken
from ..conversation import AssistantMessage, ToolCall
from ..errors import TillerError, UsageError
from ..events import Event, TransformerFactory
from ..policy import Approver, CallDecision, DecidedApprover, Decision
from ..state import RunState
from ..store import Bus
from ..store._checkpoints import (
    DEFAULT_BUCKET,
    AlreadyResumed,
    Checkpoint,
    CheckpointStore,
    RunStillRunning,
)
from ._agent import Agent
from ._agent_ref import load_agent, options_from, run_context_from
from ._context import RunContext
from ._options import RunOptions
from ._result import RunResult

__all__ = ["ResumeDecision", "ResumeReplayBlocked", "resume"]


class ResumeReplayBlocked(TillerError):
    """Calls were recorded as started but never completed (the process died while they
    ran): whether their side effect happened is unknown. A person must mark each one done
    (with its result), failed, or to be run again (`CheckpointStore.mark_call` /
    `forget_call`, or `tiller runs reconcile`) before the run can resume."""

    def __init__(self, run_id: str, calls: list[ToolCall]) -> None:
        names = ", ".join(f"{c.name} ({c.id})" for c in calls)
        super().__init__(f"run {run_id}: uncertain calls must be reconciled first: {names}")
        self.run_id = run_id
        self.calls = calls


@dataclass(slots=True, frozen=True)
class ResumeDecision:
    """A person's answer for one pending call (keyed by its runtime id in `resume`).

    `tool` and `drafted_arguments` say what the person was shown (a held-approval record,
    an interrupt): the decision is bound to that call, and a pending call under the id
    with another tool or other arguments is not answered by it but held again (law 10).
    Left None, the decision is bound to the pending call as the checkpoint holds it."""

    approve: bool
    reason: str = ""
    arguments: dict[str, Any] | None = None
    #: "Approve always": calls like this one are allowed for the rest of the run.
    always: bool = False
    #: The tool the person decided on.
    tool: str | None = None
    #: The arguments the person was shown (a JSON object, or its text).
    drafted_arguments: dict[str, Any] | str | None = None

    @property
    def kind(self) -> Literal["allow", "deny"]:
        """What the person decided, in the verdicts' vocabulary (`tiller.policy`)."""
        return "allow" if self.approve else "deny"

    @property
    def by(self) -> str:
        """Who decided: a person."""
        return "user"

    def bound_to(self, tool: str, arguments: dict[str, Any] | str) -> ResumeDecision:
        """This decision, for the call of `tool` with `arguments` as the person saw it."""
        return replace(self, tool=tool, drafted_arguments=arguments)

    @classmethod
    def approved(
        cls, arguments: dict[str, Any] | None = None, *, always: bool = False
    ) -> ResumeDecision:
        """Run it, with `arguments` in place of the model's if given."""
        return cls(True, arguments=arguments, always=always)

    @classmethod
    def rejected(cls, reason: str) -> ResumeDecision:
        return cls(False, reason=reason)


async def resume(
    agent: Agent | str | None,
    checkpoint: RunState | str,
    decisions: Mapping[str, ResumeDecision] | None = None,
    *,
    run_ctx: RunContext | None = None,
    store: Bus | None = None,
    approver: Approver | None = None,
    cancel: CancellationToken | None = None,
    workspace: str | Path | None = None,
    options: RunOptions | None = None,
    bucket: str = DEFAULT_BUCKET,
    on_event: Callable[[Event], None] | None = None,
    force: bool = False,
    configure: Callable[[RunContext], RunContext] | None = None,
    run_id: str | None = None,
    reclaim_orphan: bool = False,
    transformers: TransformerFactory | None = None,
) -> RunResult:
    """Continue a suspended run. `checkpoint` is the suspended `RunState`, or a run id to
    load from the store (`run_ctx.store` or `store`, bucket `bucket`). `decisions` answers
    every pending call by id. `transformers` builds the continued run's stream
    transformers, as for `Agent.run_in`.

    With `decisions=None` this *recovers* a run whose process died: a `running` checkpoint
    is claimed too, and its pending calls go through the run's own gate (calls recorded as
    completed are not run again; uncertain ones block). While the run's lease is live (its
    process renews it as it runs) recovery raises `RunStillRunning`, since that process
    may not be dead; `force=True` breaks the lease, for when you know it is.

    `agent` may be an `Agent`, a `"module:attr"` reference to one, or None to load the one
    the checkpoint names (`RunState.agent_ref`). With `run_ctx=None` the context is rebuilt
    from the checkpoint's stored policy (`run_context_from`), with `store`, `approver`,
    `cancel` and optionally another `workspace` supplied here, since they are not data; with
    `options=None` the stored options are used (`options_from`).

    `run_id` continues the run under a new id (an AG-UI resume arrives with one); the
    call records of the suspended batch are carried over to it, so nothing runs twice.
    `reclaim_orphan` also claims a checkpoint `continued` under a new id that never wrote
    a checkpoint (that resume's process died first); the caller must know that resume is
    gone (the server does: it holds the thread's lease).

    Everything that can fail on the caller's side (the agent, the context, the decisions,
    uncertain calls) is checked *before* the checkpoint is claimed, so a mistake can be
    fixed and the resume tried again."""
    if run_ctx is not None:
        if store is not None and store is not run_ctx.store:
            raise UsageError("pass the store in the RunContext or as store=, not both")
        if approver is not None or cancel is not None or workspace is not None:
            raise UsageError(
                "approver, cancel and workspace rebuild a context from the checkpoint; "
                "with run_ctx given, set them on it (run_ctx.with_approver(...))"
            )
        bus = run_ctx.store
    else:
        bus = store
    checkpoints = CheckpointStore(bus, bucket) if bus is not None else None
    loaded: Checkpoint | None = None
    if isinstance(checkpoint, str):
        if checkpoints is None:
            raise UsageError(
                "resuming by run id needs a store: store=bus, or RunContext.with_store(bus)"
            )
        loaded = await checkpoints.load(checkpoint)
        state = loaded.state.model_copy(deep=True)
    else:
        state = checkpoint.model_copy(deep=True)
    agent, ref = _resolve_agent(agent, state)
    if ref is not None and state.agent_ref is None:
        state.agent_ref = ref  # later checkpoints can be resumed without naming it again
    if run_ctx is None:
        run_ctx = run_context_from(
            state, store=bus, approver=approver, cancel=cancel, workspace=workspace
        )
        if configure is None and run_ctx.pinned_policy is not None:
            # Its rules, hooks and interlock are in the record but not applied: resuming
            # without them would let the run act under less policy than it started with.
            raise UsageError(
                f"run {state.run_id!r} pinned a policy when it started (tiller.toml); resume "
                "it with configure=tiller.pinned_policy.restore_pinned_policy"
            )
        if configure is not None:
            # What is not data in the checkpoint (the workspace's rules, hooks, interlock
            # and outbox routes), put back by the caller; the run's own mode still wins.
            mode = run_ctx.tools.safety.mode
            run_ctx = configure(run_ctx).with_safety_mode(mode)
    if options is None:
        options = options_from(state)
    if loaded is not None:
        options = options.with_checkpoint_bucket(options.checkpoint_bucket or bucket)
    orphan = reclaim_orphan and loaded is not None and loaded.status == "continued"
    if loaded is not None and decisions is not None and loaded.status != "suspended" and not orphan:
        # Someone else resumed it already (it may even have finished): say so, before
        # judging decisions against a state that has moved on.
        raise AlreadyResumed(
            f"run {state.run_id!r} is {loaded.status}, not suspended: another process resumed it"
        )
    # Calls left for the client (AG-UI frontend tools) are the client's to answer; calls
    # answered before the step paused (their results are in the state) need nothing; an
    # agent call whose subagent is suspended in the run waits on that subagent's calls.
    pending = state.waiting_calls()
    if checkpoints is not None:
        # Calls of the batch that already ran (the allowed ones of a step whose other calls
        # were held for a person) need no decision: their results are recorded.
        done = {
            call_id
            for call_id, log in (await checkpoints.calls(state.run_id)).items()
            if log.status == "completed"
        }
        pending = [call for call in pending if call.id not in done]
    if decisions is not None:
        if not pending:
            raise UsageError(f"run {state.run_id} has no calls waiting for a decision")
        missing = [c.id for c in pending if c.id not in decisions]
        # A decision for a call that already ran is harmless (it is not used); one for an
        # agent call whose subagent waits is not: the person decides the subagent's calls.
        decidable = {c.id for c in state.nested_calls()} - set(state.children)
        unknown = sorted(set(decisions) - decidable)
        if missing or unknown:
            raise UsageError(
                f"decide every pending call, and only those: missing {missing}, unknown {unknown}"
            )
    if loaded is not None and checkpoints is not None and decisions is None:
        # A live process renews the run's lease; its started calls are running, not
        # uncertain. Only a lapsed lease (or force) means the process is gone.
        held = await checkpoints.holder(state.run_id)
        if held is not None and not force:
            raise RunStillRunning(state.run_id, *held)
        if held is not None:
            await checkpoints.break_hold(state.run_id)
    if checkpoints is not None:
        await _check_uncertain(
            checkpoints, state, was_running=loaded is not None and loaded.status != "suspended"
        )
    new_id = run_id if run_id is not None else state.run_id
    renamed = new_id != state.run_id
    if renamed and checkpoints is not None:
        # Before the claim: the records of the open calls under the id the run goes on
        # with, so it knows which already ran (a loser's copies are harmless).
        await checkpoints.carry_calls(
            state.run_id, new_id, [call.id for call in state.unanswered_calls()]
        )
    if loaded is not None and checkpoints is not None:
        # AlreadyResumed for the process that loses the race. Under a new id the old
        # checkpoint is closed for good (`continued`): recovering it would run its calls
        # a second time beside the new run.
        await checkpoints.claim(
            loaded,
            recovering=decisions is None,
            continued_as=new_id if renamed else None,
            orphan=orphan,
        )
    state.interrupts = []
    if decisions is None:
        return await agent.run_in(
            run_ctx, state, options, on_event=on_event, run_id=new_id, transformers=transformers
        )
    bound = _bind(state, decisions)
    _apply_edited_arguments(state, decisions)
    decided = DecidedApprover(bound, run_ctx.approver)
    return await agent.run_in(
        run_ctx.with_approver(decided),
        state,
        options,
        on_event=on_event,
        run_id=new_id,
        transformers=transformers,
    )


def _resolve_agent(agent: Agent | str | None, state: RunState) -> tuple[Agent, str | None]:
    """The agent to continue with, and the reference it was loaded by (if it was)."""
    if agent is None:
        if state.agent_ref is None:
            raise UsageError(
                f"run {state.run_id!r} does not record its agent (RunState.agent_ref); "
                "pass the agent, or its 'module:attr' reference"
            )
        return load_agent(state.agent_ref, model=state.model_spec), state.agent_ref
    if isinstance(agent, str):
        return load_agent(agent, model=state.model_spec), agent
    return agent, None


async def _check_uncertain(
    store: CheckpointStore, state: RunState, *, was_running: bool = False
) -> None:
    logs = await store.calls(state.run_id)
    # An agent call whose subagent is suspended in a *suspended* checkpoint started and is
    # not done, but nothing about it is unknown: the child's state says where it stands.
    # In a checkpoint of a run that was going on (a crash), the child may have been
    # continued and run calls its state does not show: uncertain like any other call.
    uncertain = [
        call
        for call in state.unanswered_calls()
        if (log := logs.get(call.id)) is not None
        and log.status == "started"
        and (was_running or call.id not in state.children)
    ]
    if uncertain:
        raise ResumeReplayBlocked(state.run_id, uncertain)


def _bind(state: RunState, decisions: Mapping[str, ResumeDecision]) -> dict[str, CallDecision]:
    """Each decision bound to the call it answers (law 10): to the pending call when the
    person was shown it (or the decision does not say what was shown), with the edited
    arguments if any (they are what the person decided); else to what was shown, which
    the gate will not apply to the pending call: it holds that call again."""
    calls = {call.id: call for call in state.nested_calls()}
    bound: dict[str, CallDecision] = {}
    for call_id, decision in decisions.items():
        verdict = (
            Decision.allow(always=decision.always)
            if decision.approve
            else Decision.deny(decision.reason)
        )
        call = calls.get(call_id)
        if call is None:
            continue  # `resume` let it through: it answers a call that already ran
        if _shown_for(decision, call):
            arguments = decision.arguments if decision.arguments is not None else call.arguments
            bound[call_id] = CallDecision.bind(verdict, call.name, arguments)
        else:
            shown = decision.drafted_arguments
            bound[call_id] = CallDecision.bind(
                verdict, decision.tool or call.name, shown if shown is not None else "{}"
            )
    return bound


def _apply_edited_arguments(state: RunState, decisions: Mapping[str, ResumeDecision]) -> None:
    """Edited arguments replace the model's, only in the call the decision was made for."""
    for child in state.children.values():  # a suspended subagent's calls are decided too
        _apply_edited_arguments(child, decisions)
    last = state.messages[-1]
    assert isinstance(last, AssistantMessage)
    calls = tuple(
        call.model_copy(update={"arguments": orjson.dumps(decision.arguments).decode()})
        if (decision := decisions.get(call.id)) is not None
        and decision.arguments is not None
        and _shown_for(decision, call)
        else call
        for call in last.tool_calls
    )
    state.messages[-1] = last.model_copy(update={"tool_calls": calls})


def _shown_for(decision: ResumeDecision, call: ToolCall) -> bool:
    """Whether the person was shown `call` (or was not said to be shown another)."""
    if decision.tool is not None and decision.tool != call.name:
        return False
    if decision.drafted_arguments is None:
        return True
    return CallDecision.bind(Decision.allow(), call.name, decision.drafted_arguments).fits(call)
