"""Emitter handles: a bracket that opens when created and always closes.

Each handle emits its start event on creation and its end event on `end()` (or the
matching verb), and works both explicitly and as a context manager (`with` or
`async with`), so interleaved tool-call streams can be written by hand while the common
case cannot leave a bracket open. Leaving a `with` block by an exception still closes
the bracket; the exception goes on.

A handle remembers the subagent that owned it when it opened and tags every later event
with that owner, so continuing a message from another task never misattributes it.
`end()` on a closed handle does nothing; sending content through it raises
`HandleClosed`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, cast

import orjson
from pydantic import BaseModel, TypeAdapter, ValidationError

from ..errors import Cancelled, HandleClosed, InvalidToolArguments, TillerError
from ._sink import SCOPE, SubagentScope
from ._types import (
    Event,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    jsonable,
)

if TYPE_CHECKING:
    from ._context import AgUiContext

__all__ = [
    "MessageHandle",
    "ReasoningHandle",
    "StepHandle",
    "SubagentHandle",
    "ToolCallHandle",
]

_M = TypeVar("_M")
_H = TypeVar("_H", bound="_Handle")


def _current_task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop: a synchronous test or a worker thread
        return None


class _Handle:
    """What every handle shares: its context, its owner, open/closed, the `with` protocol."""

    __slots__ = ("_closed", "_ctx", "_owner", "_task")

    def __init__(self, ctx: AgUiContext[Any]) -> None:
        self._ctx = ctx
        self._owner = ctx.subagent_run_id()
        self._closed = False
        self._task = _current_task()

    @property
    def ctx(self) -> AgUiContext[Any]:
        """The run's context, for state updates or raw emits from inside the bracket."""
        return self._ctx

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def owner(self) -> str | None:
        """The subagent run id this handle's events are attributed to (None: the agent)."""
        return self._owner

    def _emit(self, event: Event) -> None:
        self._ctx.sink.emit(event, attribute=False)

    def _opened(self) -> None:
        self._ctx._handle_opened(self)

    def _open_with(self, *starts: Event) -> None:
        """Register, then emit the start event(s). Registering first matters when a worker
        thread opens a handle while the run is being cancelled: the driver must see every
        handle whose start went out, or it would leave it open."""
        self._opened()
        try:
            for start in starts:
                self._emit(start)
        except BaseException:
            self._ctx._handle_closed(self)
            raise

    def _mark_closed(self) -> None:
        self._closed = True
        self._ctx._handle_closed(self)

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise HandleClosed(f"cannot {what}: {self!r} is already closed")

    def _close_on_exit(self, exc: BaseException | None) -> None:
        """Close the bracket when a `with` block ends; `exc` is what ended it, if anything."""
        raise NotImplementedError

    def _close_for_cancel(self) -> bool:
        """Close the bracket after a cancel; False if it cannot be closed validly."""
        self._close_on_exit(Cancelled())
        return self._closed

    def __enter__(self: _H) -> _H:
        return self

    def _close_inner(self, exc: BaseException) -> None:
        """On an exception, first close what this task opened inside this bracket and left
        open, innermost first, so brackets nest in the stream as they did in the code."""
        handles = list(self._ctx._open_handles.values())
        try:
            inner = handles[handles.index(self) + 1 :]
        except ValueError:
            return
        for handle in reversed(inner):
            if handle._task is self._task and not handle._closed:
                try:
                    handle._close_on_exit(exc)
                except TillerError:
                    continue  # the exception already unwinding is the story

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc is not None and not self._closed:
                self._close_inner(exc)
            self._close_on_exit(exc)
        except TillerError:
            if exc is None:
                raise
            # Closing failed while another exception unwinds: that one is the story.

    async def __aenter__(self: _H) -> _H:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


class MessageHandle(_Handle):
    """A streamed text message: `TEXT_MESSAGE_START`, `delta`s, `TEXT_MESSAGE_END`."""

    __slots__ = ("id", "role")

    def __init__(
        self, ctx: AgUiContext[Any], message_id: str, role: str, name: str | None = None
    ) -> None:
        super().__init__(ctx)
        self.id = message_id
        self.role = role
        self._open_with(TextMessageStartEvent(message_id, role, name, subagent_run_id=self._owner))

    def delta(self, text: str) -> None:
        """Append text. An empty string sends nothing (clients warn on empty deltas)."""
        self._check_open("add text")
        if text:
            self._emit(TextMessageContentEvent(self.id, text, subagent_run_id=self._owner))

    def end(self) -> None:
        """Close the message; does nothing if it is already closed."""
        if self._closed:
            return
        self._emit(TextMessageEndEvent(self.id, subagent_run_id=self._owner))
        self._mark_closed()

    def _close_on_exit(self, exc: BaseException | None) -> None:
        self.end()

    def __repr__(self) -> str:
        return f"MessageHandle(id={self.id!r}, role={self.role!r})"


class ReasoningHandle(_Handle):
    """A reasoning block: `REASONING_START` + `REASONING_MESSAGE_START`, deltas, and the
    two matching ends. `encrypted_value` carries a provider's opaque reasoning artefact."""

    __slots__ = ("id",)

    def __init__(self, ctx: AgUiContext[Any], message_id: str) -> None:
        super().__init__(ctx)
        self.id = message_id
        self._open_with(ReasoningStartEvent(message_id, subagent_run_id=self._owner))
        try:
            self._emit(ReasoningMessageStartEvent(message_id, subagent_run_id=self._owner))
        except TillerError:
            # Keep the stream closed-by-construction even if the second start is refused.
            self._ctx._handle_closed(self)
            self._emit(ReasoningEndEvent(message_id, subagent_run_id=self._owner))
            raise

    def delta(self, text: str) -> None:
        """Append reasoning text; an empty string sends nothing."""
        self._check_open("add reasoning")
        if text:
            self._emit(ReasoningMessageContentEvent(self.id, text, subagent_run_id=self._owner))

    def encrypted_value(self, value: str) -> None:
        """Attach the provider's encrypted reasoning for this block."""
        self._check_open("attach an encrypted value")
        self._emit(
            ReasoningEncryptedValueEvent("message", self.id, value, subagent_run_id=self._owner)
        )

    def end(self) -> None:
        """Close the block (both brackets); does nothing if already closed."""
        if self._closed:
            return
        self._emit(ReasoningMessageEndEvent(self.id, subagent_run_id=self._owner))
        self._emit(ReasoningEndEvent(self.id, subagent_run_id=self._owner))
        self._mark_closed()

    def _close_on_exit(self, exc: BaseException | None) -> None:
        self.end()

    def __repr__(self) -> str:
        return f"ReasoningHandle(id={self.id!r})"


class ToolCallHandle(_Handle):
    """A tool call: `TOOL_CALL_START`, argument fragments, `TOOL_CALL_END`, then optionally
    `TOOL_CALL_RESULT`.

    `end()` alone leaves the call for someone else to answer (a frontend tool); `result()`
    ends the call if needed and sends the result. The result's message id is allocated when
    the call opens, so it is known before the tool runs.

    If a `with` block is left by an exception while the streamed arguments are not JSON,
    the call gets no `TOOL_CALL_END` (that would be invalid); the run then ends with
    `RUN_ERROR`, which needs nothing closed.
    """

    __slots__ = ("_args", "_ended", "_result_sent", "id", "name", "result_message_id")

    def __init__(
        self,
        ctx: AgUiContext[Any],
        call_id: str,
        name: str,
        parent_message_id: str | None = None,
    ) -> None:
        super().__init__(ctx)
        verifier = ctx.sink.verifier
        if parent_message_id is not None and verifier is not None:
            # A call belongs to whoever owns its message (the verifier checks the same).
            self._owner = verifier.message_owner(parent_message_id) or self._owner
        self.id = call_id
        self.name = name
        self.result_message_id = ctx.new_message_id()
        self._args: list[str] = []
        self._ended = False
        self._result_sent = False
        self._open_with(
            ToolCallStartEvent(call_id, name, parent_message_id, subagent_run_id=self._owner)
        )

    @property
    def raw_args(self) -> str:
        """The argument fragments streamed so far, joined."""
        return "".join(self._args)

    @property
    def ended(self) -> bool:
        """True once `TOOL_CALL_END` went out (a result may still follow)."""
        return self._ended

    def args_parse(self) -> bool:
        """Whether the arguments so far are valid JSON (no arguments at all counts)."""
        text = self.raw_args
        if not text:
            return True
        try:
            orjson.loads(text)
        except orjson.JSONDecodeError:
            return False
        return True

    def args(self, delta: str) -> None:
        """Stream one fragment of the JSON arguments; an empty fragment sends nothing."""
        self._check_open("stream arguments")
        if self._ended:
            raise HandleClosed(f"cannot stream arguments: tool call {self.id} already ended")
        if delta:
            self._emit(ToolCallArgsEvent(self.id, delta, subagent_run_id=self._owner))
            self._args.append(delta)

    def args_json(self, value: Any) -> None:
        """Send a whole argument value as one JSON fragment."""
        self.args(orjson.dumps(jsonable(value)).decode())

    def parse_args(self, model: type[_M]) -> _M:
        """Validate the arguments into `model` (a pydantic model or any type pydantic knows).

        No arguments parse as `{}`. Invalid arguments raise `InvalidToolArguments`, whose
        message can be handed back to the model.
        """
        text = self.raw_args or "{}"
        try:
            if isinstance(model, type) and issubclass(model, BaseModel):
                return cast(_M, model.model_validate_json(text))
            return TypeAdapter(model).validate_json(text)
        except ValidationError as exc:
            raise InvalidToolArguments(self.name, str(exc)) from exc

    def encrypted_value(self, value: str) -> None:
        """Attach the provider's encrypted reasoning for this call."""
        self._check_open("attach an encrypted value")
        self._emit(
            ReasoningEncryptedValueEvent("tool-call", self.id, value, subagent_run_id=self._owner)
        )

    def end(self) -> None:
        """Send `TOOL_CALL_END` (the verifier refuses it if the arguments are not JSON)."""
        if self._ended or self._closed:
            return
        self._emit(ToolCallEndEvent(self.id, subagent_run_id=self._owner))
        self._ended = True
        self._mark_closed()

    def result(self, content: Any) -> str:
        """End the call if needed, send its result, and return the result's message id.

        `content` is sent as is when it is a string, else as its JSON encoding.
        """
        if self._result_sent:
            raise HandleClosed(f"tool call {self.id} already has a result")
        self.end()
        text = content if isinstance(content, str) else orjson.dumps(jsonable(content)).decode()
        self._emit(
            ToolCallResultEvent(self.result_message_id, self.id, text, subagent_run_id=self._owner)
        )
        self._result_sent = True
        return self.result_message_id

    def _close_on_exit(self, exc: BaseException | None) -> None:
        if self._ended or self._closed:
            return
        if exc is not None and not self.args_parse():
            return  # no valid TOOL_CALL_END exists for these arguments; the run must error
        self.end()

    def __repr__(self) -> str:
        return f"ToolCallHandle(id={self.id!r}, name={self.name!r})"


class StepHandle(_Handle):
    """A named step: `STEP_STARTED` … `STEP_FINISHED`."""

    __slots__ = ("name",)

    def __init__(self, ctx: AgUiContext[Any], name: str) -> None:
        super().__init__(ctx)
        self.name = name
        self._open_with(StepStartedEvent(name, subagent_run_id=self._owner))

    def end(self) -> None:
        """Finish the step; does nothing if already finished."""
        if self._closed:
            return
        self._emit(StepFinishedEvent(self.name, subagent_run_id=self._owner))
        self._mark_closed()

    finish = end

    def _close_on_exit(self, exc: BaseException | None) -> None:
        self.end()

    def __repr__(self) -> str:
        return f"StepHandle(name={self.name!r})"


class SubagentHandle(_Handle):
    """A subagent's segment of the run, from `SUBAGENT_STARTED` to `SUBAGENT_FINISHED` or
    `SUBAGENT_ERROR`.

    From the moment it opens, events emitted by this task (and tasks it starts) that
    carry no attribution are attributed to it, nested subagents get it as their
    `parentSubagentRunId`, and other tasks are unaffected: attribution follows the task.
    A `with` block left by an exception fails the subagent; left normally, finishes it.
    """

    __slots__ = ("_scope", "_token", "id", "name")

    def __init__(self, ctx: AgUiContext[Any], started: SubagentStartedEvent) -> None:
        super().__init__(ctx)
        parent = ctx.sink.current_scope()
        if started.parent_subagent_run_id is None and parent is not None:
            started.parent_subagent_run_id = parent.subagent_run_id
        self.id = started.subagent_run_id
        self.name = started.name
        self._scope = SubagentScope(ctx.sink, self.id, parent)
        self._open_with(started)
        self._token = SCOPE.set(self._scope)

    def finish(self) -> None:
        """The subagent completed."""
        self._close(SubagentFinishedEvent(self.id))

    def finish_with(self, result: Any) -> None:
        """The subagent completed with a result (any JSON value)."""
        self._close(SubagentFinishedEvent(self.id, result=jsonable(result)))

    def fail(self, message: str = "the subagent failed") -> None:
        """The subagent failed; the run may go on."""
        self._close(SubagentErrorEvent(self.id, message))

    def fail_with_code(self, message: str, code: str) -> None:
        """The subagent failed with a machine-readable code."""
        self._close(SubagentErrorEvent(self.id, message, code))

    def suspend(self, interrupt_ids: Sequence[str] = ()) -> None:
        """The subagent is paused for the run's interrupts; a later run continues it under
        the same subagent run id. An ancestor of the interrupting subagent passes none."""
        outcome = {"type": "suspended", "interruptIds": list(interrupt_ids)}
        self._close(SubagentFinishedEvent(self.id, outcome=outcome))

    def _close(self, event: Event) -> None:
        if self._closed:
            return
        self._emit(event)
        self._scope.closed = True
        self._mark_closed()
        try:
            SCOPE.reset(self._token)
        except (ValueError, RuntimeError, AttributeError):
            # Closed from another task, out of order, or (by the driver, on a cancel) before
            # the opening thread set its scope: attribution already skips closed scopes,
            # so only make sure this task no longer points at it.
            if SCOPE.get() is self._scope:
                SCOPE.set(self._scope.parent)

    def _close_on_exit(self, exc: BaseException | None) -> None:
        if self._closed:
            return
        if exc is None:
            self.finish()
        elif isinstance(exc, Cancelled | asyncio.CancelledError):
            self.fail_with_code("the subagent was cancelled", "CANCELLED")
        else:
            self.fail_with_code(str(exc) or type(exc).__name__, "AGENT_ERROR")

    def __repr__(self) -> str:
        return f"SubagentHandle(id={self.id!r}, name={self.name!r})"
