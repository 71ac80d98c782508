"""The runs a store holds, and where each stands: listed, and their uncertain calls."""

from __future__ import annotations

from ..conversation import ToolCall
from ..state import RunState
from ..store import DEFAULT_BUCKET, Bus, CallLog, Checkpoint, CheckpointStore, NotFound

__all__ = ["list_runs", "uncertain_calls"]


async def list_runs(store: Bus, *, bucket: str = DEFAULT_BUCKET) -> list[Checkpoint]:
    """Every checkpointed run in `bucket`, in the store's order (one deleted meanwhile is
    left out)."""
    checkpoints = CheckpointStore(store, bucket)
    found: list[Checkpoint] = []
    for run_id in await checkpoints.run_ids():
        try:
            found.append(await checkpoints.load(run_id))
        except NotFound:
            continue  # deleted meanwhile
    return found


def uncertain_calls(state: RunState, logs: dict[str, CallLog]) -> list[ToolCall]:
    """The run's open calls recorded as started and never completed: the process died
    while they ran, so whether their side effect happened is unknown (law 5). An agent
    call whose subagent is suspended is not among them: its subagent says where it stands."""
    return [
        call
        for call in state.unanswered_calls()
        if (log := logs.get(call.id)) is not None
        and log.status == "started"
        and call.id not in state.children
    ]
