"""JSON values as scorers compare them: a structured answer or a pydantic model as plain
JSON data, a text answer parsed (a fenced ```json block tolerated), and equality as JSON
means it (`true` is not `1`; `1` is `1.0`), whole or as a subset."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import regex
from pydantic import BaseModel

__all__ = [
    "JsonParseError",
    "json_data",
    "json_equal",
    "json_subset",
    "keys_listed",
    "parse_json_text",
    "short_json",
]

#: A Markdown code fence around the answer, with an optional language tag.
_FENCE: Final = regex.compile(r"```[A-Za-z0-9_-]*[ \t]*\n(.*?)\n?```", regex.DOTALL)


class JsonParseError(ValueError):
    """The text is not JSON (the message says where it stops being JSON)."""


def json_data(value: Any) -> Any:
    """`value` as plain JSON data: a pydantic model dumped, tuples as lists, mappings
    as dicts, the rest as it is."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(k): json_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_data(v) for v in value]
    return value


def parse_json_text(text: str) -> Any:
    """The JSON value `text` holds: the whole text, else the first fenced code block in
    it (models often wrap JSON in ```json ... ```); `JsonParseError` if neither parses."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        first_error = exc
    fenced = _FENCE.search(text)
    if fenced is not None:
        try:
            return json.loads(fenced.group(1))
        except json.JSONDecodeError as exc:
            raise JsonParseError(f"the fenced block is not JSON: {exc}") from exc
    raise JsonParseError(f"not JSON: {first_error}") from first_error


def json_equal(a: Any, b: Any) -> bool:
    """Whether `a` and `b` are the same JSON value (a bool is never a number)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def json_subset(expected: Any, actual: Any) -> bool:
    """Whether `actual` holds `expected`: every key of an expected object is in the
    actual one with a matching value (recursively; extra keys are fine); lists and
    scalars must be equal (`json_equal`), list items matched as subsets in order."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and json_subset(v, actual[k]) for k, v in expected.items()
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(json_subset(x, y) for x, y in zip(expected, actual, strict=True))
        )
    return json_equal(expected, actual)


def short_json(value: Any, limit: int = 120) -> str:
    """`value` as compact JSON for an explanation, cut when long."""
    text = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    return text if len(text) <= limit else f"{text[:limit]}..."


def keys_listed(keys: Sequence[str]) -> str:
    return ", ".join(repr(k) for k in keys)
