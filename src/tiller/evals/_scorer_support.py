"""What every built-in scorer shares: its checked name, the answer it compares with (its
own target, else the case's `expected`), the error score it returns when it cannot score,
and short quotes of long text for explanations.

An *error* score (`error` set, never a pass) means the scorer could not judge the case
(the case has no expected answer, the outcome has no workspace, the sandbox is missing):
the report shows it apart from the agent's failures. A wrong answer is a plain fail.
"""

from __future__ import annotations

from typing import Any, Final

from ..errors import UsageError
from ._outcome import CaseOutcome
from ._score import Score

__all__ = ["NO_TARGET", "check_scorer_name", "quote", "scorer_error", "target_of"]

#: A scorer built without its own target compares with the case's `expected`.
NO_TARGET: Final[Any] = None
#: How much of a long text an explanation quotes.
_QUOTE_CHARS: Final = 200


def check_scorer_name(name: object) -> str:
    """`name` if it can key a score in results and reports, else `UsageError`."""
    if not isinstance(name, str) or not name.strip():
        raise UsageError(f"a scorer's name must be a non-empty string, not {name!r}")
    return name


def scorer_error(message: str) -> Score:
    """The score of a scorer that could not judge the case: no value, no pass, and the
    reason both as its explanation and as its error."""
    return Score(0.0, message, passed=False, error=message)


def target_of(outcome: CaseOutcome, target: Any, scorer: str) -> Any | Score:
    """What `scorer` compares with: its own `target`, else the case's `expected`; an
    error score saying so when neither is there."""
    if target is not NO_TARGET:
        return target
    if outcome.case.expected is None:
        return scorer_error(
            f"case {outcome.case.id!r} has no expected answer, which the {scorer!r} scorer "
            "compares with: give the case `expected`, or the scorer its own target"
        )
    return outcome.case.expected


def quote(text: str) -> str:
    """`text` as a Python literal, cut to its first characters when long."""
    if len(text) <= _QUOTE_CHARS:
        return repr(text)
    return f"{text[:_QUOTE_CHARS]!r}... ({len(text)} characters)"
