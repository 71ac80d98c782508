"""pass@k (at least one of k passes, unbiased estimator) and pass^k (all k pass), and
grouping one scorer's per-epoch scores by case."""

from __future__ import annotations

from math import comb

import pytest

from tiller.errors import UsageError
from tiller.evals import PassRates, Score, pass_at_k, pass_hat_k, pass_rates


def test_pass_at_k_is_one_minus_the_chance_that_k_drawn_runs_all_fail() -> None:
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - comb(7, 5) / comb(10, 5))
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # only 2 failures: any 3 drawn hold a pass


def test_pass_hat_k_is_the_chance_that_k_drawn_runs_all_pass() -> None:
    assert pass_hat_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_hat_k(10, 3, 2) == pytest.approx(comb(3, 2) / comb(10, 2))
    assert pass_hat_k(4, 4, 4) == 1.0
    assert pass_hat_k(4, 3, 4) == 0.0


@pytest.mark.parametrize(
    ("n", "c", "k"), [(0, 0, 1), (3, 4, 1), (3, 1, 4), (3, 1, 0), (3, True, 1)]
)
def test_impossible_counts_are_refused(n: int, c: int, k: int) -> None:
    with pytest.raises(UsageError, match="pass@k"):
        pass_at_k(n, c, k)


def test_pass_rates_groups_epochs_by_case_and_counts_errors_as_not_passing() -> None:
    good, bad, broken = Score.of(True), Score.of(False), Score.failed_with("Traceback")
    scores = [
        ("a", 0, good),
        ("a", 1, bad),
        ("a", 2, good),
        ("b", 0, bad),
        ("b", 1, broken),
        ("b", 2, bad),
    ]
    rates = pass_rates(scores, k=2)
    assert rates["a"] == PassRates("a", 2, 3, 2, 0, 1.0, pytest.approx(1 / 3))  # type: ignore[arg-type]
    assert rates["b"] == PassRates("b", 2, 3, 0, 1, 0.0, 0.0)


def test_pass_rates_refuses_a_repeated_epoch_and_too_few_epochs() -> None:
    with pytest.raises(UsageError, match="scored twice"):
        pass_rates([("a", 0, Score.of(True)), ("a", 0, Score.of(False))], k=1)
    with pytest.raises(UsageError, match="needs at least 3"):
        pass_rates([("a", 0, Score.of(True))], k=3)
