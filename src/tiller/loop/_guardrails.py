"""Guardrails: checks before and after each model call.

Each answers Pass, Refuse(reason) or Handoff(agent, reason); they run in registration order
and the first non-Pass wins. A refusal stops the run with stop cause `refused`, a handoff
with `handoff` (the result names the agent to hand to).

In the verdicts' one vocabulary (`tiller.policy`), a pass is `allow` and both a refusal
and a handoff are `deny` (this agent does not go on with the call), `by` the guardrail; a
handoff is told apart by `handoff_to`, the agent it hands to: it is no refusal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol, runtime_checkable

from ..conversation import AssistantMessage
from ..errors import UsageError
from ..model import ModelRequest

__all__ = [
    "Guardrail",
    "GuardrailOutcome",
    "MaxResponseLength",
    "RefusalKeywords",
    "run_post",
    "run_pre",
]


#: The kinds before the one vocabulary, and what each is now.
_OLD_KINDS: Final[dict[str, Literal["allow", "deny"]]] = {
    "pass": "allow",
    "refuse": "deny",
    "handoff": "deny",
}


@dataclass(slots=True, frozen=True, init=False)
class GuardrailOutcome:
    """A guardrail's answer. Build with `GuardrailOutcome.passed()`, `.refuse(reason)` or
    `.handoff(agent, reason)`."""

    kind: Literal["allow", "deny"]
    reason: str = ""
    #: The agent the run is handed to: set only on a handoff (a deny that is no refusal).
    handoff_to: str | None = None

    def __init__(
        self,
        kind: Literal["allow", "deny"],
        reason: str = "",
        handoff_to: str | None = None,
        *,
        agent: str | None = None,
    ) -> None:
        # `agent=` is the older name of `handoff_to` (a field before the one vocabulary):
        # a handoff written with it must still hand off, not stop the run as refused.
        if agent is not None:
            if handoff_to is not None and handoff_to != agent:
                raise UsageError("pass handoff_to (or the older agent), not both")
            handoff_to = agent
        # The older kinds keep their meaning: a `GuardrailOutcome("pass")` written before
        # the one vocabulary must not stop the run as refused.
        kind = _OLD_KINDS.get(kind, kind)
        if kind not in ("allow", "deny"):
            raise UsageError(
                "a guardrail outcome is 'allow' or 'deny' (or the older 'pass', 'refuse', "
                f"'handoff'), not {kind!r}"
            )
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "handoff_to", handoff_to)

    @property
    def by(self) -> str:
        """Who decided: a guardrail."""
        return "guardrail"

    @property
    def agent(self) -> str | None:
        """The agent a handoff names (`handoff_to`'s older name)."""
        return self.handoff_to

    @property
    def refused(self) -> bool:
        """Whether the guardrail refused (a deny that hands to no one)."""
        return self.kind == "deny" and self.handoff_to is None

    @classmethod
    def passed(cls) -> GuardrailOutcome:
        return cls("allow")

    @classmethod
    def refuse(cls, reason: str) -> GuardrailOutcome:
        return cls("deny", reason)

    @classmethod
    def handoff(cls, agent: str, reason: str) -> GuardrailOutcome:
        return cls("deny", reason, handoff_to=agent)


@runtime_checkable
class Guardrail(Protocol):
    """`pre_llm` sees the request; `post_llm` the request and the model's answer."""

    name: str

    async def pre_llm(self, request: ModelRequest) -> GuardrailOutcome: ...

    async def post_llm(
        self, request: ModelRequest, response: AssistantMessage
    ) -> GuardrailOutcome: ...


class RefusalKeywords:
    """Refuse a request or response containing any of the keywords (case-insensitive)."""

    def __init__(self, keywords: Sequence[str], *, name: str = "refusal_keywords") -> None:
        self.name = name
        self._keywords = [k.lower() for k in keywords if k]

    def _hit(self, text: str) -> str | None:
        lowered = text.lower()
        return next((k for k in self._keywords if k in lowered), None)

    async def pre_llm(self, request: ModelRequest) -> GuardrailOutcome:
        last = request.messages[-1] if request.messages else None
        hit = self._hit(last.text) if last is not None else None
        return (
            GuardrailOutcome.refuse(f"the request mentions {hit!r}")
            if hit
            else GuardrailOutcome.passed()
        )

    async def post_llm(self, request: ModelRequest, response: AssistantMessage) -> GuardrailOutcome:
        hit = self._hit(response.text)
        return (
            GuardrailOutcome.refuse(f"the response mentions {hit!r}")
            if hit
            else GuardrailOutcome.passed()
        )


class MaxResponseLength:
    """Refuse a response longer than `max_chars` characters of text."""

    def __init__(self, max_chars: int, *, name: str = "max_response_length") -> None:
        self.name = name
        self._max = max_chars

    async def pre_llm(self, request: ModelRequest) -> GuardrailOutcome:
        return GuardrailOutcome.passed()

    async def post_llm(self, request: ModelRequest, response: AssistantMessage) -> GuardrailOutcome:
        if len(response.text) > self._max:
            return GuardrailOutcome.refuse(
                f"the response is {len(response.text)} characters; the limit is {self._max}"
            )
        return GuardrailOutcome.passed()


#: What `run_pre` and `run_post` answer when every guardrail passed (an outcome is frozen:
#: one serves every step, most of which have no guardrail at all).
_PASSED: Final = GuardrailOutcome("allow")


async def run_pre(guardrails: Sequence[Guardrail], request: ModelRequest) -> GuardrailOutcome:
    for guardrail in guardrails:
        outcome = await guardrail.pre_llm(request)
        if outcome.kind != "allow":
            return outcome
    return _PASSED


async def run_post(
    guardrails: Sequence[Guardrail], request: ModelRequest, response: AssistantMessage
) -> GuardrailOutcome:
    for guardrail in guardrails:
        outcome = await guardrail.post_llm(request, response)
        if outcome.kind != "allow":
            return outcome
    return _PASSED
