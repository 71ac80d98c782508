"""The Anthropic adapter against a local server speaking the Messages API's SSE.

Events are shaped as Anthropic documents and sends them: `event:` + `data:` pairs,
`message_start` with usage, `ping`s, numbered content blocks, `message_delta` with the
stop reason and cumulative output tokens, `message_stop`, and `error` events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from tiller.conversation import (
    AssistantMessage,
    Reasoning,
    ToolCall,
    ToolResult,
    TranscriptError,
    Usage,
    UserMessage,
)
from tiller.errors import UsageError
from tiller.model import (
    ContextOverflow,
    Finish,
    ModelConnectionError,
    ModelHTTPError,
    ModelProtocolError,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolSpec,
    UsageReport,
)
from tiller.model.anthropic import AnthropicModel

from ._servers import (
    LocalServer,
    Reply,
    anthropic_sse,
    clean_env,
    collect,
    collect_until_error,
    json_reply,
)


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clean_env(monkeypatch)


@pytest.fixture
async def server() -> AsyncIterator[LocalServer]:
    async with LocalServer() as srv:
        yield srv


@pytest.fixture
async def model(server: LocalServer) -> AsyncIterator[AnthropicModel]:
    async with AnthropicModel("claude-sonnet-4-5", base_url=server.url, api_key="sk-ant-test") as m:
        yield m


# --- recorded-shape events -------------------------------------------------------------


def message_start(
    input_tokens: int = 25, cache_read: int = 0, cache_write: int = 0
) -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {
            "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "claude-sonnet-4-5-20250929",
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens,
                "cache_creation_input_tokens": cache_write,
                "cache_read_input_tokens": cache_read,
                "output_tokens": 1,
                "service_tier": "standard",
            },
        },
    }


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def block_delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def block_stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def text(index: int, *parts: str) -> list[dict[str, Any]]:
    return [
        block_start(index, {"type": "text", "text": ""}),
        *(block_delta(index, {"type": "text_delta", "text": p}) for p in parts),
        block_stop(index),
    ]


def message_delta(stop_reason: str | None, output_tokens: int) -> dict[str, Any]:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": output_tokens},
    }


PING = {"type": "ping"}
MESSAGE_STOP = {"type": "message_stop"}


def hello(**kwargs: Any) -> ModelRequest:
    return ModelRequest(system="Be brief.", messages=[UserMessage(text="Hi")], **kwargs)


def usage(input_tokens: int, output_tokens: int, cached: int = 0) -> Usage:
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_input_tokens=cached,
        requests=1,
    )


# --- streams ---------------------------------------------------------------------------


async def test_plain_text_usage_and_the_request_the_server_got(
    server: LocalServer, model: AnthropicModel
) -> None:
    server.reply(
        anthropic_sse(
            message_start(input_tokens=25, cache_read=100, cache_write=10),
            block_start(0, {"type": "text", "text": ""}),
            PING,
            block_delta(0, {"type": "text_delta", "text": "Hello"}),
            block_delta(0, {"type": "text_delta", "text": "!"}),
            block_stop(0),
            message_delta("end_turn", 15),
            MESSAGE_STOP,
        )
    )
    events = await collect(model, hello())
    assert events == [
        # input includes both cache counts: 25 + 100 read + 10 written
        UsageReport(usage(135, 1, cached=100)),
        TextDelta("Hello"),
        TextDelta("!"),
        UsageReport(usage(135, 15, cached=100)),
        Finish("stop", "end_turn"),
    ]
    # The model that answered, as message_start names it.
    assert events[-1].model == "claude-sonnet-4-5-20250929"
    [request] = server.requests
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.headers["x-api-key"] == "sk-ant-test"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert request.json() == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "stream": True,
        "system": "Be brief.",
    }


async def test_request_mapping_one_user_message_with_tool_results_first(
    server: LocalServer, model: AnthropicModel
) -> None:
    server.reply(
        anthropic_sse(message_start(), *text(0, "ok"), message_delta("end_turn", 2), MESSAGE_STOP)
    )
    conversation: list[UserMessage | AssistantMessage] = [
        UserMessage(text="Weather in Paris and Rome?"),
        AssistantMessage(
            text="Checking both.",
            reasoning=(
                Reasoning(text="Two cities, two calls.", signature="EqQBCgIYAhIM1gbcDa9G"),
                Reasoning(redacted="EmwKAhgBEgy3va3pzix/LafPsn4a"),
                Reasoning(text="from another provider, unsigned"),
            ),
            tool_calls=(
                ToolCall(id="toolu_a", name="weather", arguments='{"city": "Paris"}'),
                ToolCall(id="toolu_b", name="weather", arguments=""),
            ),
        ),
        UserMessage(
            text="Also, use Celsius.",
            tool_results=(
                ToolResult(call_id="toolu_a", name="weather", content="18C"),
                ToolResult(call_id="toolu_b", name="weather", content="", is_error=True),
            ),
        ),
        UserMessage(),  # empty: skipped, and nothing of one role lands twice in a row
        UserMessage(text="Thanks."),
    ]
    tools = [
        ToolSpec(
            name="weather",
            description="Current weather for a city.",
            parameters={"type": "object", "properties": {"city": {"type": "string"}}},
        )
    ]
    await collect(
        model,
        ModelRequest(
            system=None, messages=conversation, tools=tools, max_tokens=512, temperature=0.3
        ),
    )
    body = server.requests[0].json()
    assert "system" not in body
    assert (body["max_tokens"], body["temperature"]) == (512, 0.3)
    assert body["tools"] == [
        {
            "name": "weather",
            "description": "Current weather for a city.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "thinking",
                    "thinking": "Two cities, two calls.",
                    "signature": "EqQBCgIYAhIM1gbcDa9G",
                },
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
                {"type": "text", "text": "Checking both."},
                {
                    "type": "tool_use",
                    "id": "toolu_a",
                    "name": "weather",
                    "input": {"city": "Paris"},
                },
                {"type": "tool_use", "id": "toolu_b", "name": "weather", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_a",
                    "content": "18C",
                    "is_error": False,
                },
                {"type": "tool_result", "tool_use_id": "toolu_b", "is_error": True},
                {"type": "text", "text": "Also, use Celsius."},
                {"type": "text", "text": "Thanks."},
            ],
        },
    ]


async def test_thinking_text_and_parallel_tool_use(
    server: LocalServer, model: AnthropicModel
) -> None:
    server.reply(
        anthropic_sse(
            message_start(input_tokens=472),
            block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
            block_delta(0, {"type": "thinking_delta", "thinking": "Two cities, "}),
            block_delta(0, {"type": "thinking_delta", "thinking": "two calls."}),
            block_delta(0, {"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9G"}),
            block_stop(0),
            *text(1, "Checking."),
            block_start(2, {"type": "tool_use", "id": "toolu_01A", "name": "weather", "input": {}}),
            block_delta(2, {"type": "input_json_delta", "partial_json": ""}),
            block_delta(2, {"type": "input_json_delta", "partial_json": '{"city": "Pa'}),
            PING,
            block_delta(2, {"type": "input_json_delta", "partial_json": 'ris"}'}),
            block_stop(2),
            block_start(3, {"type": "tool_use", "id": "toolu_01B", "name": "clock", "input": {}}),
            block_stop(3),
            message_delta("tool_use", 89),
            MESSAGE_STOP,
        )
    )
    events = await collect(model, hello())
    assert events == [
        UsageReport(usage(472, 1)),
        ReasoningDelta("Two cities, "),
        ReasoningDelta("two calls."),
        ReasoningDelta(signature="EqQBCgIYAhIM1gbcDa9G"),
        TextDelta("Checking."),
        ToolCallStart(0, "toolu_01A", "weather"),
        ToolCallArgsDelta(0, '{"city": "Pa'),
        ToolCallArgsDelta(0, 'ris"}'),
        ToolCallEnd(0),
        ToolCallStart(1, "toolu_01B", "clock"),
        ToolCallArgsDelta(1, "{}"),  # no input deltas: the arguments are {}
        ToolCallEnd(1),
        UsageReport(usage(472, 89)),
        Finish("tool_calls", "tool_use"),
    ]


async def test_redacted_thinking(server: LocalServer, model: AnthropicModel) -> None:
    server.reply(
        anthropic_sse(
            message_start(),
            block_start(0, {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}),
            block_stop(0),
            *text(1, "Done."),
            message_delta("end_turn", 40),
            MESSAGE_STOP,
        )
    )
    assert await collect(model, hello()) == [
        UsageReport(usage(25, 1)),
        ReasoningDelta(redacted="EmwKAhgBEgy3va3pzix"),
        TextDelta("Done."),
        UsageReport(usage(25, 40)),
        Finish("stop", "end_turn"),
    ]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("tool_use", "tool_calls"),
        ("max_tokens", "length"),
        ("refusal", "refusal"),
        ("pause_turn", "other"),
    ],
)
async def test_stop_reasons(
    raw: str, reason: str, server: LocalServer, model: AnthropicModel
) -> None:
    server.reply(anthropic_sse(message_start(), *text(0, "x"), message_delta(raw, 3), MESSAGE_STOP))
    events = await collect(model, hello())
    assert events[-1] == Finish(reason, raw)  # type: ignore[arg-type]


async def test_unknown_events_and_server_tool_blocks_are_skipped(
    server: LocalServer, model: AnthropicModel
) -> None:
    server.reply(
        anthropic_sse(
            message_start(),
            {"type": "some_future_event", "detail": 1},
            block_start(
                0,
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
            ),
            block_delta(0, {"type": "input_json_delta", "partial_json": '{"query": "tiller"}'}),
            block_stop(0),
            block_start(
                1,
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
            ),
            block_stop(1),
            *text(2, "After search."),
            message_delta("end_turn", 9),
            MESSAGE_STOP,
        )
    )
    assert await collect(model, hello()) == [
        UsageReport(usage(25, 1)),
        TextDelta("After search."),
        UsageReport(usage(25, 9)),
        Finish("stop", "end_turn"),
    ]


async def test_delta_for_a_block_that_never_started_is_a_protocol_error(
    server: LocalServer, model: AnthropicModel
) -> None:
    server.reply(
        anthropic_sse(message_start(), block_delta(3, {"type": "text_delta", "text": "x"}))
    )
    with pytest.raises(ModelProtocolError):
        await collect(model, hello())


# --- errors ----------------------------------------------------------------------------


def anthropic_error(kind: str, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
    }


async def test_overloaded_error_event_mid_stream(
    server: LocalServer, model: AnthropicModel
) -> None:
    server.reply(
        anthropic_sse(
            message_start(),
            block_start(0, {"type": "text", "text": ""}),
            block_delta(0, {"type": "text_delta", "text": "Par"}),
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        )
    )
    events, info = await collect_until_error(model, hello(), ModelHTTPError)
    assert events == [UsageReport(usage(25, 1)), TextDelta("Par")]
    assert (info.value.status, info.value.retryable) == (529, True)
    assert "Overloaded" in str(info.value)


async def test_http_errors(server: LocalServer, model: AnthropicModel) -> None:
    server.reply(
        json_reply(
            429,
            anthropic_error(
                "rate_limit_error",
                "Number of request tokens has exceeded your per-minute rate limit",
            ),
            headers=[("retry-after", "3")],
        ),
        json_reply(529, anthropic_error("overloaded_error", "Overloaded")),
        json_reply(500, anthropic_error("api_error", "Internal server error")),
        json_reply(401, anthropic_error("authentication_error", "invalid x-api-key")),
    )
    _, info = await collect_until_error(model, hello(), ModelHTTPError)
    assert (info.value.status, info.value.retryable, info.value.retry_after) == (429, True, 3.0)
    assert "per-minute rate limit" in str(info.value)
    for status, retryable, words in (
        (529, True, "Overloaded"),
        (500, True, "Internal"),
        (401, False, "x-api-key"),
    ):
        _, info = await collect_until_error(model, hello(), ModelHTTPError)
        assert (info.value.status, info.value.retryable) == (status, retryable)
        assert words in str(info.value)
        assert info.value.provider == "anthropic"


async def test_prompt_too_long_is_context_overflow(
    server: LocalServer, model: AnthropicModel
) -> None:
    server.reply(
        json_reply(
            400,
            anthropic_error(
                "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"
            ),
        )
    )
    _, info = await collect_until_error(model, hello(), ContextOverflow)
    assert (info.value.status, info.value.retryable) == (400, False)
    assert "prompt is too long" in str(info.value)


async def test_malformed_event_is_a_protocol_error(
    server: LocalServer, model: AnthropicModel
) -> None:
    good = anthropic_sse(message_start(), block_start(0, {"type": "text", "text": ""}))
    broken = (
        b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "del\n\n'
    )
    server.reply(Reply(headers=good.headers, chunks=[*good.chunks, broken]))
    events, info = await collect_until_error(model, hello(), ModelProtocolError)
    assert events == [UsageReport(usage(25, 1))]
    assert isinstance(info.value.__cause__, orjson.JSONDecodeError)


async def test_connection_dropped_before_message_stop(
    server: LocalServer, model: AnthropicModel
) -> None:
    server.reply(
        anthropic_sse(
            message_start(),
            block_start(0, {"type": "tool_use", "id": "toolu_1", "name": "write", "input": {}}),
            block_delta(0, {"type": "input_json_delta", "partial_json": '{"text": "a ti'}),
            complete=False,
        )
    )
    events, info = await collect_until_error(model, hello(), ModelConnectionError)
    assert events == [
        UsageReport(usage(25, 1)),
        ToolCallStart(0, "toolu_1", "write"),
        ToolCallArgsDelta(0, '{"text": "a ti'),
    ]
    assert info.value.retryable
    assert isinstance(info.value.__cause__, httpx.RemoteProtocolError)


async def test_clean_end_before_message_stop_is_a_dropped_connection(
    server: LocalServer, model: AnthropicModel
) -> None:
    server.reply(
        anthropic_sse(
            message_start(),
            *text(0, "Once"),
            message_delta("end_turn", 3),
            framing="close",
            complete=False,
        )
    )
    events, info = await collect_until_error(model, hello(), ModelConnectionError)
    assert events[-1] == UsageReport(usage(25, 3))
    assert info.value.retryable


# --- configuration ---------------------------------------------------------------------


async def test_environment_and_no_key(server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url + "/")
    server.reply(anthropic_sse(message_start(), message_delta("end_turn", 1), MESSAGE_STOP))
    async with AnthropicModel("claude-haiku-4-5") as m:
        await collect(m, hello())
    assert "x-api-key" not in server.requests[0].headers

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    server.reply(anthropic_sse(message_start(), message_delta("end_turn", 1), MESSAGE_STOP))
    async with AnthropicModel("claude-haiku-4-5", extra_headers={"anthropic-beta": "x"}) as m:
        assert "sk-ant-env" not in repr(m)
        assert await collect(m, hello()) == [
            UsageReport(usage(25, 1)),
            UsageReport(usage(25, 1)),
            Finish("stop", "end_turn"),
        ]
    assert server.requests[1].path == "/v1/messages"
    assert server.requests[1].headers["x-api-key"] == "sk-ant-env"
    assert server.requests[1].headers["anthropic-beta"] == "x"


def test_thinking_budget() -> None:
    m = AnthropicModel("claude-sonnet-4-5", thinking_budget=8000)
    body = m.request_body(hello(max_tokens=16000, temperature=0.5))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 8000}
    assert "temperature" not in body  # the API takes no temperature with thinking on
    # clamped below max_tokens, and off when max_tokens leaves less than the minimum
    assert m.request_body(hello(max_tokens=5000))["thinking"]["budget_tokens"] == 4999
    small = m.request_body(hello(max_tokens=1000, temperature=0.5))
    assert "thinking" not in small
    assert small["temperature"] == 0.5
    with pytest.raises(UsageError):
        AnthropicModel("claude-sonnet-4-5", thinking_budget=100)


async def test_arguments_that_are_not_a_json_object_break_the_transcript() -> None:
    async with AnthropicModel("claude-sonnet-4-5") as m:
        for arguments in ('{"city": "Par', "[1, 2]"):
            request = ModelRequest(
                system=None,
                messages=[
                    UserMessage(text="hi"),
                    AssistantMessage(tool_calls=(ToolCall(id="t", name="f", arguments=arguments),)),
                ],
            )
            with pytest.raises(TranscriptError):
                m.request_body(request)


async def test_a_passed_client_stays_open_and_a_closed_model_refuses(server: LocalServer) -> None:
    server.reply(anthropic_sse(message_start(), message_delta("end_turn", 1), MESSAGE_STOP))
    async with httpx.AsyncClient() as client:
        m = AnthropicModel("claude-haiku-4-5", base_url=server.url, client=client)
        await collect(m, hello())
        await m.aclose()
        await m.aclose()
        assert not client.is_closed
        with pytest.raises(UsageError):
            await collect(m, hello())
