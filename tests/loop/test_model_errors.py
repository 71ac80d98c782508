"""Model failures: retried before the stream starts (honouring `Retry-After`), never
after it (law 8: the partial step is kept, the run stops with a clear error)."""

from __future__ import annotations

import logging

import pytest

from tiller.conversation import AssistantMessage
from tiller.loop import Agent, RunContext
from tiller.model import RetryPolicy, ScriptedModel
from tiller.state import StopCause
from tiller.tools import tool

from ._support import drive, texts

#: No backoff of our own, so the only wait is the provider's `retry_after`.
NO_BACKOFF = RetryPolicy(base_delay=0.0, max_delay=1.0)

ran: list[str] = []


@tool
def write(path: str) -> str:
    """Write a file."""
    ran.append(path)
    return "written"


async def test_a_429_is_retried_after_retry_after(
    ctx: RunContext, caplog: pytest.LogCaptureFixture
) -> None:
    model = ScriptedModel([{"error": {"status": 429, "retry_after": 0.01}}, "Hello!"])
    with caplog.at_level(logging.INFO, logger="tiller.model._retry"):
        run = await drive(Agent(model, retry=NO_BACKOFF), "hi", ctx)
    assert run.result.stop_cause is StopCause.COMPLETED
    assert run.result.text == "Hello!"
    assert len(model.requests) == 2
    assert run.result.steps == 1
    assert run.result.usage_complete is True
    assert "RUN_ERROR" not in run.kinds
    assert any("retrying in 0.01s" in record.getMessage() for record in caplog.records)


async def test_a_connection_that_fails_before_streaming_is_retried(ctx: RunContext) -> None:
    model = ScriptedModel([{"error": {"kind": "connection"}}, {"error": {"status": 503}}, "ok"])
    run = await drive(Agent(model, retry=NO_BACKOFF), "hi", ctx)
    assert run.result.stop_cause is StopCause.COMPLETED
    assert len(model.requests) == 3


async def test_retries_run_out(ctx: RunContext) -> None:
    model = ScriptedModel([{"error": {"status": 500, "message": "overloaded"}}] * 2)
    policy = RetryPolicy(max_attempts=2, base_delay=0.0)
    run = await drive(Agent(model, retry=policy), "hi", ctx)
    assert run.result.stop_cause is StopCause.ERROR
    assert run.result.error == "HTTP 500: overloaded"
    assert len(model.requests) == 2
    assert run.terminal == {
        "type": "RUN_ERROR",
        "message": "HTTP 500: overloaded",
        "code": "MODEL_ERROR",
        "usage": run.terminal["usage"],
    }


async def test_a_client_error_is_not_retried(ctx: RunContext) -> None:
    model = ScriptedModel([{"error": {"status": 400, "message": "bad request"}}, "unused"])
    run = await drive(Agent(model, retry=NO_BACKOFF), "hi", ctx)
    assert run.result.stop_cause is StopCause.ERROR
    assert len(model.requests) == 1
    assert run.terminal["code"] == "MODEL_ERROR"
    assert texts(run.messages) == [("user", "hi")]


async def test_a_connection_dropped_mid_stream_is_not_retried(ctx: RunContext) -> None:
    """Text already reached the screen: a retry would show it twice. The partial text
    is kept, the call that was streaming is dropped (never run), the run fails."""
    ran.clear()
    model = ScriptedModel(
        [
            {
                "text": "I will write the file now",
                "tool_calls": [{"name": "write", "arguments": {"path": "a.txt"}}],
                "error": {"kind": "connection", "message": "connection reset by peer"},
            },
            "unused",
        ]
    )
    run = await drive(Agent(model, [write], retry=NO_BACKOFF), "write it", ctx)
    result = run.result
    assert result.stop_cause is StopCause.ERROR
    assert result.error == "connection reset by peer"
    assert len(model.requests) == 1
    assert run.messages[-1] == AssistantMessage(id="r1-msg-1", text="I will write the file now")
    assert result.text == "I will write the file now"
    assert result.usage_complete is False
    assert ran == []
    assert not any(kind.startswith("TOOL_CALL") for kind in run.kinds)
    assert run.terminal["type"] == "RUN_ERROR"
    assert run.terminal["code"] == "MODEL_ERROR"
    assert run.terminal["message"] == "connection reset by peer"
    # The text message was closed before the terminal event.
    assert run.kinds[-3:] == ["TEXT_MESSAGE_END", "STEP_FINISHED", "RUN_ERROR"]


async def test_an_error_after_earlier_turns_keeps_them(ctx: RunContext) -> None:
    ran.clear()
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "write", "arguments": {"path": "a.txt"}}]},
            {"error": {"kind": "context_overflow", "message": "prompt is too long"}},
        ]
    )
    run = await drive(Agent(model, [write], retry=NO_BACKOFF), "go", ctx)
    assert run.result.stop_cause is StopCause.ERROR
    assert run.result.error == "HTTP 400: prompt is too long"
    assert ran == ["a.txt"]
    assert run.results()[0].content == "written"
    assert run.messages[-1].role == "user"
