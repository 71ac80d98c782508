"""Budgets (DESIGN §4 law 7): each ceiling stops the run with its own cause, checked
before money is spent; `max_tokens` is capped at what is left; the optional tool-less
final answer is paid from a reserve; one budget is shared by a whole run tree."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tiller.conversation import AssistantMessage, Usage, UserMessage
from tiller.loop import (
    Agent,
    Budget,
    GuardrailOutcome,
    Pricing,
    RefusalKeywords,
    RunContext,
    RunOptions,
)
from tiller.loop._model_turn import FINAL_ANSWER_NUDGE
from tiller.model import ModelRequest, ScriptedModel, TurnInfo
from tiller.policy import AllowAll
from tiller.state import StopCause
from tiller.tools import tool

from ._support import drive, last_user, texts

looked: list[str] = []


@tool(read_only=True)
def look() -> str:
    """Look around."""
    looked.append("look")
    return "seen"


def tool_turn(output_tokens: int = 5, input_tokens: int = 10) -> dict[str, Any]:
    return {
        "tool_calls": [{"name": "look"}],
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def text_turn(text: str, output_tokens: int = 5) -> dict[str, Any]:
    return {"text": text, "usage": {"input_tokens": 10, "output_tokens": output_tokens}}


@pytest.fixture(autouse=True)
def _forget_looks() -> None:
    looked.clear()


# ── turns ────────────────────────────────────────────────────────────────────────


async def test_turn_ceiling_without_reserve_makes_no_more_calls(ctx: RunContext) -> None:
    model = ScriptedModel([tool_turn(), tool_turn(), tool_turn(), text_turn("done")])
    run = await drive(Agent(model, [look]), "go", ctx.with_budget(Budget(max_steps=2)))
    result = run.result
    assert result.stop_cause is StopCause.STEP_BUDGET
    assert result.exhausted
    assert len(model.requests) == 2
    assert result.steps == 2
    assert run.terminal["type"] == "RUN_FINISHED"
    assert run.terminal["result"] == {"stopCause": "step_budget"}
    assert run.terminal["outcome"] == {"type": "success"}
    # The transcript ends with the last step's results: nothing was asked for.
    assert run.messages[-1].role == "user"
    assert FINAL_ANSWER_NUDGE not in last_user(run.messages).text


async def test_turn_ceiling_with_reserve_makes_one_toolless_final_call(ctx: RunContext) -> None:
    model = ScriptedModel([tool_turn(), tool_turn(), text_turn("I found: seen.")])
    budget = Budget(max_steps=2, final_answer_reserve=64)
    options = RunOptions(max_tokens=1000)
    run = await drive(Agent(model, [look]), "go", ctx.with_budget(budget), options)
    result = run.result
    assert result.stop_cause is StopCause.STEP_BUDGET
    assert result.exhausted
    assert len(model.requests) == 3
    final = model.requests[2]
    assert list(final.tools) == []
    assert final.max_tokens == 64
    assert [len(r.tools) for r in model.requests[:2]] == [1, 1]
    # The nudge is folded into the message that carries the last results.
    nudge = final.messages[-1]
    assert isinstance(nudge, UserMessage)
    assert nudge.text == FINAL_ANSWER_NUDGE
    assert [r.call_id for r in nudge.tool_results] == ["r1-call-2"]
    assert result.text == "I found: seen."
    assert "final answer" in [e.get("stepName") for e in run.wire]
    assert result.steps == 3
    assert budget.steps == 3


async def test_a_final_answer_made_of_tool_calls_keeps_nothing(ctx: RunContext) -> None:
    """The final call is tool-less: calls it makes anyway are not run, and a reply that
    was only calls leaves no (empty) assistant turn behind (law 1)."""
    model = ScriptedModel([tool_turn(), tool_turn()])
    budget = Budget(max_steps=1, final_answer_reserve=32)
    run = await drive(Agent(model, [look]), "go", ctx.with_budget(budget))
    assert run.result.stop_cause is StopCause.STEP_BUDGET
    assert len(model.requests) == 2
    assert looked == ["look"]
    assert run.messages[-1].role == "user"
    assert run.result.text == ""


class FinalAnswerOnly:
    """A guardrail that judges only the tool-less final-answer call (its request offers
    no tools), answering `pre` before it and `post` after it; it records what it saw."""

    name = "final_answer_only"

    def __init__(
        self, *, pre: GuardrailOutcome | None = None, post: GuardrailOutcome | None = None
    ) -> None:
        self._pre = pre or GuardrailOutcome.passed()
        self._post = post or GuardrailOutcome.passed()
        self.seen: list[str] = []

    async def pre_llm(self, request: ModelRequest) -> GuardrailOutcome:
        if request.tools:
            return GuardrailOutcome.passed()
        self.seen.append("pre")
        return self._pre

    async def post_llm(self, request: ModelRequest, response: AssistantMessage) -> GuardrailOutcome:
        if request.tools:
            return GuardrailOutcome.passed()
        self.seen.append(f"post:{response.text}")
        return self._post


async def test_a_refused_final_answer_is_not_kept(ctx: RunContext) -> None:
    """Pins the break where the budget's tool-less final answer skipped the post-LLM
    guardrails: a response the guardrail refuses reached the result as the answer."""
    model = ScriptedModel([tool_turn(), text_turn("The launch code is 1234.")])
    budget = Budget(max_steps=1, final_answer_reserve=64)
    guard = RefusalKeywords(["launch code"])
    options = RunOptions(guardrails=(guard,))
    run = await drive(Agent(model, [look]), "go", ctx.with_budget(budget), options)
    result = run.result
    assert len(model.requests) == 2  # the final call was made, and then refused
    assert result.stop_cause is StopCause.REFUSED
    assert result.error == "the response mentions 'launch code'"
    assert "1234" not in result.text
    assert all("1234" not in m.text for m in run.messages)
    assert run.terminal["result"] == {"stopCause": "refused"}


async def test_the_final_answer_passes_the_same_guardrails_as_a_turn(ctx: RunContext) -> None:
    """The final answer is judged before (pre) and after (post) its call, and a passing
    answer is kept as usual."""
    guard = FinalAnswerOnly()
    model = ScriptedModel([tool_turn(), text_turn("I found: seen.")])
    budget = Budget(max_steps=1, final_answer_reserve=64)
    options = RunOptions(guardrails=(guard,))
    run = await drive(Agent(model, [look]), "go", ctx.with_budget(budget), options)
    assert guard.seen == ["pre", "post:I found: seen."]
    assert run.result.stop_cause is StopCause.STEP_BUDGET
    assert run.result.text == "I found: seen."


async def test_a_handoff_before_the_final_answer_makes_no_call(ctx: RunContext) -> None:
    """Pins the same break on the pre-LLM side: a guardrail that hands the final answer
    off is honoured, and the reserve held for the call is given back unspent."""
    guard = FinalAnswerOnly(pre=GuardrailOutcome.handoff("summariser", "long history"))
    model = ScriptedModel([tool_turn(), text_turn("unused")])
    budget = Budget(max_steps=1, final_answer_reserve=64)
    options = RunOptions(guardrails=(guard,))
    run = await drive(Agent(model, [look]), "go", ctx.with_budget(budget), options)
    assert guard.seen == ["pre"]
    assert len(model.requests) == 1  # no money spent on a call the guardrail stopped
    assert run.result.stop_cause is StopCause.HANDOFF
    assert run.result.handoff == "summariser"
    assert run.result.error == "long history"
    assert budget.steps == 1
    assert (budget.steps_in_flight, budget.tokens_in_flight) == (0, 0)


# ── output tokens ────────────────────────────────────────────────────────────────


async def test_token_ceiling_caps_max_tokens_then_stops(ctx: RunContext) -> None:
    model = ScriptedModel([tool_turn(), tool_turn(), tool_turn(), text_turn("unused")])
    budget = Budget(max_output_tokens=12)
    options = RunOptions(max_tokens=100)
    run = await drive(Agent(model, [look]), "go", ctx.with_budget(budget), options)
    assert run.result.stop_cause is StopCause.TOKEN_BUDGET
    assert run.result.exhausted
    assert [r.max_tokens for r in model.requests] == [12, 7, 2]
    assert run.result.usage.output_tokens == 15
    assert budget.usage.output_tokens == 15


async def test_token_ceiling_holds_the_reserve_back(ctx: RunContext) -> None:
    model = ScriptedModel([tool_turn(), tool_turn(), tool_turn(), text_turn("Final.", 3)])
    budget = Budget(max_output_tokens=20, final_answer_reserve=8)
    run = await drive(Agent(model, [look]), "go", ctx.with_budget(budget))
    assert run.result.stop_cause is StopCause.TOKEN_BUDGET
    # 20 - 8 held back = 12 to spend on tool turns; the last call is paid from the 8.
    assert [r.max_tokens for r in model.requests] == [12, 7, 2, 8]
    assert list(model.requests[3].tools) == []
    assert run.result.text == "Final."
    assert budget.usage.output_tokens == 18


async def test_max_tokens_is_left_alone_without_a_token_ceiling(ctx: RunContext) -> None:
    model = ScriptedModel([tool_turn(), text_turn("ok")])
    run = await drive(Agent(model, [look]), "go", ctx, RunOptions(max_tokens=300))
    assert run.result.stop_cause is StopCause.COMPLETED
    assert [r.max_tokens for r in model.requests] == [300, 300]


# ── cost ─────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("key", ["scripted", "scripted:scripted"])
async def test_cost_ceiling(ctx: RunContext, key: str) -> None:
    # 1000 input tokens at $1/M + 500 output tokens at $2/M = $0.002 a step.
    turn = tool_turn(output_tokens=500, input_tokens=1000)
    model = ScriptedModel([turn] * 5 + [text_turn("unused")])
    budget = Budget(max_cost_usd=0.005, pricing={key: Pricing(input=1.0, output=2.0)})
    run = await drive(Agent(model, [look]), "go", ctx.with_budget(budget))
    assert run.result.stop_cause is StopCause.COST_BUDGET
    assert run.result.exhausted
    assert len(model.requests) == 3
    assert run.result.cost_usd == pytest.approx(0.006)
    assert budget.cost_usd == pytest.approx(0.006)


async def test_a_step_asks_only_for_the_output_its_dollars_can_buy(ctx: RunContext) -> None:
    """A call is priced after it is made, so its output is capped before: `max_tokens` is
    what the dollars left buy at the model's output price, and the run passes its cost
    ceiling by no more than its last prompt's price (here $0.001), not by its output."""

    def honest(messages: Any, info: TurnInfo) -> dict[str, Any]:
        return tool_turn(output_tokens=min(4000, info.max_tokens or 4000), input_tokens=1000)

    model = ScriptedModel(honest)
    budget = Budget(max_cost_usd=0.005, pricing={"scripted": Pricing(input=1.0, output=2.0)})
    run = await drive(Agent(model, [look]), "go", ctx.with_budget(budget))
    assert run.result.stop_cause is StopCause.COST_BUDGET
    # $0.005 buys 2,500 output tokens at $2/M; that one step costs $0.001 + $0.005.
    assert [r.max_tokens for r in model.requests] == [2500]
    assert budget.cost_usd == pytest.approx(0.006)


async def test_an_unpriced_model_costs_nothing_and_is_named(ctx: RunContext) -> None:
    model = ScriptedModel([tool_turn(), text_turn("done")], name="mystery")
    budget = Budget(max_cost_usd=0.0001, pricing={"other": Pricing(input=1.0, output=1.0)})
    run = await drive(Agent(model, [look]), "go", ctx.with_budget(budget))
    assert run.result.stop_cause is StopCause.COMPLETED
    assert run.result.cost_usd == 0.0
    assert budget.unpriced_models == {"scripted:mystery"}


def test_pricing_counts_cached_input_at_its_own_price() -> None:
    usage = Usage(input_tokens=1_000_000, cached_input_tokens=400_000, output_tokens=100_000)
    assert Pricing(input=3.0, output=15.0, cached_input=0.3).cost(usage) == pytest.approx(
        0.6 * 3.0 + 0.4 * 0.3 + 0.1 * 15.0
    )
    assert Pricing(input=3.0, output=15.0).cost(usage) == pytest.approx(3.0 + 1.5)


def test_the_first_ceiling_reached_is_named() -> None:
    budget = Budget(max_steps=1, max_output_tokens=1, max_cost_usd=0.0)
    assert budget.exceeded() is StopCause.COST_BUDGET
    budget.charge(Usage(output_tokens=1), provider="p", model="m")
    assert budget.exceeded() is StopCause.STEP_BUDGET
    assert Budget().exceeded() is None
    assert Budget.steps_only(2).max_steps == 2


# ── shared budgets ───────────────────────────────────────────────────────────────


async def test_a_budget_shared_by_runs_one_after_the_other(workspace: Path) -> None:
    budget = Budget(max_steps=3)
    first_model = ScriptedModel([tool_turn(), text_turn("first done")])
    second_model = ScriptedModel([tool_turn(), text_turn("second done")])
    first = await drive(
        Agent(first_model, [look]), "go", RunContext.sandboxed(workspace).with_budget(budget)
    )
    second = await drive(
        Agent(second_model, [look]), "go", RunContext.sandboxed(workspace).with_budget(budget)
    )
    assert first.result.stop_cause is StopCause.COMPLETED
    assert second.result.stop_cause is StopCause.STEP_BUDGET
    assert len(second_model.requests) == 1
    assert budget.steps == 3


async def test_a_budget_shared_by_concurrent_runs(workspace: Path) -> None:
    budget = Budget(max_steps=4)
    models = [ScriptedModel([tool_turn()] * 6 + [text_turn("done")]) for _ in range(2)]
    context = RunContext.sandboxed(workspace, AllowAll()).with_budget(budget)
    runs = await asyncio.gather(
        *(drive(Agent(m, [look]), "go", context, run_id=f"r{i}") for i, m in enumerate(models))
    )
    assert [run.result.stop_cause for run in runs] == [StopCause.STEP_BUDGET] * 2
    assert sum(run.result.steps for run in runs) == 4
    assert budget.steps == 4


async def test_concurrent_runs_with_slow_models_do_not_overshoot(workspace: Path) -> None:
    budget = Budget(max_steps=3)
    slow = {**tool_turn(), "delay": 0.01}
    models = [ScriptedModel([slow] * 6 + [text_turn("done")]) for _ in range(2)]
    context = RunContext.sandboxed(workspace, AllowAll()).with_budget(budget)
    await asyncio.gather(
        *(drive(Agent(m, [look]), "go", context, run_id=f"r{i}") for i, m in enumerate(models))
    )
    assert budget.steps == 3
    assert budget.steps_in_flight == 0 and budget.tokens_in_flight == 0


async def test_concurrent_runs_share_the_token_budget_without_overshoot(workspace: Path) -> None:
    """Each call holds its max_tokens while in flight, so overlapping calls cannot all be
    granted what only one of them may spend: models that honour max_tokens (as providers
    do) never take the runs past the ceiling together."""
    budget = Budget(max_output_tokens=100)

    def honest(messages: Any, info: Any) -> dict[str, Any]:
        spend = min(40, info.max_tokens or 40)
        return {**tool_turn(output_tokens=spend), "delay": 0.01}

    models = [ScriptedModel(honest) for _ in range(3)]
    context = RunContext.sandboxed(workspace, AllowAll()).with_budget(budget)
    runs = await asyncio.gather(
        *(drive(Agent(m, [look]), "go", context, run_id=f"r{i}") for i, m in enumerate(models))
    )
    assert budget.usage.output_tokens <= 100
    assert all(run.result.stop_cause is StopCause.TOKEN_BUDGET for run in runs)
    assert budget.tokens_in_flight == 0 and budget.steps_in_flight == 0


async def test_a_budget_shared_with_a_nested_run(workspace: Path) -> None:
    """A tool runs a sub-agent on the parent's budget: the sub-agent spends the turns
    that are left, and the parent, back from the tool, stops before its next call."""
    budget = Budget(max_steps=3)
    inner_model = ScriptedModel([tool_turn(), tool_turn(), tool_turn(), text_turn("inner")])
    inner_results: list[Any] = []

    @tool(read_only=True)
    async def delegate() -> str:
        """Hand the work to a helper agent."""
        inner = Agent(inner_model, [look], name="helper")
        context = RunContext.sandboxed(workspace).with_budget(budget)
        result = await inner.run_in(context, "help", run_id="inner")
        inner_results.append(result)
        return f"helper stopped: {result.stop_cause.value}"

    outer_model = ScriptedModel([{"tool_calls": [{"name": "delegate"}]}, text_turn("outer")])
    context = RunContext.sandboxed(workspace).with_budget(budget)
    run = await drive(Agent(outer_model, [delegate]), "go", context)
    (inner_result,) = inner_results
    assert inner_result.stop_cause is StopCause.STEP_BUDGET
    assert inner_result.steps == 2
    assert len(inner_model.requests) == 2
    assert run.result.stop_cause is StopCause.STEP_BUDGET
    assert len(outer_model.requests) == 1
    assert run.results()[0].content == "helper stopped: step_budget"
    assert budget.steps == 3
    assert texts(run.messages)[0] == ("user", "go")
