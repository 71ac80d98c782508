"""Risk classes and the policy engine's decisions: the vocabulary of the gate.

Every tool call is classified into one `RiskClass` (DESIGN §11), from the least to the
most dangerous; the policy engine turns (risk, the live safety mode, the user's rules)
into a `PolicyDecision`: Allow, Ask (a person decides), Classify (the auto classifier may
turn it into Allow, else it is an Ask) or Deny. Every decision carries its risk class, so
a refusal can say what kind of action was refused and a review policy can pause on a
minimum risk.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

__all__ = ["DecisionKind", "PolicyDecision", "RiskClass"]


class RiskClass(enum.Enum):
    """What a call may do, from the least to the most dangerous (`rank`)."""

    READ_ONLY = "read_only"
    LOW_MUTATION = "low_mutation"
    FILE_MUTATION = "file_mutation"
    SHELL_MUTATION = "shell_mutation"
    NETWORK = "network"
    PROCESS = "process"
    EXTERNAL_ACCESS = "external_access"
    SYSTEM_INSTALL = "system_install"
    DESTRUCTIVE = "destructive"

    @property
    def rank(self) -> int:
        return _ORDER.index(self)

    def at_least(self, other: RiskClass) -> bool:
        return self.rank >= other.rank

    @classmethod
    def parse(cls, text: str) -> RiskClass:
        """The class named `text` (`-` works for `_`), or a `ValueError` listing them."""
        try:
            return cls(text.strip().lower().replace("-", "_"))
        except ValueError:
            names = ", ".join(risk.value for risk in cls)
            raise ValueError(f"unknown risk class {text!r}; the classes are: {names}") from None


_ORDER = list(RiskClass)

DecisionKind = Literal["allow", "ask", "classify", "deny"]


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """The engine's answer for one call: what to do, the call's risk class, and why
    (the matching rule, or the mode's default)."""

    kind: DecisionKind
    risk: RiskClass
    reason: str = ""

    @classmethod
    def allow(cls, risk: RiskClass, reason: str = "") -> PolicyDecision:
        return cls("allow", risk, reason)

    @classmethod
    def ask(cls, risk: RiskClass, reason: str = "") -> PolicyDecision:
        return cls("ask", risk, reason)

    @classmethod
    def classify(cls, risk: RiskClass, reason: str = "") -> PolicyDecision:
        return cls("classify", risk, reason)

    @classmethod
    def deny(cls, risk: RiskClass, reason: str) -> PolicyDecision:
        return cls("deny", risk, reason)
