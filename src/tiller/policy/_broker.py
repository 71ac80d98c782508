"""`ApprovalBroker`: parks a call until a person answers, and remembers "always".

The approver (a terminal prompt, a program's callback) gives one answer; the broker wraps
it with what every approval needs: a cancelled run ends the wait and the call never runs
(the person is not asked about a call that will never run), and "approve always" is
remembered for the run under a key *as narrow as the danger*: the whole command,
whitespace-normalized, for the shell (so approving `pytest -q` never approves
`pytest -q; rm -rf ~`) for a tool that runs one (`Tool.command_of`); the tool's name for
other tools; and never for another tool that sends data out (`Capability.EXTERNAL_SEND`: the
web, MCP servers, mail), whose every call reaches somewhere new. What the tool declares
decides, never its name (law 12).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final, cast

import orjson

from ..cancel import CancellationToken
from ..conversation import ToolCall
from ..errors import Cancelled
from ..tools import Capability, Tool
from ._approver import AllowAll, Approver, AskReason, Decision, ExplainedApprover

__all__ = ["ApprovalBroker", "approval_key"]

_logger: Final = logging.getLogger(__name__)


def approval_key(
    call: ToolCall, tool: Tool | None, arguments: Mapping[str, Any] | None = None
) -> str | None:
    """What "approve always" remembers for `call` to `tool`, or None if it cannot be
    remembered: no tool (nothing declared), or a tool that sends data out and runs no
    shell command (a shell command is remembered as itself, whatever its tool can do).
    `arguments`: the call's, when the caller parsed them already."""
    if tool is None:
        return None
    if arguments is None:
        try:
            arguments = orjson.loads(call.arguments or "{}")
        except orjson.JSONDecodeError:
            arguments = None
        if not isinstance(arguments, dict):
            arguments = {}
    try:
        command = tool.command_of(arguments)
    except Exception:  # an unreadable declaration remembers nothing (law 3)
        return None
    if command is not None:
        return f"{call.name}:{' '.join(command.split())}" if isinstance(command, str) else None
    if tool.capabilities & Capability.EXTERNAL_SEND:
        return None
    return call.name


#: The one answer of an approver that allows every call without looking at it.
_ALLOWED: Final = Decision.allow()


def _allows_everything(approver: Approver) -> bool:
    """Whether `approver` is an `AllowAll` (its `approve`, no explained variant): it
    answers every call at once with an allow, so there is nothing to wait for or race."""
    return (
        getattr(type(approver), "approve", None) is AllowAll.approve
        and getattr(type(approver), "approve_explained", None) is None
    )


class ApprovalBroker:
    """An `Approver` that asks `approver`, raced against the run's cancel token, and
    keeps the run's "always" answers. An `AllowAll` is not asked at all: its answer is
    known (`--yes`, a batch run), so the call pays for no wait, race or key."""

    def __init__(self, approver: Approver, cancel: CancellationToken | None = None) -> None:
        self._approver = approver
        # Once, not per call, and by its two members, as `isinstance` against the runtime
        # Protocol would check them: that check first walks the Protocol's whole
        # namespace (tens of µs), and a broker is made for every run.
        self._explained = hasattr(approver, "approve") and hasattr(approver, "approve_explained")
        self._cancel = cancel
        self._always: set[str] = set()
        self._allows_everything = _allows_everything(approver)

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
        arguments: Mapping[str, Any] | None = None,
    ) -> Decision:
        """Ask the approver about `call`; with `remembered` false an earlier "always" does
        not answer (the interlock asks because the conversation changed since then). `why`
        reaches an `ExplainedApprover`, which shows it to the person; `arguments` are the
        call's, when the caller parsed them already."""
        if self._allows_everything:
            if self._cancel is not None:
                self._cancel.check()  # a cancelled run's call never runs (as in the race)
            return _ALLOWED
        key = approval_key(call, tool, arguments)
        if remembered and key is not None and key in self._always:
            return Decision.allow()
        approver = self._approver
        if why is not None and self._explained:
            asking = cast(ExplainedApprover, approver).approve_explained(call, tool, why)
        else:
            asking = approver.approve(call, tool)
        try:
            if self._cancel is not None:
                # A cancel while the person thinks is a "no": the call never runs. It ends
                # the wait with the run's `Cancelled`, so the call is answered as cut by the
                # cancel (law 8), not as a person's refusal nobody gave.
                answered: object = await self._cancel.race(asking)
            else:
                answered = await asking
        except Cancelled:
            raise
        except Exception as exc:  # law 3: an approver that breaks says no, the run goes on
            _logger.warning("the approver failed on %s", call.name, exc_info=True)
            return Decision.blocked(f"the approver failed ({type(exc).__name__}: {exc})")
        if not isinstance(answered, Decision):
            # Not a crash of the run either: a person's program returned something else
            # (True, a string, an object of its own). No one said yes (law 3).
            return Decision.blocked(
                f"the approver returned {type(answered).__name__}, not a Decision "
                "(return Decision.allow(), Decision.deny(reason) or Decision.blocked(reason))"
            )
        answer = answered
        if answer.allowed and answer.always and key is not None:
            self._always.add(key)
        return answer
