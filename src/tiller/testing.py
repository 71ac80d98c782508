"""Helpers for testing agents and streams offline. Public API, like `trio.testing`.

`assert_valid_stream(events)` checks a stream two ways: every event, encoded, validates
against the `ag-ui-protocol` 1.0 models with no unknown fields, and the whole stream passes
`ag-ui-validate` with zero warnings. Both checkers come with tiller's `dev` extra.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from .errors import UsageError
from .events import Event, encode_json

__all__ = ["assert_valid_stream", "wire_events"]


def wire_events(events: Iterable[Event | dict[str, Any]]) -> list[dict[str, Any]]:
    """Events as the JSON objects a client receives (decoded from the real encoding)."""
    return [e if isinstance(e, dict) else orjson.loads(encode_json(e)) for e in events]


def assert_valid_stream(
    events: Iterable[Event | dict[str, Any]], *, features: list[str] | None = None
) -> list[dict[str, Any]]:
    """Fail with a readable message unless the stream is valid AG-UI 1.0; return it as JSON."""
    try:
        from ag_ui.core import Event as AgUiEvent
        from ag_ui_validate.pytest_plugin import assert_valid_agui
        from pydantic import TypeAdapter, ValidationError
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise UsageError(
            "assert_valid_stream needs the dev extra: pip install 'tiller[dev]'"
        ) from exc
    wire = wire_events(events)
    adapter: TypeAdapter[Any] = TypeAdapter(AgUiEvent)
    for index, obj in enumerate(wire):
        try:
            model = adapter.validate_python(obj)
        except ValidationError as exc:
            raise AssertionError(
                f"event {index} does not fit the AG-UI 1.0 model: {obj}\n{exc}"
            ) from exc
        if model.model_extra:
            raise AssertionError(
                f"event {index} has fields AG-UI does not know: {model.model_extra}"
            )
        if any(value is None for key, value in obj.items() if key not in ("snapshot", "value")):
            raise AssertionError(f"event {index} carries an explicit null: {obj}")
    assert_valid_agui(wire, features=features, max_warnings=0)
    return wire
