"""The file tools: read, write, edit and list, all inside the run's jail.

Every path goes through `ctx.jail.resolve` first, so `..`, absolute paths elsewhere,
symlinks that point out and unusable names are refused before anything is opened; then the
file is opened through `ctx.jail.fs`, a descriptor walk with `O_NOFOLLOW`, so a symlink
swapped in after the check cannot redirect the tool (DESIGN §11). Writes replace files
atomically (a temporary file renamed over the target). Files are UTF-8 text; a binary or
undecodable file is refused with a message rather than shown as mojibake or silently
corrupted by an edit. They are sync functions: file I/O runs in worker threads.

The writing tools (`write_file`, `edit_file`, and `apply_patch` in `_patch`) follow one
order: resolve every path, `ctx.require_writable` each (in Plan, only the scratchpad),
check everything that can fail, `ctx.snapshot_before_write` once, then write.
"""

from __future__ import annotations

import io
import stat
from dataclasses import dataclass, field
from typing import Annotated, BinaryIO, Final

from pydantic import Field

from .._exec import ExecContext
from .._fs import display_name
from .._risk_class import RiskClass
from .._tool import Capability, ToolError, tool
from ._hidden import hidden_entry
from ._text import (
    SNIFF_BYTES,
    bounded_lines,
    decode_line,
    decode_text,
    looks_binary,
    os_errors,
    read_for_edit,
)

__all__ = ["edit_file", "list_dir", "read_file", "write_file"]

#: Lines `read_file` shows when no `limit` is given.
DEFAULT_READ_LINES: Final = 2000
#: Characters of one line `read_file` shows; longer lines (minified files) are cut.
MAX_LINE_CHARS: Final = 2000
#: Bytes of numbered lines one `read_file` call returns; a note says where to read on.
MAX_READ_BYTES: Final = 256 * 1024
#: Bytes past the shown lines `read_file` reads to count the file's lines ("of N").
MAX_COUNT_BYTES: Final = 16 * 1024 * 1024
#: Entries `list_dir` shows.
MAX_DIR_ENTRIES: Final = 1000


def _strip_newline(line: str) -> str:
    return line.removesuffix("\n").removesuffix("\r")


def encode_content(content: str) -> bytes:
    """`content` as UTF-8, or a `ToolError` (JSON can carry unpaired surrogates)."""
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(
            f"the new content is not valid Unicode text (character {exc.start}: {exc.reason})"
        ) from exc


@tool(read_only=True, capabilities=Capability.PRIVATE_DATA)
def read_file(
    path: str,
    offset: Annotated[int, Field(ge=0)] = 0,
    limit: Annotated[int, Field(ge=1)] | None = None,
    *,
    ctx: ExecContext,
) -> str:
    """Read a UTF-8 text file of the workspace as numbered lines: each line is shown as
    its 1-based line number, a tab, then its text (the numbers are not part of the file).
    Shows at most 2000 lines unless `limit` says otherwise, with a note on how to read
    on. Binary files are refused.

    The numbered format (as `cat -n`) lets the model cite and page by line; edit_file's
    description tells it to leave the numbers out of `old`.

    Args:
        path: The file, relative to the workspace root.
        offset: How many lines to skip first (0 reads from the start; to continue after
            line N, pass N).
        limit: The most lines to show (default 2000).
    """
    target = ctx.jail.resolve(path)
    shown = ctx.jail.relative(target)
    count = DEFAULT_READ_LINES if limit is None else limit
    errors = os_errors(
        "read",
        shown,
        missing=f"no such file: {shown}",
        directory=f"{shown} is a directory; use list_dir to see what it holds",
    )
    with errors, ctx.jail.fs.open_file(target) as raw:
        if looks_binary(raw.read(SNIFF_BYTES)):
            size = raw.seek(0, io.SEEK_END)
            raise ToolError(
                f"{shown} looks like a binary file ({size} bytes); read_file reads text"
            )
        raw.seek(0)
        window = _read_window(raw, shown, offset, count, ctx)
    return window.render(shown, offset)


@dataclass
class _Window:
    """The lines `read_file` shows, and what it learnt of the rest of the file."""

    lines: list[str] = field(default_factory=list)
    total: int = 0  # lines seen (all of them when `complete`)
    complete: bool = True  # whether the file was read to its end
    byte_capped: bool = False  # whether MAX_READ_BYTES stopped the window early

    def render(self, shown: str, offset: int) -> str:
        if self.total == 0:
            return f"({shown} is empty)"
        if not self.lines:
            return f"({shown} has {self.total} lines; offset {offset} is past the end)"
        last = offset + len(self.lines)
        out = list(self.lines)
        if self.byte_capped:
            out.append(
                f"[lines {offset + 1}-{last}: stopped at {MAX_READ_BYTES} bytes of output; "
                f"pass offset={last} to read on]"
            )
        elif not self.complete:
            out.append(
                f"[lines {offset + 1}-{last} of more than {self.total}; "
                f"pass offset={last} to read on]"
            )
        elif last < self.total:
            out.append(
                f"[lines {offset + 1}-{last} of {self.total}; pass offset={last} to read on]"
            )
        return "\n".join(out)


def _read_window(raw: BinaryIO, shown: str, offset: int, count: int, ctx: ExecContext) -> _Window:
    """Lines `offset+1 .. offset+count` of `raw`, each cut at `MAX_LINE_BYTES` as it is
    read, the whole at `MAX_READ_BYTES`; after the window, lines are counted (to say "of
    N") for at most `MAX_COUNT_BYTES` more, so a sparse file is never read to its end."""
    window = _Window()
    used = 0
    counted = 0
    start = 0  # the file offset of the current line, to word a decoding error
    try:
        for number, (data, cut) in enumerate(bounded_lines(raw), start=1):
            line_start, start = start, raw.tell()
            window.total = number
            if number % 4096 == 0:
                ctx.token.check()  # a huge file must not outlive a cancel
            if number <= offset:
                continue
            if number > offset + count or window.byte_capped:
                counted += len(data)
                if counted > MAX_COUNT_BYTES:
                    window.complete = False
                    break
                continue
            text = _strip_newline(decode_line(data, cut))
            if cut or len(text) > MAX_LINE_CHARS:
                text = text[:MAX_LINE_CHARS] + f" [... line cut at {MAX_LINE_CHARS} chars]"
            shown_line = f"{number:>6}\t{text}"
            used += len(shown_line) + 1
            if used > MAX_READ_BYTES and window.lines:
                window.byte_capped = True
                continue
            window.lines.append(shown_line)
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{shown} is not UTF-8 text (byte {line_start + exc.start}: {exc.reason}); "
            "read_file reads UTF-8 text only"
        ) from exc
    return window


@tool(
    plan_scratchpad=True,
    risk=RiskClass.FILE_MUTATION,
    denial_remedy="Describe the change you would make (the path and the new content) "
    "instead of writing it.",
)
def write_file(path: str, content: str, *, ctx: ExecContext) -> str:
    """Write a UTF-8 text file of the workspace, replacing it if it exists; missing parent
    directories are created. To change part of an existing file, prefer edit_file.

    Args:
        path: The file, relative to the workspace root.
        content: The whole new content of the file.
    """
    target = ctx.jail.resolve(path)
    shown = ctx.jail.relative(target)
    ctx.require_writable(target)
    data = encode_content(content)
    is_dir = f"{shown} is a directory; give the path of a file"
    with os_errors("write", shown, directory=is_dir):
        before = ctx.jail.fs.stat(target)
    if before is not None and stat.S_ISDIR(before.st_mode):
        raise ToolError(is_dir)
    ctx.snapshot_before_write([target])
    ctx.token.check()  # cancelled while the snapshot was taken: the call must not write
    with os_errors("write", shown, directory=is_dir):
        existed = ctx.jail.fs.write_bytes(target, data, create_parents=True)
    return f"{'overwrote' if existed else 'created'} {shown} ({len(data)} bytes)"


def _occurrences(text: str, old: str) -> list[int]:
    """Where `old` starts in `text`, overlapping matches included (`str.count` skips
    them, and then "exactly once" would be a lie for `aa` in `aaa`)."""
    found: list[int] = []
    start = text.find(old)
    while start != -1:
        found.append(start)
        start = text.find(old, start + 1)
    return found


@tool(
    plan_scratchpad=True,
    risk=RiskClass.FILE_MUTATION,
    denial_remedy="Describe the edit you would make (the path, the old and the new text) "
    "instead of making it.",
)
def edit_file(path: str, old: str, new: str, *, ctx: ExecContext) -> str:
    """Replace one exact piece of text in a file of the workspace. `old` must occur in the
    file exactly once, whitespace included (copy it from read_file's output without the
    line numbers); if it occurs zero or several times nothing changes and the error says
    how many times it matched, so add surrounding lines to make it unique.

    Overlapping occurrences count: `aa` occurs twice in `aaa`.

    Args:
        path: The file, relative to the workspace root.
        old: The exact text to replace; it must occur exactly once.
        new: The text to put in its place.
    """
    target = ctx.jail.resolve(path)
    shown = ctx.jail.relative(target)
    ctx.require_writable(target)
    errors = os_errors(
        "edit",
        shown,
        missing=f"no such file: {shown}",
        directory=f"{shown} is a directory; edit_file edits a file",
    )
    with errors, ctx.jail.fs.open_file(target) as file:
        data = read_for_edit(file, shown, "edit_file")
    if not old:
        raise ToolError("old is empty; give the exact text to replace (use write_file to create)")
    if old == new:
        raise ToolError("old and new are the same; there is nothing to change")
    text = decode_text(data, shown, "edit_file")
    found = _occurrences(text, old)
    if len(found) != 1:
        hint = (
            "read the file and copy the text exactly, whitespace and line endings included"
            if not found
            else "include more of the surrounding text so it matches exactly once"
        )
        raise ToolError(
            f"old matches {len(found)} times in {shown}, it must match exactly once; {hint}"
        )
    start = found[0]
    updated = encode_content(text[:start] + new + text[start + len(old) :])
    ctx.snapshot_before_write([target])
    ctx.token.check()  # cancelled while the snapshot was taken: the call must not write
    with os_errors("edit", shown):
        ctx.jail.fs.write_bytes(target, updated)
    line = text.count("\n", 0, start) + 1
    return f"edited {shown} at line {line}"


@tool(read_only=True, capabilities=Capability.PRIVATE_DATA)
def list_dir(path: str = ".", *, ctx: ExecContext) -> str:
    """List a directory of the workspace, one entry per line, sorted by name; directories
    end with `/` and symlinks show their target as `name -> target`.

    Args:
        path: The directory, relative to the workspace root (default: the root).
    """
    target = ctx.jail.resolve(path)
    shown = ctx.jail.relative(target)
    with os_errors("list", shown):
        st = ctx.jail.fs.stat(target)
        if st is None:
            raise ToolError(f"no such directory: {shown}")
        if not stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{shown} is a file, not a directory; use read_file to read it")
        entries = ctx.jail.fs.listdir(target)
    # tiller's own files are not the project's (see `_hidden`).
    parent = () if shown == "." else tuple(shown.split("/"))
    entries = [entry for entry in entries if not hidden_entry(parent, entry.name)]
    lines: list[str] = []
    for entry in entries[:MAX_DIR_ENTRIES]:
        name = display_name(entry.name)
        if entry.kind == "symlink":
            lines.append(f"{name} -> {display_name(entry.target or '')}")
        elif entry.kind == "dir":
            lines.append(f"{name}/")
        else:
            lines.append(name)
    if not lines:
        return f"({shown} is empty)"
    if len(entries) > MAX_DIR_ENTRIES:
        lines.append(f"[... and {len(entries) - MAX_DIR_ENTRIES} more entries]")
    return "\n".join(lines)
