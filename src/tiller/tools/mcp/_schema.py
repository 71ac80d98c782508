"""Checking a call's arguments against an MCP tool's input schema, before sending them.

A model's malformed call should come back to the model at once, with a message it can
act on, not travel to a server that may half-act on it or answer with an opaque error.
MCP schemas are arbitrary JSON Schema (pydantic cannot validate those), so the check uses
`jsonschema`, which the MCP SDK already depends on (it validates structured results with
it). `$ref`s are resolved inside the schema only: nothing is fetched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ...errors import InvalidToolArguments
from .._tool import ToolError

__all__ = ["ArgumentsCheck", "InvalidSchema"]

#: How many problems one refusal lists, and how long each may be.
_MAX_PROBLEMS: Final = 5
_MAX_PROBLEM_CHARS: Final = 200


class InvalidSchema(Exception):
    """The server's input schema is not valid JSON Schema, or does not describe a JSON
    object; the tool is skipped (a provider would reject the whole request)."""


class ArgumentsCheck:
    """A compiled validator for one tool's input schema."""

    __slots__ = ("_tool", "_validator")

    def __init__(self, tool: str, schema: Mapping[str, Any]) -> None:
        """Compile `schema`; raises `InvalidSchema` saying what is wrong with it."""
        from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]
        from jsonschema.validators import (  # type: ignore[import-untyped]
            Draft202012Validator,
            validator_for,
        )

        self._tool = tool
        kind = schema.get("type", "object")
        if kind != "object" and not (isinstance(kind, list) and "object" in kind):
            raise InvalidSchema(f"its input schema describes {kind!r}, not an object")
        cls = validator_for(dict(schema), default=Draft202012Validator)
        try:
            cls.check_schema(dict(schema))
        except SchemaError as exc:
            raise InvalidSchema(
                f"its input schema is not valid JSON Schema: {exc.message}"
            ) from exc
        self._validator = cls(dict(schema))

    def check(self, args: Mapping[str, Any]) -> None:
        """Raise `InvalidToolArguments` listing what in `args` does not fit the schema
        (at most five problems, each with where it is), or `ToolError` if the schema
        refers to something it does not contain."""
        from referencing.exceptions import Unresolvable

        try:
            errors = list(self._validator.iter_errors(dict(args)))
        except Unresolvable as exc:
            raise ToolError(
                f"the input schema of {self._tool} refers to {exc!s}, which it does not "
                "contain, so its arguments cannot be checked; this tool cannot be used"
            ) from exc
        if not errors:
            return
        problems: list[str] = []
        for error in sorted(errors, key=_order):
            where = ".".join(str(part) for part in error.absolute_path) or "(the arguments)"
            message = str(error.message)
            if len(message) > _MAX_PROBLEM_CHARS:
                message = message[: _MAX_PROBLEM_CHARS - 1] + "…"
            problems.append(f"{where}: {message}")
        detail = "; ".join(problems[:_MAX_PROBLEMS])
        if len(problems) > _MAX_PROBLEMS:
            detail += f"; and {len(problems) - _MAX_PROBLEMS} more"
        raise InvalidToolArguments(self._tool, detail)


def _order(error: Any) -> tuple[list[str], str]:
    return [str(part) for part in error.absolute_path], str(error.message)
