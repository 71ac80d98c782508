"""FunctionScorer: a user's function, sync or async, returning a bool, a number or a
Score; anything else is a clear error."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tiller.errors import UsageError
from tiller.evals import Case, CaseOutcome, FunctionScorer, Score
from tiller.state import StopCause


def outcome(text: str) -> CaseOutcome:
    return CaseOutcome(Case("c1", "q"), 0, text, StopCause.COMPLETED)


def short_enough(o: CaseOutcome) -> bool:
    return len(o.text) <= 5


async def test_a_sync_function_returning_a_bool_runs_off_the_event_loop() -> None:
    threads: list[int] = []

    def check(o: CaseOutcome) -> bool:
        threads.append(threading.get_ident())
        return o.text == "ok"

    scorer = FunctionScorer(check)
    assert scorer.name == "check"
    assert (await scorer.score(outcome("ok"))) == Score.of(True)
    assert (await scorer.score(outcome("no"))) == Score.of(False)
    assert threading.get_ident() not in threads


async def test_an_async_function_is_awaited_on_the_loop() -> None:
    loop = asyncio.get_running_loop()

    async def graded(o: CaseOutcome) -> float:
        assert asyncio.get_running_loop() is loop
        await asyncio.sleep(0)
        return 0.5

    score = await FunctionScorer(graded, name="half").score(outcome("x"))
    assert (score.value, score.passed) == (0.5, False)


async def test_a_returned_score_is_kept_as_it_is() -> None:
    mine = Score(0.8, "close enough", passed=True)
    assert await FunctionScorer(lambda o: mine, name="mine").score(outcome("x")) is mine


@pytest.mark.parametrize("bad", ["yes", 1.5, None])
async def test_a_verdict_of_another_kind_raises_saying_what_to_return(bad: object) -> None:
    scorer = FunctionScorer(lambda o: bad, name="bad")
    with pytest.raises(UsageError, match="return a bool, a number in \\[0, 1\\] or a Score"):
        await scorer.score(outcome("x"))


def test_a_lambda_needs_a_name_and_a_non_callable_is_refused() -> None:
    with pytest.raises(UsageError, match="needs name="):
        FunctionScorer(lambda o: True)
    with pytest.raises(UsageError, match="wraps a function"):
        FunctionScorer("not a function")  # type: ignore[arg-type]
    assert FunctionScorer(short_enough).name == "short_enough"
