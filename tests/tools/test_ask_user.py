"""`ask_user` and the question brokers: no one to ask, a callback, and the terminal."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from rich.console import Console

from tiller import CancellationToken, Cancelled, UsageError
from tiller.cli._run import TerminalQuestions, parse_answer
from tiller.conversation import ToolCall
from tiller.tools import (
    CANCELLED_REASON,
    Answer,
    Answered,
    CallbackQuestions,
    Capability,
    Dismissed,
    ExecContext,
    Execution,
    NoOneToAskQuestions,
    Outcome,
    Question,
    QuestionBroker,
    QuestionOption,
    QuestionOutcome,
    Registry,
)
from tiller.tools._question_brokers import NO_ONE_TO_ASK, AskedQuestions
from tiller.tools.builtin import ask_user

DATABASE = {
    "header": " Database ",
    "question": "Which database should the service use? ",
    "options": [
        {"label": "PostgreSQL", "description": "robust, needs a server", "recommended": True},
        {"label": "SQLite", "description": "a file, no server"},
    ],
}
FEATURES = {
    "header": "Features",
    "question": "Which features go in the first release?",
    "options": [{"label": "Export"}, {"label": "Search"}, {"label": "Sharing"}],
    "multi_select": True,
}
DATABASE_Q = Question(
    header="Database",
    question="Which database should the service use?",
    options=(
        QuestionOption("PostgreSQL", "robust, needs a server", recommended=True),
        QuestionOption("SQLite", "a file, no server"),
    ),
)
FEATURES_Q = Question(
    header="Features",
    question="Which features go in the first release?",
    options=(QuestionOption("Export"), QuestionOption("Search"), QuestionOption("Sharing")),
    multi_select=True,
)


async def ask(ctx: ExecContext, *questions: dict[str, Any]) -> Execution:
    call = ToolCall(
        id="call-7", name="ask_user", arguments=orjson.dumps({"questions": questions}).decode()
    )
    return await Registry([ask_user]).execute(call, ctx)


def test_ask_user_is_read_only_with_no_capabilities() -> None:
    assert ask_user.read_only
    assert ask_user.capabilities == Capability.NONE
    schema = ask_user.input_schema["properties"]["questions"]
    assert (schema["minItems"], schema["maxItems"]) == (1, 4)


def test_the_brokers_are_question_brokers() -> None:
    console = Console(file=io.StringIO())
    for broker in (
        NoOneToAskQuestions(),
        CallbackQuestions(lambda questions: Dismissed()),
        TerminalQuestions(console, ScriptedLines([])),
    ):
        assert isinstance(broker, QuestionBroker)


async def test_without_a_broker_the_model_proceeds_at_once(tmp_path: Path) -> None:
    done = await ask(ExecContext.for_test(tmp_path), DATABASE)
    assert done.outcome is Outcome.OK
    assert done.result.content == (
        "No answer: no one is available to answer; proceed on your best judgment."
    )


async def test_no_one_to_ask_dismisses_at_once(tmp_path: Path) -> None:
    broker = NoOneToAskQuestions()
    done = await ask(ExecContext.for_test(tmp_path, questions=broker), DATABASE)
    assert done.result.content == f"No answer: {NO_ONE_TO_ASK}."
    custom = NoOneToAskQuestions("the operator is away")
    done = await ask(ExecContext.for_test(tmp_path, questions=custom), DATABASE)
    assert done.result.content == "No answer: the operator is away."


async def test_a_callback_answers_and_sees_the_questions(tmp_path: Path) -> None:
    def person(questions: Sequence[Question]) -> QuestionOutcome:
        return Answered(
            (
                Answer(questions[0].header, questions[0].question, ("SQLite",), "keep it small"),
                Answer(questions[1].header, questions[1].question, ("Export", "Search")),
            )
        )

    broker = CallbackQuestions(person)
    ctx = ExecContext.for_test(tmp_path, call_id="call-7", questions=broker)
    done = await ask(ctx, DATABASE, FEATURES)
    assert broker.asked == [AskedQuestions("call-7", (DATABASE_Q, FEATURES_Q))]
    assert broker.last == broker.asked[0]
    assert done.outcome is Outcome.OK
    assert done.result.content == (
        "The person answered:\n"
        "- [Database] Which database should the service use?\n"
        "  selected: SQLite\n"
        "  note: keep it small\n"
        "- [Features] Which features go in the first release?\n"
        "  selected: Export, Search"
    )


async def test_questions_left_unanswered_are_marked_skipped(tmp_path: Path) -> None:
    async def person(questions: Sequence[Question]) -> QuestionOutcome:
        await asyncio.sleep(0)
        return Answered((Answer(questions[1].header, questions[1].question),))

    broker = CallbackQuestions(person)
    done = await ask(ExecContext.for_test(tmp_path, questions=broker), DATABASE, FEATURES)
    assert done.result.content == (
        "The person answered:\n"
        "- [Features] Which features go in the first release?\n"
        "  (skipped)\n"
        "- [Database] Which database should the service use?\n"
        "  (skipped)"
    )


async def test_a_dismissal_says_why(tmp_path: Path) -> None:
    broker = CallbackQuestions(lambda questions: Dismissed())
    done = await ask(ExecContext.for_test(tmp_path, questions=broker), DATABASE)
    assert done.result.content == "No answer: the person dismissed the question."


@pytest.mark.parametrize(
    ("questions", "problem"),
    [
        ([], "questions"),
        ([DATABASE] * 5, "questions"),
        ([{"header": "", "question": "Why?"}], "header"),
        (
            [{"header": "Pick", "question": "Which?", "options": [{"label": "a"}, {"label": "A"}]}],
            "distinct labels",
        ),
        ([{"header": "Pick", "question": "Which?", "options": [{"label": "a", "x": 1}]}], "x"),
    ],
)
async def test_malformed_questions_are_refused(
    tmp_path: Path, questions: list[dict[str, Any]], problem: str
) -> None:
    broker = CallbackQuestions(lambda questions: Dismissed())
    done = await ask(ExecContext.for_test(tmp_path, questions=broker), *questions)
    assert done.outcome is Outcome.INVALID_ARGUMENTS
    assert problem in done.result.content
    assert broker.asked == []


async def test_cancelling_the_call_withdraws_the_question(tmp_path: Path) -> None:
    waiting = asyncio.Event()
    withdrawn = asyncio.Event()

    async def person(questions: Sequence[Question]) -> QuestionOutcome:
        waiting.set()
        try:
            await asyncio.Event().wait()  # a person who never answers
        finally:
            withdrawn.set()
        raise AssertionError("unreachable")

    token = CancellationToken()
    ctx = ExecContext.for_test(tmp_path, token=token, questions=CallbackQuestions(person))
    async with asyncio.timeout(5):  # a hang guard, not a timing assertion
        call = asyncio.ensure_future(ask(ctx, DATABASE))
        await waiting.wait()
        token.cancel("the person pressed Ctrl+C")
        with pytest.raises(Cancelled):
            await call
    assert withdrawn.is_set()


async def test_a_broker_asked_outside_a_call_dismisses_on_cancel() -> None:
    waiting = asyncio.Event()
    called: list[str] = []

    async def person(questions: Sequence[Question]) -> QuestionOutcome:
        called.append(questions[0].header)
        waiting.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    broker = CallbackQuestions(person)
    token = CancellationToken()
    async with asyncio.timeout(5):
        pending = asyncio.ensure_future(broker.ask([DATABASE_Q], call_id="c1", token=token))
        await waiting.wait()
        token.cancel()
        assert await pending == Dismissed(CANCELLED_REASON)
    # The token has fired: the next question is dismissed without calling the callback.
    assert await broker.ask([FEATURES_Q], call_id="c2", token=token) == Dismissed(CANCELLED_REASON)
    assert called == ["Database"]
    assert [asked.call_id for asked in broker.asked] == ["c1", "c2"]


async def test_a_callback_must_return_an_outcome() -> None:
    broker = CallbackQuestions(lambda questions: "PostgreSQL")  # type: ignore[arg-type, return-value]
    with pytest.raises(UsageError, match="must return Answered or Dismissed, not str"):
        await broker.ask([DATABASE_Q], call_id="c1", token=CancellationToken())


# ── the terminal ────────────────────────────────────────────────────────────────────


class ScriptedLines:
    """Typed lines, in order; asking past the end is a test bug."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = list(lines)

    async def ask(self) -> str:
        await asyncio.sleep(0)
        return self.lines.pop(0)


@pytest.mark.parametrize(
    ("question", "line", "selected", "note"),
    [
        (DATABASE_Q, "2", ("SQLite",), ""),
        (DATABASE_Q, "  1: but keep it small ", ("PostgreSQL",), "but keep it small"),
        (DATABASE_Q, "2 no server to run", ("SQLite",), "no server to run"),
        (DATABASE_Q, "sqlite", ("SQLite",), ""),
        (DATABASE_Q, "", ("PostgreSQL",), ""),  # Enter takes the recommended option
        (DATABASE_Q, "whatever is cheapest", (), "whatever is cheapest"),
        (FEATURES_Q, "1,3", ("Export", "Sharing"), ""),
        (FEATURES_Q, "3 1 3, later", ("Sharing", "Export"), "later"),
        (FEATURES_Q, "", (), ""),  # nothing recommended: no answer
        (Question("Name", "What should it be called?"), "Ledger", (), "Ledger"),
    ],
)
def test_parse_answer(question: Question, line: str, selected: tuple[str, ...], note: str) -> None:
    assert parse_answer(question, line) == Answer(
        question.header, question.question, selected, note
    )


@pytest.mark.parametrize(
    ("line", "problem"), [("3", "pick options between 1 and 2"), ("1,2", "pick one option")]
)
def test_parse_answer_refuses_impossible_picks(line: str, problem: str) -> None:
    assert parse_answer(DATABASE_Q, line) == problem


async def test_the_terminal_asks_each_question_and_asks_again_after_a_bad_pick() -> None:
    out = io.StringIO()
    console = Console(file=out, width=120, highlight=False)
    lines = ScriptedLines(["7", "2: no server", "1,2"])
    broker = TerminalQuestions(console, lines)
    outcome = await broker.ask([DATABASE_Q, FEATURES_Q], call_id="c1", token=CancellationToken())
    assert outcome == Answered(
        (
            Answer(DATABASE_Q.header, DATABASE_Q.question, ("SQLite",), "no server"),
            Answer(FEATURES_Q.header, FEATURES_Q.question, ("Export", "Search")),
        )
    )
    assert lines.lines == []
    shown = out.getvalue()
    assert "? [Database] Which database should the service use?" in shown
    assert "1. PostgreSQL — robust, needs a server (recommended)" in shown
    assert "Enter takes the recommended" in shown
    assert "pick options between 1 and 2" in shown
    assert "numbers, e.g. 1,3" in shown


async def test_the_terminal_dismisses_when_everything_is_skipped() -> None:
    console = Console(file=io.StringIO())
    broker = TerminalQuestions(console, ScriptedLines([""]))
    outcome = await broker.ask([FEATURES_Q], call_id="c1", token=CancellationToken())
    assert outcome == Dismissed("the person skipped the questions")


async def test_the_terminal_withdraws_a_question_when_the_call_is_cancelled(
    tmp_path: Path,
) -> None:
    out = io.StringIO()
    asked = asyncio.Event()

    class Silent:
        async def ask(self) -> str:
            asked.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    token = CancellationToken()
    broker = TerminalQuestions(Console(file=out, width=120), Silent())
    ctx = ExecContext.for_test(tmp_path, token=token, questions=broker)
    async with asyncio.timeout(5):
        call = asyncio.ensure_future(ask(ctx, DATABASE))
        await asked.wait()
        token.cancel()
        with pytest.raises(Cancelled):
            await call
    assert "(question withdrawn: the run was cancelled)" in out.getvalue()
