"""Continue a run from its checkpoint — in this process, or in another one.

Two entry points, one per situation:

- `agent.resume(checkpoint, decisions, ctx=...)` continues a *suspended* run with a
  person's decisions. `checkpoint` is the suspended `RunState`, the suspended `RunResult`,
  or a run id to load from the store. Completed calls are not run again, approved calls
  run through the gate with the person's decision in place of the approver (edited
  arguments are validated against the tool's schema like any others), rejected ones
  answer "Denied by the user: ...". Each decision is keyed by the call's runtime id and
  bound to its tool and canonical arguments (law 10): it answers that call once, and a
  call it does not fit is held again.
- `recover(run_id, store, force=...)` continues a run whose process *died*, found in the
  store: its pending calls go through the run's own gate. An uncertain call (below) of a
  tool that declares itself idempotent (`Tool.idempotent`) is run again, through the
  gate, as if a person had marked it "run again".

Both claim the stored checkpoint with a compare-and-set, so two racing processes cannot
both continue it (`AlreadyResumed`), and refuse while a call is *uncertain* — recorded as
started but never completed, as after a crash — (`ResumeReplayBlocked`, until a person
marks it; `recover` settles those of idempotent tools itself). The continued stream
starts with a `MESSAGES_SNAPSHOT`, so the results refer to calls the client knows.

A process that never saw the run's code continues it from the checkpoint alone: `recover`
(or `tiller.ops`) loads the agent the checkpoint names (`RunState.agent_ref`), and
`FromCheckpoint` rebuilds the context from its stored policy (`RunState.policy`; see
`_agent_ref`), the caller giving only what is not data.

Home: `recover` lives here, in `tiller.loop`, beside `Agent.resume`, because both are the
run's own continuation; `tiller.ops` (what the CLI and the server do) calls it. The old
`resume(agent, checkpoint, decisions=None, ...)` is deprecated (one release).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, TypedDict, Unpack

import orjson

from .. import _public
from ..cancel import CancellationToken
from ..conversation import AssistantMessage, ToolCall
from ..errors import TillerError, UsageError
from ..events import Event, TransformerFactory
from ..policy import Approver, CallDecision, DecidedApprover, Decision
from ..state import RunState
from ..store import (
    DEFAULT_BUCKET,
    AlreadyResumed,
    Bus,
    CallLog,
    Checkpoint,
    CheckpointStore,
    RunStillRunning,
)
from ._agent import Agent
from ._agent_ref import (
    jail_root_of,
    load_agent,
    options_from,
    refuse_code_inside,
    run_context_from,
)
from ._context import RunContext
from ._options import RunOptions
from ._result import RunResult

__all__ = [
    "ContinueAs",
    "FromCheckpoint",
    "ResumeDecision",
    "ResumeReplayBlocked",
    "recover",
    "resume",
]


class ResumeReplayBlocked(TillerError):
    """Calls were recorded as started but never completed (the process died while they
    ran): whether their side effect happened is unknown. A person must mark each one done
    (with its result), failed, or to be run again (`CheckpointStore.mark_call` /
    `forget_call`, or `tiller runs reconcile`) before the run can resume.

    `calls` are the ones a person must mark. `reruns` are uncertain calls of idempotent
    tools that `recover` would run again by itself: they wait with the run, and are run
    again once the others are settled (or marked like them, if the person prefers)."""

    def __init__(self, run_id: str, calls: list[ToolCall], reruns: Sequence[ToolCall] = ()) -> None:
        names = ", ".join(f"{c.name} ({c.id})" for c in calls)
        message = f"run {run_id}: uncertain calls must be reconciled first: {names}"
        if reruns:
            again = ", ".join(f"{c.name} ({c.id})" for c in reruns)
            message += f"; then these, of idempotent tools, are run again by recovery: {again}"
        super().__init__(message)
        self.run_id = run_id
        self.calls = calls
        self.reruns = list(reruns)


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


@dataclass(frozen=True, slots=True)
class FromCheckpoint:
    """Rebuild the continued run's context from its checkpoint's stored policy
    (`run_context_from`), with what is not data supplied here: the store, the approver,
    the cancel token, optionally another workspace, and `configure` to put back what the
    workspace's policy adds (a run that pinned a policy needs
    `configure=tiller.pinned_policy.restore_pinned_policy`)."""

    store: Bus | None = None
    approver: Approver | None = None
    cancel: CancellationToken | None = None
    workspace: str | Path | None = None
    configure: Callable[[RunContext], RunContext] | None = None


@dataclass(frozen=True, slots=True)
class ContinueAs:
    """Continue the run under a new id (an AG-UI resume arrives with one): the call
    records of the suspended batch are carried over to it, so nothing runs twice.
    `reclaim_orphan` also claims a checkpoint `continued` under a new id that never wrote a
    checkpoint (that resume's process died first); the caller must know that resume is
    gone (the server does: it holds the thread's lease)."""

    #: The new id; None goes on under the run's own (to reclaim an orphan only).
    run_id: str | None = None
    reclaim_orphan: bool = False


@dataclass(frozen=True, slots=True)
class _Resumption:
    """Everything one continuation of a run was asked for, checked before it is claimed."""

    ctx: RunContext | FromCheckpoint
    options: RunOptions | None = None
    bucket: str = DEFAULT_BUCKET
    on_event: Callable[[Event], None] | None = None
    transformers: TransformerFactory | None = None
    continue_as: ContinueAs | None = None
    force: bool = False

    @property
    def store(self) -> Bus | None:
        return self.ctx.store


async def resume_checkpoint(
    agent: Agent,
    checkpoint: RunState | RunResult | str,
    decisions: Mapping[str, ResumeDecision],
    how: _Resumption,
) -> RunResult:
    """`Agent.resume`: continue a suspended run with a person's decisions."""
    if isinstance(checkpoint, RunResult):
        if checkpoint.checkpoint is None:
            raise UsageError(
                "this result has no checkpoint to resume: only a suspended run can be resumed"
            )
        checkpoint = checkpoint.checkpoint
    return await _continue(agent, checkpoint, decisions, how)


async def recover(
    run_id: str,
    store: Bus,
    *,
    agent: Agent | str | None = None,
    force: bool = False,
    ctx: RunContext | FromCheckpoint | None = None,
    options: RunOptions | None = None,
    on_event: Callable[[Event], None] | None = None,
    bucket: str = DEFAULT_BUCKET,
) -> RunResult:
    """Continue a run whose process died, found in `store` by `run_id` (bucket `bucket`).

    A `running` checkpoint is claimed (a `suspended` one too: its calls then go through
    the run's own gate); calls recorded as completed are not run again, and uncertain ones
    (started, never completed) block with `ResumeReplayBlocked` until reconciled — except
    those of an idempotent tool (`Tool.idempotent`: running the call again with the same
    call id has the effect of running it once). Such a call is run again, through the
    run's gate as on its first run (as after a person's "run again"), and the run says so
    (a `tiller.call_rerun` event, `ToolTraceEntry.rerun`). It must have been started by a
    tool that declared itself idempotent (its call record says so; an older tiller's does
    not), and the tool of that name in the recovering agent's registry must declare it
    too: a tool that is gone, or no longer idempotent, blocks. If any uncertain call
    blocks, none runs: the run waits whole, and its idempotent calls are run again by the
    recovery after the others are reconciled. While the
    run's lease is live (its process renews it as it runs) recovery raises
    `RunStillRunning`, since that process may not be dead; `force=True` breaks the lease,
    for when you know it is.

    `agent` is an `Agent`, a `"module:attr"` reference to one, or None to load the one the
    checkpoint names (`RunState.agent_ref`). `ctx` is the run's context (its store must be
    `store`), or how to rebuild it from the checkpoint (`FromCheckpoint`; its store is
    `store`); by default it is rebuilt with no approver. `options=None` uses the stored
    options."""
    if ctx is None:
        ctx = FromCheckpoint(store=store)
    elif isinstance(ctx, FromCheckpoint):
        if ctx.store is not None and ctx.store is not store:
            raise UsageError("recover(run_id, store, ...) takes the store once: not in ctx too")
        ctx = replace(ctx, store=store)
    elif ctx.store is not store:
        raise UsageError("recover(run_id, store, ctx=...): the context's store must be `store`")
    how = _Resumption(ctx, options=options, bucket=bucket, on_event=on_event, force=force)
    return await _continue(agent, run_id, None, how)


class _LegacyResumeArgs(TypedDict, total=False):
    """The keyword arguments of the deprecated `resume()`, as they were."""

    run_ctx: RunContext | None
    store: Bus | None
    approver: Approver | None
    cancel: CancellationToken | None
    workspace: str | Path | None
    options: RunOptions | None
    bucket: str
    on_event: Callable[[Event], None] | None
    force: bool
    configure: Callable[[RunContext], RunContext] | None
    run_id: str | None
    reclaim_orphan: bool
    transformers: TransformerFactory | None


async def resume(
    agent: Agent | str | None,
    checkpoint: RunState | str,
    decisions: Mapping[str, ResumeDecision] | None = None,
    **legacy: Unpack[_LegacyResumeArgs],
) -> RunResult:
    """Deprecated: `agent.resume(checkpoint, decisions, ...)` continues a suspended run
    with decisions, and `recover(run_id, store, ...)` a crashed one (`decisions=None`
    here). Behaves as before for one release."""
    replacement = "recover(run_id, store, ...)" if decisions is None else "agent.resume(...)"
    warnings.warn(
        f"tiller.loop.resume() is deprecated; use {replacement} (tiller.loop)",
        DeprecationWarning,
        stacklevel=2,
    )
    return await _continue(agent, checkpoint, decisions, _legacy_resumption(legacy))


def _legacy_resumption(legacy: _LegacyResumeArgs) -> _Resumption:
    run_ctx, store = legacy.get("run_ctx"), legacy.get("store")
    approver, cancel = legacy.get("approver"), legacy.get("cancel")
    workspace = legacy.get("workspace")
    ctx: RunContext | FromCheckpoint
    if run_ctx is not None:
        if store is not None and store is not run_ctx.store:
            raise UsageError("pass the store in the RunContext or as store=, not both")
        if approver is not None or cancel is not None or workspace is not None:
            raise UsageError(
                "approver, cancel and workspace rebuild a context from the checkpoint; "
                "with run_ctx given, set them on it (run_ctx.with_approver(...))"
            )
        ctx = run_ctx
    else:
        ctx = FromCheckpoint(
            store=store,
            approver=approver,
            cancel=cancel,
            workspace=workspace,
            configure=legacy.get("configure"),
        )
    return _Resumption(
        ctx,
        options=legacy.get("options"),
        bucket=legacy.get("bucket", DEFAULT_BUCKET),
        on_event=legacy.get("on_event"),
        transformers=legacy.get("transformers"),
        continue_as=ContinueAs(legacy.get("run_id"), legacy.get("reclaim_orphan", False)),
        force=legacy.get("force", False),
    )


async def _continue(
    agent: Agent | str | None,
    checkpoint: RunState | str,
    decisions: Mapping[str, ResumeDecision] | None,
    how: _Resumption,
) -> RunResult:
    """Continue a run: with `decisions`, a suspended one; with None, one whose process
    died (see `recover`). Everything that can fail on the caller's side (the agent, the
    context, the decisions, uncertain calls) is checked *before* the checkpoint is
    claimed, so a mistake can be fixed and the continuation tried again — except calls
    that a recovered run's process started between that check and the claim (it was
    alive after all): the claim fences it, and they block as uncertain after it (the run
    is then `resumed`, which a later recovery claims again)."""
    bus = how.store
    checkpoints = CheckpointStore(bus, how.bucket) if bus is not None else None
    loaded, state = await _load(checkpoints, checkpoint)
    run_ctx = _context_for(state, how.ctx)
    # Neither the jail the run had nor the one it continues in (another workspace) may
    # hold the agent's code: the model writes both (law 11).
    continuing, ref = _resolve_agent(agent, state, run_ctx.jail.root)
    if ref is not None and state.agent_ref is None:
        state.agent_ref = ref  # later checkpoints can be resumed without naming it again
    options = how.options if how.options is not None else options_from(state)
    if loaded is not None:
        options = options.with_checkpoint_bucket(options.checkpoint_bucket or how.bucket)
    continue_as = how.continue_as
    orphan = continue_as is not None and continue_as.reclaim_orphan
    orphan = orphan and loaded is not None and loaded.status == "continued"
    if loaded is not None and decisions is not None and loaded.status != "suspended" and not orphan:
        # Someone else resumed it already (it may even have finished): say so, before
        # judging decisions against a state that has moved on.
        raise AlreadyResumed(
            f"run {state.run_id!r} is {loaded.status}, not suspended: another process resumed it"
        )
    if decisions is not None:
        _check_decisions(state, decisions, await _pending(checkpoints, state))
    new_id = continue_as.run_id if continue_as is not None else None
    if checkpoints is not None:
        recovering = decisions is None
        reruns = await _prepare_claim(
            checkpoints, state, loaded, recovering=recovering, how=how, agent=continuing
        )
        await _claim(
            checkpoints, state, loaded, recovering=recovering, new_id=new_id, orphan=orphan
        )
        if recovering and loaded is not None:
            # The claim fenced the process recovered from (a new epoch): a call it started
            # after the check above, before the claim, is seen now, and blocks as
            # uncertain; from here on it can start none (law 5).
            reruns = await _check_uncertain(
                checkpoints,
                state,
                was_running=loaded.status != "suspended",
                rerun_with=continuing,
            )
        for call in reruns:
            # A person's "run it again", decided by the tool's declaration; the record
            # stays (as `rerun`), so the continued run says what it is doing. (Under the
            # id the run goes on with: its records were carried there before the claim.)
            await checkpoints.rerun_call(new_id or state.run_id, call.id)
    state.interrupts = []
    if decisions is not None:
        bound = _bind(state, decisions)
        _apply_edited_arguments(state, decisions)
        run_ctx = run_ctx.with_approver(DecidedApprover(bound, run_ctx.approver))
    return await continuing.run_in(
        run_ctx,
        state,
        options,
        on_event=how.on_event,
        run_id=new_id if new_id is not None else state.run_id,
        transformers=how.transformers,
    )


async def _load(
    checkpoints: CheckpointStore | None, checkpoint: RunState | str
) -> tuple[Checkpoint | None, RunState]:
    """The checkpoint as stored (None when given as a state), and a copy of its state."""
    if not isinstance(checkpoint, str):
        return None, checkpoint.model_copy(deep=True)
    if checkpoints is None:
        raise UsageError(
            "resuming by run id needs a store: FromCheckpoint(store=bus), or "
            "RunContext.with_store(bus)"
        )
    loaded = await checkpoints.load(checkpoint)
    return loaded, loaded.state.model_copy(deep=True)


def _context_for(state: RunState, ctx: RunContext | FromCheckpoint) -> RunContext:
    """The continued run's context: the caller's, or one rebuilt from the checkpoint."""
    if isinstance(ctx, RunContext):
        return ctx
    if (state.policy or {}).get("mailbox") is not None and ctx.store is None:
        # Continued without it, the run would neither receive nor send (law 11).
        raise UsageError(
            f"run {state.run_id!r} had a mailbox, which lives in its store: give the store "
            "to continue it (FromCheckpoint(store=bus))"
        )
    run_ctx = run_context_from(
        state, store=ctx.store, approver=ctx.approver, cancel=ctx.cancel, workspace=ctx.workspace
    )
    if ctx.configure is None and run_ctx.pinned_policy is not None:
        # Its rules, hooks and interlock are in the record but not applied: resuming
        # without them would let the run act under less policy than it started with.
        raise UsageError(
            f"run {state.run_id!r} pinned a policy when it started (tiller.toml); resume "
            "it with FromCheckpoint(configure=tiller.pinned_policy.restore_pinned_policy)"
        )
    if ctx.configure is None:
        return run_ctx
    # What is not data in the checkpoint (the workspace's rules, hooks, interlock and
    # outbox routes), put back by the caller; the run's own mode still wins.
    mode = run_ctx.jail.safety.mode
    return ctx.configure(run_ctx).with_safety_mode(mode)


async def _pending(checkpoints: CheckpointStore | None, state: RunState) -> list[ToolCall]:
    """The calls waiting for a decision. Calls left for the client (AG-UI frontend tools)
    are the client's to answer; calls answered before the step paused (their results are
    in the state) need nothing; an agent call whose subagent is suspended in the run waits
    on that subagent's calls; and the calls of the batch that already ran (the allowed ones
    of a step whose other calls were held for a person) have their results recorded."""
    pending = state.waiting_calls()
    if checkpoints is None:
        return pending
    logs = await checkpoints.calls(state.run_id)
    done = {call_id for call_id, log in logs.items() if log.status == "completed"}
    return [call for call in pending if call.id not in done]


def _check_decisions(
    state: RunState, decisions: Mapping[str, ResumeDecision], pending: list[ToolCall]
) -> None:
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


async def _prepare_claim(
    checkpoints: CheckpointStore,
    state: RunState,
    loaded: Checkpoint | None,
    *,
    recovering: bool,
    how: _Resumption,
    agent: Agent,
) -> list[ToolCall]:
    """The last checks before the claim: a recovered run's lease, and uncertain calls
    (those of `agent`'s idempotent tools do not block a recovery: they are returned, to
    be run again)."""
    if loaded is not None and recovering:
        # A live process renews the run's lease; its started calls are running, not
        # uncertain. Only a lapsed lease (or force) means the process is gone.
        held = await checkpoints.holder(state.run_id)
        if held is not None and not how.force:
            raise RunStillRunning(state.run_id, *held)
        if held is not None:
            await checkpoints.break_hold(state.run_id)
    return await _check_uncertain(
        checkpoints,
        state,
        was_running=loaded is not None and loaded.status != "suspended",
        rerun_with=agent if recovering else None,
    )


async def _claim(
    checkpoints: CheckpointStore,
    state: RunState,
    loaded: Checkpoint | None,
    *,
    recovering: bool,
    new_id: str | None,
    orphan: bool,
) -> None:
    """Claim the stored checkpoint (compare-and-set), under `new_id` if it is renamed."""
    renamed = new_id is not None and new_id != state.run_id
    if new_id is not None and renamed:
        # Before the claim: the records of the open calls under the id the run goes on
        # with, so it knows which already ran (a loser's copies are harmless).
        await checkpoints.carry_calls(
            state.run_id, new_id, [call.id for call in state.unanswered_calls()]
        )
    if loaded is not None:
        # AlreadyResumed for the process that loses the race. Under a new id the old
        # checkpoint is closed for good (`continued`): recovering it would run its calls
        # a second time beside the new run.
        await checkpoints.claim(
            loaded,
            recovering=recovering,
            continued_as=new_id if renamed else None,
            orphan=orphan,
        )


def _resolve_agent(
    agent: Agent | str | None, state: RunState, jail_root: Path
) -> tuple[Agent, str | None]:
    """The agent to continue with, and the reference it was loaded by (if it was); a
    reference whose code is in `jail_root` (where the run continues) is refused too."""
    ref = agent if isinstance(agent, str) else state.agent_ref if agent is None else None
    if ref is not None:
        refuse_code_inside(ref.partition(":")[0], jail_root, ref=ref)
    if agent is None:
        if state.agent_ref is None:
            raise UsageError(
                f"run {state.run_id!r} does not record its agent (RunState.agent_ref); "
                "pass the agent, or its 'module:attr' reference"
            )
        loaded = load_agent(state.agent_ref, model=state.model_spec, outside=jail_root_of(state))
        return loaded, state.agent_ref
    if isinstance(agent, str):
        return load_agent(agent, model=state.model_spec, outside=jail_root_of(state)), agent
    return agent, None


async def _check_uncertain(
    store: CheckpointStore,
    state: RunState,
    *,
    was_running: bool = False,
    rerun_with: Agent | None = None,
) -> list[ToolCall]:
    """`ResumeReplayBlocked` if a call is uncertain; with `rerun_with` (a recovery, and
    the agent it continues with), uncertain calls that `_may_rerun` do not block, and
    are returned (when nothing else blocks) to be run again."""
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
    reruns = [
        call
        for call in uncertain
        if rerun_with is not None and _may_rerun(rerun_with, call, logs[call.id])
    ]
    again = {call.id for call in reruns}
    blocking = [call for call in uncertain if call.id not in again]
    if blocking:
        raise ResumeReplayBlocked(state.run_id, blocking, reruns)
    return reruns


def _may_rerun(agent: Agent, call: ToolCall, log: CallLog) -> bool:
    """Whether an uncertain `call` may run again without a person (law 5): the tool that
    started it declared itself idempotent (its record says so: a record that does not,
    as an older tiller wrote it, blocks), and so does the tool of that name the run has
    now (one that is gone, or no longer declares it, blocks). Both, because the first
    attempt's effect was made by the old code and the second by the new one: only if
    each keys its effect on the call id is running it twice the same as running it once."""
    tool = agent.registry.get(call.name)
    return log.idempotent and tool is not None and tool.idempotent is True


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


# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())
