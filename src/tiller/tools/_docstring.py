"""Reading a tool's description and parameter docs from its docstring.

A tool's docstring is written once and read twice: by developers, and by the model, which
gets the first paragraph as the tool's description and each parameter's entry in the
`Args:` section as that property's description in the JSON Schema. Google style (`Args:`,
`Arguments:`, `Parameters:`) and NumPy style (`Parameters` over a dashed underline) are
understood; anything else is left alone rather than guessed at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

__all__ = ["Docstring", "parse_docstring"]

_GOOGLE_HEADERS: Final = frozenset({"args:", "arguments:", "parameters:", "params:"})
_GOOGLE_ENTRY: Final = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(?:\([^)]*\))?\s*:(?P<text>.*)$")
_NUMPY_ENTRY: Final = re.compile(r"^(?P<name>\w+)\s*(?::.*)?$")
_UNDERLINE: Final = re.compile(r"^\s*-{3,}\s*$")


@dataclass(frozen=True, slots=True)
class Docstring:
    """The parts of a docstring a tool uses."""

    description: str = ""
    params: dict[str, str] = field(default_factory=dict)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _join(lines: list[str]) -> str:
    return " ".join(part.strip() for part in lines if part.strip())


def parse_docstring(doc: str | None) -> Docstring:
    """Split a cleaned docstring (`inspect.getdoc`) into its first paragraph and the
    descriptions of its documented parameters."""
    if not doc:
        return Docstring()
    lines = doc.expandtabs().splitlines()
    first: list[str] = []
    for index, line in enumerate(lines):
        if not line.strip():
            if first:
                break
            continue
        if _is_section_start(lines, index):
            break
        first.append(line)
    return Docstring(description=_join(first), params=_google_params(lines) or _numpy_params(lines))


def _is_section_start(lines: list[str], index: int) -> bool:
    if lines[index].strip().lower() in _GOOGLE_HEADERS:
        return True
    return index + 1 < len(lines) and bool(_UNDERLINE.match(lines[index + 1]))


def _google_params(lines: list[str]) -> dict[str, str]:
    for index, line in enumerate(lines):
        if line.strip().lower() in _GOOGLE_HEADERS:
            start, header_indent = index, _indent(line)
            break
    else:
        return {}
    body: list[str] = []
    for line in lines[start + 1 :]:
        if line.strip() and _indent(line) <= header_indent:
            break  # the next section
        body.append(line)
    entry_indent = min((_indent(b) for b in body if b.strip()), default=0)
    params: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in body:
        if not line.strip():
            continue
        if _indent(line) == entry_indent:
            match = _GOOGLE_ENTRY.match(line.strip())
            if match is None:
                current = None
                continue
            current = params.setdefault(match["name"], [])
            current.append(match["text"])
        elif current is not None:
            current.append(line)
    return {name: _join(text) for name, text in params.items() if _join(text)}


def _numpy_params(lines: list[str]) -> dict[str, str]:
    for start, line in enumerate(lines[:-1]):
        if line.strip().lower() == "parameters" and _UNDERLINE.match(lines[start + 1]):
            header_indent = _indent(line)
            break
    else:
        return {}
    params: dict[str, list[str]] = {}
    current: list[str] | None = None
    body = lines[start + 2 :]
    for index, line in enumerate(body):
        if not line.strip():
            continue
        if _indent(line) <= header_indent:
            if index + 1 < len(body) and _UNDERLINE.match(body[index + 1]):
                break  # the next section
            match = _NUMPY_ENTRY.match(line.strip())
            current = params.setdefault(match["name"], []) if match else None
        elif current is not None:
            current.append(line)
    return {name: _join(text) for name, text in params.items() if _join(text)}
