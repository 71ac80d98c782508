"""`FunctionScorer`: a user's own function as a scorer, sync or async."""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

from ..errors import UsageError
from ._outcome import CaseOutcome
from ._score import Score
from ._scorer_support import check_scorer_name

__all__ = ["FunctionScorer", "ScoreFunction"]

#: What a function scorer wraps: it gets the outcome and returns a verdict (sync) or an
#: awaitable of one (async).
ScoreFunction: TypeAlias = Callable[
    [CaseOutcome], bool | float | Score | Awaitable[bool | float | Score]
]


class FunctionScorer:
    """Scores with `fn(outcome)`, a plain or an `async def` function, which returns:

    - a `bool`: a pass (1.0) or a fail (0.0);
    - a number in [0, 1]: that value, a pass at 1.0;
    - a `Score`, as it is (to explain itself, or pass below 1.0).

    A plain function runs in a worker thread, so one that reads files or runs a process
    does not hold up the other cases; an async one runs on the event loop. Anything else
    returned raises `UsageError`, which scores the case as an error, as any exception
    the function raises does. `name` defaults to the function's name (a lambda needs one).
    """

    __slots__ = ("fn", "name")

    def __init__(self, fn: ScoreFunction, *, name: str | None = None) -> None:
        if not callable(fn):
            raise UsageError(f"FunctionScorer wraps a function of the outcome, not {fn!r}")
        if name is None:
            name = getattr(fn, "__name__", None)
            if not isinstance(name, str) or name == "<lambda>":
                raise UsageError(f"FunctionScorer({fn!r}) needs name=: it has no usable name")
        self.fn = fn
        self.name = check_scorer_name(name)

    async def score(self, outcome: CaseOutcome) -> Score:
        if inspect.iscoroutinefunction(self.fn):
            verdict: Any = await self.fn(outcome)
        else:
            verdict = await asyncio.to_thread(self.fn, outcome)
            if inspect.isawaitable(verdict):  # a callable object with an async __call__
                verdict = await verdict
        return self._as_score(verdict)

    def _as_score(self, verdict: object) -> Score:
        if isinstance(verdict, Score):
            return verdict
        if isinstance(verdict, bool):
            return Score.of(verdict)
        if isinstance(verdict, int | float) and not math.isnan(verdict) and 0 <= verdict <= 1:
            return Score(float(verdict))
        raise UsageError(
            f"the function scorer {self.name!r} returned {verdict!r}: return a bool, a "
            "number in [0, 1] or a Score"
        )
