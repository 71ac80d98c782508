"""A person's decisions for a resumed run: each answers one call, once (law 10).

A decision is keyed by the call's runtime id *and* bound to what the person decided on:
the tool's name and the canonical arguments (sorted keys, no whitespace; the edited ones
when the person edited them). The gate applies it only to the call it was made for, and
spends it there, so a call that comes later under the same id (a provider that repeats
ids, a script started over in a new process) or with other arguments is never answered by
it: that call is asked about again (with no one to ask in a durable run, held again).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from ..conversation import ToolCall, canonical_json_text
from ._approver import Approver, DecidedBy, Decision

__all__ = ["CallDecision", "DecidedApprover"]


@dataclass(slots=True, frozen=True)
class CallDecision:
    """`decision` for the call named `tool` with `arguments` (canonical JSON text)."""

    decision: Decision
    tool: str
    arguments: str

    @property
    def kind(self) -> Literal["allow", "deny"]:
        """The bound decision's kind (the verdicts' vocabulary)."""
        return self.decision.kind

    @property
    def by(self) -> DecidedBy:
        """Who decided: the bound decision's `by`."""
        return self.decision.by

    @classmethod
    def for_call(cls, decision: Decision, call: ToolCall) -> CallDecision:
        """`decision`, bound to `call` as it stands."""
        return cls(decision, call.name, call.canonical_arguments())

    @classmethod
    def bind(cls, decision: Decision, tool: str, arguments: Any) -> CallDecision:
        """`decision`, bound to `tool` with `arguments` (a JSON value, or JSON text)."""
        text = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
        return cls(decision, tool, canonical_json_text(text))

    def fits(self, call: ToolCall) -> bool:
        return self.tool == call.name and self.arguments == call.canonical_arguments()

    def describe(self) -> str:
        return f"{self.tool}({self.arguments})"


class DecidedApprover:
    """A person's decisions for some calls (a resume's), by runtime call id, then another
    approver. A bare `Decision` (not bound to a tool and arguments) answers whichever call
    first comes under its id, and is spent there like any other.

    The gate asks `has_decision(call)` / `mismatch(call)` and takes the decision with
    `spend(call)`: once taken, it is gone. For a call with no decision the gate goes on
    with `then` like any run: with no approver and a store, that call is held again (the
    run suspends once more) rather than blocked."""

    def __init__(
        self, decisions: Mapping[str, CallDecision | Decision], then: Approver | None
    ) -> None:
        self._decisions = dict(decisions)
        self.then = then

    def has_decision(self, call: ToolCall) -> bool:
        """Whether a decision, fitting or not, waits under `call`'s id."""
        return call.id in self._decisions

    def mismatch(self, call: ToolCall) -> str | None:
        """Why the decision under `call`'s id is not applied to it (it was made for
        another tool or other arguments), or None (no decision, or it fits)."""
        bound = self._decisions.get(call.id)
        if not isinstance(bound, CallDecision) or bound.fits(call):
            return None
        return (
            f"the decision given for call {call.id} was for {_short(bound.describe())}, "
            f"not for {_short(f'{call.name}({call.canonical_arguments()})')}; it was not "
            "applied, so this call needs its own decision"
        )

    def spend(self, call: ToolCall) -> Decision | None:
        """The decision made for exactly this call, removed so it answers nothing else;
        a decision under its id that does not fit is discarded too (it answers no call)."""
        bound = self._decisions.pop(call.id, None)
        if isinstance(bound, Decision):
            return bound
        if bound is None or not bound.fits(call):
            return None
        return bound.decision

    async def approve(self, call: ToolCall, tool: Any) -> Decision:
        decision = self.spend(call)
        if decision is not None:
            return decision
        if self.then is None:
            return Decision.blocked("this action needs approval and no approver is attached")
        return await self.then.approve(call, tool)


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
