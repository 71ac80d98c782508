"""File pins: the content hash of a program that policy runs on the host (a hook script,
an MCP server's program), taken when the run's policy was pinned (law 11).

A hook's command may name a script in the workspace (`./policy-check.sh`), which the model
writes to. The run's policy records each such file's sha256 when the run starts; before the
hook runs again (later in the run, at `tiller approve`, on a resume) the file is hashed
again, and a file that changed, vanished or became a symlink is refused rather than run
(law 3: policy fails closed). `script_paths` finds the files a command names: each word
that contains a `/`, or that names an existing file in the directory the command runs in.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["FilePin", "changed_pins", "file_sha256", "pin_files", "script_paths"]

#: A pinned file is hashed up to this size; a bigger "script" is refused as changed.
_MAX_PINNED_BYTES: Final = 64 * 1024 * 1024
_CHUNK: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class FilePin:
    """`path` (absolute) and its sha256 when pinned; None: it was no regular file then
    (a regular file that appears there later counts as changed: the model planted it)."""

    path: str
    sha256: str | None


def file_sha256(path: str | os.PathLike[str]) -> str | None:
    """The sha256 of the regular file at `path` (not following a final symlink), or
    None when there is none (missing, a directory, a link, a device, too big)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_PINNED_BYTES:
            return None
        digest = hashlib.sha256()
        while chunk := os.read(fd, _CHUNK):
            digest.update(chunk)
        return digest.hexdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


def script_paths(command: str | Iterable[str], cwd: Path) -> list[Path]:
    """The files a command names, absolute (see the module docstring). `command` is a
    shell command line, or a program and its arguments already split."""
    if isinstance(command, str):
        try:
            words = shlex.split(command, comments=True)
        except ValueError:  # unbalanced quotes: the words as they stand
            words = command.split()
    else:
        words = list(command)
    found: dict[Path, None] = {}
    for word in words:
        if not word or word.startswith("-") or "\0" in word:
            continue
        candidate = Path(word) if os.path.isabs(word) else cwd / word
        if "/" in word or candidate.is_file():
            found[Path(os.path.normpath(candidate))] = None
    return list(found)


def pin_files(paths: Iterable[Path]) -> tuple[FilePin, ...]:
    """Each path with its hash now."""
    return tuple(FilePin(str(path), file_sha256(path)) for path in paths)


def changed_pins(pins: Iterable[FilePin]) -> list[str]:
    """What changed since `pins` were taken, one phrase per file (empty: nothing)."""
    changed = []
    for pin in pins:
        now = file_sha256(pin.path)
        if pin.sha256 is None:
            # No regular file there when pinned: one planted since (by a shell write, or
            # in another jail) is the model's, not the person's (law 3: refuse it).
            if now is not None:
                changed.append(f"{pin.path} appeared")
            continue
        if now is None:
            changed.append(f"{pin.path} is gone or no longer a regular file")
        elif now != pin.sha256:
            changed.append(f"{pin.path} changed (sha256 {pin.sha256[:12]}… is now {now[:12]}…)")
    return changed
