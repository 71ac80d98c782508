"""Structured output: with `output_type` the final answer must validate; the validation
error goes back to the model a bounded number of times, then the run fails with it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import pydantic
import pytest
from pydantic import BaseModel

from tiller.capture import memory_capture
from tiller.conversation import AssistantMessage, UserMessage
from tiller.errors import UsageError
from tiller.loop import Agent, Budget, PauseOnWrites, ResumeDecision, RunContext, RunOptions
from tiller.model import (
    OUTPUT_TOOL_NAME,
    Finish,
    ForceTool,
    ModelRequest,
    ScriptedModel,
    StreamEvent,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from tiller.model.replay import ReplayModel
from tiller.state import StopCause
from tiller.testing import agent_with_model
from tiller.tools import tool

from ._support import drive, texts


class Answer(BaseModel):
    city: str
    celsius: int


VALID = '{"city": "Oslo", "celsius": 20}'
VALID_JSON = {"city": "Oslo", "celsius": 20}
OUTPUT_SET_ASIDE_TEXT = (
    "Your final_result call was set aside because you called other tools in the same "
    "reply. Read their results, then call final_result on its own."
)


async def test_a_valid_answer_the_first_time(ctx: RunContext) -> None:
    model = ScriptedModel([VALID])
    agent = Agent(model, system_prompt="You are a weather bot.", output_type=Answer)
    run = await drive(agent, "Weather in Oslo?", ctx)
    assert run.result.stop_cause is StopCause.COMPLETED
    assert run.result.output == Answer(city="Oslo", celsius=20)
    assert run.result.text == VALID
    system = model.requests[0].system
    assert system is not None
    assert system.startswith("You are a weather bot.\n\n")
    assert '"celsius"' in system


async def test_a_fenced_answer_is_accepted(ctx: RunContext) -> None:
    model = ScriptedModel([f"```json\n{VALID}\n```"])
    run = await drive(Agent(model, output_type=Answer), "Weather?", ctx)
    assert run.result.output == Answer(city="Oslo", celsius=20)


async def test_an_invalid_answer_is_retried_with_the_error(ctx: RunContext) -> None:
    @tool(read_only=True)
    def weather() -> str:
        """The weather."""
        return "20C"

    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "weather"}]},
            "It is 20C in Oslo.",
            '{"city": "Oslo", "celsius": "warm"}',
            VALID,
        ]
    )
    run = await drive(Agent(model, [weather], output_type=Answer), "Weather?", ctx)
    assert run.result.stop_cause is StopCause.COMPLETED
    assert run.result.output == Answer(city="Oslo", celsius=20)
    assert len(model.requests) == 4
    retry = model.requests[2].messages[-1]
    assert isinstance(retry, UserMessage)
    assert retry.text.startswith("Your answer did not validate against the required schema:")
    assert "celsius" in model.requests[3].messages[-1].text
    assert run.result.state.output_retries == 2
    # Every attempt is in the transcript, each followed by the error it earned.
    assert [role for role, _ in texts(run.messages)] == ["user", "assistant", "user"] + [
        "assistant",
        "user",
    ] * 2 + ["assistant"]


async def test_invalid_beyond_the_retries_fails_with_the_message(ctx: RunContext) -> None:
    model = ScriptedModel(["not json", "still not json"])
    options = RunOptions(output_retries=1)
    run = await drive(Agent(model, output_type=Answer), "Weather?", ctx, options)
    result = run.result
    assert result.stop_cause is StopCause.ERROR
    assert result.output is None
    assert result.error is not None
    assert result.error.startswith("the final answer did not validate as Answer:")
    assert len(model.requests) == 2
    assert run.terminal["type"] == "RUN_ERROR"
    assert run.terminal["code"] == "RUN_FAILED"
    assert run.terminal["message"] == result.error
    assert result.text == "still not json"


async def test_no_retries_at_all(ctx: RunContext) -> None:
    model = ScriptedModel(["nope"])
    run = await drive(Agent(model, output_type=Answer), "?", ctx, RunOptions(output_retries=0))
    assert run.result.stop_cause is StopCause.ERROR
    assert len(model.requests) == 1


async def test_parse_output_reads_a_final_answer_as_a_run_s_result_holds_it(
    ctx: RunContext,
) -> None:
    agent = Agent(ScriptedModel([f"```json\n{VALID}\n```"]), [], output_type=Answer)
    result = await agent.run("q", context=ctx)
    assert agent.parse_output(result.text) == result.output
    assert Agent(ScriptedModel(["x"]), []).parse_output('{"city": "Paris"}') is None
    with pytest.raises(pydantic.ValidationError):
        agent.parse_output("not json")


# ── the output tool (tool mode), with a scripted model ───────────────────────────────


@tool(read_only=True)
def weather() -> str:
    """The weather."""
    return "20C"


def output_call(arguments: str | dict[str, object]) -> dict[str, object]:
    return {"name": OUTPUT_TOOL_NAME, "arguments": arguments}


async def test_in_tool_mode_the_output_call_is_the_answer_not_a_tool_call(
    ctx: RunContext,
) -> None:
    model = ScriptedModel([{"text": "Here it is.", "tool_calls": [output_call(VALID)]}])
    agent = Agent(model, output_type=Answer, output_mode="tool")
    run = await drive(agent, "Weather?", ctx)
    assert run.result.output == Answer(city="Oslo", celsius=20)
    [request] = model.requests
    assert [t.name for t in request.tools] == [OUTPUT_TOOL_NAME]
    assert request.tool_choice == ForceTool(OUTPUT_TOOL_NAME)
    # The text the model wrote, then the answer, as one message: streamed as it is kept.
    assert texts(run.messages)[-1] == ("assistant", f"Here it is.\n\n{VALID}")
    streamed = "".join(e["delta"] for e in run.wire if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert streamed == f"Here it is.\n\n{VALID}"
    assert "TOOL_CALL_START" not in run.kinds
    assert run.terminal["result"] == {"stopCause": "completed", "output": VALID_JSON}


async def test_output_arguments_that_are_not_json_are_asked_for_again(ctx: RunContext) -> None:
    model = ScriptedModel([{"tool_calls": [output_call('{"city": ')]}, VALID])
    run = await drive(Agent(model, output_type=Answer, output_mode="tool"), "Weather?", ctx)
    # A text answer is read in tool mode too (a model may not be forced to call the tool).
    assert run.result.output == Answer(city="Oslo", celsius=20)
    retry = model.requests[1].messages[-1]
    assert isinstance(retry, UserMessage)
    assert retry.text.startswith(f"Your {OUTPUT_TOOL_NAME} call did not validate")
    assert "Invalid JSON" in retry.text
    assert run.result.tool_trace == ()  # the output call never ran as a tool


async def test_an_output_call_beside_other_calls_is_set_aside(ctx: RunContext) -> None:
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "weather"}, output_call(VALID)]},
            {"tool_calls": [output_call(VALID)]},
        ]
    )
    agent = Agent(model, [weather], output_type=Answer, output_mode="tool")
    run = await drive(agent, "Weather?", ctx)
    assert run.result.output == Answer(city="Oslo", celsius=20)
    assert model.requests[0].tool_choice == "required"
    # The weather call ran and has its result; the output call is gone from the transcript,
    # and the model was told why, beside the result.
    first = run.messages[1]
    assert isinstance(first, AssistantMessage)
    assert [c.name for c in first.tool_calls] == ["weather"]
    told = model.requests[1].messages[-1]
    assert isinstance(told, UserMessage)
    assert [r.content for r in told.tool_results] == ["20C"]
    assert told.text == OUTPUT_SET_ASIDE_TEXT
    assert [e["toolCallName"] for e in run.wire if e["type"] == "TOOL_CALL_START"] == ["weather"]


def test_a_tool_named_like_the_output_tool_is_refused_in_tool_mode() -> None:
    @tool(name=OUTPUT_TOOL_NAME)
    def clash() -> str:
        """Clashes."""
        return ""

    with pytest.raises(UsageError, match="rename the tool or pick another output_mode"):
        Agent(ScriptedModel([]), [clash], output_type=Answer, output_mode="tool")
    Agent(ScriptedModel([]), [clash], output_type=Answer)  # prompted: no output tool


async def test_a_copy_on_another_model_keeps_the_mode_and_replays_identically(
    ctx: RunContext,
) -> None:
    captures = memory_capture()
    model = ScriptedModel(
        [{"tool_calls": [{"name": "weather"}]}, {"tool_calls": [output_call(VALID)]}]
    )
    agent = Agent(model, [weather], output_type=Answer, output_mode="tool")
    options = RunOptions(capture_sink=captures)
    original = await drive(agent, "Weather?", ctx, options)
    replay = ReplayModel(captures["r1"])
    again = await drive(agent_with_model(agent, replay), "Weather?", ctx)
    assert again.wire == original.wire
    assert again.result.output == original.result.output == Answer(city="Oslo", celsius=20)
    assert replay.mismatches == [] and replay.remaining == 0


async def test_reasoning_then_the_output_call_streams_valid_events(ctx: RunContext) -> None:
    model = ScriptedModel([{"reasoning": "Oslo is mild.", "tool_calls": [output_call(VALID)]}])
    run = await drive(Agent(model, output_type=Answer, output_mode="tool"), "Weather?", ctx)
    assert run.result.output == Answer(city="Oslo", celsius=20)
    kinds = [k for k in run.kinds if k.startswith(("REASONING", "TEXT_MESSAGE"))]
    assert kinds.index("REASONING_END") < kinds.index("TEXT_MESSAGE_START")


async def test_parse_output_reads_a_tool_mode_answer_from_the_transcript(ctx: RunContext) -> None:
    """In tool mode the transcript's answer is the model's words, a blank line, then the
    output tool's arguments: a reader of the transcript (a fleet result read from a
    checkpoint) gets the same output the run had."""
    model = ScriptedModel([{"text": "Here it is.", "tool_calls": [output_call(VALID)]}])
    agent = Agent(model, output_type=Answer, output_mode="tool")
    result = await agent.run("Weather?", context=ctx)
    assert agent.parse_output(result.text) == result.output == Answer(city="Oslo", celsius=20)


class Counted(Answer):
    """`Answer`, counting how often its JSON Schema is built."""

    schema_builds: ClassVar[int] = 0

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        Counted.schema_builds += 1
        return super().model_json_schema(*args, **kwargs)


async def test_prompted_mode_builds_the_schema_once_not_per_request(ctx: RunContext) -> None:
    """The prompted instruction carries the schema: it is made with the agent, not at
    every request (building a schema costs more than a whole step)."""
    model = ScriptedModel(
        [{"tool_calls": [{"name": "weather"}]}, {"tool_calls": [{"name": "weather"}]}, VALID]
    )
    agent = Agent(model, [weather], output_type=Counted)
    assert agent.output_mode == "prompted"
    Counted.schema_builds = 0
    run = await drive(agent, "Weather?", ctx)
    assert run.result.output == Counted(city="Oslo", celsius=20)
    assert len(model.requests) == 3
    assert Counted.schema_builds <= 1
    # Every request carried the schema in its system prompt all the same.
    assert all(r.system and '"celsius"' in r.system for r in model.requests)


class CutOffBesideTheAnswer:
    """A model whose one reply calls the output tool in full, then starts a `weather`
    call that the length limit cuts off (finish `length`): the second call never ends."""

    provider = "cutoff"
    name = "cutoff"
    context_window: int | None = None

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        yield ToolCallStart(0, "call-0", OUTPUT_TOOL_NAME)
        yield ToolCallArgsDelta(0, VALID)
        yield ToolCallEnd(0)
        yield ToolCallStart(1, "call-1", "weather")
        yield ToolCallArgsDelta(1, '{"ci')
        yield Finish("length")

    async def aclose(self) -> None:
        pass


async def test_an_output_call_beside_a_call_cut_off_mid_stream_is_the_answer(
    ctx: RunContext,
) -> None:
    """A call cut off mid-stream never runs, so there is nothing to read first: the
    complete output call beside it is the answer, not set aside."""
    model = CutOffBesideTheAnswer()
    agent = Agent(model, [weather], output_type=Answer, output_mode="tool")
    run = await drive(agent, "Weather?", ctx)
    assert run.result.stop_cause is StopCause.COMPLETED
    assert run.result.output == Answer(city="Oslo", celsius=20)
    assert len(model.requests) == 1
    assert run.result.tool_trace == ()


async def test_an_output_call_beside_a_call_with_invalid_arguments_is_set_aside(
    ctx: RunContext,
) -> None:
    """A complete call whose arguments are not JSON is answered (with its error), so
    the model should read that before answering: the output call is set aside."""
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "weather", "arguments": '{"ci'}, output_call(VALID)]},
            {"tool_calls": [output_call(VALID)]},
        ]
    )
    agent = Agent(model, [weather], output_type=Answer, output_mode="tool")
    run = await drive(agent, "Weather?", ctx)
    assert run.result.output == Answer(city="Oslo", celsius=20)
    told = model.requests[1].messages[-1]
    assert isinstance(told, UserMessage)
    assert OUTPUT_SET_ASIDE_TEXT in told.text


@tool
def scribble() -> str:
    """Write something (it declares no capability: a review pause holds it)."""
    return "scribbled"


async def test_the_set_aside_note_survives_a_suspension(tmp_path: Path) -> None:
    """An output call beside a call that waits for a person: the note telling the model
    to call the output tool alone reaches it after the resume (it was kept in memory only,
    and a resumed run never said it)."""
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "scribble", "arguments": {}}, output_call(VALID)]},
            {"tool_calls": [output_call(VALID)]},
        ]
    )
    agent = Agent(model, [scribble], output_type=Answer, output_mode="tool")
    ctx = RunContext.sandboxed(tmp_path)
    paused = await agent.run_in(ctx, "Weather?", RunOptions(review_policy=PauseOnWrites()))
    assert paused.stop_cause is StopCause.SUSPENDED and paused.checkpoint is not None
    (call,) = paused.checkpoint.unanswered_calls()
    done = await agent.resume(paused.checkpoint, {call.id: ResumeDecision.approved()}, ctx=ctx)
    assert done.output == Answer(city="Oslo", celsius=20)
    told = model.requests[1].messages[-1]
    assert isinstance(told, UserMessage)
    assert [r.content for r in told.tool_results] == ["scribbled"]
    assert told.text == OUTPUT_SET_ASIDE_TEXT


# ── the final answer at a budget stop ────────────────────────────────────────────────


def looked_turn() -> dict[str, object]:
    return {"tool_calls": [{"name": "weather"}]}


async def test_the_final_answer_at_a_budget_stop_is_validated(ctx: RunContext) -> None:
    model = ScriptedModel([looked_turn(), VALID])
    agent = Agent(model, [weather], output_type=Answer)
    budget = Budget(max_steps=1, final_answer_reserve=64)
    run = await drive(agent, "Weather?", ctx.with_budget(budget))
    assert run.result.stop_cause is StopCause.STEP_BUDGET  # it did stop on the budget
    assert run.result.output == Answer(city="Oslo", celsius=20)
    assert run.result.error is None
    assert run.terminal["result"] == {"stopCause": "step_budget", "output": VALID_JSON}


async def test_a_final_answer_at_a_budget_stop_that_does_not_validate_says_so(
    ctx: RunContext,
) -> None:
    model = ScriptedModel([looked_turn(), "It is warm in Oslo."])
    agent = Agent(model, [weather], output_type=Answer)
    budget = Budget(max_steps=1, final_answer_reserve=64)
    run = await drive(agent, "Weather?", ctx.with_budget(budget))
    assert len(model.requests) == 2  # no retry: the reserve paid for one answer
    assert run.result.stop_cause is StopCause.STEP_BUDGET
    assert run.result.output is None
    assert run.result.text == "It is warm in Oslo."  # the text is kept
    assert run.result.error is not None
    assert run.result.error.startswith(
        "the final answer at the budget stop did not validate as Answer, and the budget "
        "leaves no retry:"
    )
    assert run.terminal["type"] == "RUN_FINISHED"
    assert run.terminal["result"] == {"stopCause": "step_budget", "outputError": run.result.error}


async def test_in_tool_mode_the_final_answer_at_a_budget_stop_offers_only_the_output_tool(
    ctx: RunContext,
) -> None:
    model = ScriptedModel([looked_turn(), {"tool_calls": [output_call(VALID)]}])
    agent = Agent(model, [weather], output_type=Answer, output_mode="tool")
    budget = Budget(max_steps=1, final_answer_reserve=64)
    run = await drive(agent, "Weather?", ctx.with_budget(budget))
    final = model.requests[1]
    assert [t.name for t in final.tools] == [OUTPUT_TOOL_NAME]  # none of the agent's own
    assert final.tool_choice == ForceTool(OUTPUT_TOOL_NAME)
    assert run.result.output == Answer(city="Oslo", celsius=20)
    assert texts(run.messages)[-1] == ("assistant", VALID)
    assert final.messages[-1].text.startswith(
        "The run has reached its budget. Call no tool but final_result, with your answer. "
    )


@pytest.mark.parametrize("mode", ["tool", "native"])
async def test_a_non_object_answer_given_as_text_without_its_wrapper_is_read(
    ctx: RunContext, mode: Any
) -> None:
    # A list is asked for as {"result": [...]}; a model answering in text (in tool mode,
    # under extended thinking, it may not be forced to call the output tool) may give the
    # value itself, which says the same: it is the answer, not a reason to pay for a retry.
    model = ScriptedModel(["[1, 2]"])
    run = await drive(Agent(model, output_type=list[int], output_mode=mode), "Count.", ctx)
    assert run.result.stop_cause is StopCause.COMPLETED
    assert run.result.output == [1, 2]
    assert run.result.state.output_retries == 0


async def test_a_wrapper_with_a_bad_value_is_still_asked_for_again(ctx: RunContext) -> None:
    # {"result": ...} is the wrapper, whatever the type would take: its value must fit.
    model = ScriptedModel(['{"result": "x"}', '{"result": {"n": 3}}'])
    agent = Agent(model, output_type=dict[str, int] | list[int], output_mode="tool")
    run = await drive(agent, "Count.", ctx)
    assert run.result.output == {"n": 3}
    assert run.result.state.output_retries == 1
