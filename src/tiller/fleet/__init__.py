"""Fleets: runs queued on the store's job queue and run by worker processes (issue 16).

`Fleet(bus).submit(agent_ref, prompt, ...)` queues a run and returns its `RunHandle`
(`result()`, `events()`, `cancel()`, `steer()`); `Worker(bus).run()` claims run jobs and
runs each as a durable run (checkpoint every step, call journal, event log), so a run
survives its worker: drained, it is continued by another at once; killed, once its lease
lapses. Results land in the `tiller-run-results` bucket, one record per run.
"""

from .. import _public
from ._batches import BATCHES_BUCKET, BatchCancelled, BatchStore
from ._drain import StepBoundary
from ._fleet import Fleet, FleetStatus
from ._guard import Deferred, RunGuard
from ._handle import WORKER_LOST, RunHandle
from ._job import JobBudget, MalformedJob, NoWorkspace, RunJob, SharedWorkspace, WorkspaceSpec
from ._queue import RUN_QUEUE
from ._results import HELD, RESULTS_BUCKET, ResultStatus, ResultStore, RunOutcomeRecord
from ._worker import Worker
from ._worker_registry import WORKERS_BUCKET, WorkerInfo, WorkerRegistry
from ._workspace_seam import LocalWorkspaces, WorkspaceProvider

__all__ = [
    "BATCHES_BUCKET",
    "BatchCancelled",
    "BatchStore",
    "Deferred",
    "Fleet",
    "FleetStatus",
    "HELD",
    "JobBudget",
    "LocalWorkspaces",
    "MalformedJob",
    "NoWorkspace",
    "RESULTS_BUCKET",
    "RUN_QUEUE",
    "ResultStatus",
    "ResultStore",
    "RunGuard",
    "RunHandle",
    "RunJob",
    "RunOutcomeRecord",
    "SharedWorkspace",
    "StepBoundary",
    "WORKERS_BUCKET",
    "WORKER_LOST",
    "Worker",
    "WorkerInfo",
    "WorkerRegistry",
    "WorkspaceProvider",
    "WorkspaceSpec",
]

# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())
