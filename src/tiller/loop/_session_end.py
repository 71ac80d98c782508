"""`tell_session_end`: the session_end hooks hear how a run stopped, cancelled or not.

The hooks run in a task of their own that nobody cancels, so a cancellation of the run
(its token's, or one from outside) neither cuts them short nor leaves them running after
the run: it waits until they have ended, each bounded by its own timeout, and then goes
on (DESIGN.md, law 8), so the run's edge still sees it and the stream still gets its
terminal event.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from .._task_stop import wait_ended
from ..policy import HookSet
from ..state import RunState, StopCause

__all__ = ["tell_session_end"]


async def tell_session_end(
    hooks: HookSet, state: RunState, workspace: Path, cause: StopCause
) -> None:
    """Tell `hooks` that the run of `state` stopped for `cause` (their failures are
    logged); a cancellation meanwhile is raised once they have ended."""
    telling = asyncio.get_running_loop().create_task(
        hooks.session_end(
            run_id=state.run_id, thread_id=state.thread_id, workspace=workspace, stop_cause=cause
        ),
        name=f"tiller-session-end {state.run_id}",
    )
    await wait_ended(telling)
