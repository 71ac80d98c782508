"""Helpers the file tools share: telling text from binary, and OS errors as tool errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from .._tool import ToolError

__all__ = ["SNIFF_BYTES", "looks_binary", "os_errors"]

#: How much of a file is read to decide whether it is binary (as git and grep do).
SNIFF_BYTES: Final = 8192


def looks_binary(path: Path) -> bool:
    """Whether the file's first bytes contain a NUL: text files practically never do."""
    with path.open("rb") as file:
        return b"\x00" in file.read(SNIFF_BYTES)


@contextmanager
def os_errors(action: str, shown: str) -> Iterator[None]:
    """Turn an `OSError` into a `ToolError` the model can act on ("cannot read x: ...")."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ToolError(f"cannot {action} {shown}: {reason}") from exc
