"""`TaintIndex`: the taint files carry from one run to the next (`.tiller/taint.json`).

A run whose conversation read untrusted input may have written that input into a file
(`TODO.md` saved from a web page). The conversation's taint ends with the run, but the
file does not: a later run that reads it holds untrusted text again. So the files a
tainted run wrote are listed here with the run's taint, and a run that reads a listed
file inherits it (law 6: taint only grows, and runs are not a boundary).

```json
{"schema_version": 1,
 "files": {"TODO.md": {"taint": ["private", "untrusted"], "sha256": "…", "run": "r1"}}}
```

- Keys are workspace-relative POSIX paths. The hash is the content as the tainted run
  left it. **A later edit does not clear the taint**: a person who rewrote half the file
  may have kept the other half, and the model may have rewritten it too, so the entry
  stays until a person clears it (`tiller taint clear PATH`); `tiller taint show` says
  which listed files changed since (their hash differs).
- The index lives under `.tiller/`, which the file tools and the sandbox never let the
  model write (law 11); only tiller's host-side code writes it, through directory
  descriptors with `O_NOFOLLOW` (a symlink planted at `.tiller` is refused, not
  followed).
- Two runs in one workspace: every update is read-modify-write under an exclusive
  `flock` on `.tiller/taint.lock`, written to a temporary file and `os.replace`d, so a
  crash leaves the old index or the new one, never half of one.
- Unknown taint is untrusted (law 3): an index that cannot be parsed, or one that
  reached `MAX_ENTRIES` (entries are never dropped to make room: that would launder
  them), makes every read of a workspace file count as untrusted, with a warning, until a
  person clears it. Updates leave a corrupt index as it is, for the person to look at.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import fcntl
import hashlib
import logging
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from ..conversation import Taint
from ..errors import TillerError

__all__ = [
    "MAX_ENTRIES",
    "TAINT_INDEX",
    "IndexHealth",
    "TaintEntry",
    "TaintIndex",
    "TaintIndexError",
]

_log = logging.getLogger("tiller.taint")

#: Where the index lives, relative to the workspace root.
TAINT_INDEX: Final = Path(".tiller") / "taint.json"
_DIR: Final = ".tiller"
_FILE: Final = "taint.json"
_LOCK: Final = "taint.lock"
SCHEMA_VERSION: Final = 1
#: Files the index lists at most; past it, every read counts as untrusted.
MAX_ENTRIES: Final = 20_000
#: The index file is never read past this size (a bigger one counts as corrupt).
MAX_INDEX_BYTES: Final = 16 * 1024 * 1024
#: Files bigger than this are listed without a hash.
MAX_HASHED_BYTES: Final = 256 * 1024 * 1024

_NAMES: Final = {"private": Taint.PRIVATE_DATA, "untrusted": Taint.UNTRUSTED_INPUT}
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class TaintIndexError(TillerError):
    """The index could not be written (the workspace is read-only, or `.tiller` is not a
    plain directory). The message says what to check."""


class IndexHealth(enum.Enum):
    """Whether the index can be believed."""

    OK = "ok"
    #: It cannot be parsed: every read counts as untrusted until it is cleared.
    CORRUPT = "corrupt"
    #: It reached `MAX_ENTRIES`: every read counts as untrusted until it is cleared.
    FULL = "full"


@dataclass(frozen=True, slots=True)
class TaintEntry:
    """One listed file: its taint, its hash when the tainted run left it, which run."""

    path: str
    taint: Taint
    sha256: str | None
    run: str

    def to_json(self) -> dict[str, Any]:
        return {"taint": _names(self.taint), "sha256": self.sha256, "run": self.run}


def _names(taint: Taint) -> list[str]:
    return [name for name, flag in _NAMES.items() if taint & flag]


def _parse(raw: bytes) -> tuple[IndexHealth, dict[str, TaintEntry]]:
    try:
        document = orjson.loads(raw)
        files = document["files"]
        if document.get("schema_version") != SCHEMA_VERSION or not isinstance(files, dict):
            raise ValueError("not a version 1 index")
        entries: dict[str, TaintEntry] = {}
        for path, item in files.items():
            taint = Taint.NONE
            for name in item["taint"]:
                taint |= _NAMES[name]
            sha = item.get("sha256")
            entries[str(path)] = TaintEntry(
                str(path), taint, sha if isinstance(sha, str) else None, str(item.get("run", ""))
            )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return IndexHealth.CORRUPT, {}
    health = IndexHealth.FULL if document.get("full") or len(entries) >= MAX_ENTRIES else None
    return health or IndexHealth.OK, entries


class TaintIndex:
    """The taint index of the workspace `root` (see the module docstring).

    `load()` reads it (cheap when it is missing, as in most workspaces); `taint_of(path)`
    is what reading `path` adds; `mark(paths, taint, run=)` lists files a tainted run
    wrote; `clear()` is the person's way out.
    """

    __slots__ = ("_entries", "_health", "root")

    def __init__(self, root: Path) -> None:
        self.root = root
        self._entries: dict[str, TaintEntry] = {}
        self._health = IndexHealth.OK

    @property
    def health(self) -> IndexHealth:
        return self._health

    @property
    def entries(self) -> Mapping[str, TaintEntry]:
        return self._entries

    def holds_untrusted(self) -> bool:
        """Whether some read of this workspace can bring untrusted text."""
        return self._health is not IndexHealth.OK or any(
            entry.taint & Taint.UNTRUSTED_INPUT for entry in self._entries.values()
        )

    def taint_of(self, path: str) -> Taint:
        """What reading the workspace file `path` (relative, POSIX) adds to a
        conversation besides the read's own taint."""
        if self._health is not IndexHealth.OK:
            return Taint.UNTRUSTED_INPUT  # unknown taint is untrusted (law 3)
        entry = self._entries.get(path)
        return entry.taint if entry is not None else Taint.NONE

    # ── reading ──────────────────────────────────────────────────────────────────

    def load(self) -> TaintIndex:
        """Read the index as it is now; returns self."""
        try:
            with _tiller_dir(self.root, create=False) as dir_fd:
                raw = _read_at(dir_fd, _FILE, MAX_INDEX_BYTES)
        except FileNotFoundError:
            self._health, self._entries = IndexHealth.OK, {}
            return self
        except OSError as exc:
            _log.warning(
                "the taint index %s cannot be read (%s): every file read in this workspace "
                "counts as untrusted until it is fixed or cleared (tiller taint clear)",
                self.root / TAINT_INDEX,
                exc,
            )
            self._health, self._entries = IndexHealth.CORRUPT, {}
            return self
        self._health, self._entries = _parse(raw)
        if self._health is IndexHealth.CORRUPT:
            _log.warning(
                "the taint index %s is corrupt: every file read in this workspace counts as "
                "untrusted until a person clears it (tiller taint show / tiller taint clear)",
                self.root / TAINT_INDEX,
            )
        elif self._health is IndexHealth.FULL:
            _log.warning(
                "the taint index %s lists %d files, its limit: every file read in this "
                "workspace counts as untrusted until a person clears it (tiller taint clear)",
                self.root / TAINT_INDEX,
                len(self._entries),
            )
        return self

    # ── writing ──────────────────────────────────────────────────────────────────

    def mark(self, paths: Iterable[str], taint: Taint, *, run: str, complete: bool = True) -> None:
        """List `paths` (relative, POSIX, written by run `run`) with `taint`, merged into
        what they already carry. `complete=False`: the caller could not see every file
        the run may have written (a capped walk), so the index becomes full (every read
        untrusted) rather than miss one. Raises `TaintIndexError` when it cannot be
        written."""
        wanted = sorted(set(paths))
        if not taint or (not wanted and complete):
            return
        with self._locked() as dir_fd:
            self._reload_at(dir_fd)
            if self._health is IndexHealth.CORRUPT:
                return  # keep it for the person: rewriting it would launder its entries
            full = self._health is IndexHealth.FULL or not complete
            for path in wanted:
                old = self._entries.get(path)
                if old is None and len(self._entries) >= MAX_ENTRIES:
                    full = True  # never drop an entry to make room: that launders it
                    continue
                merged = taint | (old.taint if old is not None else Taint.NONE)
                self._entries[path] = TaintEntry(path, merged, _hash(self.root, path), run)
            self._health = IndexHealth.FULL if full else IndexHealth.OK
            self._write_at(dir_fd, full=full)

    def clear(self, paths: Iterable[str] | None = None) -> list[str]:
        """Forget `paths` (all of them, and a corrupt or full state, when `None`): a
        person's decision that those files are clean. Returns what was forgotten."""
        with self._locked() as dir_fd:
            self._reload_at(dir_fd)
            if paths is None:
                gone = sorted(self._entries)
                self._entries = {}
                self._health = IndexHealth.OK
            else:
                gone = sorted(p for p in set(paths) if p in self._entries)
                for path in gone:
                    del self._entries[path]
                if self._health is IndexHealth.CORRUPT:
                    return gone  # only clearing everything replaces a corrupt index
            self._write_at(dir_fd, full=self._health is IndexHealth.FULL)
        return gone

    def absorb(self, earlier: TaintIndex) -> None:
        """Keep in memory what `earlier` (this workspace's index as read before) listed:
        within one run the index's taint only grows (law 6), even if the file lost
        entries since (a person cleared them mid-run, or something rewrote it)."""
        if earlier._health is not IndexHealth.OK:
            self._health = earlier._health if self._health is IndexHealth.OK else self._health
        for path, entry in earlier._entries.items():
            now = self._entries.get(path)
            if now is None:
                self._entries[path] = entry
            elif entry.taint & ~now.taint:
                self._entries[path] = TaintEntry(path, now.taint | entry.taint, now.sha256, now.run)

    def changed(self, path: str) -> bool | None:
        """Whether the listed file `path` differs from what the tainted run left (None:
        unknown, e.g. too big to hash or gone)."""
        entry = self._entries.get(path)
        if entry is None or entry.sha256 is None:
            return None
        now = _hash(self.root, path)
        return None if now is None else now != entry.sha256

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        try:
            with _tiller_dir(self.root, create=True) as dir_fd:
                lock = os.open(_LOCK, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600, dir_fd=dir_fd)
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    yield dir_fd
                finally:
                    os.close(lock)  # closing releases the lock
        except OSError as exc:
            raise TaintIndexError(
                f"the taint index {self.root / TAINT_INDEX} cannot be updated ({exc}); check "
                "that the workspace is writable and that .tiller is a plain directory"
            ) from exc

    def _reload_at(self, dir_fd: int) -> None:
        try:
            raw = _read_at(dir_fd, _FILE, MAX_INDEX_BYTES)
        except FileNotFoundError:
            self._health, self._entries = IndexHealth.OK, {}
            return
        except OSError:
            self._health, self._entries = IndexHealth.CORRUPT, {}
            return
        self._health, self._entries = _parse(raw)

    def _write_at(self, dir_fd: int, *, full: bool) -> None:
        document: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "files": {path: self._entries[path].to_json() for path in sorted(self._entries)},
        }
        if full:
            document["full"] = True
        data = orjson.dumps(document, option=orjson.OPT_INDENT_2)
        temp = f"{_FILE}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dir_fd)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=dir_fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, _FILE, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


_NOFOLLOW: Final = os.O_NOFOLLOW | os.O_CLOEXEC


@contextlib.contextmanager
def _tiller_dir(root: Path, *, create: bool) -> Iterator[int]:
    """A descriptor of `root/.tiller`, never through a symlink (created if `create`)."""
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        try:
            fd = os.open(_DIR, _DIR_FLAGS, dir_fd=root_fd)
        except FileNotFoundError:
            if not create:
                raise
            with contextlib.suppress(FileExistsError):
                os.mkdir(_DIR, 0o755, dir_fd=root_fd)
            fd = os.open(_DIR, _DIR_FLAGS, dir_fd=root_fd)
        try:
            yield fd
        finally:
            os.close(fd)
    finally:
        os.close(root_fd)


def _read_at(dir_fd: int, name: str, limit: int) -> bytes:
    fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not _regular(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", name)
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"over {limit} bytes", name)
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if total > limit:
                raise OSError(errno.EFBIG, f"over {limit} bytes", name)
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _regular(mode: int) -> bool:
    return stat.S_ISREG(mode)


def _hash(root: Path, path: str) -> str | None:
    """The sha256 of the workspace file `path`, walked without following links; None
    when it is gone, not a regular file, or too big."""
    parts = path.split("/")
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        file_fd = os.open(parts[-1], _READ_FLAGS, dir_fd=fd)
    except OSError:
        os.close(fd)
        return None
    os.close(fd)
    try:
        st = os.fstat(file_fd)
        if not _regular(st.st_mode) or st.st_size > MAX_HASHED_BYTES:
            return None
        os.set_blocking(file_fd, True)
        digest = hashlib.sha256()
        while chunk := os.read(file_fd, 1 << 20):
            digest.update(chunk)
        return digest.hexdigest()
    except OSError:
        return None
    finally:
        os.close(file_fd)
