"""Unified diffs: parse one (several files, creations, deletions) and apply hunks to text.

Pure functions over strings, no files: `apply_patch` (in `_patch`) does the jail, the
reads and the writes. Written here rather than taken from a library because the rules are
the tool's contract with the model:

- A hunk applies *exactly*: its context and removed lines must equal lines of the file
  (line endings aside: a CRLF file takes an LF patch). It may be found away from the line
  its header names (an offset: the file changed above it), nearest first, never before the
  previous hunk. There is no fuzz: a hunk whose context differs anywhere is refused, and
  the error says which hunk, where it was expected, and which line differs.
- The counts in a hunk header are checked against its body only loosely: the body is
  read up to the next header, because models miscount and the content is what matters.
- `--- /dev/null` creates a file, `+++ /dev/null` deletes one (every line must be
  removed); git's `diff --git` headers are understood, including `new file mode` /
  `deleted file mode` for empty files and `rename from` / `rename to`; `a/` and `b/`
  prefixes are stripped. Binary patches are refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final, Literal

from .._tool import ToolError

__all__ = [
    "AppliedHunk",
    "FilePatch",
    "Hunk",
    "HunkLine",
    "apply_hunks",
    "parse_patch",
    "split_lines",
]

_HUNK_HEADER: Final = re.compile(
    r"^@@ -(\d{1,9})(?:,(\d{1,9}))? \+(\d{1,9})(?:,(\d{1,9}))? @@ ?(.*)$"
)
_GIT_EXTENDED: Final = (
    "old mode ",
    "new mode ",
    "similarity index ",
    "dissimilarity index ",
    "index ",
    "copy from ",
    "copy to ",
)
_ESCAPES: Final = {
    "a": 7,
    "b": 8,
    "t": 9,
    "n": 10,
    "v": 11,
    "f": 12,
    "r": 13,
    '"': 34,
    "\\": 92,
}
#: How much of a line an error quotes.
_QUOTE_CHARS: Final = 80

Op = Literal[" ", "-", "+"]


@dataclass(frozen=True, slots=True)
class HunkLine:
    """One line of a hunk: `op` (`" "` context, `"-"` removed, `"+"` added), its text
    without a line ending, and whether a `\\ No newline at end of file` marker followed."""

    op: Op
    text: str
    no_newline: bool = False


@dataclass(frozen=True, slots=True)
class Hunk:
    """One `@@ -a,b +c,d @@` block: `number` is 1-based within its file's section, the
    starts are 1-based line numbers as written (`old_start` is a hint, see the module)."""

    number: int
    header: str
    old_start: int
    lines: tuple[HunkLine, ...]

    @property
    def old(self) -> list[str]:
        """The lines the file must hold where the hunk applies."""
        return [line.text for line in self.lines if line.op != "+"]

    @property
    def added(self) -> int:
        return sum(line.op == "+" for line in self.lines)

    @property
    def removed(self) -> int:
        return sum(line.op == "-" for line in self.lines)


@dataclass(frozen=True, slots=True)
class FilePatch:
    """What a patch does to one file. `old_path` `None` creates `new_path`; `new_path`
    `None` deletes `old_path`; two different paths rename (and maybe change) it. Paths
    are as written in the patch, `a/`/`b/` prefixes stripped. `line` is where the section
    starts in the patch (1-based), for messages."""

    old_path: str | None
    new_path: str | None
    hunks: tuple[Hunk, ...]
    line: int

    @property
    def path(self) -> str:
        """The path to name this section by: the new one, or the deleted one."""
        name = self.new_path if self.new_path is not None else self.old_path
        assert name is not None  # the parser never makes a section without a path
        return name


@dataclass(frozen=True, slots=True)
class AppliedHunk:
    """Where a hunk went: the 1-based line in the original file, and the offset from the
    line its header named (0 when it applied where the header said)."""

    number: int
    line: int
    offset: int


def _quote(text: str) -> str:
    return repr(text if len(text) <= _QUOTE_CHARS else text[:_QUOTE_CHARS] + "...")


def _malformed(line: int, what: str) -> ToolError:
    return ToolError(f"the patch is malformed at line {line}: {what}")


# ── parsing ────────────────────────────────────────────────────────────────────────


def _unquote(text: str, line: int) -> str:
    """A C-style quoted path as git writes names with special characters (`"a/x\\ty"`,
    octal escapes for UTF-8 bytes)."""
    out = bytearray()
    index = 1
    while index < len(text):
        char = text[index]
        if char == '"':
            try:
                return out.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _malformed(line, f"the quoted path {text!r} is not UTF-8") from exc
        if char == "\\" and index + 1 < len(text):
            following = text[index + 1]
            octal = text[index + 1 : index + 4]
            if len(octal) == 3 and all(c in "01234567" for c in octal):
                out.append(int(octal, 8) & 0xFF)
                index += 4
                continue
            if following in _ESCAPES:
                out.append(_ESCAPES[following])
                index += 2
                continue
        out.extend(char.encode("utf-8"))
        index += 1
    raise _malformed(line, f"the quoted path {text!r} has no closing quote")


def _header_path(text: str, line: int) -> str | None:
    """The path of a `---`/`+++` line (after the marker): unquoted, a tab-separated
    timestamp dropped; `None` for `/dev/null`."""
    text = text.rstrip("\r")
    path = _unquote(text, line) if text.startswith('"') else text.split("\t", 1)[0].rstrip()
    if not path:
        raise _malformed(line, "a file header without a path")
    return None if path == "/dev/null" else path


def _strip_prefixes(old: str | None, new: str | None) -> tuple[str | None, str | None]:
    """Drop git's `a/` and `b/` prefixes, when both sides carry theirs."""
    if (old is None or old.startswith("a/")) and (new is None or new.startswith("b/")):
        return (None if old is None else old[2:]), (None if new is None else new[2:])
    return old, new


def _is_file_header(lines: list[str], index: int) -> bool:
    return (
        lines[index].startswith("--- ")
        and index + 1 < len(lines)
        and lines[index + 1].startswith("+++ ")
    )


def _ends_hunk(lines: list[str], index: int) -> bool:
    """Whether line `index` cannot belong to a hunk body: a header of any kind, or text
    that is not a hunk line at all (prose after the patch)."""
    line = lines[index]
    if line.startswith(("@@", "diff --git ")) or _is_file_header(lines, index):
        return True
    return line != "" and line[0] not in " -+\\"


def _parse_hunk(lines: list[str], index: int, number: int, path: str) -> tuple[Hunk, int]:
    """The hunk whose header is line `index`, and the index after it."""
    header = lines[index].rstrip("\r")
    match = _HUNK_HEADER.match(header)
    if match is None:
        raise _malformed(
            index + 1,
            f"{_quote(header)} is not a hunk header; expected '@@ -start,count +start,count @@'",
        )
    old_count = 1 if match.group(2) is None else int(match.group(2))
    new_count = 1 if match.group(4) is None else int(match.group(4))
    body: list[HunkLine] = []
    blank_tail = 0  # trailing body lines that came from blank patch lines
    index += 1
    while index < len(lines) and not _ends_hunk(lines, index):
        raw = lines[index].rstrip("\r")
        index += 1
        if raw.startswith("\\"):
            if body:
                last = body[-1]
                body[-1] = HunkLine(last.op, last.text, no_newline=True)
            continue
        op: Op = " " if raw == "" else raw[0]  # type: ignore[assignment]
        body.append(HunkLine(op, raw[1:]))
        blank_tail = blank_tail + 1 if raw == "" else 0
    # Blank lines at the end of a hunk are context only as far as its header counts them;
    # beyond that they are the blank lines between a patch and whatever follows it.
    while blank_tail and (
        sum(line.op != "+" for line in body) > old_count
        or sum(line.op != "-" for line in body) > new_count
    ):
        body.pop()
        blank_tail -= 1
    if not any(line.op != " " for line in body):
        raise ToolError(
            f"hunk {number} of {path} ({header}) changes nothing: it has no '-' or '+' "
            "lines (a hunk line starts with ' ', '-' or '+')"
        )
    return Hunk(number, header, int(match.group(1)), tuple(body)), index


@dataclass
class _GitHeader:
    """What a `diff --git` block said before its `---`/`+++` lines (if it has any)."""

    line: int
    paths: tuple[str, str] | None
    new_file: bool = False
    deleted_file: bool = False
    rename_from: str | None = None
    rename_to: str | None = None
    extended: list[str] = field(default_factory=list)

    def section(self) -> FilePatch | None:
        """The section of a block with no `---`/`+++` lines: an empty file created or
        deleted, or a pure rename; `None` for a mode change (nothing to do)."""
        if self.rename_from is not None and self.rename_to is not None:
            return FilePatch(self.rename_from, self.rename_to, (), self.line)
        if self.new_file or self.deleted_file:
            if self.paths is None:
                raise _malformed(
                    self.line, "cannot read the paths of this 'diff --git' line; quote them"
                )
            old, new = self.paths
            return FilePatch(
                None if self.new_file else old, None if self.deleted_file else new, (), self.line
            )
        return None


def _git_paths(rest: str, line: int) -> tuple[str, str] | None:
    """The two paths of `diff --git a/x b/y`, when they can be told apart."""
    rest = rest.rstrip("\r")
    if rest.startswith('"'):
        end = rest.find('" ', 1)
        while end != -1 and rest[end - 1] == "\\":
            end = rest.find('" ', end + 1)
        if end == -1:
            return None
        first, second = rest[: end + 1], rest[end + 2 :]
        old = _unquote(first, line)
        new = _unquote(second, line) if second.startswith('"') else second
    else:
        half = (len(rest) - 1) // 2
        old, new = rest[:half], rest[half + 1 :]
        if rest[half : half + 1] != " " or old[2:] != new[2:]:
            return None
    stripped_old, stripped_new = _strip_prefixes(old, new)
    assert stripped_old is not None and stripped_new is not None
    return stripped_old, stripped_new


def _git_extended(git: _GitHeader, line: str, number: int) -> bool:
    """Read `line` (line `number`) into the git header if it is one of its extended
    lines (modes, renames, index...); False if it is not one."""
    if line.startswith(("new file mode ", "deleted file mode ")):
        git.new_file = git.new_file or line.startswith("new")
        git.deleted_file = git.deleted_file or line.startswith("deleted")
        return True
    if line.startswith(("rename from ", "rename to ")):
        renamed = line.split(" ", 2)[2]
        if renamed.startswith('"'):
            renamed = _unquote(renamed, number)
        if line.startswith("rename from "):
            git.rename_from = renamed
        else:
            git.rename_to = renamed
        return True
    return line.startswith(_GIT_EXTENDED)


def _file_section(lines: list[str], index: int, git: _GitHeader | None) -> tuple[FilePatch, int]:
    """The section whose `--- path` / `+++ path` header is at `index`, and the index just
    past its hunks."""
    line = lines[index].rstrip("\r")
    start = index + 1
    old, new = _strip_prefixes(
        _header_path(line[4:], index + 1), _header_path(lines[index + 1][4:], index + 2)
    )
    if old is None and new is None:
        raise _malformed(start, "both sides of the file header are /dev/null")
    name = new if new is not None else old
    assert name is not None  # not both /dev/null, checked above
    if git is not None and git.rename_from is not None and old is not None:
        old = git.rename_from  # the rename lines are unambiguous; prefer them
    index += 2
    hunks: list[Hunk] = []
    while index < len(lines):
        if lines[index].startswith("@@"):
            hunk, index = _parse_hunk(lines, index, len(hunks) + 1, name)
            hunks.append(hunk)
        elif lines[index].strip() == "" and _next_nonblank(lines, index).startswith("@@"):
            index += 1  # blank lines between two hunks
        else:
            break
    if not hunks:
        raise _malformed(start, f"the file header for {name} is not followed by any '@@' hunk")
    return FilePatch(old, new, tuple(hunks), start), index


def parse_patch(patch: str) -> list[FilePatch]:
    """The sections of a unified diff, in order. Raises `ToolError` with the line at
    fault for anything it cannot read; text around the diff (a commit message, prose) is
    ignored."""
    lines = patch.split("\n")
    sections: list[FilePatch] = []
    git: _GitHeader | None = None
    index = 0

    def flush() -> None:
        if git is not None:
            section = git.section()
            if section is not None:
                sections.append(section)

    while index < len(lines):
        line = lines[index].rstrip("\r")
        if line.startswith("diff --git "):
            flush()
            git = _GitHeader(index + 1, _git_paths(line[len("diff --git ") :], index + 1))
            index += 1
            continue
        if line.startswith(("Binary files ", "GIT binary patch")):
            raise _malformed(index + 1, "binary patches are not supported; patch text files")
        if git is not None and _git_extended(git, line, index + 1):
            index += 1
            continue
        if _is_file_header(lines, index):
            section, index = _file_section(lines, index, git)
            sections.append(section)
            git = None
            continue
        if line.startswith("@@"):
            raise _malformed(
                index + 1, "a hunk with no '--- path' / '+++ path' file header before it"
            )
        index += 1  # text around the diff
    flush()
    if not sections:
        raise ToolError(
            "the patch holds no file changes; give a unified diff: '--- a/path', "
            "'+++ b/path', then '@@ -start,count +start,count @@' hunks"
        )
    return sections


def _next_nonblank(lines: list[str], index: int) -> str:
    for later in lines[index:]:
        if later.strip():
            return later
    return ""


# ── applying ───────────────────────────────────────────────────────────────────────


def split_lines(text: str) -> list[str]:
    """`text` as lines, each with its `\\n` (the last may lack one). Only `\\n` ends a
    line: `str.splitlines` would also split at form feeds and U+2028, which diff does
    not."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _key(line: str) -> str:
    return line.removesuffix("\n").removesuffix("\r")


def _matches_at(keys: list[str], old: list[str], at: int) -> bool:
    return keys[at : at + len(old)] == old


def _explain_miss(hunk: Hunk, path: str, keys: list[str], expected: int, floor: int) -> str:
    """Why a hunk did not apply, as specifically as we can say."""
    old = hunk.old
    where = f"hunk {hunk.number} of {path} ({hunk.header})"
    first = old[0]
    if first not in keys:
        detail = f"its first context or removed line {_quote(first)} occurs nowhere in the file"
    elif 0 <= expected < len(keys):
        detail = f"its lines are not in the file at line {expected + 1} (where its header "
        detail += "puts it) nor anywhere else"
        for offset, want in enumerate(old):
            at = expected + offset
            if at >= len(keys):
                detail += f"; the file ends at line {len(keys)}, the hunk needs {len(old)} lines"
                break
            if keys[at] != want:
                detail += (
                    f"; line {at + 1} of the file is {_quote(keys[at])} where the hunk "
                    f"expects {_quote(want)}"
                )
                break
    else:
        detail = f"its lines are not in the file (which has {len(keys)} lines)"
    if floor > 0 and any(_matches_at(keys, old, at) for at in range(0, floor)):
        detail += f"; they only occur above line {floor + 1}, before the previous hunk"
    return (
        f"{where} does not apply: {detail}. Nothing was changed. Read the file again and "
        "rebuild the hunk from its current content (context lines must match exactly)."
    )


def apply_hunks(text: str, section: FilePatch, path: str) -> tuple[str, list[AppliedHunk]]:
    """`text` with `section`'s hunks applied, and where each went; `ToolError` naming
    the first hunk that does not apply. `path` names the file in messages."""
    lines = split_lines(text)
    keys = [_key(line) for line in lines]
    eol = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    out: list[str] = []
    placed: list[AppliedHunk] = []
    cursor = 0  # lines of the original consumed so far
    drift = 0  # the offset the previous hunk applied at, expected to carry on
    for hunk in section.hunks:
        old = hunk.old
        # `-N,0` means "after line N": the insertion point is index N, not N - 1.
        base = hunk.old_start if not old else max(hunk.old_start - 1, 0)
        expected = base + drift
        if not old:
            at = min(max(expected, cursor), len(lines))
        else:
            at = -1
            last = len(lines) - len(old)
            # Search outward from where the header says, clamped to the file: a header
            # line number far past the end must not make the search count up to it.
            start = min(max(expected, cursor), max(last, cursor))
            for distance in range(0, max(len(lines), 1) + 1):
                for candidate in (start - distance, start + distance):
                    if cursor <= candidate <= last and _matches_at(keys, old, candidate):
                        at = candidate
                        break
                if at != -1 or (start - distance < cursor and start + distance > last):
                    break
            if at == -1:
                raise ToolError(_explain_miss(hunk, path, keys, expected, cursor))
        drift = at - base
        placed.append(AppliedHunk(hunk.number, at + 1, at - base))
        out.extend(lines[cursor:at])
        source = at
        for line in hunk.lines:
            if line.op == " ":
                out.append(lines[source])
                source += 1
            elif line.op == "-":
                source += 1
            else:
                out.append(line.text.removesuffix("\r") + ("" if line.no_newline else eol))
        cursor = source
    out.extend(lines[cursor:])
    # A line that lost its place at the end of the file (context that had no newline,
    # followed now by added lines) gets one, so two lines never run together.
    for index in range(len(out) - 1):
        if not out[index].endswith("\n"):
            out[index] += eol
    return "".join(out), placed
