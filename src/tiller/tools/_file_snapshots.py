"""File checkpoints, as the tools see them: where a snapshot is anchored, and who takes it.

Before a file tool changes files it asks `ctx.snapshot_before_write(paths)`; the run's
`FileSnapshotter` (the store-backed one in `tiller.store`, injected by the loop) records
what those paths hold now — content-addressed blobs plus a manifest of which files existed
— anchored to the conversation position (`CheckpointOrigin`), so `tiller rewind` can put
the workspace back. Tools do not know the store: this protocol is all they see.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = ["CheckpointOrigin", "FileSnapshotter"]


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
