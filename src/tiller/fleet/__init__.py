"""Fleets: runs queued on the Bus's job queue and run by worker processes, in batches that
share a budget and can be cancelled together (issue 16).

This package sits above `tiller.loop`, beside `tiller.ops`. So far: workspace specs, where
a queued run's files come from on whichever worker claims it (`_workspace`), and a batch's
shared budget (`BatchBudget`: reserve before a run starts, settle when it ends).
"""

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
from ._limit_records import MalformedLimitRecord
from ._limited_model import LimitedModel

# For tiller's own packages (not API; not in __all__).
from ._limits import LIMITS_BUCKET as LIMITS_BUCKET
from ._limits import FleetLimits, ModelLimit, provider_of
from ._workspace import (
    MAX_TEXT_DIFF_BYTES,
    WORKSPACES_BUCKET,
    FileChange,
    FixtureNotFound,
    FixtureTooLarge,
    MalformedWorkspace,
    MaterializeFailed,
    NoWorkspaceDiff,
    SharedWorkspace,
    SnapshotWorkspace,
    WorkspaceDiff,
    WorkspaceError,
    WorkspaceFromNewerTiller,
    WorkspaceNotStored,
    WorkspacePathMissing,
    WorkspaceSpec,
    load_diff,
    materialize,
    snapshot_workspace,
    workspace_diff,
)

__all__ = [
    "BATCH_BUDGET_BUCKET",
    "DEFAULT_CHUNK_RUNS",
    "MAX_TEXT_DIFF_BYTES",
    "WORKSPACES_BUCKET",
    "BatchAmounts",
    "BatchBudget",
    "BatchBudgetFromNewerTiller",
    "BatchBudgetStatus",
    "BatchLimitsDiffer",
    "FileChange",
    "FixtureNotFound",
    "FixtureTooLarge",
    "FleetLimits",
    "LimitedModel",
    "MalformedBatchBudget",
    "MalformedLimitRecord",
    "MalformedWorkspace",
    "MaterializeFailed",
    "ModelLimit",
    "NoWorkspaceDiff",
    "SharedWorkspace",
    "SnapshotWorkspace",
    "UnknownBatch",
    "UnknownReservation",
    "WorkspaceDiff",
    "WorkspaceError",
    "WorkspaceFromNewerTiller",
    "WorkspaceNotStored",
    "WorkspacePathMissing",
    "WorkspaceSpec",
    "load_diff",
    "materialize",
    "provider_of",
    "snapshot_workspace",
    "workspace_diff",
]
