"""`ApprovalBroker`: parks a call until a person answers, and remembers "always".

The approver (a terminal prompt, a program's callback) gives one answer; the broker wraps
it with what every approval needs: a cancelled run ends the wait and the call never runs
(the person is not asked about a call that will never run), and "approve always" is
remembered for the run under a key *as narrow as the danger*: the whole command,
whitespace-normalized, for the shell (so approving `pytest -q` never approves
`pytest -q; rm -rf ~`); the tool's name for other tools; and never for the web or MCP
tools, whose every call reaches somewhere new.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..cancel import CancellationToken
from ..conversation import ToolCall
from ._approver import Approver, AskReason, Decision, ExplainedApprover

__all__ = ["ApprovalBroker", "approval_key"]

#: Tools whose calls can never be approved "always": each reaches somewhere new.
_NEVER_ALWAYS = frozenset({"web_fetch"})
_SHELL = frozenset({"execute_command"})


def approval_key(call: ToolCall) -> str | None:
    """What "approve always" remembers for `call`, or None if it cannot be remembered."""
    if call.name in _NEVER_ALWAYS or "__" in call.name:  # the web, MCP (`server__tool`)
        return None
    if call.name in _SHELL:
        try:
            command = orjson.loads(call.arguments).get("command")
        except (orjson.JSONDecodeError, AttributeError):
            return None
        if not isinstance(command, str):
            return None
        return f"{call.name}:{' '.join(command.split())}"
    return call.name


class ApprovalBroker:
    """An `Approver` that asks `approver`, raced against the run's cancel token, and
    keeps the run's "always" answers."""

    def __init__(self, approver: Approver, cancel: CancellationToken | None = None) -> None:
        self._approver = approver
        self._cancel = cancel
        self._always: set[str] = set()

    @property
    def remembered(self) -> frozenset[str]:
        return frozenset(self._always)

    async def approve(self, call: ToolCall, tool: Any) -> Decision:
        return await self.ask(call, tool)

    async def ask(
        self,
        call: ToolCall,
        tool: Any,
        *,
        remembered: bool = True,
        why: AskReason | None = None,
    ) -> Decision:
        """Ask the approver about `call`; with `remembered` false an earlier "always" does
        not answer (the interlock asks because the conversation changed since then). `why`
        reaches an `ExplainedApprover`, which shows it to the person."""
        key = approval_key(call)
        if remembered and key is not None and key in self._always:
            return Decision.allow()
        approver = self._approver
        if why is not None and isinstance(approver, ExplainedApprover):
            asking = approver.approve_explained(call, tool, why)
        else:
            asking = approver.approve(call, tool)
        if self._cancel is not None:
            # A cancel while the person thinks is a "no": the call never runs. It ends the
            # wait with the run's `Cancelled`, so the call is answered as cut by the cancel
            # (law 8), not as a person's refusal nobody gave.
            answer = await self._cancel.race(asking)
        else:
            answer = await asking
        if answer.allowed and answer.always and key is not None:
            self._always.add(key)
        return answer
