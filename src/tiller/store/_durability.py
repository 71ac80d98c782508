"""The durability port: what a running run needs of the store, and nothing else.

A durable run (one with a store and a checkpoint bucket) holds a lease while it runs,
checkpoints its `RunState` at every step boundary, records each tool call's start and
completion (law 5: a resume never runs a completed call again, and blocks on one that
started and never completed), and, when it suspends headless, holds the calls that wait
for a person as held-approval records. The loop reaches all of that through
`RunDurability`, so it knows no store module; `StoreDurability` is the implementation
over a `Bus` (`CheckpointStore` and `ApprovalStore` underneath).

The operations a person or an operator drives (approve, resume, recover, reconcile) are
`tiller.ops`; they read and write the same records through the stores themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from ..state import RunState
from ._approvals import ApprovalStore
from ._bus import Bus, Lease
from ._checkpoints import DEFAULT_BUCKET, CheckpointStore, Status

__all__ = ["RunDurability", "StoreDurability"]


@runtime_checkable
class RunDurability(Protocol):
    """What a run needs of the store to survive its process (see the module docstring).

    Every method may raise `StoreError`; the loop lets it end the run, except when it
    gives the lease back (a lease that cannot be released lapses by itself)."""

    async def take_lease(self, run_id: str, owner: str, ttl: float) -> Lease:
        """Claim "`owner` is running this run" for `ttl` seconds (`RunStillRunning` if
        another process holds it)."""
        ...

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend the lease by `ttl` seconds from now; returns the renewed lease."""
        ...

    async def release_lease(self, lease: Lease) -> None:
        """Give the lease back: the run is no longer running here."""
        ...

    async def save(self, state: RunState, status: Status) -> None:
        """Checkpoint the run: its state at this step boundary, with its status."""
        ...

    async def hold_calls(
        self,
        state: RunState,
        *,
        reason: str,
        risks: Mapping[str, str],
        reasons: Mapping[str, str],
    ) -> None:
        """The run suspended on calls that wait for a person: hold each (its `tool_call`
        interrupts) where `tiller approve` and the console find it. `risks` and
        `reasons` give a call's risk class and why it waits, by call id (else `reason`)."""
        ...

    async def call_started(self, run_id: str, call_id: str) -> None:
        """The call is about to run (from now on, until completed, it is uncertain)."""
        ...

    async def call_completed(
        self, run_id: str, call_id: str, content: str, *, is_error: bool
    ) -> None:
        """The call returned `content` (or was answered without running)."""
        ...

    async def completed_calls(self, run_id: str) -> dict[str, tuple[str, bool]]:
        """The run's completed calls: call id -> (content, is_error)."""
        ...


class StoreDurability:
    """`RunDurability` on a `Bus`: checkpoints and call records in `bucket`, held calls in
    the store's approvals bucket."""

    def __init__(self, bus: Bus, bucket: str = DEFAULT_BUCKET) -> None:
        self.bus = bus
        self.bucket = bucket
        self._checkpoints = CheckpointStore(bus, bucket)

    async def take_lease(self, run_id: str, owner: str, ttl: float) -> Lease:
        return await self._checkpoints.hold(run_id, owner, ttl)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        return await self._checkpoints.renew_hold(lease, ttl)

    async def release_lease(self, lease: Lease) -> None:
        await self._checkpoints.release_hold(lease)

    async def save(self, state: RunState, status: Status) -> None:
        await self._checkpoints.save(state, status)

    async def hold_calls(
        self,
        state: RunState,
        *,
        reason: str,
        risks: Mapping[str, str],
        reasons: Mapping[str, str],
    ) -> None:
        # After the checkpoint's save: `tiller approve` checks the run is suspended on
        # the call before it decides.
        await ApprovalStore(self.bus).hold_interrupts(
            state, reason=reason, risks=risks, reasons=reasons
        )

    async def call_started(self, run_id: str, call_id: str) -> None:
        await self._checkpoints.call_started(run_id, call_id)

    async def call_completed(
        self, run_id: str, call_id: str, content: str, *, is_error: bool
    ) -> None:
        await self._checkpoints.call_completed(run_id, call_id, content, is_error=is_error)

    async def completed_calls(self, run_id: str) -> dict[str, tuple[str, bool]]:
        logs = await self._checkpoints.calls(run_id)
        return {
            call_id: (log.content or "", log.is_error)
            for call_id, log in logs.items()
            if log.status == "completed"
        }

    def __repr__(self) -> str:
        return f"StoreDurability(bucket={self.bucket!r})"
