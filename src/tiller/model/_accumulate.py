"""The response so far: one accumulator folds a model's stream events into a message.

The loop feeds every event of a streaming cycle to a `ResponseAccumulator` and asks it,
whenever it needs to, what the model has said. Whatever stopped the stream — a `Finish`,
a cancellation, a provider error — `get()` answers with a legal `AssistantMessage` and says
how far the stream got (`complete`, `interrupted`, `incomplete`), which is what law 8 needs
to keep a half-written turn.

Law 10 is applied here too: given `call_ids` (the run's allocator), every tool call gets
the runtime's id the moment its `ToolCallEnd` arrives, and the provider's id is kept beside
it (`ToolCall.provider_id`) only to talk to that provider, since a provider may repeat one
or send none at all.

Law 1 is applied here, once for every adapter: a tool call is only part of the message when
its `ToolCallEnd` arrived *and* its argument text is JSON. Calls that never completed, or
whose arguments do not parse, are reported in `dropped` and never executed.

`feed` runs on every delta, so it does constant work per event beyond copying the delta:
text and argument fragments are kept as lists and joined only when asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import orjson

from ..conversation import AssistantMessage, Reasoning, ToolCall, Usage
from ._base import (
    Finish,
    FinishReason,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageReport,
)
from ._errors import ModelProtocolError

__all__ = ["AccumulatedResponse", "DroppedCall", "ResponseAccumulator", "ResponseStatus"]

#: `complete`: the stream ended with `Finish`. `interrupted`: it was stopped early (a cancel,
#: an error) and the caller said so with `interrupt()`. `incomplete`: neither, yet — the
#: stream is still running, or it ended without a `Finish`.
ResponseStatus = Literal["complete", "interrupted", "incomplete"]


@dataclass(slots=True, frozen=True)
class DroppedCall:
    """A tool call left out of the message, and why (law 1: never executed)."""

    index: int
    #: The runtime's id once the call ended (see `ResponseAccumulator`), else the provider's.
    id: str
    name: str
    #: The argument text received so far, exactly as streamed.
    arguments: str
    #: `incomplete`: no `ToolCallEnd` arrived. `invalid_json`: it ended, but is not JSON.
    reason: Literal["incomplete", "invalid_json"]
    #: What the provider called it (may be empty, or the id of another call).
    provider_id: str = ""


@dataclass(slots=True, frozen=True)
class AccumulatedResponse:
    """What `ResponseAccumulator.get()` returns: the message and how it came to be."""

    message: AssistantMessage
    status: ResponseStatus
    usage: Usage
    #: The last `Finish` seen, or None if the stream never finished.
    finish_reason: FinishReason | None
    dropped: tuple[DroppedCall, ...] = ()


@dataclass(slots=True)
class _CallState:
    #: The provider's id, as streamed.
    id: str
    name: str
    #: The runtime's id, given when the call ends (None without an allocator, or before).
    runtime_id: str | None = None
    fragments: list[str] = field(default_factory=list)
    #: Set by `ToolCallEnd`: the joined argument text, and whether it parsed.
    arguments: str | None = None
    valid: bool = False
    #: The call as the transcript holds it, made once it is asked for (it no longer
    #: changes once it ended).
    built: ToolCall | None = None


@dataclass(slots=True)
class _ReasoningBlock:
    parts: list[str] = field(default_factory=list)
    signature: str | None = None
    redacted: str | None = None


def _utf8_len(text: str) -> int:
    # `isascii` is O(1) in CPython (the flag is cached), so ASCII deltas skip the encode.
    return len(text) if text.isascii() else len(text.encode("utf-8"))


class ResponseAccumulator:
    """Folds `StreamEvent`s into the response so far.

    ```python
    acc = ResponseAccumulator()
    try:
        async for event in stream_with_retry(model, request):
            acc.feed(event)
            if acc.bytes > options.max_response_bytes:
                break
    except (asyncio.CancelledError, Cancelled, ModelError):
        acc.interrupt()
        raise
    finally:
        response = acc.get()   # legal even if the stream died mid-call
    ```

    Reasoning blocks: a `ReasoningDelta` continues the current block until a signature or a
    redacted payload closes it, or any other event comes between; a `redacted` delta is a
    block of its own. Usage: the provider may report several times during a call (input
    tokens first, output tokens at the end); for each field a later non-zero value replaces
    the earlier one, and `requests` is always 1, since one accumulator is one model call.
    """

    __slots__ = (
        "_bytes",
        "_call_ids",
        "_calls",
        "_finish",
        "_interrupted",
        "_open_block",
        "_reasoning",
        "_text",
        "_usage",
    )

    def __init__(self, call_ids: Callable[[], str] | None = None) -> None:
        #: Hands out the run's tool call ids; None keeps the provider's (a classifier or
        #: summary call, whose tool calls are never run).
        self._call_ids = call_ids
        self._text: list[str] = []
        self._reasoning: list[_ReasoningBlock] = []
        self._open_block: _ReasoningBlock | None = None
        self._calls: dict[int, _CallState] = {}
        self._usage: Usage | None = None
        self._finish: Finish | None = None
        self._interrupted = False
        self._bytes = 0

    # -- feeding -----------------------------------------------------------------------

    def feed(self, event: StreamEvent) -> None:
        """Take one event. Raises `ModelProtocolError` for arguments or an end of a tool
        call that never started, arguments after a call's end, or a second start of one
        index with another id or name: an adapter that sends those has lost track of the
        provider's stream."""
        if isinstance(event, TextDelta):
            self._open_block = None
            self._text.append(event.text)
            self._bytes += _utf8_len(event.text)
        elif isinstance(event, ToolCallArgsDelta):
            self._open_block = None
            call = self._call(event.index, "arguments for")
            if call.arguments is not None:
                raise ModelProtocolError(f"arguments for tool call {event.index} after its end")
            call.fragments.append(event.delta)
            self._bytes += _utf8_len(event.delta)
        elif isinstance(event, ReasoningDelta):
            self._feed_reasoning(event)
        elif isinstance(event, ToolCallStart):
            self._open_block = None
            self._start_call(event)
        elif isinstance(event, ToolCallEnd):
            self._open_block = None
            self._end_call(self._call(event.index, "the end of"), self._call_ids)
        elif isinstance(event, UsageReport):
            self._usage = event.usage if self._usage is None else _merge(self._usage, event.usage)
        elif isinstance(event, Finish):
            self._open_block = None
            self._finish = event

    def interrupt(self) -> None:
        """Mark the stream as stopped early (cancelled, failed, cut at the byte cap).

        A response that already saw `Finish` stays `complete`: nothing was lost.
        """
        self._interrupted = True

    def _feed_reasoning(self, event: ReasoningDelta) -> None:
        if event.redacted is not None:
            self._reasoning.append(_ReasoningBlock(redacted=event.redacted))
            self._open_block = None
            self._bytes += _utf8_len(event.redacted)
        if event.text or event.signature is not None:
            block = self._open_block
            if block is None:
                block = _ReasoningBlock()
                self._reasoning.append(block)
                self._open_block = block
            if event.text:
                block.parts.append(event.text)
                self._bytes += _utf8_len(event.text)
            if event.signature is not None:
                block.signature = event.signature
                self._bytes += _utf8_len(event.signature)
                self._open_block = None

    def _start_call(self, event: ToolCallStart) -> None:
        known = self._calls.get(event.index)
        if known is None:
            self._calls[event.index] = _CallState(event.id, event.name)
        elif (known.id, known.name) != (event.id, event.name):
            raise ModelProtocolError(
                f"tool call {event.index} started twice: as {known.name!r} ({known.id}) "
                f"and as {event.name!r} ({event.id})"
            )

    def _call(self, index: int, what: str) -> _CallState:
        try:
            return self._calls[index]
        except KeyError:
            raise ModelProtocolError(
                f"{what} tool call {index}, which never started (no ToolCallStart)"
            ) from None

    @staticmethod
    def _end_call(call: _CallState, call_ids: Callable[[], str] | None) -> None:
        if call.arguments is not None:
            return  # a repeated end changes nothing
        if call_ids is not None:
            call.runtime_id = call_ids()
        text = "".join(call.fragments)
        call.fragments = [text]
        if not text.strip():
            text = "{}"
        call.arguments = text
        try:
            orjson.loads(text)
        except orjson.JSONDecodeError:
            call.valid = False
        else:
            call.valid = True

    # -- reading -----------------------------------------------------------------------

    @property
    def bytes(self) -> int:
        """UTF-8 bytes of text, reasoning and tool call arguments so far (for the
        `max_response_bytes` cap)."""
        return self._bytes

    @property
    def text(self) -> str:
        return "".join(self._text)

    @property
    def status(self) -> ResponseStatus:
        if self._finish is not None:
            return "complete"
        return "interrupted" if self._interrupted else "incomplete"

    @property
    def finish_reason(self) -> FinishReason | None:
        return None if self._finish is None else self._finish.reason

    @property
    def response_model(self) -> str | None:
        """The model that answered, if the provider said (`Finish.model`)."""
        return None if self._finish is None else self._finish.model

    @property
    def usage(self) -> Usage:
        """The call's usage as reported so far (`requests` is 1: this is one call)."""
        if self._usage is None:
            return Usage(requests=1)
        if self._usage.requests == 1:
            return self._usage
        return self._usage.model_copy(update={"requests": 1})

    def completed_call(self, index: int) -> ToolCall | None:
        """The call at `index` if it has ended with JSON arguments, else None.

        Lets the loop announce a call as soon as it is executable, before the stream ends.
        """
        call = self._calls.get(index)
        if call is None or not call.valid or call.arguments is None:
            return None
        return _tool_call(call, call.arguments)

    @property
    def dropped(self) -> tuple[DroppedCall, ...]:
        """Calls that are not (yet) executable: still streaming, or not JSON."""
        dropped: list[DroppedCall] = []
        for index in sorted(self._calls):
            call = self._calls[index]
            reason: Literal["incomplete", "invalid_json"]
            if call.arguments is None:
                arguments, reason = "".join(call.fragments), "incomplete"
            elif not call.valid:
                arguments, reason = call.arguments, "invalid_json"
            else:
                continue
            dropped.append(
                DroppedCall(
                    index,
                    call.runtime_id or call.id,
                    call.name,
                    arguments,
                    reason,
                    provider_id=call.id if call.runtime_id else "",
                )
            )
        return tuple(dropped)

    def get(self, *, id: str = "") -> AccumulatedResponse:
        """The response so far: a legal message (only executable calls), its status, usage,
        finish reason and the calls left out. Cheap enough to call at any point."""
        calls = self._calls
        complete = tuple(
            _tool_call(call, call.arguments)
            for index in (sorted(calls) if len(calls) > 1 else calls)
            if (call := calls[index]).valid and call.arguments is not None
        )
        reasoning = (
            tuple(
                Reasoning(
                    text="".join(block.parts), signature=block.signature, redacted=block.redacted
                )
                for block in self._reasoning
                if block.parts or block.signature is not None or block.redacted is not None
            )
            if self._reasoning
            else ()
        )
        message = AssistantMessage(id=id, text=self.text, reasoning=reasoning, tool_calls=complete)
        return AccumulatedResponse(
            message=message,
            status=self.status,
            usage=self.usage,
            finish_reason=self.finish_reason,
            dropped=self.dropped if len(complete) < len(calls) else (),
        )


def _tool_call(call: _CallState, arguments: str) -> ToolCall:
    """The call as the transcript holds it: the runtime's id when it has one, the
    provider's beside it (made once: `completed_call` and `get` give the same object)."""
    built = call.built
    if built is None:
        if call.runtime_id is None:
            built = ToolCall(id=call.id, name=call.name, arguments=arguments)
        else:
            built = ToolCall(
                id=call.runtime_id, name=call.name, arguments=arguments, provider_id=call.id
            )
        call.built = built
    return built


def _merge(earlier: Usage, later: Usage) -> Usage:
    """Per field, a later non-zero count replaces the earlier one (a zero means "not in
    this report": Anthropic sends input tokens first and output tokens last)."""
    return Usage(
        input_tokens=later.input_tokens or earlier.input_tokens,
        output_tokens=later.output_tokens or earlier.output_tokens,
        cached_input_tokens=later.cached_input_tokens or earlier.cached_input_tokens,
        reasoning_tokens=later.reasoning_tokens or earlier.reasoning_tokens,
        requests=later.requests or earlier.requests,
    )
