"""The error a dataset that cannot be loaded raises: where it went wrong and what to do.

A dataset is written by hand, so the error points at the place to fix: the file and the
line of the row (a JSONL line, the line a YAML item starts on, the line a CSV record
starts on), or the position of a case built in Python.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError

__all__ = ["DatasetError"]


class DatasetError(UsageError):
    """A dataset file or a case list is malformed: a bad row, a duplicate id, an unknown
    key, a missing or unreadable file, an unsupported suffix. The message starts with
    where (`path:line:`) and says what is wrong and how to fix it; `source` and `line` carry
    the same place for code (`line` is 1-based, None when the error is about the whole
    source)."""

    def __init__(self, source: str | Path, message: str, *, line: int | None = None) -> None:
        where = f"{source}:{line}" if line is not None else f"{source}"
        super().__init__(f"{where}: {message}")
        self.source = str(source)
        self.line = line
        self.detail = message
