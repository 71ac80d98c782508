"""A run as the API shows it (`GET /runs`, `GET /runs/{id}`): status, usage, interrupts."""

from __future__ import annotations

from typing import Any

from ..store import Checkpoint

__all__ = ["run_summary"]


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
