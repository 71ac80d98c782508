"""The outbox: tool calls staged instead of executed, until a person releases them.

Some tools act on the world in ways a person wants to see first (a mail, a message, a
push). The gate routes their calls here: the call is *staged* — nothing is sent — and
the model is told the draft awaits release. A person then reads the item, edits its
arguments, and sends or rejects it (`tiller outbox list | show | edit | send | reject`),
from any process that reaches the store.

An item, keyed by its id in the `tiller-outbox` bucket: `{schema_version, id, run_id,
thread_id, call_id, tool, drafted_arguments, edited_arguments (null until edited), status,
taint, workspace, created_at, updated_at, result ({content, is_error} once sent),
reject_reason, failure}`.

```
staged ──edit──► staged
staged ──start_sending──► sending ──mark_sent──► sent
                                  └─mark_failed─► failed
staged ──reject──► rejected
```

Every change is a compare-and-set on the item's revision, and a wrong transition raises
`OutboxStatusError` naming the status the item is in. `start_sending` is the "at most
once" of law 5: the sender moves the item to `sending` *before* running the tool, so a
second send (another process, or the same command run twice) is refused; an item left in
`sending` means its sender died mid-way, and whether it went out is unknown.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict

from ..conversation import Taint, ToolCall
from ..errors import UsageError
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
    "OUTBOX_BUCKET",
    "MalformedOutboxItem",
    "OutboxItem",
    "OutboxResult",
    "OutboxStatus",
    "OutboxStatusError",
    "OutboxStore",
    "UnknownOutboxItem",
]

#: The outbox bucket's default name (DESIGN §7).
OUTBOX_BUCKET = "tiller-outbox"
_PREFIX = "ob"

OutboxStatus = Literal["staged", "sending", "sent", "rejected", "failed"]
_STATUSES: tuple[str, ...] = get_args(OutboxStatus)


class MalformedOutboxItem(MalformedRecord):
    """A record of the outbox bucket does not have the shape this tiller writes."""


class OutboxItemFromNewerTiller(MalformedOutboxItem, RecordFromNewerTiller):
    """A record of the outbox bucket written by a newer tiller (its schema is newer than this
    tiller knows): upgrade tiller to read it."""


class UnknownOutboxItem(NotFound):
    """No outbox item has this id."""

    def __init__(self, item_id: str, bucket: str) -> None:
        super().__init__(
            f"no outbox item {item_id!r} in bucket {bucket!r} (tiller outbox list shows them)"
        )
        self.item_id = item_id


class OutboxStatusError(StoreError):
    """The item is not in a status that allows this change (editing a sent item, sending
    one twice). `item` is the item as it is."""

    def __init__(self, item: OutboxItem, message: str) -> None:
        super().__init__(message)
        self.item = item


class OutboxResult(BaseModel):
    """What the tool returned when the item was sent, as the model would have read it."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    content: str
    is_error: bool = False


class OutboxItem(Record):
    """One staged call and what became of it."""

    ledger_kind: ClassVar[str] = "outbox_item"

    id: str
    run_id: str
    thread_id: str
    call_id: str
    tool: str
    #: The arguments as the model drafted them.
    drafted_arguments: dict[str, Any]
    #: The person's version, once edited; sending uses it instead of the draft.
    edited_arguments: dict[str, Any] | None = None
    status: OutboxStatus = "staged"
    taint: TaintNames = Taint.NONE
    #: The run's jail root, where the tool runs when the item is sent.
    workspace: str | None = None
    created_at: float
    updated_at: float
    result: OutboxResult | None = None
    reject_reason: str | None = None
    #: Why sending failed (the tool crashed, or the sender was interrupted).
    failure: str | None = None

    def describe_status(self) -> str:
        """The status as a person should read it (with the reason, for a rejected or
        failed item; with the doubt, for one left `sending`)."""
        if self.status == "sending":
            return "being sent (or its sender died while sending: whether it went out is unknown)"
        if self.status == "rejected" and self.reject_reason:
            return f"rejected ({self.reject_reason})"
        if self.status == "failed" and self.failure:
            return f"failed ({self.failure})"
        return self.status

    @property
    def arguments(self) -> dict[str, Any]:
        """What a send would use: the edited arguments if any, else the draft."""
        return (
            self.edited_arguments if self.edited_arguments is not None else self.drafted_arguments
        )


class OutboxStore(RecordStore[OutboxItem]):
    """Outbox items in one bucket of a `Bus`."""

    record_type = OutboxItem
    malformed = MalformedOutboxItem
    newer = OutboxItemFromNewerTiller

    def __init__(self, bus: Bus, bucket: str = OUTBOX_BUCKET) -> None:
        super().__init__(bus, bucket)

    # ── staging and reading ──────────────────────────────────────────────────────

    async def stage(
        self,
        call: ToolCall,
        *,
        run_id: str,
        thread_id: str,
        taint: Taint = Taint.NONE,
        workspace: str | None = None,
    ) -> OutboxItem:
        """Stage `call` of run `run_id`; returns its item. Nothing is sent.

        Staging a call that is already staged returns the item there, whatever its status
        (a resumed run that dispatches the call again must not make a second draft)."""
        drafted = call_arguments(call)
        kv = await self._bucket()
        for item_id in candidate_ids(_PREFIX, run_id, call.id):
            now = self.bus.clock()
            item = OutboxItem(
                id=item_id,
                run_id=run_id,
                thread_id=thread_id,
                call_id=call.id,
                tool=call.name,
                drafted_arguments=drafted,
                taint=taint,
                workspace=workspace,
                created_at=now,
                updated_at=now,
            )
            existing = await create_or_get(kv, item_id, encode(item))
            if existing is None:
                return item
            staged = self._read(item_id, existing)
            if (staged.run_id, staged.call_id, staged.tool, staged.drafted_arguments) == (
                run_id,
                call.id,
                call.name,
                drafted,
            ):
                return staged
            # Another call under the same id (another run's, or a record from before
            # runtime ids) is not this one's draft (law 10): take a longer id.
        raise UsageError(f"no free outbox id for call {call.id} of run {run_id}")

    async def get(self, item_id: str) -> OutboxItem:
        """The item (`UnknownOutboxItem` if there is none)."""
        return await self._get_record(
            item_id, valid=_is_id, unknown=lambda: UnknownOutboxItem(item_id, self.bucket)
        )

    async def list(self, status: OutboxStatus | None = None) -> builtins.list[OutboxItem]:
        """Every item (or those with `status`), oldest first."""
        if status is not None and status not in _STATUSES:
            raise UsageError(f"unknown status {status!r}; the statuses are {', '.join(_STATUSES)}")
        found = [
            item
            for item in await self._records(f"{_PREFIX}-", valid=_is_id)
            if status is None or item.status == status
        ]
        return sorted(found, key=lambda i: (i.created_at, i.id))

    # ── changes ──────────────────────────────────────────────────────────────────

    async def edit(self, item_id: str, arguments: Mapping[str, Any]) -> OutboxItem:
        """Replace the arguments a send will use (only while staged). They are checked
        against the tool's schema when the item is sent, where the tool is known."""
        edited = json_object(arguments, "the edited arguments")
        return await self._change(
            item_id, ("staged",), "only a staged item can be edited", edited_arguments=edited
        )

    async def start_sending(self, item_id: str) -> OutboxItem:
        """Claim the item for sending (staged → sending), before the tool runs: of two
        senders exactly one gets it, and an item is never sent twice."""
        return await self._change(
            item_id, ("staged",), "an item is sent at most once", status="sending"
        )

    async def mark_sent(self, item_id: str, content: str, *, is_error: bool) -> OutboxItem:
        """Record what the tool returned (sending → sent)."""
        return await self._change(
            item_id,
            ("sending",),
            "only an item being sent can be marked sent (start_sending first)",
            status="sent",
            result=OutboxResult(content=content, is_error=is_error),
        )

    async def mark_failed(self, item_id: str, reason: str) -> OutboxItem:
        """Record that sending went wrong (sending → failed): the tool crashed, or the
        sender was interrupted while it ran."""
        return await self._change(
            item_id,
            ("sending",),
            "only an item being sent can be marked failed (start_sending first)",
            status="failed",
            failure=reason,
        )

    async def reject(self, item_id: str, reason: str) -> OutboxItem:
        """Drop a staged item, saying why (staged → rejected); it is never sent."""
        if not reason:
            raise UsageError("say why the item is rejected (reason)")
        return await self._change(
            item_id,
            ("staged",),
            "only a staged item can be rejected",
            status="rejected",
            reject_reason=reason,
        )

    async def _change(
        self, item_id: str, allowed: tuple[OutboxStatus, ...], rule: str, **update: Any
    ) -> OutboxItem:
        if not _is_id(item_id):
            raise UnknownOutboxItem(item_id, self.bucket)

        def step(item: OutboxItem) -> OutboxItem:
            if item.status not in allowed:
                raise OutboxStatusError(item, f"{item.id} is {item.describe_status()}: {rule}")
            return item.model_copy(update={**update, "updated_at": self.bus.clock()})

        return await change(
            await self._bucket(),
            item_id,
            self._read,
            lambda: UnknownOutboxItem(item_id, self.bucket),
            step,
        )


def _is_id(key: str) -> bool:
    return key.startswith(f"{_PREFIX}-") and "/" not in key
