"""The invoice eval's fixtures: the pristine project and one seeded copy per case, made
from the bundled project (`tiller/examples/invoice_project`) rather than committed.

The bundled project ships with `tiller demo`'s bug (`total` subtracts the discount as an
amount; the demo's agent fixes it). The eval's pristine project is the bundled one with
that bug repaired (`DEMO_REPAIR`): its tests pass, and each case seeds one bug of its own
into a copy of it (the demo's bug is one of them).

Fixtures are built once and cached, named by a hash of everything they are made of: the
bundled project's files, the repair and every case's bug. A change to any of them makes a
new directory; an unchanged project reuses the old one. A directory is built beside its
final name (`.building-*`) and renamed into place, so a process never sees a half-built
one, and two processes building at once both end with the same complete directory; a
`.building-*` left by a process killed part way is removed by a later build once it is
a quarter of an hour old.

The cache is the first of these that is safe to use, so another local user can neither
plant fixtures nor stop the eval by making a directory first:

1. `tiller-{uid}` in the system's temporary directory, if it is (or is now made as) a
   real directory of this user's, mode 0700, in a temporary directory where no one else
   can swap it after the check (private to this user, or sticky like `/tmp`);
2. else `$XDG_CACHE_HOME/tiller` (`~/.cache/tiller`), checked the same way;
3. else a fresh private directory for this process (`mkdtemp`): nothing is reused.

`build_fixtures(cache_root=)` names the directory instead (a test's own, say).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ...errors import UsageError
from ._seeded_bug import SeededBug, SeededBugError

__all__ = ["DEMO_REPAIR", "PROJECT", "InvoiceFixtures", "build_fixtures", "pristine_file"]

#: The bundled project the fixtures are made from.
PROJECT: Final = Path(__file__).resolve().parents[1] / "invoice_project"

#: The bundled project's own bug (`tiller demo`'s), repaired in the eval's pristine project.
DEMO_REPAIR: Final = SeededBug(
    case_id="pristine",
    file="invoice.py",
    old="    amount = amount - discount_percent\n",
    new="    amount = amount * (1 - discount_percent / 100)\n",
)

#: Bumped when the layout of a fixture directory changes, so old caches are not reused.
_LAYOUT: Final = b"invoice-eval fixtures v1"
_PRISTINE: Final = "pristine"
_CASES: Final = "cases"
#: The prefix of a directory being built, renamed to its final name when complete.
_BUILDING: Final = ".building-"
#: How old a `.building-*` directory must be to be taken for a killed build's leftover.
_STALE_BUILD_SECONDS: Final = 15 * 60


@dataclass(frozen=True, slots=True)
class InvoiceFixtures:
    """Where the fixtures are: `pristine` (the project with every test passing) and
    `cases` (case id → its seeded copy)."""

    root: Path
    pristine: Path
    cases: Mapping[str, Path]


def pristine_file(name: str) -> str:
    """The pristine project's `name` (as the eval's cases start from it)."""
    text = (PROJECT / name).read_text(encoding="utf-8")
    return DEMO_REPAIR.seeded(text) if name == DEMO_REPAIR.file else text


def build_fixtures(
    bugs: Sequence[SeededBug], *, cache_root: str | os.PathLike[str] | None = None
) -> InvoiceFixtures:
    """The pristine project and a seeded copy per bug, built if not cached yet (see the
    module docstring). `cache_root` replaces the default cache directory. A bug that
    cannot be seeded is a `SeededBugError` naming its case, and nothing is cached."""
    ids = [bug.case_id for bug in bugs]
    if len(set(ids)) != len(ids):
        raise SeededBugError("two seeded bugs share a case id: give each case its own")
    cache = _cache_directory(cache_root)
    final = cache / f"invoice-eval-{_digest(bugs)[:20]}"
    if not final.is_dir():
        _remove_stale_builds(cache)
        building = Path(tempfile.mkdtemp(prefix=_BUILDING, dir=cache))
        try:
            _build(building, bugs)
            with contextlib.suppress(FileExistsError, OSError):
                # Fails only if another process renamed its own build there first.
                os.rename(building, final)
        finally:
            shutil.rmtree(building, ignore_errors=True)
        if not final.is_dir():
            raise UsageError(f"the invoice eval's fixtures could not be built in {cache}")
    return InvoiceFixtures(
        root=final,
        pristine=final / _PRISTINE,
        cases={bug.case_id: final / _CASES / bug.case_id for bug in bugs},
    )


def _build(directory: Path, bugs: Sequence[SeededBug]) -> None:
    pristine = directory / _PRISTINE
    shutil.copytree(PROJECT, pristine, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    DEMO_REPAIR.seed_into(pristine)
    for bug in bugs:
        copy = directory / _CASES / bug.case_id
        shutil.copytree(pristine, copy)
        bug.seed_into(copy)


def _project_files() -> list[Path]:
    return sorted(
        path
        for path in PROJECT.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    )


def _digest(bugs: Sequence[SeededBug]) -> str:
    """A hash of everything the fixtures are made of (see the module docstring)."""
    digest = hashlib.sha256(_LAYOUT)
    for path in _project_files():
        digest.update(b"\0file\0" + path.relative_to(PROJECT).as_posix().encode())
        digest.update(b"\0" + hashlib.sha256(path.read_bytes()).digest())
    for bug in (DEMO_REPAIR, *bugs):
        for part in (bug.case_id, bug.file, bug.old, bug.new):
            digest.update(b"\0" + hashlib.sha256(part.encode()).digest())
    return digest.hexdigest()


def _cache_directory(cache_root: str | os.PathLike[str] | None) -> Path:
    """`cache_root` (made if missing), else the first of the default places that is
    safe (see the module docstring)."""
    if cache_root is not None:
        root = Path(cache_root)
        root.mkdir(parents=True, exist_ok=True)
        return root
    shared = Path(tempfile.gettempdir()) / f"tiller-{os.getuid()}"
    for candidate in (shared, _user_cache() / "tiller"):
        if _private_directory(candidate):
            return candidate
    # Neither is ours: a private directory for this process (the fixtures are rebuilt
    # next time, which costs a second, rather than the eval refusing to run).
    return Path(tempfile.mkdtemp(prefix=f"tiller-{os.getuid()}-fixtures-"))


def _user_cache() -> Path:
    """This user's cache directory: `$XDG_CACHE_HOME`, else `~/.cache`."""
    configured = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG spec: a relative value is invalid and ignored.
    return Path(configured) if os.path.isabs(configured) else Path.home() / ".cache"


def _private_directory(root: Path) -> bool:
    """Whether `root` is (made if missing, mode 0700) a real directory of this user's
    that only they can write, in a parent where no one else can swap it for another
    after this check: one only its owner can write, or a sticky one (as `/tmp`), where
    only an entry's owner may rename it. Checked on a descriptor opened without
    following a link, so what is checked is the directory itself, not what a link
    planted there points to."""
    try:
        parent = os.stat(root.parent)
    except OSError:
        parent = None
    if parent is None:
        with contextlib.suppress(OSError):
            root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            parent = os.stat(root.parent)
    if parent is None or not _others_cannot_swap_entries(parent):
        return False
    with contextlib.suppress(FileExistsError, OSError):
        root.mkdir(mode=0o700)
    try:
        descriptor = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:  # a link, a file, or gone: not ours to use
        return False
    try:
        info = os.fstat(descriptor)
    finally:
        os.close(descriptor)
    return info.st_uid == os.getuid() and not stat.S_IMODE(info.st_mode) & 0o022


def _others_cannot_swap_entries(parent: os.stat_result) -> bool:
    mode = stat.S_IMODE(parent.st_mode)
    owned = parent.st_uid in (os.getuid(), 0)
    return owned and (not mode & 0o022 or bool(mode & stat.S_ISVTX))


def _remove_stale_builds(cache: Path) -> None:
    """Remove `.building-*` directories older than `_STALE_BUILD_SECONDS`: a build
    takes about a second, so these were left by a process killed while building (a
    build still under way is younger, and kept)."""
    now = time.time()
    with contextlib.suppress(OSError):
        for entry in os.scandir(cache):
            if not entry.name.startswith(_BUILDING):
                continue
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode) and now - info.st_mtime > _STALE_BUILD_SECONDS:
                    shutil.rmtree(entry.path, ignore_errors=True)
