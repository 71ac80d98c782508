"""A run continued in a process that never saw it: by its decided held calls, or
recovered after its process died.

Both load the agent the checkpoint names (or the one given), start the MCP servers of the
run's pinned policy, and rebuild the run's context from its checkpoint under that pinned
policy — never the workspace's `tiller.toml`, which the model may have written (law 11).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from ..cancel import CancellationToken
from ..errors import TillerError, UsageError
from ..events import Event
from ..loop import (
    Agent,
    FromCheckpoint,
    ResumeDecision,
    RunContext,
    RunOptions,
    RunResult,
    SteeringQueue,
    jail_root_of,
    load_agent,
    recover,
    refuse_code_inside,
)
from ..pinned_policy import restore_pinned_policy
from ..policy import Approver
from ..store import DEFAULT_BUCKET, Bus, CheckpointStore, ControlStore, HeldApproval
from ._approvals import decision_of
from ._pinned import pinned_agent

__all__ = ["recover_run", "resume_decided", "resume_run"]


async def resume_run(  # noqa: PLR0913 (the resume's options, keyword-only: each is API)
    store: Bus,
    run_id: str,
    decisions: Mapping[str, ResumeDecision],
    *,
    agent: Agent | str | None = None,
    ctx: FromCheckpoint | None = None,
    bucket: str = DEFAULT_BUCKET,
    on_event: Callable[[Event], None] | None = None,
    options: RunOptions | None = None,
    prepare: Callable[[Agent], Agent] | None = None,
) -> RunResult:
    """Resume the suspended run `run_id` with `decisions`, in a process that may never
    have seen its code: the agent is `agent` (an `Agent` or a `"module:attr"`
    reference), or the one the checkpoint names; the context is rebuilt from the
    checkpoint under the run's pinned policy, then `ctx.configure` if given (`ctx` adds
    what is not data; its store is `store`); the pinned MCP servers are started for an
    agent given by reference; `options` replaces the stored options. `prepare` is given
    the agent that continues the run and returns the one that does (a fleet worker puts
    its model under the fleet's limits). See `Agent.resume`."""
    rebuild = _pinned(replace(ctx, store=store) if ctx is not None else FromCheckpoint(store=store))
    if isinstance(agent, Agent):
        given = prepare(agent) if prepare is not None else agent
        return await given.resume(
            run_id, decisions, ctx=rebuild, options=options, bucket=bucket, on_event=on_event
        )
    async with pinned_agent(store, run_id, agent, bucket=bucket) as named:
        moved_to = ctx.workspace if ctx is not None else None
        continuing = await _agent_for(store, run_id, named, bucket, moved_to)
        if prepare is not None:
            continuing = prepare(continuing)
        return await continuing.resume(
            run_id, decisions, ctx=rebuild, options=options, bucket=bucket, on_event=on_event
        )


async def resume_decided(
    store: Bus,
    records: Mapping[str, HeldApproval],
    *,
    agent: str | None = None,
    bucket: str = DEFAULT_BUCKET,
    on_event: Callable[[Event], None] | None = None,
    cancel: CancellationToken | None = None,
) -> RunResult:
    """Resume the run whose held calls `records` (by call id, each decided) are, with
    every decision (`decision_of`). `cancel`: the resumed run's token (a person's Ctrl+C
    cancels it: it ends `cancelled`, keeping what it did)."""
    run_id = next(iter(records.values())).run_id
    decisions = {call_id: decision_of(record) for call_id, record in records.items()}
    return await resume_run(
        store,
        run_id,
        decisions,
        agent=agent,
        ctx=FromCheckpoint(cancel=cancel) if cancel is not None else None,
        bucket=bucket,
        on_event=on_event,
    )


async def recover_run(  # noqa: PLR0913 (the recovery's options, keyword-only: each is API)
    store: Bus,
    run_id: str,
    *,
    agent: str | None = None,
    approver: Approver | None = None,
    workspace: str | Path | None = None,
    force: bool = False,
    bucket: str = DEFAULT_BUCKET,
    on_event: Callable[[Event], None] | None = None,
    configure: Callable[[RunContext], RunContext] | None = None,
    options: RunOptions | None = None,
    watch_control: bool = True,
    prepare: Callable[[Agent], Agent] | None = None,
    cancel: CancellationToken | None = None,
) -> RunResult:
    """Recover a run whose process died (or continue one suspended for review), its
    calls that ask going to `approver`; see `tiller.loop.recover`. `configure` adds to
    the rebuilt context after the pinned policy; `options` replaces the stored options
    (None: those).

    The run's stored control requests apply to the recovery as they did to the process
    that died: a cancel stops it, and each steer is folded once — those its checkpoint
    says were folded are not pushed again. `watch_control=False` leaves that to the
    caller, which then gives the run its own cancel token and steering queue in
    `configure` and watches them itself (a fleet worker does, with `folded_steers`).
    `prepare` is given the agent that continues the run and returns the one that does
    (as in `resume_run`). `cancel`: the continued run's token (a person's Ctrl+C cancels
    it: it ends `cancelled`, keeping what it did), which a stored cancel request also
    cancels while the control requests are watched."""
    given = cancel
    cancel, steering = cancel if cancel is not None else CancellationToken(), SteeringQueue()

    def controlled(run_ctx: RunContext) -> RunContext:
        run_ctx = run_ctx.with_queued_input(steering) if watch_control else run_ctx
        return configure(run_ctx) if configure is not None else run_ctx

    async with pinned_agent(store, run_id, agent, bucket=bucket) as named:
        continuing: Agent | str | None = named
        if prepare is not None:
            continuing = prepare(await _agent_for(store, run_id, named, bucket, workspace))
        rebuild = _pinned(
            FromCheckpoint(
                approver=approver,
                workspace=workspace,
                cancel=cancel if watch_control or given is not None else None,
                configure=controlled,
            )
        )
        async with contextlib.AsyncExitStack() as stack:
            if watch_control:
                watcher = ControlStore(store).watch(
                    run_id,
                    cancel=cancel,
                    steering=steering,
                    skip=await folded_steers(store, run_id, bucket=bucket),
                )
                await stack.enter_async_context(watcher)
            return await recover(
                run_id,
                store,
                agent=continuing,
                force=force,
                ctx=rebuild,
                options=options,
                bucket=bucket,
                on_event=on_event,
            )


async def folded_steers(store: Bus, run_id: str, *, bucket: str = DEFAULT_BUCKET) -> list[str]:
    """The steers the run's checkpoint says were folded (none if it cannot be read: the
    recovery then says why, and the loop folds a steer id once all the same): what a
    watcher of a continued run skips."""
    try:
        return (await CheckpointStore(store, bucket).load(run_id)).state.folded_steers
    except TillerError:
        return []


def _pinned(rebuild: FromCheckpoint) -> FromCheckpoint:
    """`rebuild` under the run's pinned policy first (law 11), then the caller's own
    `configure`, if any: every resume through the operations uses the pinned record."""
    theirs = rebuild.configure
    if theirs is None or theirs is restore_pinned_policy:
        # Not twice: the pinned hooks merge into the context's, and would run twice.
        return replace(rebuild, configure=restore_pinned_policy)

    def configure(run_ctx: RunContext) -> RunContext:
        return theirs(restore_pinned_policy(run_ctx))

    return replace(rebuild, configure=configure)


async def _agent_for(
    store: Bus,
    run_id: str,
    agent: Agent | str | None,
    bucket: str,
    workspace: str | Path | None = None,
) -> Agent:
    """The agent itself: as given, loaded by its reference, or the one the checkpoint
    names. A reference's code may be neither in the run's jail nor in the `workspace` it
    continues in (law 11: the model writes both)."""
    if isinstance(agent, Agent):
        return agent
    state = (await CheckpointStore(store, bucket).load(run_id)).state
    ref = agent if agent is not None else state.agent_ref
    if ref is None:
        raise UsageError(
            f"run {run_id!r} does not record its agent (RunState.agent_ref); "
            "pass the agent, or its 'module:attr' reference"
        )
    if workspace is not None:
        refuse_code_inside(ref.partition(":")[0], Path(workspace), ref=ref)
    return load_agent(ref, model=state.model_spec, outside=jail_root_of(state))
