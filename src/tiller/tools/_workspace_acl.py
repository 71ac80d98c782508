"""`grant_workspace`: make the workspace writable to the sandbox's uid, with POSIX ACLs.

When tiller runs as root, commands run as an unprivileged uid (`_sandbox_user`), but the
workspace is often root's: a root-owned checkout, or files tiller's own file tools (root)
wrote. Before each command this walk adds one named-user entry for that uid to the
access ACL of every directory and regular file of the workspace that does not already
carry it. No default ACL: what tiller writes later is granted by the next command's walk,
and a file git or tiller makes in `.git` never inherits the uid's access on the host.
Protected paths are skipped: read-only to the command anyway, and an ACL left behind on
the host must not let other processes of that uid (`nobody`'s) write `.git/config`.

Written directly as the kernel's `system.posix_acl_access` xattr (`os.setxattr`), not
through `setfacl`: no extra package to install, and every call works on a descriptor
this walk opened itself.

Confined to the workspace, because it changes permissions (law: nothing outside the jail
changes): directories are opened one by one from the parent's descriptor with
`O_NOFOLLOW`, symlinks are never followed or changed, another filesystem mounted inside
is not entered, and a regular file with more than one hard link is left alone (a link to
a file elsewhere would hand the uid write access to that file too). The only visible
change to the files is the ACL itself (`ls -l` shows `+`, and the group bits show the
ACL's mask).

A filesystem without ACL support raises `OSError` (`EOPNOTSUPP`): the caller refuses to
run the command rather than run it as root.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Final

__all__ = ["grant_workspace"]

_ACCESS: Final = "system.posix_acl_access"
_VERSION: Final = 2
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_NO_ID: Final = 0xFFFFFFFF
_ENTRY: Final = struct.Struct("<HHI")
_HEADER: Final = struct.Struct("<I")
_RWX: Final = 7
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY

Entries = dict[tuple[int, int], int]  # (tag, id) -> perm


def _decode(raw: bytes) -> Entries:
    (version,) = _HEADER.unpack_from(raw)
    if version != _VERSION:
        raise OSError(errno.EINVAL, f"unknown POSIX ACL xattr version {version}")
    return {(tag, ident): perm for tag, perm, ident in _ENTRY.iter_unpack(raw[_HEADER.size :])}


def _encode(entries: Entries) -> bytes:
    ordered = sorted(entries.items(), key=lambda item: item[0])
    body = b"".join(_ENTRY.pack(tag, perm, ident) for (tag, ident), perm in ordered)
    return _HEADER.pack(_VERSION) + body


def _from_mode(mode: int) -> Entries:
    return {
        (_USER_OBJ, _NO_ID): (mode >> 6) & _RWX,
        (_GROUP_OBJ, _NO_ID): (mode >> 3) & _RWX,
        (_OTHER, _NO_ID): mode & _RWX,
    }


def _read(fd: int, name: str) -> Entries | None:
    try:
        return _decode(os.getxattr(fd, name))
    except OSError as exc:
        if exc.errno == errno.ENODATA:
            return None
        raise


def _with_user(entries: Entries, uid: int, perm: int) -> Entries | None:
    """`entries` granting `uid` at least `perm`, or `None` when they already do."""
    key = (_USER, uid)
    mask = entries.get((_MASK, _NO_ID))
    if entries.get(key, 0) & perm == perm and (mask is None or mask & perm == perm):
        return None
    updated = dict(entries)
    updated[key] = entries.get(key, 0) | perm
    if mask is None:
        mask = entries.get((_GROUP_OBJ, _NO_ID), 0)
    updated[(_MASK, _NO_ID)] = mask | perm
    return updated


def _grant(fd: int, info: os.stat_result, uid: int) -> None:
    is_dir = stat.S_ISDIR(info.st_mode)
    perm = _RWX if is_dir or info.st_mode & stat.S_IXUSR else 6
    access = _read(fd, _ACCESS) or _from_mode(info.st_mode)
    changed = _with_user(access, uid, perm)
    if changed is not None:
        os.setxattr(fd, _ACCESS, _encode(changed))


#: Directory levels the grant descends. The walk holds one descriptor per level (never
#: one per queued directory: a wide tree, such as 2,000 directories the model made, must
#: not exhaust the process's descriptors); a deeper directory is not granted, so a command
#: gets "permission denied" there, never more access.
MAX_GRANT_DEPTH: Final = 128


def grant_workspace(jail: Path, uid: int, skip: Collection[str] = ()) -> None:
    """Give `uid` read and write access to everything in `jail` (see the module doc)
    except the paths in `skip` (relative POSIX paths, and what is under them: the
    protected paths, read-only to the command anyway, so the ACL left behind on the host
    never lets that uid write them). Raises `OSError` when the filesystem refuses ACLs."""
    root = os.open(jail, _DIR_FLAGS)
    skipped = frozenset(skip)
    # Depth first, one open directory per level: (descriptor, path, names still to visit).
    stack: list[tuple[int, str, Iterator[str]]] = []
    try:
        root_info = os.fstat(root)
        if root_info.st_uid != uid:
            _grant(root, root_info, uid)
        stack.append((root, "", iter(_names(root))))
        while stack:
            fd, where, names = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                os.close(fd)
                continue
            path = f"{where}/{name}" if where else name
            if path in skipped:
                continue
            child = _visit(fd, name, root_info.st_dev, uid)
            if child is None:
                continue
            if len(stack) >= MAX_GRANT_DEPTH:
                os.close(child)
                continue
            stack.append((child, path, iter(_names(child))))
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def _names(fd: int) -> list[str]:
    with os.scandir(fd) as entries:
        return [entry.name for entry in entries]


def _visit(fd: int, name: str, device: int, uid: int) -> int | None:
    """Grant `name` in the directory `fd` if it is a regular file; if it is a directory,
    grant it and return it opened (the caller walks it); else `None`."""
    try:
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None  # gone meanwhile: nothing to grant
    if info.st_dev != device:
        return None  # another filesystem mounted here: not the workspace's to change
    if stat.S_ISDIR(info.st_mode):
        child = _open(name, fd, _DIR_FLAGS)
        if child is not None:
            try:
                opened = os.fstat(child)
                if opened.st_uid != uid:
                    _grant(child, opened, uid)
            except BaseException:
                os.close(child)
                raise
        return child
    if stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and info.st_uid != uid:
        child = _open(name, fd, _FILE_FLAGS)
        if child is not None:
            try:
                opened = os.fstat(child)
                if stat.S_ISREG(opened.st_mode) and opened.st_nlink == 1:
                    _grant(child, opened, uid)
            finally:
                os.close(child)
    return None


def _open(name: str, parent: int, flags: int) -> int | None:
    """`name` opened under `parent`, or `None` if it was swapped for a symlink or other
    type meanwhile (`O_NOFOLLOW`, `O_DIRECTORY`)."""
    try:
        return os.open(name, flags, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT, errno.ENXIO):
            return None
        raise
