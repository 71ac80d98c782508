"""The workspace as a shell snapshot sees it, and the confined operations a rewind uses
to put it back.

`walk_workspace` lists every tracked path under the jail root without recursion: a stack
of directory descriptors, each child opened with `O_NOFOLLOW | O_DIRECTORY` relative to
its parent (DESIGN §11), so a symbolic link is recorded as a link (its target text) and
never followed, and a directory on another device (a mount) is not entered. Heavy or
private directories (`EXCLUDED_DIRS`) are skipped. Caps keep a hostile tree cheap: at most
`MAX_ENTRIES` entries and `MAX_DEPTH` levels; past a cap the walk stops descending and says
so (`Walked.note`), and the snapshot is partial.

The operations that change the workspace (`remove_entry`, `make_directory`, `open_temp`,
`commit_temp`) take a path as components relative to the root, refuse `..`, `.`, empty
components and anything absolute, and walk the parents one component at a time with
`O_NOFOLLOW | O_DIRECTORY`, checking that each stays on the root's device: a symlinked or
mounted parent is refused, so nothing outside the workspace is ever touched. Nothing here
deletes a tree: `remove_entry` unlinks one file or link, or removes one empty directory.

These are blocking calls; `FileCheckpoints` runs them in a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

__all__ = [
    "EXCLUDED_DIRS",
    "MAX_DEPTH",
    "MAX_ENTRIES",
    "Found",
    "UnsafePath",
    "Walked",
    "check_parts",
    "commit_temp",
    "excluded",
    "excluded_path",
    "make_directory",
    "make_symlink",
    "open_file",
    "open_temp",
    "remove_entry",
    "set_mode",
    "signature_of",
    "walk_workspace",
]

#: Directories a shell snapshot never records and a rewind never touches, as trailing
#: path components: `("node_modules",)` anywhere, `(".git", "objects")` in any `.git`.
#: tiller's own state, version-control object stores, dependency trees and caches:
#: large, rebuilt by tools, or not the model's to undo.
EXCLUDED_DIRS: Final = frozenset(
    {
        (".tiller",),
        (".git", "objects"),
        (".git", "lfs"),
        ("node_modules",),
        (".venv",),
        ("__pycache__",),
        (".mypy_cache",),
        (".pytest_cache",),
        (".ruff_cache",),
        (".tox",),
        (".nox",),
    }
)
#: The most entries (files, links, directories) one snapshot records.
MAX_ENTRIES: Final = 20_000
#: The deepest directory level a snapshot enters (the root's children are level 1).
MAX_DEPTH: Final = 64

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TEMP_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(Exception):
    """The path cannot be reached inside the workspace without following a link or
    leaving its device, or it is not a plain relative path."""


@dataclass(frozen=True, slots=True)
class Found:
    """One tracked path: a regular file (`signature`: dev, ino, size, mtime_ns,
    ctime_ns), a symbolic link (`target`) or a directory."""

    path: str
    kind: Literal["file", "symlink", "directory"]
    mode: int = 0
    size: int = 0
    target: str | None = None
    signature: tuple[int, int, int, int, int] | None = None


@dataclass(slots=True)
class Walked:
    """What a walk found, in order (a directory before what it holds), and whether it saw
    everything (`complete`; `note` says which cap stopped it)."""

    entries: list[Found] = field(default_factory=list)
    complete: bool = True
    note: str | None = None

    def stop(self, note: str) -> None:
        if self.complete:
            self.complete = False
            self.note = note


def excluded(parts: Sequence[str]) -> bool:
    """Whether the directory `parts` (relative to the root) is one never recorded."""
    return any(tuple(parts[-len(entry) :]) == entry for entry in EXCLUDED_DIRS)


def excluded_path(path: str) -> bool:
    """Whether `path` (relative, `/`-separated) lies in a directory never recorded."""
    parts = path.split("/")
    return any(excluded(parts[:end]) for end in range(1, len(parts)))


def signature_of(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def walk_workspace(
    root: Path, *, max_entries: int = MAX_ENTRIES, max_depth: int = MAX_DEPTH
) -> Walked:
    """Every tracked path under `root` (see the module docstring). Names that are not
    UTF-8, sockets, pipes and devices are not tracked (a rewind leaves them be)."""
    walked = Walked()
    root_fd = os.open(root, _DIR_FLAGS)
    device = os.fstat(root_fd).st_dev
    # Depth first, one open directory per level (never one per queued directory: a wide
    # tree must not exhaust the descriptors): (its fd, its parts, subdirectories to walk).
    stack: list[tuple[int, tuple[str, ...], list[_Child]]] = []
    try:
        stack.append(
            (
                root_fd,
                (),
                _list(root_fd, (), device, walked, max_entries=max_entries, max_depth=max_depth),
            )
        )
        while stack:
            fd, _, pending = stack[-1]
            if not pending:
                stack.pop()
                os.close(fd)
                continue
            name, parts, ino = pending.pop(0)  # in name order
            child = _open_child(fd, name, parts, ino, walked)
            if child is not None:
                listed = _list(
                    child, parts, device, walked, max_entries=max_entries, max_depth=max_depth
                )
                stack.append((child, parts, listed))
    finally:
        for fd, _, _ in stack:
            os.close(fd)
    return walked


#: A subdirectory still to walk: its name in its parent, its parts, its inode when listed.
_Child = tuple[str, tuple[str, ...], int]


def _open_child(fd: int, name: str, parts: tuple[str, ...], ino: int, walked: Walked) -> int | None:
    rel = "/".join(parts)
    try:
        child = os.open(name, _DIR_FLAGS, dir_fd=fd)
    except OSError:
        walked.stop(f"{rel} could not be opened")
        return None
    if os.fstat(child).st_ino != ino:  # swapped meanwhile
        os.close(child)
        walked.stop(f"{rel} changed while it was walked")
        return None
    return child


def _list(
    fd: int,
    where: tuple[str, ...],
    device: int,
    walked: Walked,
    *,
    max_entries: int,
    max_depth: int,
) -> list[_Child]:
    children: list[_Child] = []
    try:
        with os.scandir(fd) as listing:
            names = sorted(entry.name for entry in listing)
    except OSError:
        walked.stop(f"{'/'.join(where) or '.'} could not be listed")
        return children
    for name in names:
        if len(walked.entries) >= max_entries:
            walked.stop(f"the workspace has more than {max_entries} entries")
            break
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            continue
        parts = (*where, name)
        rel = "/".join(parts)
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue  # gone meanwhile
        if stat.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(name, dir_fd=fd)
                target.encode("utf-8")
            except (OSError, UnicodeEncodeError):
                continue
            walked.entries.append(Found(rel, "symlink", target=target))
        elif stat.S_ISREG(st.st_mode):
            walked.entries.append(
                Found(rel, "file", stat.S_IMODE(st.st_mode), st.st_size, signature=signature_of(st))
            )
        elif stat.S_ISDIR(st.st_mode):
            if excluded(parts) or st.st_dev != device:
                continue
            walked.entries.append(Found(rel, "directory", stat.S_IMODE(st.st_mode)))
            if len(parts) >= max_depth:
                walked.stop(f"{rel} is more than {max_depth} directories deep")
                continue
            children.append((name, parts, st.st_ino))
    return children


# ── confined operations ──────────────────────────────────────────────────────────────


def check_parts(parts: Sequence[str]) -> None:
    """Refuse a path that is not plain components relative to the root."""
    if not parts or any(p in ("", ".", "..") or "/" in p or "\x00" in p for p in parts):
        raise UnsafePath(f"{'/'.join(parts)!r} is not a plain path inside the workspace")


@contextlib.contextmanager
def _parent(root: Path, parts: Sequence[str]) -> Iterator[int]:
    """A descriptor of the directory holding `parts[-1]`, walked without following links
    and without leaving the root's device."""
    check_parts(parts)
    fd = os.open(root, _DIR_FLAGS)
    try:
        device = os.fstat(fd).st_dev
        for depth, part in enumerate(parts[:-1]):
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    where = "/".join(parts[: depth + 1])
                    raise UnsafePath(f"{where} is not a directory (a link or a file)") from None
                raise
            os.close(fd)
            fd = child
            if os.fstat(fd).st_dev != device:
                raise UnsafePath(f"{'/'.join(parts[: depth + 1])} is on another device")
        yield fd
    finally:
        os.close(fd)


def remove_entry(root: Path, parts: Sequence[str]) -> bool:
    """Unlink the file or link at `parts`, or remove it if it is an empty directory;
    False if it is gone already. A directory that is not empty raises `OSError`
    (ENOTEMPTY): nothing here removes a tree."""
    with _parent(root, parts) as fd:
        try:
            found = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(found.st_mode):
            os.rmdir(parts[-1], dir_fd=fd)
        else:
            os.unlink(parts[-1], dir_fd=fd)
        return True


def make_directory(root: Path, parts: Sequence[str], mode: int) -> None:
    """Make the directory `parts` (its parent must exist); one there already is kept."""
    with _parent(root, parts) as fd:
        with contextlib.suppress(FileExistsError):
            os.mkdir(parts[-1], mode & 0o777, dir_fd=fd)
        found = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISDIR(found.st_mode):
            raise UnsafePath(f"{'/'.join(parts)} is not a directory")


def make_symlink(root: Path, parts: Sequence[str], target: str) -> None:
    """Make `parts` a symbolic link to `target` (the text), replacing a file or link."""
    with _parent(root, parts) as fd:
        temp = f".{parts[-1][:180]}.tiller-rewind-{secrets.token_hex(6)}"
        os.symlink(target, temp, dir_fd=fd)
        try:
            os.rename(temp, parts[-1], src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=fd)
            raise


def set_mode(root: Path, parts: Sequence[str], mode: int) -> None:
    """Give the directory or file at `parts` the permission bits `mode`, without following
    a link: it is opened `O_PATH | O_NOFOLLOW` and changed through that very descriptor
    (`/proc/self/fd`), so a link swapped in meanwhile is never followed."""
    with _parent(root, parts) as fd:
        path_fd = os.open(parts[-1], os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    try:
        found = os.fstat(path_fd)
        if not (stat.S_ISDIR(found.st_mode) or stat.S_ISREG(found.st_mode)):
            raise UnsafePath(f"{'/'.join(parts)} is neither a directory nor a file")
        os.chmod(f"/proc/self/fd/{path_fd}", mode & 0o777)
    finally:
        os.close(path_fd)


def open_file(root: Path, parts: Sequence[str]) -> tuple[int, os.stat_result]:
    """A read descriptor of the regular file at `parts`, and its status."""
    with _parent(root, parts) as fd:
        file_fd = os.open(parts[-1], _READ_FLAGS, dir_fd=fd)
    st = os.fstat(file_fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(file_fd)
        raise UnsafePath(f"{'/'.join(parts)} is not a regular file")
    return file_fd, st


def open_temp(root: Path, parts: Sequence[str]) -> tuple[int, str, int]:
    """A new temporary file beside `parts`: (its directory's descriptor, its name, a write
    descriptor). Finish with `commit_temp`, or close both and unlink it."""
    with _parent(root, parts) as fd:
        dir_fd = os.dup(fd)
    temp = f".{parts[-1][:180]}.tiller-rewind-{secrets.token_hex(6)}"
    try:
        file_fd = os.open(temp, _TEMP_FLAGS, 0o600, dir_fd=dir_fd)
    except BaseException:
        os.close(dir_fd)
        raise
    return dir_fd, temp, file_fd


def commit_temp(dir_fd: int, temp: str, file_fd: int, name: str, mode: int, *, ok: bool) -> None:
    """Give the temporary file `mode` and move it over `name` (or, if not `ok`, drop it);
    closes both descriptors. A directory at `name` is refused, not replaced."""
    try:
        try:
            if ok:
                os.fchmod(file_fd, mode & 0o777)  # permission bits only: never setuid
                os.fsync(file_fd)
        finally:
            os.close(file_fd)
        if not ok:
            os.unlink(temp, dir_fd=dir_fd)
            return
        try:
            os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
            raise
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
