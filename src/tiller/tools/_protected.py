"""Which workspace paths are protected policy: the one answer the file tools, the gate and
the sandbox share (law 11).

A protected path (`Jail.protected`: `tiller.toml`, `.tiller/`, git's config and hooks,
the run's hook scripts) covers itself and everything under it. The match is on the path
as `Jail.resolve` returned it (real, absolute, symlinks followed), so `./tiller.toml`,
`sub/../tiller.toml`, `.git//hooks/x` and a symlink pointing at `tiller.toml` all name the
protected file. It ignores case: Linux filesystems are case-sensitive, where `.GIT/config`
is just another file, but on a case-insensitive one (macOS, a FAT or SMB mount, ext4 with
casefolding) it *is* git's config, and refusing a harmless look-alike costs nothing.

A `.git` anywhere (the root's, a nested repository, or a `.git` *file* whose `gitdir:` line
points git at a directory the model built) is protected whole: git run in that directory
would read its config and hooks just the same, and no task needs the file tools to write
git's internals.

A git directory needs no `.git` at all: a plain directory holding `HEAD`, `objects/` and
`refs/` is one to git's discovery (a bare repository, or one whose `config` says
`worktree = .`), and its `config` can name a `core.fsmonitor` command that the user's next
`git status` runs. So `git_directory_match` refuses the write that would complete that
layout, and any write to `config` or `hooks/` of a directory that has it already
(`Jail.root` is needed to look, so it is a separate check from `protected_match`).

One subpath is exempt, exactly spelled: `.tiller/scratch`, the session scratchpads that
the model's own file tools write in the Plan phase (`tiller.loop` `SCRATCH_SUBDIR`). Nothing
tiller reads as configuration lives there.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Final

__all__ = ["PROTECTED_EXEMPT", "git_directory_match", "protected_match"]

#: What makes a directory a git directory to git's discovery (`is_git_directory`).
_GIT_DIR_LAYOUT: Final = ("head", "objects", "refs")
#: What in a git directory runs programs or says where its work tree is.
_GIT_DIR_POLICY: Final = ("config", "hooks")

#: Subpaths of protected paths that the model's file tools may write (exact spelling).
PROTECTED_EXEMPT: Final = (".tiller/scratch",)


def _covers(prefix: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    return len(parts) >= len(prefix) and parts[: len(prefix)] == prefix


def protected_match(parts: tuple[str, ...], protected: Iterable[str]) -> str | None:
    """The protected path covering the jail-relative `parts`, or None (see the module
    docstring: case-insensitive, a nested `.git` whole, `.tiller/scratch` exempt)."""
    folded = tuple(part.casefold() for part in parts)
    if any(_covers(PurePosixPath(exempt).parts, parts) for exempt in PROTECTED_EXEMPT):
        return None
    for path in protected:
        prefix = tuple(part.casefold() for part in PurePosixPath(path).parts)
        if _covers(prefix, folded):
            return path
    if ".git" in folded:
        return "/".join(parts[: folded.index(".git") + 1])
    return None


def git_directory_match(root: Path, parts: tuple[str, ...]) -> str | None:
    """The directory that writing the jail-relative `parts` under `root` would make a git
    directory (or whose `config` or `hooks/` it would write, being one), said for a
    refusal; None when the write has nothing to do with one (see the module docstring)."""
    folded = tuple(part.casefold() for part in parts)
    for index, name in enumerate(folded):
        if name not in _GIT_DIR_LAYOUT and name not in _GIT_DIR_POLICY:
            continue
        directory = parts[:index]
        have = {
            entry: name == entry or _lexists(root, (*directory, _spelled(entry)))
            for entry in _GIT_DIR_LAYOUT
        }
        if all(have.values()):
            shown = "/".join(directory) or "."
            return f"{shown} (HEAD, objects/ and refs/ make it a git directory)"
    return None


def _spelled(entry: str) -> str:
    return "HEAD" if entry == "head" else entry


def _lexists(root: Path, parts: tuple[str, ...]) -> bool:
    return os.path.lexists(root.joinpath(*parts))
