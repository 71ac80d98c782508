"""A run's workspace diff: what a run changed in its private copy of a snapshot fixture.

`workspace_diff` compares the run's directory with the snapshot's manifest (`_workspace`)
file by file: a text file gets a unified diff, a binary or large one (past
`MAX_TEXT_DIFF_BYTES` either side) its sizes and hashes. The diff (`WorkspaceDiff`) is
JSON, stored content-addressed in `tiller-workspaces` under `diff/<sha256>`; a result
record names it by `diff_ref` and `load_diff` reads it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import hashlib
import os
from pathlib import Path
from typing import Any, Final, Literal

import orjson
import pydantic

from .._schema_ledger import LEDGER, newer_problem, tiller_version, written_by_of
from ..store import (
    CHUNK_BYTES,
    FILE_BLOBS_BUCKET,
    Bus,
    FileRecord,
    KeyValue,
    MalformedFileCheckpoint,
    UnsafePath,
    open_file,
    walk_workspace,
)
from ._workspace import (
    WORKSPACES_BUCKET,
    MalformedWorkspace,
    NoWorkspaceDiff,
    SharedWorkspace,
    SnapshotWorkspace,
    WorkspaceFromNewerTiller,
    WorkspacePathMissing,
    _load_blob,
    _load_stored,
    _manifest_records,
    _store_record,
)

__all__ = ["MAX_TEXT_DIFF_BYTES", "FileChange", "WorkspaceDiff", "load_diff", "workspace_diff"]

#: A file larger than this (either side) gets sizes in its diff, not a unified text diff.
MAX_TEXT_DIFF_BYTES: Final = 4 * 1024 * 1024

_DIFF_VERSION = LEDGER["workspace_diff"].current
#: Files up to this size are diffed on the event loop (a thread hop costs more).
_INLINE_DIFF_BYTES: Final = 64 * 1024


class FileChange(pydantic.BaseModel):
    """One path the run added, modified or deleted. A text file (UTF-8, no NUL byte) has
    a unified `text_diff`; a binary one says `binary`, one over `MAX_TEXT_DIFF_BYTES` on
    either side `too_large`, and both give only their sizes; a link says its targets. A
    change of permission bits alone shows in the modes, with no text diff."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    path: str
    change: Literal["added", "modified", "deleted"]
    kind_before: Literal["file", "symlink"] | None = None
    kind_after: Literal["file", "symlink"] | None = None
    size_before: int | None = None
    size_after: int | None = None
    mode_before: int | None = None
    mode_after: int | None = None
    target_before: str | None = None
    target_after: str | None = None
    binary: bool = False
    too_large: bool = False
    text_diff: str | None = None


class WorkspaceDiff(pydantic.BaseModel):
    """What a run changed in its copy of a snapshot (`manifest`), path by path. Paths in
    the directories a snapshot excludes (`.git/objects`, `node_modules`, ...) are not
    compared; `complete` is False when the walk of the run's directory hit a cap (`note`).
    `diff_ref` is where the diff is stored (not part of the stored record)."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    schema_version: int = _DIFF_VERSION
    written_by: str | None = None
    manifest: str
    changes: tuple[FileChange, ...] = ()
    complete: bool = True
    note: str | None = None
    diff_ref: str | None = pydantic.Field(default=None, exclude=True)

    def _paths(self, change: str) -> tuple[str, ...]:
        return tuple(c.path for c in self.changes if c.change == change)

    @property
    def added(self) -> tuple[str, ...]:
        return self._paths("added")

    @property
    def modified(self) -> tuple[str, ...]:
        return self._paths("modified")

    @property
    def deleted(self) -> tuple[str, ...]:
        return self._paths("deleted")


@dataclasses.dataclass(frozen=True, slots=True)
class _Side:
    """One side of a path: a file (its content read lazily) or a link."""

    kind: Literal["file", "symlink"]
    size: int | None = None
    mode: int | None = None
    target: str | None = None
    sha256: str | None = None


def _read_file(root: Path, rel: str) -> tuple[bytes | None, str, int]:
    """A file's content (None past `MAX_TEXT_DIFF_BYTES`), sha256 and size, read without
    following a link."""
    fd, _ = open_file(root, rel.split("/"))
    try:
        digest = hashlib.sha256()
        kept: list[bytes] = []
        size = 0
        while data := os.read(fd, CHUNK_BYTES):
            digest.update(data)
            size += len(data)
            if size <= MAX_TEXT_DIFF_BYTES:
                kept.append(data)
    finally:
        os.close(fd)
    return (b"".join(kept) if size <= MAX_TEXT_DIFF_BYTES else None), digest.hexdigest(), size


def _text(data: bytes | None) -> list[str] | None:
    if data is None or b"\x00" in data:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _unified(path: str, before: list[str] | None, after: list[str] | None) -> str:
    lines = difflib.unified_diff(
        before or [],
        after or [],
        fromfile=f"a/{path}" if before is not None else "/dev/null",
        tofile=f"b/{path}" if after is not None else "/dev/null",
    )
    # A last line without a newline gets one, marked as git marks it.
    return "".join(
        line if line.endswith("\n") else f"{line}\n\\ No newline at end of file\n" for line in lines
    )


async def _snapshot_content(blobs: KeyValue, record: FileRecord, key: str) -> bytes | None:
    if (record.size or 0) > MAX_TEXT_DIFF_BYTES:
        return None
    try:
        pieces = [await _load_blob(blobs, sha) for sha in record.blobs]
    except MalformedFileCheckpoint as exc:
        raise MalformedWorkspace(key, str(exc)) from None
    return b"".join(pieces)


async def _change(
    path: str,
    *,
    before: FileRecord | None,
    after: _Side | None,
    after_data: bytes | None,
    blobs: KeyValue,
    key: str,
) -> FileChange | None:
    b_kind = None if before is None else before.kind
    a_kind = None if after is None else after.kind
    if before is not None and after is not None:
        same = (
            before.target == after.target
            if b_kind == a_kind == "symlink"
            else b_kind == a_kind and before.sha256 == after.sha256 and before.mode == after.mode
        )
        if same:
            return None
    change: Literal["added", "modified", "deleted"] = (
        "added" if before is None else "deleted" if after is None else "modified"
    )
    fields: dict[str, Any] = {
        "path": path,
        "change": change,
        "kind_before": b_kind,
        "kind_after": a_kind,
    }
    if before is not None:
        fields.update(size_before=before.size, mode_before=before.mode)
        fields["target_before"] = before.target
    if after is not None:
        fields.update(size_after=after.size, mode_after=after.mode, target_after=after.target)
    files_before = before is None or b_kind == "file"
    files_after = after is None or a_kind == "file"
    if files_before and files_after:
        sizes = (0 if before is None else before.size or 0, 0 if after is None else after.size)
        if max(size or 0 for size in sizes) > MAX_TEXT_DIFF_BYTES:
            return FileChange(**fields, too_large=True)
        old = None if before is None else await _snapshot_content(blobs, before, key)
        old_text = [] if before is None else _text(old)
        new_text = [] if after is None else _text(after_data)
        if old_text is None or new_text is None:
            fields["binary"] = True
        elif before is None or after is None or before.sha256 != after.sha256:
            sides = (None if before is None else old_text, None if after is None else new_text)
            if max(size or 0 for size in sizes) <= _INLINE_DIFF_BYTES:
                fields["text_diff"] = _unified(path, *sides)
            else:  # difflib on large files takes a while: not on the event loop
                fields["text_diff"] = await asyncio.to_thread(_unified, path, *sides)
    return FileChange(**fields)


@dataclasses.dataclass(slots=True)
class _RunDir:
    """What the walk of a run's directory found: its files and links, the paths it could
    not read, and whether it saw everything."""

    found: dict[str, tuple[_Side, bytes | None]]
    unread: set[str]
    walked_whole: bool
    note: str | None

    @property
    def complete(self) -> bool:
        return self.walked_whole and not self.unread


def _walk_run_dir(path: Path) -> _RunDir:
    try:
        walked = walk_workspace(path)
    except OSError:
        raise WorkspacePathMissing(
            f"the run's directory {str(path)!r} is not a directory any more: diff the "
            "directory `materialize` gave, inside its block (or with keep=True)"
        ) from None
    found: dict[str, tuple[_Side, bytes | None]] = {}
    unread: dict[str, str] = {}
    for entry in walked.entries:
        if entry.kind == "symlink":
            found[entry.path] = (_Side("symlink", target=entry.target), None)
        elif entry.kind == "file":
            try:
                data, sha, size = _read_file(path, entry.path)
            except FileNotFoundError:
                continue
            except (OSError, UnsafePath) as exc:  # the run took its read permission away
                unread[entry.path] = f"{entry.path} could not be read ({exc})"
                continue
            found[entry.path] = (_Side("file", size=size, mode=entry.mode, sha256=sha), data)
    notes = [note for note in (walked.note, *unread.values()) if note]
    if not walked.complete:
        notes.append("deletions are not reported: the walk did not see every path")
    return _RunDir(found, set(unread), walked.complete, "; ".join(notes) or None)


async def workspace_diff(
    bus: Bus, spec: SharedWorkspace | SnapshotWorkspace, path: Path
) -> WorkspaceDiff:
    """What the run changed in `path` (its materialized copy of `spec`), stored in `bus`:
    the returned diff's `diff_ref` names it for a result record (`load_diff` reads it).
    Storing it is content-addressed: the same changes are stored once."""
    if isinstance(spec, SharedWorkspace):
        raise NoWorkspaceDiff(
            f"the shared workspace {spec.path!r} has no snapshot to diff against; record its "
            "changes with its own version control, or run on a snapshot (snapshot_workspace)"
        )
    key = f"manifest/{spec.manifest}"
    snapshot = {r.path: r for r in await _manifest_records(bus, spec.manifest)}
    run_dir = await asyncio.to_thread(_walk_run_dir, Path(path))
    found = run_dir.found
    blobs = await bus.kv(FILE_BLOBS_BUCKET)
    changes: list[FileChange] = []
    paths = {p for p, r in snapshot.items() if r.kind != "directory"} | set(found)
    for rel in sorted(paths):
        side, data = found.get(rel, (None, None))
        if side is None and (rel in run_dir.unread or not run_dir.walked_whole):
            continue  # not seen, so not known to be deleted
        change = await _change(
            rel, before=snapshot.get(rel), after=side, after_data=data, blobs=blobs, key=key
        )
        if change is not None:
            changes.append(change)
    diff = WorkspaceDiff(
        written_by=tiller_version(),
        manifest=spec.manifest,
        changes=tuple(changes),
        complete=run_dir.complete,
        note=run_dir.note,
    )
    kv = await bus.kv(WORKSPACES_BUCKET)
    ref = await _store_record(kv, "diff", orjson.dumps(diff.model_dump(mode="json")))
    return diff.model_copy(update={"diff_ref": ref})


async def load_diff(bus: Bus, ref: str) -> WorkspaceDiff:
    """The diff a result record names (`diff_ref`)."""
    data = await _load_stored(bus, "diff", ref, "workspace diff")
    key = f"diff/{ref}"
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise MalformedWorkspace(key, f"not JSON ({exc})") from None
    version = raw.get("schema_version") if isinstance(raw, dict) else None
    if isinstance(version, int) and version > _DIFF_VERSION:
        writer = written_by_of(raw)
        raise WorkspaceFromNewerTiller(
            key,
            f"schema version {version}; this tiller reads {_DIFF_VERSION}: {newer_problem(writer)}",
            writer,
        )
    if version != _DIFF_VERSION:
        raise MalformedWorkspace(key, f"schema version {version!r}; this tiller reads 1")
    try:
        diff = WorkspaceDiff.model_validate(raw)
    except pydantic.ValidationError as exc:
        raise MalformedWorkspace(
            key, f"not a workspace diff ({exc.error_count()} errors)"
        ) from None
    return diff.model_copy(update={"diff_ref": ref})
