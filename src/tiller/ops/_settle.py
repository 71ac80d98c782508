"""Records that outlived what they were about, settled so nothing waits on them."""

from __future__ import annotations

import contextlib

from ..conversation import ToolResult, UserMessage
from ..state import RunState, StopCause
from ..store import AlreadyDecided, ApprovalStore, CheckpointStore, StoreError

__all__ = ["CANCELLED_CALL", "close_cancelled", "expire_held"]

CANCELLED_CALL = "The run was cancelled before this call ran."


async def expire_held(approvals: ApprovalStore, run_id: str, reason: str) -> None:
    """Mark the run's pending held approvals expired, so they leave `tiller approvals
    list`: the run will never use them (it finished)."""
    for stale in await approvals.for_run(run_id):
        if stale.pending:
            with contextlib.suppress(AlreadyDecided):  # decided meanwhile: it stands
                await approvals.expire(stale.id, reason)


async def close_cancelled(checkpoints: CheckpointStore, state: RunState) -> None:
    """A cancelled run is over: its checkpoint says so, every call of its last step has
    its answer (law 1), and nothing of it is waiting any more. A store that cannot be
    reached leaves the checkpoint as the loop wrote it."""
    closed = state.model_copy(deep=True)
    open_calls = closed.unanswered_calls()
    if open_calls:
        closed.messages.append(
            UserMessage(
                tool_results=tuple(
                    _cancelled_result(closed, call.id, call.name) for call in open_calls
                )
            )
        )
    closed.stop_cause = StopCause.CANCELLED
    closed.interrupts = []
    closed.children = {}
    closed.client_calls = []
    with contextlib.suppress(StoreError):
        # Compare-and-set on what the loop left: a recovery or an approval that claimed
        # the run meanwhile wins. The thread's index is not touched.
        current = await checkpoints.load(closed.run_id)
        if current.status in ("running", "suspended"):
            await checkpoints.save(closed, "finished", expected=current.revision, index=False)


def _cancelled_result(state: RunState, call_id: str, name: str) -> ToolResult:
    """The call's recorded result if it ran, else that it never did."""
    record = state.calls.get(call_id)
    if record is not None and record.result is not None:
        return ToolResult(
            call_id=call_id, name=name, content=record.result, is_error=record.is_error
        )
    return ToolResult(call_id=call_id, name=name, content=CANCELLED_CALL, is_error=True)
