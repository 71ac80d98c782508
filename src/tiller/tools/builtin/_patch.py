"""`apply_patch`: apply a unified diff to the workspace, all or nothing.

A model that changes several places in several files does better with one diff than with a
dozen `edit_file` calls, and a half-applied change is worse than none. So the tool works
in two passes: first it resolves every path (the jail refuses any that leads out), checks
each is writable in this phase, and applies every hunk of every file *in memory*; only if
all of that succeeded does it snapshot the files and write them. A failure while writing
(a full disk, a symlink swapped in) puts back the files already written. The parsing and
the hunk rules live in `_diff`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .._errors import PathOutsideJail
from .._exec import ExecContext
from .._risk_class import RiskClass
from .._tool import ToolError, tool
from ._diff import AppliedHunk, FilePatch, apply_hunks, parse_patch, split_lines
from ._files import encode_content
from ._text import MAX_EDIT_BYTES, decode_text, os_errors, read_for_edit

#: The most bytes one patch may load across all the files it changes (each file is also
#: held to `MAX_EDIT_BYTES`): staging keeps every one in memory, before and after.
MAX_PATCH_BYTES: Final = 4 * MAX_EDIT_BYTES

__all__ = ["apply_patch"]


@dataclass(frozen=True, slots=True)
class _Change:
    """One file the patch changes: what it held (`None`: absent) and will hold."""

    path: Path
    before: bytes | None
    after: bytes | None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _offsets(placed: list[AppliedHunk]) -> str:
    moved = [f"hunk {p.number} at line {p.line} (offset {p.offset:+d})" for p in placed if p.offset]
    return f"; {', '.join(moved)}" if moved else ""


class _Staging:
    """The files as the patch leaves them, in memory: each path's content before the
    patch (read once, through the jail's walk) and after the sections applied so far."""

    def __init__(self, ctx: ExecContext, resolved: dict[str, Path]) -> None:
        self._ctx = ctx
        self._resolved = resolved
        self._before: dict[Path, bytes | None] = {}
        self._after: dict[Path, bytes | None] = {}
        self._loaded = 0  # bytes read so far, against MAX_PATCH_BYTES

    def _shown(self, path: Path) -> str:
        return self._ctx.jail.relative(path)

    def _load(self, path: Path) -> bytes | None:
        if path not in self._after:
            shown = self._shown(path)
            fs = self._ctx.jail.fs
            with os_errors(
                "read", shown, directory=f"{shown} is a directory; a patch changes files"
            ):
                data = None
                if fs.stat(path) is not None:
                    with fs.open_file(path) as file:
                        data = read_for_edit(file, shown, "apply_patch")
            self._loaded += len(data or b"")
            if self._loaded > MAX_PATCH_BYTES:
                raise ToolError(
                    f"the files this patch changes hold more than {MAX_PATCH_BYTES} bytes "
                    "together; split it into smaller patches"
                )
            self._before[path] = data
            self._after[path] = data
        return self._after[path]

    def apply(self, section: FilePatch) -> str:
        """Apply one section to the staged files; returns its summary line."""
        old = None if section.old_path is None else self._resolved[section.old_path]
        new = None if section.new_path is None else self._resolved[section.new_path]
        if old is None:
            assert new is not None
            shown = self._shown(new)
            if self._load(new) is not None:
                raise ToolError(
                    f"{shown} already exists, but the patch creates it ('--- /dev/null'); "
                    f"to change it, use '--- a/{shown}' and hunks against its content"
                )
            text = ""
        else:
            shown = self._shown(old)
            data = self._load(old)
            if data is None:
                raise ToolError(
                    f"no such file: {shown} (the patch changes it; to create a file, use "
                    "'--- /dev/null')"
                )
            text = decode_text(data, shown, "apply_patch")
        result, placed = apply_hunks(text, section, shown)
        added = sum(h.added for h in section.hunks)
        removed = sum(h.removed for h in section.hunks)
        if new is None:
            assert old is not None
            if result:
                left = len(split_lines(result))
                raise ToolError(
                    f"the patch deletes {shown} ('+++ /dev/null') but its hunks leave "
                    f"{_plural(left, 'line')} of it; a deletion removes every line "
                    "(each as a '-' line)"
                )
            self._after[old] = None
            return f"deleted {shown}"
        data_out = encode_content(result)
        if old is None:
            self._after[new] = data_out
            return f"created {shown} (+{added})"
        changes = f"{_plural(len(section.hunks), 'hunk')}, +{added} -{removed}"
        if new != old:
            target = self._shown(new)
            if self._load(new) is not None:
                raise ToolError(f"cannot rename {shown} to {target}: {target} already exists")
            self._after[old] = None
            self._after[new] = data_out
            edits = f" ({changes}{_offsets(placed)})" if section.hunks else ""
            return f"renamed {shown} to {target}{edits}"
        self._after[new] = data_out
        return f"patched {shown}: {changes}{_offsets(placed)}"

    def changes(self) -> list[_Change]:
        """The files whose content the patch changes, in the order it first named them."""
        return [
            _Change(path, self._before[path], after)
            for path, after in self._after.items()
            if after != self._before[path]
        ]


def _write(ctx: ExecContext, changes: list[_Change]) -> None:
    """Write `changes`; if one fails, put back those already written, then raise."""
    fs = ctx.jail.fs
    done: list[_Change] = []
    for change in changes:
        try:
            if change.after is None:
                fs.unlink(change.path)
            else:
                fs.write_bytes(change.path, change.after, create_parents=True)
        except (OSError, PathOutsideJail) as exc:
            unrestored = _restore(ctx, done)
            note = (
                "the files already written were put back"
                if not unrestored
                else f"and these could not be put back: {', '.join(unrestored)}"
            )
            if isinstance(exc, PathOutsideJail):
                raise  # the jail's refusal, as is
            reason = exc.strerror or str(exc)
            raise ToolError(
                f"cannot write {ctx.jail.relative(change.path)}: {reason}; {note}"
            ) from exc
        done.append(change)


def _restore(ctx: ExecContext, done: list[_Change]) -> list[str]:
    """Undo `done` (newest first); returns the paths that could not be put back."""
    fs = ctx.jail.fs
    failed: list[str] = []
    for change in reversed(done):
        try:
            if change.before is None:
                fs.unlink(change.path)
            else:
                fs.write_bytes(change.path, change.before, create_parents=True)
        except (OSError, PathOutsideJail):
            failed.append(ctx.jail.relative(change.path))
    return failed


def patch_paths(arguments: Mapping[str, Any]) -> tuple[str, ...]:
    """Every file a call's `patch` touches (old and new names), for path rules and the
    protected-path check; none for a patch that cannot be read (it writes nothing)."""
    patch = arguments.get("patch")
    if not isinstance(patch, str):
        return ()
    try:
        sections = parse_patch(patch)
    except ToolError:
        return ()
    paths = {p for s in sections for p in (s.old_path, s.new_path) if p is not None}
    return tuple(sorted(paths))


@tool(
    plan_scratchpad=True,
    risk=RiskClass.FILE_MUTATION,
    paths_of=patch_paths,
    denial_remedy="Describe the change you would make (the files and the diff) instead of "
    "applying it.",
)
def apply_patch(patch: str, *, ctx: ExecContext) -> str:
    """Apply a unified diff (as `git diff` or `diff -u` print it) to files of the
    workspace: several files at once, creating files (`--- /dev/null`) and deleting them
    (`+++ /dev/null`). All or nothing: every hunk of every file is checked before anything
    is written; an error names the hunk that does not apply and why. Context and removed
    lines must match the file exactly, but a hunk may sit at other line numbers than its
    header says. Paths are relative to the workspace root; git's `a/` and `b/` prefixes
    are fine.

    Args:
        patch: The diff. For each file a `--- a/path` and a `+++ b/path` line, then hunks,
            each a header `@@ -start,count +start,count @@` and lines starting with ` `
            (context, unchanged), `-` (removed) or `+` (added). Give a few context lines
            around each change, copied exactly from the file.
    """
    sections = parse_patch(patch)
    resolved: dict[str, Path] = {}
    for section in sections:
        for name in (section.old_path, section.new_path):
            if name is not None and name not in resolved:
                resolved[name] = ctx.jail.resolve(name)
    for target in dict.fromkeys(resolved.values()):
        ctx.require_writable(target)
    staging = _Staging(ctx, resolved)
    summary = [staging.apply(section) for section in sections]
    changes = staging.changes()
    if not changes:
        return "the patch leaves every file as it was; nothing was written"
    ctx.snapshot_before_write([change.path for change in changes], reason="apply_patch")
    ctx.token.check()  # cancelled while the snapshot was taken: the patch must not land
    _write(ctx, changes)
    return "\n".join(summary)
