"""Held approvals: a tool call that waits for a person, in the store (DESIGN §3, §7).

A headless durable run (a worker, `tiller run` without a TTY) has no one to ask when a call
needs approval, so it suspends and its gate holds the call here, one record per call in the
`tiller-approvals` bucket. A person answers later, from any process that reaches the store
(`tiller approvals list`, `tiller approve ID`, `tiller deny ID --reason ...`), and the run
resumes once every call it holds is decided.

A record: `{schema_version, id, run_id, thread_id, call_id, tool, arguments (as the model
drafted them), risk, reason (why it needs approval), taint, workspace, created_at, status,
decided_at, decision_reason, edited_arguments}`; `status` goes `pending` → `approved` |
`denied` | `expired` (the run went on without this decision), once: `decide` is a
compare-and-set, and deciding a record that is no longer pending raises `AlreadyDecided`.

Keys: `<id>` holds the record; `run/<run_id>/<id>` indexes it by run (an empty value).
The index entry is written before the record, so every record is reachable from its run;
an index entry whose record is missing or belongs to another run is skipped.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, get_args

from ..conversation import Taint, ToolCall
from ..errors import UsageError
from ..state import RunState
from ._bus import Bus, NotFound, StoreError
from ._records import (
    MalformedRecord,
    Record,
    RecordFromNewerTiller,
    RecordStore,
    TaintNames,
    call_arguments,
    candidate_ids,
    change,
    create_or_get,
    encode,
    json_object,
)

__all__ = [
    "APPROVALS_BUCKET",
    "AlreadyDecided",
    "ApprovalStatus",
    "ApprovalStore",
    "HeldApproval",
    "MalformedApproval",
    "UnknownApproval",
]

#: The held-approvals bucket's default name (DESIGN §7).
APPROVALS_BUCKET = "tiller-approvals"
_PREFIX = "ap"

ApprovalStatus = Literal["pending", "approved", "denied", "expired"]
_STATUSES: tuple[str, ...] = get_args(ApprovalStatus)


class MalformedApproval(MalformedRecord):
    """A record of the approvals bucket does not have the shape this tiller writes."""


class ApprovalFromNewerTiller(MalformedApproval, RecordFromNewerTiller):
    """A record of the approvals bucket written by a newer tiller (its schema is newer than this
    tiller knows): upgrade tiller to read it."""


class UnknownApproval(NotFound):
    """No held approval has this id."""

    def __init__(self, approval_id: str, bucket: str) -> None:
        super().__init__(
            f"no held approval {approval_id!r} in bucket {bucket!r} "
            "(tiller approvals list shows the pending ones)"
        )
        self.approval_id = approval_id


class AlreadyDecided(StoreError):
    """The held approval is no longer pending: a decision is final, and the first one
    stands. `approval` is the record as decided."""

    def __init__(self, approval: HeldApproval) -> None:
        why = f": {approval.decision_reason}" if approval.decision_reason else ""
        super().__init__(f"{approval.id} is already decided ({approval.status}{why})")
        self.approval = approval


class HeldApproval(Record):
    """One held call and what became of it."""

    ledger_kind: ClassVar[str] = "held_approval"

    id: str
    run_id: str
    thread_id: str
    call_id: str
    tool: str
    #: The arguments as the model drafted them.
    arguments: dict[str, Any]
    #: The call's risk class (a `RiskClass` value), if the policy engine gave one.
    risk: str | None = None
    #: Why it needs a person (the policy rule, the mode's default, the review).
    reason: str
    taint: TaintNames = Taint.NONE
    #: The run's jail root, where the call would act.
    workspace: str | None = None
    created_at: float
    status: ApprovalStatus = "pending"
    decided_at: float | None = None
    decision_reason: str | None = None
    #: What the person approved instead of `arguments`, if they edited them.
    edited_arguments: dict[str, Any] | None = None

    @property
    def pending(self) -> bool:
        return self.status == "pending"


class ApprovalStore(RecordStore[HeldApproval]):
    """Held approvals in one bucket of a `Bus`."""

    record_type = HeldApproval
    malformed = MalformedApproval
    newer = ApprovalFromNewerTiller

    def __init__(self, bus: Bus, bucket: str = APPROVALS_BUCKET) -> None:
        super().__init__(bus, bucket)

    # ── holding ──────────────────────────────────────────────────────────────────

    async def hold(
        self,
        call: ToolCall,
        *,
        run_id: str,
        thread_id: str,
        reason: str,
        risk: str | None = None,
        taint: Taint = Taint.NONE,
        workspace: str | None = None,
    ) -> HeldApproval:
        """Hold `call` of run `run_id` for a person; returns its record.

        Holding a call that is already held returns the record there (whatever its status:
        a decision is never undone by holding again)."""
        if not reason:
            raise UsageError("say why the call needs approval (reason)")
        arguments = call_arguments(call)
        kv = await self._bucket()
        for approval_id in candidate_ids(_PREFIX, run_id, call.id):
            record = HeldApproval(
                id=approval_id,
                run_id=run_id,
                thread_id=thread_id,
                call_id=call.id,
                tool=call.name,
                arguments=arguments,
                risk=risk,
                reason=reason,
                taint=taint,
                workspace=workspace,
                created_at=self.bus.clock(),
            )
            index = _index_key(run_id, approval_id)
            await kv.put(index, b"")
            existing = await create_or_get(kv, approval_id, encode(record))
            if existing is None:
                return record
            held = self._read(approval_id, existing)
            if (held.run_id, held.call_id, held.tool, held.arguments) == (
                run_id,
                call.id,
                call.name,
                arguments,
            ):
                # The same call held again: its record stands. Another call under the same
                # id (a record from before runtime ids) is not answered by it (law 10).
                return held
            if held.run_id != run_id:
                # Another run's id: drop the index just put. Within one run the key is
                # the existing record's own index, which must stay (it is still listed).
                await kv.delete(index)
            # Take a longer one.
        raise UsageError(f"no free approval id for call {call.id} of run {run_id}")

    async def hold_interrupts(
        self,
        state: RunState,
        *,
        reason: str = "this action needs a person's approval",
        risks: Mapping[str, str | None] | None = None,
        reasons: Mapping[str, str] | None = None,
    ) -> builtins.list[HeldApproval]:
        """Hold every call a suspended run waits on (its `tool_call` interrupts), with the
        run's taint and jail root; `risks` gives a call's risk class and `reasons` why it
        needs a person (else `reason`), by call id."""
        # A subagent suspended inside the run holds its own calls; they are the run's too.
        calls = {call.id: call for call in state.nested_calls()}
        workspace = (state.policy or {}).get("jail_root")
        held: builtins.list[HeldApproval] = []
        for interrupt in state.interrupts:
            call = calls.get(str(interrupt.get("toolCallId")))
            if interrupt.get("reason") != "tool_call" or call is None:
                continue
            held.append(
                await self.hold(
                    call,
                    run_id=state.run_id,
                    thread_id=state.thread_id,
                    reason=(reasons or {}).get(call.id) or reason,
                    risk=(risks or {}).get(call.id),
                    taint=state.taint_flags,
                    workspace=str(workspace) if workspace is not None else None,
                )
            )
        return held

    # ── reading ──────────────────────────────────────────────────────────────────

    async def get(self, approval_id: str) -> HeldApproval:
        """The record (`UnknownApproval` if there is none)."""
        return await self._get_record(
            approval_id, valid=_is_id, unknown=lambda: UnknownApproval(approval_id, self.bucket)
        )

    async def list(self, status: ApprovalStatus | None = None) -> builtins.list[HeldApproval]:
        """Every record (or those with `status`), oldest first."""
        if status is not None and status not in _STATUSES:
            raise UsageError(f"unknown status {status!r}; the statuses are {', '.join(_STATUSES)}")
        found = [
            record
            for record in await self._records(f"{_PREFIX}-", valid=_is_id)
            if status is None or record.status == status
        ]
        return sorted(found, key=lambda r: (r.created_at, r.id))

    async def for_run(self, run_id: str) -> builtins.list[HeldApproval]:
        """The run's records, every status, oldest first."""
        kv = await self._bucket()
        prefix = _index_key(run_id, "")
        found = []
        for key in await kv.keys(prefix):
            approval_id = key[len(prefix) :]
            if not _is_id(approval_id):
                continue  # a run whose id continues with '/...'
            entry = await kv.get(approval_id)
            if entry is None:
                continue
            record = self._read(approval_id, entry.value)
            if record.run_id == run_id:
                found.append(record)
        return sorted(found, key=lambda r: (r.created_at, r.id))

    # ── deciding ─────────────────────────────────────────────────────────────────

    async def decide(
        self,
        approval_id: str,
        *,
        approve: bool,
        reason: str | None = None,
        edited_arguments: Mapping[str, Any] | None = None,
    ) -> HeldApproval:
        """Record a person's decision, once (`AlreadyDecided` if it is not pending).

        A denial needs a `reason` (the model reads it); `edited_arguments` replace the
        model's on approval and must be a JSON object."""
        if not approve and not reason:
            raise UsageError("a denial needs a reason: the model reads it")
        if not approve and edited_arguments is not None:
            raise UsageError("edited arguments go with an approval, not a denial")
        edited = (
            json_object(edited_arguments, "edited arguments")
            if edited_arguments is not None
            else None
        )
        status: ApprovalStatus = "approved" if approve else "denied"
        return await self._settle(approval_id, status, reason or None, edited)

    async def expire(self, approval_id: str, reason: str) -> HeldApproval:
        """Mark a pending record `expired`: its run went on without this decision (it was
        resumed another way, or finished), so a decision now would go nowhere."""
        return await self._settle(approval_id, "expired", reason, None)

    async def _settle(
        self,
        approval_id: str,
        status: ApprovalStatus,
        reason: str | None,
        edited: dict[str, Any] | None,
    ) -> HeldApproval:
        if not _is_id(approval_id):
            raise UnknownApproval(approval_id, self.bucket)

        def step(record: HeldApproval) -> HeldApproval:
            if not record.pending:
                raise AlreadyDecided(record)
            return record.model_copy(
                update={
                    "status": status,
                    "decided_at": self.bus.clock(),
                    "decision_reason": reason,
                    "edited_arguments": edited,
                }
            )

        return await change(
            await self._bucket(),
            approval_id,
            self._read,
            lambda: UnknownApproval(approval_id, self.bucket),
            step,
        )


def _index_key(run_id: str, approval_id: str) -> str:
    return f"run/{run_id}/{approval_id}"


def _is_id(key: str) -> bool:
    return key.startswith(f"{_PREFIX}-") and "/" not in key
