"""pass@k and pass^k: how often a case passes when it is run k times (its epochs).

With `n` epochs of a case scored and `c` of them passed:

- **pass@k** is the chance that *at least one* of k runs passes. Its unbiased estimate
  from n >= k runs (Chen et al. 2021, "Evaluating Large Language Models Trained on
  Code") is `1 - C(n-c, k) / C(n, k)`: one minus the chance that k runs drawn from the
  n without replacement are all failures. It rises with k: can the agent do it at all?
- **pass^k** ("pass hat k", Yao et al. 2024, tau-bench) is the chance that *all* k runs
  pass, estimated as `C(c, k) / C(n, k)`. It falls with k: does the agent do it every
  time? At k = 1 both are `c / n`.

A score with an error (the scorer could not judge that epoch) is not a pass, so it
counts as a failed epoch here, and `PassRates.errors` says how many there were.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from math import comb

from ..errors import UsageError
from ._score import Score

__all__ = ["PassRates", "pass_at_k", "pass_hat_k", "pass_rates"]


def _check(n: int, c: int, k: int) -> None:
    for label, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"pass@k's {label} must be an int, not {value!r}")
    if n < 1:
        raise UsageError(f"pass@k needs at least one run (n >= 1), not n={n}")
    if not 0 <= c <= n:
        raise UsageError(f"pass@k's passed count c={c} must be between 0 and n={n}")
    if not 1 <= k <= n:
        raise UsageError(f"pass@k's k={k} must be between 1 and the number of runs n={n}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of the chance that at least one of k runs passes, from
    `n` runs of which `c` passed: `1 - C(n-c, k) / C(n, k)`."""
    _check(n, c, k)
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k: the estimate of the chance that all k runs pass, from `n` runs of which
    `c` passed: `C(c, k) / C(n, k)`."""
    _check(n, c, k)
    return comb(c, k) / comb(n, k)


@dataclass(frozen=True, slots=True)
class PassRates:
    """One case's pass@k and pass^k over its `epochs` scored epochs, `passed` of them
    passing and `errors` of them scored with an error (counted as not passing)."""

    case_id: str
    k: int
    epochs: int
    passed: int
    errors: int
    pass_at_k: float
    pass_hat_k: float


def pass_rates(scores: Iterable[tuple[str, int, Score]], k: int) -> dict[str, PassRates]:
    """Per case, its pass@k and pass^k from `(case_id, epoch, score)` triples, the
    scores of one scorer. Every case needs at least `k` epochs; an epoch given twice is
    a `UsageError` (two scorers' scores mixed, or an epoch stored twice)."""
    by_case: dict[str, dict[int, Score]] = {}
    for case_id, epoch, score in scores:
        epochs = by_case.setdefault(case_id, {})
        if epoch in epochs:
            raise UsageError(
                f"case {case_id!r} epoch {epoch} is scored twice: give pass_rates one "
                "scorer's scores"
            )
        epochs[epoch] = score
    rates = {}
    for case_id, epochs in by_case.items():
        n = len(epochs)
        if isinstance(k, int) and not isinstance(k, bool) and n < k:
            raise UsageError(
                f"case {case_id!r} has {n} scored epochs; pass@{k} needs at least {k} "
                "(run the eval with epochs >= k)"
            )
        passed = sum(1 for s in epochs.values() if s.passed)
        errors = sum(1 for s in epochs.values() if s.error is not None)
        rates[case_id] = PassRates(
            case_id=case_id,
            k=k,
            epochs=n,
            passed=passed,
            errors=errors,
            pass_at_k=pass_at_k(n, passed, k),
            pass_hat_k=pass_hat_k(n, passed, k),
        )
    return rates
