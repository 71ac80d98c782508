"""Where a fleet run works: the seam a workspace provider plugs into the worker.

`LocalWorkspaces` serves every kind of `WorkspaceSpec` on the worker that takes the run:

- no workspace (`NoWorkspace`): a fresh private temporary directory, removed when the run
  ends on this worker;
- a shared path (`SharedWorkspace`): the directory must exist here; used as it is;
- a fixture snapshotted into the store (`SnapshotWorkspace`): materialized into a private
  directory of its own (`materialize`), so two runs of one fixture never see each other's
  writes, and removed when the run ends here. What the run changed is stored
  (`workspace_diff`) and the result record names it (`diff_ref`).

A snapshot run's copy is snapshotted in turn (`keep`) after each tool call it runs,
before the call's completion is journaled (`RunOptions.before_call_recorded`), and when
it stops here unfinished (suspended for a person, or handed back by a drain). The worker
that continues or recovers it materializes that kept copy instead of the fixture, so the
run finds the files it wrote (the kept copy's manifest hash is under `run/<run_id>` in
`tiller-workspaces`; its final diff is still against the fixture). So a worker killed
mid-run loses no completed call's writes: a call the journal says completed had its
files kept first, and one killed before it was journaled is uncertain and waits for a
person (law 5), who sees the files it left. Keeping is incremental (a file unchanged
since the last keep is not read again) and writes nothing when nothing changed. When the
run ends for good, its kept copy is dropped (`forget`).

A provider for other kinds is passed as `Worker(workspaces=...)`.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pydantic

from ..errors import UsageError
from ..store import Bus, WorkspaceRecorder
from ._job import NoWorkspace, RunJob, SharedWorkspace, SnapshotWorkspace
from ._workspace import (
    WORKSPACES_BUCKET,
    MalformedWorkspace,
    WorkspacePathMissing,
    materialize,
    snapshot_workspace,
    workspace_recorder,
)
from ._workspace_diff import workspace_diff

__all__ = ["LocalWorkspaces", "WorkspaceProvider"]


class WorkspaceProvider(Protocol):
    """Gives a run its workspace directory for as long as it runs on this worker."""

    def open(self, job: RunJob) -> AbstractAsyncContextManager[Path]:
        """The directory the run is jailed to. A `UsageError` or a `WorkspaceError`
        (saying what to fix) if the job's workspace cannot be had here: the run then
        fails without starting."""
        ...

    async def diff(self, job: RunJob, path: Path) -> str | None:
        """Store what the run changed in `path` (opened by `open`) and return its
        reference (`load_diff` reads it), or None when this kind keeps no diff."""
        ...

    async def keep(self, job: RunJob, path: Path) -> None:
        """Keep the run's files in `path` for a worker that continues or recovers it, if
        this kind needs that: after each call it runs, and when it stops here unfinished
        (suspended, or drained)."""
        ...

    async def forget(self, job: RunJob) -> None:
        """The run ended for good (not suspended, not drained): drop what `keep` kept."""
        ...


class LocalWorkspaces:
    """Every `WorkspaceSpec`, on this worker (see the module docstring). `bus` is the store
    snapshots are read from and diffs written to (without one, a snapshot job fails
    saying so); `root` is where snapshots are materialized (by default
    `tiller-workspaces` in the system's temporary directory)."""

    def __init__(self, bus: Bus | None = None, *, root: Path | None = None) -> None:
        self.bus = bus
        self.root = root
        #: Per open snapshot run: its recorder (so a keep reads only changed files), the
        #: manifest kept last (so an unchanged copy writes nothing), and a lock (a run's
        #: parallel calls keep one at a time).
        self._open: dict[str, _Kept] = {}

    @contextlib.asynccontextmanager
    async def open(self, job: RunJob) -> AsyncIterator[Path]:
        spec = job.workspace
        if isinstance(spec, SharedWorkspace):
            path = Path(spec.path)
            if not await asyncio.to_thread(path.is_dir):
                raise WorkspacePathMissing(
                    f"run {job.run_id}: its shared workspace {spec.path!r} is not a directory "
                    "on this worker; mount it at the same path on every worker"
                )
            yield path
            return
        if isinstance(spec, SnapshotWorkspace):
            bus = self._bus(job)
            kept = await (await bus.kv(WORKSPACES_BUCKET)).get(_kept_key(job.run_id))
            if kept is not None:  # the run's own files, as it left them unfinished
                spec = _kept_spec(job.run_id, kept.value)
            async with materialize(bus, spec, job.run_id, root=self.root) as path:
                self._open[job.run_id] = _Kept(workspace_recorder(bus), spec.manifest)
                try:
                    yield path
                finally:
                    self._open.pop(job.run_id, None)
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

    async def diff(self, job: RunJob, path: Path) -> str | None:
        spec = job.workspace
        if not isinstance(spec, SnapshotWorkspace):
            return None
        return (await workspace_diff(self._bus(job), spec, path)).diff_ref

    async def keep(self, job: RunJob, path: Path) -> None:
        if not isinstance(job.workspace, SnapshotWorkspace):
            return
        bus = self._bus(job)
        kept = self._open.get(job.run_id)
        if kept is None:  # not opened here (a caller's own use): a full snapshot
            kept = _Kept(workspace_recorder(bus), None)
        async with kept.lock:
            copy = await snapshot_workspace(bus, path, recorder=kept.recorder)
            if copy.manifest == kept.manifest:
                return  # nothing changed since the copy was materialized or last kept
            await (await bus.kv(WORKSPACES_BUCKET)).put(
                _kept_key(job.run_id), copy.manifest.encode()
            )
            kept.manifest = copy.manifest

    async def forget(self, job: RunJob) -> None:
        if not isinstance(job.workspace, SnapshotWorkspace):
            return
        # The manifest and its blobs stay: content-addressed, other runs may share them.
        await (await self._bus(job).kv(WORKSPACES_BUCKET)).delete(_kept_key(job.run_id))

    def _bus(self, job: RunJob) -> Bus:
        if self.bus is None:
            raise UsageError(
                f"run {job.run_id}: a snapshot workspace needs the store it was snapshotted "
                "into: give the worker LocalWorkspaces(bus)"
            )
        return self.bus


@dataclass(slots=True)
class _Kept:
    recorder: WorkspaceRecorder
    #: The manifest of the copy as it was last materialized or kept (None: unknown).
    manifest: str | None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _kept_spec(run_id: str, value: bytes) -> SnapshotWorkspace:
    try:
        return SnapshotWorkspace(manifest=value.decode())
    except (UnicodeDecodeError, pydantic.ValidationError):
        raise MalformedWorkspace(
            _kept_key(run_id), "not the sha256 of a manifest (another program wrote it?)"
        ) from None


def _kept_key(run_id: str) -> str:
    """Where the manifest of an unfinished run's kept copy is (`tiller-workspaces`)."""
    return f"run/{run_id}"
