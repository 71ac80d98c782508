"""Shell snapshots: the whole workspace recorded before a command that may change it, and
the part of a rewind that puts it back.

A file tool knows which paths it writes; a shell command does not say. So before one
runs, `WorkspaceRecorder.record` walks the workspace (`_workspace_fs.walk_workspace`: no
recursion, no link followed, heavy directories excluded, capped) and records every file,
link and directory. It is incremental: the previous snapshot's records are kept, and a
file whose `[dev, ino, size, mtime_ns, ctime_ns]` is unchanged reuses its blobs without
being read (the ctime cannot be set by a command, so `touch -r` does not fool it; a file
changed within `RACY_NS` of the snapshot that read it is read again, as git does for
"racily clean" entries). A file is read in `CHUNK_BYTES` pieces, each a content-addressed
blob, so it never sits in memory whole; one over `MAX_SAVED_FILE_BYTES` is recorded
unsaved and not read at all.

`restore_workspace` undoes, for the paths a workspace snapshot decides, everything done
since: paths made after it are deleted (deepest first, one file or empty directory at a
time), directories it had are made again, files and links it had are written back. Every
path goes through `_workspace_fs`'s confined operations, so a link planted in the
workspace can never point a deletion or a write outside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from . import _workspace_fs as wfs
from ._file_manifest import FileRecord, MalformedFileCheckpoint

__all__ = [
    "CHUNK_BYTES",
    "MAX_SNAPSHOT_READ_BYTES",
    "RACY_NS",
    "Decided",
    "WorkspaceRecorder",
    "restore_workspace",
]

#: The size of the pieces a file is stored in.
CHUNK_BYTES: Final = 512 * 1024
#: The most bytes one snapshot reads; past it, files are recorded unsaved (and read by a
#: later snapshot that has budget left), so a workspace of large files costs bounded time.
MAX_SNAPSHOT_READ_BYTES: Final = 512 * 1024 * 1024
#: A file whose ctime is this close to (or after) the start of the snapshot that read it
#: may have changed again in the same clock tick: the next snapshot reads it again.
RACY_NS: Final = 2_000_000_000


def _max_saved() -> int:
    from ..tools import MAX_SAVED_FILE_BYTES

    return MAX_SAVED_FILE_BYTES


@dataclass(slots=True)
class Recorded:
    """One walk's records, whether it saw everything, and why not."""

    records: list[FileRecord]
    complete: bool
    note: str | None


class WorkspaceRecorder:
    """Records workspaces for one `FileCheckpoints`, remembering the last snapshot's
    files so unchanged ones are not read again. `files_read` and `bytes_read` count what
    was actually read (a statistic, and the seam tests use)."""

    def __init__(self, store_blob: Callable[[bytes], Awaitable[str]]) -> None:
        self._store_blob = store_blob
        self._index: dict[str, FileRecord] = {}
        self._index_started_ns = 0
        self.files_read = 0
        self.bytes_read = 0

    async def record(self, root: Path, now_ns: int) -> Recorded:
        walked = await asyncio.to_thread(wfs.walk_workspace, root)
        records: list[FileRecord] = []
        unread: list[str] = []
        budget = [MAX_SNAPSHOT_READ_BYTES]
        for found in walked.entries:
            if found.kind == "directory":
                records.append(FileRecord(found.path, "directory", mode=found.mode))
            elif found.kind == "symlink":
                records.append(FileRecord(found.path, "symlink", target=found.target))
            else:
                try:
                    record = await self._file(root, found, budget)
                except FileNotFoundError:
                    continue  # deleted meanwhile: it does not exist
                except (OSError, wfs.UnsafePath) as exc:
                    unread.append(f"{found.path} could not be read ({_why(exc)})")
                    continue
                records.append(record)
        self._index = {r.path: r for r in records if r.kind == "file"}
        self._index_started_ns = now_ns
        notes = [note for note in (walked.note, *unread) if note]
        return Recorded(records, walked.complete and not unread, "; ".join(notes) or None)

    def _reusable(self, found: wfs.Found) -> FileRecord | None:
        known = self._index.get(found.path)
        if known is None or known.signature is None or known.signature != found.signature:
            return None
        if known.signature[4] >= self._index_started_ns - RACY_NS:
            return None  # changed too close to the snapshot that read it
        if known.unsaved and found.size <= _max_saved():
            return None
        return known

    async def _file(self, root: Path, found: wfs.Found, budget: list[int]) -> FileRecord:
        known = self._reusable(found)
        if known is not None:
            return known
        limit = _max_saved()
        if found.size > limit:
            return _unsaved(found.path, found.mode, found.size, found.signature)
        if found.size > budget[0]:
            # This snapshot read enough; a later one reads it (no signature: not reused).
            return _unsaved(found.path, found.mode, found.size, None)
        budget[0] -= found.size
        parts = found.path.split("/")
        fd, before = await asyncio.to_thread(wfs.open_file, root, parts)
        self.files_read += 1
        try:
            whole = hashlib.sha256()
            chunks: list[str] = []
            size = 0
            while True:
                data = await asyncio.to_thread(_read_chunk, fd, CHUNK_BYTES)
                if not data:
                    break
                size += len(data)
                self.bytes_read += len(data)
                if size > limit:  # it grew past the limit while read
                    return _unsaved(found.path, found.mode, size, None)
                whole.update(data)
                chunks.append(await self._store_blob(data))
            after = os.fstat(fd)
        finally:
            os.close(fd)
        if not chunks:
            chunks.append(await self._store_blob(b""))
        sig = wfs.signature_of(before)
        steady = sig == wfs.signature_of(after) and after.st_size == size
        return FileRecord(
            found.path,
            "file",
            sha256=whole.hexdigest(),
            size=size,
            mode=found.mode,
            chunks=tuple(chunks) if len(chunks) > 1 else (),
            signature=sig if steady else None,
        )


def _unsaved(
    path: str, mode: int, size: int, signature: tuple[int, int, int, int, int] | None
) -> FileRecord:
    return FileRecord(path, "file", size=size, mode=mode, unsaved=True, signature=signature)


def _unsaved_why(record: FileRecord) -> str:
    size = record.size or 0
    if size > _max_saved():
        return f"not restored: it was {size} bytes, over the {_max_saved()} a snapshot saves"
    return (
        f"not restored: the snapshot had read {MAX_SNAPSHOT_READ_BYTES} bytes before it "
        "and did not save it"
    )


def _read_chunk(fd: int, size: int) -> bytes:
    pieces: list[bytes] = []
    left = size
    while left > 0:
        piece = os.read(fd, left)
        if not piece:
            break
        pieces.append(piece)
        left -= len(piece)
    return b"".join(pieces)


# ── restore ──────────────────────────────────────────────────────────────────────────


@dataclass(slots=True)
class Decided:
    """What the workspace snapshots decide for a rewind: the record each path goes back
    to, whether every tracked path is decided (`complete`: a path found now and not
    recorded was made later, and goes), and the directories that must not be made again
    (the file tools' records say they did not exist)."""

    records: dict[str, FileRecord] = field(default_factory=dict)
    complete: bool = False
    absent_dirs: set[str] = field(default_factory=set)
    others: set[str] = field(default_factory=set)


@dataclass(slots=True)
class WorkspaceOutcome:
    """What `restore_workspace` did, path by path: its caller's report is made of these
    lists (a failure is recorded here with its reason, never raised)."""

    restored: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed_dirs: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    unsaved: list[tuple[str, str]] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)


def _depth(path: str) -> int:
    return path.count("/")


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


async def restore_workspace(
    root: Path,
    decided: Decided,
    load_blob: Callable[[str], Awaitable[bytes]],
    outcome: WorkspaceOutcome,
    *,
    dry_run: bool,
    deletions_only: bool,
) -> None:
    """Put the paths `decided` back (see the module docstring). Called twice by a
    rewind: first for deletions (`deletions_only`), before the file tools' records are
    restored, then for what is made again."""
    walked = await asyncio.to_thread(wfs.walk_workspace, root)
    current = {found.path: found for found in walked.entries}
    if deletions_only:
        if decided.complete and not walked.complete:
            outcome.partial.append(
                f"the workspace is too large to check now ({walked.note}): paths past "
                "that were left as they are"
            )
        await _delete(root, decided, current, outcome, dry_run=dry_run)
        return
    await _make(root, decided, current, load_blob, outcome, dry_run=dry_run)


def _doomed(decided: Decided, found: wfs.Found) -> bool:
    if found.path in decided.others or found.path in decided.absent_dirs:
        return False  # a file tool's record decides it
    record = decided.records.get(found.path)
    if record is None:
        return decided.complete
    if record.kind == "missing":
        return True
    if record.kind == "file" and record.unsaved:
        return False
    return (record.kind == "directory") != (found.kind == "directory")


async def _delete(
    root: Path,
    decided: Decided,
    current: dict[str, wfs.Found],
    outcome: WorkspaceOutcome,
    *,
    dry_run: bool,
) -> None:
    doomed = [found for found in current.values() if _doomed(decided, found)]
    doomed.sort(key=lambda found: (-_depth(found.path), found.path))
    for found in doomed:
        is_dir = found.kind == "directory"
        if not dry_run:
            try:
                await asyncio.to_thread(wfs.remove_entry, root, found.path.split("/"))
            except OSError as exc:
                if is_dir and exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    outcome.unsaved.append(
                        (
                            f"{found.path}/",
                            "kept: it holds paths a rewind does not touch (excluded "
                            "directories, or past a snapshot's cap)",
                        )
                    )
                else:
                    outcome.failed.append((found.path, _why(exc)))
                continue
            except wfs.UnsafePath as exc:
                outcome.failed.append((found.path, str(exc)))
                continue
        (outcome.removed_dirs if is_dir else outcome.deleted).append(found.path)


async def _make(
    root: Path,
    decided: Decided,
    current: dict[str, wfs.Found],
    load_blob: Callable[[str], Awaitable[bytes]],
    outcome: WorkspaceOutcome,
    *,
    dry_run: bool,
) -> None:
    records = [
        record
        for path, record in decided.records.items()
        if path not in decided.others and record.kind != "missing"
    ]
    records.sort(key=lambda record: (_depth(record.path), record.path))
    for record in records:
        now = current.get(record.path)
        parts = record.path.split("/")
        try:
            wfs.check_parts(parts)
            if record.kind == "directory":
                if record.path not in decided.absent_dirs:
                    await _make_directory(root, parts, record, now, outcome, dry_run=dry_run)
            elif record.kind == "symlink":
                if now is not None and now.kind == "symlink" and now.target == record.target:
                    outcome.unchanged.append(record.path)
                    continue
                if not dry_run:
                    await asyncio.to_thread(wfs.make_symlink, root, parts, str(record.target))
                outcome.restored.append(record.path)
            elif record.unsaved:
                if now is not None and now.signature == record.signature is not None:
                    outcome.unchanged.append(record.path)
                else:
                    outcome.unsaved.append((record.path, _unsaved_why(record)))
            elif await _same_file(root, record, now):
                outcome.unchanged.append(record.path)
            else:
                if not dry_run:
                    await _write_blobs(root, parts, record, load_blob)
                outcome.restored.append(record.path)
        except (OSError, wfs.UnsafePath, MalformedFileCheckpoint) as exc:
            outcome.failed.append((record.path, _why(exc)))


async def _make_directory(
    root: Path,
    parts: list[str],
    record: FileRecord,
    now: wfs.Found | None,
    outcome: WorkspaceOutcome,
    *,
    dry_run: bool,
) -> None:
    """Make the recorded directory, or give it back its mode."""
    mode = 0o755 if record.mode is None else record.mode
    if now is None or now.kind != "directory":
        if not dry_run:
            await asyncio.to_thread(wfs.make_directory, root, parts, mode)
        outcome.restored.append(f"{record.path}/")
    elif now.mode != mode:  # `chmod -R 000 .` is undone too
        if not dry_run:
            await asyncio.to_thread(wfs.set_mode, root, parts, mode)
        outcome.restored.append(f"{record.path}/")


async def _same_file(root: Path, record: FileRecord, now: wfs.Found | None) -> bool:
    if now is None or now.kind != "file" or now.mode != record.mode or now.size != record.size:
        return False
    if record.signature is not None and now.signature == record.signature:
        return True
    fd, _ = await asyncio.to_thread(wfs.open_file, root, record.path.split("/"))
    try:
        digest = hashlib.sha256()
        while data := await asyncio.to_thread(_read_chunk, fd, CHUNK_BYTES):
            digest.update(data)
    finally:
        os.close(fd)
    return digest.hexdigest() == record.sha256


async def _write_blobs(
    root: Path,
    parts: Sequence[str],
    record: FileRecord,
    load_blob: Callable[[str], Awaitable[bytes]],
) -> None:
    """Write the record's blobs, one at a time, to a temporary file moved over the path."""
    dir_fd, temp, file_fd = await asyncio.to_thread(wfs.open_temp, root, parts)
    ok = False
    try:
        digest = hashlib.sha256()
        for sha in record.blobs:
            data = await load_blob(sha)
            digest.update(data)
            await asyncio.to_thread(_write_all, file_fd, data)
        if digest.hexdigest() != record.sha256:
            raise MalformedFileCheckpoint(
                "tiller-file-blobs", f"sha256/{record.sha256}", "the pieces do not add up"
            )
        ok = True
    finally:
        with contextlib.suppress(OSError) if not ok else contextlib.nullcontext():
            await asyncio.to_thread(
                wfs.commit_temp, dir_fd, temp, file_fd, parts[-1], record.mode or 0o644, ok=ok
            )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
