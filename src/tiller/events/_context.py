"""`AgUiContext[S]`: the AG-UI side of one run.

It holds the request (`RunAgentInput`), the typed state `S`, the event sink and the
cancellation token, and offers the emitters. The driver (`run_agent`) builds one per
run; a unit test builds one with `AgUiContext.new(input)` and reads what was emitted
from the receiver it gets back — no `RUN_STARTED`, no event loop needed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from ..cancel import CancellationToken
from ..errors import InvalidResume, StateDecodeError, StatePatchError, UsageError
from ..ids import RunIds
from ._handles import (
    MessageHandle,
    ReasoningHandle,
    StepHandle,
    SubagentHandle,
    ToolCallHandle,
)
from ._outcome import ResumeEntry
from ._sink import EventSink, Subscription, Transformer
from ._state import StateManager, apply_to_live, state_as_json
from ._types import (
    Event,
    MessagesSnapshotEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    SubagentStartedEvent,
    ToolCallResultEvent,
    jsonable,
)

if TYPE_CHECKING:  # the AG-UI models load when a run's input is parsed (`parse_input`)
    from ag_ui.core import Context, Message, RunAgentInput, Tool

__all__ = ["RUNTIME_STATE_KEY", "AgUiContext", "decode_state", "parse_input"]

#: The top-level key of the published state under which the runtime's own facts ride
#: (the task checklist, ...), next to the agent's typed state. Reserved: a client that
#: sends the state back has it stripped before the agent's state is decoded.
RUNTIME_STATE_KEY = "tiller"

S = TypeVar("S")
_T = TypeVar("_T")


def parse_input(value: RunAgentInput | Mapping[str, Any]) -> RunAgentInput:
    """Accept a `RunAgentInput` or its JSON object (camelCase or snake_case keys)."""
    from ag_ui.core import RunAgentInput

    if isinstance(value, RunAgentInput):
        return value
    try:
        return RunAgentInput.model_validate(value)
    except ValidationError as exc:
        raise UsageError(f"not a valid AG-UI RunAgentInput: {exc}") from exc


def decode_state(raw: Any, state_type: type[Any] | None) -> Any:
    """Decode the input state: `null` or `{}` give the default, anything else must fit.

    With no state type the state is plain JSON (default `{}`); with a pydantic model it is
    validated into that model (default: the model built with no arguments). The runtime's
    own section (`RUNTIME_STATE_KEY`) is dropped first.
    """
    if isinstance(raw, dict) and RUNTIME_STATE_KEY in raw:
        # The runtime's section, echoed back by the client: not the agent's to decode.
        raw = {key: value for key, value in raw.items() if key != RUNTIME_STATE_KEY}
    empty = raw is None or (isinstance(raw, dict) and not raw)
    if state_type is None:
        # A copy: the run changes its state in place, never the caller's input.
        return {} if empty else orjson.loads(orjson.dumps(raw))
    if isinstance(state_type, type) and issubclass(state_type, BaseModel):
        try:
            return state_type() if empty else state_type.model_validate(raw)
        except ValidationError as exc:
            raise StateDecodeError(
                f"the run's state does not fit {state_type.__name__}: {exc}"
            ) from exc
    try:
        return state_type() if empty else state_type(raw)
    except (TypeError, ValueError) as exc:
        raise StateDecodeError(
            f"the run's state does not fit {state_type.__name__}: {exc}"
        ) from exc


def _payload(event: Event) -> Any:
    """What a state event carries: transformers that copy an event keep it by reference."""
    if isinstance(event, StateSnapshotEvent):
        return event.snapshot
    return getattr(event, "delta", None)


class AgUiContext(Generic[S]):
    """One run's request, typed state, event sink and cancellation, with its emitters."""

    def __init__(
        self,
        input: RunAgentInput,
        *,
        sink: EventSink,
        state: S,
    ) -> None:
        self._input = input
        self.sink = sink
        self._state = state
        self._state_manager = StateManager()
        # The state event this context is emitting now, and whether it was delivered as it
        # is (a transformer may drop or replace it); see `_learn_state`.
        self._publishing: Event | None = None
        self._published_as_made = False
        sink.observe_state(self._learn_state)
        if sink.verifier is not None:
            # A delta before the first snapshot applies to what the client sent.
            sink.verifier.state.seed(input.state)
        # The runtime's facts published beside the typed state (see `set_runtime_state`).
        self._runtime: dict[str, Any] = {}
        self._ids = RunIds(input.run_id)
        # Handles still open, in opening order, so the driver can close them on cancel.
        self._open_handles: dict[int, Any] = {}
        #: Token usage entries (AG-UI `TokenUsage` objects) for the terminal event.
        self.run_usage: list[dict[str, Any]] | None = None
        #: The run's return value for `RUN_FINISHED.result`, if it has one.
        self.run_result: Any = None
        #: The conversation to send as `MESSAGES_SNAPSHOT` after the state when the run
        #: ends on an interrupt (the interrupt contract), if the agent keeps one.
        self.interrupt_messages: list[dict[str, Any]] | None = None

    @classmethod
    def new(
        cls,
        input: RunAgentInput | Mapping[str, Any],
        *,
        state_type: type[Any] | None = None,
        transformers: Sequence[Transformer] = (),
        cancel: CancellationToken | None = None,
        verify: bool = True,
    ) -> tuple[AgUiContext[Any], Subscription]:
        """The unit-test harness: a context and a receiver of everything it emits.

        No `RUN_STARTED` is emitted (that is the driver's job); `receiver.drain()` returns
        what was emitted so far, since emitting is synchronous.
        """
        parsed = parse_input(input)
        sink = EventSink(cancel=cancel, transformers=transformers, verify=verify)
        receiver = sink.subscribe(maxsize=None)
        state = decode_state(parsed.state, state_type)
        return cls(parsed, sink=sink, state=state), receiver

    # ── the request ──────────────────────────────────────────────────────────────

    @property
    def input(self) -> RunAgentInput:
        """The request as received (the `ag-ui-protocol` model)."""
        return self._input

    @property
    def thread_id(self) -> str:
        return self._input.thread_id

    @property
    def run_id(self) -> str:
        return self._input.run_id

    @property
    def parent_run_id(self) -> str | None:
        return self._input.parent_run_id

    @property
    def messages(self) -> list[Message]:
        """The conversation the client sent, in order."""
        return list(self._input.messages)

    @property
    def last_user_text(self) -> str | None:
        """Text of the last user message, non-text parts dropped; None if there is none.

        An empty user message gives `""`, which is not the same as no user message.
        """
        for message in reversed(self._input.messages):
            if getattr(message, "role", None) != "user":
                continue
            content = message.content
            if isinstance(content, str):
                return content
            from ag_ui.core import TextPart  # loaded already: the input is one of its models

            return "".join(p.text for p in content or () if isinstance(p, TextPart))
        return None

    @property
    def tools(self) -> list[Tool]:
        """The tools the client offered (frontend tools)."""
        return list(self._input.tools or ())

    def tool(self, name: str) -> Tool | None:
        """The client-offered tool called `name`, or None if the client did not offer it."""
        for tool in self._input.tools or ():
            if tool.name == name:
                return tool
        return None

    @property
    def context(self) -> list[Context]:
        """Ambient information the client sent with the run."""
        return list(self._input.context or ())

    @property
    def forwarded_props(self) -> Any:
        """Application values the client passed through untouched."""
        return self._input.forwarded_props

    # ── resume ───────────────────────────────────────────────────────────────────

    @property
    def resume(self) -> list[ResumeEntry]:
        """The answers this run carries for a previous run's interrupts."""
        return [
            ResumeEntry.from_wire(entry.model_dump(by_alias=True))
            for entry in self._input.resume or ()
        ]

    @property
    def is_resume(self) -> bool:
        """True when this run carries answers to a previous run's interrupts."""
        return bool(self._input.resume)

    def resume_for(self, interrupt_id: str) -> ResumeEntry | None:
        """The answer to interrupt `interrupt_id`, or None if this run carries none."""
        for entry in self.resume:
            if entry.interrupt_id == interrupt_id:
                return entry
        return None

    def check_resume(self, open_interrupt_ids: Sequence[str]) -> dict[str, ResumeEntry]:
        """Check the resume against the interrupts the paused run left open.

        Every open interrupt must be answered exactly once and nothing else may be
        answered; otherwise `InvalidResume` says which. Returns the answers by id.
        """
        answers: dict[str, ResumeEntry] = {}
        for entry in self.resume:
            if entry.interrupt_id in answers:
                raise InvalidResume(f"interrupt {entry.interrupt_id} is answered twice")
            answers[entry.interrupt_id] = entry
        unknown = sorted(set(answers) - set(open_interrupt_ids))
        if unknown:
            raise InvalidResume(
                f"the resume answers unknown interrupt(s) {', '.join(unknown)}; "
                f"open interrupts: {', '.join(open_interrupt_ids) or 'none'}"
            )
        missing = [i for i in open_interrupt_ids if i not in answers]
        if missing:
            raise InvalidResume(
                f"the resume leaves interrupt(s) {', '.join(missing)} unanswered; "
                "one resume must answer every open interrupt"
            )
        return answers

    # ── state ────────────────────────────────────────────────────────────────────

    @property
    def state(self) -> S:
        """The run's typed state (a pydantic model or plain JSON)."""
        return self._state

    def state_mut(self) -> S:
        """The live state, to change in place; nothing is emitted until `publish_state()`."""
        return self._state

    def set_state(self, state: S) -> None:
        """Replace the state and publish the change."""
        self._state = state
        self.publish_state()

    def update_state(self, fn: Callable[[S], S | None]) -> None:
        """Apply `fn` to the state (it may change it in place and return None, or return a
        new state) and publish the change."""
        result = fn(self._state)
        if result is not None:
            self._state = result
        self.publish_state()

    def patch_state(self, ops: list[dict[str, Any]]) -> None:
        """Apply a known RFC 6902 change and publish it as a delta, without diffing."""
        self._state = apply_to_live(self._state, ops)
        # `current` lets the manager fall back to a full publish when the live state was
        # changed in place since the last publish (the ops then fit it, not the copy).
        self._emit_state(self._state_manager.patch(ops, current=self._published_value()))

    def publish_state(self) -> None:
        """Send the state if it changed since the last publish: a snapshot first, then a
        delta when the delta is smaller, else a snapshot. Unchanged state sends nothing."""
        self._emit_state(self._state_manager.publish(self._published_value()))

    def set_runtime_state(self, key: str, value: Any) -> None:
        """Publish one of the runtime's own facts (`key` = "tasks": the checklist) in the
        run's state document, under `RUNTIME_STATE_KEY`, beside the agent's typed state;
        `None` removes it. The agent's state itself is untouched.

        A state that is not a JSON object (a list, a number) has no room for it: then the
        fact is kept but not published in the state (the runtime also sends its facts as
        `tiller.*` custom events)."""
        if value is None:
            if self._runtime.pop(key, None) is None:
                return
        else:
            self._runtime[key] = value
        self.publish_state()

    def update_runtime_state(self, facts: Mapping[str, Any]) -> None:
        """`set_runtime_state` for several facts at once: one publish for all of them."""
        changed = False
        for key, value in facts.items():
            if value is None:
                changed = self._runtime.pop(key, None) is not None or changed
            elif self._runtime.get(key) != value:
                self._runtime[key] = value
                changed = True
        if changed:
            self.publish_state()

    @property
    def runtime_state(self) -> dict[str, Any]:
        """The runtime's facts, as `set_runtime_state` last set them (a copy)."""
        return dict(self._runtime)

    def _published_value(self) -> Any:
        """The document clients see: the typed state, plus the runtime's section when
        there is one and the state is a JSON object."""
        if not self._runtime:
            return self._state
        document = state_as_json(self._state)
        if not isinstance(document, dict):
            return self._state
        return {**document, RUNTIME_STATE_KEY: dict(self._runtime)}

    def reset_state_stream(self) -> None:
        """Make the next publish a full snapshot (after a reconnect or a hand-sent one)."""
        self._state_manager.reset()

    def _emit_state(self, published: Any) -> None:
        if published is None:
            return
        event = (
            StateSnapshotEvent(published.snapshot)
            if published.kind == "snapshot"
            else StateDeltaEvent(published.delta)
        )
        self._publishing, self._published_as_made = event, False
        if published.kind == "delta" and self.sink.verifier is not None:
            # Made against the manager's document, which is the client's: the verifier
            # need not apply it, and asks the manager for the document if it must.
            self.sink.verifier.state.trust(event, self._client_document)
        try:
            self.sink.emit(event)
        except BaseException:
            # The client never got it (a cancel, a refusal): the manager must not believe
            # it did, or a later delta would apply to a state the client does not have.
            self._lost_track()
            raise
        finally:
            delivered, self._publishing = self._published_as_made, None
        if not delivered:
            self._lost_track()  # a transformer dropped or replaced it

    def _lost_track(self) -> None:
        """The manager's document is ahead of the client's: the next publish is a
        snapshot, and until then the verifier judges no delta against the manager's."""
        self._state_manager.reset()
        if self.sink.verifier is not None:
            self.sink.verifier.state.blind()

    def _client_document(self) -> Any:
        return self._state_manager.published

    def _learn_state(self, event: Event) -> None:
        """A state event went out (called by the sink after delivery). If this context did
        not make it — a transformer's, or one the agent emitted by hand — the manager and
        the live state take it on, so the next publish is a delta that applies to what the
        client has, and does not undo the change."""
        own = self._publishing
        if own is not None and type(event) is type(own) and _payload(event) is _payload(own):
            # Ours, perhaps copied by a transformer (attribution stripped): not news.
            self._published_as_made = True
            return
        manager = self._state_manager
        if isinstance(event, StateSnapshotEvent):
            manager.adopt_snapshot(event.snapshot)
            state_type = type(self._state) if isinstance(self._state, BaseModel) else None
            try:
                self._state = decode_state(jsonable(event.snapshot), state_type)
            except StateDecodeError:
                manager.reset()  # the live state stays; the client gets it back in full
        elif isinstance(event, StateDeltaEvent):
            manager.adopt_delta(event.delta)
            try:
                self._state = apply_to_live(self._state, jsonable(event.delta))
            except StatePatchError:
                manager.reset()

    # ── cancellation ─────────────────────────────────────────────────────────────

    @property
    def cancel_token(self) -> CancellationToken:
        """The run's own token (a child of any shared one), for outside work to watch."""
        return self.sink.cancel

    @property
    def is_cancelled(self) -> bool:
        """True once the run's token fired."""
        return self.sink.cancel.is_cancelled

    def check_cancelled(self) -> None:
        """Raise `Cancelled` if the run was cancelled."""
        self.sink.cancel.check()

    async def cancelled(self) -> None:
        """Wait until the run is cancelled."""
        await self.sink.cancel.cancelled()

    async def until_cancelled(self, awaitable: Awaitable[_T]) -> _T | None:
        """Run `awaitable` until it finishes (its result) or the run is cancelled (None)."""
        return await self.sink.cancel.until_cancelled(awaitable)

    # ── ids ──────────────────────────────────────────────────────────────────────

    def new_message_id(self) -> str:
        """`{run_id}-msg-{n}`."""
        return self._ids.message()

    def new_tool_call_id(self) -> str:
        """`{run_id}-call-{n}`."""
        return self._ids.tool_call()

    def new_subagent_run_id(self) -> str:
        """`{run_id}-sub-{n}`."""
        return self._ids.subagent()

    @property
    def ids(self) -> RunIds:
        """The run's id allocator (its counters travel with a run's stored state)."""
        return self._ids

    def subagent_run_id(self) -> str | None:
        """The subagent the calling task's events are attributed to now (None: the agent)."""
        scope = self.sink.current_scope()
        return None if scope is None else scope.subagent_run_id

    # ── emitters ─────────────────────────────────────────────────────────────────

    def emit(self, event: Event) -> None:
        """Send a raw event; it still passes the transformers and the verifier."""
        self.sink.emit(event)

    def assistant_message(self) -> MessageHandle:
        """Open a streamed assistant message with the next deterministic id."""
        return MessageHandle(self, self.new_message_id(), "assistant")

    def message(self, role: str, *, name: str | None = None) -> MessageHandle:
        """Open a streamed message with another role (`user`, `system`, `developer`)."""
        return MessageHandle(self, self.new_message_id(), role, name)

    def message_with_id(self, message_id: str, role: str = "assistant") -> MessageHandle:
        """Open a streamed message under an id chosen by the caller (for example a
        provider's message id)."""
        return MessageHandle(self, message_id, role)

    def say(self, text: str) -> str:
        """A whole assistant message in one call; returns its id."""
        with self.assistant_message() as message:
            message.delta(text)
        return message.id

    def reasoning(self) -> ReasoningHandle:
        """Open a reasoning block with the next deterministic message id."""
        return ReasoningHandle(self, self.new_message_id())

    def reasoning_with_id(self, message_id: str) -> ReasoningHandle:
        """Open a reasoning block under an id chosen by the caller."""
        return ReasoningHandle(self, message_id)

    def think(self, text: str) -> str:
        """A whole reasoning block in one call; returns its id."""
        with self.reasoning() as block:
            block.delta(text)
        return block.id

    def tool_call(self, name: str, *, parent_message_id: str | None = None) -> ToolCallHandle:
        """Open a tool call with the next deterministic call id."""
        return ToolCallHandle(self, self.new_tool_call_id(), name, parent_message_id)

    def tool_call_with_id(
        self, call_id: str, name: str, *, parent_message_id: str | None = None
    ) -> ToolCallHandle:
        """Open a tool call under an id chosen by the caller (the model's call id)."""
        return ToolCallHandle(self, call_id, name, parent_message_id)

    def step(self, name: str) -> StepHandle:
        """Open a named step; a name cannot be open twice at once."""
        return StepHandle(self, name)

    def subagent(
        self,
        name: str,
        *,
        description: str | None = None,
        parent_tool_call_id: str | None = None,
        parent_message_id: str | None = None,
    ) -> SubagentHandle:
        """Open a subagent segment; nested inside another, it becomes its child."""
        started = SubagentStartedEvent(
            self.new_subagent_run_id(),
            name,
            description,
            parent_tool_call_id=parent_tool_call_id,
            parent_message_id=parent_message_id,
        )
        return SubagentHandle(self, started)

    def subagent_with(self, started: SubagentStartedEvent) -> SubagentHandle:
        """Open a subagent from a prepared start event (for example, to continue a
        suspended subagent under its earlier `subagent_run_id`)."""
        return SubagentHandle(self, started)

    def tool_result(self, tool_call_id: str, content: Any, *, message_id: str | None = None) -> str:
        """Send the result of a call that is not open in this run (one a previous run made,
        listed by this run's `MESSAGES_SNAPSHOT`); returns the result's message id."""
        result_id = message_id if message_id is not None else self.new_message_id()
        text = content if isinstance(content, str) else orjson.dumps(jsonable(content)).decode()
        self.sink.emit(ToolCallResultEvent(result_id, tool_call_id, text))
        return result_id

    def messages_snapshot(self, messages: Sequence[Message | Mapping[str, Any]]) -> None:
        """Send the whole conversation (a resumed run starts with one)."""
        self.sink.emit(MessagesSnapshotEvent(list(messages)))

    # ── for the driver ───────────────────────────────────────────────────────────

    def open_handles(self) -> list[Any]:
        """Handles still open, innermost (most recently opened) first."""
        return list(reversed(self._open_handles.values()))

    def _handle_opened(self, handle: Any) -> None:
        """A handle of this run opened (called by the handles: the registry is ours)."""
        self._open_handles[id(handle)] = handle

    def _handle_closed(self, handle: Any) -> None:
        """A handle of this run closed, or its start was refused."""
        self._open_handles.pop(id(handle), None)
