"""Approvers answer an Ask: Allow, Deny(reason) or Blocked(reason).

`Deny` is a person's answer ("Denied by the user: ..."); `Blocked` is a machine's ("Blocked
by policy: ..."). In the verdicts' one vocabulary (`tiller.policy._verdict`) both are a
`deny`; who said it is `by` (`user` or `policy`). The loop chooses the prefix from `by`,
never the approver (law 4), so a policy refusal is never presented to the model as a
user's correction. Read-only calls never reach an approver.

An approver that shows a person the call (a terminal prompt) should also show *why* it is
asked: it implements `ExplainedApprover` too, and the broker hands it the `AskReason` (the
policy's, interlock's or classifier's reason, and the risk class).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from .. import _public
from ..conversation import ToolCall
from ..errors import UsageError
from ._risk import RiskClass

__all__ = [
    "AllowAll",
    "Approver",
    "AskReason",
    "Callback",
    "DecidedBy",
    "Decision",
    "ExplainedApprover",
    "NoOneToAsk",
    "ReadOnly",
]


#: Who an approver's answer is from: a person, or a machine that stands in for none.
DecidedBy = Literal["user", "policy"]


@dataclass(slots=True, frozen=True)
class Decision:
    """An approver's answer. Build with `Decision.allow()`, `.deny(reason)` (a person
    said no) or `.blocked(reason)` (a deny `by` the policy: no one could say yes)."""

    kind: Literal["allow", "deny"]
    reason: str = ""
    #: "Approve always": the approval broker remembers the call's key for the run.
    always: bool = False
    #: Who decided: `user` (a person, or their standing `--yes`) or `policy` (blocked).
    by: DecidedBy = "user"

    def __post_init__(self) -> None:
        if self.kind == "blocked":  # type: ignore[comparison-overlap]
            # The older spelling, `Decision("blocked", reason)`: a deny by the policy.
            object.__setattr__(self, "kind", "deny")
            object.__setattr__(self, "by", "policy")
        # The prefix the model reads comes from `by` (law 4): only these two may answer.
        if self.by not in ("user", "policy"):
            raise UsageError(f"an approver's decision is by 'user' or 'policy', not {self.by!r}")
        if self.kind not in ("allow", "deny"):
            raise UsageError(f"an approver's decision is 'allow' or 'deny', not {self.kind!r}")

    @classmethod
    def allow(cls, *, always: bool = False) -> Decision:
        return cls("allow", always=always)

    @classmethod
    def deny(cls, reason: str) -> Decision:
        return cls("deny", reason)

    @classmethod
    def blocked(cls, reason: str) -> Decision:
        return cls("deny", reason, by="policy")

    @property
    def allowed(self) -> bool:
        return self.kind == "allow"

    @property
    def blocked_by_policy(self) -> bool:
        """Whether this is a `blocked` answer: a deny no person gave."""
        return self.kind == "deny" and self.by == "policy"


@runtime_checkable
class Approver(Protocol):
    """Decides a call that needs a person's approval."""

    async def approve(self, call: ToolCall, tool: Any) -> Decision: ...


@dataclass(slots=True, frozen=True)
class AskReason:
    """Why the gate asks about a call: the reason the policy engine, the interlock or the
    classifier gave, and the call's risk class (None when nothing classified it)."""

    reason: str = ""
    risk: RiskClass | None = None


@runtime_checkable
class ExplainedApprover(Protocol):
    """An `Approver` that is told why it is asked, to show the person (the broker calls
    `approve_explained` instead of `approve` when it has the reason)."""

    async def approve(self, call: ToolCall, tool: Any) -> Decision: ...

    async def approve_explained(self, call: ToolCall, tool: Any, why: AskReason) -> Decision: ...


class AllowAll:
    """Allows everything (`--yes`). The policy engine still denies destructive actions."""

    async def approve(self, call: ToolCall, tool: Any) -> Decision:
        return Decision.allow()


class ReadOnly:
    """Allows nothing that writes: a read-only run."""

    async def approve(self, call: ToolCall, tool: Any) -> Decision:
        return Decision.blocked(f"{call.name} changes things, and this run is read-only")


class NoOneToAsk:
    """Blocks every call that needs approval, saying how to allow it (`remedy`): for
    headless commands, where nobody is at a terminal to answer."""

    def __init__(self, remedy: str) -> None:
        self._reason = f"this action needs approval and no one is at a terminal to ask; {remedy}"

    async def approve(self, call: ToolCall, tool: Any) -> Decision:
        return Decision.blocked(self._reason)


class Callback:
    """Asks a function (sync or async) `(call, tool) -> Decision | bool`."""

    def __init__(
        self, fn: Callable[[ToolCall, Any], Decision | bool | Awaitable[Decision | bool]]
    ) -> None:
        self._fn = fn

    async def approve(self, call: ToolCall, tool: Any) -> Decision:
        answer = self._fn(call, tool)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, Decision):
            return answer
        return Decision.allow() if answer else Decision.deny("the approver said no")


# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())
