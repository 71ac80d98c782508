"""A cancelled call waits (a moment) for its sync tool's worker thread, so what the tool
did is done before the call is reported cancelled, not after."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from tiller.cancel import CancellationToken
from tiller.conversation import ToolCall
from tiller.errors import Cancelled
from tiller.tools import ExecContext, Registry, tool


async def test_the_worker_thread_finishes_before_cancelled_is_reported(tmp_path: Path) -> None:
    started = threading.Event()
    release = threading.Event()

    @tool
    def slow_write(ctx: ExecContext) -> str:
        """Write a file, slowly."""
        started.set()
        release.wait(10)
        (ctx.workdir / "written.txt").write_text("done")
        return "written"

    token = CancellationToken()
    ctx = ExecContext.for_test(tmp_path, token=token)
    call = asyncio.ensure_future(
        Registry([slow_write]).execute(ToolCall(id="c", name="slow_write"), ctx)
    )
    await asyncio.to_thread(started.wait, 10)
    # The thread goes on a little after the cancel, as a real tool would until it checks.
    threading.Timer(0.2, release.set).start()
    token.cancel("stop")
    with pytest.raises(Cancelled):
        await call
    assert (tmp_path / "written.txt").read_text() == "done"  # finished before we heard


async def test_a_call_cancelled_before_its_worker_thread_started_never_runs(
    tmp_path: Path,
) -> None:
    """A call whose thread had not picked it up when it was cancelled is answered as
    cancelled at once, and the function does not run later behind the run's back."""
    from concurrent.futures import ThreadPoolExecutor

    ran: list[str] = []

    @tool
    def write(ctx: ExecContext) -> str:
        """Write."""
        ran.append("ran")
        return "written"

    async def scenario() -> None:
        pool = ThreadPoolExecutor(max_workers=1)  # a loop of its own: its one thread busy
        asyncio.get_running_loop().set_default_executor(pool)
        release = threading.Event()
        busy = asyncio.get_running_loop().run_in_executor(None, release.wait, 10)
        token = CancellationToken()
        ctx = ExecContext.for_test(tmp_path, token=token)
        call = asyncio.ensure_future(Registry([write]).execute(ToolCall(id="c", name="write"), ctx))
        await asyncio.sleep(0.05)  # queued behind the busy thread
        token.cancel("stop")
        with pytest.raises(Cancelled):
            await call
        release.set()
        await busy
        pool.shutdown(wait=True)  # whatever was queued has run, or never will

    await asyncio.to_thread(asyncio.run, scenario())
    assert ran == []


async def test_a_sync_tool_that_raises_stop_iteration_fails_instead_of_hanging(
    tmp_path: Path,
) -> None:
    # `next(x for x in items if ...)` with nothing found raises StopIteration. A future
    # refuses to carry it (TypeError in the loop's callback), so the call waited forever.
    @tool
    def first_match() -> str:
        """Find the first match."""
        return next(name for name in ["a", "b"] if name == "z")

    ctx = ExecContext.for_test(tmp_path)
    async with asyncio.timeout(30):  # hang guard only
        execution = await Registry([first_match]).execute(ToolCall(id="c", name="first_match"), ctx)
    assert execution.result.is_error
    assert "StopIteration" in execution.result.content, execution.result.content
