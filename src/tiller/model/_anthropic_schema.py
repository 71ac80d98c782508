"""What Anthropic's native structured output takes: which models, and which schemas.

The Messages API constrains the answer to a JSON Schema with `output_config: {format:
{type: "json_schema", schema}}` (generally available, no beta header; the older top-level
`output_format` with the `structured-outputs-2025-11-13` beta header is deprecated and not
sent). Its grammar is made from the schema, so it takes a subset of JSON Schema (Anthropic's
"Structured outputs" guide, "JSON Schema limitations"):

- every object closed, `additionalProperties: false` (properties may still be optional);
- no recursive schema, no external `$ref`, no `allOf` with a `$ref`, enums of plain values;
- no numeric limits (`minimum`, `maximum`, `multipleOf`, ...), no string lengths, no array
  limits but `minItems` 0 or 1; string `format`s from a short list; simple `pattern`s.

`native_json_schema` makes that form: objects closed, and the limits the grammar cannot
hold left out (as Anthropic's own SDKs do). tiller validates every answer against the
output type itself, so a limit left out is still enforced, by asking again. What has no
such form (a recursive type, a free-form map, a tuple, `not`...) is named by
`native_schema_problem`: the agent then falls back to the forced output tool (`auto`) or
refuses (`native`), before any request.

The models: Claude Sonnet 4.5, Opus 4.5, Haiku 4.5 and later (`claude-{family}-4-5`,
`-4-6`, ...; Bedrock and Vertex names contain the same). Older ones (Claude 3.x, Sonnet 4,
Opus 4 and 4.1) answer `output_config` with a 400, so they get the forced tool.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["native_json_schema", "native_schema_problem", "supports_native_output"]

#: `claude-sonnet-4-5`, `claude-opus-4-6-20260101`: a family, then major and minor (a
#: minor is one or two digits: `claude-opus-4-20250514` is 4.0 with a date).
_VERSIONED = re.compile(r"claude-(?:opus|sonnet|haiku)-(\d{1,2})(?:-(\d{1,2}))?(?![0-9])")
#: The first version with `output_config.format`.
_FIRST_NATIVE = (4, 5)

#: Keywords the grammar cannot hold; tiller's own validation enforces them.
_LEFT_TO_VALIDATION = frozenset(
    {
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "discriminator",  # its union goes as `anyOf`: the tag still tells the variants apart
    }
)
#: Keywords with no form Anthropic takes, by what they are.
_NO_FORM = {
    "not": "`not`",
    "if": "`if`/`then`/`else`",
    "then": "`if`/`then`/`else`",
    "else": "`if`/`then`/`else`",
    "patternProperties": "`patternProperties`",
    "propertyNames": "`propertyNames`",
    "dependentSchemas": "`dependentSchemas`",
    "dependentRequired": "`dependentRequired`",
    "unevaluatedProperties": "`unevaluatedProperties`",
    "unevaluatedItems": "`unevaluatedItems`",
    "contains": "`contains`",
    "prefixItems": "a tuple (`prefixItems`)",
}
_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"}
)
#: Regex features the grammar does not take: lookaround, word boundaries, backreferences.
_HARD_PATTERN = re.compile(r"\(\?<?[=!]|\\[bB]|\\[1-9]")
#: Keywords whose values are maps of names to schemas.
_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions"})


def supports_native_output(model: str) -> bool:
    """Whether the Claude model named `model` takes `output_config.format` (see the
    module docstring); False for a name that says no version (a proxy's own)."""
    found = _VERSIONED.search(model)
    if found is None:
        return False
    major, minor = int(found.group(1)), int(found.group(2) or 0)
    return (major, minor) >= _FIRST_NATIVE


def native_schema_problem(schema: dict[str, Any]) -> str | None:
    """Why `schema` has no form Anthropic's grammar takes (`"a recursive type"`), or
    None when it has one (`native_json_schema`)."""
    problems: list[str] = []
    _convert(schema, problems)
    if _recursive(schema):
        problems.insert(0, "a recursive type")
    return problems[0] if problems else None


def native_json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` as Anthropic's grammar takes it: every object closed, the limits it
    cannot hold left out. The schema given is not changed. Meant for a schema without a
    `native_schema_problem` (one with a problem is converted as well as it can be, and
    the API says what it refuses)."""
    converted = _convert(schema, [])
    return converted if isinstance(converted, dict) else schema


def _convert(node: Any, problems: list[str]) -> Any:
    if isinstance(node, list):
        return [_convert(item, problems) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _convert(sub, problems) for name, sub in value.items()}
        elif _left_to_validation(key, value):
            continue
        elif key in _NO_FORM:
            problems.append(_NO_FORM[key])
        elif key == "oneOf":  # pydantic's tagged union: its variants exclude each other
            out["anyOf"] = _convert(value, problems)
        else:
            problem = _problem(key, value)
            if problem is not None:
                problems.append(problem)
            out[key] = _convert(value, problems)
    if node.get("type") == "object" or "properties" in node:
        if node.get("additionalProperties", False) is not False or "properties" not in node:
            problems.append("a free-form map")
        out["additionalProperties"] = False
    return out


def _left_to_validation(key: str, value: Any) -> bool:
    """Whether `key: value` is a limit the grammar cannot hold (it is not sent)."""
    if key in _LEFT_TO_VALIDATION:
        return True
    if key == "minItems":
        return value not in (0, 1)
    if key == "format":
        return value not in _FORMATS
    if key == "pattern":
        return not isinstance(value, str) or _HARD_PATTERN.search(value) is not None
    return False


def _problem(key: str, value: Any) -> str | None:
    """What `key: value` is that has no form Anthropic takes, if it is one."""
    if key == "$ref" and isinstance(value, str) and not value.startswith("#"):
        return "an external `$ref`"
    if key == "enum" and isinstance(value, list) and any(isinstance(v, dict | list) for v in value):
        return "an enum of objects or arrays"
    if key == "allOf" and isinstance(value, list) and any(_is_ref(v) for v in value):
        return "`allOf` with a `$ref`"
    return None


def _is_ref(node: Any) -> bool:
    return isinstance(node, dict) and "$ref" in node


def _recursive(schema: dict[str, Any]) -> bool:
    """Whether a definition of `schema` refers to itself, directly or not."""
    definitions = schema.get("$defs")
    if not isinstance(definitions, dict):
        return False
    refers = {name: _refs(definition) for name, definition in definitions.items()}

    def reaches(start: str) -> bool:
        seen: set[str] = set()
        todo = list(refers.get(start, ()))
        while todo:
            name = todo.pop()
            if name == start:
                return True
            if name not in seen:
                seen.add(name)
                todo.extend(refers.get(name, ()))
        return False

    return any(reaches(name) for name in refers)


def _refs(node: Any) -> set[str]:
    if isinstance(node, list):
        return set().union(*(_refs(item) for item in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found: set[str] = set()
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
            found.add(value.removeprefix("#/$defs/"))
        else:
            found |= _refs(value)
    return found
