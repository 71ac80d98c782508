"""One readable line per AG-UI event, for the terminal; and the console commands print on."""

from __future__ import annotations

from typing import Any

import orjson
from rich.console import Console
from rich.text import Text

from ..events import Event
from ._safe import SafeConsole, printable

__all__ = ["describe", "terminal_console"]

_STYLE = {
    "RUN": "bold cyan",
    "STEP": "magenta",
    "TEXT": "green",
    "REASONING": "dim",
    "TOOL": "yellow",
    "STATE": "blue",
    "MESSAGES": "blue",
    "SUBAGENT": "bold magenta",
    "CUSTOM": "white",
}

# Fields shown for each event, beyond its type; long values are shortened.
_SKIP = {"type", "timestamp", "metadata", "rawEvent", "input"}


def _short(value: Any, limit: int = 90) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(event: Event) -> Text:
    """`TYPE  key=value …` with the event family's colour; deltas are shown quoted."""
    wire = event.to_wire()
    family = event.type.split("_", 1)[0]
    line = Text(f"{event.type:<26}", style=_STYLE.get(family, "white"))
    parts = []
    for key, value in wire.items():
        if key in _SKIP:
            continue
        shown = repr(value) if key == "delta" and isinstance(value, str) else _short(value)
        parts.append(f"{key}={shown}")
    line.append(printable(" ".join(parts)))
    return line


def terminal_console() -> Console:
    """The console a command prints a run on. Without a terminal (a pipe, a CI log) lines
    are never wrapped: rich would break them at 80 columns, mid-word, splitting the
    commands and ids printed for a person to copy (`tiller approve ap-…`); a log viewer
    wraps for itself. On a terminal, text wraps at its width, and the lines meant to be
    copied are printed with `soft_wrap=True` where they are made. It is a `SafeConsole`:
    a control character in what it prints is drawn, not obeyed."""
    console = SafeConsole(highlight=False)
    console.soft_wrap = not console.is_terminal
    return console
