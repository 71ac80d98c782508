"""Risk classes and the policy engine's decisions: the vocabulary of the gate.

Every tool call is classified into one `RiskClass` (DESIGN §11), from the least to the
most dangerous; the policy engine turns (risk, the live safety mode, the user's rules)
into a `PolicyDecision`: Allow, Ask (a person decides), Classify (the auto classifier may
turn it into Allow, else it is an Ask) or Deny. Every decision carries its risk class, so
a refusal can say what kind of action was refused and a review policy can pause on a
minimum risk.

A decision speaks the verdicts' one vocabulary (`tiller.policy._verdict`): its `kind` is
allow, ask or deny, decided `by` the policy. A Classify is an ask whose `whom` is the
classifier (the person is asked only if the classifier does not allow it); the engine's
mode table keeps the word `classify` (`DecisionKind`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..errors import UsageError
from ..tools import RiskClass
from ._verdict import Kind

__all__ = ["AskWhom", "DecisionKind", "PolicyDecision", "RiskClass"]


#: What the engine's mode table and rules say; a decision's `kind` folds `classify` into
#: `ask` (with `whom="classifier"`).
DecisionKind = Literal["allow", "ask", "classify", "deny"]

#: Who answers an ask: a person, or first the auto classifier (a Classify).
AskWhom = Literal["person", "classifier"]


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """The engine's answer for one call: what to do, the call's risk class, and why
    (the matching rule, or the mode's default); for an ask, `whom` it goes to first."""

    kind: Kind
    risk: RiskClass
    reason: str = ""
    whom: AskWhom = "person"

    def __post_init__(self) -> None:
        if self.kind == "classify":  # type: ignore[comparison-overlap]
            # The older spelling (the mode table's word): an ask the classifier answers.
            object.__setattr__(self, "kind", "ask")
            object.__setattr__(self, "whom", "classifier")
        if self.kind not in ("allow", "ask", "deny"):
            raise UsageError(
                f"a policy decision is 'allow', 'ask', 'classify' or 'deny', not {self.kind!r}"
            )

    @property
    def by(self) -> str:
        """Who decided: the policy (the engine, its mode table and the user's rules)."""
        return "policy"

    @property
    def to_classifier(self) -> bool:
        """Whether this is a Classify: an ask the auto classifier answers first."""
        return self.kind == "ask" and self.whom == "classifier"

    @classmethod
    def allow(cls, risk: RiskClass, reason: str = "") -> PolicyDecision:
        return cls("allow", risk, reason)

    @classmethod
    def ask(cls, risk: RiskClass, reason: str = "") -> PolicyDecision:
        return cls("ask", risk, reason)

    @classmethod
    def classify(cls, risk: RiskClass, reason: str = "") -> PolicyDecision:
        return cls("ask", risk, reason, whom="classifier")

    @classmethod
    def deny(cls, risk: RiskClass, reason: str) -> PolicyDecision:
        return cls("deny", risk, reason)
