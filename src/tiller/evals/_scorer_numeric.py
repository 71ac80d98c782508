"""`NumericMatch`: the answer's number within a tolerance of the expected one."""

from __future__ import annotations

import math
from typing import Any, Final, Literal

import regex

from ..errors import UsageError
from ._outcome import CaseOutcome
from ._score import Score
from ._scorer_support import NO_TARGET, check_scorer_name, quote, scorer_error, target_of

__all__ = ["NumericMatch"]

#: A number as people write it in text: a sign, thousands separators, a fraction, an
#: exponent (`-1,234.5`, `.5`, `3e-4`). A comma not followed by three digits ends it.
_NUMBER: Final = regex.compile(
    r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])"
)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numbers_in(text: str) -> list[float]:
    found = []
    for match in _NUMBER.finditer(text):
        literal = match.group(0)
        if not any(c.isdigit() for c in literal) or literal[-1] in "eE+-":
            continue
        try:
            found.append(float(literal.replace(",", "")))
        except ValueError:
            continue
    return found


class NumericMatch:
    """Passes when the answer's number is within tolerance of the expected one (the
    case's `expected`, a number or a numeric string, unless `target` is given).

    The answer is `outcome.output` when it is a number; else the number in the final
    text: `pick="last"` (the default: answers tend to end with their result, "... so the
    total is 42.50"), or `"first"`. Thousands separators are read (`1,234.5`).

    The tolerance is `math.isclose`'s: within `abs_tol`, or within `rel_tol` of the
    larger magnitude; both 0 (the default) asks for equality.
    """

    __slots__ = ("abs_tol", "name", "pick", "rel_tol", "target")

    def __init__(
        self,
        target: float | None = NO_TARGET,
        *,
        abs_tol: float = 0.0,
        rel_tol: float = 0.0,
        pick: Literal["last", "first"] = "last",
        name: str = "numeric",
    ) -> None:
        for label, tol in (("abs_tol", abs_tol), ("rel_tol", rel_tol)):
            if not _is_number(tol) or not tol >= 0 or math.isinf(tol):
                raise UsageError(f"NumericMatch({label}=) is a finite number >= 0, not {tol!r}")
        if pick not in ("last", "first"):
            raise UsageError(f"NumericMatch(pick=) is 'last' or 'first', not {pick!r}")
        if target is not NO_TARGET and not _is_number(target):
            raise UsageError(f"NumericMatch's target must be a number, not {target!r}")
        self.target = target
        self.abs_tol = float(abs_tol)
        self.rel_tol = float(rel_tol)
        self.pick = pick
        self.name = check_scorer_name(name)

    async def score(self, outcome: CaseOutcome) -> Score:
        target = target_of(outcome, self.target, self.name)
        if isinstance(target, Score):
            return target
        expected = _expected_number(target)
        if expected is None:
            return scorer_error(
                f"case {outcome.case.id!r}: the {self.name!r} scorer expects a number, and "
                f"the expected value is {target!r}"
            )
        got = self._answer(outcome)
        if got is None:
            return Score.of(False, f"no number in the answer {quote(outcome.text)}")
        close = math.isclose(got, expected, rel_tol=self.rel_tol, abs_tol=self.abs_tol)
        return Score.of(close, f"got {got:g}, expected {expected:g}: {self._verdict(close)}")

    def _answer(self, outcome: CaseOutcome) -> float | None:
        if _is_number(outcome.output):
            return float(outcome.output)
        numbers = _numbers_in(outcome.text)
        if not numbers:
            return None
        return numbers[-1] if self.pick == "last" else numbers[0]

    def _verdict(self, close: bool) -> str:
        parts = []
        if self.abs_tol:
            parts.append(f"±{self.abs_tol:g}")
        if self.rel_tol:
            parts.append(f"{self.rel_tol:.3g} relative")
        if not parts:
            return "equal" if close else "not equal"
        return f"{'within' if close else 'outside'} {' or '.join(parts)}"


def _expected_number(value: Any) -> float | None:
    if _is_number(value):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip().replace(",", ""))
        except ValueError:
            return None
    else:
        return None
    return None if math.isnan(number) else number
