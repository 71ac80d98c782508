"""`Fleet`: submit runs to a fleet's queue, and watch, cancel and count them.

```python
fleet = Fleet(bus)
handle = await fleet.submit("myapp.agents:coder", "fix the failing test", batch="nightly")
record = await handle.result()
await fleet.cancel_batch("nightly")
print(await fleet.status())
```

A run's job id is its run id, so submitting a run id twice makes one job (and one run).
A batch's membership is recorded before its job is enqueued, so `cancel_batch` reaches
every run submitted before it: the runs not started yet are never started (a worker that
claims one writes a `cancelled` result), and those running are asked to stop through
`ControlStore`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from ..errors import UsageError
from ..ops import decided_records
from ..store import Bus, CheckpointStore, ControlStore, JobQueue, QueueDepth
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
from ._worker_registry import WorkerInfo, WorkerRegistry

__all__ = ["Fleet", "FleetStatus"]


@dataclass(frozen=True, slots=True)
class FleetStatus:
    """The fleet now: its live workers, the queue's depth, its dead letters' count."""

    workers: list[WorkerInfo]
    depth: QueueDepth
    dead_letters: int

    @property
    def in_flight(self) -> int:
        """Jobs claimed now."""
        return self.depth.in_flight


class Fleet:
    """Submits to and inspects one run queue of `bus` (see the module docstring).

    `lease` is the queue's job lease: give the workers' (`Worker(lease=)`, `tiller worker
    --lease`). On NATS the lease is the queue consumer's, set by the last process to open
    the queue, so a submitter with another lease would change the workers' too."""

    def __init__(self, bus: Bus, queue: str = RUN_QUEUE, *, lease: float = 30.0) -> None:
        self.bus = bus
        self.queue_name = queue
        self.lease = lease
        self.batches = BatchStore(bus)
        self._control = ControlStore(bus)

    async def submit(
        self,
        agent: str,
        prompt: str,
        *,
        workspace: str | WorkspaceSpec | None = None,
        budget: JobBudget | None = None,
        run_id: str | None = None,
        batch: str | None = None,
        model: str | None = None,
    ) -> RunHandle:
        """Queue a run of `agent` (`"module:attr"`) on `prompt`; `workspace` is a path
        every worker shares, or a workspace spec (None: a private temporary directory)."""
        if not isinstance(agent, str) or ":" not in agent:
            raise UsageError(f"agent must be a 'module:attr' reference, not {agent!r}")
        run_id = check_run_id(run_id) if run_id is not None else f"run-{uuid.uuid4().hex}"
        spec: WorkspaceSpec
        if workspace is None:
            spec = NoWorkspace()
        elif isinstance(workspace, str):
            spec = SharedWorkspace(path=_absolute(workspace))
        else:
            spec = workspace
        try:
            job = RunJob(
                run_id=run_id,
                agent=agent,
                model=model,
                prompt=prompt,
                workspace=spec,
                budget=budget,
                batch=batch,
                submitted_at=self.bus.clock(),
            )
        except ValidationError as exc:
            raise UsageError(f"cannot submit run {run_id!r}: {problems(exc)}") from None
        if batch is not None:
            await self.batches.add(batch, run_id)  # before the job: cancel_batch sees it
        await (await self._queue()).enqueue(job.encode(), job_id=run_id)
        return self.handle(run_id)

    def handle(self, run_id: str) -> RunHandle:
        """The handle of a run submitted before (by this process or another)."""
        return RunHandle(self.bus, run_id)

    async def continue_run(self, run_id: str) -> str:
        """Queue the continuation of a suspended run whose held calls are all decided
        (`tiller.ops.approve` / `deny`); returns its job id, `<run_id>.continue.<n>`
        (`n` is the suspended checkpoint's revision, so two people enqueueing the same
        continuation make one job). `UsageError` while a held call waits."""
        check_run_id(run_id)  # only a fleet run id has continuation job ids
        await decided_records(self.bus, run_id)  # every held call decided, or say which
        checkpoint = await CheckpointStore(self.bus).load(run_id)
        job = RunJob(
            kind="continue",
            run_id=run_id,
            agent=checkpoint.state.agent_ref,
            model=checkpoint.state.model_spec,
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

    async def status(self) -> FleetStatus:
        queue = await self._queue()
        return FleetStatus(
            workers=await WorkerRegistry(self.bus).live(),
            depth=await queue.depth(),
            dead_letters=len(await queue.dead_letters()),
        )

    async def _queue(self) -> JobQueue:
        return await self.bus.queue(self.queue_name, lease=self.lease)


def _absolute(path: str) -> str:
    """`path` made absolute here: a relative one would name another directory on each
    worker (no I/O: the current directory is the process's, read once)."""
    return str(Path(path).absolute())
