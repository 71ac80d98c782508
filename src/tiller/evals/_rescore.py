"""Rescoring: new scorers over an eval's stored outcomes, without running the agent again.

`rescore(bus, eval_id, scorers)` reads every scored record of the eval, rebuilds the
`CaseOutcome` its scorers saw (the stored case, or the dataset's own given as `cases`,
with its typed values), materializes the workspace the run left when one was kept (for
scorers that look at files; removed afterwards), scores it, and writes the scores back:
a scorer's new score replaces the one of the same name, the others stay. No model is
called: a scorer that declares it calls one (`calls_model`, the LLM judge) is refused
with a `UsageError` before anything is read. Cancelled and not-run records have no
outcome to score and are left as they are. A rescore that finished adds its scorers to
the eval's description, so the eval resumed with them is not refused as changed (its
unscored runs are then scored by all of them).

What was stored as JSON reads back as JSON: a structured output is its JSON object, and so
are a stored case's typed input and expected value unless `cases` gives the typed ones.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path

from ..cancel import CancellationToken
from ..errors import Cancelled, UsageError
from ..fleet import SnapshotWorkspace, WorkspaceError, materialize
from ..store import Bus
from ._case import Case
from ._case_run import score_outcome
from ._eval import _checked_scorers
from ._outcome import Scorer, scorer_calls_model
from ._report import CaseResult, EvalReport
from ._results import CaseResultRecord, EvalResultStore, scores_of
from ._stored_report import described_eval

__all__ = ["rescore"]


async def rescore(
    bus: Bus,
    eval_id: str,
    scorers: Sequence[Scorer],
    *,
    cases: Iterable[Case] | None = None,
    workspace_root: Path | None = None,
    cancel: CancellationToken | None = None,
) -> EvalReport:
    """Score eval `eval_id`'s stored outcomes with `scorers` (see the module docstring);
    the eval's report with the new scores. `UsageError` if the store has no such eval."""
    checked = _checked_scorers(scorers)
    if not checked:
        raise UsageError("rescore needs at least one scorer")
    calling = [scorer.name for scorer in checked if scorer_calls_model(scorer)]
    if calling:
        raise UsageError(
            f"a rescore calls no model, and the scorers {calling!r} do: rescore with the "
            "others, and judge in an eval run (its judge calls are paid from its budget)"
        )
    results = EvalResultStore(bus)
    described = await described_eval(results, eval_id)
    given = {case.id: case for case in cases} if cases is not None else {}
    token = cancel if cancel is not None else CancellationToken()
    report: list[CaseResult] = []
    for record in await results.results(eval_id):
        case = given.get(record.case_id)
        if record.status == "scored" and not token.is_cancelled:
            try:
                record = await _rescored(
                    bus,
                    record=record,
                    scorers=checked,
                    case=case,
                    workspace_root=workspace_root,
                    cancel=token,
                )
            except Cancelled:
                pass  # this record keeps its scores; the rest are not rescored either
            else:
                await results.put(record)
        report.append(CaseResult.of(record, case))
    if not token.is_cancelled:
        # Every scored record now has these scores too: an eval resumed with them is the
        # eval these records were scored by (`_eval_resume`).
        added = tuple(s.name for s in checked if s.name not in described.scorers)
        await results.put_eval(described.model_copy(update={"scorers": described.scorers + added}))
    total = described.cases * described.epochs
    return EvalReport.build(eval_id, described.epochs, total, report, cancelled=token.is_cancelled)


async def _rescored(
    bus: Bus,
    *,
    record: CaseResultRecord,
    scorers: Sequence[Scorer],
    case: Case | None,
    workspace_root: Path | None,
    cancel: CancellationToken,
) -> CaseResultRecord:
    async with _kept_workspace(bus, record, workspace_root) as (workspace, note):
        outcome = record.outcome(case=case, workspace=workspace)
        scores = await score_outcome(scorers, outcome, cancel)
    update: dict[str, object] = {"scores": {**record.scores, **scores_of(scores)}}
    if note is not None:
        update["workspace_note"] = note
    return record.model_copy(update=update)


@contextlib.asynccontextmanager
async def _kept_workspace(
    bus: Bus, record: CaseResultRecord, root: Path | None
) -> AsyncIterator[tuple[Path | None, str | None]]:
    """The run's workspace as it left it, for the length of the block (None if none was
    kept, or it cannot be rebuilt: then why)."""
    if record.workspace is None:
        yield None, None
        return
    spec = SnapshotWorkspace(manifest=record.workspace)
    async with contextlib.AsyncExitStack() as stack:
        try:
            path = await stack.enter_async_context(
                materialize(bus, spec, f"{record.run_id}-rescore", root=root)
            )
        except WorkspaceError as exc:
            note = f"the kept workspace could not be rebuilt for rescoring: {exc}"
            yield None, note
            return
        yield path, None
