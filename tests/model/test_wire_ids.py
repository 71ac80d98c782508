"""The call ids a provider is sent (law 10): its own where they are usable, the runtime's
elsewhere, so every request is a legal history whatever ids the provider gave."""

from __future__ import annotations

import re
from typing import Any

from tiller.conversation import AssistantMessage, ToolCall, ToolResult, UserMessage
from tiller.model import ModelRequest
from tiller.model.anthropic import AnthropicModel
from tiller.model.openai_compat import OpenAICompatModel

TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def exchange(*calls: ToolCall) -> list[UserMessage | AssistantMessage]:
    """One user turn per call's assistant turn, each call answered."""
    messages: list[UserMessage | AssistantMessage] = [UserMessage(text="go")]
    for call in calls:
        messages.append(AssistantMessage(tool_calls=(call,)))
        messages.append(
            UserMessage(tool_results=(ToolResult(call_id=call.id, name=call.name, content="ok"),))
        )
    return messages


def call(runtime: str, provider: str = "") -> ToolCall:
    return ToolCall(id=runtime, name="look", arguments="{}", provider_id=provider)


async def openai_pairs(messages: list[UserMessage | AssistantMessage]) -> list[tuple[str, str]]:
    async with OpenAICompatModel("m", api_key="") as model:
        body = model.request_body(ModelRequest(system="", messages=messages))
    sent: list[dict[str, Any]] = body["messages"]
    calls = [c["id"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    results = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    return list(zip(calls, results, strict=True))


async def anthropic_pairs(
    messages: list[UserMessage | AssistantMessage],
) -> list[tuple[str, str]]:
    async with AnthropicModel("m", api_key="x") as model:
        body = model.request_body(ModelRequest(system="", messages=messages))
    blocks = [b for m in body["messages"] for b in m["content"] if isinstance(b, dict)]
    calls = [b["id"] for b in blocks if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
    return list(zip(calls, results, strict=True))


async def test_a_unique_provider_id_goes_back_as_it_came() -> None:
    messages = exchange(call("r1-call-1", "toolu_01A"), call("r1-call-2", "toolu_01B"))
    expected = [("toolu_01A", "toolu_01A"), ("toolu_01B", "toolu_01B")]
    assert await openai_pairs(messages) == expected
    assert await anthropic_pairs(messages) == expected


async def test_a_repeated_or_empty_provider_id_is_replaced_by_the_runtimes() -> None:
    """Broke: the history sent back held two calls `call_0` (a server without ids names
    every step's call so) and a call with id `""`: every provider rejects that."""
    messages = exchange(
        call("r1-call-1", "call_0"), call("r1-call-2", "call_0"), call("r1-call-3", "")
    )
    expected = [("r1-call-1", "r1-call-1"), ("r1-call-2", "r1-call-2"), ("r1-call-3", "r1-call-3")]
    assert await openai_pairs(messages) == expected
    assert await anthropic_pairs(messages) == expected


async def test_anthropic_gets_ids_in_its_alphabet_and_still_unique() -> None:
    """A runtime id made from a run id with dots or colons is sanitized for Anthropic's
    `^[a-zA-Z0-9_-]+$`; where sanitizing makes two ids one, they are told apart; a
    provider id the API would refuse is not sent back either."""
    messages = exchange(
        call("run.1:call-1", "dup"),
        call("run:1.call-1", "dup"),
        call("run.1-call-3", "has space"),
    )
    pairs = await anthropic_pairs(messages)
    ids = [sent for sent, _ in pairs]
    assert all(TOOL_USE_ID.match(sent) for sent in ids), ids
    assert len(set(ids)) == len(ids), ids
    assert all(sent == answered for sent, answered in pairs)
    # OpenAI accepts any string: the runtime ids go as they are.
    assert [sent for sent, _ in await openai_pairs(messages)] == [
        "run.1:call-1",
        "run:1.call-1",
        "has space",
    ]


async def test_a_call_stored_before_runtime_ids_keeps_its_id() -> None:
    """A version 1 checkpoint's calls have no provider id: their id was the provider's."""
    messages = exchange(ToolCall(id="toolu_old", name="look"))
    assert await openai_pairs(messages) == [("toolu_old", "toolu_old")]
    assert await anthropic_pairs(messages) == [("toolu_old", "toolu_old")]


async def test_openai_gets_no_call_id_longer_than_it_accepts() -> None:
    """Broke: a history from an AG-UI client carries runtime ids only, and a served run's
    id is the client's `runId` (a UUID): `{uuid}-call-1` is 43 characters, and OpenAI
    refuses any tool call id over 40. Long ids go out as stable digests, still paired."""
    run = "6f1c2a9e-3b7d-4e21-9a55-0c8e4f2b7d19"
    long_provider = "fc_" + "0" * 50  # some servers' own ids are longer still
    messages = exchange(call(f"{run}-call-1"), call(f"{run}-call-2", long_provider))
    pairs = await openai_pairs(messages)
    assert all(len(sent) <= 40 and sent == result for sent, result in pairs)
    assert len({sent for sent, _ in pairs}) == 2
    assert pairs == await openai_pairs(messages)  # the same history, the same ids
