"""The one line of a run's error that a table shows: the scorecard's case table
(`tiller eval show`) and the HTML report's runs table both use it, so they say the same.

A traceback's last line says what went wrong (`ValueError: x`); any other message's first
line does (the rest is detail). Blank lines are not lines; the line is cut to `limit`
characters with an ellipsis.
"""

from __future__ import annotations

from ..errors import UsageError

__all__ = ["error_line"]


def error_line(text: str, limit: int) -> str:
    """The line of `text` (an error or a traceback) that says what went wrong, at most
    `limit` characters (see the module docstring)."""
    if limit < 1:
        raise UsageError(f"error_line's limit is a positive number of characters, not {limit}")
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1] if text.lstrip().startswith("Traceback") else lines[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"
