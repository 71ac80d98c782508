"""Fleets: runs queued on the Bus's job queue and run by worker processes, in batches that
share a budget and can be cancelled together (issue 16).

This package sits above `tiller.loop`, beside `tiller.ops`: `Fleet` submits runs and
`Worker` runs them, each in the workspace its job names (`_workspace`: a shared path, or a
fixture snapshotted into the store and materialized per run), within its batch's shared
budget (`Fleet.create_batch`, `BatchBudget`: reserve before a run starts, settle when it
ends) and the fleet's limits (`Worker(limits=FleetLimits(...))`: run slots, per-model
calls and requests a minute, a 429's pause for every worker).
"""

from .. import _public
from ._batch_budget import (
    BATCH_BUDGET_BUCKET,
    DEFAULT_CHUNK_RUNS,
    BatchAmounts,
    BatchBudget,
    BatchBudgetFromNewerTiller,
    BatchBudgetStatus,
    BatchLimitsDiffer,
    MalformedBatchBudget,
    UnknownBatch,
    UnknownReservation,
)

# For tiller's own packages (not API; not in __all__): a run's share of a shared budget,
# which an eval's cases reserve from the eval's budget as a batch's runs do.
from ._batch_share import BatchShare as BatchShare
from ._batch_share import reserve_from as reserve_from
from ._batches import BATCHES_BUCKET, BatchCancelled, BatchStore
from ._drain import StepBoundary
from ._fleet import Fleet, FleetStatus
from ._guard import Deferred, RunGuard
from ._handle import WORKER_LOST, RunHandle
from ._job import JobBudget, JobPrice, MalformedJob, RunJob
from ._limit_records import MalformedLimitRecord
from ._limited_model import LimitedModel, limited_models

# For tiller's own packages (not API; not in __all__).
from ._limits import LIMITS_BUCKET as LIMITS_BUCKET
from ._limits import FleetLimits, ModelLimit, parse_model_limit, provider_of
from ._queue import RUN_QUEUE
from ._results import HELD, RESULTS_BUCKET, ResultStatus, ResultStore, RunOutcomeRecord
from ._worker import Worker
from ._worker_registry import WORKERS_BUCKET, WorkerInfo, WorkerRegistry
from ._workspace import (
    WORKSPACES_BUCKET,
    FixtureNotFound,
    FixtureTooLarge,
    MalformedWorkspace,
    MaterializeFailed,
    NoWorkspace,
    NoWorkspaceDiff,
    SharedWorkspace,
    SnapshotWorkspace,
    WorkspaceError,
    WorkspaceFromNewerTiller,
    WorkspaceNotStored,
    WorkspacePathMissing,
    WorkspaceSpec,
    materialize,
    snapshot_workspace,
)
from ._workspace_diff import (
    MAX_TEXT_DIFF_BYTES,
    FileChange,
    WorkspaceDiff,
    load_diff,
    workspace_diff,
)
from ._workspace_seam import LocalWorkspaces, WorkspaceProvider

__all__ = [
    "BATCHES_BUCKET",
    "BATCH_BUDGET_BUCKET",
    "DEFAULT_CHUNK_RUNS",
    "HELD",
    "MAX_TEXT_DIFF_BYTES",
    "RESULTS_BUCKET",
    "RUN_QUEUE",
    "WORKERS_BUCKET",
    "WORKER_LOST",
    "WORKSPACES_BUCKET",
    "BatchAmounts",
    "BatchBudget",
    "BatchBudgetFromNewerTiller",
    "BatchBudgetStatus",
    "BatchCancelled",
    "BatchLimitsDiffer",
    "BatchStore",
    "Deferred",
    "FileChange",
    "FixtureNotFound",
    "FixtureTooLarge",
    "Fleet",
    "FleetLimits",
    "FleetStatus",
    "JobBudget",
    "JobPrice",
    "LimitedModel",
    "LocalWorkspaces",
    "MalformedBatchBudget",
    "MalformedJob",
    "MalformedLimitRecord",
    "MalformedWorkspace",
    "MaterializeFailed",
    "ModelLimit",
    "NoWorkspace",
    "NoWorkspaceDiff",
    "ResultStatus",
    "ResultStore",
    "RunGuard",
    "RunHandle",
    "RunJob",
    "RunOutcomeRecord",
    "SharedWorkspace",
    "SnapshotWorkspace",
    "StepBoundary",
    "UnknownBatch",
    "UnknownReservation",
    "Worker",
    "WorkerInfo",
    "WorkerRegistry",
    "WorkspaceDiff",
    "WorkspaceError",
    "WorkspaceFromNewerTiller",
    "WorkspaceNotStored",
    "WorkspacePathMissing",
    "WorkspaceProvider",
    "WorkspaceSpec",
    "limited_models",
    "load_diff",
    "materialize",
    "parse_model_limit",
    "provider_of",
    "snapshot_workspace",
    "workspace_diff",
]

# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())
