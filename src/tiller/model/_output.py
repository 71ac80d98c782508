"""Structured output on the wire: what a request asks of the model's final answer.

An agent with an `output_type` asks for its final answer in one of three modes:

- `native`: the provider constrains the answer to the JSON Schema itself (OpenAI's
  `response_format: {type: json_schema}`, Anthropic's `output_config.format`);
- `tool`: the schema is the input of an output tool (`final_result`) the model is made to
  call (`tool_choice`); its arguments are the answer;
- `prompted`: the schema goes in the system prompt, and the answer is read from the text.

Whatever the mode, the loop validates the answer and asks again when it does not fit.
A model says which modes it supports, best first, with an `output_modes` attribute (the
provider adapters declare theirs; a model without one is asked in `prompted` mode).

OpenAI's strict mode (`strict: true`) accepts a subset of JSON Schema: every object closed
(`additionalProperties: false`) with every property required, and a few keywords left out.
`strict_json_schema` makes that form of a schema when it means the same thing, and says
None when it cannot (a field with a default, a free-form dict, a length limit).

Both OpenAI (`response_format`) and Anthropic (a tool's `input_schema`, `output_config`)
want the root to be an object schema. Pydantic gives a self-referencing type (`children:
list["Node"]`) a root that is only `{"$ref": "#/$defs/Node"}`; `object_root_schema` inlines
that definition at the root (keeping `$defs`, which the recursion still refers to). A type
whose root is no object at all (`list[int]`, `int`, a `RootModel`, a union) is shown inside
one, `{"result": ...}` (`wrap_in_object`), and the answer is read out of it.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "OUTPUT_MODES",
    "OUTPUT_TOOL_NAME",
    "OUTPUT_WRAPPER_KEY",
    "ForceTool",
    "object_root_schema",
    "OutputMode",
    "OutputSchema",
    "ToolChoice",
    "strict_json_schema",
    "wrap_in_object",
]

OutputMode = Literal["native", "tool", "prompted"]
#: Every mode, in the order a model that declares none would be asked for explicitly.
OUTPUT_MODES: tuple[OutputMode, ...] = ("native", "tool", "prompted")

#: The output tool's name in `tool` mode (an agent may not have a tool of its own by it).
OUTPUT_TOOL_NAME = "final_result"

#: The one property of the object a non-object answer is given in (`wrap_in_object`).
OUTPUT_WRAPPER_KEY = "result"


@dataclass(slots=True, frozen=True)
class ForceTool:
    """A `tool_choice` that makes the model call the tool named `name`."""

    name: str


#: `"auto"`: the model decides; `"required"`: it must call some tool; `ForceTool(name)`:
#: it must call that one. None leaves it to the provider (which means `"auto"`).
ToolChoice = Literal["auto", "required"] | ForceTool


@dataclass(slots=True, frozen=True)
class OutputSchema:
    """The structured answer a request asks for, and how (see the module docstring).

    `schema` is what the model is shown: the strict form when `strict` is true. `name` is
    the schema's name in the provider's alphabet (`[a-zA-Z0-9_-]`, at most 64)."""

    mode: OutputMode
    name: str
    schema: dict[str, Any]
    strict: bool = False
    description: str | None = None


_NOT_IN_NAME = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_NAME = 64

#: Keywords OpenAI's strict mode rejects (its Structured Outputs guide, "Supported schemas").
_NOT_STRICT = frozenset(
    {
        "allOf",
        "not",
        "oneOf",
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependentSchemas",
        "patternProperties",
        "unevaluatedProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "unevaluatedItems",
        "contains",
        "minContains",
        "maxContains",
        "uniqueItems",
        "discriminator",
    }
)
#: Keywords whose values are maps of names to schemas (the names are not keywords).
_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions"})


def schema_name(title: str) -> str:
    """`title` in the alphabet providers accept for a schema or tool name."""
    return (_NOT_IN_NAME.sub("_", title) or "output")[:_MAX_NAME]


def object_root_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with a root that is only a reference to one of its `$defs` replaced by
    that definition (`$defs` kept, for references inside it); any other schema as it is.
    The schema given is not changed."""
    reference = schema.get("$ref")
    definitions = schema.get("$defs")
    if not isinstance(reference, str) or not isinstance(definitions, dict):
        return schema
    name = reference.removeprefix("#/$defs/")
    definition = definitions.get(name)
    if name == reference or not isinstance(definition, dict):
        return schema  # a reference elsewhere: not ours to resolve
    root = {key: value for key, value in schema.items() if key != "$ref"}
    return {**root, **copy.deepcopy(definition)}


def wrap_in_object(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` (whose root is no object) as the one required property of an object,
    `OUTPUT_WRAPPER_KEY`: its `$defs`, `title` and `description` move to the new root, so
    references still resolve and the schema keeps its name. The schema given is not
    changed."""
    inner = {k: v for k, v in schema.items() if k not in _WRAPPER_KEYS}
    outer = {k: copy.deepcopy(v) for k, v in schema.items() if k in _WRAPPER_KEYS}
    return {
        **outer,
        "properties": {OUTPUT_WRAPPER_KEY: copy.deepcopy(inner)},
        "required": [OUTPUT_WRAPPER_KEY],
        "type": "object",
    }


#: What moves from a wrapped schema to its wrapper's root.
_WRAPPER_KEYS = frozenset({"$defs", "title", "description"})


def strict_json_schema(schema: dict[str, Any]) -> dict[str, Any] | None:
    """`schema` in OpenAI's strict form, its root an object (`object_root_schema`), or
    None when the strict form would mean something else (see the module docstring) or
    the root is no object. The schema given is not changed."""
    strict = copy.deepcopy(object_root_schema(schema))
    if strict.get("type") != "object":
        return None  # strict mode takes only an object at the root
    return strict if _make_strict(strict) else None


def _make_strict(node: Any) -> bool:
    if isinstance(node, list):
        return all(_make_strict(item) for item in node)
    if not isinstance(node, dict):
        return True
    if _NOT_STRICT.intersection(node):
        return False
    if node.get("type") == "object" or "properties" in node:
        extra = node.get("additionalProperties", False)
        if extra is not False:  # a free-form map (`dict[str, X]`) has no strict form
            return False
        properties = node.get("properties", {})
        if not properties or set(node.get("required", ())) != set(properties):
            return False  # an optional field (one with a default) would become required
        node["additionalProperties"] = False
    for key, value in node.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            if not all(_make_strict(sub) for sub in value.values()):
                return False
        elif isinstance(value, dict | list) and not _make_strict(value):
            return False
    return True
