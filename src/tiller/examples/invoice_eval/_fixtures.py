"""The invoice eval's fixtures: the pristine project and one seeded copy per case, made
from the bundled project (`tiller/examples/invoice_project`) rather than committed.

The bundled project ships with `tiller demo`'s bug (`total` subtracts the discount as an
amount; the demo's agent fixes it). The eval's pristine project is the bundled one with
that bug repaired (`DEMO_REPAIR`): its tests pass, and each case seeds one bug of its own
into a copy of it (the demo's bug is one of them).

Fixtures are built once and cached under the system's temporary directory, in a directory
of this user's (`tiller-{uid}`, mode 0700, refused if someone else owns it), named by a
hash of everything they are made of: the bundled project's files, the repair and every
case's bug. A change to any of them makes a new directory; an unchanged project reuses
the old one. A directory is built beside its final name and renamed into place, so a
process never sees a half-built one, and two processes building at once both end with
the same complete directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
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
        building = Path(tempfile.mkdtemp(prefix=".building-", dir=cache))
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
    """The cache directory, made if missing; refused if it is not a real directory of
    this user's that only they can write (another user could plant fixtures there)."""
    if cache_root is not None:
        root = Path(cache_root)
        root.mkdir(parents=True, exist_ok=True)
        return root
    root = Path(tempfile.gettempdir()) / f"tiller-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        root.mkdir(mode=0o700)
    info = os.lstat(root)
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.getuid()
        or stat.S_IMODE(info.st_mode) & 0o022
    ):
        raise UsageError(
            f"{root} is not a directory of yours that only you can write to, so the invoice "
            "eval will not cache its fixtures there; remove it, or pass cache_root="
        )
    return root
