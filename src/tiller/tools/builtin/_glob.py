"""`glob`: find files by a path pattern such as `src/**/*.py`, inside the jail.

The walk goes through `ctx.jail.fs.walk`, by directory descriptors, and never follows a
symlinked directory: a link to `/` cannot turn a glob into a listing of the machine, and
a link cycle cannot make it loop. A symlink to a *file* is listed when it resolves to a
regular file inside the jail. `.git` and `.tiller` are skipped: they are tiller's and
git's bookkeeping, and huge. Results are relative to the root and sorted, so the same tree
always gives the same answer, and capped, because a model drowning in paths learns nothing.
The walk itself is bounded in depth and entries (`WalkLimits`); what it skipped is said.

`GlobPattern` is shared with `grep`'s `glob` filter.
"""

from __future__ import annotations

import fnmatch
import itertools
import re
import stat
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Final

from .._errors import PathOutsideJail
from .._exec import ExecContext
from .._jail import Jail
from .._tool import Capability, ToolError, tool
from .._walk import WalkReport
from ._hidden import hidden_entry
from ._text import os_errors

__all__ = [
    "MAX_GLOB_RESULTS",
    "SKIPPED_DIRS",
    "GlobPattern",
    "below_root",
    "compile_pattern",
    "glob",
    "linked_file",
]

#: Paths `glob` shows before it stops.
MAX_GLOB_RESULTS: Final = 1000
#: Directories the walks of `glob` and `grep` never descend into.
SKIPPED_DIRS: Final = frozenset({".git", ".tiller"})
#: Alternatives one pattern may expand to (`{a,b}{c,d}` is 4), against brace bombs.
_MAX_ALTERNATIVES: Final = 64

# One compiled pattern: per path segment, a regex, or None for `**` (any depth).
_Segments = tuple[re.Pattern[str] | None, ...]


def _expand_braces(pattern: str) -> list[str]:
    """`a{b,c}d` → `abd`, `acd` (nested and repeated groups too); a brace without a
    matching close or without a comma is literal."""
    depth = 0
    start = -1
    commas: list[int] = []
    for index, char in enumerate(pattern):
        if char == "{":
            if depth == 0:
                start, commas = index, []
            depth += 1
        elif char == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                if not commas:
                    start = -1
                    continue
                head, tail = pattern[:start], pattern[index + 1 :]
                bounds = [start, *commas, index]
                options = [pattern[a + 1 : b] for a, b in itertools.pairwise(bounds)]
                expanded: list[str] = []
                for option in options:
                    expanded.extend(_expand_braces(head + option + tail))
                    if len(expanded) > _MAX_ALTERNATIVES:
                        raise ValueError(f"expands to more than {_MAX_ALTERNATIVES} alternatives")
                return expanded
        elif char == "," and depth == 1:
            commas.append(index)
    return [pattern]


def _compile(pattern: str) -> _Segments:
    segments: list[re.Pattern[str] | None] = []
    for part in pattern.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            raise ValueError("has a '..' segment")
        if part == "**":
            if not segments or segments[-1] is not None:  # `**/**` is one `**`
                segments.append(None)
            continue
        segments.append(re.compile(fnmatch.translate(part)))
    return tuple(segments)


def _matches(segments: _Segments, parts: Sequence[str]) -> bool:
    memo: dict[tuple[int, int], bool] = {}

    def match(i: int, j: int) -> bool:
        key = (i, j)
        if key not in memo:
            if i == len(segments):
                result = j == len(parts)
            elif segments[i] is None:
                result = match(i + 1, j) or (j < len(parts) and match(i, j + 1))
            else:
                regex = segments[i]
                result = (
                    j < len(parts)
                    and regex is not None
                    and regex.match(parts[j]) is not None
                    and match(i + 1, j + 1)
                )
            memo[key] = result
        return memo[key]

    return match(0, 0)


def _may_match_under(segments: _Segments, parts: Sequence[str]) -> bool:
    """Whether some path below the directory `parts` could match: the directory is a
    prefix the pattern can consume with at least one segment (or a `**`) left over."""
    memo: dict[tuple[int, int], bool] = {}

    def prefix(i: int, j: int) -> bool:
        key = (i, j)
        if key not in memo:
            if j == len(parts):
                result = i < len(segments)
            elif i == len(segments):
                result = False
            elif segments[i] is None:
                result = prefix(i + 1, j) or prefix(i, j + 1)
            else:
                regex = segments[i]
                result = (
                    regex is not None and regex.match(parts[j]) is not None and prefix(i + 1, j + 1)
                )
            memo[key] = result
        return memo[key]

    return prefix(0, 0)


class GlobPattern:
    """A path pattern over `/`-separated relative paths.

    `*`, `?` and `[...]` match within one name (case-sensitive, dot files included);
    `**` as a whole segment matches any number of directories, none included; `{a,b}`
    gives alternatives. `.` segments are ignored. A `..` segment or an absolute pattern
    raises `ValueError`: a pattern only describes paths below where the search starts.
    """

    __slots__ = ("_alternatives", "pattern")

    def __init__(self, pattern: str) -> None:
        if pattern.startswith("/"):
            raise ValueError("is absolute")
        self.pattern = pattern
        self._alternatives = tuple(_compile(each) for each in _expand_braces(pattern))

    def matches(self, parts: Sequence[str]) -> bool:
        """Whether the relative path `parts` (its names) matches."""
        return any(_matches(segments, parts) for segments in self._alternatives)

    def may_match_under(self, parts: Sequence[str]) -> bool:
        """Whether anything below the directory `parts` could match (to prune walks)."""
        return any(_may_match_under(segments, parts) for segments in self._alternatives)

    def __repr__(self) -> str:
        return f"GlobPattern({self.pattern!r})"


def linked_file(jail: Jail, link: Path) -> Path | None:
    """Where the symlink `link` (inside the jail) leads, if that is a regular file inside
    the jail; `None` for a link out, a dangling link, a link to a directory."""
    try:
        target = jail.resolve(link)
        st = jail.fs.stat(target)
    except (PathOutsideJail, OSError):
        return None
    if st is None or not stat.S_ISREG(st.st_mode):
        return None
    return target


def below_root(jail: Jail, path: Path) -> tuple[str, ...]:
    """`path` (a directory in the jail) as parts below the root: `()` for the root."""
    shown = jail.relative(path)
    return () if shown == "." else tuple(shown.split("/"))


def compile_pattern(pattern: str, jail: Jail, what: str) -> GlobPattern:
    """`pattern` compiled, or the jail's refusal (it would leave the search's directory)
    or a `ToolError` (it cannot be compiled)."""
    if "\x00" in pattern:
        raise ToolError(f"the {what} contains a NUL byte")
    try:
        return GlobPattern(pattern)
    except ValueError as exc:
        if pattern.startswith("/") or "'..'" in str(exc):
            raise PathOutsideJail(
                pattern,
                jail.root,
                f"{exc}, but a {what} only matches paths below the directory searched",
                advice="pass the directory to search as `path` (relative to the workspace "
                "root) and a relative pattern.",
            ) from exc
        raise ToolError(f"the {what} {pattern!r} {exc}; simplify it") from exc


def _walk_matches(
    ctx: ExecContext, top: Path, pattern: GlobPattern, report: WalkReport
) -> list[str]:
    jail = ctx.jail
    found: list[str] = []
    base = below_root(jail, top)
    with closing(jail.fs.walk(top, skip=SKIPPED_DIRS, report=report)) as steps:
        for step in steps:
            ctx.token.check()  # a sync tool cannot be interrupted; it checks per directory
            here = (*base, *step.parts)
            step.dirs[:] = [
                d
                for d in step.dirs
                if pattern.may_match_under((*step.parts, d)) and not hidden_entry(here, d)
            ]
            for entry in step.entries:
                if hidden_entry(here, entry.name):
                    continue
                parts = (*step.parts, entry.name)
                if not pattern.matches(parts):
                    continue
                path = top.joinpath(*parts)
                if entry.kind == "file" or (
                    entry.kind == "symlink" and linked_file(jail, path) is not None
                ):
                    found.append(jail.relative(path))
    return found


@tool(read_only=True, capabilities=Capability.PRIVATE_DATA)
def glob(pattern: str, path: str = ".", *, ctx: ExecContext) -> str:
    """Find the files of the workspace whose path matches a glob pattern, e.g.
    `src/**/*.py`, `*.md` or `tests/**/test_*.{py,ts}`. Prints one path per line,
    relative to the workspace root, sorted; at most 1000. `*` and `?` match within one
    name, `**` any number of directories; .git and .tiller are skipped, and symlinked
    directories are not followed.

    Args:
        pattern: The pattern, relative to `path`.
        path: The directory to search from, relative to the workspace root (default:
            the root).
    """
    top = ctx.jail.resolve(path)
    where = ctx.jail.relative(top)
    compiled = compile_pattern(pattern, ctx.jail, "glob pattern")
    with os_errors("search", where):
        st = ctx.jail.fs.stat(top)
        if st is None:
            raise ToolError(f"no such directory: {where}")
        if not stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{where} is a file; glob searches a directory (pass its parent)")
        report = WalkReport()
        found = _walk_matches(ctx, top, compiled, report)
    note = report.note()
    if not found:
        none = f"no files match {pattern!r} in {where}"
        return none if note is None else f"{none}\n{note}"
    found.sort()
    shown = found[:MAX_GLOB_RESULTS]
    if len(found) > MAX_GLOB_RESULTS:
        shown.append(
            f"[... and {len(found) - MAX_GLOB_RESULTS} more files; narrow the pattern or path]"
        )
    if note is not None:
        shown.append(note)
    return "\n".join(shown)
