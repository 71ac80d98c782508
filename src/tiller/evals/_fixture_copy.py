"""A case's private copy of its fixture: cheap where the filesystem shares blocks, and
never a file the case could write through to the fixture.

An eval runs many cases on one fixture, side by side, each writing to its own copy, so a
copy must be independent of the fixture and of every other copy. It is made as
`cp -a --reflink=auto` makes one:

- each regular file is cloned (`FICLONE`: the copy shares the fixture's blocks until
  either is written, so 1,000 copies of a fixture cost almost nothing on btrfs, XFS or
  bcachefs), else copied in the kernel (`os.copy_file_range`, which may itself share
  blocks on filesystems that can), else copied through user space;
- links are copied as links (their target text, never followed), so a fixture's link
  out of the fixture stays a link the case's jail refuses to follow;
- hard links are never made: a hard link is the fixture's own file, and a case writing to
  it would change the fixture for every case after it;
- FIFOs, sockets and devices are left out (opening a FIFO to copy it would block);
- permission bits and times are kept (`shutil.copystat`).

`remove_copy` removes a copy even where the case took its own write permission away.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
from pathlib import Path
from typing import BinaryIO

from ..tools import remove_tree

__all__ = ["copy_fixture", "remove_copy"]

#: `FICLONE` from linux/fs.h: `_IOW(0x94, 9, int)`.
_FICLONE = 0x40049409
#: The errors that mean "this filesystem (or pair of files) cannot clone": copy instead.
_CANNOT_CLONE = frozenset(
    {errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EPERM}
)
_CHUNK = 1 << 30


def _clone_or_copy(source: str, target: str) -> str:
    """Copy one regular file as `cp --reflink=auto` does (see the module docstring)."""
    with open(source, "rb") as src, open(target, "xb") as dst:
        if not _cloned(src.fileno(), dst.fileno()):
            _copy_in_kernel(src, dst)
    shutil.copystat(source, target, follow_symlinks=False)
    return target


def _cloned(src: int, dst: int) -> bool:
    try:
        fcntl.ioctl(dst, _FICLONE, src)
    except OSError as exc:
        if exc.errno in _CANNOT_CLONE:
            return False
        raise
    return True


def _copy_in_kernel(src: BinaryIO, dst: BinaryIO) -> None:
    src_fd, dst_fd = src.fileno(), dst.fileno()
    try:
        while os.copy_file_range(src_fd, dst_fd, _CHUNK) > 0:
            pass
    except OSError as exc:
        if exc.errno not in _CANNOT_CLONE:
            raise
        # Start over through user space (whatever the kernel wrote is truncated away).
        os.lseek(src_fd, 0, os.SEEK_SET)
        os.lseek(dst_fd, 0, os.SEEK_SET)
        os.ftruncate(dst_fd, 0)
        shutil.copyfileobj(src, dst)


def _special_files(directory: str, names: list[str]) -> set[str]:
    """What `copytree` leaves out: anything not a directory, a regular file or a link."""
    left_out = set()
    for name in names:
        try:
            mode = os.lstat(os.path.join(directory, name)).st_mode
        except OSError:
            continue  # gone meanwhile: copytree reports it if it matters
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            left_out.add(name)
    return left_out


def copy_fixture(fixture: Path, target: Path) -> None:
    """Copy the directory `fixture` to `target` (which must not exist yet). Blocking:
    run it in a thread. Raises `OSError` (`shutil.Error` for the files that failed)."""
    shutil.copytree(
        fixture,
        target,
        symlinks=True,
        ignore=_special_files,
        copy_function=_clone_or_copy,
    )


def remove_copy(path: Path) -> None:
    """Remove a case's copy, giving its real directories their owner's permissions back
    first (a case may have made them read-only); links are never followed. Never raises:
    what cannot be removed stays (as `remove_tree`).

    `path` is the private directory the eval made (nothing the case can swap); inside it,
    every directory is reached by descriptor (`os.fwalk`) and changed through a
    descriptor of its own, opened without following a link: a process the case left
    running that swaps a directory for a link finds the link refused, never its target
    changed (a check by name, then a `chmod` by name, followed it)."""
    with contextlib.suppress(OSError):
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return
        os.chmod(path, 0o700)
    # Most cases leave nothing read-only: one walk removes the copy. Only what that left
    # behind gets its permissions back, and a second walk (a walk is most of what an
    # eval's case costs besides its run: BENCHMARKS.md).
    remove_tree(path)
    if not os.path.lexists(path):
        return
    with contextlib.suppress(OSError):
        for _, dirnames, _, dirfd in os.fwalk(path, follow_symlinks=False):
            for name in dirnames:  # before fwalk enters them: top-down
                _give_owner_access(dirfd, name)
    remove_tree(path)


def _give_owner_access(dirfd: int, name: str) -> None:
    """`chmod u+rwx` the directory `name` of `dirfd`, and never what a link there points
    to. Opened as a path (`O_PATH`: no permission on it needed), `O_NOFOLLOW` and
    `O_DIRECTORY` (a link fails to open), then changed through `/proc/self/fd`, which
    names the opened directory itself, as glibc's `fchmodat(AT_SYMLINK_NOFOLLOW)` does
    (Linux has no `fchmod` on an `O_PATH` descriptor). Without /proc, it is left as it is."""
    with contextlib.suppress(OSError):
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY, dir_fd=dirfd)
        try:
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
            if mode & 0o700 != 0o700:
                os.chmod(f"/proc/self/fd/{fd}", mode | 0o700)
        finally:
            os.close(fd)
