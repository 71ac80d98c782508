"""Brace expansion, as bash does it before a command runs: `a{b,c}d` is `abd acd`,
`{1..3}` is `1 2 3`, `r{m,} -rf /` runs `rm r -rf /`. The classifier expands words the
lexer marked (`Word.braces`) so a command cannot hide its name or its targets in braces;
the expansion is capped (64 words, 16 nested braces, 4 KiB words), which is enough to
judge what a command does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

__all__ = ["expand_braces"]

_MAX_EXPANSION: Final = 64
_MAX_BRACE_DEPTH: Final = 16
_MAX_BRACE_WORD: Final = 4096
_SEQUENCE: Final = re.compile(r"(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])(?:\.\.-?\d+)?")


def _closing_brace(text: str, start: int) -> int | None:
    depth = 0
    for index in range(start, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return index
    return None


def _top_level_split(inner: str) -> list[str]:
    parts, depth, last = [], 0, 0
    for index, char in enumerate(inner):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(inner[last:index])
            last = index + 1
    parts.append(inner[last:])
    return parts


def _sequence(inner: str) -> list[str] | None:
    match = _SEQUENCE.fullmatch(inner)
    if match is None:
        return None
    first, last = match.group(1), match.group(2)
    render: Callable[[int], str]
    if first.lstrip("-").isdigit() and last.lstrip("-").isdigit():
        low, high, render = int(first), int(last), str
    elif first.isalpha() and last.isalpha():
        low, high, render = ord(first), ord(last), chr
    else:
        return None
    step = 1 if high >= low else -1
    count = abs(high - low) + 1
    # A long sequence: its start and its end are enough to judge risk.
    shown = range(low, low + step * min(count, _MAX_EXPANSION - 1), step)
    values = [render(n) for n in shown]
    return values if count < _MAX_EXPANSION else [*values, render(high)]


def expand_braces(text: str, depth: int = 0) -> list[str]:
    """bash's brace expansion of a word (`a{b,c}d` is `abd acd`, `{1..3}` is `1 2 3`),
    at most 64 words and 16 nested expansions: enough to judge what a command does."""
    if depth > _MAX_BRACE_DEPTH or len(text) > _MAX_BRACE_WORD:
        return [text]
    for start, char in enumerate(text):
        if char != "{":
            continue
        end = _closing_brace(text, start)
        if end is None:
            break
        inner = text[start + 1 : end]
        options = _top_level_split(inner)
        if len(options) < 2:
            options = _sequence(inner) or []
        if not options:
            continue
        words: list[str] = []
        for option in options:
            for rest in expand_braces(option + text[end + 1 :], depth + 1):
                words.append(text[:start] + rest)
                if len(words) >= _MAX_EXPANSION:
                    return words
        return words
    return [text]
