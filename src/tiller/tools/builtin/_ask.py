"""`ask_user`: the model asks the person one to four multiple-choice questions.

The tool only asks; where the question goes is the run's question broker
(`ctx.questions`, DESIGN §3): an inline prompt on a terminal, an interrupt when served,
and at once "no one is available to answer; proceed on your best judgment" when there is
no one to ask, which is also what a run without a broker gets. It is `read_only`: asking
changes nothing, so it needs no approval and is offered while planning.

If the call is cancelled while the question waits, the broker takes the question back
and the call ends cancelled, like every call (see `tiller.tools._question_brokers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Final

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .._exec import ExecContext
from .._question_brokers import NO_ONE_TO_ASK
from .._questions import Dismissed, Question, QuestionOption, QuestionOutcome
from .._tool import tool

__all__ = ["MAX_OPTIONS", "MAX_QUESTIONS", "AskedOption", "AskedQuestion", "ask_user"]

#: Questions in one `ask_user` call.
MAX_QUESTIONS: Final = 4
#: Options of one question.
MAX_OPTIONS: Final = 6


class AskedOption(BaseModel):
    """One choice, as the model writes it."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    label: Annotated[str, Field(min_length=1, max_length=80)]
    """The choice in a few words, e.g. `PostgreSQL`."""
    description: str = ""
    """What choosing it means, in a sentence."""
    recommended: bool = False
    """Whether you recommend it (mark at most one per question unless multi_select)."""


class AskedQuestion(BaseModel):
    """One question, as the model writes it."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    header: Annotated[str, Field(min_length=1, max_length=40)]
    """A label of a few words, e.g. `Database`."""
    question: Annotated[str, Field(min_length=1, max_length=1000)]
    """The full question, ending with a question mark."""
    options: Annotated[list[AskedOption], Field(max_length=MAX_OPTIONS)] = Field(
        default_factory=list
    )
    """The choices; leave empty for a free-text answer."""
    multi_select: bool = False
    """Whether several options may be picked."""

    @model_validator(mode="after")
    def _distinct_labels(self) -> AskedQuestion:
        labels = [option.label.strip().casefold() for option in self.options]
        if len(set(labels)) != len(labels):
            raise ValueError(f"the options of {self.header!r} need distinct labels")
        return self

    def to_question(self) -> Question:
        return Question(
            header=self.header.strip(),
            question=self.question.strip(),
            options=tuple(
                QuestionOption(o.label.strip(), o.description.strip(), o.recommended)
                for o in self.options
            ),
            multi_select=self.multi_select,
        )


@tool(read_only=True)
async def ask_user(
    questions: Annotated[list[AskedQuestion], Field(min_length=1, max_length=MAX_QUESTIONS)],
    *,
    ctx: ExecContext,
) -> str:
    """Ask the person 1 to 4 questions and wait for the answers. Use it when a choice
    is theirs to make (a product decision, a risky trade-off, an ambiguous request), not
    for what you can find out yourself. Give each question a few options, marking the one
    you recommend; the person may also add a note or answer in their own words. If no one
    is available you are told so at once: then proceed on your best judgment.

    Args:
        questions: The questions, each with a short header, the question, its options
            (label, description, recommended) and whether several may be picked.
    """
    asked = tuple(q.to_question() for q in questions)
    broker = ctx.questions
    if broker is None:
        return describe_outcome(asked, Dismissed(NO_ONE_TO_ASK))
    outcome = await broker.ask(asked, call_id=ctx.call_id, token=ctx.token)
    return describe_outcome(asked, outcome)


def describe_outcome(questions: Sequence[Question], outcome: QuestionOutcome) -> str:
    """The result the model reads: each question with the labels picked and the note,
    or why there is no answer."""
    if isinstance(outcome, Dismissed):
        return f"No answer: {outcome.reason}."
    lines = ["The person answered:"]
    for answer in outcome.answers:
        lines.append(f"- [{answer.header}] {answer.question}")
        if answer.selected:
            lines.append(f"  selected: {', '.join(answer.selected)}")
        if answer.note:
            lines.append(f"  note: {answer.note}")
        if not answer.selected and not answer.note:
            lines.append("  (skipped)")
    answered = {(a.header, a.question) for a in outcome.answers}
    for question in questions:
        if (question.header, question.question) not in answered:
            lines.append(f"- [{question.header}] {question.question}\n  (skipped)")
    return "\n".join(lines)
