"""`JobLeaseKeeper`: extends a claimed job's lease while its run goes.

Extended every third of the queue's lease. `JobLeaseLost` means the delivery no longer
holds the job (its lease lapsed: the worker hung, or the store was away), and another
worker may have it: the keeper stops, says so (`lost`) and calls `on_lost` once. The
worker then stops the run at its next step boundary (checkpoint `running`, run lease
released), so the job's new delivery recovers it from there instead of waiting on a run
lease this worker would go on renewing; if another worker took the run over first, the
run's own fencing (`LeaseLost`) stops it at its next durable write. Either way the worker
that lost the job neither writes its result nor acks it (`check()` before each).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from .._task_stop import stop_task
from ..store import Job, JobLeaseLost, JobQueue, StoreError

__all__ = ["JobLeaseKeeper"]

_logger = logging.getLogger(__name__)


class JobLeaseKeeper:
    """Keeps `job` claimed on `queue` until `stop()`."""

    def __init__(
        self, queue: JobQueue, job: Job, *, on_lost: Callable[[], None] | None = None
    ) -> None:
        self.queue = queue
        self.job = job
        self.lost: JobLeaseLost | None = None
        self._on_lost = on_lost
        self._task: asyncio.Task[None] | None = None

    def start(self) -> JobLeaseKeeper:
        self._task = asyncio.get_running_loop().create_task(
            self._keep(), name=f"tiller-job-lease {self.job.id}"
        )
        return self

    async def _keep(self) -> None:
        while self.lost is None:
            await asyncio.sleep(self.queue.lease / 3)
            await self._extend()

    async def _extend(self) -> None:
        try:
            self.job = await self.queue.extend(self.job)
        except JobLeaseLost as exc:
            self.lost = exc
            _logger.warning("job %s: %s; its result is another worker's", self.job.id, exc)
            if self._on_lost is not None:
                self._on_lost()
        except StoreError as exc:  # an outage: the next round tries again
            _logger.warning("job %s: cannot extend its lease: %s", self.job.id, exc)

    async def check(self) -> Job:
        """Extend once more, now: the delivery still holds the job (`JobLeaseLost` if
        not). Called before the result is written, then the job settled."""
        if self.lost is None:
            await self._extend()
        if self.lost is not None:
            raise self.lost
        return self.job

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await stop_task(task)
