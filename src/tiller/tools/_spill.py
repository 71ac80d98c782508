"""`SpillFile`: where tiller's host code writes output too large to keep in memory.

A command may print a hundred megabytes; the run keeps a bounded head and tail of it and
writes the whole to a file in the run's spill directory (`Jail.spill_dir`, by default
`.tiller/spill` in the jail, so the model can read ranges of it with its file tools).

The spill directory usually lies inside the jail, where a command the model ran could
have put a symlink. So it is reached by the jail's descriptor walk (`JailFS.open_dir`,
`O_NOFOLLOW` on every component) and the file is created in it with
`O_CREAT | O_EXCL | O_NOFOLLOW`: a planted link makes the spill fail, never write
elsewhere. A directory holds at most `SPILL_DIR_BYTES` in all; past that, output is
dropped and the count of dropped bytes is kept, for the result to say so.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Final

from ._fs import JailFS
from ._jail import Jail

__all__ = ["SPILL_DIR_BYTES", "SpillFile", "open_spill_dir"]

#: The most bytes one spill directory holds across its files.
SPILL_DIR_BYTES: Final = 1024**3

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]")
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@contextmanager
def open_spill_dir(jail: Jail) -> Iterator[int]:
    """A descriptor of the run's spill directory, created if missing: by the jail's walk
    when it lies inside the jail, else (a directory the program chose) directly, never
    following a symlink at its last component."""
    spill = jail.spill_dir
    if spill.is_relative_to(jail.root):
        # tiller's own write, not the model's: the jail's walk (no symlink followed)
        # without its protected paths, since the spill lives under the protected `.tiller`.
        with JailFS(jail.root).open_dir(spill, create=True) as fd:
            yield fd
        return
    os.makedirs(spill, exist_ok=True)
    fd = os.open(spill, _DIR_FLAGS)
    try:
        yield fd
    finally:
        os.close(fd)


def _used(dir_fd: int) -> int:
    """Bytes the regular files of the spill directory hold now."""
    total = 0
    with os.scandir(dir_fd) as scan:
        for entry in scan:
            with suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
    return total


class SpillFile:
    """One new file in the spill directory, named after the call (`<call-id>.log`, or
    `<call-id>-N.log` if taken), written up to what the directory's cap leaves."""

    __slots__ = ("_fd", "_room", "dropped", "path", "shown", "written")

    def __init__(self, jail: Jail, call_id: str, suffix: str = ".log") -> None:
        stem = _UNSAFE.sub("_", call_id)[:100] or "call"
        self.written = 0
        self.dropped = 0
        with open_spill_dir(jail) as dir_fd:
            self._room = max(0, SPILL_DIR_BYTES - _used(dir_fd))
            number = 0
            while True:
                name = f"{stem}{suffix}" if number == 0 else f"{stem}-{number}{suffix}"
                try:
                    self._fd = os.open(name, _NEW_FILE, 0o600, dir_fd=dir_fd)
                    break
                except FileExistsError:
                    number += 1
        self.path: Path = jail.spill_dir / name
        self.shown = jail.relative(self.path)

    def write(self, data: bytes) -> None:
        """Append `data`, or as much of it as the directory's cap leaves room for."""
        if self._fd < 0:
            self.dropped += len(data)
            return
        keep = data[: max(0, self._room - self.written)]
        if keep:
            _write_all(self._fd, keep)
            self.written += len(keep)
        self.dropped += len(data) - len(keep)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
