"""An eval's report read back from the store: what `tiller eval show`, `compare` and the
HTML report start from, with no dataset, agent or scorer at hand.

`load_report(bus, eval_id)` builds the same `EvalReport` that `Eval.run` returned, from the
same records (`CaseResultRecord`), so a report read a week later says what the run said.
`list_evals(bus)` lists the evals a store holds, newest first.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import UsageError
from ..store import Bus
from ._case import Case
from ._report import CaseResult, EvalReport
from ._results import EvalRecord, EvalResultStore

__all__ = ["described_eval", "list_evals", "load_report"]


async def described_eval(results: EvalResultStore, eval_id: str) -> EvalRecord:
    """The eval's own record; `UsageError` saying how to find the right id when the store
    has none."""
    described = await results.get_eval(eval_id)
    if described is None:
        raise UsageError(
            f"the store at {results.bus.url} has no eval {eval_id!r}: `tiller eval list "
            "--store ...` lists the evals it holds (or give the store the eval was run with)"
        )
    return described


async def load_report(bus: Bus, eval_id: str, *, cases: Iterable[Case] | None = None) -> EvalReport:
    """Eval `eval_id`'s report, from its stored records. `cases` (the dataset's own) gives
    the case values back their types; without it they are what was stored as JSON."""
    results = EvalResultStore(bus)
    described = await described_eval(results, eval_id)
    given = {case.id: case for case in cases} if cases is not None else {}
    report = [
        CaseResult.of(record, given.get(record.case_id))
        for record in await results.results(eval_id)
    ]
    return EvalReport.build(eval_id, described.epochs, described.cases * described.epochs, report)


async def list_evals(bus: Bus) -> list[EvalRecord]:
    """Every eval the store holds, the most recently run first."""
    records = await EvalResultStore(bus).evals()
    return sorted(records, key=lambda record: record.last_run_at, reverse=True)
