"""The verdict types' older spellings (before the one allow/ask/deny vocabulary) keep their
meaning, and a kind no one knows is refused when the verdict is made: a custom interlock,
engine or guardrail written against the old words must never fail open (law 3)."""

from __future__ import annotations

from typing import Any

import pytest

from tiller.errors import UsageError
from tiller.loop import GuardrailOutcome
from tiller.policy import InterlockVerdict, PolicyDecision, RiskClass

R = RiskClass.NETWORK


def test_an_interlock_block_is_still_a_deny() -> None:
    # Before, `kind == "block"`; the gate now refuses only on "deny", so an unmapped
    # "block" from a subclassed interlock would have let the send run.
    old: Any = "block"
    verdict = InterlockVerdict(old, "trifecta")
    assert verdict == InterlockVerdict("deny", "trifecta")
    assert verdict.blocked


def test_a_policy_classify_still_goes_to_the_classifier() -> None:
    old: Any = "classify"
    decision = PolicyDecision(old, R, "vet it")
    assert decision == PolicyDecision.classify(R, "vet it")
    assert decision.to_classifier


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (("pass",), GuardrailOutcome.passed()),
        (("refuse", "rude"), GuardrailOutcome.refuse("rude")),
        (
            ("handoff", "billing", "billing-agent"),
            GuardrailOutcome.handoff("billing-agent", "billing"),
        ),
    ],
)
def test_a_guardrail_outcome_keeps_its_older_kinds(old: tuple[Any, ...], new: Any) -> None:
    # A `GuardrailOutcome("pass")` must not stop the run as refused.
    assert GuardrailOutcome(*old) == new


@pytest.mark.parametrize(
    "make",
    [
        lambda: InterlockVerdict("maybe"),  # type: ignore[arg-type]
        lambda: PolicyDecision("perhaps", R),  # type: ignore[arg-type]
        lambda: GuardrailOutcome("fine"),  # type: ignore[arg-type]
    ],
)
def test_an_unknown_kind_is_refused_when_made(make: Any) -> None:
    with pytest.raises(UsageError, match="allow"):
        make()


def test_a_handoff_made_with_the_older_agent_keyword_still_hands_off() -> None:
    older: Any = "handoff"
    old = GuardrailOutcome(older, "billing", agent="billing-agent")
    assert old == GuardrailOutcome.handoff("billing-agent", "billing")
    assert old.agent == "billing-agent" and not old.refused
    with pytest.raises(UsageError, match="handoff_to"):
        GuardrailOutcome("deny", "x", handoff_to="a", agent="b")
