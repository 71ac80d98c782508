"""`search`: a regex search over the workspace, like a small `grep -rn`.

The output is bounded (a fixed number of matches, each line cut short), because a search
is how a model orients itself and one that returns a megabyte is useless to it. `.git` is
skipped, and so are binary files and symlinks that lead out of the jail.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath
from typing import Final

from .._exec import ExecContext
from .._tool import Capability, ToolError, tool
from ._text import looks_binary

__all__ = ["search"]

#: Matching lines `search` shows before it stops.
MAX_MATCHES: Final = 200
#: Characters of a matching line `search` shows.
MAX_MATCH_CHARS: Final = 300
#: Directories `search` never descends into.
SKIPPED_DIRS: Final = frozenset({".git"})


def _candidates(top: Path, ctx: ExecContext) -> list[Path]:
    """Files under `top` in a stable order (sorted, depth first), `.git` left out and
    symlinks kept only when they resolve to a file inside the jail."""
    if top.is_file():
        return [top]
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(top):  # never follows directory symlinks
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        for name in sorted(filenames):
            path = Path(dirpath, name)
            if path.is_symlink() and not (ctx.tools.contains(path) and path.is_file()):
                continue
            found.append(path)
    return found


@tool(read_only=True, capabilities=Capability.PRIVATE_DATA)
def search(pattern: str, path: str = ".", glob: str | None = None, *, ctx: ExecContext) -> str:
    """Search the workspace's text files for a regular expression (Python `re` syntax,
    matched line by line). Prints `path:line: text` for each matching line in file order,
    at most 200 of them; .git and binary files are skipped.

    Sync on purpose: it runs in a worker thread and checks the call's token between files.

    Args:
        pattern: The regular expression, e.g. `def \\w+_test` or `TODO|FIXME`.
        path: The file or directory to search, relative to the workspace root.
        glob: Only search files whose path matches this pattern, e.g. `*.py` or
            `src/*.ts` (matched against the end of the path).
    """
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from exc
    top = ctx.tools.resolve(path)
    where = ctx.tools.relative(top)
    if not top.exists():
        raise ToolError(f"no such file or directory: {where}")
    matches: list[str] = []
    stopped = False
    for file in _candidates(top, ctx):
        ctx.token.check()  # a sync tool cannot be interrupted; it checks between files
        shown = ctx.tools.relative(file)
        if glob is not None and not PurePosixPath(shown).match(glob):
            continue
        try:
            if looks_binary(file):
                continue
            with file.open(encoding="utf-8", errors="replace") as text:
                for number, line in enumerate(text, start=1):
                    if regex.search(line) is None:
                        continue
                    if len(matches) == MAX_MATCHES:
                        stopped = True
                        break
                    line = line.rstrip("\r\n")
                    if len(line) > MAX_MATCH_CHARS:
                        line = line[:MAX_MATCH_CHARS] + " [...]"
                    matches.append(f"{shown}:{number}: {line}")
        except OSError:
            continue  # unreadable (permissions, vanished meanwhile): not a match
        if stopped:
            break
    scope = where if glob is None else f"{where} (files matching {glob})"
    if not matches:
        return f"no matches for {pattern!r} in {scope}"
    if stopped:
        matches.append(
            f"[stopped after {MAX_MATCHES} matches; narrow the pattern, path or glob "
            "to see the rest]"
        )
    return "\n".join(matches)
