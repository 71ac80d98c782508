"""A run as the API shows it (`GET /runs`, `GET /runs/{id}`): status, usage, interrupts."""

from __future__ import annotations

from typing import Any

from ..conversation import UserMessage
from ..store import Checkpoint

__all__ = ["run_summary"]

#: How much of a thread's first message names it in a list.
TITLE_CHARS = 80


def run_summary(checkpoint: Checkpoint, *, live: bool, brief: bool = False) -> dict[str, Any]:
    """The run's JSON view; `brief` leaves out what a list does not need."""
    state = checkpoint.state
    view: dict[str, Any] = {
        "runId": state.run_id,
        "threadId": state.thread_id,
        "status": checkpoint.status,
        "stopCause": state.stop_cause.value if state.stop_cause is not None else None,
        "step": state.step,
        "agent": state.agent_name,
        "live": live,
        # What a person calls the thread: its first message (the console names it so).
        "title": _title(checkpoint),
        # A resumed or finished run's old interrupts are answered: not open any more.
        "interrupts": state.interrupts if checkpoint.status == "suspended" else [],
    }
    if checkpoint.continued_as is not None:
        view["continuedAs"] = checkpoint.continued_as
    if brief:
        return view
    usage = state.usage
    view["usage"] = {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "totalTokens": usage.total_tokens,
        "complete": state.usage_complete,
    }
    view["costUsd"] = state.cost_usd
    view["error"] = state.error
    view["tasks"] = state.tasks
    view["clientCalls"] = state.client_calls
    return view


def _title(checkpoint: Checkpoint) -> str:
    """The first thing the person asked in the run's thread, on one line, cut to
    `TITLE_CHARS`; empty when the thread has no such message."""
    for message in checkpoint.state.messages:
        if isinstance(message, UserMessage) and message.text and not message.tool_results:
            line = " ".join(message.text.split())
            return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"
    return ""
