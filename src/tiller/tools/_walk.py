"""A directory walk by descriptors that never recurses and stops at caps.

`os.fwalk` (Python 3.11) recurses once per level and holds a descriptor per level, so a
chain of 1,500 nested directories, which any shell command can make, ends a walk with
`RecursionError` (or `EMFILE`) and takes the tool down with it. `bounded_fwalk` keeps an
explicit stack instead, never enters a directory deeper than `WalkLimits.max_depth`, and
stops listing after `WalkLimits.max_entries` entries; what it skipped is recorded on a
`WalkReport`, whose `note` the tool shows the model, so a capped answer never passes for
a complete one. `remove_tree` deletes a tree the same way (`shutil.rmtree` recurses too).

Both go by `O_NOFOLLOW | O_DIRECTORY` descriptors from their top: a symlink is never
followed, and a directory swapped for a symlink mid-walk is skipped, not entered.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Generator, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = ["WalkLimits", "WalkReport", "bounded_fwalk", "remove_tree"]

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class WalkLimits:
    """How far a walk may go: directories nested deeper than `max_depth` below the top
    are not entered; after `max_entries` entries listed, the walk stops."""

    max_depth: int = 64
    max_entries: int = 200_000


@dataclass(slots=True)
class WalkReport:
    """What a walk left out because of its limits."""

    limits: WalkLimits = field(default_factory=WalkLimits)
    entries: int = 0
    too_deep: int = 0  # directories not entered for depth
    first_too_deep: tuple[str, ...] | None = None
    entry_capped: bool = False

    @property
    def capped(self) -> bool:
        return self.too_deep > 0 or self.entry_capped

    def note(self) -> str | None:
        """A line for the model saying what the walk skipped, or `None` if nothing."""
        said: list[str] = []
        if self.too_deep:
            where = "/".join(self.first_too_deep or ())
            said.append(
                f"{self.too_deep} directories deeper than {self.limits.max_depth} levels "
                f"were not searched (the first: {where[:200]}); search from a deeper path "
                "to see them"
            )
        if self.entry_capped:
            said.append(
                f"the walk stopped after {self.limits.max_entries} entries; narrow the path"
            )
        return f"[{'; '.join(said)}]" if said else None


def _listing(fd: int, room: int) -> tuple[list[str], list[str], bool]:
    """The subdirectory names and other names in `fd`, at most `room` of them in all, and
    whether some were left out."""
    dirs: list[str] = []
    others: list[str] = []
    with os.scandir(fd) as scan:
        for entry in scan:
            if len(dirs) + len(others) >= room:
                return dirs, others, True
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            (dirs if is_dir else others).append(entry.name)
    return dirs, others, False


def bounded_fwalk(
    top_fd: int, report: WalkReport, *, skip: Collection[str] = ()
) -> Generator[tuple[tuple[str, ...], list[str], list[str], int], None, None]:
    """Like `os.fwalk(dir_fd=top_fd)`, top down, without recursion: yields each
    directory's path parts below the top, its subdirectory names (prune the list in place
    to skip them; visited in the list's order), its other names, and its descriptor (valid
    until the next step). `top_fd` stays the caller's. Limits and what they cut go in
    `report`. Close the generator if you stop early, to release the descriptors."""
    limits = report.limits
    stack: list[tuple[int, tuple[str, ...], Iterator[str]]] = []
    try:
        fd = os.dup(top_fd)
        parts: tuple[str, ...] = ()
        while True:
            room = limits.max_entries - report.entries
            dirs, others, cut = _listing(fd, room)
            dirs = [d for d in dirs if d not in skip]
            report.entries += len(dirs) + len(others)
            report.entry_capped = report.entry_capped or cut
            stack.append((fd, parts, iter(())))
            yield parts, dirs, others, fd
            stack[-1] = (fd, parts, iter(list(dirs)))
            fd = -1
            while stack and fd < 0:
                parent, parent_parts, pending = stack[-1]
                name = next(pending, None)
                if name is None:
                    os.close(parent)
                    stack.pop()
                    continue
                if report.entry_capped:
                    continue
                if len(parent_parts) >= limits.max_depth:
                    report.too_deep += 1
                    if report.first_too_deep is None:
                        report.first_too_deep = (*parent_parts, name)
                    continue
                try:
                    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
                except OSError:
                    continue  # removed, or swapped for a symlink, meanwhile: not entered
                parts = (*parent_parts, name)
            if fd < 0:
                return
    finally:
        for held, _, _ in stack:
            os.close(held)


def remove_tree(path: Path) -> None:
    """Remove the directory `path` and everything under it, iteratively, by directory
    descriptors, never following a symlink (a link inside is unlinked, not followed).
    Like `shutil.rmtree(ignore_errors=True)` it never raises: at the first directory it
    cannot remove it stops, leaving the rest; a `path` that is missing or not a real
    directory is left alone."""
    try:
        top = os.open(path, _DIR_FLAGS)
    except OSError:
        return
    stack: list[tuple[int, str]] = [(top, "")]
    try:
        while stack:
            fd, _ = stack[-1]
            subdir: str | None = None
            with os.scandir(fd) as scan:
                entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in scan]
            for name, is_dir in entries:
                if not is_dir:
                    with suppress(OSError):
                        os.unlink(name, dir_fd=fd)
                elif subdir is None:
                    subdir = name
            if subdir is not None:
                try:
                    stack.append((os.open(subdir, _DIR_FLAGS, dir_fd=fd), subdir))
                    continue
                except OSError:
                    pass  # not enterable: rmdir below fails and it stays, as rmtree's would
            done, name = stack.pop()
            os.close(done)
            if stack:
                try:
                    os.rmdir(name, dir_fd=stack[-1][0])
                except OSError:
                    return  # it cannot be removed: stop here rather than revisit it forever
    finally:
        for fd, _ in stack:
            os.close(fd)
    with suppress(OSError):
        os.rmdir(path)
