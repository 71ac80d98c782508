"""What a run emits: text and reasoning live, a tool call once its arguments are complete
JSON, a step per model call, results, and usage and the stop cause on the terminal event; ids
are deterministic (law 10), so the whole stream can be asserted as a snapshot."""

from __future__ import annotations

from typing import Any

from tiller.conversation import AssistantMessage, Reasoning, ToolCall, Usage
from tiller.loop import Agent, RunContext, RunOptions
from tiller.model import ScriptedModel
from tiller.state import StopCause
from tiller.tools import tool

from ._support import drive


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


SCRIPT: list[Any] = [
    {
        "reasoning": [{"text": "Simple sum.", "signature": "sig-1"}],
        "text": "Adding now",
        "tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}],
        "usage": {"input_tokens": 7, "output_tokens": 3},
    },
    {"text": "It is 3.", "usage": {"input_tokens": 9, "output_tokens": 2}},
]


async def test_the_whole_stream_of_a_two_turn_run(ctx: RunContext) -> None:
    run = await drive(Agent(ScriptedModel(SCRIPT), [add]), "1 + 2?", ctx, run_id="r")
    assert run.wire == [
        {"type": "RUN_STARTED", "threadId": "r", "runId": "r", "protocolVersion": "1.0"},
        {"type": "STEP_STARTED", "stepName": "step 1"},
        {"type": "REASONING_START", "messageId": "r-msg-2"},
        {"type": "REASONING_MESSAGE_START", "messageId": "r-msg-2", "role": "reasoning"},
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "r-msg-2", "delta": "Simple sum."},
        {"type": "REASONING_MESSAGE_END", "messageId": "r-msg-2"},
        {"type": "REASONING_END", "messageId": "r-msg-2"},
        {"type": "TEXT_MESSAGE_START", "messageId": "r-msg-1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "r-msg-1", "delta": "Adding"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "r-msg-1", "delta": " now"},
        # The model streamed the arguments in fragments; the call goes out whole, once
        # they are complete JSON.
        {
            "type": "TOOL_CALL_START",
            "toolCallId": "r-call-1",
            "toolCallName": "add",
            "parentMessageId": "r-msg-1",
        },
        {"type": "TOOL_CALL_ARGS", "toolCallId": "r-call-1", "delta": '{"a":1,"b":2}'},
        {"type": "TOOL_CALL_END", "toolCallId": "r-call-1"},
        {"type": "TEXT_MESSAGE_END", "messageId": "r-msg-1"},
        {
            "type": "TOOL_CALL_RESULT",
            "messageId": "r-msg-3",
            "toolCallId": "r-call-1",
            "content": "3",
            "role": "tool",
        },
        {"type": "STEP_FINISHED", "stepName": "step 1"},
        {"type": "STEP_STARTED", "stepName": "step 2"},
        {"type": "TEXT_MESSAGE_START", "messageId": "r-msg-4", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "r-msg-4", "delta": "It"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "r-msg-4", "delta": " is"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "r-msg-4", "delta": " 3."},
        {"type": "TEXT_MESSAGE_END", "messageId": "r-msg-4"},
        {"type": "STEP_FINISHED", "stepName": "step 2"},
        {
            "type": "RUN_FINISHED",
            "threadId": "r",
            "runId": "r",
            "result": {"stopCause": "completed"},
            "outcome": {"type": "success"},
            "usage": [
                {
                    "provider": "scripted",
                    "model": "scripted",
                    "inputTokens": 16,
                    "outputTokens": 5,
                    "totalTokens": 21,
                }
            ],
        },
    ]
    result = run.result
    assert result.stop_cause is StopCause.COMPLETED
    assert result.completed
    assert (result.text, result.steps, result.output, result.error) == ("It is 3.", 2, None, None)
    assert result.usage == Usage(input_tokens=16, output_tokens=5, requests=2)
    assert result.usage_complete
    assert run.messages[1] == AssistantMessage(
        id="r-msg-1",
        text="Adding now",
        reasoning=(Reasoning(text="Simple sum.", signature="sig-1"),),
        tool_calls=(
            ToolCall(id="r-call-1", name="add", arguments='{"a":1,"b":2}', provider_id="call-1-0"),
        ),
    )
    (entry,) = result.tool_trace
    assert (entry.call_id, entry.name, entry.arguments, entry.step) == (
        "r-call-1",
        "add",
        '{"a":1,"b":2}',
        1,
    )
    assert not (entry.denied or entry.unknown or entry.staged or entry.is_error)


async def test_the_same_run_twice_gives_the_same_stream(ctx: RunContext) -> None:
    first = await drive(Agent(ScriptedModel(SCRIPT), [add]), "1 + 2?", ctx, run_id="r")
    second = await drive(Agent(ScriptedModel(SCRIPT), [add]), "1 + 2?", ctx, run_id="r")
    assert first.wire == second.wire
    assert first.result.state == second.result.state


async def test_the_request_carries_system_tools_and_options(ctx: RunContext) -> None:
    model = ScriptedModel(["ok"])
    agent = Agent(model, [add], system_prompt="Be exact.")
    await drive(agent, "hi", ctx, RunOptions(max_tokens=123, temperature=0.25))
    (request,) = model.requests
    assert request.system == "Be exact."
    assert [spec.name for spec in request.tools] == ["add"]
    assert request.tools[0].parameters["required"] == ["a", "b"]
    assert (request.max_tokens, request.temperature) == (123, 0.25)
