"""A person answers the calls a headless run held: list them, approve or deny one, and
gather a run's decisions once each of its held calls is decided.

Everything that can be refused is checked before a decision is recorded: the record is
pending, the run is still suspended on that call, the agent loads, edited arguments fit
the tool's schema. A decision is recorded once (`AlreadyDecided` for a second)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..conversation import ToolCall
from ..errors import UsageError
from ..loop import (
    Agent,
    MailboxRoute,
    ResumeDecision,
    give_send_tool,
    jail_root_of,
    load_agent,
)
from ..store import (
    AlreadyDecided,
    ApprovalStore,
    Bus,
    Checkpoint,
    CheckpointStore,
    HeldApproval,
)
from ._arguments import check_arguments
from ._buckets import DEFAULT_BUCKETS, Buckets
from ._pinned import pinned_agent
from ._settle import expire_held

if TYPE_CHECKING:
    from ..tools import Registry

__all__ = [
    "Decided",
    "approve",
    "decided_records",
    "decision_of",
    "deny",
    "held_approvals",
]


@dataclass(frozen=True, slots=True)
class Decided:
    """A recorded decision, and the run's held calls as read *after* it: of two people
    deciding a run's last two calls at once, the later one sees both decisions."""

    record: HeldApproval
    #: The held-approval record of each call the run waits on, by call id.
    records: dict[str, HeldApproval]

    @property
    def waiting(self) -> list[str]:
        """The ids of the records still pending: the run resumes once each is decided."""
        return [r.id for r in self.records.values() if r.pending]


async def held_approvals(
    store: Bus, *, include_decided: bool = False, buckets: Buckets = DEFAULT_BUCKETS
) -> list[HeldApproval]:
    """The held calls: the pending ones, or every record with `include_decided`."""
    return await ApprovalStore(store, buckets.approvals).list(
        None if include_decided else "pending"
    )


async def approve(
    store: Bus,
    approval_id: str,
    *,
    arguments: dict[str, Any] | None = None,
    agent: str | None = None,
    buckets: Buckets = DEFAULT_BUCKETS,
) -> Decided:
    """Approve a held call, with `arguments` in place of the model's if given (checked
    against the tool of `agent`, or of the agent the checkpoint names)."""
    return await _decide(
        store,
        approval_id,
        approved=True,
        reason=None,
        arguments=arguments,
        agent=agent,
        buckets=buckets,
    )


async def deny(
    store: Bus,
    approval_id: str,
    reason: str,
    *,
    agent: str | None = None,
    buckets: Buckets = DEFAULT_BUCKETS,
) -> Decided:
    """Deny a held call; the model reads "Denied by the user: REASON"."""
    return await _decide(
        store,
        approval_id,
        approved=False,
        reason=reason,
        arguments=None,
        agent=agent,
        buckets=buckets,
    )


async def decided_records(
    store: Bus, run_id: str, *, buckets: Buckets = DEFAULT_BUCKETS
) -> dict[str, HeldApproval]:
    """The records of a suspended run whose held calls are all decided, by call id: what
    its resume needs, when the resume an approval started did not happen."""
    checkpoint = await CheckpointStore(store, buckets.checkpoints).load(run_id)
    if checkpoint.status != "suspended":
        raise UsageError(f"run {run_id} is {checkpoint.status}, not suspended")
    pending = await _pending_calls(store, checkpoint, buckets.checkpoints)
    if not pending:
        raise UsageError(f"run {run_id} has no calls waiting for a decision")
    records = await _records_for(ApprovalStore(store, buckets.approvals), run_id, pending)
    waiting = [r.id for r in records.values() if r.pending]
    if waiting:
        raise UsageError(
            f"run {run_id} still waits for: {', '.join(waiting)} (tiller approve | deny)"
        )
    return records


def decision_of(record: HeldApproval) -> ResumeDecision:
    """The decision a decided record gives its run, bound to the call the person was
    shown (law 10): the run applies it to that call only."""
    if record.status == "approved":
        decision = ResumeDecision.approved(record.edited_arguments)
        return decision.bound_to(record.tool, record.arguments)
    if record.status == "denied":
        decision = ResumeDecision.rejected(record.decision_reason or "no reason given")
        return decision.bound_to(record.tool, record.arguments)
    raise UsageError(f"{record.id} is {record.status}: it cannot be used to resume the run")


async def _decide(
    store: Bus,
    approval_id: str,
    *,
    approved: bool,
    reason: str | None,
    arguments: dict[str, Any] | None,
    agent: str | None,
    buckets: Buckets,
) -> Decided:
    approvals = ApprovalStore(store, buckets.approvals)
    record = await approvals.get(approval_id)
    if not record.pending:
        raise AlreadyDecided(record)
    checkpoint = await CheckpointStore(store, buckets.checkpoints).load(record.run_id)
    await _check_waiting(approvals, checkpoint, record)
    ref = agent if agent is not None else checkpoint.state.agent_ref
    if ref is None:
        raise UsageError(
            f"run {record.run_id} does not record its agent (it is needed to resume the run); "
            "pass --agent module:attr"
        )
    state = checkpoint.state
    loaded = load_agent(ref, model=state.model_spec, outside=jail_root_of(state))
    # The tools the run had include the `message_send` its mailbox route gave it (in a
    # copy of the registry: the loaded agent may be a module's, shared by its runs).
    tools = loaded.registry
    recorded = (state.policy or {}).get("mailbox")
    if recorded is not None:
        tools = give_send_tool(tools, MailboxRoute.from_data(store, recorded))
    if arguments is not None:
        await _check_edited(store, record, ref, tools, arguments, bucket=buckets.checkpoints)
    pending = await _pending_calls(store, checkpoint, buckets.checkpoints)
    await _records_for(approvals, record.run_id, pending)  # every held call has a record
    decided = await approvals.decide(
        record.id, approve=approved, reason=reason, edited_arguments=arguments
    )
    # Read the run's records again *after* deciding: of two people deciding a run's last
    # two calls at once, the later one to get here sees both decisions and resumes.
    return Decided(decided, await _records_for(approvals, record.run_id, pending))


async def _check_edited(
    store: Bus,
    record: HeldApproval,
    ref: str,
    tools: Registry,
    arguments: dict[str, Any],
    *,
    bucket: str,
) -> None:
    """Refuse edited arguments that do not fit the held call's tool. The tool may be one
    of an MCP server the run pinned (law 11), which only a started server describes: the
    pinned servers are started for the check when the agent itself has no such tool."""
    tool = tools.get(record.tool)
    if tool is not None:
        check_arguments(tool, arguments)
        return
    async with pinned_agent(store, record.run_id, ref, bucket=bucket) as continuing:
        tool = continuing.registry.get(record.tool) if isinstance(continuing, Agent) else None
        if tool is None:
            raise UsageError(f"the agent {ref!r} has no tool {record.tool!r}; check --agent")
        check_arguments(tool, arguments)


async def _check_waiting(
    approvals: ApprovalStore, checkpoint: Checkpoint, record: HeldApproval
) -> None:
    """Refuse a decision the run no longer waits for. A finished run never will: its
    pending records are marked expired, so they leave `tiller approvals list`."""
    state = checkpoint.state
    if checkpoint.status == "finished":
        await expire_held(approvals, state.run_id, f"run {state.run_id} finished without it")
        raise UsageError(
            f"run {state.run_id} has finished; it no longer waits for {record.id} (marked expired)"
        )
    if checkpoint.status != "suspended":
        raise UsageError(
            f"run {state.run_id} is {checkpoint.status}, not suspended: it was already resumed"
        )
    if record.call_id not in {call.id for call in state.nested_calls()}:
        raise UsageError(
            f"run {state.run_id} does not wait for call {record.call_id} ({record.id}) now"
        )


async def _pending_calls(store: Bus, checkpoint: Checkpoint, bucket: str) -> list[ToolCall]:
    """The calls the suspended run waits on: its unanswered calls, less those of the
    batch that ran before it suspended (their results are recorded), as a resume counts
    them."""
    state = checkpoint.state
    logs = await CheckpointStore(store, bucket).calls(state.run_id)
    return [
        call
        for call in state.waiting_calls()
        if (log := logs.get(call.id)) is None or log.status != "completed"
    ]


async def _records_for(
    approvals: ApprovalStore, run_id: str, pending: list[ToolCall]
) -> dict[str, HeldApproval]:
    """The held-approval record of each pending call, by call id; every pending call
    must have one, or the decisions could never be complete."""
    by_call = {r.call_id: r for r in await approvals.for_run(run_id)}
    missing = [call for call in pending if call.id not in by_call]
    if missing:
        listed = ", ".join(f"{c.name} [{c.id}]" for c in missing)
        raise UsageError(
            f"run {run_id} also waits on calls that are not held for approval ({listed}); "
            f"resume it with tiller runs resume {run_id}"
        )
    return {call.id: by_call[call.id] for call in pending}
