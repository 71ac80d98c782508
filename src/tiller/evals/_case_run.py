"""One run of one case in one epoch, from its budget to its stored record.

In order: reserve the run's share of the eval's budget (none left: the run is recorded as
not run); open its private directory (a copy of its fixture); build its agent (a fresh
one per run from a factory or a reference, so runs share no model state) and its
`RunContext`, jailed to that directory with the case's approver and the share as its
budget, under the eval's cancel token; run it with a capture sink writing to the store;
keep what it left in its directory; score it (a scorer that spends, the judge, pays from
the run's share, and what it spent is recorded apart from the agent's spending); settle
its share; write its record.

Failures belong to the case, not the eval: a missing fixture, an agent that cannot be
built or that raises, all end as a scored outcome with an `error` (scorers see it; most
fail it). A scorer that raises scores `Score.failed_with(traceback)`. A run the eval's
token stopped is recorded as `cancelled`, with what it had produced, and not scored; one
the token stopped before it began is not recorded at all (it has not started).
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..cancel import CancellationToken
from ..capture import CAPTURE_BUCKET, BusCaptures
from ..conversation import Usage
from ..errors import Cancelled
from ..fleet import WorkspaceError
from ..loop import Agent, Budget, Pricing, RunContext, RunOptions, RunResult
from ..policy import Approver
from ..state import StopCause
from ..store import Bus
from ._case import Case
from ._case_workspace import CaseWorkspaces, KeptWorkspace
from ._eval_budget import EvalPurse
from ._outcome import CaseOutcome, Scorer
from ._results import (
    CaseResultRecord,
    CaseStatus,
    EvalResultStore,
    StoredCase,
    StoredToolCall,
    as_json_data,
    scores_of,
)
from ._score import Score

__all__ = ["CaseRunner", "score_outcome"]

#: Builds the agent of one run.
AgentSource = Callable[[], Agent]
#: The approver of one case's runs (None: calls that need approval are blocked).
ApproverFor = Callable[[Case], Approver | None]


async def score_outcome(
    scorers: Sequence[Scorer], outcome: CaseOutcome, cancel: CancellationToken
) -> dict[str, Score]:
    """Every scorer's score of `outcome`; one that raises (or returns something other
    than a `Score`) scores `Score.failed_with` its traceback, and the others go on.
    `Cancelled` if the eval's token fires meanwhile."""
    scores: dict[str, Score] = {}
    for scorer in scorers:
        try:
            score = await cancel.race(scorer.score(outcome))
        except Cancelled:
            raise
        except Exception:
            score = Score.failed_with(traceback.format_exc())
        if not isinstance(score, Score):
            score = Score.failed_with(
                f"scorer {scorer.name!r} returned a {type(score).__name__}, not a Score"
            )
        scores[scorer.name] = score
    return scores


@dataclass(frozen=True, slots=True)
class _Scoring:
    """A run's scores, what scoring spent from the run's budget, and whether the eval's
    token stopped it."""

    scores: dict[str, Score]
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    cancelled: bool = False


@dataclass(frozen=True, slots=True)
class _Ran:
    """How the agent's part of a run ended: its result, or the error it raised."""

    result: RunResult | None
    error: str | None
    duration_s: float


class CaseRunner:
    """Runs the cases of one eval (see the module docstring)."""

    def __init__(  # noqa: PLR0913 (what every run of the eval shares, said once)
        self,
        *,
        eval_id: str,
        bus: Bus,
        agent: AgentSource,
        scorers: Sequence[Scorer],
        approver: ApproverFor,
        options: RunOptions,
        cancel: CancellationToken,
        workspaces: CaseWorkspaces,
        purse: EvalPurse | None,
        pricing: dict[str, Pricing],
    ) -> None:
        self.eval_id = eval_id
        self.bus = bus
        self.agent = agent
        self.scorers = tuple(scorers)
        self.approver = approver
        self.captures = BusCaptures(bus, CAPTURE_BUCKET, redact=None)
        self.options = options.with_capture_sink(self.captures)
        self.cancel = cancel
        self.workspaces = workspaces
        self.purse = purse
        self.pricing = pricing
        self.results = EvalResultStore(bus)

    def run_id(self, case: Case, epoch: int) -> str:
        # ':' is in no eval or case id, so no two (eval, case, epoch) share a run id (with
        # '-', eval "a" case "b-e1" and eval "a-b" case "e1" did, and one's capture was
        # removed as the other's).
        return f"{self.eval_id}:{case.id}:e{epoch}"

    async def run(self, case: Case, epoch: int, attempt: int) -> CaseResultRecord | None:
        """The run's record (written to the store), or None when the eval's token fired
        before the run began (nothing recorded: it is still to be run)."""
        run_id = self.run_id(case, epoch)
        budget = self._want(case)
        share = None
        if self.purse is not None:
            share = await self.purse.reserve(run_id, attempt, budget)
            if share.budget is None:
                record = self._not_run(case, epoch, attempt, share.exhausted, share.reason)
                await self.results.put(record)
                return record
            budget = share.budget
        try:
            if self.cancel.is_cancelled:
                return None
            return await self._run_in_workspace(case, epoch, attempt, budget)
        finally:
            if self.purse is not None and share is not None:
                # `budget` is the run's ledger: what it spent (nothing, if it never began).
                await self.purse.settle(share, budget)

    def _want(self, case: Case) -> Budget:
        """The run's own budget: the case's ceilings (if any), priced as the eval is."""
        ceilings = case.budget.budget() if case.budget is not None else Budget()
        ceilings.pricing = self.pricing
        return ceilings

    async def _run_in_workspace(
        self, case: Case, epoch: int, attempt: int, budget: Budget
    ) -> CaseResultRecord | None:
        run_id = self.run_id(case, epoch)
        async with contextlib.AsyncExitStack() as stack:
            started = time.monotonic()
            try:
                workspace = await stack.enter_async_context(self.workspaces.open(case, run_id))
            except (WorkspaceError, OSError) as exc:
                # The fixture is missing or cannot be copied: this case fails, not the eval.
                error = (
                    str(exc)
                    if isinstance(exc, WorkspaceError)
                    else (f"case {case.id!r}: its fixture could not be copied: {exc}")
                )
                return await self._write_failed(
                    case,
                    epoch,
                    attempt,
                    _Ran(None, error, time.monotonic() - started),
                    budget,
                    run_id=run_id,
                )
            if self.cancel.is_cancelled:
                return None
            ran = await self._run_agent(case, run_id, workspace, budget)
            outcome = _outcome(case, epoch, ran, workspace, budget, run_id=run_id)
            # Kept before scoring: a scorer's command may write there (a test run's
            # caches), and a rescore and the diff must see what the agent left.
            kept = await self.workspaces.keep(case, workspace)
            cancelled = outcome.stop_cause is StopCause.CANCELLED
            scoring = _Scoring({})
            if not cancelled:
                scoring = await self._score(outcome)
                cancelled = scoring.cancelled
        status: CaseStatus = "cancelled" if cancelled else "scored"
        # No reference to a capture that was not written (the write failed, and was logged).
        captured = ran.result is not None and run_id not in self.captures.failed
        capture = run_id if captured else None
        return await self._write(
            attempt=attempt,
            status=status,
            outcome=outcome,
            ran=ran,
            scoring=scoring,
            kept=kept,
            capture=capture,
        )

    async def _write_failed(
        self, case: Case, epoch: int, attempt: int, ran: _Ran, budget: Budget, *, run_id: str
    ) -> CaseResultRecord:
        """The record of a run that never ran (its fixture, its job): scored as the error
        `ran` holds, with no workspace and no capture (scorers still see it)."""
        outcome = _outcome(case, epoch, ran, None, budget, run_id=run_id)
        return await self._write(
            attempt=attempt,
            status="scored",
            outcome=outcome,
            ran=ran,
            scoring=await self._score(outcome),
            kept=KeptWorkspace(),
            capture=None,
        )

    async def _write(
        self,
        *,
        attempt: int,
        status: CaseStatus,
        outcome: CaseOutcome,
        ran: _Ran,
        scoring: _Scoring,
        kept: KeptWorkspace,
        capture: str | None,
    ) -> CaseResultRecord:
        record = CaseResultRecord(
            eval_id=self.eval_id,
            case_id=outcome.case.id,
            epoch=outcome.epoch,
            run_id=self.run_id(outcome.case, outcome.epoch),
            attempt=attempt,
            status=status,
            case=StoredCase.of(outcome.case),
            text=outcome.text,
            output=as_json_data(outcome.output),
            stop_cause=outcome.stop_cause.value,
            tool_trace=tuple(StoredToolCall.of(entry) for entry in outcome.tool_trace),
            messages=tuple(outcome.messages),
            usage=outcome.usage,
            cost_usd=outcome.cost_usd,
            scoring_usage=scoring.usage,
            scoring_cost_usd=scoring.cost_usd,
            steps=ran.result.steps if ran.result is not None else 0,
            duration_s=outcome.duration_s,
            error=outcome.error,
            scores=scores_of(scoring.scores),
            capture=capture,
            workspace=kept.manifest,
            diff_ref=kept.diff_ref,
            workspace_note=kept.note,
        )
        await self.results.put(record)
        return record

    async def _score(self, outcome: CaseOutcome) -> _Scoring:
        """Score `outcome`; what scoring spent is what the run's ledger (its budget, which
        a judge pays from) gained meanwhile. Stopped by the eval's token: the scores so
        far are dropped, what was spent is still counted."""
        budget = outcome.budget
        usage, cost = (budget.usage, budget.cost_usd) if budget is not None else (Usage(), 0.0)
        scores: dict[str, Score] = {}
        cancelled = False
        try:
            scores = await score_outcome(self.scorers, outcome, self.cancel)
        except Cancelled:
            cancelled = True
        if budget is None:
            return _Scoring(scores, cancelled=cancelled)
        return _Scoring(scores, budget.usage - usage, budget.cost_usd - cost, cancelled)

    async def _run_agent(self, case: Case, run_id: str, workspace: Path, budget: Budget) -> _Ran:
        started = time.monotonic()
        # A run made again (after a cancel) starts a fresh capture under the same run id.
        await (await self.bus.kv(CAPTURE_BUCKET)).delete(run_id)
        try:
            agent = self.agent()
            context = RunContext.sandboxed(workspace, self.approver(case)).with_budget(budget)
            result = await agent.run(
                case.prompt(),
                context=context,
                options=self.options,
                cancel=self.cancel,
                run_id=run_id,
            )
        except Exception:
            return _Ran(None, traceback.format_exc(), time.monotonic() - started)
        finally:
            await self.captures.wait()
        return _Ran(result, result.error, time.monotonic() - started)

    def _not_run(
        self,
        case: Case,
        epoch: int,
        attempt: int,
        cause: StopCause | None,
        reason: str | None,
    ) -> CaseResultRecord:
        return CaseResultRecord(
            eval_id=self.eval_id,
            case_id=case.id,
            epoch=epoch,
            run_id=self.run_id(case, epoch),
            attempt=attempt,
            status="not_run",
            case=StoredCase.of(case),
            stop_cause=(cause or StopCause.STEP_BUDGET).value,
            error=reason,
        )


def _outcome(
    case: Case, epoch: int, ran: _Ran, workspace: Path | None, budget: Budget, *, run_id: str
) -> CaseOutcome:
    """What the scorers see; `budget` is the run's ledger, which a scorer that spends (the
    judge) pays from before the run's share is settled."""
    result = ran.result
    if result is None:
        return CaseOutcome(
            case=case,
            epoch=epoch,
            text="",
            stop_cause=StopCause.ERROR,
            workspace=workspace,
            duration_s=ran.duration_s,
            error=ran.error,
            budget=budget,
            run_id=run_id,
        )
    return CaseOutcome(
        case=case,
        epoch=epoch,
        text=result.text,
        stop_cause=result.stop_cause,
        output=result.output,
        tool_trace=result.tool_trace,
        messages=tuple(result.state.messages),
        workspace=workspace,
        usage=result.usage,
        cost_usd=result.cost_usd,
        duration_s=ran.duration_s,
        error=result.error,
        budget=budget,
        run_id=run_id,
    )
