"""A score: a number with its explanation, and whether it counts as a pass.

Every scorer returns a `Score`; `value` is in [0, 1] (1 is a perfect answer), `passed`
says whether the case passed by this scorer (pass@k counts those), `explanation` says why
in words a person reads in the report. A scorer that raised is not a failure of the case's
agent: it is a `Score` with `error` (the traceback) and no pass, and the eval goes on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import UsageError

__all__ = ["Score"]


@dataclass(frozen=True, slots=True)
class Score:
    """`value` in [0, 1]; `passed` defaults to `value == 1`."""

    value: float
    explanation: str = ""
    passed: bool | None = None  # None: decided from `value` (1.0 passes)
    #: The scorer raised: its traceback. The score then counts as an error, not a pass.
    error: str | None = None

    def __post_init__(self) -> None:
        value = self.value
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise UsageError(f"a score's value must be a number in [0, 1], not {value!r}")
        if not 0.0 <= value <= 1.0:
            raise UsageError(f"a score's value must be in [0, 1], not {value}")
        object.__setattr__(self, "value", float(value))
        if self.passed is None:
            object.__setattr__(self, "passed", self.error is None and value == 1.0)
        elif self.error is not None and self.passed:
            raise UsageError("a score with an error cannot pass")

    @classmethod
    def of(cls, passed: bool, explanation: str = "") -> Score:
        """1.0 and a pass, or 0.0 and a fail."""
        return cls(1.0 if passed else 0.0, explanation, passed=passed)

    @classmethod
    def failed_with(cls, traceback: str) -> Score:
        """The score of a scorer that raised (`traceback` kept for the report)."""
        return cls(0.0, "the scorer raised an error", passed=False, error=traceback)
