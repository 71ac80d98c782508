"""Helpers the file tools share: telling text from binary, decoding, and OS errors as tool
errors the model can act on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from .._tool import ToolError

__all__ = ["SNIFF_BYTES", "decode_text", "looks_binary", "os_errors"]

#: How much of a file is read to decide whether it is binary (as git and grep do).
SNIFF_BYTES: Final = 8192


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
