"""OpenAI Chat Completions, streamed: OpenAI itself and the servers that copy its API.

Ollama, vLLM, llama.cpp, LM Studio, DeepSeek, OpenRouter and others speak this wire format
with small differences, and the adapter absorbs the ones that matter:

- reasoning arrives as `delta.reasoning_content` (DeepSeek, llama.cpp, older vLLM) or
  `delta.reasoning` (newer vLLM, Ollama, OpenRouter); some servers send both with the same
  text, so only one is read per chunk;
- tool-call fragments are keyed by `index`, but some servers omit it, restart it at 0 for
  every call, or put the whole call in one fragment; calls are re-keyed in order of first
  appearance, and `ToolCallStart` waits until the call's name is known;
- a call whose arguments never arrived gets `"{}"`, the same default `ToolCall` has;
- some servers finish a tool-calling turn with `stop`; when calls were made, the finish is
  reported as `tool_calls` (the raw word is kept in `Finish.raw`).

Structured output: a `native` request sends `response_format: {type: json_schema}` (with
`strict` when the schema has a strict form), which OpenAI, vLLM, llama.cpp, Ollama and LM
Studio enforce; a server that does not (DeepSeek takes only `json_object`) is made with
`output_modes=("tool", "prompted")`. `tool_choice` maps to the API's `"auto"`,
`"required"` and `{type: function, function: {name}}`.

The adapter does not retry; a retry wrapper reads `ModelError.retryable`/`retry_after`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from ..conversation import AssistantMessage, Usage, UserMessage
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
from ._http import HttpModel, error_from_payload, missing_key_message
from ._output import ForceTool, OutputMode, ToolChoice
from ._wire_ids import WireIds

__all__ = ["OpenAICompatModel"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"

_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "eos": "stop",
    "eos_token": "stop",
    "stop_sequence": "stop",
    "end_turn": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "max_tokens": "length",
    "content_filter": "content_filter",
}


class OpenAICompatModel(HttpModel):
    """A chat model behind an OpenAI-compatible `/chat/completions` endpoint.

    `base_url` and `api_key` default to `OPENAI_BASE_URL` and `OPENAI_API_KEY`, read when
    the model is made (not at import, so tests and apps can set them first). A missing key
    is fine for local servers: then no `Authorization` header is sent; `api_key=""` sends
    none even when `OPENAI_API_KEY` is set (so a key for OpenAI does not leak to a server
    of someone else's). `provider` labels
    usage and pricing, and picks the max-tokens field: OpenAI wants
    `max_completion_tokens` (reasoning models reject `max_tokens`), everyone else
    `max_tokens`. `timeout` (seconds) bounds connecting and each wait for bytes, also on
    a `client` you pass; that client stays yours to close. `output_modes` declares the
    structured-output modes the server supports, best first (an agent's `"auto"` takes
    the first): by default native JSON Schema, then a forced output tool, then prompted.
    """

    #: The structured-output modes this server supports, best first.
    output_modes: tuple[OutputMode, ...]

    def __init__(  # noqa: PLR0913  # a public typed constructor: its keywords are the API
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        provider: str = "openai",
        context_window: int | None = None,
        timeout: float = 120.0,
        extra_headers: Mapping[str, str] | None = None,
        output_modes: tuple[OutputMode, ...] = ("native", "tool", "prompted"),
    ) -> None:
        self.name = model
        self.output_modes = tuple(output_modes)
        self.provider = provider
        self.context_window = context_window
        base = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self.base_url = base.rstrip("/")
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if key:
            headers["authorization"] = f"Bearer {key}"
        super().__init__(
            url=f"{self.base_url}/chat/completions",
            headers=headers,
            client=client,
            timeout=timeout,
            extra_headers=extra_headers,
            missing_key=missing_key_message(
                provider,
                "OPENAI_API_KEY",
                needed=not key
                and api_key is None  # api_key="" means "send none", on purpose
                and self.base_url == DEFAULT_BASE_URL
                and client is None  # a lent client may carry its own auth
                and "authorization" not in {h.lower() for h in extra_headers or {}},
                local_hint="for a local server use ollama:<model> or "
                "openai-compat:<base_url>#<model>",
            ),
        )

    def __repr__(self) -> str:  # never shows the key
        return (
            f"OpenAICompatModel({self.name!r}, provider={self.provider!r}, "
            f"base_url={self.base_url!r})"
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one completion as tiller events; raises `ModelError`s (see `_errors`)."""
        opened = self._post(orjson.dumps(self.request_body(request)))
        decoder = _ChunkDecoder(self.provider)
        async with opened as events:
            async for sse in events:
                if sse.data.strip() == "[DONE]":
                    decoder.done = True
                    break
                for event in decoder.feed(sse.data):
                    yield event
            for event in decoder.close():
                yield event

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for `request` (public so captures and tests can show it)."""
        body: dict[str, Any] = {
            "model": self.name,
            "messages": _messages(request),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                }
                for tool in request.tools
            ]
        if request.tool_choice is not None:
            body["tool_choice"] = _tool_choice(request.tool_choice)
        output = request.output
        if output is not None and output.mode == "native":
            json_schema: dict[str, Any] = {"name": output.name, "schema": output.schema}
            if output.description:
                json_schema["description"] = output.description
            json_schema["strict"] = output.strict
            body["response_format"] = {"type": "json_schema", "json_schema": json_schema}
        if request.max_tokens is not None:
            field_name = "max_completion_tokens" if self.provider == "openai" else "max_tokens"
            body[field_name] = request.max_tokens
        if request.temperature is not None:
            body["temperature"] = request.temperature
        body.update(request.extra)
        return body


def _tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    if isinstance(choice, ForceTool):
        return {"type": "function", "function": {"name": choice.name}}
    return choice


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The conversation in Chat Completions shape.

    A tiller `UserMessage` holds the previous step's tool results and then any user text;
    Chat Completions wants each result as its own `tool` message right after the assistant
    turn, so the results come first and the text follows as a separate `user` message.
    """
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    # The provider's own call ids where they are unique, the runtime's elsewhere (law 10),
    # each short enough for the API.
    wire = WireIds(request.messages, sanitize=_call_id)
    for message in request.messages:
        if isinstance(message, UserMessage):
            for result in message.tool_results:
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": wire[result.call_id],
                        "content": result.content,
                    }
                )
            if message.text:
                messages.append({"role": "user", "content": message.text})
        else:
            messages.append(_assistant(message, wire))
    return messages


#: The longest tool call id OpenAI accepts (longer: 400 `string_above_max_length`).
_MAX_CALL_ID = 40


def _call_id(value: str) -> str:
    """`value`, or a stable digest of it when it is too long for the API: a runtime id
    grows with the run id (a served run's is the client's `runId`, often a UUID), and a
    history from an AG-UI client holds runtime ids only."""
    if len(value) <= _MAX_CALL_ID:
        return value
    return "call_" + hashlib.sha256(value.encode()).hexdigest()[:24]


def _assistant(message: AssistantMessage, wire: WireIds) -> dict[str, Any]:
    # Content is null, not "", beside tool calls: that is what OpenAI itself sends back.
    entry: dict[str, Any] = {
        "role": "assistant",
        "content": message.text or (None if message.tool_calls else ""),
    }
    if message.tool_calls:
        entry["tool_calls"] = [
            {
                "id": wire[call.id],
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments or "{}"},
            }
            for call in message.tool_calls
        ]
    return entry


@dataclass(slots=True)
class _Call:
    """One streamed tool call, as far as it has arrived."""

    index: int
    id: str | None = None
    name: str | None = None
    started: bool = False
    has_args: bool = False
    ended: bool = False
    pending: list[str] = field(default_factory=list)


class _ChunkDecoder:
    """Chat Completions chunks in, tiller stream events out; one per response.

    Kept apart from the HTTP code so the mapping is a plain function of the chunks.
    """

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.done = False  # `data: [DONE]` arrived
        self._calls: list[_Call] = []
        self._by_index: dict[int, _Call] = {}
        self._finish: str | None = None
        #: The model that answered (each chunk's `model`), for `Finish.model`.
        self._model: str | None = None
        self._refused = False

    def feed(self, data: str) -> list[StreamEvent]:
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ModelProtocolError(
                f"{self.provider}: a stream chunk is not JSON: {data[:200]!r}",
                provider=self.provider,
            ) from exc
        if not isinstance(chunk, dict):
            raise ModelProtocolError(
                f"{self.provider}: a stream chunk is not a JSON object: {data[:200]!r}",
                provider=self.provider,
            )
        if chunk.get("error"):
            raise error_from_payload(chunk["error"], provider=self.provider)
        events: list[StreamEvent] = []
        model = chunk.get("model")
        if isinstance(model, str) and model:
            self._model = model
        choice = _first_choice(chunk.get("choices"))
        if choice is not None:
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._delta(delta, events)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                self._finish = reason
                self._end_calls(events)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            events.append(UsageReport(_usage(usage)))
        return events

    def close(self) -> list[StreamEvent]:
        """Events for the end of the stream; raises if it ended before the response did."""
        if self._finish is None and not self.done:
            raise ModelConnectionError(
                f"{self.provider}: the stream ended before the response was complete "
                "(no finish_reason and no [DONE]); the connection was probably dropped",
                provider=self.provider,
            )
        events: list[StreamEvent] = []
        self._end_calls(events)
        raw = self._finish
        reason = _FINISH_REASONS.get(raw, "other") if raw else "stop"
        if self._refused:
            reason = "refusal"
        elif reason == "stop" and self._calls:
            reason = "tool_calls"
        events.append(Finish(reason, raw, model=self._model))
        return events

    def _delta(self, delta: dict[str, Any], events: list[StreamEvent]) -> None:
        reasoning = delta.get("reasoning_content")
        if not (isinstance(reasoning, str) and reasoning):
            reasoning = delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            events.append(ReasoningDelta(reasoning))
        content = delta.get("content")
        if isinstance(content, str) and content:
            events.append(TextDelta(content))
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self._refused = True
            events.append(TextDelta(refusal))
        fragments = delta.get("tool_calls")
        if isinstance(fragments, list):
            for fragment in fragments:
                if not isinstance(fragment, dict):
                    raise ModelProtocolError(
                        f"{self.provider}: a tool call fragment is not an object: {fragment!r}",
                        provider=self.provider,
                    )
                self._fragment(fragment, events)

    def _fragment(self, fragment: dict[str, Any], events: list[StreamEvent]) -> None:
        function = fragment.get("function")
        if not isinstance(function, dict):
            function = {}
        call_id = fragment.get("id") if isinstance(fragment.get("id"), str) else None
        name = function.get("name") if isinstance(function.get("name"), str) else None
        arguments = function.get("arguments")
        if isinstance(arguments, dict | list):  # some servers send the object itself
            arguments = orjson.dumps(arguments).decode()
        call = self._call_for(fragment.get("index"), call_id or None)
        if call.id is None and call_id:
            call.id = call_id
        if call.name is None and name:
            call.name = name
        text = arguments if isinstance(arguments, str) else ""
        if not call.started:
            if text:
                call.pending.append(text)
            if call.name is not None:
                self._start(call, events)
        elif text:
            call.has_args = True
            events.append(ToolCallArgsDelta(call.index, text))

    def _call_for(self, index: object, call_id: str | None) -> _Call:
        """The call a fragment belongs to; a new one when the fragment starts a call."""
        if isinstance(index, int) and not isinstance(index, bool):
            known = self._by_index.get(index)
            if known is not None and not (call_id and known.id and call_id != known.id):
                return known
            call = self._new_call()
            self._by_index[index] = call
            return call
        # No index: a new id starts a call, anything else continues the last one.
        if self._calls and (call_id is None or self._calls[-1].id == call_id):
            return self._calls[-1]
        return self._new_call()

    def _new_call(self) -> _Call:
        call = _Call(len(self._calls))
        self._calls.append(call)
        return call

    def _start(self, call: _Call, events: list[StreamEvent]) -> None:
        call.started = True
        if call.id is None:  # a server that sends no ids: make a stable one
            call.id = f"call_{call.index}"
        events.append(ToolCallStart(call.index, call.id, call.name or ""))
        if call.pending:
            call.has_args = True
            events.append(ToolCallArgsDelta(call.index, "".join(call.pending)))
            call.pending.clear()

    def _end_calls(self, events: list[StreamEvent]) -> None:
        for call in self._calls:
            if call.ended:
                continue
            if not call.started:
                raise ModelProtocolError(
                    f"{self.provider}: tool call {call.index} ended without a name",
                    provider=self.provider,
                )
            if not call.has_args:
                events.append(ToolCallArgsDelta(call.index, "{}"))
                call.has_args = True
            call.ended = True
            events.append(ToolCallEnd(call.index))


def _first_choice(choices: object) -> dict[str, Any] | None:
    """Choice 0: tiller asks for one completion; extra choices (n > 1) are ignored."""
    if not isinstance(choices, list):
        return None
    for choice in choices:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            return choice
    return None


def _usage(usage: dict[str, Any]) -> Usage:
    prompt = usage.get("prompt_tokens_details")
    completion = usage.get("completion_tokens_details")
    return Usage(
        input_tokens=_int(usage.get("prompt_tokens")),
        output_tokens=_int(usage.get("completion_tokens")),
        cached_input_tokens=_int(prompt.get("cached_tokens")) if isinstance(prompt, dict) else 0,
        reasoning_tokens=(
            _int(completion.get("reasoning_tokens")) if isinstance(completion, dict) else 0
        ),
        requests=1,
    )


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
