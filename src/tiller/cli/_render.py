"""One readable line per AG-UI event, for the terminal."""

from __future__ import annotations

from typing import Any

import orjson
from rich.text import Text

from ..events import Event

__all__ = ["describe"]

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
    line.append(" ".join(parts))
    return line
