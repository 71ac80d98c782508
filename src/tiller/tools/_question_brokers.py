"""Question brokers that need no terminal and no server: nobody to ask, and a callback.

- `NoOneToAskQuestions` answers every question at once with `Dismissed("no one is
  available to answer; proceed on your best judgment")`: the headless, `--yes` and
  library rows of DESIGN §3. A model that asks gets on with the work instead of waiting.
- `CallbackQuestions(fn)` hands the questions to a function, sync or async, and returns
  what it returns: how a program answers from its own UI, and how a test scripts a
  person. It records every request in `asked`, like the scripted model does.

The terminal's broker lives with `tiller run` (`tiller.cli`), the server's with the
server. Every broker gets the call's cancellation token. Cancelling the call dismisses
the question: the broker stops waiting and takes the question back from the person. A
broker awaited inside the call's cancel scope (as the registry runs every tool) then
lets the cancellation through, so the call ends cancelled like any other; one awaited
outside a scope (a program calling `ask` itself) returns `Dismissed` instead.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from ..cancel import CancellationToken
from ..errors import UsageError
from ._questions import Answered, Dismissed, Question, QuestionOutcome

__all__ = [
    "CANCELLED_REASON",
    "NO_ONE_TO_ASK",
    "AskedQuestions",
    "CallbackQuestions",
    "NoOneToAskQuestions",
    "QuestionCallback",
]

#: Why a question went unanswered when there is no one to ask (DESIGN §3).
NO_ONE_TO_ASK: Final = "no one is available to answer; proceed on your best judgment"
#: Why a question went unanswered when its call was cancelled while it waited.
CANCELLED_REASON: Final = "the question was withdrawn because the call was cancelled"

#: What `CallbackQuestions` calls: the questions in, the outcome out (or awaitable).
QuestionCallback = Callable[[Sequence[Question]], QuestionOutcome | Awaitable[QuestionOutcome]]


class NoOneToAskQuestions:
    """A broker for runs with no one to ask: every question is dismissed at once with
    `reason` (by default "no one is available to answer; proceed on your best
    judgment"), so the model proceeds on its own judgment."""

    __slots__ = ("reason",)

    def __init__(self, reason: str = NO_ONE_TO_ASK) -> None:
        self.reason = reason

    async def ask(
        self, questions: Sequence[Question], *, call_id: str, token: CancellationToken
    ) -> QuestionOutcome:
        return Dismissed(self.reason)

    def __repr__(self) -> str:
        return f"NoOneToAskQuestions({self.reason!r})"


@dataclass(frozen=True, slots=True)
class AskedQuestions:
    """One request a `CallbackQuestions` received: which call asked, and what."""

    call_id: str
    questions: tuple[Question, ...]


class CallbackQuestions:
    """A broker that answers through `fn(questions)`, which returns `Answered` or
    `Dismissed`, or an awaitable of one.

    A sync `fn` runs on the event loop, so it must answer at once (a test's script); to
    wait for a person, pass an async one. If the call's token has fired, or fires while
    an async `fn` waits, the question is dismissed (see the module docstring). Each
    request is appended to `asked`.
    """

    __slots__ = ("_fn", "asked")

    def __init__(self, fn: QuestionCallback) -> None:
        self._fn = fn
        self.asked: list[AskedQuestions] = []

    async def ask(
        self, questions: Sequence[Question], *, call_id: str, token: CancellationToken
    ) -> QuestionOutcome:
        self.asked.append(AskedQuestions(call_id, tuple(questions)))
        if token.is_cancelled:
            return Dismissed(CANCELLED_REASON)
        outcome = await token.until_cancelled(self._answer(tuple(questions)))
        if outcome is None:
            return Dismissed(CANCELLED_REASON)
        return outcome

    async def _answer(self, questions: tuple[Question, ...]) -> QuestionOutcome:
        outcome = self._fn(questions)
        if inspect.isawaitable(outcome):
            outcome = await outcome
        if not isinstance(outcome, Answered | Dismissed):
            raise UsageError(
                f"a question callback must return Answered or Dismissed, not "
                f"{type(outcome).__name__}"
            )
        return outcome

    @property
    def last(self) -> AskedQuestions | None:
        """The latest request, if any."""
        return self.asked[-1] if self.asked else None

    def __repr__(self) -> str:
        return f"<CallbackQuestions {len(self.asked)} asked>"
