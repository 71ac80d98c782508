"""Helpers the file tools share: telling text from binary, reading lines with a byte cap,
the size cap on edits, decoding, and OS errors as tool errors the model can act on.

Memory is bounded in bytes as a file is read, never after: a sparse file is free to make
(`truncate -s 2G`) and may hold a "line" of two gigabytes of zeros, so no tool reads a
line or a file whole without a cap (issue 13, item 8)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO, Final

from .._tool import ToolError

__all__ = [
    "MAX_EDIT_BYTES",
    "MAX_LINE_BYTES",
    "SNIFF_BYTES",
    "FileTooLarge",
    "bounded_lines",
    "decode_line",
    "decode_text",
    "looks_binary",
    "os_errors",
    "read_for_edit",
]

#: How much of a file is read to decide whether it is binary (as git and grep do).
SNIFF_BYTES: Final = 8192


#: Bytes of one line a reading tool keeps; the rest of a longer line is read and dropped.
MAX_LINE_BYTES: Final = 64 * 1024
#: The largest file `edit_file` and `apply_patch` load (they hold it whole, twice, to
#: rewrite it); larger ones are refused before a byte is read.
MAX_EDIT_BYTES: Final = 16 * 1024 * 1024


def bounded_lines(file: BinaryIO, max_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[bytes, bool]]:
    """The lines of `file` (split on `\\n`, which each keeps), each at most `max_bytes`
    long, with whether it was cut: the rest of a longer line is read in `max_bytes`
    pieces and dropped, so memory stays bounded whatever the file holds."""
    while True:
        line = file.readline(max_bytes)
        if not line:
            return
        cut = False
        if len(line) == max_bytes and not line.endswith(b"\n"):
            while True:
                rest = file.readline(max_bytes)
                if not rest:
                    break
                cut = True
                if rest.endswith(b"\n"):
                    break
        yield line, cut


def decode_line(line: bytes, cut: bool, *, errors: str = "strict") -> str:
    """A line from `bounded_lines` as text; a cut line may end inside a UTF-8 sequence,
    and that partial character is dropped rather than reported as invalid."""
    try:
        return line.decode("utf-8", errors)
    except UnicodeDecodeError as exc:
        if cut and exc.start >= len(line) - 3 and exc.reason == "unexpected end of data":
            return line[: exc.start].decode("utf-8", errors)
        raise


class FileTooLarge(ToolError):
    """A file over `MAX_EDIT_BYTES` that an editing tool refused to load."""

    def __init__(self, shown: str, size: int, tool: str) -> None:
        super().__init__(
            f"{shown} is too large to edit ({size} bytes; {tool} edits files of at most "
            f"{MAX_EDIT_BYTES} bytes); change it with a shell command (sed, a script) "
            "or split it"
        )
        self.size = size


def read_for_edit(file: BinaryIO, shown: str, tool: str) -> bytes:
    """The whole of the open `file`, for `tool` to rewrite, or `FileTooLarge` before it
    is read if it is over `MAX_EDIT_BYTES` (a sparse file of any size is free to make).
    At most one byte over the cap is read, should the file grow meanwhile."""
    size = os.fstat(file.fileno()).st_size
    if size > MAX_EDIT_BYTES:
        raise FileTooLarge(shown, size, tool)
    data = file.read(MAX_EDIT_BYTES + 1)
    if len(data) > MAX_EDIT_BYTES:
        raise FileTooLarge(shown, os.fstat(file.fileno()).st_size, tool)
    return data


def looks_binary(head: bytes) -> bool:
    """Whether a file whose first bytes are `head` is binary: text files practically never
    hold a NUL in their first `SNIFF_BYTES` bytes."""
    return b"\x00" in head[:SNIFF_BYTES]


def decode_text(data: bytes, shown: str, tool: str) -> str:
    """`data` (the whole of file `shown`) as text for `tool`, which edits text: a binary
    or non-UTF-8 file is refused with a `ToolError` rather than silently corrupted."""
    if looks_binary(data):
        raise ToolError(f"{shown} looks like a binary file; {tool} edits text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{shown} is not UTF-8 text (byte {exc.start}: {exc.reason}); "
            f"{tool} edits UTF-8 text only"
        ) from exc


@contextmanager
def os_errors(
    action: str,
    shown: str,
    *,
    missing: str | None = None,
    directory: str | None = None,
) -> Iterator[None]:
    """Turn an `OSError` into a `ToolError` the model can act on: `missing` for a file
    that does not exist, `directory` for a directory where a file was expected (when
    given), else "cannot <action> <shown>: <reason>". The jail's refusals are not
    `OSError`s and pass through unchanged."""
    try:
        yield
    except OSError as exc:
        if missing is not None and isinstance(exc, FileNotFoundError):
            raise ToolError(missing) from exc
        if directory is not None and isinstance(exc, IsADirectoryError):
            raise ToolError(directory) from exc
        reason = exc.strerror or str(exc)
        raise ToolError(f"cannot {action} {shown}: {reason}") from exc
