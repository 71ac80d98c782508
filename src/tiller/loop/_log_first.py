"""`LogBeforeCheckpoint`: a durable run's event log is written up to each checkpoint before
the checkpoint is.

A run's AG-UI stream goes to its event log in batches, and a short run's whole stream can
sit in one unwritten batch. If its worker is killed after a checkpoint and before that
batch is written, the checkpoint says more happened than the log shows: a run that had
finished came back with no events at all, and a recovered one with a hole before its new
segment. Flushing the log first makes every checkpoint imply a log at least as complete,
at one log write a step (the batch size still bounds writes within a step).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..state import RunState
from ..store import EventLogWriter, Lease, RunDurability
from ..store import Status as CheckpointStatus

__all__ = ["LogBeforeCheckpoint"]


class LogBeforeCheckpoint:
    """`durability`, whose `save` first waits for `log`'s buffered events to be written."""

    def __init__(self, durability: RunDurability, log: EventLogWriter) -> None:
        self._durability = durability
        self._log = log

    async def take_lease(self, run_id: str, owner: str, ttl: float) -> Lease:
        return await self._durability.take_lease(run_id, owner, ttl)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        return await self._durability.renew_lease(lease, ttl)

    async def check_lease(self, run_id: str) -> None:
        await self._durability.check_lease(run_id)

    async def release_lease(self, lease: Lease) -> None:
        await self._durability.release_lease(lease)

    async def save(self, state: RunState, status: CheckpointStatus) -> None:
        await self._log.wait()  # a batch that fails is logged and counted, not raised
        await self._durability.save(state, status)

    async def hold_calls(
        self,
        state: RunState,
        *,
        reason: str,
        risks: Mapping[str, str],
        reasons: Mapping[str, str],
    ) -> None:
        await self._durability.hold_calls(state, reason=reason, risks=risks, reasons=reasons)

    async def call_started(self, run_id: str, call_id: str, *, idempotent: bool = False) -> None:
        await self._durability.call_started(run_id, call_id, idempotent=idempotent)

    async def call_completed(
        self, run_id: str, call_id: str, content: str, *, is_error: bool
    ) -> None:
        await self._durability.call_completed(run_id, call_id, content, is_error=is_error)

    async def completed_calls(self, run_id: str) -> dict[str, tuple[str, bool]]:
        return await self._durability.completed_calls(run_id)

    async def rerun_calls(self, run_id: str) -> frozenset[str]:
        return await self._durability.rerun_calls(run_id)
