"""`OutboxRoute`: which tools of a run are staged in the outbox instead of executed.

A routed call passes the pre_tool hooks and is then *staged*: recorded in the store's
outbox (`tiller-outbox`) with its arguments as drafted, the conversation's taint and the
workspace, and the model is told the draft awaits a person's release — it must not
report it as done. Staging sends nothing, so the interlock is not consulted here; a
person releasing the draft (`tiller outbox send`) re-checks it. A staging failure never
executes the tool (law 3).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..conversation import Taint, ToolCall
from ..errors import UsageError
from ..store import OUTBOX_BUCKET, Bus, OutboxStore

__all__ = ["OutboxRoute"]


@dataclass(frozen=True, slots=True, init=False)
class OutboxRoute:
    """Route the tools named `tools` to the outbox of the run's store."""

    tools: frozenset[str]
    bucket: str

    def __init__(self, tools: Iterable[str], *, bucket: str = OUTBOX_BUCKET) -> None:
        names = frozenset(tools)
        if not names:
            raise UsageError("an outbox route needs at least one tool name")
        object.__setattr__(self, "tools", names)
        object.__setattr__(self, "bucket", bucket)

    def routes(self, tool_name: str) -> bool:
        return tool_name in self.tools

    async def stage(
        self,
        call: ToolCall,
        *,
        run_id: str,
        thread_id: str,
        taint: Taint,
        workspace: Path,
        store: Bus | None,
    ) -> str:
        """Stage `call`; returns the outbox item's id. Raises when it cannot be staged."""
        if store is None:
            raise UsageError("the run has no store to keep the outbox in (RunContext.with_store)")
        item = await OutboxStore(store, self.bucket).stage(
            call, run_id=run_id, thread_id=thread_id, taint=taint, workspace=str(workspace)
        )
        return item.id
