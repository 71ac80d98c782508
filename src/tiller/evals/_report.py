"""What an eval returns: every case run's result, and the numbers people compare.

An `EvalReport` is a value, built from the stored records (`CaseResultRecord`), so a run,
a resumed run and a rescore report the same way. Per scorer (`ScorerSummary`): how many
runs it scored, how many passed, its pass rate and mean score, how often it raised, and
over epochs pass@k (at least one of k runs passes) and pass^k (all k pass), estimated
without bias from the n runs of each case as Chen et al. (2021) do for pass@k:
`1 - C(n-c, k) / C(n, k)`, and `C(c, k) / C(n, k)` for pass^k, averaged over the cases
with at least k scored runs (`_pass_at_k`, the one place both are computed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..conversation import Usage
from ._case import Case
from ._outcome import CaseOutcome
from ._pass_at_k import pass_at_k, pass_hat_k
from ._results import CaseResultRecord, CaseStatus
from ._score import Score

__all__ = ["CaseResult", "EvalReport", "ScorerSummary"]


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One run of one case in one epoch: what it produced (`outcome`), its scores, and
    where its capture, workspace and diff are kept (see `CaseResultRecord`)."""

    case: Case
    epoch: int
    run_id: str
    status: CaseStatus
    outcome: CaseOutcome
    scores: Mapping[str, Score] = field(default_factory=dict)
    attempt: int = 0
    capture: str | None = None
    workspace: str | None = None
    diff_ref: str | None = None
    workspace_note: str | None = None
    steps: int = 0
    #: What scoring spent (an LLM judge's calls); `outcome.usage`/`cost_usd` are the agent's.
    scoring_usage: Usage = field(default_factory=Usage)
    scoring_cost_usd: float = 0.0

    @property
    def cost_usd(self) -> float:
        """Everything the run cost: the agent's calls and its scoring's."""
        return self.outcome.cost_usd + self.scoring_cost_usd

    @property
    def usage(self) -> Usage:
        """Every model call of the run: the agent's (`outcome.usage`) and its scoring's."""
        return self.outcome.usage + self.scoring_usage

    @property
    def passed(self) -> bool:
        """Scored, ended without an error, and every scorer passed it: the one rule every
        report follows (the JSON's `passed`, JUnit, the scorecard, the HTML badges). A
        run that errored (an agent that raised, a missing fixture) is never a pass, even
        when its scorers passed what it left."""
        return (
            self.status == "scored"
            and self.outcome.error is None
            and bool(self.scores)
            and all(score.passed for score in self.scores.values())
        )

    @classmethod
    def of(cls, record: CaseResultRecord, case: Case | None = None) -> CaseResult:
        outcome = record.outcome(case=case)
        return cls(
            case=outcome.case,
            epoch=record.epoch,
            run_id=record.run_id,
            status=record.status,
            outcome=outcome,
            scores=record.score_values(),
            attempt=record.attempt,
            capture=record.capture,
            workspace=record.workspace,
            diff_ref=record.diff_ref,
            workspace_note=record.workspace_note,
            steps=record.steps,
            scoring_usage=record.scoring_usage,
            scoring_cost_usd=record.scoring_cost_usd,
        )


@dataclass(frozen=True, slots=True)
class ScorerSummary:
    """One scorer over the eval. `pass_at_k[k]` and `pass_hat_k[k]` for k = 1..epochs
    (over the cases with at least k scored runs)."""

    name: str
    scored: int
    passed: int
    errors: int
    mean: float
    pass_at_k: Mapping[int, float]
    pass_hat_k: Mapping[int, float]

    @property
    def pass_rate(self) -> float:
        return self.passed / self.scored if self.scored else 0.0


def _summaries(results: Sequence[CaseResult], epochs: int) -> dict[str, ScorerSummary]:
    names = sorted({name for result in results for name in result.scores})
    summaries = {}
    for name in names:
        by_case: dict[str, list[bool]] = {}
        values: list[float] = []
        errors = 0
        for result in results:
            score = result.scores.get(name)
            if result.status != "scored" or score is None:
                continue
            # A run that errored is no pass for any scorer (`CaseResult.passed`'s rule).
            passed = bool(score.passed) and result.outcome.error is None
            by_case.setdefault(result.case.id, []).append(passed)
            values.append(score.value)
            errors += score.error is not None
        at_k: dict[int, float] = {}
        hat_k: dict[int, float] = {}
        for k in range(1, epochs + 1):
            counted = [(len(runs), sum(runs)) for runs in by_case.values() if len(runs) >= k]
            if counted:
                at_k[k] = sum(pass_at_k(n, c, k) for n, c in counted) / len(counted)
                hat_k[k] = sum(pass_hat_k(n, c, k) for n, c in counted) / len(counted)
        summaries[name] = ScorerSummary(
            name=name,
            scored=len(values),
            passed=sum(sum(runs) for runs in by_case.values()),
            errors=errors,
            mean=sum(values) / len(values) if values else 0.0,
            pass_at_k=at_k,
            pass_hat_k=hat_k,
        )
    return summaries


@dataclass(frozen=True, slots=True)
class EvalReport:
    """An eval's results (`results`, by case then epoch) and its summaries.

    `total` is how many runs the eval has (cases x epochs); runs with no result yet (the
    eval was cancelled before they started) are `not_started`. `cancelled`: the eval's
    token fired during this run of it."""

    eval_id: str
    epochs: int
    total: int
    results: tuple[CaseResult, ...]
    cancelled: bool = False
    scorers: Mapping[str, ScorerSummary] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        eval_id: str,
        epochs: int,
        total: int,
        results: Sequence[CaseResult],
        *,
        cancelled: bool = False,
    ) -> EvalReport:
        ordered = tuple(sorted(results, key=lambda r: (r.case.id, r.epoch)))
        return cls(
            eval_id=eval_id,
            epochs=epochs,
            total=total,
            results=ordered,
            cancelled=cancelled,
            scorers=_summaries(ordered, epochs),
        )

    def _count(self, status: CaseStatus) -> int:
        return sum(1 for result in self.results if result.status == status)

    @property
    def scored(self) -> int:
        return self._count("scored")

    @property
    def passed(self) -> int:
        """Runs that passed (`CaseResult.passed`)."""
        return sum(1 for result in self.results if result.passed)

    @property
    def not_run(self) -> int:
        """Runs the eval's budget did not let start."""
        return self._count("not_run")

    @property
    def cancelled_runs(self) -> int:
        return self._count("cancelled")

    @property
    def not_started(self) -> int:
        return self.total - len(self.results)

    @property
    def errors(self) -> int:
        """Scored runs that ended in an error (a missing fixture, an agent that raised)."""
        return sum(1 for r in self.results if r.status == "scored" and r.outcome.error)

    @property
    def pass_rate(self) -> float:
        """Of the scored runs, the share that passed (`CaseResult.passed`)."""
        return self.passed / self.scored if self.scored else 0.0

    @property
    def pass_rate_of_all_runs(self) -> float:
        """Of every run the eval has (`total`: cases x epochs), the share that passed: a
        run that was not scored (not run, cancelled, not started) counts against it. What
        a gate compares (`tiller eval run --fail-under`): an eval whose budget let one
        case of five run did not show that the other four pass."""
        return self.passed / self.total if self.total else 0.0

    @property
    def cost_usd(self) -> float:
        """What the eval's runs cost, their agents' calls and their scoring's (the LLM
        judge's) alike: what the eval's budget was charged."""
        return sum(result.cost_usd for result in self.results)

    @property
    def agent_cost_usd(self) -> float:
        """Of `cost_usd`, what the agents' calls cost (`cost_usd - scoring_cost_usd`)."""
        return sum(result.outcome.cost_usd for result in self.results)

    @property
    def scoring_cost_usd(self) -> float:
        """Of `cost_usd`, what scoring cost (the LLM judge's calls)."""
        return sum(result.scoring_cost_usd for result in self.results)

    @property
    def usage(self) -> Usage:
        """The tokens and requests of every model call the eval made, scoring's included."""
        total = Usage()
        for result in self.results:
            total = total + result.usage
        return total

    @property
    def agent_usage(self) -> Usage:
        """Of `usage`, what the agents used."""
        total = Usage()
        for result in self.results:
            total = total + result.outcome.usage
        return total

    @property
    def scoring_usage(self) -> Usage:
        """Of `usage`, what scoring used."""
        total = Usage()
        for result in self.results:
            total = total + result.scoring_usage
        return total

    def for_case(self, case_id: str) -> tuple[CaseResult, ...]:
        """The results of one case, by epoch."""
        return tuple(result for result in self.results if result.case.id == case_id)
