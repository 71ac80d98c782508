"""Steering (`RunContext.queued_input`): text a person types while the run works reaches
the next request folded into the user message that carries the tool results (law 1), in
both wire formats; text that arrives during the final answer starts another step."""

from __future__ import annotations

from collections.abc import Sequence

from inline_snapshot import snapshot

from tiller.conversation import AssistantMessage, ToolResult, UserMessage
from tiller.events import Event
from tiller.loop import Agent, Budget, RunContext, SteeringQueue
from tiller.model import AnthropicModel, OpenAICompatModel, ScriptedModel, TurnInfo
from tiller.model.scripted import TurnLike
from tiller.state import StopCause
from tiller.tools import FunctionTool, tool

from .._transcript import event_lines, transcript_of
from ._support import drive

STEER = "Use metric units, please."


def steering_tool(queue: SteeringQueue, *messages: str) -> FunctionTool:
    @tool(read_only=True)
    def weather(city: str) -> str:
        """The weather in a city."""
        for message in messages:
            queue.push(message)
        return f"{city}: 68F"

    return weather


async def test_steering_is_folded_into_the_tool_results_message(ctx: RunContext) -> None:
    model = ScriptedModel(
        [
            {
                "text": "Checking.",
                "tool_calls": [{"name": "weather", "arguments": {"city": "Oslo"}}],
            },
            "It is 20C in Oslo.",
        ]
    )
    agent = Agent(model, [steering_tool(ctx.queued_input, STEER)], system_prompt="be brief")
    run = await drive(agent, "Weather in Oslo?", ctx)
    assert run.result.stop_cause is StopCause.COMPLETED
    folded = UserMessage(
        text=STEER,
        tool_results=(ToolResult(call_id="r1-call-1", name="weather", content="Oslo: 68F"),),
    )
    request = model.requests[1]
    assert request.messages[-1] == folded
    assert run.messages[2] == folded
    assert run.custom("tiller.queued_input") == [{"text": STEER}]
    assert transcript_of(run) == snapshot(
        [
            "user: Weather in Oslo?",
            "assistant r1-msg-1: Checking.",
            'call r1-call-1 weather {"city":"Oslo"}',
            "result r1-call-1 weather: Oslo: 68F",
            "and user: Use metric units, please.",
            "assistant r1-msg-3: It is 20C in Oslo.",
        ]
    )
    # The event comes at the top of turn 2, before its model call.
    assert event_lines(run.wire) == snapshot(
        [
            'RUN_STARTED r1 {"protocolVersion":"1.0"}',
            "STEP_STARTED step 1",
            "TEXT_MESSAGE_START r1-msg-1",
            "TEXT_MESSAGE_CONTENT r1-msg-1 Checking.",
            "TOOL_CALL_START r1-call-1 weather in r1-msg-1",
            'TOOL_CALL_ARGS r1-call-1 {"city":"Oslo"}',
            "TOOL_CALL_END r1-call-1",
            "TEXT_MESSAGE_END r1-msg-1",
            "TOOL_CALL_RESULT r1-call-1 (r1-msg-2): Oslo: 68F",
            "STEP_FINISHED step 1",
            'CUSTOM tiller.queued_input {"value":{"text":"Use metric units, please."}}',
            "STEP_STARTED step 2",
            "TEXT_MESSAGE_START r1-msg-3",
            "TEXT_MESSAGE_CONTENT r1-msg-3 It is 20C in Oslo.",
            "TEXT_MESSAGE_END r1-msg-3",
            "STEP_FINISHED step 2",
            'RUN_FINISHED r1 {"result":{"stopCause":"completed"},"outcome":{"type":"success"}}',
        ]
    )

    async with OpenAICompatModel("m", api_key="") as openai:
        body = openai.request_body(request)
    assert body["messages"][-3:] == [
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call-1-0",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call-1-0", "content": "Oslo: 68F"},
        {"role": "user", "content": STEER},
    ]

    async with AnthropicModel("m", api_key="x") as anthropic:
        body = anthropic.request_body(request)
    assert body["messages"][-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "call-1-0",
                "content": "Oslo: 68F",
                "is_error": False,
            },
            {"type": "text", "text": STEER},
        ],
    }
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]


async def test_several_messages_and_parallel_results_fold_into_one(ctx: RunContext) -> None:
    """Two calls and two steering messages: one user message, every result first (in
    call order), then the texts, oldest first."""
    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "weather", "arguments": {"city": "Oslo"}},
                    {"name": "weather", "arguments": {"city": "Rome"}},
                ]
            },
            "Done.",
        ]
    )
    queue = ctx.queued_input
    agent = Agent(model, [steering_tool(queue, "first", "second")])
    run = await drive(agent, "go", ctx)
    assert transcript_of(model.requests[1].messages) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1:",
            'call r1-call-1 weather {"city":"Oslo"}',
            'call r1-call-2 weather {"city":"Rome"}',
            "result r1-call-1 weather: Oslo: 68F",
            "result r1-call-2 weather: Rome: 68F",
            "and user: first¶¶second¶¶first¶¶second",
        ]
    )
    assert len(run.custom("tiller.queued_input")) == 4

    async with AnthropicModel("m", api_key="x") as anthropic:
        content = anthropic.request_body(model.requests[1])["messages"][-1]["content"]
    assert [block["type"] for block in content] == ["tool_result", "tool_result", "text"]
    async with OpenAICompatModel("m", api_key="") as openai:
        roles = [m["role"] for m in openai.request_body(model.requests[1])["messages"]]
    assert roles == ["user", "assistant", "tool", "tool", "user"]


async def test_steering_during_the_final_answer_continues_the_run(ctx: RunContext) -> None:
    queue = ctx.queued_input

    def script(messages: Sequence[UserMessage | AssistantMessage], info: TurnInfo) -> TurnLike:
        if info.turn == 1:
            queue.push("Also mention the wind.")  # typed while the model writes
            return "It is sunny."
        return "It is sunny, with a light breeze."

    model = ScriptedModel(script)
    run = await drive(Agent(model), "Weather?", ctx)
    assert run.result.stop_cause is StopCause.COMPLETED
    assert len(model.requests) == 2
    assert transcript_of(run) == snapshot(
        [
            "user: Weather?",
            "assistant r1-msg-1: It is sunny.",
            "user: Also mention the wind.",
            "assistant r1-msg-2: It is sunny, with a light breeze.",
        ]
    )
    assert model.requests[1].messages[-1] == UserMessage(text="Also mention the wind.")
    assert run.result.text == "It is sunny, with a light breeze."
    assert event_lines(run.wire) == snapshot(
        [
            'RUN_STARTED r1 {"protocolVersion":"1.0"}',
            "STEP_STARTED step 1",
            "TEXT_MESSAGE_START r1-msg-1",
            "TEXT_MESSAGE_CONTENT r1-msg-1 It is sunny.",
            "TEXT_MESSAGE_END r1-msg-1",
            "STEP_FINISHED step 1",
            'CUSTOM tiller.queued_input {"value":{"text":"Also mention the wind."}}',
            "STEP_STARTED step 2",
            "TEXT_MESSAGE_START r1-msg-2",
            "TEXT_MESSAGE_CONTENT r1-msg-2 It is sunny, with a light breeze.",
            "TEXT_MESSAGE_END r1-msg-2",
            "STEP_FINISHED step 2",
            'RUN_FINISHED r1 {"result":{"stopCause":"completed"},"outcome":{"type":"success"}}',
        ]
    )


async def test_steering_queued_before_the_run_joins_the_prompt(ctx: RunContext) -> None:
    ctx.queued_input.push("Be brief.")
    model = ScriptedModel(["ok"])
    await drive(Agent(model), "Explain.", ctx)
    assert model.requests[0].messages == [UserMessage(text="Explain.\n\nBe brief.")]


async def test_steering_is_not_taken_when_the_run_is_about_to_stop(ctx: RunContext) -> None:
    """The budget is spent: the run stops without a model call, and the text stays in the
    queue for whoever continues, rather than vanishing into a state no model reads."""
    model = ScriptedModel(
        [{"tool_calls": [{"name": "weather", "arguments": {"city": "Oslo"}}]}, "unused"]
    )
    context = ctx.with_budget(Budget(max_steps=1))
    agent = Agent(model, [steering_tool(context.queued_input, STEER)])
    run = await drive(agent, "go", context)
    assert run.result.stop_cause is StopCause.STEP_BUDGET
    assert len(model.requests) == 1
    assert context.queued_input.drain() == [STEER]
    assert run.custom("tiller.queued_input") == []


def test_the_queue_strips_and_ignores_blank_text() -> None:
    queue = SteeringQueue()
    queue.push("   ")
    queue.push("")
    assert not queue
    queue.push("  hello \n")
    queue.push("again")
    assert len(queue) == 2
    assert queue.drain() == ["hello", "again"]
    assert queue.drain() == []


async def test_steering_pushed_by_an_observer_of_the_stream(ctx: RunContext) -> None:
    """A UI steers as it watches: a message typed while turn 1's call is shown reaches
    turn 2 with the results; one typed while the answer streams starts turn 3."""
    queue = ctx.queued_input
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "weather", "arguments": {"city": "Oslo"}}]},
            "It is 20C.",
            "It is 20C and windy.",
        ]
    )

    def on_event(event: Event) -> None:
        if event.type == "TOOL_CALL_END":
            queue.push("In Celsius.")
        if event.type == "TEXT_MESSAGE_CONTENT" and event.delta == " 20C.":  # type: ignore[attr-defined]
            queue.push("And the wind?")

    run = await drive(Agent(model, [steering_tool(queue)]), "Weather?", ctx, on_event=on_event)
    assert run.result.stop_cause is StopCause.COMPLETED
    assert transcript_of(run) == snapshot(
        [
            "user: Weather?",
            "assistant r1-msg-1:",
            'call r1-call-1 weather {"city":"Oslo"}',
            "result r1-call-1 weather: Oslo: 68F",
            "and user: In Celsius.",
            "assistant r1-msg-3: It is 20C.",
            "user: And the wind?",
            "assistant r1-msg-4: It is 20C and windy.",
        ]
    )
    assert run.custom("tiller.queued_input") == [{"text": "In Celsius."}, {"text": "And the wind?"}]


async def test_steering_taken_just_before_a_cancel_is_kept_in_the_state(
    ctx: RunContext,
) -> None:
    """Two messages are drained at the top of a step and the run is cancelled as the
    first is announced: both stay in the run's state (and reach the model when the run
    is continued), none is lost between the queue and the transcript."""
    from tiller.cancel import CancellationToken

    token = CancellationToken()
    # Passed on, so both runs (the cancelled one and its continuation) read this queue.
    queue = SteeringQueue()
    ctx = ctx.with_queued_input(queue)
    model = ScriptedModel(
        [{"tool_calls": [{"name": "weather", "arguments": {"city": "Oslo"}}]}, "unused"]
    )

    def on_event(event: Event) -> None:
        if event.type == "CUSTOM" and event.name == "tiller.queued_input":  # type: ignore[attr-defined]
            token.cancel("stop")

    agent = Agent(model, [steering_tool(queue, "one", "two")])
    run = await drive(agent, "go", ctx.with_cancel(token), on_event=on_event)
    assert run.result.stop_cause is StopCause.CANCELLED
    assert len(model.requests) == 1
    assert run.result.state.pending_input == ["one", "two"]
    assert not queue

    resumed = ScriptedModel(["It is 20C."], per_run=False)
    rest = await drive(Agent(resumed, [steering_tool(queue)]), run.result.state, ctx, run_id="r2")
    assert rest.result.stop_cause is StopCause.COMPLETED
    assert transcript_of(resumed.requests[0].messages) == snapshot(
        [
            "user: go",
            "assistant r1-msg-1:",
            'call r1-call-1 weather {"city":"Oslo"}',
            "result r1-call-1 weather: Oslo: 68F",
            "and user: one¶¶two",
        ]
    )
    assert event_lines(run.wire) == snapshot(
        [
            'RUN_STARTED r1 {"protocolVersion":"1.0"}',
            "STEP_STARTED step 1",
            "TOOL_CALL_START r1-call-1 weather in r1-msg-1",
            'TOOL_CALL_ARGS r1-call-1 {"city":"Oslo"}',
            "TOOL_CALL_END r1-call-1",
            "TOOL_CALL_RESULT r1-call-1 (r1-msg-2): Oslo: 68F",
            "STEP_FINISHED step 1",
            'CUSTOM tiller.queued_input {"value":{"text":"one"}}',
            'RUN_FINISHED r1 {"outcome":{"type":"cancelled"}}',
        ]
    )
    assert rest.result.state.pending_input == []
