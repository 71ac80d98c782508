"""Anthropic's Messages API, streamed.

tiller's conversation already has Anthropic's layout (a user message carries the previous
step's tool results, then any text), so the request mapping is direct. What needs care:

- thinking blocks go back to the API exactly as they came, with their `signature` (or as
  `redacted_thinking` with its `data`); reasoning without a signature (from another
  provider) is not sent, because the API would reject it;
- the API rejects empty content and two messages of one role in a row, so empty messages
  are skipped and neighbours of one role are merged;
- `max_tokens` is required: the request's, else `max_tokens_default`;
- content blocks are numbered across text, thinking and tool use; tiller numbers tool
  calls from 0, so each `tool_use` block gets the next call index;
- a `tool_use` block without input deltas has arguments `"{}"` (sent as a delta).

Structured output: on the models that have it (Claude Sonnet, Opus and Haiku 4.5 and
later), natively: the schema goes as `output_config: {format: {type: "json_schema",
schema}}` in the form Anthropic's grammar takes (`tiller.model._anthropic_schema`: objects
closed, the limits it cannot hold left to tiller's validation); it works beside the
agent's own tools and under extended thinking. A schema with no such form (a recursive
type, a free-form map) and every older model get a forced output tool (`tool_choice`
`{type: tool}` or `{type: any}`). With extended thinking on, the API refuses a forced tool
choice, so the choice is sent as `auto` and the system prompt's instruction to call the
output tool (and the loop's retry) does the forcing.

The adapter does not retry; a retry wrapper reads `ModelError.retryable`/`retry_after`.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from ..conversation import AssistantMessage, TranscriptError, Usage, UserMessage
from ..errors import UsageError
from ._anthropic_schema import native_json_schema, native_schema_problem, supports_native_output
from ._base import (
    Finish,
    FinishReason,
    ModelRequest,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageReport,
)
from ._errors import ModelConnectionError, ModelProtocolError
from ._http import HttpModel, ServerSentEvent, error_from_payload, missing_key_message
from ._output import ForceTool, OutputMode, ToolChoice
from ._wire_ids import WireIds

__all__ = ["AnthropicModel"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
#: The smallest `budget_tokens` the API accepts for extended thinking.
MIN_THINKING_BUDGET = 1024

_STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "refusal",
}


class AnthropicModel(HttpModel):
    """A Claude model behind the Messages API (`POST {base_url}/v1/messages`).

    `api_key` and `base_url` default to `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL`, read
    when the model is made. Without a key (or with `api_key=""`) no `x-api-key` header is
    sent, for proxies that add their own. `thinking_budget` turns on extended thinking; it
    is clamped below each request's `max_tokens`, and a request whose `max_tokens` leaves
    less than the API's minimum (1024) goes without thinking rather than failing. With
    thinking on, `temperature` is not sent: the API accepts none but the default.
    `timeout` (seconds) bounds connecting and each wait for bytes, also on a `client` you
    pass; that client stays yours to close. Structured output (`output_modes`, best first)
    is native (`output_config.format`) on a model that has it, told by its name (Claude
    4.5 and later), then a forced output tool, then prompted; an older model, or a name
    that says no version, gets the tool first and no native. `output_modes` declares
    them for a name tiller cannot read (a proxy's own).
    """

    #: The structured-output modes this model supports, best first.
    output_modes: tuple[OutputMode, ...]

    def __init__(  # noqa: PLR0913  # a public typed constructor: its keywords are the API
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: httpx.AsyncClient | None = None,
        context_window: int | None = None,
        timeout: float = 120.0,
        max_tokens_default: int = 4096,
        thinking_budget: int | None = None,
        extra_headers: Mapping[str, str] | None = None,
        output_modes: tuple[OutputMode, ...] | None = None,
    ) -> None:
        if output_modes is not None:
            self.output_modes = tuple(output_modes)
        elif supports_native_output(model):
            self.output_modes = ("native", "tool", "prompted")
        else:
            self.output_modes = ("tool", "prompted")
        if thinking_budget is not None and thinking_budget < MIN_THINKING_BUDGET:
            raise UsageError(
                f"thinking_budget={thinking_budget} is below Anthropic's minimum of "
                f"{MIN_THINKING_BUDGET} tokens; raise it or pass None to turn thinking off"
            )
        self.name = model
        self.provider = "anthropic"
        self.context_window = context_window
        self.max_tokens_default = max_tokens_default
        self.thinking_budget = thinking_budget
        self.base_url = (
            base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
        ).rstrip("/")
        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            "anthropic-version": API_VERSION,
        }
        if key:
            headers["x-api-key"] = key
        super().__init__(
            url=f"{self.base_url}/v1/messages",
            headers=headers,
            client=client,
            timeout=timeout,
            extra_headers=extra_headers,
            missing_key=missing_key_message(
                self.provider,
                "ANTHROPIC_API_KEY",
                needed=not key
                and api_key is None
                and self.base_url == DEFAULT_BASE_URL
                and client is None
                and not {"x-api-key", "authorization"} & {h.lower() for h in extra_headers or {}},
                local_hint="a proxy that adds its own key: set ANTHROPIC_BASE_URL",
            ),
        )

    def __repr__(self) -> str:  # never shows the key
        return f"AnthropicModel({self.name!r}, base_url={self.base_url!r})"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one message as tiller events; raises `ModelError`s (see `_errors`)."""
        opened = self._post(orjson.dumps(self.request_body(request)))
        decoder = _EventDecoder(self.provider)
        async with opened as events:
            async for sse in events:
                for event in decoder.feed(sse):
                    yield event
                if decoder.done:
                    break
            decoder.close()

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for `request` (public so captures and tests can show it)."""
        max_tokens = (
            request.max_tokens if request.max_tokens is not None else self.max_tokens_default
        )
        body: dict[str, Any] = {
            "model": self.name,
            "max_tokens": max_tokens,
            "messages": _messages(request.messages),
            "stream": True,
        }
        if request.system:
            body["system"] = request.system
        if request.tools:
            body["tools"] = [
                {
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.parameters,
                }
                for tool in request.tools
            ]
        budget = self._thinking_budget(max_tokens)
        if request.tool_choice is not None:
            body["tool_choice"] = _tool_choice(request.tool_choice, thinking=budget is not None)
        output = request.output
        if output is not None and output.mode == "native":
            schema = native_json_schema(output.schema)
            body["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        if budget is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        elif request.temperature is not None:
            body["temperature"] = request.temperature
        body.update(request.extra)
        return body

    def native_schema_problem(self, schema: dict[str, Any]) -> str | None:
        """Why `schema` cannot go as `output_config.format` (Anthropic's grammar has no
        form of it), or None; an agent asks before choosing `native`."""
        return native_schema_problem(schema)

    def _thinking_budget(self, max_tokens: int) -> int | None:
        if self.thinking_budget is None:
            return None
        budget = min(self.thinking_budget, max_tokens - 1)
        return budget if budget >= MIN_THINKING_BUDGET else None


def _tool_choice(choice: ToolChoice, *, thinking: bool) -> dict[str, Any]:
    """The API's `tool_choice`; a forced one is `auto` under extended thinking, which the
    API does not combine with forcing."""
    if choice == "auto" or thinking:
        return {"type": "auto"}
    if isinstance(choice, ForceTool):
        return {"type": "tool", "name": choice.name}
    return {"type": "any"}


#: What a `tool_use` id may not contain.
_NOT_IN_TOOL_USE_ID = re.compile(r"[^a-zA-Z0-9_-]")


def _messages(messages: Sequence[UserMessage | AssistantMessage]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    # The provider's own call ids where they are unique, the runtime's elsewhere (law 10),
    # each in the alphabet the API accepts for a tool_use id.
    wire = WireIds(messages, sanitize=_tool_use_id)
    for message in messages:
        if isinstance(message, UserMessage):
            role, blocks = "user", _user_blocks(message, wire)
        else:
            role, blocks = "assistant", _assistant_blocks(message, wire)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _tool_use_id(value: str) -> str:
    """`value` in the alphabet of a `tool_use` id (`^[a-zA-Z0-9_-]+$`)."""
    return _NOT_IN_TOOL_USE_ID.sub("_", value) or "call"


def _user_blocks(message: UserMessage, wire: WireIds) -> list[dict[str, Any]]:
    """Tool results first (the API requires them to lead the message), then the text."""
    blocks: list[dict[str, Any]] = []
    for result in message.tool_results:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": wire[result.call_id]}
        if result.content:  # the API rejects empty text, but `content` may be left out
            block["content"] = result.content
        block["is_error"] = result.is_error
        blocks.append(block)
    if message.text.strip():
        blocks.append({"type": "text", "text": message.text})
    return blocks


def _assistant_blocks(message: AssistantMessage, wire: WireIds) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for reasoning in message.reasoning:
        if reasoning.redacted is not None:
            blocks.append({"type": "redacted_thinking", "data": reasoning.redacted})
        elif reasoning.signature is not None:
            blocks.append(
                {"type": "thinking", "thinking": reasoning.text, "signature": reasoning.signature}
            )
    if message.text.strip():
        blocks.append({"type": "text", "text": message.text})
    for call in message.tool_calls:
        try:
            arguments = call.parsed_arguments()
        except orjson.JSONDecodeError as exc:
            raise TranscriptError(
                f"tool call {call.id} ({call.name}) has arguments that are not JSON; "
                "calls whose arguments never completed must be dropped from the transcript"
            ) from exc
        if not isinstance(arguments, dict):
            raise TranscriptError(
                f"tool call {call.id} ({call.name}) has arguments that are not a JSON object"
            )
        blocks.append(
            {"type": "tool_use", "id": wire[call.id], "name": call.name, "input": arguments}
        )
    return blocks


@dataclass(slots=True)
class _Block:
    """A content block between its start and stop; `call` is set for tool use."""

    kind: str
    call: int | None = None
    has_args: bool = False
    stopped: bool = False


class _EventDecoder:
    """Messages API stream events in, tiller stream events out; one per response.

    Unknown event and block types are skipped: Anthropic adds them over time and says
    clients should ignore what they do not know.
    """

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.done = False  # `message_stop` arrived
        self._blocks: dict[int, _Block] = {}
        self._calls = 0
        self._stop: str | None = None
        #: The model that answered (`message_start`'s), for `Finish.model`.
        self._model: str | None = None
        self._input = 0
        self._cache_read = 0
        self._cache_write = 0
        self._output = 0

    def feed(self, sse: ServerSentEvent) -> list[StreamEvent]:
        try:
            data = orjson.loads(sse.data)
        except orjson.JSONDecodeError as exc:
            raise self._protocol(f"event data is not JSON: {sse.data[:200]!r}") from exc
        if not isinstance(data, dict):
            raise self._protocol(f"event data is not a JSON object: {sse.data[:200]!r}")
        kind = data.get("type", sse.event)
        events: list[StreamEvent] = []
        if kind == "content_block_delta":
            self._block_delta(data, events)
        elif kind == "content_block_start":
            self._block_start(data, events)
        elif kind == "content_block_stop":
            self._block_stop(self._block(data), events)
        elif kind == "message_start":
            message = data.get("message")
            usage = message.get("usage") if isinstance(message, dict) else None
            model = message.get("model") if isinstance(message, dict) else None
            if isinstance(model, str) and model:
                self._model = model
            self._usage(usage, events)
        elif kind == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self._stop = delta["stop_reason"]
            self._usage(data.get("usage"), events)
        elif kind == "message_stop":
            for block in self._blocks.values():
                self._block_stop(block, events)
            raw = self._stop
            reason: FinishReason = _STOP_REASONS.get(raw, "other") if raw else "stop"
            events.append(Finish(reason, raw, model=self._model))
            self.done = True
        elif kind == "error":
            raise error_from_payload(data.get("error"), provider=self.provider)
        return events

    def close(self) -> None:
        """Raise if the stream ended before `message_stop`: the connection dropped."""
        if not self.done:
            raise ModelConnectionError(
                f"{self.provider}: the stream ended before message_stop; "
                "the connection was probably dropped",
                provider=self.provider,
            )

    def _block_start(self, data: dict[str, Any], events: list[StreamEvent]) -> None:
        index = data.get("index")
        content = data.get("content_block")
        if not isinstance(index, int) or not isinstance(content, dict):
            raise self._protocol(f"malformed content_block_start: {data!r}")
        kind = content.get("type")
        block = _Block(kind if isinstance(kind, str) else "")
        self._blocks[index] = block
        if kind == "text":
            self._text(content.get("text"), events)
        elif kind == "thinking":
            if isinstance(content.get("thinking"), str) and content["thinking"]:
                events.append(ReasoningDelta(content["thinking"]))
            if isinstance(content.get("signature"), str) and content["signature"]:
                events.append(ReasoningDelta(signature=content["signature"]))
        elif kind == "redacted_thinking":
            redacted = content.get("data")
            events.append(ReasoningDelta(redacted=redacted if isinstance(redacted, str) else ""))
        elif kind == "tool_use":
            call_id, name = content.get("id"), content.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise self._protocol(f"tool_use block without id or name: {content!r}")
            block.call = self._calls
            self._calls += 1
            events.append(ToolCallStart(block.call, call_id, name))
            initial = content.get("input")
            if isinstance(initial, dict) and initial:
                block.has_args = True
                events.append(ToolCallArgsDelta(block.call, orjson.dumps(initial).decode()))

    def _block_delta(self, data: dict[str, Any], events: list[StreamEvent]) -> None:
        block = self._block(data)
        delta = data.get("delta")
        if not isinstance(delta, dict):
            raise self._protocol(f"content_block_delta without a delta: {data!r}")
        kind = delta.get("type")
        if kind == "text_delta":
            self._text(delta.get("text"), events)
        elif kind == "thinking_delta":
            thinking = delta.get("thinking")
            if isinstance(thinking, str) and thinking:
                events.append(ReasoningDelta(thinking))
        elif kind == "signature_delta":
            signature = delta.get("signature")
            if isinstance(signature, str) and signature:
                events.append(ReasoningDelta(signature=signature))
        elif kind == "input_json_delta" and block.call is not None:
            # (Server tools such as web search stream their input too; those are skipped.)
            partial = delta.get("partial_json")
            if isinstance(partial, str) and partial:
                block.has_args = True
                events.append(ToolCallArgsDelta(block.call, partial))

    def _block_stop(self, block: _Block, events: list[StreamEvent]) -> None:
        if block.stopped:
            return
        block.stopped = True
        if block.call is not None:
            if not block.has_args:
                events.append(ToolCallArgsDelta(block.call, "{}"))
            events.append(ToolCallEnd(block.call))

    def _block(self, data: dict[str, Any]) -> _Block:
        index = data.get("index")
        block = self._blocks.get(index) if isinstance(index, int) else None
        if block is None:
            raise self._protocol(f"{data.get('type')} for a block that never started: {data!r}")
        return block

    def _text(self, text: object, events: list[StreamEvent]) -> None:
        if isinstance(text, str) and text:
            events.append(TextDelta(text))

    def _usage(self, usage: object, events: list[StreamEvent]) -> None:
        """Report usage so far; `message_delta` counts are cumulative and replace earlier."""
        if not isinstance(usage, dict):
            return
        self._input = _int(usage.get("input_tokens"), self._input)
        self._cache_read = _int(usage.get("cache_read_input_tokens"), self._cache_read)
        self._cache_write = _int(usage.get("cache_creation_input_tokens"), self._cache_write)
        self._output = _int(usage.get("output_tokens"), self._output)
        events.append(
            UsageReport(
                Usage(
                    # Anthropic's input_tokens excludes cached tokens; tiller's includes them.
                    input_tokens=self._input + self._cache_read + self._cache_write,
                    output_tokens=self._output,
                    cached_input_tokens=self._cache_read,
                    requests=1,
                )
            )
        )

    def _protocol(self, message: str) -> ModelProtocolError:
        return ModelProtocolError(f"{self.provider}: {message}", provider=self.provider)


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default
