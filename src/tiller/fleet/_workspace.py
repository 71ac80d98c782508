"""Workspace specs: where a queued run's files come from, on whichever worker claims it.

A run job names its workspace (`WorkspaceSpec`, a discriminated union on `kind`):

- `SharedWorkspace(path)`: a directory every worker mounts at the same absolute path. The
  run works in it directly; nothing is copied, nothing is removed, nothing is diffed (the
  path's own version control is the record of what changed).
- `SnapshotWorkspace(manifest)`: a fixture directory snapshotted into the store, so a
  worker on another machine can rebuild it. Each run gets a private copy, and what the run
  changed is stored beside its result (`workspace_diff`).

A snapshot reuses file checkpoints' machinery rather than a format of its own: the fixture
is walked as a shell snapshot walks a workspace (`tiller.store.walk_workspace`: no link
followed, heavy directories such as `.git/objects` or `node_modules` excluded, capped in
entries and depth), files are read in `CHUNK_BYTES` pieces into the content-addressed
`tiller-file-blobs` bucket (`sha256/<hex>`, written once: a second snapshot of the same
fixture, or a fixture sharing files with another, stores nothing new for them), and the
records (`encode_records`, without the `stat` signatures, which mean nothing on another
machine) are the manifest, stored in `tiller-workspaces` under `manifest/<sha256 of its
bytes>`. The manifest's hash is the spec's `manifest`: the same fixture gives the same spec.
Materializing writes the records back with the rewind's confined operations
(`restore_workspace`): a path is reached one component at a time without following links,
files get their permission bits, links are made as links (their target text, never
followed), so a manifest cannot make a worker write outside the run's directory.

A run's diff is `_workspace_diff`'s (`workspace_diff`, `WorkspaceDiff`, `load_diff`).

Errors (all `WorkspaceError`, a `TillerError`)::

    WorkspaceError
    ├── FixtureNotFound          the fixture directory does not exist / is not a directory
    ├── FixtureTooLarge          past a snapshot's caps (a file, the bytes, entries, depth)
    ├── WorkspacePathMissing     a shared path this worker does not have
    ├── WorkspaceNotStored       a manifest or diff this store does not hold
    ├── MalformedWorkspace       a manifest, blob or diff that is damaged or foreign
    │   └── WorkspaceFromNewerTiller   (also a NewerSchemaError)
    ├── MaterializeFailed        some paths could not be written
    └── NoWorkspaceDiff          a shared workspace has no snapshot to diff against
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Annotated, Final, Literal

import pydantic

from ..errors import NewerSchemaError, TillerError
from ..store import (
    FILE_BLOBS_BUCKET,
    MAX_SNAPSHOT_READ_BYTES,
    Bus,
    Decided,
    FileRecord,
    KeyValue,
    MalformedFileCheckpoint,
    RevisionConflict,
    UnsafePath,
    WorkspaceOutcome,
    WorkspaceRecorder,
    decode_records,
    encode_records,
    restore_workspace,
    set_mode,
)

__all__ = [
    "WORKSPACES_BUCKET",
    "FixtureNotFound",
    "FixtureTooLarge",
    "MalformedWorkspace",
    "MaterializeFailed",
    "NoWorkspace",
    "NoWorkspaceDiff",
    "SharedWorkspace",
    "SnapshotWorkspace",
    "WorkspaceError",
    "WorkspaceFromNewerTiller",
    "WorkspaceNotStored",
    "WorkspacePathMissing",
    "WorkspaceSpec",
    "materialize",
    "snapshot_workspace",
    "workspace_recorder",
]

#: Snapshot manifests (`manifest/<sha256>`) and run diffs (`diff/<sha256>`).
WORKSPACES_BUCKET: Final = "tiller-workspaces"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_RUN_DIR_NAME = re.compile(r"[^A-Za-z0-9._-]")


# ── errors ───────────────────────────────────────────────────────────────────────────


class WorkspaceError(TillerError):
    """A workspace spec could not be snapshotted, materialized or diffed."""


class FixtureNotFound(WorkspaceError):
    """The fixture to snapshot is not a directory on this machine."""


class FixtureTooLarge(WorkspaceError):
    """The fixture is past a snapshot's caps; the message names the cap and the path."""


class WorkspacePathMissing(WorkspaceError):
    """A shared workspace's path is not a directory on this worker."""


class WorkspaceNotStored(WorkspaceError):
    """The manifest or diff is not in this store: it was written to another one."""


class MalformedWorkspace(WorkspaceError):
    """A stored manifest, blob or diff does not have the shape this tiller writes (another
    program wrote it, or it is damaged). `key` names it."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{WORKSPACES_BUCKET}/{key}: {problem}")
        self.key = key


class WorkspaceFromNewerTiller(MalformedWorkspace, NewerSchemaError):
    """A stored diff written by a newer tiller (`written_by`): upgrade tiller to read it."""

    def __init__(self, key: str, problem: str, written_by: str | None) -> None:
        super().__init__(key, problem)
        self.written_by = written_by


class MaterializeFailed(WorkspaceError):
    """Some paths of a snapshot could not be written; `failed` lists them with why."""

    def __init__(self, manifest: str, failed: Sequence[tuple[str, str]]) -> None:
        listed = "; ".join(f"{path}: {why}" for path, why in failed[:10])
        more = f" (and {len(failed) - 10} more)" if len(failed) > 10 else ""
        super().__init__(
            f"the snapshot {manifest} could not be materialized: {listed}{more}. Check the "
            "worker's work directory (space, permissions), or snapshot the fixture again"
        )
        self.failed = tuple(failed)


class NoWorkspaceDiff(WorkspaceError):
    """A shared workspace has no snapshot to compare with."""


# ── the specs ────────────────────────────────────────────────────────────────────────


class NoWorkspace(pydantic.BaseModel):
    """No workspace: the run gets a fresh private temporary directory on the worker that
    takes it, removed when the run ends there."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    kind: Literal["none"] = "none"


class SharedWorkspace(pydantic.BaseModel):
    """A directory at the same absolute `path` on every worker (a shared mount)."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    kind: Literal["shared"] = "shared"
    path: str

    @pydantic.field_validator("path")
    @classmethod
    def _absolute(cls, path: str) -> str:
        # A relative path would mean a different directory on each worker's cwd.
        if not os.path.isabs(path) or "\x00" in path:
            raise ValueError(f"{path!r} is not an absolute path; give the mount's full path")
        return path


class SnapshotWorkspace(pydantic.BaseModel):
    """A fixture snapshotted into the store: `manifest` is the sha256 of its manifest."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    kind: Literal["snapshot"] = "snapshot"
    manifest: Annotated[str, pydantic.StringConstraints(pattern=r"^[0-9a-f]{64}$")]


#: What a run job names as its workspace; JSON `{"kind": "none" | "shared" | "snapshot", ...}`.
WorkspaceSpec = Annotated[
    NoWorkspace | SharedWorkspace | SnapshotWorkspace, pydantic.Field(discriminator="kind")
]


# ── blobs and manifests ──────────────────────────────────────────────────────────────


async def _store_blob(blobs: KeyValue, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    # A conflict means it is stored already (by this fixture's twin, or another one).
    with contextlib.suppress(RevisionConflict):
        await blobs.create(f"sha256/{sha}", data)
    return sha


async def _load_blob(blobs: KeyValue, sha: str) -> bytes:
    """A file piece; one missing or damaged raises `MalformedFileCheckpoint`, which the
    rewind's writer (`restore_workspace`) reports as that path's failure."""
    key = f"sha256/{sha}"
    entry = await blobs.get(key)
    if entry is None:
        raise MalformedFileCheckpoint(FILE_BLOBS_BUCKET, key, "the file's content is missing")
    if hashlib.sha256(entry.value).hexdigest() != sha:
        raise MalformedFileCheckpoint(FILE_BLOBS_BUCKET, key, "the content is damaged")
    return entry.value


async def _store_record(kv: KeyValue, prefix: str, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    with contextlib.suppress(RevisionConflict):
        await kv.create(f"{prefix}/{sha}", data)
    return sha


async def _load_stored(bus: Bus, prefix: str, sha: str, what: str) -> bytes:
    key = f"{prefix}/{sha}"
    if not _SHA256.fullmatch(sha):
        raise WorkspaceNotStored(f"{sha!r} is not a {what} reference (64 hex digits)")
    entry = await (await bus.kv(WORKSPACES_BUCKET)).get(key)
    if entry is None:
        raise WorkspaceNotStored(
            f"the {what} {sha} is not in the store at {bus.url}: it was written to another "
            "store. Point the worker at the store the job was submitted to, or snapshot the "
            "fixture into this one (snapshot_workspace)"
        )
    if hashlib.sha256(entry.value).hexdigest() != sha:
        raise MalformedWorkspace(key, f"the stored {what} does not match its sha256 (damaged)")
    return entry.value


async def _manifest_records(bus: Bus, manifest: str) -> tuple[FileRecord, ...]:
    data = await _load_stored(bus, "manifest", manifest, "snapshot manifest")
    key = f"manifest/{manifest}"
    try:
        records = decode_records(data, WORKSPACES_BUCKET, key)
    except NewerSchemaError as exc:
        raise WorkspaceFromNewerTiller(key, str(exc), getattr(exc, "written_by", None)) from None
    except MalformedFileCheckpoint as exc:
        raise MalformedWorkspace(key, f"not a snapshot manifest ({exc})") from None
    for record in records:
        if record.kind == "missing" or record.unsaved:
            raise MalformedWorkspace(key, f"{record.path}: a snapshot records only saved files")
    return records


# ── snapshot ─────────────────────────────────────────────────────────────────────────


def _fixture_root(directory: str | os.PathLike[str]) -> Path:
    path = Path(directory).expanduser()
    try:
        root = path.resolve(strict=True)  # the fixture itself may be reached by a link
    except (OSError, RuntimeError):
        raise FixtureNotFound(
            f"the fixture directory {str(path)!r} does not exist; give the path of a directory"
        ) from None
    if not root.is_dir():
        raise FixtureNotFound(f"the fixture {str(path)!r} is not a directory; give a directory")
    return root


def workspace_recorder(bus: Bus) -> WorkspaceRecorder:
    """A recorder storing file contents in `bus`'s blobs. Give the same one to successive
    `snapshot_workspace` calls of one directory: a file unchanged since the last snapshot
    (same inode, size and times) is not read again."""
    blobs: list[KeyValue] = []

    async def store(data: bytes) -> str:
        if not blobs:
            blobs.append(await bus.kv(FILE_BLOBS_BUCKET))
        return await _store_blob(blobs[0], data)

    return WorkspaceRecorder(store)


async def snapshot_workspace(
    bus: Bus, directory: str | os.PathLike[str], *, recorder: WorkspaceRecorder | None = None
) -> SnapshotWorkspace:
    """Store the fixture `directory` in `bus` and return the spec a run job names.

    Every file is stored once by content; a fixture past a snapshot's caps (one file over
    tiller's `MAX_SAVED_FILE_BYTES`, more than `MAX_SNAPSHOT_READ_BYTES` in all, or the
    walk's entry and depth caps) raises `FixtureTooLarge` rather than storing part of it:
    a run must never start on a fixture with files silently missing. `recorder`: one from
    `workspace_recorder(bus)` that snapshotted this directory before (incremental)."""
    root = await asyncio.to_thread(_fixture_root, directory)
    recorder = recorder if recorder is not None else workspace_recorder(bus)
    recorded = await recorder.record(root, int(bus.clock() * 1e9))
    if not recorded.complete:
        raise FixtureTooLarge(
            f"the fixture {str(root)!r} cannot be snapshotted whole: {recorded.note}. Remove "
            "what the run does not need, or share it by path (SharedWorkspace)"
        )
    unsaved = [record for record in recorded.records if record.unsaved]
    if unsaved:
        from ..tools import MAX_SAVED_FILE_BYTES

        first = unsaved[0]
        cap = (
            f"over the {MAX_SAVED_FILE_BYTES} bytes a snapshot keeps per file"
            if (first.size or 0) > MAX_SAVED_FILE_BYTES
            else f"past the {MAX_SNAPSHOT_READ_BYTES} bytes a snapshot reads in all"
        )
        raise FixtureTooLarge(
            f"the fixture {str(root)!r} is too large: {first.path} is {first.size} bytes, "
            f"{cap} ({len(unsaved)} file(s) in all). Remove large files from the fixture, "
            "or share it by path (SharedWorkspace)"
        )
    records = [dataclasses.replace(record, signature=None) for record in recorded.records]
    manifest = await _store_record(
        await bus.kv(WORKSPACES_BUCKET), "manifest", encode_records(records)
    )
    return SnapshotWorkspace(manifest=manifest)


# ── materialize ──────────────────────────────────────────────────────────────────────


def _default_root() -> Path:
    return Path(tempfile.gettempdir()) / "tiller-workspaces"


def _private_dir(root: Path, run_id: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    name = _RUN_DIR_NAME.sub("_", run_id)[:80] or "run"
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))  # mode 0o700, unique


def _remove_tree(path: Path) -> None:
    """Remove a run's directory, even where the run took its own write permission away.
    Links are never followed: `rmtree` unlinks them, and only real directories are
    given their permission back."""
    with contextlib.suppress(OSError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            os.chmod(path, 0o700)
    for dirpath, dirnames, _ in os.walk(path):
        for name in dirnames:
            child = os.path.join(dirpath, name)
            with contextlib.suppress(OSError):
                if stat.S_ISDIR(os.lstat(child).st_mode):
                    os.chmod(child, 0o700)
    shutil.rmtree(path, ignore_errors=False)


async def _write_snapshot(
    bus: Bus, spec: SnapshotWorkspace, records: Sequence[FileRecord], target: Path
) -> None:
    blobs = await bus.kv(FILE_BLOBS_BUCKET)

    async def load(sha: str) -> bytes:
        return await _load_blob(blobs, sha)

    # Directories are made writable first, so a read-only one can still be filled; their
    # recorded modes are given back afterwards, deepest first.
    writable = {
        record.path: (
            dataclasses.replace(record, mode=(record.mode or 0) | 0o700)
            if record.kind == "directory"
            else record
        )
        for record in records
    }
    outcome = WorkspaceOutcome()
    await restore_workspace(
        target,
        Decided(records=writable, complete=True),
        load,
        outcome,
        dry_run=False,
        deletions_only=False,
    )
    failed = list(outcome.failed)
    directories = [r for r in records if r.kind == "directory" and (r.mode or 0) & 0o700 != 0o700]
    for record in sorted(directories, key=lambda r: -r.path.count("/")):
        try:
            await asyncio.to_thread(set_mode, target, record.path.split("/"), record.mode or 0)
        except (OSError, UnsafePath) as exc:
            failed.append((f"{record.path}/", str(exc)))
    if failed:
        raise MaterializeFailed(spec.manifest, failed)


@contextlib.asynccontextmanager
async def materialize(
    bus: Bus,
    spec: SharedWorkspace | SnapshotWorkspace,
    run_id: str,
    *,
    root: Path | None = None,
    keep: bool = False,
) -> AsyncIterator[Path]:
    """The directory run `run_id` works in, for the length of the block.

    A snapshot is written to a new private directory under `root` (a worker's work
    directory; by default `tiller-workspaces` in the system's temporary directory), named
    after the run and unique, so two runs never share one; it is removed on exit, however
    the block ends, unless `keep`. A shared path is checked to be a directory here
    (`WorkspacePathMissing` otherwise) and yielded as it is, never removed."""
    if isinstance(spec, SharedWorkspace):
        path = Path(spec.path)
        if not await asyncio.to_thread(path.is_dir):
            raise WorkspacePathMissing(
                f"the shared workspace {spec.path!r} is not a directory on this worker: mount "
                "it at the same path on every worker, or snapshot it (snapshot_workspace)"
            )
        yield path
        return
    records = await _manifest_records(bus, spec.manifest)  # checked before making anything
    target = await asyncio.to_thread(_private_dir, root or _default_root(), run_id)
    try:
        await _write_snapshot(bus, spec, records, target)
        yield target
    finally:
        if not keep:
            await asyncio.to_thread(_remove_tree, target)
