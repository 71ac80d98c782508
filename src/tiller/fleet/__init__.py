"""Fleets: runs queued on the Bus's job queue and run by worker processes (issue 16).

This package sits above `tiller.loop`, beside `tiller.ops`. So far: workspace specs, where
a queued run's files come from on whichever worker claims it (`_workspace`).
"""

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
    "MAX_TEXT_DIFF_BYTES",
    "WORKSPACES_BUCKET",
    "FileChange",
    "FixtureNotFound",
    "FixtureTooLarge",
    "MalformedWorkspace",
    "MaterializeFailed",
    "NoWorkspaceDiff",
    "SharedWorkspace",
    "SnapshotWorkspace",
    "WorkspaceDiff",
    "WorkspaceError",
    "WorkspaceFromNewerTiller",
    "WorkspaceNotStored",
    "WorkspacePathMissing",
    "WorkspaceSpec",
    "load_diff",
    "materialize",
    "snapshot_workspace",
    "workspace_diff",
]
