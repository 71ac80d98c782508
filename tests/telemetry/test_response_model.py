"""`gen_ai.response.model` is the model that answered, as the provider names it, on the chat
span and the metrics; a model that does not say (a scripted one) leaves it out rather than
repeating the request's model (tests/telemetry/test_run_spans.py)."""

from __future__ import annotations

from typing import Any

from tiller.loop import Agent, RunContext, RunOptions
from tiller.model import OpenAICompatModel
from tiller.state import StopCause

from ..model._servers import LocalServer, openai_sse
from ._tree import Recorded


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1741570283,
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


async def test_the_chat_span_names_the_model_that_answered(
    recorded: Recorded, ctx: RunContext
) -> None:
    async with LocalServer() as server:
        server.reply(
            openai_sse(
                _chunk({"role": "assistant", "content": "hi"}),
                _chunk({}, "stop"),
                "[DONE]",
            )
        )
        async with OpenAICompatModel(
            "gpt-4o", base_url=f"{server.url}/v1", api_key="sk-test"
        ) as model:
            options = RunOptions().with_telemetry(recorded.telemetry)
            result = await Agent(model, []).run_in(ctx, "hello", options=options)
    assert result.stop_cause is StopCause.COMPLETED
    (chat,) = recorded.named("chat gpt-4o")
    attributes = dict(chat.attributes or {})
    assert attributes["gen_ai.request.model"] == "gpt-4o"
    assert attributes["gen_ai.response.model"] == "gpt-4o-2024-08-06"
    durations = recorded.metrics()["gen_ai.client.operation.duration"]
    assert [point[0]["gen_ai.response.model"] for point in durations] == ["gpt-4o-2024-08-06"]
