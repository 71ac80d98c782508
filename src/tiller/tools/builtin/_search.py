"""`grep`: a regex search over the workspace's text files, like a small `grep -rn`.

The output is bounded (a fixed number of matches, each line cut short, a byte cap on the
whole), because a search is how a model orients itself and one that returns a megabyte is
useless to it. Memory is bounded as files are read, not after: lines are read at most
`MAX_LINE_BYTES` at a time, and a file is searched for at most `MAX_FILE_BYTES` (a sparse
file can hold a two-gigabyte "line" for free). The model's pattern runs under the `regex`
package with a deadline for the whole call (`REGEX_SECONDS`), so catastrophic
backtracking (`(a+)+$`) ends in an error, not a hung run. The walk is iterative and
bounded in depth and entries (`WalkLimits`); what it skipped is said in the answer. Files are
reached the way every file tool reaches them: a descriptor walk from the jail root that
never follows a symlinked directory (`JailFS.walk`), `.git` and `.tiller` skipped; a
symlink to a file is searched only when it resolves to a regular file inside the jail.
Binary files, hard-linked files (their other name may lie outside) and unreadable ones
are skipped: they are not matches.
"""

from __future__ import annotations

import stat
import time
from collections import deque
from collections.abc import Generator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, BinaryIO, Final

import regex as re
from pydantic import Field

from .._errors import PathOutsideJail
from .._exec import ExecContext
from .._tool import Capability, ToolError, tool
from .._walk import WalkReport
from ._glob import SKIPPED_DIRS, GlobPattern, below_root, compile_pattern, linked_file
from ._hidden import hidden_entry
from ._text import MAX_LINE_BYTES, SNIFF_BYTES, bounded_lines, looks_binary, os_errors

__all__ = ["MAX_FILE_BYTES", "MAX_MATCHES", "MAX_OUTPUT_BYTES", "REGEX_SECONDS", "grep"]

#: Matching lines `grep` shows before it stops.
MAX_MATCHES: Final = 200
#: Characters of a shown line.
MAX_MATCH_CHARS: Final = 300
#: Context lines `grep` may show around each match.
MAX_CONTEXT: Final = 10
#: Bytes of one file `grep` searches; the rest of a larger file is skipped, and said so.
MAX_FILE_BYTES: Final = 64 * 1024 * 1024
#: Bytes of output `grep` returns before it stops.
MAX_OUTPUT_BYTES: Final = 128 * 1024
#: Seconds the pattern may spend matching over one whole call.
REGEX_SECONDS: Final = 5.0


def _cut(line: str) -> str:
    line = line.rstrip("\r\n")
    return line if len(line) <= MAX_MATCH_CHARS else line[:MAX_MATCH_CHARS] + " [...]"


@dataclass
class _Output:
    """What the search printed so far, whether it hit a cap, and the files it searched
    only in part."""

    deadline: float
    lines: list[str] = field(default_factory=list)
    size: int = 0
    matches: int = 0
    stopped: bool = False
    byte_capped: bool = False
    partial: list[str] = field(default_factory=list)

    def add(self, line: str) -> None:
        self.lines.append(line)
        self.size += len(line) + 1
        if self.size > MAX_OUTPUT_BYTES:
            self.stopped = self.byte_capped = True


def _search(regex: re.Pattern[str], line: str, out: _Output) -> bool:
    """Whether `regex` matches `line`, within what is left of the call's regex time; a
    `ToolError` once that time is spent."""
    left = out.deadline - time.monotonic()
    try:
        if left > 0:
            return regex.search(line, timeout=left) is not None
    except TimeoutError:
        pass
    raise ToolError(
        f"the pattern took more than {REGEX_SECONDS:g} seconds to match (it likely "
        "backtracks catastrophically, as nested repeats like `(a+)+` do); simplify it"
    )


def _search_file(
    file: BinaryIO,
    shown: str,
    regex: re.Pattern[str],
    context: int,
    *,
    out: _Output,
    ctx: ExecContext,
) -> None:
    """Append `file`'s matches (and `context` lines around them) to `out`, in grep's
    format: `path:N:text` for a match, `path-N-text` for context, `--` between groups.
    Lines are read `MAX_LINE_BYTES` at a time (the rest of a longer one is not searched),
    and at most `MAX_FILE_BYTES` of the file."""
    if looks_binary(file.read(SNIFF_BYTES)):
        return
    file.seek(0)
    before: deque[tuple[int, str]] = deque(maxlen=context)
    after = 0  # context lines still owed after the last match
    last = 0  # the last line number printed for this file
    for number, (data, _) in enumerate(bounded_lines(file, MAX_LINE_BYTES), start=1):
        if file.tell() > MAX_FILE_BYTES:
            out.partial.append(shown)
            return
        if number % 4096 == 0:
            ctx.token.check()  # a huge file must not outlive a cancel
        line = data.decode("utf-8", "replace")
        if _search(regex, line, out):
            if out.matches == MAX_MATCHES or out.stopped:
                out.stopped = True
                return
            first = before[0][0] if before else number
            if context and out.lines and (last == 0 or first > last + 1):
                out.add("--")
            for n, previous in before:
                out.add(f"{shown}-{n}-{previous}")
            before.clear()
            out.add(f"{shown}:{number}:{_cut(line)}")
            out.matches += 1
            last = number
            after = context
        elif after:
            out.add(f"{shown}-{number}-{_cut(line)}")
            last = number
            after -= 1
        elif context:
            before.append((number, _cut(line)))


def _these(
    *files: tuple[str, BinaryIO | None],
) -> Generator[tuple[str, BinaryIO | None], None, None]:
    yield from files


def _files(
    ctx: ExecContext, top: Path, only: GlobPattern | None, report: WalkReport
) -> Generator[tuple[str, BinaryIO | None], None, None]:
    """The files to search under the directory `top` (those `only` matches, if given),
    depth first in sorted order, each as its path relative to the root and an open file
    (`None` when it cannot be searched safely)."""
    fs = ctx.jail.fs
    base = below_root(ctx.jail, top)
    with closing(fs.walk(top, skip=SKIPPED_DIRS, report=report)) as steps:
        for step in steps:
            ctx.token.check()  # a sync tool cannot be interrupted; it checks per directory
            here = (*base, *step.parts)
            step.dirs[:] = [d for d in step.dirs if not hidden_entry(here, d)]
            for entry in step.entries:
                if hidden_entry(here, entry.name):
                    continue
                path = top.joinpath(*step.parts, entry.name)
                shown = ctx.jail.relative(path)
                if entry.kind not in ("file", "symlink"):
                    continue
                if only is not None and not only.matches(shown.split("/")):
                    continue
                opened: BinaryIO | None = None
                try:
                    if entry.kind == "file":
                        opened = fs.open_at(step.fd, entry.name, shown)
                    elif entry.kind == "symlink":
                        target = linked_file(ctx.jail, path)
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
    most 200 matches; .git, .tiller and binary files are skipped. Output, lines, files
    and the walk are capped; a note says what a cap left out.

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
    top = ctx.jail.resolve(path)
    where = ctx.jail.relative(top)
    only: GlobPattern | None = None
    if glob is not None:
        anchored = glob if glob.startswith("**") else "**/" + glob.removeprefix("./")
        compile_pattern(glob, ctx.jail, "glob filter")  # refuses `..` and absolute globs
        only = compile_pattern(anchored, ctx.jail, "glob filter")
    fs = ctx.jail.fs
    with os_errors("search", where):
        st = fs.stat(top)
    if st is None:
        raise ToolError(f"no such file or directory: {where}")
    out = _Output(deadline=time.monotonic() + REGEX_SECONDS)
    report = WalkReport()
    candidates: Generator[tuple[str, BinaryIO | None], None, None]
    if stat.S_ISDIR(st.st_mode):
        candidates = _files(ctx, top, only, report)
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
                    _search_file(opened, shown, regex, context, out=out, ctx=ctx)
                except OSError:
                    continue  # vanished or unreadable meanwhile: not a match
            if out.stopped:
                break
    scope = where if glob is None else f"{where} (files matching {glob})"
    notes = _notes(out, report)
    if not out.lines:
        return "\n".join([f"no matches for {pattern!r} in {scope}", *notes])
    return "\n".join([*out.lines, *notes])


def _notes(out: _Output, report: WalkReport) -> list[str]:
    """What the caps left out, one line each, so a capped answer never reads as whole."""
    notes: list[str] = []
    if out.stopped:
        cap = f"{MAX_OUTPUT_BYTES} bytes of output" if out.byte_capped else "matches"
        notes.append(
            f"[stopped after {out.matches} {cap}; narrow the pattern, path or glob to see the rest]"
        )
    if out.partial:
        first = ", ".join(out.partial[:3])
        notes.append(
            f"[searched only the first {MAX_FILE_BYTES} bytes of {len(out.partial)} large "
            f"files ({first}); use read_file with an offset for the rest]"
        )
    walk = report.note()
    if walk is not None:
        notes.append(walk)
    return notes
