"""What `tiller approve | deny | approvals` and `tiller outbox` share: a person's edited
arguments (a JSON object, checked against the tool's schema before anything is recorded),
the exit protocol, and the table both `list` commands print.

Exit codes: 0 done; 1 the action ran but did not complete (the tool reported an error,
the resumed run stopped short, the person declined); 2 a refusal or a usage error (unknown
id, already decided, already sent, the run already resumed, bad arguments, bad store URL).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any

import typer

from ..errors import TillerError, UsageError
from ._safe import echo

__all__ = [
    "EXIT_NOT_COMPLETED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "age",
    "allow_cwd_imports",
    "finish",
    "parse_arguments",
    "print_table",
    "short_json",
    "timestamp",
]

EXIT_OK = 0
EXIT_NOT_COMPLETED = 1
EXIT_REFUSED = 2


def finish(work: Callable[[], Coroutine[Any, Any, int]]) -> None:
    """Run `work` and exit with its code. Every refusal and usage error (tiller's own
    errors) becomes one line on stderr and exit code 2, never a traceback."""
    try:
        code = asyncio.run(work())
    except TillerError as exc:
        echo(f"tiller: {exc}", err=True)
        code = EXIT_REFUSED
    raise typer.Exit(code)


def allow_cwd_imports() -> None:
    """Agent references (`mymodule:build`, recorded in a checkpoint or given with
    `--agent`) find modules in the current directory, as under `python -m`: the
    `tiller` script's own directory is on the path instead."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def parse_arguments(text: str, option: str = "--args") -> dict[str, Any]:
    """A person's arguments: a JSON object, or a `UsageError` saying what to write."""
    import orjson

    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UsageError(
            f'{option} is not JSON ({exc}); write a JSON object, e.g. \'{{"path": "a.txt"}}\''
        ) from None
    if not isinstance(parsed, dict):
        raise UsageError(
            f"{option} must be a JSON object (the tool's arguments by name), not "
            f"{_json_kind(parsed)}: {text}"
        )
    return parsed


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"


def short_json(value: Any, limit: int = 48) -> str:
    """`value` as compact JSON on one line, cut to `limit` characters."""
    import orjson

    text = orjson.dumps(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def age(seconds: float) -> str:
    """A duration the way a listing shows it: 42s, 5m, 3h, 2d."""
    seconds = max(0.0, seconds)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def timestamp(seconds: float) -> str:
    """A store time (seconds since the epoch) as local ISO time."""
    return datetime.fromtimestamp(seconds).isoformat(sep=" ", timespec="seconds")


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Columns padded to their widest cell, two spaces apart."""
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        echo("  ".join(cells).rstrip())
