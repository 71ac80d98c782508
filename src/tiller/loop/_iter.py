"""`AgentRun`: one run, step by step — what `agent.iter(...)` returns.

```python
async with agent.iter("fix the failing test", workspace=repo) as run:
    async for step in run:
        print(step)            # ModelTurn(number=1), Dispatch(calls=(...)), ...
        if isinstance(step, Dispatch) and looks_wrong(step.calls):
            break              # the run is cancelled before it takes this step
print(run.result.stop_cause)
```

Each step is yielded *before* the loop takes it, and the loop waits until the caller asks
for the next one: between two steps, `run.state` is the run's `RunState` as the step
boundary left it, and nothing moves. Leaving the `async with` block before the run's
`Finish` cancels the run (the step it was waiting to take never happens; law 8 keeps
what was produced) and `run.result` says `cancelled`; an exception in the block does the
same and then propagates. The run itself is the one `agent.run` makes — the same events,
checkpoints and result — in a task of its own. The steps are the run's own: a subagent it
starts is one call of a `Dispatch`, and its steps are not yielded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any

from ..cancel import CancellationToken
from ..errors import UsageError
from ..state import RunState
from ._result import RunResult
from ._steps import Finish, Step

__all__ = ["AgentRun"]

#: Starts the run with the watcher it calls before each step (and the run's state).
StartRun = Callable[[Callable[[Step, RunState], Awaitable[None]]], Coroutine[Any, Any, RunResult]]


class AgentRun:
    """One run of an agent that a caller drives step by step (see the module docstring)."""

    def __init__(self, start: StartRun, stop: CancellationToken) -> None:
        self._start = start
        #: Cancels this run only (a child of the caller's token, when there is one).
        self._stop = stop
        self._task: asyncio.Task[RunResult] | None = None
        #: Steps the loop is waiting to take, then None when the run has ended.
        self._steps: asyncio.Queue[Step | None] = asyncio.Queue()
        self._go = asyncio.Event()
        #: The caller stopped driving: the loop takes its steps without waiting.
        self._released = False
        self._last: Step | None = None
        self._result: RunResult | None = None
        self.state: RunState | None = None

    async def __aenter__(self) -> AgentRun:
        if self._task is not None:
            raise UsageError("this run was already started; call agent.iter(...) again")
        self._task = asyncio.get_running_loop().create_task(self._start(self._watch))
        self._task.add_done_callback(lambda _: self._steps.put_nowait(None))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        task = self._task
        if task is None:
            return
        self._released = True
        if not task.done() and not isinstance(self._last, Finish):
            self._stop.cancel("the caller stopped iterating the run")
        self._go.set()
        # The run answers a cancel with a cancelled result; it is awaited even when the
        # block is left by an exception, so the run never outlives the block.
        self._result = await task

    def __aiter__(self) -> AgentRun:
        return self

    async def __anext__(self) -> Step:
        if self._task is None:
            raise UsageError("iterate the run inside `async with agent.iter(...) as run`")
        if self._last is not None:
            self._go.set()  # the loop takes the step the caller has seen
        step = await self._steps.get()
        if step is None:
            self._steps.put_nowait(None)  # a later `anext` ends too
            self._result = await self._task
            self._last = None
            raise StopAsyncIteration
        self._last = step
        return step

    @property
    def result(self) -> RunResult:
        """The run's result, once it ended (iterated to its end, or the block left)."""
        if self._result is None:
            raise UsageError(
                "the run has not ended: iterate it to its Finish, or leave the "
                "`async with agent.iter(...)` block (which cancels it)"
            )
        return self._result

    async def _watch(self, step: Step, state: RunState) -> None:
        """Called by the loop before it takes `step`: wait until the caller asks for more."""
        self.state = state
        if self._released:
            return
        self._go.clear()
        self._steps.put_nowait(step)
        await self._go.wait()
