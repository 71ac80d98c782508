"""The run driver: `run_agent(agent, input)` turns one agent run into one valid stream.

The stream always starts with `RUN_STARTED` (with `protocolVersion`) and ends with exactly
one terminal event:

- the agent returns an outcome (None means success): `RUN_FINISHED{outcome}`;
- it returns an interrupt outcome: `STATE_SNAPSHOT`, the agent's `interrupt_messages` as
  `MESSAGES_SNAPSHOT` if it set them, then `RUN_FINISHED{interrupt}`;
- it is cancelled (its token fired, or the consumer left): what was open is closed, then
  `RUN_FINISHED{cancelled}`; but `RUN_ERROR{CANCELLED}` if a tool call's streamed
  arguments never became JSON (that call can get no valid `TOOL_CALL_END`);
- it raises: `RUN_ERROR` with a code (`AGENT_ERROR`, `PROTOCOL_VIOLATION`,
  `SERIALIZATION`, `INVALID_RESUME`);
- it finishes with something still open: `RUN_ERROR{PROTOCOL_VIOLATION}` naming the rule;
- it emitted its own terminal event: nothing more.

Iterating the stream runs the agent (in a task of its own, so events flow while it
works); leaving the iteration early (`aclose()`, a client disconnect) cancels the run
through the run's own child token, never a shared one, and waits for it to unwind.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..cancel import CancellationToken
from ..errors import (
    Cancelled,
    InvalidResume,
    ProtocolViolation,
    StateDecodeError,
    UsageError,
)
from ._context import AgUiContext, decode_state, parse_input
from ._handles import ToolCallHandle
from ._outcome import RunOutcome
from ._sink import EventSink, Subscription, Transformer
from ._types import Event, RunErrorEvent, RunFinishedEvent, RunStartedEvent

if TYPE_CHECKING:  # the AG-UI models load when a run parses its input (`parse_input`)
    from ag_ui.core import RunAgentInput

__all__ = ["AgUiAgent", "RunStream", "StreamConsumed", "run_agent"]

PROTOCOL_VERSION = "1.0"


@runtime_checkable
class AgUiAgent(Protocol):
    """Anything with `async run(ctx) -> RunOutcome | None`; `state_type` is optional."""

    async def run(self, ctx: AgUiContext[Any]) -> RunOutcome | None: ...


AgentLike = AgUiAgent | Callable[[AgUiContext[Any]], Awaitable[RunOutcome | None]]


class StreamConsumed(UsageError):
    """A run stream was iterated a second time; each run's events can be read once."""


class _State(enum.Enum):
    UNOPENED = "unopened"
    OPENED = "opened"
    CLOSED = "closed"


def run_agent(
    agent: AgentLike,
    input: RunAgentInput | Mapping[str, Any],
    *,
    state_type: type[Any] | None = None,
    transformers: Sequence[Transformer] = (),
    cancel: CancellationToken | None = None,
    echo_input: bool = False,
    verify: bool = True,
    listeners: Sequence[Callable[[Event], object]] = (),
) -> RunStream:
    """Run `agent` on `input` and stream its AG-UI events.

    `cancel` may be shared (a batch); the run works under its own child of it. The
    agent's state type is `state_type`, else the agent's `state_type` attribute, else
    plain JSON. `listeners` see every event synchronously as it is emitted
    (`EventSink.listen`).
    """
    return RunStream(
        agent,
        parse_input(input),
        state_type=state_type if state_type is not None else getattr(agent, "state_type", None),
        transformers=transformers,
        cancel=cancel,
        echo_input=echo_input,
        verify=verify,
        listeners=listeners,
    )


class RunStream:
    """The events of one run: an async iterator and an async context manager.

    ```python
    async with run_agent(agent, input) as events:
        async for event in events:
            ...
    ```
    """

    def __init__(
        self,
        agent: AgentLike,
        input: RunAgentInput,
        *,
        state_type: type[Any] | None,
        transformers: Sequence[Transformer],
        cancel: CancellationToken | None,
        echo_input: bool,
        verify: bool,
        listeners: Sequence[Callable[[Event], object]] = (),
    ) -> None:
        self._listeners = tuple(listeners)
        self._agent = agent
        self._input = input
        self._state_type = state_type
        self._transformers = transformers
        self._echo_input = echo_input
        self._verify = verify
        #: The run's own token: cancelling it stops this run only.
        self.cancel = cancel.child() if cancel is not None else CancellationToken()
        self._state = _State.UNOPENED
        self._task: asyncio.Task[None] | None = None
        self._subscription: Subscription | None = None
        self.context: AgUiContext[Any] | None = None

    # ── iteration ────────────────────────────────────────────────────────────────

    def __aiter__(self) -> RunStream:
        if self._state is _State.CLOSED:
            raise StreamConsumed("this run's events were already read; start a new run")
        return self

    async def __anext__(self) -> Event:
        if self._state is _State.UNOPENED:
            self._start()
        if self._state is _State.CLOSED or self._subscription is None:
            raise StopAsyncIteration
        try:
            return await self._subscription.__anext__()
        except StopAsyncIteration:
            await self._finish()
            raise
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Stop reading: cancels the run if it is still going, and waits for it to unwind."""
        if self._state is _State.OPENED:
            self.cancel.cancel("the stream's consumer went away")
        await self._finish()

    async def __aenter__(self) -> RunStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def collect(self) -> list[Event]:
        """Read the whole stream into a list."""
        return [event async for event in self]

    # ── the run ──────────────────────────────────────────────────────────────────

    def _start(self) -> None:
        self._state = _State.OPENED
        sink = EventSink(cancel=self.cancel, transformers=self._transformers, verify=self._verify)
        self._subscription = sink.subscribe(maxsize=None)
        for listener in self._listeners:
            sink.listen(listener)
        sink.emit_forced(
            RunStartedEvent(
                self._input.thread_id,
                self._input.run_id,
                self._input.parent_run_id,
                input=self._input if self._echo_input else None,
                protocol_version=PROTOCOL_VERSION,
            )
        )
        try:
            state = decode_state(self._input.state, self._state_type)
        except StateDecodeError as exc:
            sink.emit_forced(RunErrorEvent(str(exc), "SERIALIZATION"))
            return
        self.context = AgUiContext(self._input, sink=sink, state=state)
        self._task = asyncio.get_running_loop().create_task(
            self._drive(self.context), name=f"tiller-run-{self._input.run_id}"
        )

    async def _finish(self) -> None:
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        task = self._task
        if task is not None and not task.done():
            try:
                await task
            except asyncio.CancelledError:
                # Our own consumer is being cancelled: let that propagate, but only after
                # the run has unwound so nothing outlives the stream.
                if not task.done():
                    task.cancel()
                raise
        if self._subscription is not None:
            self._subscription.close()

    async def _drive(self, ctx: AgUiContext[Any]) -> None:
        try:
            await self._drive_agent(ctx)
        finally:
            # Whatever happened (even an outside cancellation of this task), the stream
            # gets its one terminal event, so no reader waits forever.
            self._error(ctx.sink, "the run was stopped", "CANCELLED")

    async def _drive_agent(self, ctx: AgUiContext[Any]) -> None:
        sink = ctx.sink
        try:
            with self.cancel.scope():
                outcome = await _call(self._agent, ctx)
        except Cancelled:
            self._finish_cancelled(ctx)
            return
        except ProtocolViolation as exc:
            self._error(sink, str(exc), "PROTOCOL_VIOLATION")
            return
        except StateDecodeError as exc:
            self._error(sink, str(exc), "SERIALIZATION")
            return
        except InvalidResume as exc:
            self._error(sink, str(exc), "INVALID_RESUME")
            return
        except Exception as exc:
            code = getattr(exc, "agui_code", None)
            if code is not None:  # an error that names its own code says what it means
                self._error(sink, str(exc), str(code), ctx.run_usage)
            else:
                self._error(sink, f"{type(exc).__name__}: {exc}", "AGENT_ERROR", ctx.run_usage)
            return
        if sink.terminated:
            return  # the agent sent its own terminal event
        if self.cancel.is_cancelled:
            # The agent caught the cancellation and returned anyway: the run was still
            # cancelled, and says so (an interrupt or success now would be a lie).
            self._finish_cancelled(ctx)
            return
        if outcome is None:
            outcome = RunOutcome.success()
        if not isinstance(outcome, RunOutcome):
            self._error(
                sink,
                f"the agent returned {type(outcome).__name__}; return a RunOutcome or None",
                "AGENT_ERROR",
            )
            return
        if outcome.kind == "cancelled":
            self._finish_cancelled(ctx)
            return
        try:
            if outcome.kind == "interrupt":
                # The interrupt contract: state before the pausing RUN_FINISHED.
                ctx.reset_state_stream()
                ctx.publish_state()
                if ctx.interrupt_messages is not None:
                    ctx.messages_snapshot(ctx.interrupt_messages)
            sink.emit_forced(
                RunFinishedEvent(
                    ctx.thread_id,
                    ctx.run_id,
                    result=ctx.run_result,
                    outcome=outcome.to_wire(),
                    usage=ctx.run_usage,
                )
            )
        except ProtocolViolation as exc:
            self._error(sink, str(exc), "PROTOCOL_VIOLATION")

    def _finish_cancelled(self, ctx: AgUiContext[Any]) -> None:
        """Close what the agent left open, then end as cancelled (law 2)."""
        sink = ctx.sink
        if sink.terminated:
            return
        unclosable = False
        for handle in ctx.open_handles():
            if isinstance(handle, ToolCallHandle) and not handle.args_parse():
                unclosable = True  # no valid TOOL_CALL_END exists for it
                continue
            # A refusal here means another thread closed it meanwhile; what is still
            # open is judged below, from the verifier's own books.
            with contextlib.suppress(ProtocolViolation):
                handle._close_for_cancel()
        if unclosable or (sink.verifier is not None and sink.verifier.open_items()):
            self._error(sink, "the run was cancelled", "CANCELLED")
            return
        try:
            sink.emit_forced(
                RunFinishedEvent(
                    ctx.thread_id,
                    ctx.run_id,
                    outcome=RunOutcome.cancelled().to_wire(),
                    usage=ctx.run_usage,
                )
            )
        except ProtocolViolation:
            self._error(sink, "the run was cancelled", "CANCELLED")

    @staticmethod
    def _error(
        sink: EventSink, message: str, code: str, usage: list[dict[str, Any]] | None = None
    ) -> None:
        if not sink.terminated:
            sink.emit_terminal(RunErrorEvent(message, code, usage))


async def _call(agent: AgentLike, ctx: AgUiContext[Any]) -> RunOutcome | None:
    run = getattr(agent, "run", None)
    target = run if run is not None and inspect.iscoroutinefunction(run) else agent
    if not callable(target):
        raise UsageError("an agent is an object with `async run(ctx)` or an async function")
    return await target(ctx)
