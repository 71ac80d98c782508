"""A fleet run's workspace rebuilt where the eval scores it: its fixture, materialized,
with the run's stored diff (`tiller.fleet.WorkspaceDiff`) applied.

A fleet worker keeps no copy of a finished run's directory, only what it changed against
the fixture: per path, a unified text diff, the new permission bits, a link's new target,
or a deletion. That is enough to rebuild everything but the content of a binary file,
or of one past `MAX_TEXT_DIFF_BYTES` (the diff gives only their sizes): those paths keep
the fixture's content (or are left out, if the run added them), and `apply_diff` says
which. Directories are not in a diff: an empty directory the run made is not rebuilt.

The diff was taken against exactly the fixture this starts from, so every hunk's context
must match; one that does not (a damaged or foreign diff) fails that path, said in the
notes, never the eval. Paths are written under `root` only: a path whose parent is not a
plain directory inside it (a link) is refused.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from ..fleet import FileChange, WorkspaceDiff

__all__ = ["apply_diff"]

_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_NEWLINE = "\\"


def apply_diff(root: Path, diff: WorkspaceDiff) -> list[str]:
    """Apply `diff` to the fixture materialized at `root`; what could not be rebuilt, one
    note per path (empty: the directory is as the run left it, directories aside)."""
    notes: list[str] = []
    # Deletions first: a path that became a directory's parent (or stopped being one)
    # is out of the way before anything is written.
    ordered = sorted(diff.changes, key=lambda c: (c.change != "deleted", c.path))
    for change in ordered:
        try:
            note = _apply(root, change)
        except (OSError, ValueError) as exc:
            note = f"{change.path}: not rebuilt ({exc})"
        if note is not None:
            notes.append(note)
    return notes


def _apply(root: Path, change: FileChange) -> str | None:
    target = _inside(root, change.path)
    if change.change == "deleted":
        _remove(target)
        return None
    if change.kind_after == "symlink":
        _remove(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(change.target_after or "", target)
        return None
    if change.binary or change.too_large:
        what = "binary" if change.binary else "too large for a text diff"
        kept = "left out" if change.change == "added" else "the fixture's content kept"
        return f"{change.path}: {what}, its content is not in the diff ({kept})"
    if change.text_diff is not None:
        before = _text_of(target) if change.change == "modified" else []
        content = patched(before, change.text_diff)
        if target.is_symlink():
            target.unlink()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode("utf-8"))
    elif change.kind_before != "file":
        return f"{change.path}: became a file whose content is not in the diff (left out)"
    if change.mode_after is not None:
        os.chmod(target, change.mode_after & 0o7777)
    return None


def _inside(root: Path, relative: str) -> Path:
    """`root / relative`, refused when it would leave `root` or pass through a link."""
    parts = relative.split("/")
    if not relative or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"{relative!r} is not a relative path")
    here = root
    for part in parts[:-1]:
        here = here / part
        if here.is_symlink():
            raise ValueError(f"{relative!r} passes through the link {part!r}")
    return root.joinpath(*parts)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _text_of(path: Path) -> list[str]:
    return path.read_bytes().decode("utf-8").splitlines(keepends=True)


def patched(before: list[str], text_diff: str) -> str:
    """`before`'s lines (as `str.splitlines(keepends=True)` gives them) with the unified
    diff `text_diff` (as `tiller.fleet.workspace_diff` writes it) applied. `ValueError`
    when a hunk does not fit `before`."""
    # Split on "\n" only: a line of `before` may end in another separator ("\r", "\f").
    pieces = text_diff.split("\n")
    lines = [piece + "\n" for piece in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
    out: list[str] = []
    at = 0  # the next line of `before` to copy
    index = 2 if len(lines) >= 2 and lines[0].startswith("--- ") else 0  # the file header
    while index < len(lines):
        match = _HUNK.match(lines[index])
        if match is None:
            raise ValueError(f"line {index + 1} of the diff is not a hunk header")
        start, count = int(match[1]), 1 if match[2] is None else int(match[2])
        first = start - 1 if count > 0 else start
        if first < at or first > len(before):
            raise ValueError(f"a hunk starts at line {start}, outside the file")
        out.extend(before[at:first])
        at = first
        index += 1
        # The hunk's lines, each with where its text goes: kept, removed or added.
        body: list[tuple[str, str]] = []
        while index < len(lines) and not lines[index].startswith("@@"):
            line = lines[index]
            if line.startswith(_NO_NEWLINE):
                if not body:
                    raise ValueError("a 'no newline' marker before any line")
                kind, text = body[-1]
                body[-1] = (kind, text.removesuffix("\n"))
            else:
                body.append((line[:1], line[1:]))
            index += 1
        for kind, text in body:
            if kind in (" ", "-"):
                if at >= len(before) or before[at] != text:
                    raise ValueError(f"the diff does not fit line {at + 1} of the file")
                at += 1
                if kind == " ":
                    out.append(text)
            elif kind == "+":
                out.append(text)
            else:
                raise ValueError(f"a hunk line starts with {kind!r}")
    out.extend(before[at:])
    return "".join(out)
