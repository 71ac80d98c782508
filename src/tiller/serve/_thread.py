"""What the store knows of a thread when a request arrives: `ThreadView`.

A thread's runs follow one another: each request starts a run on the thread's latest
state. That state says whether the request may go on: open interrupts must be answered
first (a `resume`); an interrupt nobody answered in time has lapsed, and its call is then
answered "expired" so the thread can go on; a cancelled run's calls were answered
"cancelled". A client that never received those answers (it lost the stream, or the
answer was written after it left) is given them: `known_results` fills them into the
conversation it sends. And what the thread has read stays with it (law 6: taint only
grows), as does what a run that waited on the client's tools had spent (law 7).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..conversation import ToolResult, UserMessage
from ..state import RunState
from ..store import Checkpoint, CheckpointStore, NotFound

__all__ = ["EXPIRED_APPROVAL", "EXPIRED_QUESTION", "ThreadView", "expired", "open_interrupts"]

EXPIRED_APPROVAL = "Not run: the approval it waited for expired before anyone answered."
EXPIRED_QUESTION = "No answer: the question expired before anyone answered."


def expired(interrupt: dict[str, Any], now: datetime) -> bool:
    """Whether the interrupt's `expiresAt` has passed (one without it never expires; an
    unreadable stamp counts as not expired, so it still has to be answered)."""
    stamp = interrupt.get("expiresAt")
    if not isinstance(stamp, str):
        return False
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")) <= now
    except ValueError:
        return False


def open_interrupts(state: RunState, now: datetime | None = None) -> list[dict[str, Any]]:
    """The run's interrupts that can still be answered."""
    moment = now or datetime.now(UTC)
    return [i for i in state.interrupts if not expired(i, moment)]


@dataclass(frozen=True, slots=True)
class ThreadView:
    """The thread's latest checkpoint (None: a new thread), read once per request.

    `orphaned`: the latest run was claimed by a resume under a new run id that never
    wrote a checkpoint (its process died in between). Its interrupts are still open:
    the person's answer was not acted on, and is asked for again."""

    latest: Checkpoint | None
    orphaned: bool = False

    @classmethod
    async def load(cls, checkpoints: CheckpointStore, thread_id: str) -> ThreadView:
        latest = await checkpoints.for_thread(thread_id)
        if latest is None or latest.status != "continued" or latest.continued_as is None:
            return cls(latest)
        try:
            await checkpoints.load(latest.continued_as)
        except NotFound:
            return cls(latest, orphaned=True)
        return cls(latest)

    @property
    def status(self) -> str | None:
        """The latest run's status, an orphaned continuation counting as `suspended`."""
        if self.latest is None:
            return None
        return "suspended" if self.orphaned else self.latest.status

    @property
    def paused(self) -> bool:
        """Its latest run waits for answers that can still be given."""
        latest = self.latest
        return (
            latest is not None
            and self.status == "suspended"
            and bool(open_interrupts(latest.state))
        )

    @property
    def taint(self) -> int:
        return self.latest.state.taint if self.latest is not None else 0

    def waiting_on_client(self) -> RunState | None:
        """The latest run's state if it ended waiting for the client's tools (the next
        request, which carries their results, continues that run's work)."""
        latest = self.latest
        if latest is not None and latest.status == "finished" and latest.state.client_calls:
            return latest.state
        return None

    def known_results(self) -> dict[str, ToolResult]:
        """Results the store holds for the thread's calls, by call id: every result in the
        latest run's transcript, those kept for its incomplete step, and an "expired"
        answer for each call whose interrupt lapsed."""
        if self.latest is None:
            return {}
        state = self.latest.state
        known: dict[str, ToolResult] = {}
        for message in state.messages:
            if isinstance(message, UserMessage):
                for result in message.tool_results:
                    known[result.call_id] = result
        for record in state.calls.values():
            if record.result is not None:
                known[record.call_id] = ToolResult(
                    call_id=record.call_id,
                    name=record.name,
                    content=record.result,
                    is_error=record.is_error,
                )
        if self.status == "suspended":
            now = datetime.now(UTC)
            names = {call.id: call.name for call in state.unanswered_calls()}
            for interrupt in state.interrupts:
                call_id = interrupt.get("toolCallId")
                if isinstance(call_id, str) and call_id in names and expired(interrupt, now):
                    question = interrupt.get("reason") == "question"
                    known[call_id] = ToolResult(
                        call_id=call_id,
                        name=names[call_id],
                        content=EXPIRED_QUESTION if question else EXPIRED_APPROVAL,
                        is_error=not question,
                    )
            # A subagent suspended in the run whose interrupt lapsed: its agent call is
            # what the thread's conversation holds, and it is answered "expired" too.
            lapsed = {
                interrupt.get("subagentRunId")
                for interrupt in state.interrupts
                if interrupt.get("subagentRunId") and expired(interrupt, now)
            }
            for call_id, child in state.children.items():
                if child.run_id in lapsed and call_id in names:
                    known[call_id] = ToolResult(
                        call_id=call_id,
                        name=names[call_id],
                        content=EXPIRED_APPROVAL,
                        is_error=True,
                    )
        return known
