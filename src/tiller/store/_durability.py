"""The durability port: what a running run needs of the store, and nothing else.

A durable run (one with a store and a checkpoint bucket) holds a lease while it runs,
checkpoints its `RunState` at every step boundary, records each tool call's start and
completion (law 5: a resume never runs a completed call again, and blocks on one that
started and never completed), and, when it suspends headless, holds the calls that wait
for a person as held-approval records. The loop reaches all of that through
`RunDurability`, so it knows no store module; `StoreDurability` is the implementation
over a `Bus` (`CheckpointStore` and `ApprovalStore` underneath).

Fencing (issue 16): `take_lease` takes the run's next lease epoch with the lease, and
every durable write of the run — checkpoint, call started / completed, held calls, and the
event log's batches (`check_lease`, which the event log writer calls before each batch) —
is refused with `LeaseLost` once another process took the run over (a higher epoch), and
writes nothing. After the first `LeaseLost` the port refuses every later write of the run
without asking the store (nor renews or releases the lease): the run stops, and what this
process wrote before the takeover is all it ever writes. How the epoch is kept and checked
is in `CheckpointStore`'s docstring (*Fencing*): a checkpoint and a call's completion are
one compare-and-set each on a revision the port already knows, with no read of the epoch.

Checkpoints are a base and step deltas (issue 19, `_checkpoint_steps`): `save` writes the
whole state at the run's first checkpoint here, at a suspension and the run's end, when the
history was rewritten, and once the deltas since outweigh the base; at every other step
boundary it writes only what changed, so a durable step costs what the step added, not
what the run holds.

The operations a person or an operator drives (approve, resume, recover, reconcile) are
`tiller.ops`; they read and write the same records through the stores themselves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol, TypeVar, runtime_checkable

from ..state import RunState
from ._approvals import ApprovalStore
from ._bus import Bus, Lease, RevisionConflict
from ._checkpoint_steps import StepDeltas
from ._checkpoints import DEFAULT_BUCKET, CheckpointStore, LeaseLost, Status

__all__ = ["RunDurability", "StoreDurability"]

#: What a durable write returns; `_fenced` passes it through.
T = TypeVar("T")


@runtime_checkable
class RunDurability(Protocol):
    """What a run needs of the store to survive its process (see the module docstring).

    Every method may raise `StoreError`; the loop lets it end the run, except when it
    gives the lease back (a lease that cannot be released lapses by itself)."""

    async def take_lease(self, run_id: str, owner: str, ttl: float) -> Lease:
        """Claim "`owner` is running this run" for `ttl` seconds (`RunStillRunning` if
        another process holds it). The lease carries the run's new `epoch`, which fences
        every write of the run by an earlier holder."""
        ...

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend the lease by `ttl` seconds from now; returns the renewed lease
        (`LeaseLost` if another process took the run over: stop renewing)."""
        ...

    async def check_lease(self, run_id: str) -> None:
        """`LeaseLost` if another process took the run over since this one took its
        lease: a write about to be made for the run (an event log batch) must not be."""
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

    async def call_started(self, run_id: str, call_id: str, *, idempotent: bool = False) -> None:
        """The call is about to run (from now on, until completed, it is uncertain);
        `idempotent`: its tool declared itself so, and recovery may run it again."""
        ...

    async def call_completed(
        self, run_id: str, call_id: str, content: str, *, is_error: bool
    ) -> None:
        """The call returned `content` (or was answered without running)."""
        ...

    async def completed_calls(self, run_id: str) -> dict[str, tuple[str, bool]]:
        """The run's completed calls: call id -> (content, is_error)."""
        ...

    async def rerun_calls(self, run_id: str) -> frozenset[str]:
        """The run's calls that recovery decided to run again after an interrupted
        attempt (their tools are idempotent), by call id."""
        ...


class StoreDurability:
    """`RunDurability` on a `Bus`: checkpoints and call records in `bucket`, held calls in
    the store's approvals bucket."""

    def __init__(self, bus: Bus, bucket: str = DEFAULT_BUCKET) -> None:
        self.bus = bus
        self.bucket = bucket
        self._checkpoints = CheckpointStore(bus, bucket)
        #: The epoch this process took for each run whose lease it took (run id -> epoch);
        #: writes of a run not in it are not fenced (it never held a lease here).
        self._epochs: dict[str, int] = {}
        #: Runs taken over by another process: every later write is refused with this.
        self._lost: dict[str, LeaseLost] = {}
        #: What this port wrote of each run since its last whole checkpoint of it.
        self._steps: dict[str, StepDeltas] = {}

    def _run_of(self, lease: Lease) -> str:
        return lease.key.removesuffix("/lease")

    async def _fenced(self, run_id: str, write: Callable[[int | None], Awaitable[T]]) -> T:
        """Run `write(epoch)` for `run_id` (the epoch None: the run is not fenced here),
        remembering a `LeaseLost` it raises."""
        lost = self._lost.get(run_id)
        if lost is not None:
            raise lost
        try:
            return await write(self._epochs.get(run_id))
        except LeaseLost as exc:
            self._lost[run_id] = exc
            raise

    async def take_lease(self, run_id: str, owner: str, ttl: float) -> Lease:
        lease = await self._checkpoints.hold(run_id, owner, ttl)
        epoch = await self._checkpoints.take_epoch(run_id, owner)
        self._epochs[run_id] = epoch
        self._lost.pop(run_id, None)
        return dataclasses.replace(lease, epoch=epoch)

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        run_id = self._run_of(lease)

        async def renew(epoch: int | None) -> Lease:
            try:
                return await self._checkpoints.renew_hold(lease, ttl)
            except RevisionConflict:
                # Someone wrote the lease: a takeover (say which), or a forced break.
                if epoch is not None:
                    await self._checkpoints.check_epoch(run_id, epoch)
                raise

        return await self._fenced(run_id, renew)

    async def check_lease(self, run_id: str) -> None:
        async def check(epoch: int | None) -> None:
            if epoch is not None:
                await self._checkpoints.check_epoch(run_id, epoch)

        await self._fenced(run_id, check)

    async def release_lease(self, lease: Lease) -> None:
        if self._run_of(lease) in self._lost:
            return  # the lease is another process's now: nothing of it is ours to touch
        await self._checkpoints.release_hold(lease)

    async def save(self, state: RunState, status: Status) -> None:
        run_id = state.run_id
        steps = self._steps.get(run_id)
        pending = steps.delta(state) if steps is not None and status == "running" else None

        async def save(epoch: int | None) -> None:
            if steps is not None and pending is not None:
                segment, first, deltas = steps.next_segment(pending.data)
                await self._checkpoints.save_steps(
                    run_id, steps.gen, segment, deltas, first=first, epoch=epoch
                )
                steps.wrote(pending, segment, first, deltas)
                return
            # Fenced by the checkpoint's revision (kept from this process's last write, or
            # from taking the epoch): one compare-and-set, no epoch read.
            checkpoints = self._checkpoints
            await checkpoints.save(state, status, epoch=epoch, read_epoch=False)
            self._steps[run_id] = StepDeltas.after_base(
                state, checkpoints.last_gen, checkpoints.last_size
            )

        await self._fenced(run_id, save)

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
        async def hold(epoch: int | None) -> None:
            # Held-approval records are keyed by the run and the call, and the run's
            # fenced checkpoint went just before: the epoch is checked, not stored in them.
            if epoch is not None:
                await self._checkpoints.check_epoch(state.run_id, epoch)
            await ApprovalStore(self.bus).hold_interrupts(
                state, reason=reason, risks=risks, reasons=reasons
            )

        await self._fenced(state.run_id, hold)

    async def call_started(self, run_id: str, call_id: str, *, idempotent: bool = False) -> None:
        async def started(epoch: int | None) -> None:
            await self._checkpoints.call_started(
                run_id, call_id, epoch=epoch, idempotent=idempotent
            )

        await self._fenced(run_id, started)

    async def call_completed(
        self, run_id: str, call_id: str, content: str, *, is_error: bool
    ) -> None:
        async def completed(epoch: int | None) -> None:
            # Fenced by the revision of the started record (a takeover stamps it).
            await self._checkpoints.call_completed(
                run_id, call_id, content, is_error=is_error, epoch=epoch, read_epoch=False
            )

        await self._fenced(run_id, completed)

    async def completed_calls(self, run_id: str) -> dict[str, tuple[str, bool]]:
        logs = await self._checkpoints.calls(run_id)
        return {
            call_id: (log.content or "", log.is_error)
            for call_id, log in logs.items()
            if log.status == "completed"
        }

    async def rerun_calls(self, run_id: str) -> frozenset[str]:
        logs = await self._checkpoints.calls(run_id)
        return frozenset(call_id for call_id, log in logs.items() if log.status == "rerun")

    def __repr__(self) -> str:
        return f"StoreDurability(bucket={self.bucket!r})"
