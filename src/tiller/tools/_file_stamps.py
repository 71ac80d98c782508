"""`stamp_workspace`: the size, mtime and inode of every file in a workspace, to tell
which files changed between two moments (what a shell command or a background job
wrote, which no tool reports).

The walk is iterative (a 10,000-deep chain cannot overflow the stack), opens each
directory from its parent's descriptor with `O_NOFOLLOW | O_DIRECTORY` (a symlink or a
swapped-in link never leads out of the workspace), does not cross into other filesystems
(a mount inside the workspace is not the workspace's), and stops at
`MAX_STAMPED_ENTRIES` entries or `MAX_STAMP_DEPTH` levels, saying so (`Stamps.complete`),
so the caller can fail closed; a directory or entry it cannot read (permissions a
command changed) makes it incomplete too, never silently skipped. The stamp holds the
change time: a command can restore a file's size and mtime (`touch -r`), not its ctime.
It does enter `.git` and `.tiller`: a commit message and a
spilled tool output are text a later run can read (`git log`, `read_file`) as well.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = ["MAX_STAMPED_ENTRIES", "MAX_STAMP_DEPTH", "Stamps", "changed_files", "stamp_workspace"]

#: Entries one walk looks at, at most.
MAX_STAMPED_ENTRIES: Final = 200_000
#: Directory levels one walk descends, at most.
MAX_STAMP_DEPTH: Final = 256
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: An entry that vanished or became a link during the walk: nothing to stamp there.
_GONE: Final = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})

Stamp = tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class Stamps:
    """Regular files by workspace-relative POSIX path: (size, mtime_ns, ctime_ns, inode).
    `complete` is False when a cap stopped the walk (files past it are not listed)."""

    files: Mapping[str, Stamp] = field(default_factory=dict)
    complete: bool = True


def stamp_workspace(root: Path) -> Stamps:
    """Walk `root` (see the module docstring)."""
    files: dict[str, Stamp] = {}
    complete = True
    seen = 0
    try:
        top = os.open(root, _DIR_FLAGS)
    except OSError:
        return Stamps({}, complete=False)
    device = os.fstat(top).st_dev
    # Depth first, one open directory per level (never one per queued directory: a wide
    # tree must not exhaust the descriptors): (fd, its listing, relative prefix, depth).
    stack: list[tuple[int, Iterator[os.DirEntry[str]], str, int]] = []
    try:
        stack.append((top, os.scandir(top), "", 0))
        while stack:
            fd, entries, prefix, depth = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                _close(fd, entries)
                continue
            seen += 1
            if seen > MAX_STAMPED_ENTRIES:
                complete = False
                break
            name = entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                complete = complete and exc.errno in _GONE
                continue
            rel = f"{prefix}{name}"
            if stat.S_ISREG(st.st_mode):
                files[rel] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            elif stat.S_ISDIR(st.st_mode):
                if st.st_dev != device:
                    continue
                if depth + 1 > MAX_STAMP_DEPTH:
                    complete = False
                    continue
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    # (Unreadable: files may hide there, so fail closed.)
                    complete = complete and exc.errno in _GONE
                    continue
                try:
                    stack.append((child, os.scandir(child), f"{rel}/", depth + 1))
                except OSError as exc:
                    os.close(child)
                    complete = complete and exc.errno in _GONE
    finally:
        for fd, entries, _, _ in stack:
            _close(fd, entries)
    return Stamps(files, complete)


def _close(fd: int, entries: Iterator[os.DirEntry[str]]) -> None:
    close = getattr(entries, "close", None)
    if close is not None:
        close()
    os.close(fd)


def changed_files(before: Stamps, after: Stamps) -> list[str]:
    """Files of `after` that are new or differ from `before`, sorted."""
    old = before.files
    return sorted(path for path, stamp in after.files.items() if old.get(path) != stamp)
