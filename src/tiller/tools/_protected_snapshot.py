"""`ProtectedSnapshot`: the shell side of law 11 — a sandboxed command cannot write the
paths that decide who decides (`Jail.protected`: `tiller.toml`, `.tiller/`, `.git/config`,
`.git/hooks`, ..., configured hook scripts).

Taken just before a command starts, it does two things:

- **What exists is bound over itself read-only** inside the sandbox (`binds()`), and every
  directory on the way to it inside the jail is bound over itself read-write: a mount point
  cannot be renamed or removed, so `mv .git .git2; mkdir .git; ...` fails with `EBUSY`
  instead of slipping a fresh `.git/config` past the read-only bind. `.tiller/` is created
  first when missing (tiller keeps its own state there; it writes from the host, which the
  sandbox's mounts do not touch), so it is always bound.
- **What does not exist cannot be bound** (bwrap would create it on the host), so it is
  checked after the command ends instead (`undo()`, for a background job when it ends):
  a protected path the command created is removed, and so is an ancestor it created as a
  symlink or a file (a `.git` symlink or `gitdir:` file redirects git just as well). A
  protected path that was a symlink is put back as that symlink. One rule, also for
  `git init`: the repository it makes keeps everything except `.git/config` and
  `.git/hooks`, which git does not need (a repository without `config` works, with the
  defaults). The result of the command says what was reverted.

Confined to the jail: every path is walked from the jail's directory descriptor, one
component at a time with `O_NOFOLLOW`; nothing is followed through a symlink, nothing on
another filesystem is touched, and a protected path given outside the jail (a hook script
configured by absolute path) is not in `Jail.protected` at all. Only the paths missing
at the start are ever removed, and tiller itself never writes those (its own files live
under `.tiller/`, which always exists and is read-only to the command), so nothing tiller
wrote is reverted.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

__all__ = ["ProtectedSnapshot"]

#: Created before a command when missing, so it is always bound read-only.
_TILLER_DIR: Final = ".tiller"
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_FLAGS: Final = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class _Kind(enum.Enum):
    PIN = "pin"  # a directory on the way: bound read-write over itself
    READ_ONLY = "read-only"  # bound read-only over itself
    LINK = "link"  # a symlink: restored if changed
    MISSING = "missing"  # absent: whatever the command creates there goes


@dataclass(frozen=True, slots=True)
class _Entry:
    parts: tuple[str, ...]  # components relative to the jail
    kind: _Kind
    target: str = ""  # a symlink's text
    fd: int = -1  # PIN, READ_ONLY: an `O_PATH` descriptor of it, for bwrap to bind


class ProtectedSnapshot:
    """The protected paths of `jail` as a command is about to find them.

    ```python
    snapshot = ProtectedSnapshot.take(jail, ctx.jail.protected)
    argv = sandbox.command(shell, jail=jail, network=False, protect=snapshot)
    process = await spawn(argv, ..., pass_fds=snapshot.fds())
    snapshot.release()
    ...  # the command runs and ends
    reverted = snapshot.undo()  # e.g. ["tiller.toml"]
    ```
    """

    __slots__ = ("_entries", "jail", "protected")

    def __init__(self, jail: Path, protected: Sequence[str], entries: Sequence[_Entry]) -> None:
        self.jail = jail
        self.protected = tuple(protected)
        self._entries = tuple(entries)

    @classmethod
    def take(cls, jail: Path, protected: Sequence[str]) -> ProtectedSnapshot:
        """Look at each of `protected` (relative to `jail`, an absolute real path)."""
        root = os.open(jail, _DIR_FLAGS)
        try:
            device = os.fstat(root).st_dev
            if _TILLER_DIR in protected:
                # Exists already, or a read-only workspace: then it is watched as missing.
                with contextlib.suppress(OSError):
                    os.mkdir(_TILLER_DIR, 0o755, dir_fd=root)
            found: dict[tuple[str, ...], _Entry] = {}
            try:
                for path in protected:
                    parts = PurePosixPath(path).parts
                    if parts and ".." not in parts:
                        _look(root, device, parts, found)
            except BaseException:
                _close(found.values())
                raise
        finally:
            os.close(root)
        # Parents first: bwrap mounts in order, and a pin must not hide a read-only bind.
        return cls(jail, protected, sorted(found.values(), key=lambda e: len(e.parts)))

    def binds(self) -> list[str]:
        """bwrap arguments binding what exists over itself (after the jail's bind), by
        descriptor: what was looked at is what gets bound, even if a command running
        meanwhile swaps a path for a symlink (a bind by path would follow it). Start
        bwrap with `fds()` passed, then `release()`."""
        args: list[str] = []
        for entry in self._entries:
            place = str(self.jail.joinpath(*entry.parts))
            if entry.kind is _Kind.PIN:
                args += ["--bind-fd", str(entry.fd), place]
            elif entry.kind is _Kind.READ_ONLY:
                args += ["--ro-bind-fd", str(entry.fd), place]
        return args

    def fds(self) -> tuple[int, ...]:
        """The descriptors `binds()` names: pass them to bwrap (`pass_fds`)."""
        return tuple(entry.fd for entry in self._entries if entry.fd >= 0)

    def release(self) -> None:
        """Close the descriptors, once bwrap has started (it holds its own). Idempotent;
        `binds()` must not be used afterwards."""
        _close(self._entries)
        self._entries = tuple(
            _Entry(e.parts, e.kind, e.target) if e.fd >= 0 else e for e in self._entries
        )

    def undo(self) -> list[str]:
        """Revert what the command did to protected paths that were missing or symlinks
        at the start; returns those reverted (relative POSIX paths). Never raises for a
        path it cannot fix: that path is reported as `path (could not be reverted: ...)`."""
        reverted: list[str] = []
        try:
            root = os.open(self.jail, _DIR_FLAGS)
        except OSError:
            return reverted
        try:
            device = os.fstat(root).st_dev
            for entry in self._entries:
                try:
                    if entry.kind is _Kind.MISSING:
                        reverted += _remove_created(root, device, entry.parts)
                    elif entry.kind is _Kind.LINK:
                        reverted += _restore_link(root, device, entry)
                except OSError as exc:  # runs in cleanup: report, never raise
                    shown = "/".join(entry.parts)
                    reverted.append(f"{shown} (could not be checked: {exc.strerror or exc})")
        finally:
            os.close(root)
        return reverted

    def __repr__(self) -> str:
        shown = ", ".join(f"{'/'.join(e.parts)}={e.kind.value}" for e in self._entries)
        return f"<ProtectedSnapshot {shown}>"


def _look(
    root: int, device: int, parts: tuple[str, ...], found: dict[tuple[str, ...], _Entry]
) -> None:
    """Add the entries for one protected path to `found`: its directories on the way,
    then itself. Each is opened `O_PATH | O_NOFOLLOW` from its parent's descriptor, and
    that descriptor is what bwrap binds and what the walk goes on from."""
    fd = root
    for index, name in enumerate(parts):
        here = parts[: index + 1]
        known = found.get(here)
        if known is not None:
            if known.kind is not _Kind.PIN:
                return
            fd = known.fd
            continue
        try:
            opened = os.open(name, _PATH_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            found[parts] = _Entry(parts, _Kind.MISSING)
            return
        except NotADirectoryError:
            return
        info = os.fstat(opened)
        if info.st_dev != device:
            os.close(opened)
            return  # another filesystem mounted in the jail: not ours to bind
        if stat.S_ISLNK(info.st_mode):
            # Past a symlink the path is the target's: put back if changed, no more.
            target = os.readlink("", dir_fd=opened)
            os.close(opened)
            found[here] = _Entry(here, _Kind.LINK, target)
            return
        if index == len(parts) - 1 or not stat.S_ISDIR(info.st_mode):
            # A file on the way (a worktree's `gitdir:` file) is bound read-only too.
            found[here] = _Entry(here, _Kind.READ_ONLY, fd=opened)
            return
        found[here] = _Entry(here, _Kind.PIN, fd=opened)
        fd = opened


def _close(entries: Iterable[_Entry]) -> None:
    for entry in entries:
        if entry.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(entry.fd)


def _remove_created(root: int, device: int, parts: tuple[str, ...]) -> list[str]:
    """Remove `parts` if it exists now, or what the command put on the way to it in
    place of a directory (a symlink, a file): at the start every component up to the
    missing one was a real directory, pinned by a mount, so anything else is new.
    Walks with `O_NOFOLLOW` from `root`."""
    fd = root
    try:
        for index, name in enumerate(parts):
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                return []
            if info.st_dev != device:
                return []
            if index == len(parts) - 1 or not stat.S_ISDIR(info.st_mode):
                return [_remove(fd, name, info, "/".join(parts[: index + 1]), device)]
            child = _open_dir(name, fd)
            if child is None:
                return []
            if fd != root:
                os.close(fd)
            fd = child
    finally:
        if fd != root:
            os.close(fd)
    return []


def _restore_link(root: int, device: int, entry: _Entry) -> list[str]:
    *above, name = entry.parts
    fd = root
    try:
        for part in above:
            child = _open_dir(part, fd)
            if child is None:
                return []
            if fd != root:
                os.close(fd)
            fd = child
        try:
            if os.readlink(name, dir_fd=fd) == entry.target:
                return []
        except OSError:
            pass
        shown = "/".join(entry.parts)
        if _points_inside(entry.target, root, above):
            # Such a link may have been planted by a background job still running when
            # this snapshot was taken, and removed since by that job's own undo: putting
            # it back would redirect the protected path to a file the command writes.
            kept = f"{shown} (not restored: it pointed inside the workspace)"
            return [*_remove_replacement(fd, name, shown, device), kept]
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            note = _remove(fd, name, info, shown, device)
            if note != shown:
                return [note]
        try:
            os.symlink(entry.target, name, dir_fd=fd)
        except OSError as exc:
            return [f"{shown} (could not be restored: {exc.strerror})"]
        return [shown]
    finally:
        if fd != root:
            os.close(fd)


def _points_inside(target: str, root: int, above: Sequence[str]) -> bool:
    """Whether a symlink's text, read as a path from its directory (`above`, under the
    jail), names a place in the jail (compared as text: a relative link, or an absolute
    one under the jail's real path)."""
    jail = os.readlink(f"/proc/self/fd/{root}")
    place = os.path.normpath(os.path.join(jail, *above, target))
    return place == jail or place.startswith(jail.rstrip("/") + "/")


def _remove_replacement(parent: int, name: str, shown: str, device: int) -> list[str]:
    """Remove whatever is at `name` now (a link into the jail is not put back)."""
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return []
    note = _remove(parent, name, info, shown, device)
    return [] if note == shown else [note]


def _open_dir(name: str, parent: int) -> int | None:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
            return None
        raise


def _remove(parent: int, name: str, info: os.stat_result, shown: str, device: int) -> str:
    """Remove `name` under `parent` (a whole tree, confined); `shown`, or a note saying
    why it could not be removed."""
    try:
        if stat.S_ISDIR(info.st_mode):
            _remove_tree(parent, name, device)
        else:
            os.unlink(name, dir_fd=parent)
    except OSError as exc:
        return f"{shown} (could not be reverted: {exc.strerror})"
    return shown


def _open_to_empty(name: str, parent: int) -> int:
    """Open the directory `name` to remove what is in it. A command may have made it
    mode 000 to keep a planted hook from being removed (tiller, not root, could then
    neither list nor empty it): make it ours to empty first. The mode is changed through
    an `O_PATH | O_NOFOLLOW` descriptor checked to be a directory, so a symlink swapped
    in never passes the change to what it points at."""
    with contextlib.suppress(OSError):
        handle = os.open(name, _PATH_FLAGS | os.O_DIRECTORY, dir_fd=parent)
        try:
            if stat.S_IMODE(os.fstat(handle).st_mode) & 0o700 != 0o700:
                os.chmod(f"/proc/self/fd/{handle}", 0o700)
        finally:
            os.close(handle)
    return os.open(name, _DIR_FLAGS, dir_fd=parent)


def _remove_tree(parent: int, name: str, device: int) -> None:
    """Remove the directory `name` and everything in it, iteratively (a deep chain must
    not exhaust the stack), never through a symlink or into another filesystem."""
    stack: list[tuple[int, str, int]] = []  # (parent fd, name, fd of the directory)
    first = _open_to_empty(name, parent)
    stack.append((parent, name, first))
    try:
        while stack:
            above, dirname, fd = stack[-1]
            descended = False
            with os.scandir(fd) as entries:
                names = [entry.name for entry in entries]
            for child in names:
                info = os.stat(child, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    if info.st_dev != device:
                        raise OSError(errno.EXDEV, "another filesystem is mounted inside")
                    stack.append((fd, child, _open_to_empty(child, fd)))
                    descended = True
                    break
                os.unlink(child, dir_fd=fd)
            if descended:
                continue
            stack.pop()
            os.close(fd)
            os.rmdir(dirname, dir_fd=above)
    finally:
        for _above, _name, fd in stack:
            os.close(fd)
