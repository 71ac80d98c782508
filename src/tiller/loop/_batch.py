"""`Batch`: one dispatch's calls as the dispatcher carries them through the gate and the
run, and how a call's arguments are read (once, for the gate and the registry)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from ..conversation import ToolCall, ToolResult
from ..tools import Capability, Execution, OutputBudget, StepSignals, Tool

if TYPE_CHECKING:
    from ._steps import Dispatch

__all__ = ["Batch", "arguments_or_empty", "call_arguments"]


@dataclass(slots=True)
class Batch:
    """One dispatch: its calls, the interlock's view of them, and what became of each."""

    step: Dispatch
    calls: tuple[ToolCall, ...]
    budget: OutputBudget
    #: The signals the step's calls share, made when the first call's context is.
    make_signals: Callable[[], StepSignals]
    tools: list[Tool | None]
    #: Each call's capabilities, and as the batch's other calls see them.
    able: list[Capability]
    seen: list[Capability]
    #: Each call's arguments as the gate read them (a JSON object, or None), by call id:
    #: parsed once, for the gate and the registry.
    arguments: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    results: dict[str, ToolResult] = field(default_factory=dict)
    executed: dict[str, Execution] = field(default_factory=dict)
    allowed: list[tuple[ToolCall, Tool]] = field(default_factory=list)
    held: list[ToolCall] = field(default_factory=list)
    #: Calls left open for the client (they passed the gate, or an earlier run's did).
    for_client: list[ToolCall] = field(default_factory=list)
    signals: StepSignals | None = None

    def shared_signals(self) -> StepSignals:
        """The signals the step's calls share, made the first time a call asks."""
        signals = self.signals
        if signals is None:
            signals = self.signals = self.make_signals()
        return signals


def call_arguments(call: ToolCall) -> dict[str, Any] | None:
    """The call's arguments as a JSON object, or None (not JSON, or not an object: the
    registry answers the call with that error, running nothing)."""
    try:
        parsed = orjson.loads(call.arguments or "{}")
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def arguments_or_empty(call: ToolCall) -> dict[str, Any]:
    """The call's arguments as a JSON object, `{}` when they are none."""
    parsed = call_arguments(call)
    return parsed if parsed is not None else {}
