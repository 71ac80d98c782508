"""`JailFS`: open paths inside the jail one component at a time, never following a symlink.

`Jail.resolve` checks a path: it follows symlinks and refuses anything that lands
outside the root. A check is not a guarantee. Between the check and the open, anything
else running in the workspace (a shell command the model started, a build, a person) can
swap a directory for a symlink to `/`, and a plain `open(path)` would follow it. So the
file tools open what `resolve` returned with a descriptor walk (DESIGN §11): from a
descriptor of the jail root, each directory is opened with
`os.open(part, O_NOFOLLOW | O_DIRECTORY, dir_fd=parent)` and the last component with
`O_NOFOLLOW`. `resolve` has already followed every legitimate symlink, so every component
of the path it returns must be a real directory or file; a symlink found during the walk
was swapped in after the check, and the walk refuses it (`SymlinkRefused`).

Writes never open an existing file for writing: they create a temporary file with
`O_CREAT | O_EXCL | O_NOFOLLOW` in the target's directory and rename it over the target
(both through the directory's descriptor). A write is therefore atomic for readers, and a
hard link cannot carry it to the link's other name. Regular files with more than one link
are refused outright (`HardLinkRefused`), for reads too: the other name may be a file
outside the jail.

`check_path_text` refuses, before any resolution, what no tool should ever open: NUL
bytes, control characters, text that is not UTF-8, names over `NAME_MAX` and paths over
`PATH_MAX`.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from collections.abc import Collection, Generator, Iterator
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final, Literal, NoReturn

from ._errors import (
    HardLinkRefused,
    InvalidPath,
    PathOutsideJail,
    PathTooLong,
    ProtectedPathRefused,
    SymlinkRefused,
)
from ._protected import git_directory_match, protected_match
from ._read_watch import note_read
from ._walk import WalkReport, bounded_fwalk

__all__ = [
    "NAME_MAX",
    "PATH_MAX",
    "DirEntry",
    "EntryKind",
    "JailFS",
    "WalkStep",
    "check_path_text",
    "display_name",
    "usable_name",
]

#: The longest name of one path component, in bytes (Linux `NAME_MAX`).
NAME_MAX: Final = 255
#: The longest path, in bytes, terminating NUL excluded (Linux `PATH_MAX` is 4096 with it).
PATH_MAX: Final = 4096

# Unicode category Cc: C0 controls, DEL and C1 controls. NUL is reported on its own.
_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f]")

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK and O_NOCTTY: should the file have been swapped for a FIFO or a terminal
# between the lstat and the open, the open neither hangs nor adopts a terminal.
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_TEMP_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

#: What a directory entry is, seen without following it.
EntryKind = Literal["dir", "file", "symlink", "other"]


def check_path_text(text: str, root: Path) -> None:
    """Refuse a path no file tool will open, whatever it points at (`InvalidPath`,
    `PathTooLong`): a NUL byte, a control character, unpaired surrogates (what a name
    that is not UTF-8 becomes in Python), a name over `NAME_MAX` bytes or a path over
    `PATH_MAX` bytes. Odd but printable Unicode passes: it is a literal name."""
    if "\x00" in text:
        raise InvalidPath(text, root, "contains a NUL byte")
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidPath(
            text, root, "is not valid UTF-8 text (it holds an unpaired surrogate)"
        ) from exc
    control = _CONTROL.search(text)
    if control is not None:
        raise InvalidPath(
            text, root, f"contains the control character U+{ord(control.group()):04X}"
        )
    if len(encoded) > PATH_MAX:
        raise PathTooLong(
            text, root, f"is {len(encoded)} bytes long, over the {PATH_MAX}-byte limit"
        )
    for part in text.split("/"):
        size = len(part.encode("utf-8"))
        if size > NAME_MAX:
            raise PathTooLong(
                text, root, f"has a name of {size} bytes, over the {NAME_MAX}-byte limit"
            )


def usable_name(name: str) -> bool:
    """Whether the tools can address an entry of this name: UTF-8, no control character.
    Walks skip the others, which `check_path_text` would refuse anyway."""
    if _CONTROL.search(name) is not None:
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def display_name(name: str) -> str:
    """`name` as safe text to show the model: undecodable bytes and control characters
    are escaped (`\\xNN`), so a listing never carries raw escape sequences or text that
    cannot be encoded."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


@dataclass(frozen=True, slots=True)
class DirEntry:
    """One entry of a directory, seen without following it: its `name`, what it is, and
    for a symlink the `target` text it holds (not followed, not checked)."""

    name: str
    kind: EntryKind
    target: str | None = None


@dataclass(frozen=True, slots=True)
class WalkStep:
    """One directory of a `JailFS.walk`: its path relative to the walk's top (`()` for
    the top), its subdirectories (a list the caller may prune in place, to skip them),
    its other entries, and its descriptor (valid until the walk moves on), to open those
    entries with `JailFS.open_at`."""

    parts: tuple[str, ...]
    dirs: list[str]
    entries: list[DirEntry]
    fd: int


def _kind(mode: int) -> EntryKind:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _is_a_directory(shown: str) -> NoReturn:
    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), shown)


def _not_regular(shown: str) -> NoReturn:
    raise OSError(errno.EINVAL, "not a regular file (a device, FIFO or socket)", shown)


class JailFS:
    """File access under one jail root through descriptor walks (see the module doc).

    Every method takes an absolute path inside the root that `Jail.resolve` returned;
    get one with `Jail.fs`. Failures are `OSError`s (`FileNotFoundError`,
    `IsADirectoryError`, `NotADirectoryError`, ...) for the tools to word, or the jail's
    own refusals (`SymlinkRefused`, `HardLinkRefused`, `PathOutsideJail`). Sync, like the
    file tools that use it: they run in worker threads.

    `protected` are the jail-relative paths no write may touch (`Jail.protected`):
    every mutating method refuses them with `ProtectedPathRefused`, whatever the safety
    mode, so no file tool (and no future one) can write policy by forgetting to ask.
    """

    __slots__ = ("protected", "root")

    def __init__(self, root: Path, protected: tuple[str, ...] = ()) -> None:
        self.root = root
        self.protected = protected

    def __repr__(self) -> str:
        return f"JailFS({str(self.root)!r})"

    # ── the walk ─────────────────────────────────────────────────────────────────

    def _shown(self, parts: tuple[str, ...]) -> str:
        return "/".join(parts) if parts else "."

    def _parts(self, path: Path) -> tuple[str, ...]:
        """`path` relative to the root, as components; refuses anything not under it."""
        try:
            rel = path.relative_to(self.root)
        except ValueError:
            raise PathOutsideJail(str(path), self.root) from None
        parts = rel.parts
        if ".." in parts:
            raise PathOutsideJail(
                str(path), self.root, "is not a resolved path (it has a '..' component)"
            )
        return parts

    def _writable_parts(self, path: Path) -> tuple[str, ...]:
        """`_parts(path)`, refusing a protected target (law 11) before anything is
        touched."""
        parts = self._parts(path)
        covering = protected_match(parts, self.protected) or git_directory_match(self.root, parts)
        if covering is not None:
            raise ProtectedPathRefused(self._shown(parts), self.root, covering)
        return parts

    def _explain(self, dir_fd: int, parts: tuple[str, ...], index: int) -> None:
        """After `ENOTDIR` or `ELOOP` on component `index`: if it is a symlink now, raise
        `SymlinkRefused`; else return, and the caller re-raises the `OSError` (a file
        where a directory was expected)."""
        st = None
        with suppress(OSError):
            st = _lstat_at(dir_fd, parts[index])
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise SymlinkRefused(self._shown(parts), self.root, self._shown(parts[: index + 1]))

    def _open_component(self, dir_fd: int, parts: tuple[str, ...], index: int) -> int:
        try:
            return os.open(parts[index], _DIR_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                self._explain(dir_fd, parts, index)
            raise

    def _step(self, dir_fd: int, parts: tuple[str, ...], index: int, create: bool) -> int:
        """Open directory component `index` under `dir_fd` without following it,
        creating it first if it is missing and `create` is set."""
        try:
            return self._open_component(dir_fd, parts, index)
        except FileNotFoundError:
            if not create:
                raise
        with suppress(FileExistsError):  # made meanwhile; the open below checks what it is
            os.mkdir(parts[index], 0o777, dir_fd=dir_fd)
        return self._open_component(dir_fd, parts, index)

    @contextmanager
    def _dir(self, parts: tuple[str, ...], *, create: bool = False) -> Iterator[int]:
        """A descriptor of the directory `parts` names under the root, reached by the
        walk; closed on exit."""
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for index in range(len(parts)):
                child = self._step(fd, parts, index, create)
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    @contextmanager
    def open_dir(self, path: Path, *, create: bool = False) -> Iterator[int]:
        """A descriptor of the directory `path`, reached by the walk (created, with its
        parents, if `create`). Raises `NotADirectoryError` if a component is a file.
        Creating is a write: a protected `path` is refused then (law 11)."""
        parts = self._writable_parts(path) if create else self._parts(path)
        with self._dir(parts, create=create) as fd:
            yield fd

    # ── reading ──────────────────────────────────────────────────────────────────

    def _open_regular(self, dir_fd: int, name: str, shown: str) -> BinaryIO:
        """Open the regular file `name` in `dir_fd` for reading, refusing symlinks,
        non-regular files (before opening them, so a device or FIFO is never opened) and
        hard-linked files."""
        before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        self._check_regular(before, shown)
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise SymlinkRefused(shown, self.root, shown) from exc
            raise
        try:
            after = os.fstat(fd)
            self._check_regular(after, shown)
            os.set_blocking(fd, True)
            note_read(shown)  # what was read may carry an earlier run's taint
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise

    def _check_regular(self, st: os.stat_result, shown: str) -> None:
        mode = st.st_mode
        if stat.S_ISLNK(mode):
            raise SymlinkRefused(shown, self.root, shown)
        if stat.S_ISDIR(mode):
            _is_a_directory(shown)
        if not stat.S_ISREG(mode):
            _not_regular(shown)
        if st.st_nlink > 1:
            raise HardLinkRefused(shown, self.root, st.st_nlink)

    def open_file(self, path: Path) -> BinaryIO:
        """The regular file `path`, open for reading in binary mode."""
        parts = self._parts(path)
        shown = self._shown(parts)
        if not parts:
            _is_a_directory(shown)
        with self._dir(parts[:-1]) as dir_fd:
            return self._open_regular(dir_fd, parts[-1], shown)

    def open_at(self, dir_fd: int, name: str, shown: str) -> BinaryIO:
        """The regular file `name` in a directory a walk opened (`WalkStep.fd`), for
        reading; `shown` names it in errors."""
        return self._open_regular(dir_fd, name, shown)

    def read_bytes(self, path: Path) -> bytes:
        """The whole content of the regular file `path`."""
        with self.open_file(path) as file:
            return file.read()

    def stat(self, path: Path) -> os.stat_result | None:
        """What `path` is, without following it, or `None` if it does not exist (a
        missing parent, or a file where a parent directory should be, count as missing).
        A symlink there was swapped in after `resolve`: `SymlinkRefused`."""
        parts = self._parts(path)
        shown = self._shown(parts)
        if not parts:
            with self._dir(parts) as fd:
                return os.fstat(fd)
        try:
            with self._dir(parts[:-1]) as dir_fd:
                st = _lstat_at(dir_fd, parts[-1])
        except (FileNotFoundError, NotADirectoryError):
            return None
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise SymlinkRefused(shown, self.root, shown)
        return st

    def listdir(self, path: Path) -> list[DirEntry]:
        """The entries of the directory `path`, sorted by name, none of them followed."""
        with self.open_dir(path) as fd:
            return self._entries(fd, None)

    def _entries(self, fd: int, names: Collection[str] | None) -> list[DirEntry]:
        if names is None:
            with os.scandir(fd) as scan:
                names = [entry.name for entry in scan]
        found: list[DirEntry] = []
        for name in sorted(names):
            st = _lstat_at(fd, name)
            if st is None:
                continue  # removed meanwhile
            kind = _kind(st.st_mode)
            target = os.readlink(name, dir_fd=fd) if kind == "symlink" else None
            found.append(DirEntry(name, kind, target))
        return found

    def walk(
        self,
        path: Path,
        *,
        skip: Collection[str] = (),
        report: WalkReport | None = None,
    ) -> Generator[WalkStep, None, None]:
        """Every directory under `path`, top first, in sorted order, by descriptors
        (`bounded_fwalk`: no recursion, never follows a symlink, at most `report.limits`
        deep and wide, what the limits cut recorded on `report`). Subdirectories named in
        `skip` and entries with names the tools refuse (`usable_name`) are left out. Close
        the iterator if you stop early (`contextlib.closing`), so its descriptors are
        released at once."""
        report = WalkReport() if report is None else report
        with self.open_dir(path) as top, closing(bounded_fwalk(top, report, skip=skip)) as steps:
            for parts, dirnames, filenames, dir_fd in steps:
                dirnames[:] = sorted(n for n in dirnames if usable_name(n))
                entries = self._entries(dir_fd, [n for n in filenames if usable_name(n)])
                yield WalkStep(parts, dirnames, entries, dir_fd)

    # ── writing ──────────────────────────────────────────────────────────────────

    def mkdirs(self, path: Path) -> None:
        """Make the directory `path` and any missing parents, by the walk."""
        with self._dir(self._writable_parts(path), create=True):
            pass

    def write_bytes(self, path: Path, data: bytes, *, create_parents: bool = False) -> bool:
        """Replace (or create) the regular file `path` with `data`, atomically: a
        temporary file made with `O_EXCL | O_NOFOLLOW` in the same directory, renamed over
        the target through the directory's descriptor. An existing file keeps its
        permission bits. Returns whether the file existed."""
        parts = self._writable_parts(path)
        shown = self._shown(parts)
        if not parts:
            _is_a_directory(shown)
        name = parts[-1]
        with self._dir(parts[:-1], create=create_parents) as dir_fd:
            existing = _lstat_at(dir_fd, name)
            if existing is not None:
                self._check_regular(existing, shown)
            temp = f".tiller-{secrets.token_hex(8)}.tmp"
            fd = os.open(temp, _TEMP_FLAGS, 0o600 if existing else 0o666, dir_fd=dir_fd)
            try:
                with open(fd, "wb", closefd=True) as file:
                    file.write(data)
                    if existing is not None:
                        os.fchmod(file.fileno(), stat.S_IMODE(existing.st_mode) & 0o777)
                os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                with suppress(OSError):
                    os.unlink(temp, dir_fd=dir_fd)
                raise
        return existing is not None

    def unlink(self, path: Path) -> None:
        """Remove the file `path` (never a directory; a symlink there is refused)."""
        parts = self._writable_parts(path)
        shown = self._shown(parts)
        if not parts:
            _is_a_directory(shown)
        with self._dir(parts[:-1]) as dir_fd:
            st = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise SymlinkRefused(shown, self.root, shown)
            if stat.S_ISDIR(st.st_mode):
                _is_a_directory(shown)
            os.unlink(parts[-1], dir_fd=dir_fd)
