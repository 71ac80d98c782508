"""An eval's report read back from the store, the store's list of evals, and two evals
compared case by case."""

from __future__ import annotations

import dataclasses

import pytest

from tiller.errors import UsageError
from tiller.evals import Case, Eval, EvalReport, compare_reports, list_evals, load_report
from tiller.store import Bus

from ._runner_support import Includes, answering

CASES = [
    Case("keeps", "alpha", expected="alpha"),
    Case("breaks", "beta", expected="beta"),
    Case("mends", "gamma", expected="gamma"),
]


async def _run(bus: Bus, eval_id: str, reply: dict[str, str], cases: list[Case]) -> None:
    await Eval(
        answering(lambda prompt: reply.get(prompt, prompt)),
        cases,
        [Includes()],
        epochs=2,
        concurrency=2,
        store=bus,
        eval_id=eval_id,
    ).run()


async def test_a_stored_report_says_what_the_run_said(bus: Bus) -> None:
    ran = await Eval(
        answering(lambda prompt: "wrong" if prompt == "beta" else prompt),
        CASES,
        [Includes()],
        epochs=2,
        store=bus,
        eval_id="first",
    ).run()
    loaded = await load_report(bus, "first")
    assert (loaded.eval_id, loaded.epochs, loaded.total) == ("first", 2, 6)
    assert [(r.case.id, r.epoch, r.passed) for r in loaded.results] == [
        (r.case.id, r.epoch, r.passed) for r in ran.results
    ]
    assert loaded.scorers["includes"] == ran.scorers["includes"]
    assert loaded.pass_rate == pytest.approx(4 / 6)


async def test_an_unknown_eval_says_how_to_find_the_right_id(bus: Bus) -> None:
    with pytest.raises(UsageError, match=r"no eval 'nope'.*tiller eval list"):
        await load_report(bus, "nope")


async def test_the_store_lists_its_evals_newest_first(bus: Bus) -> None:
    assert await list_evals(bus) == []
    await _run(bus, "older", {}, CASES[:1])
    await _run(bus, "newer", {}, CASES)
    listed = await list_evals(bus)
    assert [record.eval_id for record in listed] == ["newer", "older"]
    assert [record.cases for record in listed] == [3, 1]


async def test_compare_names_regressions_improvements_and_the_rest(bus: Bus) -> None:
    # Before: "mends" fails. After: "breaks" fails, "mends" passes, "keeps" is unchanged,
    # "new" is added and "gone" removed.
    gone = Case("gone", "delta", expected="delta")
    new = Case("new", "epsilon", expected="epsilon")
    await _run(bus, "before", {"gamma": "wrong"}, [*CASES, gone])
    await _run(bus, "after", {"beta": "wrong"}, [*CASES, new])
    comparison = compare_reports(await load_report(bus, "before"), await load_report(bus, "after"))

    changes = {case.case_id: case.change for case in comparison.cases}
    assert changes == {
        "breaks": "regressed",
        "gone": "removed",
        "keeps": "unchanged",
        "mends": "improved",
        "new": "added",
    }
    assert [case.case_id for case in comparison.regressions] == ["breaks"]
    assert [case.case_id for case in comparison.improvements] == ["mends"]
    breaks = comparison.regressions[0]
    assert (breaks.before_rate, breaks.after_rate) == (1.0, 0.0)
    assert breaks.scorers == {"includes": (1.0, 0.0)}
    assert comparison.counts() == {
        "regressed": 1,
        "improved": 1,
        "unchanged": 1,
        "added": 1,
        "removed": 1,
        "unscored": 0,
    }


async def test_a_case_with_no_scored_run_on_one_side_is_unscored_not_unchanged(
    bus: Bus,
) -> None:
    await _run(bus, "scored", {}, CASES[:1])
    scored = await load_report(bus, "scored")
    cancelled = EvalReport.build(
        "cancelled",
        2,
        2,
        [dataclasses.replace(result, status="cancelled", scores={}) for result in scored.results],
    )
    (only,) = compare_reports(scored, cancelled).cases
    assert (only.change, only.before_rate, only.after_rate) == ("unscored", 1.0, None)
