"""File checkpoints: what files held before a tool changed them, so a rewind can put the
workspace back as it was at any point of the conversation.

`FileCheckpoints` is the store-backed `FileSnapshotter` the loop gives a run's tools
(`ExecContext.snapshot_before_write`). Before a tool writes, it records each path as it is
now — a regular file's bytes and mode, a symbolic link's target text, or that the path
did not exist — anchored to the conversation position (`CheckpointOrigin`: session and
message index). `restore_to(session, k, root)` then undoes every change made at or after
message `k`; `fork_at(session, k)` forgets the checkpoints after `k` when a conversation
branches there (mermaid-cli.md §2.8).

Two buckets hold it (DESIGN §7):

- `tiller-file-checkpoints`: manifests, `{schema_version, id, seq, run_id, session_id,
  message_index, task_id, root, created_at, reason, files: [...]}`, keyed
  `session/<session_id>/<seq>` (unanchored ones, a manual snapshot: `manual/<seq>`), with
  the last sequence number per session in `counter/session/<session_id>` (`counter/manual`),
  advanced by compare-and-set so concurrent snapshots never share a number. Ids are
  `<session_id>-fc-<seq>` (`fc-manual-<seq>`); a counter never goes back, so an id is never
  reused, even after a fork dropped its checkpoint;
- `tiller-file-blobs`: file contents, content-addressed (`sha256/<hex>`), written once:
  identical contents are stored once, whichever file or session they came from. Values
  over the NATS payload limit go through the Bus (its NATS backend keeps them in the
  object store), so nothing is chunked here.

A manifest's `files` entries: `{path, existed: true, kind: "file", sha256, size, mode}`,
`{path, existed: true, kind: "symlink", target}` or `{path, existed: false,
absent_parents}` — `path` relative to the jail root with `/` separators; `absent_parents`
the directories on the way that did not exist either (deepest first), removed again on a
rewind when empty. A record that does not have this shape raises
`MalformedFileCheckpoint` naming its key.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from ..errors import UsageError
from . import _file_ops, _workspace_fs
from . import _workspace_checkpoints as _ws
from ._bus import Bus, KeyValue, RevisionConflict
from ._file_manifest import (
    FileRecord,
    FileRestoreFailed,
    MalformedFileCheckpoint,
    Manifest,
    RestoreReport,
    counter_value,
    decode_records,
    encode_records,
    load_record,
    parse_manifest,
)

if TYPE_CHECKING:  # the tools package is imported when a snapshot or restore runs
    from ..tools import CheckpointOrigin, Jail

__all__ = ["FILE_BLOBS_BUCKET", "FILE_CHECKPOINTS_BUCKET", "FileCheckpoints"]

FILE_CHECKPOINTS_BUCKET = "tiller-file-checkpoints"
FILE_BLOBS_BUCKET = "tiller-file-blobs"

_SEQ_WIDTH = 10


# ── the store ────────────────────────────────────────────────────────────────────────


def _seq_key(prefix: str, seq: int) -> str:
    return f"{prefix}{seq:0{_SEQ_WIDTH}d}"


class FileCheckpoints:
    """File snapshots in a `Bus`: the `FileSnapshotter` a run's tools write through, and the
    restore behind `tiller rewind`.

    ```python
    files = FileCheckpoints(bus, run_id=state.run_id)
    await files.snapshot(ctx.checkpoint_origin(), root, [root / "app.py"], reason="edit")
    report = await files.restore_to(session_id, 4, root)  # the workspace as at message 4
    ```

    `run_id`, when given, is recorded in each manifest (a session — a thread — may span
    several runs). Blobs this instance wrote or found are remembered, so a file snapshotted
    again unchanged costs no store write.
    """

    def __init__(
        self,
        bus: Bus,
        *,
        bucket: str = FILE_CHECKPOINTS_BUCKET,
        blob_bucket: str = FILE_BLOBS_BUCKET,
        run_id: str | None = None,
        command_may_write: Callable[[str, Path], bool] | None = None,
    ) -> None:
        if bucket == blob_bucket:
            raise UsageError("file checkpoints and their blobs need two different buckets")
        self.bus = bus
        self.bucket = bucket
        self.blob_bucket = blob_bucket
        self.run_id = run_id
        self._kv: KeyValue | None = None
        self._blobs: KeyValue | None = None
        self._known_blobs: set[str] = set()
        self._command_may_write = command_may_write
        #: Shell snapshots: the last one's files (so unchanged ones are not read again)
        #: and counts of what was read (`files_read`, `bytes_read`).
        self.workspace = _ws.WorkspaceRecorder(self._store_blob)

    async def _manifests(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self.bus.kv(self.bucket)
        return self._kv

    async def _blob_bucket(self) -> KeyValue:
        if self._blobs is None:
            self._blobs = await self.bus.kv(self.blob_bucket)
        return self._blobs

    # ── snapshot ─────────────────────────────────────────────────────────────────────

    async def snapshot(
        self, origin: CheckpointOrigin, root: Path, paths: Sequence[Path], *, reason: str
    ) -> str:
        """Record what `paths` (absolute, inside `root`; relative ones are taken from it)
        hold now, anchored at `origin`, and return the checkpoint's id.

        A regular file is stored by content; a symbolic link as its target text (never
        followed); a missing path as not existing. A path outside the jail raises
        `PathOutsideJail`; a directory (tools snapshot the files they change), anything else
        that is not a file or a link, or a path whose directories are not directories,
        raises `ToolError` saying so, for the model to read. Either way nothing is recorded
        and the tool must not write. The files are read before the checkpoint gets its number,
        so of two calls changing one file the one that wrote first has the smaller number.
        """
        from ..tools import MAX_SAVED_FILE_BYTES, Jail, ToolError

        jail = Jail(root)
        records: list[FileRecord] = []
        seen: set[str] = set()
        for path in paths:
            parts = self._snapshot_parts(jail, Path(path))
            rel = "/".join(parts)
            if rel in seen:
                continue
            seen.add(rel)
            try:
                found = await asyncio.to_thread(
                    _file_ops.observe, jail.root, parts, max_bytes=MAX_SAVED_FILE_BYTES
                )
            except _file_ops.FileOpRefused as exc:
                raise ToolError(f"{rel} cannot be written: {exc}") from None
            records.append(await self._record(rel, found))
        return await self._save(origin, jail.root, reason, records)

    async def _save(
        self,
        origin: CheckpointOrigin,
        root: Path,
        reason: str,
        records: Sequence[FileRecord],
        **workspace: object,
    ) -> str:
        anchored = origin.session_id is not None and origin.message_index is not None
        kv = await self._manifests()
        if anchored:
            session = str(origin.session_id)
            prefix, counter = f"session/{session}/", f"counter/session/{session}"
        else:
            prefix, counter = "manual/", "counter/manual"
        seq = await self._next_seq(kv, counter)
        manifest = Manifest(
            id=f"{origin.session_id}-fc-{seq}" if anchored else f"fc-manual-{seq}",
            seq=seq,
            session_id=origin.session_id,
            message_index=origin.message_index,
            task_id=origin.task_id,
            run_id=self.run_id,
            root=str(root),
            created_at=self.bus.clock(),
            reason=reason,
            files=tuple(records),
            **workspace,  # type: ignore[arg-type]
        )
        await kv.create(_seq_key(prefix, seq), manifest.to_json())
        return manifest.id

    # ── shell snapshots ──────────────────────────────────────────────────────────────

    def command_may_write(self, command: str, root: Path) -> bool:
        """Whether `command` needs a snapshot: the policy's classification when the run
        gave one (`command_may_write=`), else always (when in doubt, snapshot)."""
        if self._command_may_write is None:
            return True
        try:
            return self._command_may_write(command, root)
        except Exception:  # a classifier fault must not skip the snapshot
            return True

    async def snapshot_workspace(
        self, origin: CheckpointOrigin, root: Path, *, command: str, background: bool
    ) -> str:
        """Record every tracked path under `root` before the shell runs `command`
        (`_workspace_checkpoints`), anchored at `origin`; returns the checkpoint's id. A
        cap hit makes the snapshot partial: its `note` says which, and a rewind says so."""
        from ..tools import Jail

        jail = Jail(root).root
        recorded = await self.workspace.record(jail, int(self.bus.clock() * 1e9))
        files_blob = await self._store_blob(encode_records(recorded.records))
        return await self._save(
            origin,
            jail,
            "execute_command (background)" if background else "execute_command",
            (),
            kind="workspace",
            files_blob=files_blob,
            command=command,
            background=background,
            complete=recorded.complete,
            note=recorded.note,
        )

    @staticmethod
    def _snapshot_parts(jail: Jail, path: Path) -> tuple[str, ...]:
        """`path`'s components relative to the jail's real root, through its real parent
        directory (so a link in the middle is resolved, and checked, here) and its own name
        (so a link at the end is recorded as a link)."""
        from ..tools import ToolError

        if path.name in ("", ".", ".."):
            raise ToolError(f"{str(path)!r} names a directory; only files can be written")
        parent = jail.resolve(path.parent if path.is_absolute() else jail.root / path.parent)
        parts = (parent / path.name).relative_to(jail.root).parts
        if not parts:
            raise ToolError("the workspace root is a directory; only files can be written")
        try:
            "/".join(parts).encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError(f"{str(path)!r} has a name that is not UTF-8 text") from None
        return parts

    async def _record(self, rel: str, found: _file_ops.Observed) -> FileRecord:
        from ..tools import ToolError

        if found.kind == "missing":
            return FileRecord(rel, "missing", absent_parents=found.absent_parents)
        if found.kind == "symlink" and found.target is not None:
            try:
                found.target.encode("utf-8")
            except UnicodeEncodeError:
                raise ToolError(f"{rel} is a link whose target is not UTF-8 text") from None
            return FileRecord(rel, "symlink", target=found.target)
        if found.kind == "file" and found.data is not None and found.mode is not None:
            sha = await self._store_blob(found.data)
            return FileRecord(rel, "file", sha256=sha, size=len(found.data), mode=found.mode)
        if found.kind == "file" and found.mode is not None:
            # Over MAX_SAVED_FILE_BYTES: not read; a rewind says it cannot put it back.
            return FileRecord(rel, "file", size=found.size, mode=found.mode, unsaved=True)
        if found.kind == "directory":
            raise ToolError(f"{rel} is a directory; only files can be written")
        raise ToolError(f"{rel} is not a regular file (a device, socket or pipe); leave it be")

    async def _store_blob(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        if sha not in self._known_blobs:
            blobs = await self._blob_bucket()
            # A conflict means it is stored already (by a twin snapshot, or another run).
            with contextlib.suppress(RevisionConflict):
                await blobs.create(f"sha256/{sha}", data)
            self._known_blobs.add(sha)
        return sha

    async def _next_seq(self, kv: KeyValue, counter: str) -> int:
        """The next number of a key space, by compare-and-set on its counter record."""
        while True:
            entry = await kv.get(counter)
            try:
                if entry is None:
                    await kv.create(counter, counter_value(1))
                    return 1
                seq = load_record(entry.value, self.bucket, counter).integer("last") + 1
                await kv.update(counter, counter_value(seq), expected=entry.revision)
                return seq
            except RevisionConflict:
                continue  # another snapshot took a number meanwhile

    async def workspace_files(self, manifest: Manifest) -> tuple[FileRecord, ...]:
        """Every record of a manifest: a workspace manifest's are loaded from its blob."""
        if manifest.files_blob is None:
            return manifest.files
        data = await self._load_blob(manifest.files_blob)
        return decode_records(data, self.blob_bucket, f"sha256/{manifest.files_blob}")

    # ── listing ──────────────────────────────────────────────────────────────────────

    async def list(self, session_id: str | None) -> builtins.list[Manifest]:
        """The session's checkpoints in the order they were taken (`None`: the unanchored
        ones)."""
        prefix = "manual/" if session_id is None else f"session/{session_id}/"
        return [manifest for _, manifest in await self._listed(prefix)]

    async def _listed(self, prefix: str) -> builtins.list[tuple[str, Manifest]]:
        kv = await self._manifests()
        found: builtins.list[tuple[str, Manifest]] = []
        for key in await kv.keys(prefix):
            # Keys of a session whose id continues this one's (`a` and `a/b`) share the
            # prefix; this session's own keys end in a bare number.
            if not key[len(prefix) :].isdigit():
                continue
            entry = await kv.get(key)
            if entry is None:
                continue  # dropped meanwhile
            found.append((key, parse_manifest(entry.value, self.bucket, key)))
        found.sort(key=lambda item: item[1].seq)
        return found

    # ── fork and restore ─────────────────────────────────────────────────────────────

    async def fork_at(self, session_id: str, message_index: int) -> builtins.list[str]:
        """The conversation branches at `message_index`: drop the checkpoints taken after it
        (`message_index` strictly greater), which describe a future the branch does not
        have; returns their ids. Checkpoints *at* the index stay: they hold the files as
        they were when that message was answered, which the branch still shares.

        (`restore_to` drops those at the index too: after a rewind to k, the changes made
        at k have been undone, so their checkpoints describe nothing that exists.)"""
        return await self._drop(session_id, lambda index: index > message_index)

    async def _drop(self, session_id: str, doomed: Callable[[int], bool]) -> builtins.list[str]:
        kv = await self._manifests()
        dropped: builtins.list[str] = []
        for key, manifest in await self._listed(f"session/{session_id}/"):
            if manifest.message_index is not None and doomed(manifest.message_index):
                await kv.delete(key)
                dropped.append(manifest.id)
        return dropped

    async def restore_to(
        self, session_id: str, message_index: int, root: Path, *, dry_run: bool = False
    ) -> RestoreReport:
        """Put the files under `root` back as they were at `message_index`: undo every
        change made at or after it.

        For each path recorded by any checkpoint at or after the index, the earliest such
        record is what the path held then: a file is written back byte for byte with its
        mode (atomically: a temporary file renamed over it), a link is made again, and a
        path that did not exist is deleted (with the directories made on the way to it,
        when they are empty). Paths are checked against the jail first (`Jail.resolve`):
        one that would escape it raises `PathOutsideJail` before anything is touched.

        Then the checkpoints at or after the index are dropped: they describe a future that
        no longer exists. If any file could not be put back, `FileRestoreFailed` is raised
        with the report instead, and the checkpoints are kept so the restore can be run
        again. With `dry_run`, nothing is changed and the report says what would be."""
        from ..tools import Jail

        if message_index < 0:
            raise UsageError(f"a message index is 0 or more, not {message_index}")
        jail = Jail(root)
        listed = await self._listed(f"session/{session_id}/")
        at_or_after = [
            manifest
            for _, manifest in listed
            if manifest.message_index is not None and manifest.message_index >= message_index
        ]
        loaded: dict[int, tuple[FileRecord, ...]] = {}
        for manifest in at_or_after:  # the shell snapshots a rewind needs, to a complete one
            if manifest.kind == "workspace":
                loaded[manifest.seq] = await self.workspace_files(manifest)
                if manifest.complete:
                    break
        earliest, decided, commands, partial = _decide(at_or_after, loaded)
        plan = [(record, _restore_parts(jail, record.path)) for record in earliest.values()]
        # Deletions first: where the run replaced a file `a` by a directory holding `a/b`,
        # `a/b` (and the then empty `a/`) must go before `a` is written back.
        plan.sort(key=lambda item: (item[0].existed, item[0].path))
        outcome = _Outcome()
        shell = _ws.WorkspaceOutcome(partial=partial)
        by_shell = bool(decided.records) or decided.complete
        if by_shell:  # what the shell made goes first, deepest first
            await _ws.restore_workspace(
                jail.root, decided, self._load_blob, shell, dry_run=dry_run, deletions_only=True
            )
        for record, parts in plan:
            try:
                await self._restore_one(jail.root, record, parts, outcome, dry_run=dry_run)
            except (OSError, _file_ops.FileOpRefused, MalformedFileCheckpoint) as exc:
                outcome.failed.append((record.path, _reason(exc)))
        if by_shell:
            await _ws.restore_workspace(
                jail.root, decided, self._load_blob, shell, dry_run=dry_run, deletions_only=False
            )
        report = RestoreReport(
            session_id=session_id,
            message_index=message_index,
            restored=(*outcome.restored, *shell.restored),
            deleted=(*shell.deleted, *outcome.deleted),
            unchanged=(*outcome.unchanged, *shell.unchanged),
            removed_dirs=(*shell.removed_dirs, *outcome.removed_dirs),
            failed=(*outcome.failed, *shell.failed),
            dry_run=dry_run,
            unsaved=(*outcome.unsaved, *shell.unsaved),
            commands=tuple(commands),
            partial=tuple(shell.partial),
        )
        if dry_run:
            return _with_dropped(report, [m.id for m in at_or_after])
        if report.failed:
            raise FileRestoreFailed(report)
        dropped = await self._drop(session_id, lambda index: index >= message_index)
        return _with_dropped(report, dropped)

    async def _restore_one(
        self,
        root: Path,
        record: FileRecord,
        parts: tuple[str, ...],
        outcome: _Outcome,
        *,
        dry_run: bool,
    ) -> None:
        now = await asyncio.to_thread(_file_ops.observe, root, parts)
        if record.kind == "missing":
            if now.kind == "missing":
                outcome.unchanged.append(record.path)
            elif now.kind == "directory":
                raise _file_ops.FileOpRefused(
                    "did not exist then but is a directory now; remove it yourself if it should go"
                )
            elif dry_run:
                outcome.deleted.append(record.path)
            else:
                await asyncio.to_thread(_file_ops.remove, root, parts)
                outcome.deleted.append(record.path)
            if not dry_run and record.absent_parents:
                removed = await asyncio.to_thread(
                    _file_ops.remove_empty_dirs, root, record.absent_parents
                )
                outcome.removed_dirs.extend(removed)
            return
        if now.kind == "directory":
            raise _file_ops.FileOpRefused(
                f"was a {record.kind} then but is a directory now; move the directory away"
            )
        if record.kind == "symlink":
            target = str(record.target)
            if now.kind == "symlink" and now.target == target:
                outcome.unchanged.append(record.path)
                return
            if not dry_run:
                await asyncio.to_thread(_file_ops.write_symlink, root, parts, target)
            outcome.restored.append(record.path)
            return
        if record.unsaved:
            outcome.unsaved.append(
                (record.path, f"not restored: it was {record.size} bytes, too large to save")
            )
            return
        sha, mode = str(record.sha256), int(record.mode or 0)
        if (
            now.kind == "file"
            and now.mode == mode
            and now.data is not None
            and hashlib.sha256(now.data).hexdigest() == sha
        ):
            outcome.unchanged.append(record.path)
            return
        if not dry_run:
            data = await self._load_blob(sha)
            await asyncio.to_thread(_file_ops.write_file, root, parts, data, mode)
        outcome.restored.append(record.path)

    async def _load_blob(self, sha: str) -> bytes:
        blobs = await self._blob_bucket()
        key = f"sha256/{sha}"
        entry = await blobs.get(key)
        if entry is None:
            raise MalformedFileCheckpoint(
                self.blob_bucket, key, "the saved content is missing from the store"
            )
        if hashlib.sha256(entry.value).hexdigest() != sha:
            raise MalformedFileCheckpoint(
                self.blob_bucket, key, "the saved content does not match its sha256 (damaged)"
            )
        return entry.value


class _Outcome:
    """What a restore did so far, path by path."""

    def __init__(self) -> None:
        self.restored: list[str] = []
        self.deleted: list[str] = []
        self.unchanged: list[str] = []
        self.removed_dirs: list[str] = []
        self.failed: list[tuple[str, str]] = []
        self.unsaved: list[tuple[str, str]] = []


def _decide(
    manifests: Sequence[Manifest], loaded: dict[int, tuple[FileRecord, ...]]
) -> tuple[dict[str, FileRecord], _ws.Decided, list[str], list[str]]:
    """Which record each path goes back to: the earliest taken at or after the point.

    A file tool's manifest speaks for the paths it lists; a shell snapshot for every
    tracked path (once a complete one is seen, a tracked path it did not list did not
    exist then). Returns the file tools' records (restored as before), what the shell
    snapshots decide, the commands whose edits are undone, and notes on partial ones."""
    per_file: dict[str, FileRecord] = {}
    decided = _ws.Decided()
    commands: list[str] = []
    partial: list[str] = []
    for manifest in manifests:
        if manifest.kind == "workspace":
            commands.append(manifest.command or "")
            if decided.complete:
                continue
            if not manifest.complete:
                partial.append(
                    f"the snapshot before `{manifest.command}` was partial ({manifest.note}); "
                    "paths it did not record were left as they are"
                )
            for record in loaded.get(manifest.seq, ()):
                if record.path not in per_file:
                    decided.records.setdefault(record.path, record)
            decided.complete = decided.complete or manifest.complete
            continue
        for record in manifest.files:
            if record.path in decided.records or record.path in per_file:
                continue
            if decided.complete and not _workspace_fs.excluded_path(record.path):
                continue  # the complete shell snapshot before it decides this path
            per_file[record.path] = record
            decided.others.add(record.path)
            decided.absent_dirs.update(record.absent_parents)
    return per_file, decided, commands, partial


def _with_dropped(report: RestoreReport, dropped: Sequence[str]) -> RestoreReport:
    return dataclasses.replace(report, dropped=tuple(dropped))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def _restore_parts(jail: Jail, rel: str) -> tuple[str, ...]:
    """`rel`'s components, if writing it stays inside the jail: its directory must
    resolve inside (`Jail.resolve`) and it must not climb with `..`; else
    `PathOutsideJail`. The last component is not resolved: a link there is replaced, not
    followed."""
    from ..tools import PathOutsideJail

    path = PurePosixPath(rel)
    jail.resolve(jail.root / Path(*path.parent.parts))
    if path.is_absolute() or any(part in ("..", ".") for part in path.parts):
        raise PathOutsideJail(rel, jail.root, "climbs out of its directory with '..'")
    return path.parts
