"""An eval's report: pass rate and mean per scorer, pass@k and pass^k over epochs
(unbiased estimates from each case's n runs), and what a run that kept no files keeps."""

from __future__ import annotations

from collections import Counter

import pytest

from tiller.errors import UsageError
from tiller.evals import Case, Eval, EvalResultStore, pass_at_k, pass_hat_k
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.model.scripted import TurnInfo
from tiller.policy import AllowAll
from tiller.store import Bus

from ._runner_support import Includes, Messages, Recording, writing


def test_pass_at_k_and_pass_hat_k_are_the_unbiased_estimates() -> None:
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 1, 2) == pytest.approx(2 / 3)  # 1 - C(2,2)/C(3,2)
    assert pass_at_k(3, 1, 3) == 1.0
    assert pass_at_k(3, 0, 3) == 0.0
    assert pass_hat_k(3, 2, 2) == pytest.approx(1 / 3)  # C(2,2)/C(3,2)
    assert pass_hat_k(3, 3, 3) == 1.0
    with pytest.raises(UsageError, match="k=3 must be between 1"):
        pass_at_k(2, 1, 3)


async def test_the_report_gives_pass_at_k_and_pass_hat_k_over_epochs(bus: Bus) -> None:
    calls: Counter[str] = Counter()

    def turn(messages: Messages, info: TurnInfo) -> str:
        prompt = messages[0].text
        calls[prompt] += 1
        # "always" passes every epoch; "once" passes only its first run.
        return prompt if prompt == "always" or calls[prompt] == 1 else "wrong"

    cases = [Case("a", "always", expected="always"), Case("b", "once", expected="once")]
    report = await Eval(
        lambda: Agent(ScriptedModel(turn)),
        cases,
        [Includes()],
        epochs=3,
        concurrency=1,
        store=bus,
        eval_id="ev1",
    ).run()

    summary = report.scorers["includes"]
    assert (summary.scored, summary.passed, summary.errors) == (6, 4, 0)
    assert summary.pass_rate == pytest.approx(4 / 6)
    assert summary.mean == pytest.approx(4 / 6)
    assert summary.pass_at_k[1] == pytest.approx((1 + 1 / 3) / 2)
    assert summary.pass_at_k[3] == 1.0
    assert summary.pass_hat_k[3] == pytest.approx(0.5)  # only "always" passes all three
    assert [r.passed for r in report.for_case("b")] == [True, False, False]


async def test_a_run_without_a_fixture_keeps_its_files_only_if_it_wrote_some(bus: Bus) -> None:
    quiet = await Eval(
        lambda: Agent(ScriptedModel("answer")),
        [Case("c1", "q")],
        [Recording()],
        store=bus,
        eval_id="quiet",
    ).run()
    wrote = await Eval(
        writing("notes.txt"),
        [Case("c1", "q")],
        [Recording()],
        store=bus,
        eval_id="wrote",
        approver=AllowAll(),
    ).run()

    assert quiet.results[0].workspace is None
    assert wrote.results[0].workspace is not None
    assert wrote.results[0].diff_ref is None  # no fixture to compare with
    stored = await EvalResultStore(bus).get("wrote", "c1", 0)
    assert stored is not None and stored.workspace == wrote.results[0].workspace
