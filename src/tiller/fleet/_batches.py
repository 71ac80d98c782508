"""Batches: which runs belong to a batch, and whether it was cancelled, in the
`tiller-fleet-batches` bucket.

- `<batch>/runs/<run_id>`: `{batch, run_id, added_at}`, written when the run is
  submitted (before its job is enqueued, so a member is never missing from the list);
- `<batch>/cancelled`: `{batch, reason, requested_at}`, the first request stands until
  the batch is reopened (`reopen`: the record is removed).

A batch's runs are listed by the prefix `<batch>/runs/`: the bucket holds batch records
only, never a run's own, so listing a batch reads that batch and no run's checkpoint.
"""

from __future__ import annotations

from typing import ClassVar

from ..errors import UsageError
from ..store import Bus, KeyValue, Record, create_or_get, decode_record, encode_record

__all__ = ["BATCHES_BUCKET", "BatchCancelled", "BatchStore"]

#: The batches bucket's default name.
BATCHES_BUCKET = "tiller-fleet-batches"


class _Member(Record):
    ledger_kind: ClassVar[str] = "fleet_batch"

    batch: str
    run_id: str
    added_at: float


class BatchCancelled(Record):
    """A batch's cancellation request: its runs not started yet are never started."""

    ledger_kind: ClassVar[str] = "fleet_batch"

    batch: str
    reason: str
    requested_at: float


def check_batch(batch: str) -> str:
    if not isinstance(batch, str) or not batch or "/" in batch:
        raise UsageError(f"a batch id must be non-empty text without '/', not {batch!r}")
    return batch


class BatchStore:
    """The batches bucket of `bus` (see the module docstring)."""

    def __init__(self, bus: Bus, bucket: str = BATCHES_BUCKET) -> None:
        self.bus = bus
        self.bucket = bucket
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self.bus.kv(self.bucket)
        return self._kv

    async def add(self, batch: str, run_id: str) -> None:
        """`run_id` is one of `batch`'s runs (adding it again changes nothing)."""
        key = f"{check_batch(batch)}/runs/{run_id}"
        record = _Member(batch=batch, run_id=run_id, added_at=self.bus.clock())
        await create_or_get(await self._bucket(), key, encode_record(record))

    async def runs(self, batch: str) -> list[str]:
        """The batch's run ids, sorted."""
        prefix = f"{check_batch(batch)}/runs/"
        keys = await (await self._bucket()).keys(prefix)
        return [key[len(prefix) :] for key in keys]

    async def cancel(self, batch: str, reason: str) -> BatchCancelled:
        """Record the batch as cancelled; returns the request that stands (the first)."""
        key = f"{check_batch(batch)}/cancelled"
        record = BatchCancelled(batch=batch, reason=reason, requested_at=self.bus.clock())
        existing = await create_or_get(await self._bucket(), key, encode_record(record))
        if existing is None:
            return record
        return decode_record(BatchCancelled, self.bucket, key, existing)

    async def reopen(self, batch: str) -> None:
        """Lift the batch's cancellation (nothing to lift: nothing happens)."""
        await (await self._bucket()).delete(f"{check_batch(batch)}/cancelled")

    async def cancelled(self, batch: str) -> BatchCancelled | None:
        """The batch's cancellation request, or None."""
        key = f"{check_batch(batch)}/cancelled"
        entry = await (await self._bucket()).get(key)
        return (
            None if entry is None else decode_record(BatchCancelled, self.bucket, key, entry.value)
        )
