"""`grep`: a regex search over the workspace's text files, like a small `grep -rn`.

The output is bounded (a fixed number of matches, each line cut short), because a search
is how a model orients itself and one that returns a megabyte is useless to it. Files are
reached the way every file tool reaches them: a descriptor walk from the jail root that
never follows a symlinked directory (`JailFS.walk`), `.git` and `.tiller` skipped; a
symlink to a file is searched only when it resolves to a regular file inside the jail.
Binary files, hard-linked files (their other name may lie outside) and unreadable ones
are skipped: they are not matches.
"""

from __future__ import annotations

import io
import re
import stat
from collections import deque
from collections.abc import Generator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, BinaryIO, Final

from pydantic import Field

from .._errors import PathOutsideJail
from .._exec import ExecContext
from .._tool import Capability, ToolError, tool
from ._glob import SKIPPED_DIRS, GlobPattern, compile_pattern, linked_file
from ._text import SNIFF_BYTES, looks_binary, os_errors

__all__ = ["MAX_MATCHES", "grep"]

#: Matching lines `grep` shows before it stops.
MAX_MATCHES: Final = 200
#: Characters of a shown line.
MAX_MATCH_CHARS: Final = 300
#: Context lines `grep` may show around each match.
MAX_CONTEXT: Final = 10


def _cut(line: str) -> str:
    line = line.rstrip("\r\n")
    return line if len(line) <= MAX_MATCH_CHARS else line[:MAX_MATCH_CHARS] + " [...]"


@dataclass
class _Output:
    """What the search printed so far, and whether it hit the cap."""

    lines: list[str] = field(default_factory=list)
    matches: int = 0
    stopped: bool = False


def _search_file(
    file: BinaryIO, shown: str, regex: re.Pattern[str], context: int, out: _Output
) -> None:
    """Append `file`'s matches (and `context` lines around them) to `out`, in grep's
    format: `path:N:text` for a match, `path-N-text` for context, `--` between groups."""
    if looks_binary(file.read(SNIFF_BYTES)):
        return
    file.seek(0)
    before: deque[tuple[int, str]] = deque(maxlen=context)
    after = 0  # context lines still owed after the last match
    last = 0  # the last line number printed for this file
    with io.TextIOWrapper(file, encoding="utf-8", errors="replace") as text:
        for number, line in enumerate(text, start=1):
            if regex.search(line) is not None:
                if out.matches == MAX_MATCHES:
                    out.stopped = True
                    return
                first = before[0][0] if before else number
                if context and out.lines and (last == 0 or first > last + 1):
                    out.lines.append("--")
                for n, previous in before:
                    out.lines.append(f"{shown}-{n}-{previous}")
                before.clear()
                out.lines.append(f"{shown}:{number}:{_cut(line)}")
                out.matches += 1
                last = number
                after = context
            elif after:
                out.lines.append(f"{shown}-{number}-{_cut(line)}")
                last = number
                after -= 1
            elif context:
                before.append((number, _cut(line)))


def _these(
    *files: tuple[str, BinaryIO | None],
) -> Generator[tuple[str, BinaryIO | None], None, None]:
    yield from files


def _files(
    ctx: ExecContext, top: Path, only: GlobPattern | None
) -> Generator[tuple[str, BinaryIO | None], None, None]:
    """The files to search under the directory `top` (those `only` matches, if given),
    depth first in sorted order, each as its path relative to the root and an open file
    (`None` when it cannot be searched safely)."""
    fs = ctx.tools.fs
    with closing(fs.walk(top, skip=SKIPPED_DIRS)) as steps:
        for step in steps:
            ctx.token.check()  # a sync tool cannot be interrupted; it checks per directory
            for entry in step.entries:
                path = top.joinpath(*step.parts, entry.name)
                shown = ctx.tools.relative(path)
                if entry.kind not in ("file", "symlink"):
                    continue
                if only is not None and not only.matches(shown.split("/")):
                    continue
                opened: BinaryIO | None = None
                try:
                    if entry.kind == "file":
                        opened = fs.open_at(step.fd, entry.name, shown)
                    elif entry.kind == "symlink":
                        target = linked_file(ctx.tools, path)
                        if target is not None:
                            opened = fs.open_file(target)
                except (OSError, PathOutsideJail):
                    opened = None  # unreadable, vanished, hard-linked: not a match
                yield shown, opened


@tool(read_only=True, capabilities=Capability.PRIVATE_DATA)
def grep(
    pattern: str,
    path: str = ".",
    glob: str | None = None,
    ignore_case: bool = False,
    context: Annotated[int, Field(ge=0, le=MAX_CONTEXT)] = 0,
    *,
    ctx: ExecContext,
) -> str:
    """Search the workspace's text files for a regular expression (Python `re` syntax,
    matched line by line). Prints `path:line:text` for each matching line in file order
    (with `context`, also `path-line-text` lines around it and `--` between groups), at
    most 200 matches; .git, .tiller and binary files are skipped.

    Sync on purpose: it runs in a worker thread and checks the call's token per directory.

    Args:
        pattern: The regular expression, e.g. `def \\w+_test` or `TODO|FIXME`.
        path: The file or directory to search, relative to the workspace root.
        glob: Only search files whose path matches this pattern, e.g. `*.py`,
            `src/**/*.ts` or `*.{js,ts}` (matched against the end of the path).
        ignore_case: Match letters regardless of case (like `grep -i`).
        context: Lines to show before and after each match (like `grep -C`), 0 to 10.
    """
    try:
        regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from exc
    top = ctx.tools.resolve(path)
    where = ctx.tools.relative(top)
    only: GlobPattern | None = None
    if glob is not None:
        anchored = glob if glob.startswith("**") else "**/" + glob.removeprefix("./")
        compile_pattern(glob, ctx.tools, "glob filter")  # refuses `..` and absolute globs
        only = compile_pattern(anchored, ctx.tools, "glob filter")
    fs = ctx.tools.fs
    with os_errors("search", where):
        st = fs.stat(top)
    if st is None:
        raise ToolError(f"no such file or directory: {where}")
    out = _Output()
    candidates: Generator[tuple[str, BinaryIO | None], None, None]
    if stat.S_ISDIR(st.st_mode):
        candidates = _files(ctx, top, only)
    elif only is not None and not only.matches(where.split("/")):
        candidates = _these()
    else:
        with os_errors("search", where):
            candidates = _these((where, fs.open_file(top)))
    with closing(candidates):
        for shown, opened in candidates:
            if opened is None:
                continue
            with opened:
                try:
                    _search_file(opened, shown, regex, context, out)
                except OSError:
                    continue  # vanished or unreadable meanwhile: not a match
            if out.stopped:
                break
    scope = where if glob is None else f"{where} (files matching {glob})"
    if not out.lines:
        return f"no matches for {pattern!r} in {scope}"
    if out.stopped:
        out.lines.append(
            f"[stopped after {MAX_MATCHES} matches; narrow the pattern, path or glob "
            "to see the rest]"
        )
    return "\n".join(out.lines)
