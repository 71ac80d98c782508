"""Arguments a person gave a call (an edit at approval, a re-send from the outbox),
checked against the tool before anything is recorded or run."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidToolArguments, UsageError
from ..tools import FunctionTool

__all__ = ["check_arguments"]


def check_arguments(tool: Any, arguments: dict[str, Any]) -> None:
    """Check `arguments` against `tool`'s parameters before anything is recorded or run;
    `InvalidToolArguments` says what does not fit.

    A `@tool` function validates with its own signature (the model the registry runs it
    with); any other tool with its JSON Schema (`input_schema`)."""
    if isinstance(tool, FunctionTool):
        tool.validate(arguments)
        return
    schema = getattr(tool, "input_schema", None)
    if not schema:
        return
    import jsonschema  # type: ignore[import-untyped]  # installed with mcp

    try:
        jsonschema.validate(arguments, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(part) for part in exc.absolute_path)
        detail = f"{where}: {exc.message}" if where else exc.message
        raise InvalidToolArguments(str(tool.name), detail) from None
    except jsonschema.SchemaError as exc:
        raise UsageError(f"tool {tool.name!r} has an invalid input schema: {exc.message}") from None
