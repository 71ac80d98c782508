"""Two evals side by side, case by case: what `tiller eval compare A B` prints and the
HTML report's comparison view draws.

A case's standing in an eval is its pass rate: the share of its scored runs (one per
epoch) that passed every scorer. Comparing `before` with `after`, a case whose rate fell is
a regression, one whose rate rose an improvement; a case only `after` has is added, one
only `before` has is removed, and a case with no scored run on one side (cancelled, not
run) cannot be judged there: it is `unscored`, never silently `unchanged`. Cases are
matched by id, so the two evals may have different epochs, agents or scorers; per scorer
the mean score on each side shows which scorer moved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ._report import CaseResult, EvalReport

__all__ = ["CaseChange", "CaseComparison", "EvalComparison", "compare_reports"]

#: What happened to one case between two evals.
CaseChange = Literal["regressed", "improved", "unchanged", "added", "removed", "unscored"]


def _pass_rate(results: tuple[CaseResult, ...]) -> float | None:
    scored = [result for result in results if result.status == "scored"]
    if not scored:
        return None
    return sum(result.passed for result in scored) / len(scored)


def _mean_scores(results: tuple[CaseResult, ...]) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for result in results:
        if result.status != "scored":
            continue
        for name, score in result.scores.items():
            values.setdefault(name, []).append(score.value)
    return {name: sum(found) / len(found) for name, found in values.items()}


@dataclass(frozen=True, slots=True)
class CaseComparison:
    """One case in both evals: its runs on each side (empty where the eval has no such
    case), its pass rate on each side (None: no scored run there), what changed, and its
    mean score per scorer on each side (a scorer one side lacks is None there)."""

    case_id: str
    before: tuple[CaseResult, ...]
    after: tuple[CaseResult, ...]
    before_rate: float | None
    after_rate: float | None
    change: CaseChange
    scorers: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)

    @classmethod
    def of(
        cls, case_id: str, before: tuple[CaseResult, ...], after: tuple[CaseResult, ...]
    ) -> CaseComparison:
        before_rate, after_rate = _pass_rate(before), _pass_rate(after)
        change: CaseChange
        if not before:
            change = "added"
        elif not after:
            change = "removed"
        elif before_rate is None or after_rate is None:
            change = "unscored"
        elif after_rate < before_rate:
            change = "regressed"
        elif after_rate > before_rate:
            change = "improved"
        else:
            change = "unchanged"
        before_means, after_means = _mean_scores(before), _mean_scores(after)
        scorers = {
            name: (before_means.get(name), after_means.get(name))
            for name in sorted(before_means.keys() | after_means.keys())
        }
        return cls(case_id, before, after, before_rate, after_rate, change, scorers)


@dataclass(frozen=True, slots=True)
class EvalComparison:
    """`before` and `after`, case by case (`cases`, by case id)."""

    before: EvalReport
    after: EvalReport
    cases: tuple[CaseComparison, ...]

    def having(self, change: CaseChange) -> tuple[CaseComparison, ...]:
        return tuple(case for case in self.cases if case.change == change)

    @property
    def regressions(self) -> tuple[CaseComparison, ...]:
        return self.having("regressed")

    @property
    def improvements(self) -> tuple[CaseComparison, ...]:
        return self.having("improved")

    def counts(self) -> dict[CaseChange, int]:
        """How many cases of each kind of change, every kind present (0 if none)."""
        kinds: tuple[CaseChange, ...] = (
            "regressed",
            "improved",
            "unchanged",
            "added",
            "removed",
            "unscored",
        )
        return {kind: len(self.having(kind)) for kind in kinds}


def compare_reports(before: EvalReport, after: EvalReport) -> EvalComparison:
    """`before` and `after` compared case by case (see the module docstring)."""
    runs_before, runs_after = _by_case(before), _by_case(after)
    cases = tuple(
        CaseComparison.of(case_id, runs_before.get(case_id, ()), runs_after.get(case_id, ()))
        for case_id in sorted(runs_before.keys() | runs_after.keys())
    )
    return EvalComparison(before=before, after=after, cases=cases)


def _by_case(report: EvalReport) -> dict[str, tuple[CaseResult, ...]]:
    grouped: dict[str, list[CaseResult]] = {}
    for result in report.results:  # by case, then epoch: each group stays by epoch
        grouped.setdefault(result.case.id, []).append(result)
    return {case_id: tuple(runs) for case_id, runs in grouped.items()}
