"""Where a fleet run works: the seam a workspace provider plugs into the worker.

`LocalWorkspaces` serves the two kinds every worker supports: no workspace (a fresh
private temporary directory, removed when the run ends on this worker) and a shared path
(`SharedWorkspace`: the directory must exist here). A provider for more kinds (a fixture
snapshotted into the store, materialized per run) is passed as `Worker(workspaces=...)`.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol

from ..errors import UsageError
from ._job import NoWorkspace, RunJob, SharedWorkspace

__all__ = ["LocalWorkspaces", "WorkspaceProvider"]


class WorkspaceProvider(Protocol):
    """Gives a run its workspace directory for as long as it runs on this worker."""

    def open(self, job: RunJob) -> AbstractAsyncContextManager[Path]:
        """The directory the run is jailed to; `UsageError` (saying what to fix) if the
        job's workspace cannot be had here: the run then fails without starting."""
        ...


class LocalWorkspaces:
    """No workspace (a private temporary directory) or a shared path."""

    @contextlib.asynccontextmanager
    async def open(self, job: RunJob) -> AsyncIterator[Path]:
        spec = job.workspace
        if isinstance(spec, SharedWorkspace):
            path = Path(spec.path)
            if not await asyncio.to_thread(path.is_dir):
                raise UsageError(
                    f"run {job.run_id}: its shared workspace {spec.path!r} is not a directory "
                    "on this worker; mount it at the same path on every worker"
                )
            yield path
            return
        if not isinstance(spec, NoWorkspace):
            raise UsageError(
                f"run {job.run_id}: this worker cannot provide a {spec.kind!r} workspace; "
                "start it with a workspace provider that does"
            )
        scratch = Path(tempfile.mkdtemp(prefix=f"tiller-fleet-{job.run_id[:16]}-"))
        try:
            yield scratch
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
