"""`Fleet`: submit runs to a fleet's queue, and watch, cancel and count them.

```python
fleet = Fleet(bus)
await fleet.create_batch("nightly", max_steps=5_000)     # optional: a shared budget
handle = await fleet.submit("myapp.agents:coder", "fix the failing test", batch="nightly")
record = await handle.result()
await fleet.cancel_batch("nightly")
await fleet.reopen_batch("nightly")                       # to go on with it after all
print(await fleet.status())
```

A run's job id is its run id, so submitting a run id twice makes one job (and one run).
A batch's membership is recorded before its job is enqueued, so `cancel_batch` reaches
every run submitted before it: the runs not started yet are never started (a worker that
claims one writes a `cancelled` result), and those running are asked to stop through
`ControlStore`.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from ..errors import UsageError
from ..ops import decided_records
from ..store import (
    Bus,
    CheckpointStore,
    ControlStore,
    JobQueue,
    QueueDepth,
    QueueOptions,
)
from ._batch_budget import BatchBudget
from ._batches import BatchStore
from ._handle import RunHandle
from ._job import (
    JobBudget,
    NoWorkspace,
    RunJob,
    SharedWorkspace,
    WorkspaceSpec,
    check_run_id,
    problems,
)
from ._queue import RUN_QUEUE
from ._results import ResultStore
from ._worker_registry import WorkerInfo, WorkerRegistry
from ._workspace import snapshot_workspace

__all__ = ["Fleet", "FleetStatus"]


@dataclass(frozen=True, slots=True)
class FleetStatus:
    """The fleet now: its live workers, the queue's depth, its dead letters' count, and
    the queue's lease and delivery limit (as every worker applies them)."""

    workers: list[WorkerInfo]
    depth: QueueDepth
    dead_letters: int
    options: QueueOptions

    @property
    def in_flight(self) -> int:
        """Jobs claimed now."""
        return self.depth.in_flight


class Fleet:
    """Submits to and inspects one run queue of `bus` (see the module docstring).

    `lease` and `max_deliver` are the queue's (`Bus.queue`): None (the default) keeps
    what the queue has, as its workers set it (`Worker(lease=)`, `tiller worker
    --lease`); a value sets it for the queue, for every worker too."""

    def __init__(
        self,
        bus: Bus,
        queue: str = RUN_QUEUE,
        *,
        lease: float | None = None,
        max_deliver: int | None = None,
    ) -> None:
        self.bus = bus
        self.queue_name = queue
        self.lease = lease
        self.max_deliver = max_deliver
        self.batches = BatchStore(bus)
        self._control = ControlStore(bus)

    async def submit(  # noqa: PLR0913 (the run job's fields, keyword-only: each is API)
        self,
        agent: str,
        prompt: str,
        *,
        workspace: str | os.PathLike[str] | WorkspaceSpec | None = None,
        snapshot: bool = False,
        budget: JobBudget | None = None,
        run_id: str | None = None,
        batch: str | None = None,
        model: str | None = None,
        thread_id: str | None = None,
        traceparent: str | None = None,
    ) -> RunHandle:
        """Queue a run of `agent` (`"module:attr"`) on `prompt`.

        `workspace` is a directory path every worker shares (`SharedWorkspace`), or with
        `snapshot=True` a fixture directory here, snapshotted into the store now
        (`snapshot_workspace`) and materialized privately for the run on whichever worker
        takes it, its final diff stored with the result (`RunHandle.diff`); or a workspace
        spec (a `SnapshotWorkspace` made once serves many runs); None: a private temporary
        directory. A batch with a shared budget is made first (`create_batch`).
        `thread_id` is the thread the run belongs to (default: its run id)."""
        if not isinstance(agent, str) or ":" not in agent:
            raise UsageError(f"agent must be a 'module:attr' reference, not {agent!r}")
        run_id = check_run_id(run_id) if run_id is not None else f"run-{uuid.uuid4().hex}"
        spec: WorkspaceSpec
        if isinstance(workspace, str | os.PathLike):
            spec = (
                await snapshot_workspace(self.bus, workspace)
                if snapshot
                else SharedWorkspace(path=_absolute(os.fspath(workspace)))
            )
        elif snapshot:
            raise UsageError(
                "snapshot=True snapshots a fixture directory: give workspace= its path "
                f"(not {workspace!r})"
            )
        elif workspace is None:
            spec = NoWorkspace()
        else:
            spec = workspace
        try:
            job = RunJob(
                run_id=run_id,
                agent=agent,
                model=model,
                prompt=prompt,
                thread_id=thread_id,
                workspace=spec,
                budget=budget,
                batch=batch,
                submitted_at=self.bus.clock(),
                traceparent=traceparent,
            )
        except ValidationError as exc:
            raise UsageError(f"cannot submit run {run_id!r}: {problems(exc)}") from None
        if batch is not None:
            await self.batches.add(batch, run_id)  # before the job: cancel_batch sees it
        await (await self._queue()).enqueue(job.encode(), job_id=run_id)
        return self.handle(run_id)

    async def create_batch(
        self,
        batch: str,
        *,
        max_steps: int | None = None,
        max_output_tokens: int | None = None,
        max_cost_usd: float | None = None,
    ) -> BatchBudget:
        """Give `batch` a budget its runs share (None: that dimension is unlimited); make
        it before submitting the batch's runs. Each run reserves its share before it
        starts (capped at its own `budget=`, else a tenth of what is left) and settles when
        it ends, so the batch never spends more than this on any number of workers; a run
        that finds nothing left never starts, and its result is `stopped` with the budget
        stop cause. Creating it again with the same limits is a no-op; other limits raise
        `BatchLimitsDiffer`. `budget.status()` says what is reserved, spent and left."""
        return await BatchBudget.create(
            self.bus,
            batch,
            max_steps=max_steps,
            max_output_tokens=max_output_tokens,
            max_cost_usd=max_cost_usd,
        )

    def handle(self, run_id: str) -> RunHandle:
        """The handle of a run submitted before (by this process or another)."""
        return RunHandle(self.bus, run_id)

    async def continue_run(self, run_id: str) -> str:
        """Queue the continuation of a suspended run whose held calls are all decided
        (`tiller.ops.approve` / `deny`); returns its job id, `<run_id>.continue.<n>`
        (`n` is the suspended checkpoint's revision, so two people enqueueing the same
        continuation make one job). `UsageError` while a held call waits. It works in
        the workspace its held result record names (the one the run started in)."""
        check_run_id(run_id)  # only a fleet run id has continuation job ids
        await decided_records(self.bus, run_id)  # every held call decided, or say which
        checkpoint = await CheckpointStore(self.bus).load(run_id)
        # The run goes on in its workspace, within its batch (its held result says which).
        held = await ResultStore(self.bus).get(run_id)
        job = RunJob(
            kind="continue",
            run_id=run_id,
            agent=checkpoint.state.agent_ref,
            model=checkpoint.state.model_spec,
            workspace=held.workspace if held is not None else NoWorkspace(),
            batch=held.batch if held is not None else None,
            submitted_at=self.bus.clock(),
        )
        job_id = f"{run_id}.continue.{checkpoint.revision}"
        await (await self._queue()).enqueue(job.encode(), job_id=job_id)
        return job_id

    async def cancel_batch(self, batch: str, reason: str = "its batch was cancelled") -> list[str]:
        """Cancel every run of `batch` (see the module docstring); returns their ids."""
        await self.batches.cancel(batch, reason)
        runs = await self.batches.runs(batch)
        for run_id in runs:
            await self._control.request_cancel(run_id, reason)
        return runs

    async def reopen_batch(self, batch: str) -> None:
        """Lift `batch`'s cancellation, for a submitter that goes on with it (an eval
        resumed after a cancel): its runs submitted from now on start, and so do those
        still queued from before (a worker that claims one runs it, within the batch's
        budget). A run the cancel reached keeps its `cancelled` result: submit it again
        under a new run id. Reopening a batch that is not cancelled changes nothing."""
        await self.batches.reopen(batch)

    async def status(self) -> FleetStatus:
        queue = await self._queue()
        return FleetStatus(
            workers=await WorkerRegistry(self.bus).live(),
            depth=await queue.depth(),
            dead_letters=len(await queue.dead_letters()),
            options=await queue.options(),
        )

    async def _queue(self) -> JobQueue:
        return await self.bus.queue(self.queue_name, lease=self.lease, max_deliver=self.max_deliver)


def _absolute(path: str) -> str:
    """`path` made absolute here: a relative one would name another directory on each
    worker (no I/O: the current directory is the process's, read once)."""
    return str(Path(path).absolute())
