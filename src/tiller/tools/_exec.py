"""`ExecContext`: what one tool call receives.

A tool gets everything it may use through this one object (law 9: no globals): the call's
cancellation token, its id and turn, the jail, a way to report progress, and the run's
typed state. The loop builds one per call; a test builds one with
`ExecContext.for_test(workdir=tmp_path)` and needs nothing else.

Tools do not depend on the loop or on the AG-UI machinery. Progress goes out through an
injected `emit` callable (the run's `AgUiContext.emit`), and state through an injected
`StateAccess`, a two-member protocol that `AgUiContext` satisfies.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from ..cancel import CancellationToken
from ..errors import UsageError
from ..events import CustomEvent, Event
from ._jail import ToolCtx

__all__ = ["PROGRESS_EVENT", "ExecContext", "LocalState", "StateAccess"]

S = TypeVar("S")

#: The name of the `CUSTOM` event `ExecContext.progress` emits.
PROGRESS_EVENT = "tiller.tool_progress"


@runtime_checkable
class StateAccess(Protocol[S]):
    """Read and change a run's typed state. `AgUiContext` is one.

    `update_state(fn)` applies `fn` (which may change the state in place and return
    `None`, or return a new state) and publishes the change to the run's observers.
    """

    @property
    def state(self) -> S: ...

    def update_state(self, fn: Callable[[S], S | None]) -> None: ...


class LocalState(Generic[S]):
    """A `StateAccess` that only holds the state: for tests and runs without a UI.

    `updates` counts calls to `update_state`, so a test can check a tool published.
    """

    __slots__ = ("_state", "updates")

    def __init__(self, state: S) -> None:
        self._state = state
        self.updates = 0

    @property
    def state(self) -> S:
        return self._state

    def update_state(self, fn: Callable[[S], S | None]) -> None:
        result = fn(self._state)
        if result is not None:
            self._state = result
        self.updates += 1

    def __repr__(self) -> str:
        return f"LocalState({self._state!r})"


def _drop_event(event: Event) -> None:
    """The default emitter: a context built without a run has no one to tell."""


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecContext:
    """What one tool call receives. Declare a parameter of this type (any name) in a
    `@tool` function to get it; it is not part of the tool's schema.

    - `token`: the call's cancellation token. Async tools are interrupted through it
      (the registry runs each call inside `token.scope()`); a sync tool, which runs in a
      worker thread and cannot be interrupted, should call `token.check()` in long loops.
    - `call_id`, `turn`: which call this is, for progress and logs.
    - `workdir`: the jail root (`tools.root`), where relative paths start.
    - `tools`: the run's `ToolCtx`; file tools pass every path through `tools.resolve`.
    - `emit`: sends an AG-UI event into the run's stream (the run's `AgUiContext.emit`;
      it must accept calls from worker threads, which the sink does). By default events
      are dropped.
    - `state_access`: the run's typed state (see `state` and `update_state`).

    Room is left for what the tools issue adds, all with safe defaults so tests stay
    one-liners: a `background` token (detach long commands), `notify` (a channel that
    outlives the turn), `scratchpad` (a per-session directory), `safety_mode`, `goal`
    (for the classifier), the approval, question and task brokers, and the turn's shared
    web byte budget.
    """

    token: CancellationToken
    call_id: str
    turn: int
    workdir: Path
    tools: ToolCtx
    emit: Callable[[Event], object] = _drop_event
    state_access: StateAccess[Any] = field(default_factory=lambda: LocalState({}))
    # The loop this context was built on, so a sync tool in a worker thread can hand
    # state changes back to it.
    _loop: asyncio.AbstractEventLoop | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "_loop", _running_loop())

    @classmethod
    def for_test(
        cls,
        workdir: str | os.PathLike[str],
        *,
        call_id: str = "call-test",
        turn: int = 1,
        token: CancellationToken | None = None,
        tools: ToolCtx | None = None,
        emit: Callable[[Event], object] | None = None,
        state: Any = None,
        state_access: StateAccess[Any] | None = None,
    ) -> ExecContext:
        """A context with safe defaults: a fresh token, a `ToolCtx` over `workdir` with
        default limits, events dropped, and a `LocalState` holding `state` (default `{}`).

        Pass `state_access` (an `AgUiContext`) or `emit` to observe what a tool publishes.
        """
        if tools is None:
            tools = ToolCtx(workdir)
        if state_access is None:
            state_access = LocalState({} if state is None else state)
        return cls(
            token=token if token is not None else CancellationToken(),
            call_id=call_id,
            turn=turn,
            workdir=tools.root,
            tools=tools,
            emit=emit if emit is not None else _drop_event,
            state_access=state_access,
        )

    # ── progress ─────────────────────────────────────────────────────────────────

    def progress(self, message: str, fraction: float | None = None) -> None:
        """Tell the run's observers how this call is doing.

        Emits `CUSTOM` `tiller.tool_progress` with `{"toolCallId", "message"}` and, when
        given, `"fraction"` (0 to 1). Callable from async tools and from sync tools in
        worker threads. Raises `Cancelled` if the run was cancelled, like any emit.
        """
        if fraction is not None and not 0.0 <= fraction <= 1.0:
            raise UsageError(f"progress fraction must be between 0 and 1, not {fraction}")
        value: dict[str, Any] = {"toolCallId": self.call_id, "message": message}
        if fraction is not None:
            value["fraction"] = fraction
        self.emit(CustomEvent(name=PROGRESS_EVENT, value=value))

    # ── state ────────────────────────────────────────────────────────────────────

    @property
    def state(self) -> Any:
        """The run's typed state, to read. Change it only through `update_state`, so
        observers see the change."""
        return self.state_access.state

    def update_state(self, fn: Callable[[Any], Any]) -> None:
        """Apply `fn` to the run's state and publish the change.

        `fn` may change the state in place and return `None`, or return a new state.
        From a sync tool's worker thread, `fn` runs on the run's event loop and this call
        waits for it, so the state is never changed from two threads at once.
        """
        loop = self._loop
        if loop is None or _running_loop() is loop or not loop.is_running():
            self.state_access.update_state(fn)
            return
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def apply() -> None:
            try:
                self.state_access.update_state(fn)
            except BaseException as exc:  # handed back to the calling thread
                done.set_exception(exc)
            else:
                done.set_result(None)

        try:
            loop.call_soon_threadsafe(apply)
        except RuntimeError:  # the loop closed meanwhile: no one else touches the state
            self.state_access.update_state(fn)
            return
        done.result()
