"""The gate's answer for one call, as a tagged union dispatch matches on.

```
GateAnswer = Run(tool, risk)          run it here
           | Refuse(by, reason, ...)  answer the model with an error result
           | Hold(reason, risk)       a person decides later (a durable run suspends)
           | Stage(result)            drafted in the outbox; `result` is what the model reads
           | ForClient(tool, risk)    allowed, and the client runs it (an AG-UI frontend tool)
```

A refusal carries who refused (`by`, the vocabulary of `tiller.policy`'s verdicts plus
the registry's `phase`, `withheld` and `unknown_tool`) and the refuser's reason; the loop
writes the prefix the model reads from `by` (`refusal_text`), never the refuser (law 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from ..policy import RiskClass

__all__ = [
    "ForClient",
    "GateAnswer",
    "Hold",
    "Refuse",
    "Run",
    "Stage",
    "recorded_refuser",
    "refusal_text",
]


@dataclass(frozen=True, slots=True)
class Run:
    """Run `tool` (`risk`: its class, when the engine rated it; `by`: who allowed it,
    `policy`, `classifier` or `user`)."""

    tool: Any
    risk: RiskClass | None = None
    by: str = "policy"


@dataclass(frozen=True, slots=True)
class Refuse:
    """Refused by `by` (`user`, `policy`, `hook:<name>`, `interlock`, `phase`, `withheld`,
    `unknown_tool`) for `reason`; `remedy` is the tool's own advice, said last."""

    by: str
    reason: str
    risk: RiskClass | None = None
    remedy: str = ""


@dataclass(frozen=True, slots=True)
class Hold:
    """Held for a person (no approver, a durable run): `reason` is why they are asked."""

    reason: str
    risk: RiskClass | None = None


@dataclass(frozen=True, slots=True)
class Stage:
    """Staged in the outbox: `result` is what the model reads (not an error, not done)."""

    result: str


@dataclass(frozen=True, slots=True)
class ForClient:
    """Allowed, and run by the client (a frontend tool): the run ends with it open."""

    tool: Any
    risk: RiskClass | None = None
    by: str = "policy"


GateAnswer: TypeAlias = Run | Refuse | Hold | Stage | ForClient

#: The prefix the model reads for each refuser (law 4), before the refuser's reason.
_PREFIXES: Final = {
    "user": "Denied by the user: ",
    "policy": "Blocked by policy: ",
    "interlock": "Blocked by the interlock: ",
    "phase": "Refused by the plan phase: ",
    "withheld": "Refused: ",
    "unknown_tool": "Unknown tool ",
}

#: How the call record and the tool trace name a refuser whose word there differs.
_RECORDED: Final = {"interlock": "policy", "unknown_tool": "unknown"}


def refusal_text(answer: Refuse) -> str:
    """What the model reads for `answer`: the prefix for its refuser, the reason, the
    remedy."""
    if answer.by.startswith("hook:"):
        prefix = f"Refused by hook {answer.by.removeprefix('hook:')}: "
    else:
        prefix = _PREFIXES.get(answer.by, f"Refused by {answer.by}: ")
    remedy = f" {answer.remedy}" if answer.remedy else ""
    return f"{prefix}{answer.reason}{remedy}"


def recorded_refuser(answer: Refuse) -> str:
    """Who refused, as the call record and the tool trace say it (`hook` for any hook,
    `policy` for the interlock, `unknown` for an unknown tool)."""
    if answer.by.startswith("hook:"):
        return "hook"
    return _RECORDED.get(answer.by, answer.by)
