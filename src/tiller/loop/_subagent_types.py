"""Subagent types and limits: what a run's `agent` tool may start (`RunContext.subagents`).

A type says which of the agent's tools the child gets, the safety ceiling it works under,
the preamble of its system prompt, and optionally another model and its own timeout.
Two are built in: `general` (every tool of the agent but `agent` itself) and `explore`
(its read-only tools, ceiling `read_only`). A workspace adds or reshapes types in
`tiller.toml`; a table named like a built-in type changes only the keys it gives:

```toml
[subagents]
max_concurrent = 10          # children of one run at once (an 11th waits for a slot)
timeout = 1200               # seconds a child may run (default 20 minutes)

[subagents.reviewer]
description = "Reviews a change and lists the problems"
tools = ["read_file", "grep", "glob"]   # default: every tool of the agent but `agent`
read_only = true             # keep only read-only tools
safety_ceiling = "read_only" # the child's mode: the stricter of this and the parent's
preamble = "You review code. Report problems with file and line; change nothing."
model = "openai:gpt-4.1-mini"  # default: the parent's model
timeout = 300
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from ..errors import UsageError
from ..model import Model
from ..tools import SafetyMode

__all__ = [
    "DEFAULT_MAX_CONCURRENT",
    "DEFAULT_SUBAGENT_TIMEOUT",
    "SubagentConfig",
    "SubagentType",
]

#: Children of one run that may work at once; the next one waits for a slot.
DEFAULT_MAX_CONCURRENT: Final = 10
#: Seconds a child may run before it is cancelled (20 minutes).
DEFAULT_SUBAGENT_TIMEOUT: Final = 20 * 60.0

GENERAL_PREAMBLE: Final = (
    "You are a subagent: another agent gave you the task below and waits for your report. "
    "You cannot see its conversation and cannot ask it or the person anything, so work "
    "from the brief and use your tools to find what you need. When you are done, reply "
    "with a concise final report of what you found or did (with file paths where they "
    "matter); say plainly what you could not do. That reply is all the other agent sees."
)
EXPLORE_PREAMBLE: Final = (
    "You are an explore subagent: another agent gave you the question below and waits for "
    "your answer. You can only read: search the workspace, read files, and answer from "
    "what you found, with the file paths and names that support it. You cannot see the "
    "other agent's conversation and cannot ask anyone anything. Your final reply is all "
    "it sees: make it a concise, complete answer."
)

_TYPE_KEYS: Final = frozenset(
    {"description", "tools", "read_only", "safety_ceiling", "preamble", "model", "timeout"}
)
_LIMIT_KEYS: Final = frozenset({"max_concurrent", "timeout"})


@dataclass(frozen=True, slots=True)
class SubagentType:
    """One kind of subagent (see the module docstring).

    - `tools`: the agent's tools the child gets, by name (None: all of them); `agent`
      itself is never among them.
    - `read_only`: keep only the read-only ones.
    - `safety_ceiling`: the most the child may do; its mode is the stricter of this and
      the parent's live mode when it starts.
    - `preamble`: what the child's system prompt starts with (the parent's system prompt
      follows it).
    - `model`: another model (a `Model`, or a string such as `"ollama:qwen2.5-coder"`);
      None: the parent's.
    - `timeout`: seconds; None: `SubagentConfig.timeout`.
    """

    name: str
    description: str = ""
    tools: tuple[str, ...] | None = None
    read_only: bool = False
    safety_ceiling: SafetyMode = SafetyMode.FULL_ACCESS
    preamble: str = GENERAL_PREAMBLE
    model: Model | str | None = None
    timeout: float | None = None

    @classmethod
    def from_config(cls, name: str, table: Mapping[str, Any], base: SubagentType) -> SubagentType:
        """The type a `[subagents.<name>]` table describes, on top of `base` (the built-in
        type of that name, else `general`)."""
        unknown = sorted(set(table) - _TYPE_KEYS)
        if unknown:
            raise UsageError(
                f"[subagents.{name}] has unknown key(s) {', '.join(unknown)}; "
                f"the keys are: {', '.join(sorted(_TYPE_KEYS))}"
            )
        changes: dict[str, Any] = {"name": name}
        for key in ("description", "preamble", "model"):
            if key in table:
                value = table[key]
                if not isinstance(value, str) or (key != "description" and not value.strip()):
                    raise UsageError(f"[subagents.{name}] {key} must be a non-empty string")
                changes[key] = value
        if "tools" in table:
            tools = table["tools"]
            if not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools):
                raise UsageError(f"[subagents.{name}] tools must be a list of tool names")
            changes["tools"] = tuple(tools)
        if "read_only" in table:
            if not isinstance(table["read_only"], bool):
                raise UsageError(f"[subagents.{name}] read_only must be true or false")
            changes["read_only"] = table["read_only"]
        if "safety_ceiling" in table:
            value = table["safety_ceiling"]
            if not isinstance(value, str):
                raise UsageError(f"[subagents.{name}] safety_ceiling must be a mode name")
            try:
                changes["safety_ceiling"] = SafetyMode.parse(value)
            except ValueError as exc:
                raise UsageError(f"[subagents.{name}] safety_ceiling: {exc}") from None
        if "timeout" in table:
            changes["timeout"] = _seconds(table["timeout"], f"[subagents.{name}] timeout")
        return dataclasses.replace(base, **changes)


GENERAL: Final = SubagentType(
    "general",
    description="multi-step work with the agent's tools",
)
EXPLORE: Final = SubagentType(
    "explore",
    description="finds files, reads code and answers questions about it (read-only)",
    read_only=True,
    safety_ceiling=SafetyMode.READ_ONLY,
    preamble=EXPLORE_PREAMBLE,
)


def _builtin_types() -> Mapping[str, SubagentType]:
    return MappingProxyType({GENERAL.name: GENERAL, EXPLORE.name: EXPLORE})


@dataclass(frozen=True, slots=True)
class SubagentConfig:
    """The subagent types a run may start, and the limits on its children."""

    types: Mapping[str, SubagentType] = field(default_factory=_builtin_types)
    max_concurrent: int = DEFAULT_MAX_CONCURRENT
    timeout: float = DEFAULT_SUBAGENT_TIMEOUT

    def __post_init__(self) -> None:
        if self.max_concurrent < 1:
            raise UsageError(f"max_concurrent must be at least 1, not {self.max_concurrent}")
        if self.timeout <= 0:
            raise UsageError(f"the subagent timeout must be positive, not {self.timeout}")

    def with_type(self, subagent_type: SubagentType) -> SubagentConfig:
        """This configuration with `subagent_type` added (or replacing its namesake)."""
        types = {**self.types, subagent_type.name: subagent_type}
        return dataclasses.replace(self, types=MappingProxyType(types))

    def timeout_for(self, subagent_type: SubagentType) -> float:
        return subagent_type.timeout if subagent_type.timeout is not None else self.timeout

    def describe(self) -> str:
        """The types, one per line, for a model that asked for one that does not exist."""
        return "\n".join(
            f"- {t.name}: {t.description}" if t.description else f"- {t.name}"
            for t in sorted(self.types.values(), key=lambda t: t.name)
        )

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> SubagentConfig:
        """The `[subagents]` section: limits as keys, one table per type."""
        config = cls()
        limits: dict[str, Any] = {}
        for key, value in section.items():
            if isinstance(value, Mapping):
                base = config.types.get(key, GENERAL)
                config = config.with_type(SubagentType.from_config(key, value, base))
            elif key in _LIMIT_KEYS:
                limits[key] = value
            else:
                raise UsageError(
                    f"[subagents] has unknown key {key!r}; the keys are "
                    f"{', '.join(sorted(_LIMIT_KEYS))}, and a [subagents.<type>] table per type"
                )
        if "max_concurrent" in limits:
            value = limits["max_concurrent"]
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UsageError("[subagents] max_concurrent must be a whole number, at least 1")
            config = dataclasses.replace(config, max_concurrent=value)
        if "timeout" in limits:
            seconds = _seconds(limits["timeout"], "[subagents] timeout")
            config = dataclasses.replace(config, timeout=seconds)
        return config


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise UsageError(f"{where} must be a positive number of seconds")
    return float(value)
