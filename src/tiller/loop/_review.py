"""Review policies: when a person must see a step before any of its tool calls runs.

`should_pause(step, message, registry)` looks at the model's message (its tool calls) and
returns a reason to pause, or None. A pause suspends the run *before* any call of the step
runs, so the person reviews the whole step; the checkpoint carries the pending calls and
the reason, and `tiller.loop.resume` continues it with the person's decisions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..conversation import AssistantMessage
from ..policy import PolicyEngine, RiskClass

__all__ = [
    "NeverReview",
    "PauseEveryStep",
    "PauseOnRisk",
    "PauseOnTools",
    "PauseOnWrites",
    "ReviewPolicy",
]


@runtime_checkable
class ReviewPolicy(Protocol):
    """When a run suspends for a person to review a step before its calls run
    (`RunOptions.review_policy`; the default, `NeverReview`, never does)."""

    def should_pause(self, step: int, message: AssistantMessage, registry: Any) -> str | None:
        """A reason to suspend before the step's calls run, or None to go on."""
        ...


@dataclass(frozen=True, slots=True)
class NeverReview:
    """The default: never pause."""

    def should_pause(self, step: int, message: AssistantMessage, registry: Any) -> str | None:
        return None


@dataclass(frozen=True, slots=True, init=False)
class PauseOnTools:
    """Pause when the step calls any of the named tools."""

    _names: frozenset[str]

    def __init__(self, names: Iterable[str]) -> None:
        object.__setattr__(self, "_names", frozenset(names))

    def should_pause(self, step: int, message: AssistantMessage, registry: Any) -> str | None:
        hit = sorted({c.name for c in message.tool_calls} & self._names)
        return f"the step calls {', '.join(hit)}" if hit else None


@dataclass(frozen=True, slots=True)
class PauseOnWrites:
    """Pause when the step calls a tool that is not read-only (or one the agent lacks)."""

    def should_pause(self, step: int, message: AssistantMessage, registry: Any) -> str | None:
        writes = sorted(
            {
                c.name
                for c in message.tool_calls
                if (tool := registry.get(c.name)) is None or not tool.read_only
            }
        )
        return f"the step changes things: {', '.join(writes)}" if writes else None


@dataclass(frozen=True, slots=True)
class PauseEveryStep:
    """Pause before every step that calls a tool."""

    def should_pause(self, step: int, message: AssistantMessage, registry: Any) -> str | None:
        return f"step {step} review" if message.tool_calls else None


@dataclass(frozen=True, slots=True, init=False)
class PauseOnRisk:
    """Pause when a call of the step is at least `minimum` risky, as the policy engine
    classifies it (`RiskClass`: the shell command itself for `execute_command`). A call
    to a tool the agent lacks counts as risky (it will be refused, but a person sees it)."""

    minimum: RiskClass
    _engine: PolicyEngine

    def __init__(self, minimum: RiskClass | str, engine: PolicyEngine | None = None) -> None:
        level = minimum if isinstance(minimum, RiskClass) else RiskClass.parse(minimum)
        object.__setattr__(self, "minimum", level)
        object.__setattr__(self, "_engine", engine if engine is not None else PolicyEngine())

    def should_pause(self, step: int, message: AssistantMessage, registry: Any) -> str | None:
        risky: list[str] = []
        for call in message.tool_calls:
            tool = registry.get(call.name)
            try:
                arguments = call.parsed_arguments()
            except ValueError:
                arguments = {}
            if tool is None or not isinstance(arguments, dict):
                risky.append(f"{call.name} (unknown)")
                continue
            risk = self._engine.assess(call.name, arguments, tool).risk
            if risk.at_least(self.minimum):
                risky.append(f"{call.name} ({risk.value})")
        if not risky:
            return None
        return f"the step is at least {self.minimum.value}: {', '.join(risky)}"
