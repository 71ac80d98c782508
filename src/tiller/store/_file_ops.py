"""Jail-safe file operations for file checkpoints: read what a path holds, put it back.

Every operation walks its path one component at a time from the jail's directory
descriptor, opening each directory with `O_NOFOLLOW | O_DIRECTORY` and the last component
with `O_NOFOLLOW` (DESIGN §11), so a symlink swapped in between a check and an open cannot
redirect a snapshot or a restore outside the jail. A symbolic link is read and written as a
link (its target text), never followed. Writes go to a temporary file in the same
directory, get their mode and an fsync, then replace the path with one `rename`, so a
reader sees the old content or the new one, never half of it.

These are blocking calls: `FileCheckpoints` runs them in a worker thread. Paths come in as
components relative to the jail root (already checked against it); a component that is
not a directory where one is needed raises `FileOpRefused`, whose message names it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "FileOpRefused",
    "Observed",
    "observe",
    "remove",
    "remove_empty_dirs",
    "write_file",
    "write_symlink",
]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in after the lstat must not block the open.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# A path that changes kind between our stat and our open is looked at again this often.
_ATTEMPTS = 4
# Errors of os.rmdir that mean "leave this directory where it is".
_KEEP_DIR = (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EBUSY, errno.ENOENT)


class FileOpRefused(Exception):
    """The path cannot be read or written safely (a file or a symbolic link stands where a
    directory should be, a directory stands where a file should, or it kept changing)."""


Kind = Literal["file", "symlink", "missing", "directory", "other"]


@dataclass(frozen=True, slots=True)
class Observed:
    """What a path holds now. `absent_parents` (for a missing path): the directories on
    the way to it that do not exist either, relative to the root, deepest first."""

    kind: Kind
    data: bytes | None = None
    mode: int | None = None
    target: str | None = None
    absent_parents: tuple[str, ...] = ()
    #: A regular file's size; `data` is None when it is over `max_bytes` (not read).
    size: int | None = None


class _Missing(Exception):
    """Component number `depth` of the directories walked does not exist."""

    def __init__(self, depth: int) -> None:
        super().__init__(depth)
        self.depth = depth


@contextlib.contextmanager
def _directory(root: Path, parents: Sequence[str], *, create: bool) -> Iterator[int]:
    """A descriptor of `root/parents...`, walked without following links; missing
    directories are made when `create`, else `_Missing` says which one is absent."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for depth, part in enumerate(parents):
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise _Missing(depth) from None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
                child = _open_dir(fd, parents, depth)
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    raise _not_a_directory(parents, depth) from None
                raise
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _open_dir(fd: int, parents: Sequence[str], depth: int) -> int:
    try:
        return os.open(parents[depth], _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            raise _not_a_directory(parents, depth) from None
        raise


def _not_a_directory(parents: Sequence[str], depth: int) -> FileOpRefused:
    where = "/".join(parents[: depth + 1])
    return FileOpRefused(
        f"{where} is not a directory (a file or a symbolic link stands there); "
        "move it away and try again"
    )


def observe(root: Path, parts: Sequence[str], *, max_bytes: int | None = None) -> Observed:
    """What `root/parts...` holds now: a regular file's bytes and mode (only its size and
    mode when it is over `max_bytes`: it is not read), a link's target, or that it is
    missing (and which of its directories are missing too)."""
    parents, name = parts[:-1], parts[-1]
    try:
        with _directory(root, parents, create=False) as fd:
            return _observe_in(fd, "/".join(parts), name, max_bytes)
    except _Missing as missing:
        absent = tuple(
            "/".join(parents[:depth]) for depth in range(len(parents), missing.depth, -1)
        )
        return Observed("missing", absent_parents=absent)


def _observe_in(fd: int, shown: str, name: str, max_bytes: int | None) -> Observed:
    for _ in range(_ATTEMPTS):
        try:
            before = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return Observed("missing")
        if stat.S_ISLNK(before.st_mode):
            try:
                return Observed("symlink", target=os.readlink(name, dir_fd=fd))
            except OSError:  # replaced by something else meanwhile: look again
                continue
        if stat.S_ISDIR(before.st_mode):
            return Observed("directory")
        if not stat.S_ISREG(before.st_mode):
            return Observed("other")
        mode, size = stat.S_IMODE(before.st_mode), before.st_size
        if max_bytes is not None and size > max_bytes:
            return Observed("file", mode=mode, size=size)
        try:
            file_fd = os.open(name, _READ_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP):
                continue
            raise
        try:
            after = os.fstat(file_fd)
            same = (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
            if not (same and stat.S_ISREG(after.st_mode)):
                continue
            with os.fdopen(file_fd, "rb", closefd=False) as source:
                data = source.read() if max_bytes is None else source.read(max_bytes + 1)
        finally:
            os.close(file_fd)
        if max_bytes is not None and len(data) > max_bytes:  # it grew meanwhile
            return Observed("file", mode=stat.S_IMODE(after.st_mode), size=len(data))
        return Observed("file", data=data, mode=stat.S_IMODE(after.st_mode), size=len(data))
    raise FileOpRefused(f"{shown} kept changing while it was read; try again")


def _temp_name(name: str) -> str:
    return f".{name[:180]}.tiller-rewind-{secrets.token_hex(6)}"


def _replace(fd: int, temp: str, name: str) -> None:
    """Move `temp` over `name` in directory `fd` (removing `temp` if that fails)."""
    try:
        os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=fd)
        raise
    os.fsync(fd)


def write_file(root: Path, parts: Sequence[str], data: bytes, mode: int) -> None:
    """Make `root/parts...` a regular file holding exactly `data` with permission bits
    `mode`, atomically, creating missing directories on the way."""
    with _directory(root, parts[:-1], create=True) as fd:
        temp = _temp_name(parts[-1])
        file_fd = os.open(temp, _TEMP_FLAGS, 0o600, dir_fd=fd)
        try:
            with os.fdopen(file_fd, "wb") as out:
                out.write(data)
                out.flush()
                # Permission bits only: a restore never recreates a setuid/setgid file.
                os.fchmod(out.fileno(), mode & 0o777)
                os.fsync(out.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=fd)
            raise
        _replace(fd, temp, parts[-1])


def write_symlink(root: Path, parts: Sequence[str], target: str) -> None:
    """Make `root/parts...` a symbolic link to `target` (the text, as it was), atomically."""
    with _directory(root, parts[:-1], create=True) as fd:
        temp = _temp_name(parts[-1])
        os.symlink(target, temp, dir_fd=fd)
        _replace(fd, temp, parts[-1])


def remove(root: Path, parts: Sequence[str]) -> bool:
    """Delete the file or link at `root/parts...`; False if there was none. A directory is
    refused: the run made it, and what is inside may not be the run's."""
    try:
        with _directory(root, parts[:-1], create=False) as fd:
            try:
                found = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return False
            if stat.S_ISDIR(found.st_mode):
                raise FileOpRefused(
                    f"{'/'.join(parts)} did not exist then but is a directory now; "
                    "remove it yourself if it should go"
                )
            os.unlink(parts[-1], dir_fd=fd)
            os.fsync(fd)
            return True
    except _Missing:
        return False


def remove_empty_dirs(root: Path, dirs: Sequence[str]) -> list[str]:
    """Remove each directory of `dirs` (relative, deepest first) that exists and is empty;
    returns those removed. One that holds anything stays."""
    removed: list[str] = []
    for rel in dirs:
        parts = rel.split("/")
        try:
            with _directory(root, parts[:-1], create=False) as fd:
                os.rmdir(parts[-1], dir_fd=fd)
        except (_Missing, FileOpRefused):
            continue
        except OSError as exc:
            if exc.errno in _KEEP_DIR:
                continue
            raise
        removed.append(rel)
    return removed
