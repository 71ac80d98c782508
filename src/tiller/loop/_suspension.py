"""`Suspension`: the calls a run holds for a person, and the `Suspend` step.

Words (docs/glossary.md): one *call* is held (it waits for a person's decision); the
*run* suspends (it stops at a step boundary, its `RunState` the checkpoint); the AG-UI
wire calls that an *interrupt*. A run holds a call when the gate says Hold (an Ask with
no one to answer it now, in a durable run), when a served run's `ask_user` puts a
question to the page, or when a subagent it started suspended; the review policy
suspends a whole step before any of its calls runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from ..conversation import ToolCall, ToolResult
from ..events import APPROVAL_SCHEMA, approval_interrupt_id
from ..policy import RiskClass
from ..state import CallRecord, RunState, StopCause
from ..tools import QUESTION_SCHEMA, question_interrupt_id, questions_metadata
from ._agent_ref import record_policy
from ._run_parts import RunParts
from ._steps import Finish, Suspend

__all__ = ["Suspension"]


class Suspension:
    """What one run holds for a person, and why (see the module docstring)."""

    def __init__(self, run: RunParts) -> None:
        self._run = run
        #: Why each held call needs a person, and its risk (for the held-approval records).
        self._reasons: dict[str, tuple[str, RiskClass | None]] = {}
        #: Held calls that are questions for the person (`ask_user` in a served run).
        self._questions: set[str] = set()
        #: Why the run suspended (None: it did not).
        self.reason: str | None = None
        #: Results of the calls of a suspended step that did not wait (they ran, or were
        #: refused): not in the transcript until the step completes, but the client saw them.
        self.answered_before: list[ToolResult] = []

    def hold(self, call: ToolCall, why: str, risk: RiskClass | None, *, question: bool) -> None:
        """`call` waits for a person: an approval, or (`question`) an answer."""
        self._reasons[call.id] = (why, risk)
        if question:
            self._questions.add(call.id)

    def held_reasons(self) -> Mapping[str, tuple[str, RiskClass | None]]:
        """Why each call this run holds for a person waits (and its risk)."""
        return self._reasons

    def adopt(self, reasons: Mapping[str, tuple[str, RiskClass | None]]) -> None:
        """A child's held calls wait in this run's suspension: their reasons go with it."""
        self._reasons.update(reasons)

    def records(self) -> tuple[dict[str, str], dict[str, str]]:
        """The held calls' risks and reasons, by call id, as the held-approval records
        keep them."""
        risks = {c: risk.value for c, (_, risk) in self._reasons.items() if risk is not None}
        reasons = {c: why for c, (why, _) in self._reasons.items() if why}
        return risks, reasons

    def take(self, step: Suspend) -> Finish:
        """The step's `calls` wait for a person; the state is the checkpoint."""
        run, state = self._run, self._run.state
        _remember_malformed(state, step.calls, step.malformed)
        for call in step.calls:
            if call.id not in state.calls:
                state.calls[call.id] = CallRecord(call_id=call.id, name=call.name, step=state.step)
        state.interrupts = []
        for call in step.calls:
            child = state.children.get(call.id)
            if child is not None:
                # An agent call whose subagent waits: the run waits on what the child does.
                state.interrupts.extend(child.interrupts)
            elif call.id in self._questions:
                state.interrupts.append(_question_interrupt(call))
            else:
                why, risk = self._reasons.get(call.id, (None, None))
                state.interrupts.append(
                    _approval_interrupt(call, why or step.reason, risk.value if risk else None)
                )
        ttl = run.options.interrupt_ttl
        if ttl is not None:
            expires = datetime.now(UTC) + timedelta(seconds=ttl)
            stamp = expires.isoformat(timespec="milliseconds").replace("+00:00", "Z")
            for interrupt in state.interrupts:
                interrupt["expiresAt"] = stamp
        self.reason = step.reason
        # The run's policy travels with the checkpoint, in the store or in the result.
        record_policy(state, run.run_ctx, run.options)
        state.stop_cause = StopCause.SUSPENDED
        return Finish(StopCause.SUSPENDED)


def _remember_malformed(
    state: RunState, calls: Sequence[ToolCall], malformed: Mapping[str, str]
) -> None:
    """Keep the calls of a step about to suspend whose arguments were not JSON: a resume
    answers them with that error again."""
    for call in calls:
        if call.id in malformed:
            state.calls[call.id] = CallRecord(
                call_id=call.id,
                name=call.name,
                step=state.step,
                malformed_arguments=True,
                malformed_text=malformed[call.id],
            )


def _approval_interrupt(call: ToolCall, why: str, risk: str | None) -> dict[str, Any]:
    # What the person decides on: the answer is bound to it (law 10). The risk class lets
    # a client say in plain words what the call would do (the console does).
    metadata: dict[str, Any] = {"tool": call.name, "arguments": call.canonical_arguments()}
    if risk is not None:
        metadata["risk"] = risk
    return {
        "id": approval_interrupt_id(call.id),
        "reason": "tool_call",
        "toolCallId": call.id,
        "message": f"Review: {why}. Allow {call.name}({call.arguments})?",
        "responseSchema": APPROVAL_SCHEMA,
        "metadata": metadata,
    }


def _question_interrupt(call: ToolCall) -> dict[str, Any]:
    """The interrupt that puts an `ask_user` call's questions to the person."""
    try:
        arguments = orjson.loads(call.arguments)
    except orjson.JSONDecodeError:
        arguments = {}
    questions = questions_metadata(arguments if isinstance(arguments, dict) else {})
    first = questions[0]["question"] if questions else "The agent has a question."
    return {
        "id": question_interrupt_id(call.id),
        "reason": "question",
        "toolCallId": call.id,
        "message": first if len(questions) <= 1 else f"{first} (+{len(questions) - 1} more)",
        "responseSchema": QUESTION_SCHEMA,
        "metadata": {"questions": questions},
    }
