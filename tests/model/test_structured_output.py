"""Structured output on the wire: an agent with an `output_type`, run against a local
server speaking each provider's API, asks for the answer the way that provider supports
best (OpenAI-compatible: `response_format` json_schema, strict where the schema allows;
Anthropic: `output_config.format` on the models that have it, a forced `final_result` tool
on the others and for schemas it cannot take), validates it, asks again when it does not fit,
and puts it in `RUN_FINISHED.result`. Request bodies are asserted whole."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import BaseModel, Field, RootModel

from tiller.conversation import AssistantMessage, UserMessage
from tiller.errors import UsageError
from tiller.events import Event
from tiller.loop import Agent, RunContext, RunOptions, RunResult
from tiller.model import (
    ForceTool,
    ModelRequest,
    OutputSchema,
    ScriptedModel,
    strict_json_schema,
)
from tiller.model.anthropic import AnthropicModel
from tiller.model.openai_compat import OpenAICompatModel
from tiller.policy import AllowAll
from tiller.state import StopCause
from tiller.testing import assert_valid_stream
from tiller.tools import tool

from ._servers import LocalServer, anthropic_sse, clean_env, openai_sse


class Answer(BaseModel):
    """The weather in a city."""

    city: str
    celsius: int


class Loose(BaseModel):
    city: str
    unit: str = "C"


VALID = '{"city": "Oslo", "celsius": 20}'
STRICT_SCHEMA = {
    "description": "The weather in a city.",
    "properties": {
        "city": {"title": "City", "type": "string"},
        "celsius": {"title": "Celsius", "type": "integer"},
    },
    "required": ["city", "celsius"],
    "title": "Answer",
    "type": "object",
    "additionalProperties": False,
}


@tool(read_only=True)
def weather(city: str) -> str:
    """The weather in `city`."""
    return f"{city}: 20C"


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clean_env(monkeypatch)


@pytest.fixture
async def server() -> AsyncIterator[LocalServer]:
    async with LocalServer() as srv:
        yield srv


@pytest.fixture
def ctx(tmp_path: Path) -> RunContext:
    return RunContext.sandboxed(tmp_path, AllowAll())


async def drive(
    agent: Agent, ctx: RunContext, options: RunOptions | None = None
) -> tuple[RunResult, list[dict[str, Any]]]:
    events: list[Event] = []
    async with asyncio.timeout(20):
        result = await agent.run_in(ctx, "Weather in Oslo?", options, on_event=events.append)
    return result, assert_valid_stream(events)


def finished(wire: list[dict[str, Any]]) -> dict[str, Any]:
    [event] = [e for e in wire if e["type"] == "RUN_FINISHED"]
    return event


# ── strict schemas ───────────────────────────────────────────────────────────────────


class Place(BaseModel):
    name: str
    tags: list[str]


class Trip(BaseModel):
    places: list[Place]
    pattern: str  # a property named like a keyword is a property, not the keyword


def test_a_schema_with_every_field_required_has_a_strict_form() -> None:
    schema = Trip.model_json_schema()
    strict = strict_json_schema(schema)
    assert strict is not None
    assert strict["additionalProperties"] is False
    assert strict["$defs"]["Place"]["additionalProperties"] is False
    assert "additionalProperties" not in schema  # the schema given is left as it was


class Limited(BaseModel):
    name: str = Field(max_length=10)


class Free(BaseModel):
    extra: dict[str, int]


@pytest.mark.parametrize("output_type", [Loose, Limited, Free])
def test_defaults_length_limits_and_free_maps_have_no_strict_form(
    output_type: type[BaseModel],
) -> None:
    assert strict_json_schema(output_type.model_json_schema()) is None


# ── OpenAI-compatible: native json_schema ────────────────────────────────────────────


def openai_text(*parts: str) -> Any:
    chunks: list[dict[str, Any] | str] = [
        {"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in parts
    ]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chunks.append("[DONE]")
    return openai_sse(*chunks)


async def test_openai_gets_a_strict_json_schema_response_format(
    server: LocalServer, ctx: RunContext
) -> None:
    server.reply(openai_text('{"city": "Oslo", ', '"celsius": 20}'))
    async with OpenAICompatModel("gpt-4o", base_url=f"{server.url}/v1", api_key="k") as model:
        agent = Agent(model, system_prompt="You are a weather bot.", output_type=Answer)
        assert agent.output_mode == "native"
        result, wire = await drive(agent, ctx)
    assert result.stop_cause is StopCause.COMPLETED
    assert result.output == Answer(city="Oslo", celsius=20)
    assert server.requests[0].json() == {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "You are a weather bot."},
            {"role": "user", "content": "Weather in Oslo?"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "Answer",
                "schema": STRICT_SCHEMA,
                "description": "The weather in a city.",
                "strict": True,
            },
        },
    }
    assert finished(wire)["result"] == {
        "stopCause": "completed",
        "output": {"city": "Oslo", "celsius": 20},
    }


async def test_a_schema_without_a_strict_form_goes_as_non_strict_json_schema(
    server: LocalServer, ctx: RunContext
) -> None:
    server.reply(openai_text('{"city": "Oslo"}'))
    async with OpenAICompatModel(
        "qwen2.5", base_url=f"{server.url}/v1", api_key="", provider="vllm"
    ) as model:
        result, _ = await drive(Agent(model, output_type=Loose), ctx)
    assert result.output == Loose(city="Oslo", unit="C")
    assert server.requests[0].json()["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Loose", "schema": Loose.model_json_schema(), "strict": False},
    }


async def test_openai_native_output_that_does_not_validate_is_asked_for_again(
    server: LocalServer, ctx: RunContext
) -> None:
    server.reply(openai_text('{"city": "Oslo", "celsius": "warm"}'), openai_text(VALID))
    async with OpenAICompatModel("gpt-4o", base_url=f"{server.url}/v1", api_key="k") as model:
        result, wire = await drive(Agent(model, output_type=Answer), ctx)
    assert result.output == Answer(city="Oslo", celsius=20)
    assert result.state.output_retries == 1
    first, second = (r.json() for r in server.requests)
    assert second["response_format"] == first["response_format"]
    assert second["messages"][-2] == {
        "role": "assistant",
        "content": '{"city": "Oslo", "celsius": "warm"}',
    }
    retry = second["messages"][-1]
    assert retry["role"] == "user"
    assert retry["content"].startswith("Your answer did not validate against the required schema:")
    assert "celsius" in retry["content"]
    assert finished(wire)["result"]["output"] == {"city": "Oslo", "celsius": 20}


async def test_a_server_declared_without_json_schema_gets_the_output_tool(
    server: LocalServer, ctx: RunContext
) -> None:
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "final_result", "arguments": VALID},
    }
    server.reply(
        openai_sse(
            {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
            "[DONE]",
        )
    )
    async with OpenAICompatModel(
        "deepseek-chat",
        base_url=f"{server.url}/v1",
        api_key="k",
        provider="deepseek",
        output_modes=("tool", "prompted"),
    ) as model:
        agent = Agent(model, [weather], output_type=Answer)
        assert agent.output_mode == "tool"
        result, wire = await drive(agent, ctx)
    assert result.output == Answer(city="Oslo", celsius=20)
    body = server.requests[0].json()
    assert body["tool_choice"] == "required"  # the agent's own tool may come first
    assert [t["function"]["name"] for t in body["tools"]] == ["weather", "final_result"]
    assert body["tools"][1]["function"]["parameters"] == Answer.model_json_schema()
    assert "response_format" not in body
    assert not [e for e in wire if e["type"].startswith("TOOL_CALL")]


def test_an_explicit_mode_the_server_does_not_support_is_refused() -> None:
    model = OpenAICompatModel("m", base_url="http://127.0.0.1:9/v1", output_modes=("prompted",))
    with pytest.raises(UsageError, match=r"does not support output_mode='native'"):
        Agent(model, output_type=Answer, output_mode="native")
    with pytest.raises(UsageError, match=r"'fast' is not a mode"):
        Agent(model, output_type=Answer, output_mode="fast")  # type: ignore[arg-type]


# ── Anthropic: a forced output tool ──────────────────────────────────────────────────

#: A Claude without native structured output (`output_config.format` came with 4.5).
OLDER_CLAUDE = "claude-sonnet-4-20250514"


def anthropic_tool_use(name: str, arguments: str, *, call_id: str = "toolu_01") -> Any:
    half = len(arguments) // 2
    return anthropic_sse(
        {
            "type": "message_start",
            "message": {
                "id": "msg_01",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "claude-sonnet-4-5",
                "stop_reason": None,
                "usage": {"input_tokens": 30, "output_tokens": 1},
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": arguments[:half]},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": arguments[half:]},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 12},
        },
        {"type": "message_stop"},
    )


INSTRUCTION = (
    "When you give your final answer, call the final_result tool with it as the "
    "arguments, on its own, instead of answering in text."
)
OUTPUT_TOOL = {
    "name": "final_result",
    "description": (
        "Give your final answer: call this once you have it, with the answer as the "
        "arguments. The answer: The weather in a city."
    ),
    "input_schema": Answer.model_json_schema(),
}


async def test_anthropic_is_made_to_call_the_output_tool(
    server: LocalServer, ctx: RunContext
) -> None:
    server.reply(anthropic_tool_use("final_result", VALID))
    async with AnthropicModel(OLDER_CLAUDE, base_url=server.url, api_key="k") as model:
        agent = Agent(model, system_prompt="You are a weather bot.", output_type=Answer)
        assert agent.output_mode == "tool"
        result, wire = await drive(agent, ctx)
    assert result.stop_cause is StopCause.COMPLETED
    assert result.output == Answer(city="Oslo", celsius=20)
    assert server.requests[0].json() == {
        "model": OLDER_CLAUDE,
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]}],
        "stream": True,
        "system": f"You are a weather bot.\n\n{INSTRUCTION}",
        "tools": [OUTPUT_TOOL],
        "tool_choice": {"type": "tool", "name": "final_result"},
    }
    # The answer is the message's text, in the transcript and in the stream: no tool call
    # is left without a result (law 1), none is announced (law 2).
    last = result.state.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert (last.text, last.tool_calls) == (VALID, ())
    assert result.text == VALID
    assert not [e for e in wire if e["type"].startswith("TOOL_CALL")]
    content = [e["delta"] for e in wire if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert content == [VALID]
    assert finished(wire)["result"] == {
        "stopCause": "completed",
        "output": {"city": "Oslo", "celsius": 20},
    }


async def test_anthropic_with_tools_must_call_one_and_may_use_its_own_first(
    server: LocalServer, ctx: RunContext
) -> None:
    server.reply(
        anthropic_tool_use("weather", '{"city": "Oslo"}'),
        anthropic_tool_use("final_result", VALID, call_id="toolu_02"),
    )
    async with AnthropicModel(OLDER_CLAUDE, base_url=server.url, api_key="k") as model:
        result, wire = await drive(Agent(model, [weather], output_type=Answer), ctx)
    assert result.output == Answer(city="Oslo", celsius=20)
    first, second = (r.json() for r in server.requests)
    assert first["tool_choice"] == {"type": "any"}
    assert [t["name"] for t in first["tools"]] == ["weather", "final_result"]
    result_block = {
        "type": "tool_result",
        "tool_use_id": "toolu_01",
        "content": "Oslo: 20C",
        "is_error": False,
    }
    assert second["messages"][-1] == {"role": "user", "content": [result_block]}
    # The agent's own call is a tool call in the stream; the output call is the answer.
    starts = [e["toolCallName"] for e in wire if e["type"] == "TOOL_CALL_START"]
    assert starts == ["weather"]


async def test_anthropic_output_that_does_not_validate_is_asked_for_again(
    server: LocalServer, ctx: RunContext
) -> None:
    bad = '{"city": "Oslo", "celsius": "warm"}'
    server.reply(
        anthropic_tool_use("final_result", bad),
        anthropic_tool_use("final_result", VALID, call_id="toolu_02"),
    )
    async with AnthropicModel(OLDER_CLAUDE, base_url=server.url, api_key="k") as model:
        result, wire = await drive(Agent(model, output_type=Answer), ctx)
    assert result.output == Answer(city="Oslo", celsius=20)
    assert result.state.output_retries == 1
    second = server.requests[1].json()
    assert second["tool_choice"] == {"type": "tool", "name": "final_result"}
    assistant, retry = second["messages"][-2:]
    assert assistant == {"role": "assistant", "content": [{"type": "text", "text": bad}]}
    [block] = retry["content"]
    assert block["text"].startswith(
        "Your final_result call did not validate against the required schema:"
    )
    assert block["text"].endswith("Call final_result again with arguments that validate.")
    assert finished(wire)["result"]["output"] == {"city": "Oslo", "celsius": 20}


async def test_output_that_never_validates_fails_the_run_with_the_error(
    server: LocalServer, ctx: RunContext
) -> None:
    server.reply(anthropic_tool_use("final_result", '{"city": 1}'))
    async with AnthropicModel(OLDER_CLAUDE, base_url=server.url, api_key="k") as model:
        agent = Agent(model, output_type=Answer)
        result, wire = await drive(agent, ctx, RunOptions(output_retries=0))
    assert result.stop_cause is StopCause.ERROR
    assert result.output is None
    assert result.error is not None
    assert result.error.startswith("the final answer did not validate as Answer:")
    assert wire[-1]["type"] == "RUN_ERROR"


def test_anthropic_under_extended_thinking_is_not_forced() -> None:
    model = AnthropicModel("claude-sonnet-4-5", api_key="k", thinking_budget=2048)
    request = ModelRequest(
        system=None,
        messages=[UserMessage(text="Hi")],
        max_tokens=8000,
        tool_choice=ForceTool("final_result"),
    )
    assert model.request_body(request)["tool_choice"] == {"type": "auto"}


def test_anthropic_native_sends_the_schema_as_output_config() -> None:
    model = AnthropicModel("claude-sonnet-4-5", api_key="k")
    output = OutputSchema("native", "Answer", STRICT_SCHEMA, strict=True)
    request = ModelRequest(system=None, messages=[UserMessage(text="Hi")], output=output)
    body = model.request_body(request)
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": STRICT_SCHEMA}}
    assert "tool_choice" not in body


# ── models that declare nothing ──────────────────────────────────────────────────────


async def test_a_scripted_model_is_asked_in_prompted_mode(ctx: RunContext) -> None:
    model = ScriptedModel([VALID])
    agent = Agent(model, output_type=Answer)
    assert agent.output_mode == "prompted"
    _, wire = await drive(agent, ctx)
    [request] = model.requests
    assert request.output is not None and request.output.mode == "prompted"
    assert request.tools == [] and request.tool_choice is None
    assert request.system is not None and orjson.dumps(Answer.model_json_schema()).decode() in (
        request.system
    )
    assert finished(wire)["result"]["output"] == {"city": "Oslo", "celsius": 20}


async def test_without_an_output_type_the_result_carries_only_the_stop_cause(
    ctx: RunContext,
) -> None:
    _, wire = await drive(Agent(ScriptedModel(["Sunny."])), ctx)
    assert finished(wire)["result"] == {"stopCause": "completed"}


# ── a self-referencing output type ───────────────────────────────────────────────────


class Node(BaseModel):
    """A tree of names."""

    name: str
    children: list[Node]


def _node_schema(*, strict: bool) -> dict[str, Any]:
    """Node's schema with its definition inlined at the root (providers reject a root
    that is only a `$ref`), `$defs` kept for the recursion."""
    closed = {"additionalProperties": False} if strict else {}
    definition = {
        "description": "A tree of names.",
        "properties": {
            "name": {"title": "Name", "type": "string"},
            "children": {"items": {"$ref": "#/$defs/Node"}, "title": "Children", "type": "array"},
        },
        "required": ["name", "children"],
        "title": "Node",
        "type": "object",
        **closed,
    }
    return {"$defs": {"Node": definition}, **definition}


TREE = '{"name": "root", "children": [{"name": "leaf", "children": []}]}'


async def test_a_self_referencing_type_goes_to_openai_with_an_object_root(
    server: LocalServer, ctx: RunContext
) -> None:
    assert "$ref" in Node.model_json_schema()  # pydantic's root is a reference
    server.reply(openai_text(TREE))
    async with OpenAICompatModel("gpt-4o", base_url=f"{server.url}/v1", api_key="k") as model:
        result, _ = await drive(Agent(model, output_type=Node), ctx)
    assert result.output == Node.model_validate_json(TREE)
    assert server.requests[0].json()["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "Node",
            "schema": _node_schema(strict=True),
            "description": "A tree of names.",
            "strict": True,
        },
    }


async def test_a_self_referencing_type_goes_to_anthropic_as_an_object_tool_input(
    server: LocalServer, ctx: RunContext
) -> None:
    server.reply(anthropic_tool_use("final_result", TREE))
    async with AnthropicModel("claude-sonnet-4-5", base_url=server.url, api_key="k") as model:
        result, _ = await drive(Agent(model, output_type=Node), ctx)
    assert result.output == Node.model_validate_json(TREE)
    [output_tool] = server.requests[0].json()["tools"]
    assert output_tool["input_schema"] == _node_schema(strict=False)


def test_a_strict_form_always_has_an_object_root() -> None:
    strict = strict_json_schema(Node.model_json_schema())
    assert strict == _node_schema(strict=True)


# ── an output type whose root is not an object ───────────────────────────────────────


class Item(BaseModel):
    name: str


class Items(RootModel[list[Item]]):
    """The items found."""


#: What the providers are shown for `list[int]`: an object around it (their roots must be
#: objects), its one property the answer.
WRAPPED_INTS = {
    "properties": {"result": {"items": {"type": "integer"}, "type": "array"}},
    "required": ["result"],
    "type": "object",
    "additionalProperties": False,
}


async def test_a_list_answer_goes_to_anthropic_wrapped_in_an_object_tool_input(
    server: LocalServer, ctx: RunContext
) -> None:
    server.reply(anthropic_tool_use("final_result", '{"result": [1, 2, 3]}'))
    async with AnthropicModel("claude-sonnet-4-5", base_url=server.url, api_key="k") as model:
        agent = Agent(model, output_type=list[int], output_mode="tool")
        result, wire = await drive(agent, ctx)
    assert result.stop_cause is StopCause.COMPLETED
    assert result.output == [1, 2, 3]
    [output_tool] = server.requests[0].json()["tools"]
    wrapped = {k: v for k, v in WRAPPED_INTS.items() if k != "additionalProperties"}
    assert output_tool["input_schema"] == wrapped
    assert finished(wire)["result"] == {"stopCause": "completed", "output": [1, 2, 3]}


async def test_a_root_model_goes_to_openai_as_a_strict_object_and_comes_back_unwrapped(
    server: LocalServer, ctx: RunContext
) -> None:
    server.reply(openai_text('{"result": [{"name": "a"}, {"name": "b"}]}'))
    async with OpenAICompatModel("gpt-4o", base_url=f"{server.url}/v1", api_key="k") as model:
        agent = Agent(model, output_type=Items)
        assert agent.output_mode == "native"
        result, wire = await drive(agent, ctx)
    assert result.output == Items([Item(name="a"), Item(name="b")])
    item = {
        "properties": {"name": {"title": "Name", "type": "string"}},
        "required": ["name"],
        "title": "Item",
        "type": "object",
        "additionalProperties": False,
    }
    assert server.requests[0].json()["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "Items",
            "schema": {
                "$defs": {"Item": item},
                "description": "The items found.",
                "properties": {
                    "result": {"items": {"$ref": "#/$defs/Item"}, "type": "array"},
                },
                "required": ["result"],
                "title": "Items",
                "type": "object",
                "additionalProperties": False,
            },
            "description": "The items found.",
            "strict": True,
        },
    }
    assert finished(wire)["result"]["output"] == [{"name": "a"}, {"name": "b"}]


async def test_an_int_answer_by_the_output_tool_is_unwrapped_and_a_bare_one_asked_again(
    server: LocalServer, ctx: RunContext
) -> None:
    def call(arguments: str) -> Any:
        chunk = {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "final_result", "arguments": arguments},
        }
        return openai_sse(
            {"choices": [{"index": 0, "delta": {"tool_calls": [chunk]}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
            "[DONE]",
        )

    server.reply(call('{"answer": 42}'), call('{"result": 42}'))
    async with OpenAICompatModel(
        "m", base_url=f"{server.url}/v1", api_key="k", output_modes=("tool", "prompted")
    ) as model:
        result, _ = await drive(Agent(model, output_type=int), ctx)
    assert result.output == 42
    assert result.state.output_retries == 1
    first, second = (r.json() for r in server.requests)
    assert first["tools"][0]["function"]["parameters"] == {
        "properties": {"result": {"type": "integer"}},
        "required": ["result"],
        "type": "object",
    }
    assert "result" in second["messages"][-1]["content"]


async def test_a_list_answer_in_prompted_mode_is_plain_json(ctx: RunContext) -> None:
    model = ScriptedModel(["[1, 2]"])
    result, wire = await drive(Agent(model, output_type=list[int]), ctx)
    assert result.output == [1, 2]
    [request] = model.requests
    assert request.system is not None and '{"items":{"type":"integer"},"type":"array"}' in (
        request.system
    )
    assert finished(wire)["result"]["output"] == [1, 2]


# ── Anthropic: native structured output (`output_config.format`) ─────────────────────


def anthropic_text(text: str) -> Any:
    return anthropic_sse(
        {
            "type": "message_start",
            "message": {
                "id": "msg_01",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "claude-sonnet-4-5",
                "stop_reason": None,
                "usage": {"input_tokens": 30, "output_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 12},
        },
        {"type": "message_stop"},
    )


async def test_a_claude_with_structured_outputs_gets_output_config_by_default(
    server: LocalServer, ctx: RunContext
) -> None:
    server.reply(anthropic_text(VALID))
    async with AnthropicModel("claude-sonnet-4-5", base_url=server.url, api_key="k") as model:
        agent = Agent(model, system_prompt="You are a weather bot.", output_type=Answer)
        assert agent.output_mode == "native"
        result, wire = await drive(agent, ctx)
    assert result.output == Answer(city="Oslo", celsius=20)
    assert server.requests[0].json() == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]}],
        "stream": True,
        "system": "You are a weather bot.",
        "output_config": {"format": {"type": "json_schema", "schema": STRICT_SCHEMA}},
    }
    assert finished(wire)["result"]["output"] == {"city": "Oslo", "celsius": 20}


@pytest.mark.parametrize(
    ("name", "native"),
    [
        ("claude-sonnet-4-5", True),
        ("claude-sonnet-4-5-20250929", True),
        ("claude-opus-4-5", True),
        ("claude-haiku-4-5", True),
        ("claude-opus-4-6", True),
        ("claude-sonnet-4-6", True),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", True),
        ("claude-sonnet-4-20250514", False),
        ("claude-opus-4-1", False),
        ("claude-opus-4-1-20250805", False),
        ("claude-3-7-sonnet-latest", False),
        ("claude-3-5-haiku-20241022", False),
        ("my-proxy-model", False),
    ],
)
def test_which_claude_models_take_output_config(name: str, native: bool) -> None:
    model = AnthropicModel(name, api_key="k")
    expected = ("native", "tool", "prompted") if native else ("tool", "prompted")
    assert model.output_modes == expected


def test_native_on_a_claude_without_it_is_refused_and_can_be_declared() -> None:
    older = AnthropicModel(OLDER_CLAUDE, api_key="k")
    with pytest.raises(UsageError, match=r"does not support output_mode='native'"):
        Agent(older, output_type=Answer, output_mode="native")
    # A proxy's own model name: say what it supports.
    proxied = AnthropicModel("house-claude", api_key="k", output_modes=("native", "tool"))
    assert Agent(proxied, output_type=Answer).output_mode == "native"


class Bounded(BaseModel):
    """Limits Claude's grammar cannot hold: tiller validates them."""

    name: str = Field(min_length=1, max_length=10, pattern="^[a-z]+$")
    count: int = Field(ge=0, le=9)
    tags: list[str] = Field(min_length=2, max_length=5)
    when: str = Field(json_schema_extra={"format": "date"})
    colour: str = Field("red", json_schema_extra={"format": "colour"})


def test_constraints_claude_cannot_take_are_left_to_tiller_s_validation() -> None:
    model = AnthropicModel("claude-sonnet-4-5", api_key="k")
    agent = Agent(model, output_type=Bounded)
    assert agent.output_mode == "native"
    structured = agent.structured_output()
    assert structured is not None
    request = ModelRequest(system=None, messages=[UserMessage(text="Hi")], output=structured.spec)
    sent = model.request_body(request)["output_config"]["format"]["schema"]
    assert sent == {
        "description": "Limits Claude's grammar cannot hold: tiller validates them.",
        "properties": {
            "name": {"pattern": "^[a-z]+$", "title": "Name", "type": "string"},
            "count": {"title": "Count", "type": "integer"},
            "tags": {"items": {"type": "string"}, "title": "Tags", "type": "array"},
            "when": {"format": "date", "title": "When", "type": "string"},
            "colour": {"default": "red", "title": "Colour", "type": "string"},
        },
        "required": ["name", "count", "tags", "when"],  # optional fields stay optional
        "title": "Bounded",
        "type": "object",
        "additionalProperties": False,
    }
    assert "maxLength" in str(Bounded.model_json_schema())  # the schema given is unchanged


class Tagged(BaseModel):
    labels: dict[str, str]


@pytest.mark.parametrize(
    ("output_type", "why"),
    [(Node, "a recursive type"), (Tagged, "a free-form map")],
)
def test_a_schema_claude_cannot_take_falls_back_to_the_tool_or_is_refused(
    output_type: type[BaseModel], why: str
) -> None:
    model = AnthropicModel("claude-sonnet-4-5", api_key="k")
    assert Agent(model, output_type=output_type).output_mode == "tool"
    with pytest.raises(UsageError, match=rf"cannot take .* natively: {why}.*output_mode='tool'"):
        Agent(model, output_type=output_type, output_mode="native")


def test_native_under_extended_thinking_keeps_output_config_and_forces_nothing() -> None:
    model = AnthropicModel("claude-sonnet-4-5", api_key="k", thinking_budget=2048)
    agent = Agent(model, output_type=list[int])
    assert agent.output_mode == "native"
    structured = agent.structured_output()
    assert structured is not None
    request = ModelRequest(
        system=None, messages=[UserMessage(text="Hi")], max_tokens=8000, output=structured.spec
    )
    body = model.request_body(request)
    assert body["output_config"] == {
        "format": {"type": "json_schema", "schema": WRAPPED_INTS},
    }
    assert "tool_choice" not in body and "tools" not in body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
