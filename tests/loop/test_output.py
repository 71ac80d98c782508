"""Structured output: with `output_type` the final answer must validate; the validation
error goes back to the model a bounded number of times, then the run fails with it."""

from __future__ import annotations

import pydantic
import pytest
from pydantic import BaseModel

from tiller.conversation import UserMessage
from tiller.loop import Agent, RunContext, RunOptions
from tiller.model import ScriptedModel
from tiller.state import StopCause
from tiller.tools import tool

from ._support import drive, texts


class Answer(BaseModel):
    city: str
    celsius: int


VALID = '{"city": "Oslo", "celsius": 20}'


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
