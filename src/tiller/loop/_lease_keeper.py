"""`LeaseKeeper`: renews a durable run's lease while the run lasts, step or no step.

The lease tells a recovery (`tiller runs resume`) and a server's followers that a process
is running the run. Renewed only at step boundaries, it lapses during any step longer
than its time to live (a long build, a slow model), and a live run looks dead. So it is
renewed on its own schedule, a third of the time to live, from a task of its own.

When another process took the run over (`LeaseLost`: its epoch is newer), the keeper stops
renewing for good (`lost` says why): the lease is that process's now. The run itself stops
at its next durable write, which the durability port refuses the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid

from .._task_stop import stop_task
from ..store import Lease, LeaseLost, RunDurability, StoreError

__all__ = ["LeaseKeeper", "lease_owner"]

_logger = logging.getLogger(__name__)


class LeaseKeeper:
    """Keeps `lease` alive through `durability`; `stop()` returns the latest one."""

    def __init__(self, durability: RunDurability, lease: Lease, ttl: float) -> None:
        self._durability = durability
        self.lease = lease
        self._ttl = ttl
        self._task: asyncio.Task[None] | None = None
        #: Set when another process took the run over: the keeper stopped renewing.
        self.lost: LeaseLost | None = None

    def start(self) -> LeaseKeeper:
        self._task = asyncio.get_running_loop().create_task(
            self._keep(), name=f"tiller-lease {self.lease.key}"
        )
        return self

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self._ttl / 3)
            try:
                self.lease = await self._durability.renew_lease(self.lease, self._ttl)
            except LeaseLost as exc:  # taken over: renewing would fight the new holder
                self.lost = exc
                _logger.warning("stopped renewing the lease %s: %s", self.lease.key, exc)
                return
            except StoreError as exc:  # an outage, or the lease was broken (--force)
                _logger.warning("cannot renew the lease %s: %s", self.lease.key, exc)

    async def stop(self) -> Lease:
        """Stop renewing (the caller releases the lease). A cancellation of the caller
        propagates once the renewing has ended; `lease` is then the one to release."""
        task, self._task = self._task, None
        if task is not None:
            await stop_task(task)
        return self.lease

    async def release(self) -> None:
        """Stop renewing and give the lease back (one the store cannot take back now
        lapses after its time to live). A cancellation of the caller while the renewing
        stops is raised after the lease is given back: a recovery elsewhere need not
        wait it out."""
        try:
            await self.stop()
        finally:
            with contextlib.suppress(StoreError):
                await self._durability.release_lease(self.lease)


def lease_owner() -> str:
    """Who holds a run's lease: enough for a person to find the process."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
