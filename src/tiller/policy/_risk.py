"""Risk classes and the policy engine's decisions: the vocabulary of the gate.

Every tool call is classified into one `RiskClass` (DESIGN §11), from the least to the
most dangerous; the policy engine turns (risk, the live safety mode, the user's rules)
into a `PolicyDecision`: Allow, Ask (a person decides), Classify (the auto classifier may
turn it into Allow, else it is an Ask) or Deny. Every decision carries its risk class, so
a refusal can say what kind of action was refused and a review policy can pause on a
minimum risk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..tools import RiskClass

__all__ = ["DecisionKind", "PolicyDecision", "RiskClass"]


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
