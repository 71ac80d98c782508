"""Empty turns: nudged a bounded number of times, then `no_output`; an empty assistant
turn never lands in the transcript (law 1), and the nudge joins the user turn."""

from __future__ import annotations

from tiller.conversation import UserMessage
from tiller.loop import Agent, RunContext, RunOptions
from tiller.loop._model_turn import EMPTY_TURN_NUDGE
from tiller.model import ScriptedModel
from tiller.state import StopCause
from tiller.tools import tool

from ._support import drive, texts


def nudged(prompt: str, times: int) -> str:
    return "\n\n".join([prompt] + [EMPTY_TURN_NUDGE] * times)


async def test_three_nudges_then_no_output(ctx: RunContext) -> None:
    model = ScriptedModel(["", "", "", "", "unused"])
    run = await drive(Agent(model), "go", ctx)
    assert run.result.stop_cause is StopCause.NO_OUTPUT
    assert len(model.requests) == 4
    assert run.messages == [UserMessage(text=nudged("go", 3))]
    assert [r.messages for r in model.requests[1:]] == [
        [UserMessage(text=nudged("go", n))] for n in (1, 2, 3)
    ]
    assert run.result.text == ""
    assert run.terminal["result"] == {"stopCause": "no_output"}
    assert "TEXT_MESSAGE_START" not in run.kinds


async def test_a_nudge_that_works(ctx: RunContext) -> None:
    model = ScriptedModel(["", "Here you go."])
    run = await drive(Agent(model), "go", ctx)
    assert run.result.stop_cause is StopCause.COMPLETED
    assert texts(run.messages) == [("user", nudged("go", 1)), ("assistant", "Here you go.")]
    assert run.result.state.empty_turn_nudges == 1


async def test_whitespace_and_reasoning_alone_are_empty(ctx: RunContext) -> None:
    model = ScriptedModel(["   \n", {"reasoning": "Let me think."}, "Done."])
    run = await drive(Agent(model), "go", ctx)
    assert run.result.stop_cause is StopCause.COMPLETED
    assert texts(run.messages) == [("user", nudged("go", 2)), ("assistant", "Done.")]
    # The reasoning was still shown live.
    assert "REASONING_MESSAGE_CONTENT" in run.kinds


async def test_the_nudge_joins_the_tool_results_message(ctx: RunContext) -> None:
    @tool(read_only=True)
    def look() -> str:
        """Look."""
        return "seen"

    model = ScriptedModel([{"tool_calls": [{"name": "look"}]}, "", "Seen it."])
    run = await drive(Agent(model, [look]), "go", ctx)
    assert run.result.stop_cause is StopCause.COMPLETED
    folded = model.requests[2].messages[-1]
    assert isinstance(folded, UserMessage)
    assert folded.text == EMPTY_TURN_NUDGE
    assert [r.content for r in folded.tool_results] == ["seen"]


async def test_the_number_of_nudges_is_an_option(ctx: RunContext) -> None:
    model = ScriptedModel(["", "", "unused"])
    run = await drive(Agent(model), "go", ctx, RunOptions(empty_turn_nudges=1))
    assert run.result.stop_cause is StopCause.NO_OUTPUT
    assert len(model.requests) == 2

    model = ScriptedModel(["", "unused"])
    run = await drive(Agent(model), "go", ctx, RunOptions(empty_turn_nudges=0))
    assert run.result.stop_cause is StopCause.NO_OUTPUT
    assert len(model.requests) == 1
