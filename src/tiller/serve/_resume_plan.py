"""A served resume, checked against the thread's open interrupts (the interrupt contract).

The answer to an interrupt comes in a later request, with a new run id, on the same
thread: `resume: [{interruptId, status, payload?}]`. Before anything runs it must address
every open interrupt of the thread's suspended run, and only those, none of them expired,
each with a payload that fits its schema. What does not fit is an `InvalidResume` (the
stream's `RUN_ERROR{INVALID_RESUME}`), which names what to send instead; nothing was run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..errors import InvalidResume
from ..loop import ResumeDecision
from ..state import RunState
from ..tools import Dismissed, QuestionOutcome, answers_from_payload
from ._thread import expired

__all__ = ["ResumePlan", "plan_resume"]

_DECISIONS = ("approve", "approve_always", "deny")


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """What a valid resume decided: per call, the person's decision; per question call,
    the answers."""

    run_id: str
    decisions: dict[str, ResumeDecision] = field(default_factory=dict)
    answers: dict[str, QuestionOutcome] = field(default_factory=dict)


def plan_resume(
    state: RunState | None,
    status: str | None,
    entries: Sequence[Mapping[str, Any]],
    *,
    now: datetime | None = None,
) -> ResumePlan:
    """Check `entries` against the thread's latest run (`state`, checkpoint `status`)."""
    if state is None or status != "suspended" or not state.interrupts:
        where = "this thread has no run" if state is None else f"run {state.run_id} is {status}"
        raise InvalidResume(
            f"there is no open interrupt to resume: {where}. A resume answers the interrupts "
            "of the thread's paused run once; send new input without `resume` instead"
        )
    open_by_id = {str(i["id"]): i for i in state.interrupts}
    seen: set[str] = set()
    for entry in entries:
        interrupt_id = str(entry.get("interruptId", ""))
        if interrupt_id in seen:
            raise InvalidResume(f"interrupt {interrupt_id!r} is answered twice; answer it once")
        seen.add(interrupt_id)
    unknown = sorted(seen - set(open_by_id))
    missing = sorted(set(open_by_id) - seen)
    if unknown or missing:
        parts = []
        if unknown:
            parts.append(f"unknown interrupt ids {unknown}")
        if missing:
            parts.append(f"no answer for open interrupts {missing}")
        raise InvalidResume(
            f"the resume does not match run {state.run_id}'s open interrupts: "
            + "; ".join(parts)
            + ". Send one entry for every open interrupt, and only those"
        )
    moment = now or datetime.now(UTC)
    plan = ResumePlan(state.run_id)
    for entry in entries:
        interrupt = open_by_id[str(entry["interruptId"])]
        call_id = str(interrupt.get("toolCallId", ""))
        cancelled = entry.get("status") == "cancelled"
        if not cancelled and expired(interrupt, moment):
            # Cancelling one that expired is how a client closes it (@ag-ui/client asks
            # exactly that): it is a "no", and the run goes on.
            raise InvalidResume(
                f"interrupt {interrupt['id']!r} expired at {interrupt.get('expiresAt')}; "
                "answer it with status 'cancelled', or send new input on the thread"
            )
        payload = entry.get("payload")
        if interrupt.get("reason") == "question":
            if cancelled:
                plan.answers[call_id] = Dismissed("the person dismissed the question")
            else:
                questions = (interrupt.get("metadata") or {}).get("questions") or []
                answer = answers_from_payload(payload, questions)
                if answer is None:
                    raise InvalidResume(
                        f"the answer to {interrupt['id']!r} does not fit its schema: send "
                        '`{"answers": [{"header": ..., "selected": [labels], "note": ...}]}`'
                    )
                plan.answers[call_id] = answer
            plan.decisions[call_id] = ResumeDecision.approved()
            continue
        decision = (
            ResumeDecision.rejected("the person cancelled the request")
            if cancelled
            else _approval(str(interrupt["id"]), payload)
        )
        plan.decisions[call_id] = _bound(decision, interrupt)
    return plan


def _bound(decision: ResumeDecision, interrupt: Mapping[str, Any]) -> ResumeDecision:
    """The decision bound to the call the interrupt showed (law 10): the run applies it
    to that call only. An interrupt from before calls were bound says nothing: the
    decision is bound to the pending call then."""
    shown = interrupt.get("metadata")
    if not isinstance(shown, Mapping):
        return decision
    tool, arguments = shown.get("tool"), shown.get("arguments")
    if isinstance(tool, str) and isinstance(arguments, str):
        return decision.bound_to(tool, arguments)
    return decision


def _approval(interrupt_id: str, payload: Any) -> ResumeDecision:
    if not isinstance(payload, Mapping) or payload.get("decision") not in _DECISIONS:
        raise InvalidResume(
            f"the answer to {interrupt_id!r} needs a decision: "
            '`{"decision": "approve" | "approve_always" | "deny", "reason"?, "arguments"?}`'
        )
    reason = payload.get("reason", "")
    arguments = payload.get("arguments")
    if not isinstance(reason, str) or (arguments is not None and not isinstance(arguments, dict)):
        raise InvalidResume(
            f"the answer to {interrupt_id!r}: `reason` must be a string and `arguments` an "
            "object (the edited arguments)"
        )
    if payload["decision"] == "deny":
        return ResumeDecision.rejected(reason or "the person said no")
    return ResumeDecision.approved(arguments, always=payload["decision"] == "approve_always")
