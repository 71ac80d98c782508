"""The records of file checkpoints — manifests and the paths in them — their JSON shape
and its validation, and what a restore reports (see `_file_checkpoints` for the store).

Every record is JSON with a `schema_version`. Reading one that lacks a field, has a field
of the wrong type, or a path that is not relative raises `MalformedFileCheckpoint` naming
the bucket and key, never a bare `KeyError`.

Schema versions (this tiller writes the newest and reads them all):

- 1: manifests of the paths a file tool wrote (`files`).
- 2: adds workspace manifests (`kind: "workspace"`, taken before a shell command: every
  tracked path, with `command`, `background`, `complete` and `note`), and in `files`
  records of `kind: "directory"`, files recorded `unsaved` (too large to keep: no
  `sha256`), files stored as `chunks` (their blobs, in order), and the `stat` signature
  (`[dev, ino, size, mtime_ns, ctime_ns]`) that lets the next snapshot skip an unchanged
  file. A version-1 manifest reads as `kind: "files"`.
"""

from __future__ import annotations

import builtins
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

import orjson

from .._schema_ledger import LEDGER, newer_problem, tiller_version, written_by_of
from ..errors import NewerSchemaError, TillerError
from ._bus import StoreError

__all__ = [
    "FileCheckpointFromNewerTiller",
    "FileRecord",
    "FileRestoreFailed",
    "MalformedFileCheckpoint",
    "Manifest",
    "RestoreReport",
    "counter_value",
    "decode_records",
    "encode_records",
    "load_record",
    "parse_manifest",
]

SCHEMA_VERSION = LEDGER["file_checkpoint"].current
#: The versions this tiller reads (every one it ever wrote).
READABLE_VERSIONS = frozenset(LEDGER["file_checkpoint"].readable)

_SHA256 = re.compile(r"[0-9a-f]{64}")
_TYPE_NAMES: dict[type, str] = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    list: "a list",
}


class MalformedFileCheckpoint(StoreError):
    """A file-checkpoint record (manifest, counter or blob) does not have the shape this
    tiller writes: it was written by something else, or damaged. `bucket` and `key` name it.
    """

    def __init__(self, bucket: str, key: str, problem: str) -> None:
        super().__init__(f"{bucket}/{key}: {problem}")
        self.bucket = bucket
        self.key = key


class FileCheckpointFromNewerTiller(MalformedFileCheckpoint, NewerSchemaError):
    """A file-checkpoint record written by a newer tiller (`written_by`, None when it does
    not say): upgrade tiller to read it."""

    def __init__(self, bucket: str, key: str, problem: str, written_by: str | None) -> None:
        super().__init__(bucket, key, problem)
        self.written_by = written_by


class FileRestoreFailed(TillerError):
    """Some files could not be put back; `report` says which (`report.failed`) and what
    was done. The checkpoints were kept, so the same rewind can be run again once the
    cause is fixed: restoring is idempotent."""

    def __init__(self, report: RestoreReport) -> None:
        listed = "; ".join(f"{path}: {why}" for path, why in report.failed)
        super().__init__(
            f"{len(report.failed)} file(s) could not be restored to message "
            f"{report.message_index}: {listed}"
        )
        self.report = report


# ── records ──────────────────────────────────────────────────────────────────────────

Kind = Literal["file", "symlink", "directory", "missing"]
ManifestKind = Literal["files", "workspace"]
#: `[dev, ino, size, mtime_ns, ctime_ns]` of a file when it was read.
Signature = tuple[int, int, int, int, int]


@dataclass(frozen=True, slots=True)
class FileRecord:
    """One path as it was when the checkpoint was taken. A file is `unsaved` when it was
    too large to keep (`sha256` is then None); its content is the blob `sha256`, or the
    blobs `chunks` one after the other when it was stored in pieces."""

    path: str
    kind: Kind
    sha256: str | None = None
    size: int | None = None
    mode: int | None = None
    target: str | None = None
    absent_parents: tuple[str, ...] = ()
    unsaved: bool = False
    chunks: tuple[str, ...] = ()
    signature: Signature | None = None

    @property
    def existed(self) -> bool:
        return self.kind != "missing"

    @property
    def blobs(self) -> tuple[str, ...]:
        """The blobs whose concatenation is the file's content."""
        if self.chunks:
            return self.chunks
        return (self.sha256,) if self.sha256 is not None else ()

    def to_data(self) -> dict[str, Any]:
        if self.kind == "file":
            data: dict[str, Any] = {
                "path": self.path,
                "existed": True,
                "kind": "file",
                "sha256": self.sha256,
                "size": self.size,
                "mode": self.mode,
            }
            if self.unsaved:
                data["unsaved"] = True
            if self.chunks:
                data["chunks"] = list(self.chunks)
            if self.signature is not None:
                data["stat"] = list(self.signature)
            return data
        if self.kind == "symlink":
            return {"path": self.path, "existed": True, "kind": "symlink", "target": self.target}
        if self.kind == "directory":
            return {"path": self.path, "existed": True, "kind": "directory", "mode": self.mode}
        return {"path": self.path, "existed": False, "absent_parents": list(self.absent_parents)}


@dataclass(frozen=True, slots=True)
class Manifest:
    """One checkpoint: where it is anchored, and the paths it recorded."""

    id: str
    seq: int
    session_id: str | None
    message_index: int | None
    task_id: str | None
    run_id: str | None
    root: str
    created_at: float
    reason: str
    files: tuple[FileRecord, ...]
    #: "files": the paths a file tool wrote; "workspace": every tracked path, before a
    #: shell `command` ran (`complete` False when a cap stopped the walk: `note` says which).
    kind: ManifestKind = "files"
    command: str | None = None
    background: bool = False
    complete: bool = True
    note: str | None = None
    #: A workspace manifest's records live in this blob (`encode_records`), so listing
    #: checkpoints stays cheap and an unchanged workspace is stored once.
    files_blob: str | None = None

    def to_json(self) -> bytes:
        extra: dict[str, Any] = {}
        if self.kind == "workspace":
            extra = {
                "kind": "workspace",
                "command": self.command,
                "background": self.background,
                "complete": self.complete,
                "note": self.note,
                "files_blob": self.files_blob,
            }
        return orjson.dumps(
            {
                **extra,
                "schema_version": SCHEMA_VERSION,
                "written_by": tiller_version(),
                "id": self.id,
                "seq": self.seq,
                "run_id": self.run_id,
                "session_id": self.session_id,
                "message_index": self.message_index,
                "task_id": self.task_id,
                "root": self.root,
                "created_at": self.created_at,
                "reason": self.reason,
                "files": [record.to_data() for record in self.files],
            }
        )


class _Fields:
    """Typed reads of one JSON object, every failure a `MalformedFileCheckpoint`."""

    def __init__(self, data: object, bucket: str, key: str, where: str = "") -> None:
        self.bucket = bucket
        self.key = key
        self.where = where
        if not isinstance(data, dict):
            raise self.error(f"expected an object, found {type(data).__name__}")
        self.data: dict[str, Any] = data

    def error(self, problem: str) -> MalformedFileCheckpoint:
        return MalformedFileCheckpoint(self.bucket, self.key, f"{self.where}{problem}")

    def _get(self, name: str, types: tuple[type, ...], *, optional: bool = False) -> Any:
        if name not in self.data:
            if optional:
                return None
            raise self.error(f"field {name!r} is missing")
        value = self.data[name]
        if value is None and optional:
            return None
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise self.error(f"field {name!r} is {value!r}, not {_TYPE_NAMES[types[0]]}")
        return value

    def text(self, name: str) -> str:
        value: str = self._get(name, (str,))
        return value

    def maybe_text(self, name: str) -> str | None:
        value: str | None = self._get(name, (str,), optional=True)
        return value

    def integer(self, name: str) -> int:
        value: int = self._get(name, (int,))
        return value

    def maybe_integer(self, name: str) -> int | None:
        value: int | None = self._get(name, (int,), optional=True)
        return value

    def number(self, name: str) -> float:
        return float(self._get(name, (float, int)))

    def flag(self, name: str) -> bool:
        value: bool = self._get(name, (bool,))
        return value

    def items(self, name: str) -> builtins.list[Any]:
        value: builtins.list[Any] = self._get(name, (list,))
        return value


def load_record(value: bytes, bucket: str, key: str) -> _Fields:
    """A versioned JSON object, for typed reads of its fields."""
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise MalformedFileCheckpoint(bucket, key, f"not JSON ({exc})") from None
    fields = _Fields(data, bucket, key)
    version = fields.data.get("schema_version")
    if version not in READABLE_VERSIONS:
        problem = f"schema version {version!r}; this tiller reads {SCHEMA_VERSION}"
        if isinstance(version, int) and version > SCHEMA_VERSION:
            writer = written_by_of(fields.data)
            raise FileCheckpointFromNewerTiller(
                bucket, key, f"{problem}: {newer_problem(writer)}", writer
            )
        raise fields.error(problem)
    return fields


def _parse_record(data: object, bucket: str, key: str, index: int) -> FileRecord:
    fields = _Fields(data, bucket, key, f"files[{index}]: ")
    path = fields.text("path")
    parts = PurePosixPath(path).parts
    if not parts or PurePosixPath(path).is_absolute() or "\x00" in path:
        raise fields.error(f"path {path!r} is not a relative path")
    if not fields.flag("existed"):
        parents = fields.items("absent_parents")
        if not all(isinstance(p, str) and p for p in parents):
            raise fields.error("field 'absent_parents' must list relative directories")
        return FileRecord(path, "missing", absent_parents=tuple(parents))
    kind = fields.text("kind")
    if kind == "symlink":
        return FileRecord(path, "symlink", target=fields.text("target"))
    if kind not in ("file", "directory"):
        raise fields.error(f"kind {kind!r} is not 'file', 'symlink' or 'directory'")
    if kind == "directory":
        return FileRecord(path, "directory", mode=_mode(fields))
    unsaved = fields.data.get("unsaved") is True
    sha = None if unsaved else _sha(fields, fields.text("sha256"))
    mode = _mode(fields)
    size = fields.integer("size")
    chunks = () if unsaved else tuple(_sha(fields, c) for c in fields.data.get("chunks") or [])
    stat = fields.data.get("stat")
    signature: Signature | None = None
    if stat is not None:
        if not (
            isinstance(stat, list)
            and len(stat) == 5
            and all(isinstance(n, int) and not isinstance(n, bool) for n in stat)
        ):
            raise fields.error("field 'stat' must list five integers")
        signature = (stat[0], stat[1], stat[2], stat[3], stat[4])
    if unsaved:
        return FileRecord(path, "file", size=size, mode=mode, unsaved=True, signature=signature)
    return FileRecord(
        path, "file", sha256=sha, size=size, mode=mode, chunks=chunks, signature=signature
    )


def _mode(fields: _Fields) -> int:
    mode = fields.integer("mode")
    if not 0 <= mode <= 0o7777:
        raise fields.error(f"mode {mode!r} is not a permission mode")
    return mode


def _sha(fields: _Fields, sha: object) -> str:
    if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
        raise fields.error(f"sha256 {sha!r} is not 64 lowercase hex digits")
    return sha


def parse_manifest(value: bytes, bucket: str, key: str) -> Manifest:
    fields = load_record(value, bucket, key)
    files = tuple(
        _parse_record(item, bucket, key, index) for index, item in enumerate(fields.items("files"))
    )
    return Manifest(
        id=fields.text("id"),
        seq=fields.integer("seq"),
        session_id=fields.maybe_text("session_id"),
        message_index=fields.maybe_integer("message_index"),
        task_id=fields.maybe_text("task_id"),
        run_id=fields.maybe_text("run_id"),
        root=fields.text("root"),
        created_at=fields.number("created_at"),
        reason=fields.text("reason"),
        files=files,
        **_workspace_fields(fields),
    )


def _workspace_fields(fields: _Fields) -> dict[str, Any]:
    kind = fields.data.get("kind", "files")
    if kind == "files":
        return {}
    if kind != "workspace":
        raise fields.error(f"kind {kind!r} is neither 'files' nor 'workspace'")
    return {
        "kind": "workspace",
        "command": fields.maybe_text("command"),
        "background": fields.flag("background"),
        "complete": fields.flag("complete"),
        "note": fields.maybe_text("note"),
        "files_blob": _sha(fields, fields.text("files_blob")),
    }


#: The most bytes a workspace manifest's records may take once decompressed.
MAX_RECORDS_BYTES = 256 * 1024 * 1024


def encode_records(records: Sequence[FileRecord]) -> bytes:
    """A workspace manifest's records as one blob: compressed JSON (`schema_version`,
    `files`)."""
    data = orjson.dumps(
        {
            "schema_version": SCHEMA_VERSION,
            "written_by": tiller_version(),
            "files": [record.to_data() for record in records],
        }
    )
    return zlib.compress(data, 6)


def decode_records(blob: bytes, bucket: str, key: str) -> tuple[FileRecord, ...]:
    """The records of `encode_records`, checked as a manifest's are; a blob that does not
    decompress, or decompresses past `MAX_RECORDS_BYTES`, raises `MalformedFileCheckpoint`."""
    inflate = zlib.decompressobj()
    try:
        data = inflate.decompress(blob, MAX_RECORDS_BYTES)
    except zlib.error as exc:
        raise MalformedFileCheckpoint(bucket, key, f"records do not decompress ({exc})") from None
    if inflate.unconsumed_tail:
        raise MalformedFileCheckpoint(bucket, key, "the records are too large")
    fields = load_record(data, bucket, key)
    return tuple(
        _parse_record(item, bucket, key, index) for index, item in enumerate(fields.items("files"))
    )


# ── the report ───────────────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """What a restore did (or, with `dry_run`, would do), path by path (relative to the
    root): files written back, files deleted (they did not exist then), files already as
    they were, directories removed (made after the point, and empty now), failures with
    their reason, and the checkpoints dropped afterwards."""

    session_id: str
    message_index: int
    restored: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    removed_dirs: tuple[str, ...] = ()
    failed: tuple[tuple[str, str], ...] = ()
    dropped: tuple[str, ...] = ()
    dry_run: bool = False
    #: Paths left as they are because their content was never saved, with why (too
    #: large, or beyond a snapshot's cap).
    unsaved: tuple[tuple[str, str], ...] = ()
    #: The shell commands whose edits were undone (from the workspace snapshots taken
    #: before them), and notes on snapshots that were partial.
    commands: tuple[str, ...] = ()
    partial: tuple[str, ...] = ()


def counter_value(last: int) -> bytes:
    """The record of a key space's counter: the last sequence number handed out."""
    return orjson.dumps(
        {"schema_version": SCHEMA_VERSION, "written_by": tiller_version(), "last": last}
    )
