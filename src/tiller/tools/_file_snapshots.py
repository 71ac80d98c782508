"""File checkpoints, as the tools see them: where a snapshot is anchored, and who takes it.

Before a file tool changes files it asks `ctx.snapshot_before_write(paths)`; the run's
`FileSnapshotter` (the store-backed one in `tiller.store`, injected by the loop) records
what those paths hold now — content-addressed blobs plus a manifest of which files existed
— anchored to the conversation position (`CheckpointOrigin`), so `tiller rewind` can put
the workspace back. Before a shell command that may change files runs, the shell asks
`snapshot_before_command(ctx, command, background=...)`: a `WorkspaceSnapshotter` records
the whole workspace (incrementally: only files whose size or times changed are read
again). Tools do not know the store: these protocols are all they see.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ._exec import ExecContext

__all__ = [
    "MAX_SAVED_FILE_BYTES",
    "CheckpointOrigin",
    "FileSnapshotter",
    "WorkspaceSnapshotter",
    "snapshot_before_command",
]

#: The largest file a checkpoint saves (file tools and shell snapshots alike). A larger
#: one is recorded as "unsaved": it is never read into the store, and a rewind says it
#: cannot put it back.
MAX_SAVED_FILE_BYTES: Final = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class CheckpointOrigin:
    """Where in a conversation a snapshot was taken: the task (under a worker), the
    session (the thread) and the message index (how many messages the transcript had when
    the call was dispatched). All `None` means unanchored (a manual snapshot)."""

    task_id: str | None = None
    session_id: str | None = None
    message_index: int | None = None

    @property
    def anchored(self) -> bool:
        return self.session_id is not None and self.message_index is not None


@runtime_checkable
class FileSnapshotter(Protocol):
    """Records the current content of paths inside a jail before they change."""

    async def snapshot(
        self, origin: CheckpointOrigin, root: Path, paths: Sequence[Path], *, reason: str
    ) -> str:
        """Snapshot `paths` (absolute, inside `root`; missing ones are recorded as not
        existing) and return the checkpoint's id."""
        ...


@runtime_checkable
class WorkspaceSnapshotter(Protocol):
    """Records the whole workspace before a shell command may change it."""

    def command_may_write(self, command: str, root: Path) -> bool:
        """Whether `command` may change files (True when unsure): only then is a snapshot
        taken."""
        ...

    async def snapshot_workspace(
        self, origin: CheckpointOrigin, root: Path, *, command: str, background: bool
    ) -> str:
        """Snapshot every tracked file under `root` and return the checkpoint's id."""
        ...


async def snapshot_before_command(
    ctx: ExecContext, command: str, *, background: bool
) -> str | None:
    """Snapshot the workspace before the shell runs `command` (a background one: before
    it starts), so `tiller rewind` can undo what it changes. Returns the checkpoint id, or
    None when the run keeps no file checkpoints or the command only reads. A failure
    propagates: the command must not run unrecorded."""
    snapshots = ctx.snapshots
    if not isinstance(snapshots, WorkspaceSnapshotter):
        return None
    root = ctx.jail.root
    if not snapshots.command_may_write(command, root):
        return None
    return await snapshots.snapshot_workspace(
        ctx.checkpoint_origin(), root, command=command, background=background
    )
