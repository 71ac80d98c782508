"""How a run ends, and what a person answers: `RunOutcome`, `Interrupt`, `ResumeEntry`.

`RunOutcome` is AG-UI's terminal outcome (success, interrupt, cancelled); it is not
`tiller.RunResult`, which `agent.run()` returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import UsageError

__all__ = ["APPROVAL_SCHEMA", "Interrupt", "ResumeEntry", "RunOutcome", "approval_interrupt_id"]

#: What an approval interrupt (reason `tool_call`) expects back (DESIGN §3): a decision,
#: an optional reason, and optionally edited arguments.
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"enum": ["approve", "approve_always", "deny"]},
        "reason": {"type": "string"},
        "arguments": {"type": "object"},
    },
    "required": ["decision"],
}


def approval_interrupt_id(tool_call_id: str) -> str:
    """The approval interrupt's id for a call: stable per call, so the answer, which comes
    back in a later run with a new run id, finds it."""
    return f"approve-{tool_call_id}"


@dataclass(slots=True, frozen=True)
class Interrupt:
    """Something the run needs from outside before it can go on (an approval, an answer).

    `id` must be stable for the thing asked about, because the answer arrives in a later
    run (with a new run id) and is matched by it. An approval (reason `tool_call`) names
    the call it is about in `tool_call_id`; without it `UsageError` is raised.
    """

    id: str
    reason: str
    message: str | None = None
    tool_call_id: str | None = None
    response_schema: dict[str, Any] | None = None
    expires_at: str | None = None
    metadata: dict[str, Any] | None = None
    subagent_run_id: str | None = None

    def __post_init__(self) -> None:
        if self.reason == "tool_call" and not self.tool_call_id:
            # The client shows an approval next to its call, and the answer edits or
            # denies that call: without the id there is nothing to show or to answer.
            raise UsageError(
                f"approval interrupt {self.id!r} (reason 'tool_call') needs the "
                "tool_call_id of the call it asks about"
            )

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"id": self.id, "reason": self.reason}
        for attr, key in _INTERRUPT_OPTIONAL:
            value = getattr(self, attr)
            if value is not None:
                wire[key] = value
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> Interrupt:
        return cls(
            id=wire["id"],
            reason=wire["reason"],
            **{attr: wire[key] for attr, key in _INTERRUPT_OPTIONAL if key in wire},
        )


_INTERRUPT_OPTIONAL = (
    ("message", "message"),
    ("tool_call_id", "toolCallId"),
    ("response_schema", "responseSchema"),
    ("expires_at", "expiresAt"),
    ("metadata", "metadata"),
    ("subagent_run_id", "subagentRunId"),
)


@dataclass(slots=True, frozen=True)
class ResumeEntry:
    """An answer to one interrupt: `resolved` with a payload, or `cancelled` (abandoned)."""

    interrupt_id: str
    status: Literal["resolved", "cancelled"]
    payload: Any = None
    metadata: dict[str, Any] | None = None

    @classmethod
    def resolved(cls, interrupt_id: str, payload: Any = None) -> ResumeEntry:
        return cls(interrupt_id, "resolved", payload)

    @classmethod
    def cancelled(cls, interrupt_id: str) -> ResumeEntry:
        return cls(interrupt_id, "cancelled")

    @property
    def is_resolved(self) -> bool:
        return self.status == "resolved"

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"interruptId": self.interrupt_id, "status": self.status}
        if self.payload is not None:
            wire["payload"] = self.payload
        if self.metadata is not None:
            wire["metadata"] = self.metadata
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> ResumeEntry:
        status = wire.get("status")
        if status not in ("resolved", "cancelled"):
            raise UsageError(
                f"resume entry status must be 'resolved' or 'cancelled', got {status!r}"
            )
        return cls(wire["interruptId"], status, wire.get("payload"), wire.get("metadata"))


@dataclass(slots=True, frozen=True)
class RunOutcome:
    """Why a run ended without failing: `success`, `interrupt` (at least one), `cancelled`.

    Build one with the class methods; an interrupt outcome with no interrupts is refused,
    because a client would have nothing to answer.
    """

    kind: Literal["success", "interrupt", "cancelled"]
    interrupts: tuple[Interrupt, ...] = ()
    pending_tool_call_ids: tuple[str, ...] = field(default=())

    @classmethod
    def success(cls, pending_tool_call_ids: Iterable[str] | None = None) -> RunOutcome:
        """The run completed; `pending_tool_call_ids` names frontend tool calls left open."""
        return cls("success", pending_tool_call_ids=tuple(pending_tool_call_ids or ()))

    @classmethod
    def interrupt(cls, interrupts: Sequence[Interrupt] | Interrupt) -> RunOutcome:
        """The run is paused until every interrupt is answered by a resume."""
        items = (interrupts,) if isinstance(interrupts, Interrupt) else tuple(interrupts)
        if not items:
            raise UsageError("an interrupt outcome needs at least one Interrupt")
        ids = [i.id for i in items]
        if len(set(ids)) != len(ids):
            raise UsageError(f"interrupt ids must be unique within one outcome, got {ids}")
        return cls("interrupt", interrupts=items)

    @classmethod
    def cancelled(cls) -> RunOutcome:
        """The run was stopped by whoever ran it; nothing is waited for."""
        return cls("cancelled")

    def to_wire(self) -> dict[str, Any]:
        if self.kind == "interrupt":
            return {"type": "interrupt", "interrupts": [i.to_wire() for i in self.interrupts]}
        if self.kind == "success" and self.pending_tool_call_ids:
            return {"type": "success", "pendingToolCallIds": list(self.pending_tool_call_ids)}
        return {"type": self.kind}
