"""Which workspace paths are protected policy: the one answer the file tools, the gate and
the sandbox share (law 11).

A protected path (`ToolCtx.protected`: `tiller.toml`, `.tiller/`, git's config and hooks,
the run's hook scripts) covers itself and everything under it. The match is on the path
as `ToolCtx.resolve` returned it (real, absolute, symlinks followed), so `./tiller.toml`,
`sub/../tiller.toml`, `.git//hooks/x` and a symlink pointing at `tiller.toml` all name the
protected file. It ignores case: Linux filesystems are case-sensitive, where `.GIT/config`
is just another file, but on a case-insensitive one (macOS, a FAT or SMB mount, ext4 with
casefolding) it *is* git's config, and refusing a harmless look-alike costs nothing.

A `.git` below the root (a nested repository, or a `.git` file whose `gitdir:` line points
git elsewhere) is protected whole: git run in that directory would read its config and
hooks just the same, and no task needs the file tools to write git's internals.

One subpath is exempt, exactly spelled: `.tiller/scratch`, the session scratchpads that
the model's own file tools write in the Plan phase (`tiller.loop` `SCRATCH_SUBDIR`). Nothing
tiller reads as configuration lives there.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePosixPath
from typing import Final

__all__ = ["PROTECTED_EXEMPT", "protected_match"]

#: Subpaths of protected paths that the model's file tools may write (exact spelling).
PROTECTED_EXEMPT: Final = (".tiller/scratch",)


def _covers(prefix: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    return len(parts) >= len(prefix) and parts[: len(prefix)] == prefix


def protected_match(parts: tuple[str, ...], protected: Iterable[str]) -> str | None:
    """The protected path covering the jail-relative `parts`, or None (see the module
    docstring: case-insensitive, a nested `.git` whole, `.tiller/scratch` exempt)."""
    folded = tuple(part.casefold() for part in parts)
    if ".git" in folded[1:]:
        nested = folded.index(".git", 1)
        return "/".join(parts[: nested + 1])
    if any(_covers(PurePosixPath(exempt).parts, parts) for exempt in PROTECTED_EXEMPT):
        return None
    for path in protected:
        prefix = tuple(part.casefold() for part in PurePosixPath(path).parts)
        if _covers(prefix, folded):
            return path
    return None
