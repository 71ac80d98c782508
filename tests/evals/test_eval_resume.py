"""One token stops an eval (running cases cancelled, their partial results kept; no new
case starts); running it again with the same eval id runs only the unscored cases; a
rescore scores stored outcomes again and calls no model."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest
from pydantic import BaseModel

from tiller.cancel import CancellationToken
from tiller.errors import UsageError
from tiller.evals import Case, CaseOutcome, Eval, EvalResultStore, LlmJudge, Score, rescore
from tiller.loop import Agent, Budget
from tiller.model import ScriptedModel
from tiller.model.scripted import TurnInfo
from tiller.policy import AllowAll
from tiller.state import StopCause
from tiller.store import Bus

from ._runner_support import Includes, Messages, Recording, answering, writing


class Counting:
    """A model's turn function that counts the prompts it answers; with `cancel_on`, the
    first call for that prompt fires `token` and waits (the cancel interrupts it)."""

    def __init__(self, token: CancellationToken | None = None, cancel_on: str = "") -> None:
        self.calls: Counter[str] = Counter()
        self.token = token
        self.cancel_on = cancel_on
        self.refuse = False

    async def __call__(self, messages: Messages, info: TurnInfo) -> str:
        prompt = messages[0].text
        if self.refuse:
            raise AssertionError(f"the model was called for {prompt!r}")
        self.calls[prompt] += 1
        if self.token is not None and prompt == self.cancel_on and self.calls[prompt] == 1:
            self.token.cancel()
            await asyncio.Event().wait()  # never set: the cancel ends this call
        return f"answer {prompt}"

    def agent(self) -> Agent:
        return Agent(ScriptedModel(self))


async def test_a_cancelled_eval_resumed_runs_only_the_unscored_cases(bus: Bus) -> None:
    cases = [Case(f"c{i}", f"q{i}", expected=f"q{i}") for i in range(6)]
    token = CancellationToken()
    first_model = Counting(token, cancel_on="q2")
    async with asyncio.timeout(30):  # a hang guard
        first = await Eval(
            first_model.agent,
            cases,
            [Includes()],
            concurrency=1,
            store=bus,
            eval_id="ev1",
            cancel=token,
        ).run()

    assert first.cancelled
    assert [(r.case.id, r.status) for r in first.results] == [
        ("c0", "scored"),
        ("c1", "scored"),
        ("c2", "cancelled"),
    ]
    assert first.not_started == 3
    cancelled = first.for_case("c2")[0]
    assert cancelled.outcome.stop_cause is StopCause.CANCELLED
    assert cancelled.scores == {}
    assert [m.role for m in cancelled.outcome.messages][:1] == ["user"]  # partial kept
    assert set(first_model.calls) == {"q0", "q1", "q2"}

    again = Counting()
    second = await Eval(again.agent, cases, [Includes()], store=bus, eval_id="ev1").run()

    assert set(again.calls) == {"q2", "q3", "q4", "q5"}  # the scored ones are skipped
    assert not second.cancelled
    assert (second.total, second.scored, second.passed) == (6, 6, 6)
    assert second.for_case("c0")[0].attempt == 0
    assert second.for_case("c2")[0].attempt == 1
    stored = await EvalResultStore(bus).results("ev1")
    assert [r.status for r in stored] == ["scored"] * 6


async def test_a_token_fired_before_the_eval_starts_runs_nothing(bus: Bus) -> None:
    token = CancellationToken()
    token.cancel()
    model = Counting()
    report = await Eval(
        model.agent, [Case("c1", "q")], [Includes()], store=bus, eval_id="ev1", cancel=token
    ).run()
    assert report.results == () and report.not_started == 1 and report.cancelled
    assert not model.calls


async def test_a_rescore_scores_the_stored_outcomes_and_calls_no_model(bus: Bus) -> None:
    model = Counting()
    cases = [Case(f"c{i}", f"q{i}", expected=f"q{i}") for i in range(3)]
    await Eval(model.agent, cases, [Includes()], epochs=2, store=bus, eval_id="ev1").run()
    model.refuse = True  # from here on, a model call fails the test

    class ShortAnswer:
        name = "short"

        async def score(self, outcome: CaseOutcome) -> Score:
            assert outcome.stop_cause is StopCause.COMPLETED
            # The stored outcome names its run, as it did when first scored.
            assert outcome.run_id == f"ev1:{outcome.case.id}:e{outcome.epoch}"
            return Score.of(len(outcome.text) < 10, f"{len(outcome.text)} characters")

    report = await rescore(bus, "ev1", [ShortAnswer()])

    assert report.total == 6 and report.scored == 6
    assert set(report.scorers) == {"includes", "short"}  # the old scores are kept
    assert report.scorers["short"].passed == 6
    stored = await EvalResultStore(bus).get("ev1", "c1", 1)
    assert stored is not None
    assert stored.scores["short"].explanation == "9 characters"
    assert stored.scores["includes"].passed


async def test_a_rescore_refuses_an_llm_judge_and_calls_no_model(bus: Bus) -> None:
    """A rescore calls no model: a scorer that would (the LLM judge) is refused before
    any record is read, and the stored scores stay as they were."""
    await Eval(
        answering(lambda q: q),
        [Case("c1", "q", expected="q")],
        [Includes()],
        store=bus,
        eval_id="ev1",
    ).run()
    judge_model = ScriptedModel([json.dumps({"score": 1.0, "passed": True})])
    judge = LlmJudge(judge_model, Budget(), rubric="any answer")

    with pytest.raises(UsageError, match=r"a rescore calls no model.*'llm_judge'"):
        await rescore(bus, "ev1", [Includes(name="again"), judge])

    assert judge_model.requests == []
    stored = await EvalResultStore(bus).get("ev1", "c1", 0)
    assert stored is not None and set(stored.scores) == {"includes"}


async def test_a_rescore_sees_the_workspace_the_run_left(bus: Bus, tmp_path: Path) -> None:
    fixture = tmp_path / "fixture"
    fixture.mkdir()
    (fixture / "app.py").write_text("bug\n")
    await Eval(
        writing("app.py", "fixed\n"),
        [Case("c1", "q", fixture=fixture)],
        [Includes()],
        store=bus,
        eval_id="ev1",
        approver=AllowAll(),
    ).run()

    class Fixed:
        name = "fixed"

        async def score(self, outcome: CaseOutcome) -> Score:
            assert outcome.workspace is not None
            return Score.of((outcome.workspace / "app.py").read_text() == "fixed\n")

    report = await rescore(bus, "ev1", [Fixed()])
    assert report.results[0].scores["fixed"].passed
    assert (fixture / "app.py").read_text() == "bug\n"


async def test_what_is_kept_is_the_workspace_as_the_agent_left_it_not_as_scoring_did(
    bus: Bus, tmp_path: Path
) -> None:
    """A scorer's command may write in the workspace (a test run's caches, a report):
    the kept snapshot, which a rescore sees and the diff shows, is taken before scoring."""
    fixture = tmp_path / "fixture"
    fixture.mkdir()
    (fixture / "app.py").write_text("bug\n")

    class Scribbling:
        name = "scribbling"

        async def score(self, outcome: CaseOutcome) -> Score:
            assert outcome.workspace is not None
            (outcome.workspace / "scorer-output.txt").write_text("left by scoring")
            return Score.of(True)

    await Eval(
        writing("app.py", "fixed\n"),
        [Case("c1", "q", fixture=fixture)],
        [Scribbling()],
        store=bus,
        eval_id="ev1",
        approver=AllowAll(),
    ).run()

    recording = Recording()
    await rescore(bus, "ev1", [recording])
    assert recording.files["c1-e0"] == {"app.py": "fixed\n"}


async def test_a_rescore_of_an_eval_the_store_does_not_have_says_so(bus: Bus) -> None:
    with pytest.raises(UsageError, match="has no eval 'nope'"):
        await rescore(bus, "nope", [Includes()])


async def test_one_token_cancels_every_running_case_and_starts_no_new_one(bus: Bus) -> None:
    token = CancellationToken()
    entered: list[str] = []
    all_in = asyncio.Event()

    async def turn(messages: Messages, info: TurnInfo) -> str:
        entered.append(messages[0].text)
        if len(entered) == 3:
            all_in.set()
        await asyncio.Event().wait()  # every case hangs until the cancel
        return "never"

    async def cancel_when_all_three_run() -> None:
        await all_in.wait()
        token.cancel()

    cases = [Case(f"c{i}", f"q{i}") for i in range(6)]
    async with asyncio.timeout(30), asyncio.TaskGroup() as group:
        group.create_task(cancel_when_all_three_run())
        running = group.create_task(
            Eval(
                lambda: Agent(ScriptedModel(turn)),
                cases,
                [Includes()],
                concurrency=3,
                store=bus,
                eval_id="ev1",
                cancel=token,
            ).run()
        )
    report = running.result()

    assert sorted(entered) == ["q0", "q1", "q2"]  # no fourth case started
    assert [(r.case.id, r.status) for r in report.results] == [
        ("c0", "cancelled"),
        ("c1", "cancelled"),
        ("c2", "cancelled"),
    ]
    assert all(r.outcome.stop_cause is StopCause.CANCELLED for r in report.results)
    assert report.not_started == 3 and report.cancelled


async def test_a_rescore_given_the_dataset_scores_with_its_typed_cases(bus: Bus) -> None:
    class Total(BaseModel):
        total: float

    cases = [Case("c1", "q", expected=Total(total=1.5))]
    await Eval(
        lambda: Agent(ScriptedModel("1.5")), cases, [Includes()], store=bus, eval_id="ev1"
    ).run()

    class TypedExpected:
        name = "typed"

        async def score(self, outcome: CaseOutcome) -> Score:
            expected = outcome.case.expected
            return Score.of(isinstance(expected, Total) and str(expected.total) == outcome.text)

    stored_only = await rescore(bus, "ev1", [TypedExpected()])
    assert not stored_only.results[0].scores["typed"].passed  # read back: a dict
    with_dataset = await rescore(bus, "ev1", [TypedExpected()], cases=cases)
    assert with_dataset.results[0].scores["typed"].passed


@pytest.mark.parametrize(
    ("changed", "field"),
    [
        (Case("c1", "q1 again", expected="q1"), "input"),
        (Case("c1", "q1", expected="answer q1"), "expected"),
        (Case("c1", "q1", expected="q1", metadata={"level": 2}), "metadata"),
    ],
)
async def test_a_case_changed_since_its_runs_were_scored_is_run_again(
    bus: Bus, changed: Case, field: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A resumed eval skipped a case's scored runs even when the case had changed since:
    its report showed answers to another question, or scores against another answer."""
    cases = [Case("c1", "q1", expected="q1"), Case("c2", "q2", expected="q2")]
    await Eval(Counting().agent, cases, [Includes()], epochs=2, store=bus, eval_id="ev1").run()

    again = Counting()
    with caplog.at_level("INFO", logger="tiller.evals"):
        report = await Eval(
            again.agent, [changed, cases[1]], [Includes()], epochs=2, store=bus, eval_id="ev1"
        ).run()

    assert again.calls == Counter({changed.prompt(): 2})  # both epochs of c1; c2 skipped
    assert [r.attempt for r in report.for_case("c1")] == [1, 1]
    assert [r.attempt for r in report.for_case("c2")] == [0, 0]
    stored = await EvalResultStore(bus).get("ev1", "c1", 1)
    assert stored is not None and stored.case.case() == changed
    assert f"case c1 changed ({field})" in caplog.text


async def test_a_case_whose_tags_alone_changed_is_not_run_again(bus: Bus) -> None:
    await Eval(Counting().agent, [Case("c1", "q1")], [Includes()], store=bus, eval_id="ev1").run()
    again = Counting()
    tagged = Case("c1", "q1", tags=("smoke",))
    report = await Eval(again.agent, [tagged], [Includes()], store=bus, eval_id="ev1").run()
    assert not again.calls and report.results[0].case.tags == ("smoke",)


async def test_a_resumed_eval_with_other_scorers_is_refused_saying_what_to_do(bus: Bus) -> None:
    """Resumed with a scorer added, an eval skipped every stored run, which had no score
    from it: the report mixed runs scored by two sets of scorers. It is refused before it
    runs anything; a rescore adds the scorer to the stored runs, and then it resumes."""
    cases = [Case("c1", "q1", expected="q1")]
    await Eval(Counting().agent, cases, [Includes()], store=bus, eval_id="ev1").run()

    again = Counting()
    with pytest.raises(UsageError) as refused:
        await Eval(again.agent, cases, [Includes(), Recording()], store=bus, eval_id="ev1").run()
    message = str(refused.value)
    assert "eval 'ev1' was scored with the scorers ['includes']" in message
    assert "have no score from ['recording']" in message
    assert "rescore(bus, 'ev1', [...])" in message and "new eval_id" in message
    with pytest.raises(UsageError, match=r"keep the scores of \['includes'\]"):
        await Eval(again.agent, cases, [Recording()], store=bus, eval_id="ev1").run()
    assert not again.calls
    described = await EvalResultStore(bus).get_eval("ev1")
    assert described is not None and described.scorers == ("includes",)

    await rescore(bus, "ev1", [Recording()])
    report = await Eval(
        again.agent, cases, [Includes(), Recording()], store=bus, eval_id="ev1"
    ).run()
    assert not again.calls  # nothing to run: every stored run has both scores
    assert set(report.results[0].scores) == {"includes", "recording"}
