"""Questions a tool asks the person (`ask_user`), and the broker that routes them.

Where a question goes depends on how the run is served (DESIGN §3): a terminal prompts
inline, a served run raises an interrupt (the server issue), and a run with no one to ask
gets an immediate "no one is available, proceed on your best judgment". A broker is the
one object that knows which; the tool only asks. Cancelling the call dismisses the
question.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ..cancel import CancellationToken

__all__ = [
    "Answer",
    "Answered",
    "Dismissed",
    "Question",
    "QuestionBroker",
    "QuestionOption",
    "QuestionOutcome",
]


@dataclass(frozen=True, slots=True)
class QuestionOption:
    """One choice: a short `label`, what it means, and whether the agent recommends it."""

    label: str
    description: str = ""
    recommended: bool = False


@dataclass(frozen=True, slots=True)
class Question:
    """One question: a short `header` (a few words), the full `question`, its options
    (none means a free-text answer), and whether several may be picked."""

    header: str
    question: str
    options: tuple[QuestionOption, ...] = ()
    multi_select: bool = False


@dataclass(frozen=True, slots=True)
class Answer:
    """The person's answer to one question: the labels picked and/or a free-text note."""

    header: str
    question: str
    selected: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True, slots=True)
class Answered:
    """The person answered: their `answers` to the questions asked."""

    answers: tuple[Answer, ...]


@dataclass(frozen=True, slots=True)
class Dismissed:
    """No answer: the person dismissed the questions, the call was cancelled, or there is
    no one to ask (`reason` says which, for the model)."""

    reason: str = field(default="the person dismissed the question")


QuestionOutcome = Answered | Dismissed


@runtime_checkable
class QuestionBroker(Protocol):
    """Routes a tool's questions to a person and waits for the answer."""

    async def ask(
        self, questions: Sequence[Question], *, call_id: str, token: CancellationToken
    ) -> QuestionOutcome: ...
