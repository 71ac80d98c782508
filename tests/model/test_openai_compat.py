"""The OpenAI-compatible adapter against a local server speaking Chat Completions SSE.

Chunks have the shape OpenAI, vLLM, Ollama and llama.cpp really send (ids, `logprobs`,
`usage: null` on every chunk, the usage-only last chunk with `choices: []`). The shared
plumbing in `tiller.model._http` (SSE parsing, Retry-After, overflow detection) is tested
here too, where it is first used.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import orjson
import pytest

from tiller.conversation import AssistantMessage, ToolCall, ToolResult, Usage, UserMessage
from tiller.errors import UsageError
from tiller.model import (
    ContextOverflow,
    Finish,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelProtocolError,
    ModelRequest,
    ModelTimeout,
    ReasoningDelta,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolSpec,
    UsageReport,
)
from tiller.model._http import ServerSentEvent, is_context_overflow, iter_sse, parse_retry_after
from tiller.model.openai_compat import OpenAICompatModel

from ._servers import (
    LocalServer,
    Reply,
    byte_chunks,
    clean_env,
    collect,
    collect_until_error,
    json_reply,
    openai_sse,
)


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clean_env(monkeypatch)


@pytest.fixture
async def server() -> AsyncIterator[LocalServer]:
    async with LocalServer() as srv:
        yield srv


@pytest.fixture
async def model(server: LocalServer) -> AsyncIterator[OpenAICompatModel]:
    async with OpenAICompatModel("gpt-4o", base_url=f"{server.url}/v1", api_key="sk-test") as m:
        yield m


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    """One `chat.completion.chunk`, as OpenAI sends it with `include_usage` on."""
    return {
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion.chunk",
        "created": 1741570283,
        "model": "gpt-4o-2024-08-06",
        "service_tier": "default",
        "system_fingerprint": "fp_eb9dce56a8",
        "choices": [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}],
        "usage": None,
    }


def role_chunk() -> dict[str, Any]:
    return chunk({"role": "assistant", "content": "", "refusal": None})


def usage_chunk(
    prompt: int = 19, completion: int = 10, cached: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion.chunk",
        "created": 1741570283,
        "model": "gpt-4o-2024-08-06",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": reasoning,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
    }


def tool_fragment(
    index: int, *, id: str | None = None, name: str | None = None, args: str = ""
) -> dict[str, Any]:
    fragment: dict[str, Any] = {"index": index, "function": {"arguments": args}}
    if id is not None:
        fragment.update(id=id, type="function")
        fragment["function"]["name"] = name
    return fragment


def hello(**kwargs: Any) -> ModelRequest:
    return ModelRequest(system="Be brief.", messages=[UserMessage(text="Hi")], **kwargs)


def usage(prompt: int = 19, completion: int = 10, cached: int = 0, reasoning: int = 0) -> Usage:
    return Usage(
        input_tokens=prompt,
        output_tokens=completion,
        cached_input_tokens=cached,
        reasoning_tokens=reasoning,
        requests=1,
    )


# --- streams ---------------------------------------------------------------------------


async def test_plain_text_and_the_request_the_server_got(
    server: LocalServer, model: OpenAICompatModel
) -> None:
    server.reply(
        openai_sse(
            role_chunk(),
            chunk({"content": "Hello"}),
            chunk({"content": " there"}),
            chunk({}, "stop"),
            usage_chunk(prompt=19, completion=2, cached=6),
            "[DONE]",
        )
    )
    events = await collect(
        model, hello(max_tokens=256, temperature=0.2, extra={"top_p": 0.9, "seed": 7})
    )
    assert events == [
        TextDelta("Hello"),
        TextDelta(" there"),
        UsageReport(usage(19, 2, cached=6)),
        Finish("stop", "stop"),
    ]
    # The model that answered, as the chunks name it (not the "gpt-4o" asked for).
    assert events[-1].model == "gpt-4o-2024-08-06"
    [request] = server.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.headers["content-type"] == "application/json"
    assert request.json() == {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_completion_tokens": 256,
        "temperature": 0.2,
        "top_p": 0.9,
        "seed": 7,
    }


async def test_tool_results_go_first_as_tool_messages_then_the_user_text(
    server: LocalServer,
) -> None:
    server.reply(openai_sse(chunk({"content": "ok"}, "stop"), "[DONE]"))
    conversation: list[UserMessage | AssistantMessage] = [
        UserMessage(text="Weather in Paris and Rome?"),
        AssistantMessage(
            text="Checking both.",
            tool_calls=(
                ToolCall(id="call_a", name="weather", arguments='{"city":"Paris"}'),
                ToolCall(id="call_b", name="weather", arguments='{"city":"Rome"}'),
            ),
        ),
        UserMessage(
            text="Also, use Celsius.",
            tool_results=(
                ToolResult(call_id="call_a", name="weather", content="18C"),
                ToolResult(call_id="call_b", name="weather", content="boom", is_error=True),
            ),
        ),
        AssistantMessage(tool_calls=(ToolCall(id="call_c", name="clock", arguments=""),)),
        UserMessage(tool_results=(ToolResult(call_id="call_c", name="clock", content="noon"),)),
    ]
    tools = [
        ToolSpec(
            name="weather",
            description="Current weather for a city.",
            parameters={"type": "object", "properties": {"city": {"type": "string"}}},
        )
    ]
    # A local server (vLLM here): no key anywhere, so no Authorization header; `max_tokens`.
    async with OpenAICompatModel("qwen3", base_url=f"{server.url}/v1", provider="vllm") as m:
        await collect(
            m, ModelRequest(system=None, messages=conversation, tools=tools, max_tokens=100)
        )
    [request] = server.requests
    assert "authorization" not in request.headers
    body = request.json()
    assert body["max_tokens"] == 100
    assert "max_completion_tokens" not in body
    assert "temperature" not in body
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "Current weather for a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    assert body["messages"] == [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "18C"},
        {"role": "tool", "tool_call_id": "call_b", "content": "boom"},
        {"role": "user", "content": "Also, use Celsius."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_c",
                    "type": "function",
                    "function": {"name": "clock", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_c", "content": "noon"},
    ]


async def test_parallel_tool_calls_with_interleaved_argument_fragments(
    server: LocalServer, model: OpenAICompatModel
) -> None:
    server.reply(
        openai_sse(
            chunk({"role": "assistant", "content": None, "refusal": None}),
            chunk({"tool_calls": [tool_fragment(0, id="call_paris", name="weather")]}),
            chunk({"tool_calls": [tool_fragment(0, args='{"ci')]}),
            chunk({"tool_calls": [tool_fragment(1, id="call_rome", name="weather")]}),
            chunk({"tool_calls": [tool_fragment(1, args='{"city": ')]}),
            chunk({"tool_calls": [tool_fragment(0, args='ty": "Paris"}')]}),
            chunk({"tool_calls": [tool_fragment(1, args='"Rome"}')]}),
            chunk({}, "tool_calls"),
            usage_chunk(prompt=80, completion=40),
            "[DONE]",
        )
    )
    events = await collect(model, hello())
    assert events == [
        ToolCallStart(0, "call_paris", "weather"),
        ToolCallArgsDelta(0, '{"ci'),
        ToolCallStart(1, "call_rome", "weather"),
        ToolCallArgsDelta(1, '{"city": '),
        ToolCallArgsDelta(0, 'ty": "Paris"}'),
        ToolCallArgsDelta(1, '"Rome"}'),
        ToolCallEnd(0),
        ToolCallEnd(1),
        UsageReport(usage(80, 40)),
        Finish("tool_calls", "tool_calls"),
    ]


async def test_calls_without_index_and_stop_with_calls_and_no_arguments(
    server: LocalServer, model: OpenAICompatModel
) -> None:
    # Ollama-style: whole calls in one chunk, no `index`, finish_reason "stop"; a call to a
    # tool without parameters carries no arguments at all.
    server.reply(
        openai_sse(
            chunk(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "function": {"name": "search", "arguments": {"q": "tiller"}},
                        },
                        {"id": "call_2", "function": {"name": "clock"}},
                    ],
                }
            ),
            chunk({"content": ""}, "stop"),
            "[DONE]",
        )
    )
    events = await collect(model, hello())
    assert events == [
        ToolCallStart(0, "call_1", "search"),
        ToolCallArgsDelta(0, '{"q":"tiller"}'),
        ToolCallStart(1, "call_2", "clock"),
        ToolCallEnd(0),
        ToolCallArgsDelta(1, "{}"),
        ToolCallEnd(1),
        Finish("tool_calls", "stop"),
    ]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_fields(field: str, server: LocalServer, model: OpenAICompatModel) -> None:
    server.reply(
        openai_sse(
            role_chunk(),
            chunk({field: "The user greets"}),
            chunk({field: " me."}),
            chunk({"content": "Hi!"}),
            chunk({}, "stop"),
            usage_chunk(prompt=10, completion=30, reasoning=25),
            "[DONE]",
        )
    )
    assert await collect(model, hello()) == [
        ReasoningDelta("The user greets"),
        ReasoningDelta(" me."),
        TextDelta("Hi!"),
        UsageReport(usage(10, 30, reasoning=25)),
        Finish("stop", "stop"),
    ]


async def test_reasoning_sent_under_both_names_is_read_once(
    server: LocalServer, model: OpenAICompatModel
) -> None:
    server.reply(
        openai_sse(
            chunk({"reasoning": "hmm", "reasoning_content": "hmm"}),
            chunk({"content": "ok"}, "stop"),
            "[DONE]",
        )
    )
    assert await collect(model, hello()) == [
        ReasoningDelta("hmm"),
        TextDelta("ok"),
        Finish("stop", "stop"),
    ]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("content_filter", "content_filter"),
        ("tool_calls", "tool_calls"),
        ("function_call", "tool_calls"),
        ("something_new", "other"),
    ],
)
async def test_finish_reasons(
    raw: str, reason: str, server: LocalServer, model: OpenAICompatModel
) -> None:
    server.reply(openai_sse(chunk({"content": "x"}), chunk({}, raw), "[DONE]"))
    assert await collect(model, hello()) == [TextDelta("x"), Finish(reason, raw)]  # type: ignore[arg-type]


async def test_refusal_is_text_and_finishes_as_refusal(
    server: LocalServer, model: OpenAICompatModel
) -> None:
    server.reply(
        openai_sse(
            chunk({"role": "assistant", "content": None, "refusal": ""}),
            chunk({"refusal": "I can't help with that."}),
            chunk({}, "stop"),
            "[DONE]",
        )
    )
    assert await collect(model, hello()) == [
        TextDelta("I can't help with that."),
        Finish("refusal", "stop"),
    ]


async def test_only_the_first_choice_is_read(server: LocalServer, model: OpenAICompatModel) -> None:
    second = chunk({"content": "other"})
    second["choices"][0]["index"] = 1
    server.reply(openai_sse(second, chunk({"content": "first"}, "stop"), "[DONE]"))
    assert await collect(model, hello()) == [TextDelta("first"), Finish("stop", "stop")]


async def test_json_line_separators_inside_strings_do_not_split_lines(
    server: LocalServer, model: OpenAICompatModel
) -> None:
    # JSON may carry U+2028, U+2029 and U+0085 raw; SSE lines end only at CR/LF, so they
    # must not split the line (httpx's `aiter_lines` would).
    text = "a\u2028b\x85c\u2029d"
    raw = b'data: {"choices":[{"index":0,"delta":{"content":"' + text.encode() + b'"}}]}\r\n\r\n'
    server.reply(
        Reply(
            headers=[("content-type", "text/event-stream")],
            chunks=[
                b": keep-alive\n\n",
                raw,
                # the last event is split across chunks, with a CRLF split between two:
                # a lone CR at a chunk's end must wait for its LF
                b'data: {"choices":[{"index":0,"delta":{},',
                b'"finish_reason":"stop"}]}\r',
                b"\n\r\ndata: [DONE]\r\n\r\n",
            ],
        )
    )
    assert await collect(model, hello()) == [TextDelta(text), Finish("stop", "stop")]


async def test_stopping_early_closes_the_response(
    server: LocalServer, model: OpenAICompatModel
) -> None:
    server.reply(openai_sse(chunk({"content": "one"}), chunk({"content": "two"}, "stop"), "[DONE]"))
    async with asyncio.timeout(10):
        stream = model.stream(hello())
        async with contextlib.aclosing(stream):  # type: ignore[type-var]
            async for event in stream:
                assert event == TextDelta("one")
                break


# --- errors ----------------------------------------------------------------------------


def openai_error(message: str, type_: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


async def test_429_with_retry_after_seconds(server: LocalServer, model: OpenAICompatModel) -> None:
    server.reply(
        json_reply(
            429,
            openai_error(
                "Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Used "
                "29000, Requested 2000. Please try again in 2s.",
                "tokens",
                "rate_limit_exceeded",
            ),
            headers=[("retry-after", "3")],
        )
    )
    _, info = await collect_until_error(model, hello(), ModelHTTPError)
    error = info.value
    assert type(error) is ModelHTTPError
    assert (error.status, error.retryable, error.retry_after) == (429, True, 3.0)
    assert error.provider == "openai"
    assert "Rate limit reached for gpt-4o" in str(error)
    assert error.body is not None and "rate_limit_exceeded" in error.body


async def test_429_with_retry_after_http_date(
    server: LocalServer, model: OpenAICompatModel
) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    server.reply(
        json_reply(
            429,
            openai_error("Too many requests", "requests", "rate_limit_exceeded"),
            headers=[("retry-after", format_datetime(later, usegmt=True))],
        )
    )
    _, info = await collect_until_error(model, hello(), ModelHTTPError)
    assert info.value.retryable
    assert info.value.retry_after is not None
    assert 3000 < info.value.retry_after <= 3600


def test_parse_retry_after_forms() -> None:
    now = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after(httpx.Headers({"retry-after": "3"})) == 3.0
    assert parse_retry_after(httpx.Headers({"retry-after": " 1.5 "})) == 1.5
    assert parse_retry_after(httpx.Headers({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    date = "Sat, 01 Mar 2025 12:00:42 GMT"
    assert parse_retry_after(httpx.Headers({"retry-after": date}), now=now) == 42.0
    past = "Sat, 01 Mar 2025 11:00:00 GMT"
    assert parse_retry_after(httpx.Headers({"retry-after": past}), now=now) == 0.0
    for junk in ("soon", "-1", "nan", ""):
        assert parse_retry_after(httpx.Headers({"retry-after": junk}), now=now) is None
    assert parse_retry_after(httpx.Headers({})) is None


async def test_500_is_retryable_and_an_html_body_becomes_the_message(
    server: LocalServer, model: OpenAICompatModel
) -> None:
    server.reply(
        json_reply(500, openai_error("The server had an error", "server_error")),
        Reply(
            status=502,
            headers=[("content-type", "text/html")],
            chunks=[b"<html><body><h1>502 Bad Gateway</h1></body></html>"],
            framing="length",
        ),
    )
    _, info = await collect_until_error(model, hello(), ModelHTTPError)
    assert (info.value.status, info.value.retryable, info.value.retry_after) == (500, True, None)
    assert "The server had an error" in str(info.value)
    _, info = await collect_until_error(model, hello(), ModelHTTPError)
    assert (info.value.status, info.value.retryable) == (502, True)
    assert "502 Bad Gateway" in str(info.value)


async def test_400_that_is_not_about_length_is_not_retryable(
    server: LocalServer, model: OpenAICompatModel
) -> None:
    server.reply(
        json_reply(
            400,
            openai_error(
                "Invalid value for 'temperature': expected a number <= 2.",
                "invalid_request_error",
                "invalid_value",
            ),
        )
    )
    _, info = await collect_until_error(model, hello(), ModelHTTPError)
    assert type(info.value) is ModelHTTPError
    assert (info.value.status, info.value.retryable) == (400, False)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            openai_error(
                "This model's maximum context length is 128000 tokens. However, your messages "
                "resulted in 130511 tokens. Please reduce the length of the messages.",
                "invalid_request_error",
                "context_length_exceeded",
            ),
            id="openai",
        ),
        pytest.param(
            {
                "object": "error",
                "message": "This model's maximum context length is 4096 tokens. However, you "
                "requested 5000 tokens (4000 in the messages, 1000 in the completion). "
                "Please reduce the length of the messages or completion.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            },
            id="vllm",
        ),
        pytest.param(
            openai_error("the input length exceeds the context length", "api_error"),
            id="ollama",
        ),
        pytest.param(
            {
                "error": {
                    "code": 400,
                    "message": "the request exceeds the available context size, try increasing it",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": 5000,
                    "n_ctx": 4096,
                }
            },
            id="llama.cpp",
        ),
    ],
)
async def test_400_context_overflow(
    body: dict[str, Any], server: LocalServer, model: OpenAICompatModel
) -> None:
    server.reply(json_reply(400, body))
    _, info = await collect_until_error(model, hello(), ContextOverflow)
    assert (info.value.status, info.value.retryable) == (400, False)
    assert info.value.provider == "openai"
    assert info.value.body is not None


def test_context_overflow_patterns_stay_narrow() -> None:
    assert not is_context_overflow(
        "Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000"
    )
    assert not is_context_overflow("Invalid 'max_tokens': integer below minimum value.")
    assert is_context_overflow("prompt is too long: 208000 tokens > 200000 maximum")
    assert is_context_overflow("whatever", code="context_length_exceeded")


async def test_malformed_chunk_is_a_protocol_error_after_earlier_events(
    server: LocalServer, model: OpenAICompatModel
) -> None:
    server.reply(openai_sse(chunk({"content": "Hel"}), '{"choices": [{"delta": {"content": "lo'))
    events, info = await collect_until_error(model, hello(), ModelProtocolError)
    assert events == [TextDelta("Hel")]
    assert isinstance(info.value.__cause__, orjson.JSONDecodeError)
    assert not info.value.retryable


async def test_error_object_inside_the_stream(
    server: LocalServer, model: OpenAICompatModel
) -> None:
    server.reply(
        openai_sse(
            chunk({"content": "Par"}),
            {"error": {"message": "The server had an error while processing your request."}},
        ),
        openai_sse({"error": {"message": "slow down", "type": "rate_limit_error", "code": None}}),
    )
    events, info = await collect_until_error(model, hello(), ModelHTTPError)
    assert events == [TextDelta("Par")]
    assert (info.value.status, info.value.retryable) == (500, True)
    assert "The server had an error" in str(info.value)
    _, info = await collect_until_error(model, hello(), ModelHTTPError)
    assert (info.value.status, info.value.retryable) == (429, True)


async def test_connection_dropped_mid_stream(server: LocalServer, model: OpenAICompatModel) -> None:
    # Chunked body without its terminating chunk: httpx sees an incomplete message.
    server.reply(
        openai_sse(
            role_chunk(),
            chunk({"content": "Once upon"}),
            chunk({"tool_calls": [tool_fragment(0, id="call_1", name="write")]}),
            chunk({"tool_calls": [tool_fragment(0, args='{"text": "a ti')]}),
            complete=False,
        )
    )
    events, info = await collect_until_error(model, hello(), ModelConnectionError)
    assert events == [
        TextDelta("Once upon"),
        ToolCallStart(0, "call_1", "write"),
        ToolCallArgsDelta(0, '{"text": "a ti'),
    ]
    assert info.value.retryable
    assert isinstance(info.value.__cause__, httpx.RemoteProtocolError)


async def test_stream_that_ends_cleanly_but_early_is_a_dropped_connection(
    server: LocalServer, model: OpenAICompatModel
) -> None:
    # Body framed by connection close: the early end looks clean to HTTP; only the missing
    # finish_reason and [DONE] give it away.
    server.reply(openai_sse(chunk({"content": "Once"}), framing="close", complete=False))
    events, info = await collect_until_error(model, hello(), ModelConnectionError)
    assert events == [TextDelta("Once")]
    assert info.value.retryable


async def test_json_instead_of_an_event_stream(
    server: LocalServer, model: OpenAICompatModel
) -> None:
    server.reply(json_reply(200, {"id": "chatcmpl-1", "choices": []}))
    _, info = await collect_until_error(model, hello(), ModelProtocolError)
    assert "expected an event stream" in str(info.value)


async def test_connection_refused() -> None:
    async with LocalServer() as closed:
        url = closed.url
    async with OpenAICompatModel("m", base_url=url) as m:
        _, info = await collect_until_error(m, hello(), ModelConnectionError)
    assert info.value.retryable
    assert isinstance(info.value.__cause__, httpx.ConnectError)


@pytest.mark.parametrize(
    ("raised", "expected", "retryable"),
    [
        (httpx.ReadTimeout, ModelTimeout, True),
        (httpx.ConnectTimeout, ModelTimeout, True),
        (httpx.ReadError, ModelConnectionError, True),
        (httpx.RemoteProtocolError, ModelConnectionError, True),
        (httpx.UnsupportedProtocol, ModelConnectionError, False),
    ],
)
async def test_transport_errors_are_translated_and_chained(
    raised: type[httpx.TransportError], expected: type[ModelError], retryable: bool
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise raised("boom", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        model = OpenAICompatModel("m", base_url="http://model.test/v1", client=client)
        _, info = await collect_until_error(model, hello(), expected)
        await model.aclose()
        assert not client.is_closed  # a client passed in stays the caller's
    assert type(info.value) is expected
    assert info.value.retryable is retryable
    assert isinstance(info.value.__cause__, raised)


# --- configuration ---------------------------------------------------------------------


async def test_base_url_and_key_come_from_the_environment_at_construction(
    server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1/")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    server.reply(openai_sse(chunk({"content": "hi"}, "stop"), "[DONE]"))
    async with OpenAICompatModel("gpt-4o-mini", extra_headers={"x-trace": "t1"}) as m:
        assert "sk-from-env" not in repr(m)
        await collect(m, hello())
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-from-env"
    assert request.headers["x-trace"] == "t1"


async def test_defaults_and_close() -> None:
    m = OpenAICompatModel("gpt-4o", context_window=128_000)
    assert (m.provider, m.name, m.context_window) == ("openai", "gpt-4o", 128_000)
    assert m.base_url == "https://api.openai.com/v1"
    await m.aclose()
    await m.aclose()  # idempotent
    with pytest.raises(UsageError):
        await collect(m, hello())


# --- SSE parsing (tiller.model._http) --------------------------------------------------


async def test_sse_parser_on_byte_by_byte_input() -> None:
    stream = (
        "\ufeff: comment\r\n"
        "event: message_start\r\n"
        'data: {"a":\r\n'
        "data: 1}\r\n"
        "\r\n"
        "id: 7\n"
        "data:no-space\n"
        "\n"
        "event: lonely\n"  # no data: not dispatched
        "\n"
        "data: last\r"
        "\r"
        "data: unterminated"
    ).encode()
    got = [e async for e in iter_sse(byte_chunks(stream))]
    assert got == [
        ServerSentEvent('{"a":\n1}', "message_start"),
        ServerSentEvent("no-space", "message", "7"),
        ServerSentEvent("last", "message", "7"),
    ]
    whole = [e async for e in iter_sse(byte_chunks(stream, size=len(stream)))]
    assert whole == got
