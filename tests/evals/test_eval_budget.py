"""The eval's budget is shared by all its runs and never overspent: runs reserve before
they start and settle when they end; once it is spent, no run starts, and those that
could not are recorded as not run (budget), not as failures."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from tiller.cancel import CancellationToken
from tiller.evals import Case, CaseBudget, Eval, EvalResultStore, LlmJudge
from tiller.evals._eval_budget import EvalPurse
from tiller.fleet import BatchBudget, BatchLimitsDiffer
from tiller.loop import Agent, Budget, Pricing
from tiller.model import ScriptedModel
from tiller.model.scripted import TurnInfo, TurnLike
from tiller.state import StopCause
from tiller.store import Bus
from tiller.tools import tool

from ._runner_support import Includes, Messages, Recording


@tool(read_only=True)
def look(topic: str) -> str:
    """Look something up."""
    return f"about {topic}"


def two_steps() -> Agent:
    """One tool call, then the answer: two steps (model calls) per run."""

    def turn(messages: Messages, info: TurnInfo) -> TurnLike:
        if info.turn == 1:
            return {"tool_calls": [{"name": "look", "arguments": {"topic": "x"}}]}
        return messages[0].text

    return Agent(ScriptedModel(turn), [look])


async def test_the_eval_budget_is_never_overspent_and_stops_new_runs(bus: Bus) -> None:
    cases = [Case(f"c{i}", "q", expected="q") for i in range(5)]
    report = await Eval(
        two_steps,
        cases,
        [Includes()],
        budget=Budget(max_steps=5),
        concurrency=1,
        store=bus,
        eval_id="ev1",
    ).run()

    # 2 + 2 steps, then a run with the one step left, stopped by it; then nothing left.
    assert [(r.case.id, r.status, r.steps) for r in report.results] == [
        ("c0", "scored", 2),
        ("c1", "scored", 2),
        ("c2", "scored", 1),
        ("c3", "not_run", 0),
        ("c4", "not_run", 0),
    ]
    assert sum(r.steps for r in report.results) == 5
    assert report.for_case("c2")[0].outcome.stop_cause is StopCause.STEP_BUDGET
    not_run = report.for_case("c3")[0]
    assert not_run.outcome.stop_cause is StopCause.STEP_BUDGET
    assert "the eval 'ev1' has no steps left" in (not_run.outcome.error or "")
    assert (report.not_run, report.errors, report.scored) == (2, 0, 3)
    stored = await EvalResultStore(bus).get("ev1", "c4", 0)
    assert stored is not None and stored.status == "not_run" and stored.capture is None


async def test_concurrent_runs_share_the_budget_and_never_spend_more(bus: Bus) -> None:
    cases = [Case(f"c{i}", "q", expected="q") for i in range(8)]
    report = await Eval(
        two_steps,
        cases,
        [Includes()],
        budget=Budget(max_steps=9),
        concurrency=4,
        store=bus,
        eval_id="ev1",
    ).run()

    # Each run's share is what is left over the concurrency (9 // 4 = 2, then 7 // 4 = 1,
    # ...): some runs finish, the others are stopped by their share or never start.
    assert sum(r.steps for r in report.results) <= 9
    assert report.scored + report.not_run == 8
    for result in report.results:
        cause = result.outcome.stop_cause
        assert (result.steps, cause) == (2, StopCause.COMPLETED) or cause is StopCause.STEP_BUDGET


async def test_a_case_budget_caps_its_own_runs(bus: Bus) -> None:
    cases = [Case("tight", "q", budget=CaseBudget(max_steps=1)), Case("free", "q")]
    report = await Eval(two_steps, cases, [Recording()], store=bus, eval_id="ev1").run()

    assert report.for_case("tight")[0].outcome.stop_cause is StopCause.STEP_BUDGET
    assert report.for_case("tight")[0].steps == 1
    assert report.for_case("free")[0].outcome.stop_cause is StopCause.COMPLETED


async def test_a_resumed_eval_given_another_budget_is_refused(bus: Bus) -> None:
    cases = [Case("c1", "q")]
    await Eval(
        two_steps, cases, [Recording()], budget=Budget(max_steps=5), store=bus, eval_id="ev1"
    ).run()
    with pytest.raises(BatchLimitsDiffer, match="eval 'ev1' was started with another budget"):
        await Eval(
            two_steps, cases, [Recording()], budget=Budget(max_steps=6), store=bus, eval_id="ev1"
        ).run()


async def test_a_run_made_again_after_a_cancel_reserves_a_new_share(bus: Bus) -> None:
    """A retried run must not get back, for free, the share its cancelled attempt
    settled: the eval's budget counts both attempts' spending."""
    token = CancellationToken()
    calls: Counter[str] = Counter()

    def agent() -> Agent:
        async def turn(messages: Messages, info: TurnInfo) -> TurnLike:
            prompt = messages[0].text
            calls[prompt] += 1
            if info.turn == 1:
                return {"tool_calls": [{"name": "look", "arguments": {"topic": "x"}}]}
            if prompt == "q1" and calls[prompt] == 2 and not token.is_cancelled:
                token.cancel()  # in c1's second step: its first step is spent
                await asyncio.Event().wait()
            return prompt

        return Agent(ScriptedModel(turn), [look])

    cases = [Case("c0", "q0", expected="q0"), Case("c1", "q1", expected="q1")]

    def ev(cancel: CancellationToken | None = None) -> Eval:
        return Eval(
            agent,
            cases,
            [Includes()],
            budget=Budget(max_steps=20),
            concurrency=1,
            store=bus,
            eval_id="ev1",
            cancel=cancel,
        )

    async with asyncio.timeout(30):
        first = await ev(token).run()
    assert [r.status for r in first.results] == ["scored", "cancelled"]
    second = await ev().run()
    assert [r.status for r in second.results] == ["scored", "scored"]

    status = await BatchBudget(bus, "ev1", bucket="tiller-eval-budgets").status()
    made = sum(calls.values())  # every model call, the cancelled attempt's included
    assert status.reserved.steps == 0
    assert status.spent.steps == made  # the call the cancel cut off was a step too
    assert status.runs_settled == 3  # c0, and c1's two attempts


async def test_a_killed_attempts_share_is_not_given_again_to_the_resumed_run(bus: Bus) -> None:
    """A process killed mid-run leaves its reservation held and no record: what it spent
    is unknown. The resumed eval must not be handed that share again as if unspent (it
    would spend it a second time): the dead share stays counted, the run reserves anew."""
    limits = Budget(max_steps=10)
    purse = await EvalPurse.open(bus, "ev1", limits, concurrency=1, pricing={})
    dead = await purse.reserve("ev1:c0:e0", 0, Budget(max_steps=3))  # then the kill
    assert dead.budget is not None and dead.budget.max_steps == 3

    cases = [Case("c0", "q", expected="q", budget=CaseBudget(max_steps=3))]
    report = await Eval(
        two_steps, cases, [Includes()], budget=limits, store=bus, eval_id="ev1"
    ).run()

    assert [(r.status, r.steps) for r in report.results] == [("scored", 2)]
    status = await BatchBudget(bus, "ev1", bucket="tiller-eval-budgets").status()
    assert status.reserved.steps == 3  # the dead attempt's share: it may have been spent
    assert status.spent.steps == 2
    assert status.runs_settled == 1


async def test_the_llm_judge_is_paid_from_the_eval_budget_never_beyond_it(bus: Bus) -> None:
    """The judge's calls count against the eval's budget as the agents' do: with room for
    two model calls, one case is answered and judged, and the next one never starts."""
    judge_model = ScriptedModel([json.dumps({"score": 1.0, "passed": True})] * 2)
    limits = Budget(max_steps=2)
    cases = [Case(f"c{i}", "q", expected="q") for i in range(2)]
    report = await Eval(
        lambda: Agent(ScriptedModel(["the answer"] * 2)),
        cases,
        [LlmJudge(judge_model, limits, rubric="any answer")],
        budget=limits,
        concurrency=1,
        store=bus,
        eval_id="ev1",
    ).run()

    assert [r.status for r in report.results] == ["scored", "not_run"]
    assert report.results[0].scores["llm_judge"].passed
    assert len(judge_model.requests) == 1
    status = await BatchBudget(bus, "ev1", bucket="tiller-eval-budgets").status()
    assert status.spent.steps == 2  # the agent's call and the judge's


async def test_what_the_judge_spent_is_in_the_case_record_and_the_report_s_cost(bus: Bus) -> None:
    """A case's record said only what its agent spent, so a judged eval's report cost less
    than the eval did. What scoring spent is recorded beside it (`scoring_usage`,
    `scoring_cost_usd`), and the report's cost and usage count both."""
    prices = {"scripted": Pricing(input=1.0, output=2.0)}
    judge_model = ScriptedModel([json.dumps({"score": 1.0, "passed": True})])
    report = await Eval(
        lambda: Agent(ScriptedModel(["the answer"])),
        [Case("c1", "q", expected="q")],
        [LlmJudge(judge_model, rubric="any answer")],
        budget=Budget(pricing=prices),
        store=bus,
        eval_id="ev1",
    ).run()

    result = report.results[0]
    judged = judge_model.requests[0]
    assert judged.messages  # the judge was called, and its reply priced:
    assert result.scoring_usage.requests == 1 and result.scoring_usage.output_tokens > 0
    assert result.scoring_cost_usd == pytest.approx(prices["scripted"].cost(result.scoring_usage))
    agent_cost = result.outcome.cost_usd
    assert agent_cost > 0 and result.scoring_cost_usd > 0
    assert result.cost_usd == pytest.approx(agent_cost + result.scoring_cost_usd)
    assert report.cost_usd == pytest.approx(agent_cost + result.scoring_cost_usd)
    assert report.scoring_cost_usd == pytest.approx(result.scoring_cost_usd)
    assert report.usage == result.outcome.usage + result.scoring_usage
    stored = await EvalResultStore(bus).get("ev1", "c1", 0)
    assert stored is not None
    assert (stored.scoring_usage, stored.scoring_cost_usd) == (
        result.scoring_usage,
        result.scoring_cost_usd,
    )
    assert stored.cost_usd == agent_cost  # the agent's own, as before
