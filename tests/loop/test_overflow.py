"""A provider that rejects a prompt as too long: the run compacts everything it can,
counts it, makes the step again, and goes on; a second rejection fails the run with an
error saying so. Over the providers' own wire formats too (OpenAI's
`context_length_exceeded`, Anthropic's "prompt is too long")."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import orjson
import pytest

from tiller.conversation import AssistantMessage, Message, UserMessage, check_transcript
from tiller.loop import Agent, Budget, RunContext
from tiller.loop._compaction import COMPACTED_EVENT
from tiller.loop._summary import SUMMARY_SYSTEM_PROMPT
from tiller.model import (
    AnthropicModel,
    Model,
    ModelRequest,
    OpenAICompatModel,
    ScriptedModel,
    TurnInfo,
)
from tiller.state import StopCause
from tiller.tools import tool

from ._support import drive

PROMPT = "Read the twenty files and tell me what they share."


def file_text(path: str) -> str:
    return "".join(f"{path}: line {i} of the file, with some text on it\n" for i in range(20))


@tool(read_only=True)
def read_file(path: str) -> str:
    """Read a file."""
    return file_text(path)


def prompt_tokens(request: ModelRequest) -> int:
    chars = len(request.system or "")
    for message in request.messages:
        chars += len(message.text)
        if isinstance(message, AssistantMessage):
            chars += sum(len(call.arguments) for call in message.tool_calls)
        else:
            chars += sum(len(result.content) for result in message.tool_results)
    return math.ceil(chars / 4)


class Provider:
    """A scripted provider with a hard prompt limit: over `limit` tokens (or, with
    `reject_after`, every main request past that many), it answers with a context
    overflow, as a provider does; otherwise it reads a new file each step and answers
    after `turns` turns."""

    def __init__(self, limit: int, *, turns: int = 20, reject_after: int | None = None) -> None:
        self.limit = limit
        self.turns = turns
        self.reject_after = reject_after
        self.main = 0
        self.rejected: list[ModelRequest] = []
        self.accepted: list[ModelRequest] = []

    def __call__(self, messages: Sequence[Message], info: TurnInfo) -> Any:
        check_transcript(messages)
        assert isinstance(messages[0], UserMessage)
        if info.system == SUMMARY_SYSTEM_PROMPT:
            return "Summary: files f1 to f12 were read; each holds twenty numbered lines."
        size = prompt_tokens(info.request)
        late = self.reject_after is not None and self.main >= self.reject_after
        if size > self.limit or late:
            self.rejected.append(info.request)
            message = f"prompt is too long: {size} tokens > {self.limit} maximum"
            return {"error": {"kind": "context_overflow", "message": message}}
        self.accepted.append(info.request)
        self.main += 1
        if self.main >= self.turns:
            return "They all hold twenty numbered lines."
        return {"tool_calls": [{"name": "read_file", "arguments": {"path": f"f{self.main}"}}]}


def compacted(run: Any) -> list[dict[str, Any]]:
    return list(run.custom(COMPACTED_EVENT))


async def test_a_rejected_prompt_is_compacted_and_the_turn_made_again(ctx: RunContext) -> None:
    provider = Provider(limit=3000)
    budget = Budget()
    run = await drive(Agent(ScriptedModel(provider), [read_file]), PROMPT, ctx.with_budget(budget))
    result, state = run.result, run.result.state

    assert result.stop_cause is StopCause.COMPLETED
    assert result.text == "They all hold twenty numbered lines."
    assert result.error is None
    assert result.usage_complete
    assert run.terminal["type"] == "RUN_FINISHED"
    # Rejected once, recovered once, and the run went on to its end.
    assert len(provider.rejected) == 1
    assert state.compaction.overflow_recoveries == 1
    assert provider.main == provider.turns
    [event] = compacted(run)
    assert event["reason"] == "overflow"
    assert [item["name"] for item in event["passes"]] == ["thin", "summary"]
    assert event["tokensAfter"] < event["tokensBefore"]
    # The retry is the same step: the same latest calls, now with a summary before them.
    rejected = provider.rejected[0]
    retry = next(r for r in provider.accepted if r.messages[0].text.startswith("[Context"))
    assert prompt_tokens(retry) < provider.limit < prompt_tokens(rejected)
    last_rejected, last_retried = rejected.messages[-1], retry.messages[-1]
    assert isinstance(last_rejected, UserMessage) and isinstance(last_retried, UserMessage)
    assert [r.call_id for r in last_retried.tool_results] == [
        r.call_id for r in last_rejected.tool_results
    ]
    assert retry.messages[-2] == rejected.messages[-2]  # the calls, as they were
    # Every call, the rejected one and the summary included, went through the budget.
    assert budget.steps == len(provider.accepted) + len(provider.rejected) + 1
    assert budget.usage == result.usage
    assert budget.steps_in_flight == budget.tokens_in_flight == 0


async def test_a_second_rejection_fails_the_run_with_a_clear_error(ctx: RunContext) -> None:
    provider = Provider(limit=10**6, reject_after=8)
    run = await drive(Agent(ScriptedModel(provider), [read_file]), PROMPT, ctx)
    result = run.result
    assert result.stop_cause is StopCause.ERROR
    assert len(provider.rejected) == 2
    assert result.state.compaction.overflow_recoveries == 1
    assert result.error is not None
    assert result.error.startswith(
        "HTTP 400: the prompt was still too long for the model after the conversation was "
        "compacted; the provider said: prompt is too long:"
    )
    assert run.terminal["type"] == "RUN_ERROR"
    assert run.terminal["code"] == "MODEL_ERROR"
    assert run.terminal["message"] == result.error
    assert len(compacted(run)) == 1


async def test_with_nothing_to_compact_the_providers_error_stands(ctx: RunContext) -> None:
    model = ScriptedModel(
        [{"error": {"kind": "context_overflow", "message": "prompt is too long"}}]
    )
    run = await drive(Agent(model), "hi", ctx)
    assert run.result.stop_cause is StopCause.ERROR
    assert run.result.error == "HTTP 400: prompt is too long"
    assert run.result.state.compaction.overflow_recoveries == 0
    assert compacted(run) == []
    assert len(model.requests) == 1


async def test_an_overflow_after_a_failed_summary_still_thins(ctx: RunContext) -> None:
    """A summary that fails leaves thinning, which may be enough to go on."""
    provider = Provider(limit=3000)

    def turns(messages: Sequence[Message], info: TurnInfo) -> Any:
        if info.system == SUMMARY_SYSTEM_PROMPT:
            return ""  # an empty summary: rejected
        return provider(messages, info)

    run = await drive(Agent(ScriptedModel(turns), [read_file]), PROMPT, ctx)
    state = run.result.state
    assert run.result.stop_cause is StopCause.COMPLETED
    assert state.compaction.gave_up
    assert state.compaction.overflow_recoveries == 1
    [event] = compacted(run)
    assert [item["name"] for item in event["passes"]] == ["thin"]
    assert event["summaryFailed"] == "the model returned an empty summary"


# ── over the wire ────────────────────────────────────────────────────────────────

#: Request bodies longer than this are refused as too long.
WIRE_LIMIT = 9000

OPENAI_OVERFLOW = {
    "error": {
        "message": "This model's maximum context length is 4096 tokens. However, your "
        "messages resulted in 5210 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
ANTHROPIC_OVERFLOW = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 208310 tokens > 200000 maximum",
    },
}


def _sse(events: list[tuple[str | None, dict[str, Any] | str]]) -> httpx.Response:
    lines = []
    for name, data in events:
        if name is not None:
            lines.append(f"event: {name}")
        text = data if isinstance(data, str) else orjson.dumps(data).decode()
        lines.append(f"data: {text}\n")
    return httpx.Response(
        200,
        headers={"content-type": "text/event-stream"},
        content=("\n".join(lines) + "\n").encode(),
    )


def openai_reply(text: str | None, call: tuple[str, str, str] | None, size: int) -> httpx.Response:
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    delta: dict[str, Any] = {"role": "assistant"}
    if text is not None:
        delta["content"] = text
    if call is not None:
        call_id, name, arguments = call
        delta["tool_calls"] = [
            {
                "index": 0,
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        ]
    finish = "tool_calls" if call is not None else "stop"
    usage = {"prompt_tokens": size, "completion_tokens": 9, "total_tokens": size + 9}
    return _sse(
        [
            (None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}),
            (None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}),
            (None, {**base, "choices": [], "usage": usage}),
            (None, "[DONE]"),
        ]
    )


def anthropic_reply(
    text: str | None, call: tuple[str, str, str] | None, size: int
) -> httpx.Response:
    events: list[tuple[str | None, dict[str, Any] | str]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "claude",
                    "stop_reason": None,
                    "usage": {"input_tokens": size, "output_tokens": 1},
                },
            },
        )
    ]
    if text is not None:
        events += [
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": text},
                },
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ]
    if call is not None:
        call_id, name, arguments = call
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": arguments}
        events += [
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": block},
            ),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ]
    stop = "tool_use" if call is not None else "end_turn"
    events += [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop},
                "usage": {"output_tokens": 9},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return _sse(events)


class WireProvider:
    """An HTTP handler speaking one provider's format, with a hard limit on the body."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.main = 0
        self.rejected = 0
        self.summaries = 0

    def system_of(self, body: dict[str, Any]) -> str:
        if self.kind == "openai":
            first = body["messages"][0]
            return str(first["content"]) if first["role"] == "system" else ""
        return str(body.get("system") or "")

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content)
        reply = openai_reply if self.kind == "openai" else anthropic_reply
        size = len(request.content) // 4
        if self.system_of(body) == SUMMARY_SYSTEM_PROMPT:
            self.summaries += 1
            assert "tools" not in body or not body["tools"]
            return reply("Summary: files f1 to f9 were read; each has twenty lines.", None, size)
        if len(request.content) > WIRE_LIMIT:
            self.rejected += 1
            return httpx.Response(
                400, json=OPENAI_OVERFLOW if self.kind == "openai" else ANTHROPIC_OVERFLOW
            )
        self.main += 1
        if self.main >= 12:
            return reply("They all hold twenty lines.", None, size)
        arguments = orjson.dumps({"path": f"f{self.main}"}).decode()
        return reply(None, (f"call_{self.main}", "read_file", arguments), size)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_recovery_over_the_providers_wire_formats(ctx: RunContext, kind: str) -> None:
    handler = WireProvider(kind)
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    factories: dict[str, Callable[[], Model]] = {
        "openai": lambda: OpenAICompatModel(
            "gpt-4o", base_url="http://provider.test/v1", api_key="k", client=client
        ),
        "anthropic": lambda: AnthropicModel(
            "claude", base_url="http://provider.test", api_key="k", client=client
        ),
    }
    model = factories[kind]()
    try:
        run = await drive(Agent(model, [read_file]), PROMPT, ctx)
    finally:
        await model.aclose()
        await client.aclose()
    state = run.result.state
    assert run.result.stop_cause is StopCause.COMPLETED
    assert run.result.text == "They all hold twenty lines."
    assert handler.rejected == 1
    assert handler.summaries == 1
    assert state.compaction.overflow_recoveries == 1
    [event] = compacted(run)
    assert event["reason"] == "overflow"
