"""`Eval`: an agent run on every case of a dataset, `epochs` times, `concurrency` runs at
once, in process, scored and stored.

```python
report = await Eval(
    "myapp.agents:coder", dataset, [includes("fixed")],
    epochs=3, concurrency=8, budget=Budget(max_cost_usd=5.0, pricing=prices),
    store="evals.db", eval_id="coder-nightly",
).run(on_progress=print)
```

- **Each run in its own world**: a private copy of its case's fixture, its own jail,
  budget (the case's ceilings, within the eval's budget) and approver (by default none:
  calls that need approval are blocked, as `Agent.run` without an approver), its run id
  `{eval_id}:{case_id}:e{epoch}`, and a fresh agent when `agent` is a factory or a
  reference (`"module:attr"`, see `tiller.loop.load_agent`); an `Agent` object is shared
  by every run (give a factory if its model keeps state per run).
- **One budget, never overspent** (`budget`: a `tiller.loop.Budget` whose ceilings are the
  whole eval's and whose pricing prices every run): runs reserve their share before they
  start and settle it when they end (`_eval_budget`); once it is spent no run starts, and
  the ones that could not are recorded as not run (budget), not as failures.
- **One token stops it** (`cancel`): running cases are cancelled (what they produced is
  kept, recorded as cancelled, unscored), no new case starts, and `run` returns the
  report so far.
- **Results are records in the store** (`store`: a `Bus`, a `sqlite:///`/`memory://`/
  `nats://` URL, or a path to a SQLite file; None: an in-memory store that lives as long
  as `run`, so nothing can be resumed or rescored later): see `_results`. A SQLite
  store the eval opens itself commits without syncing each write to disk
  (`open_bus(synced=False)`): a record lost to a power loss only means its case runs
  again on resume (not so when `options` name a checkpoint bucket: durable runs' call
  records are synced).
- **Resumable**: `run` again with the same `eval_id` skips the case runs already scored
  and makes the others (cancelled, not run, or never recorded because the process died).
  A case changed since its runs were scored (input, expected, metadata, fixture path,
  budget; not tags) has them made again; a changed set of scorers is refused with a
  `UsageError` before anything runs (`rescore` adds a scorer to stored runs for nothing;
  otherwise give the changed eval a new id). See `_eval_resume`.

`fleet` (a `tiller.fleet.Fleet`) runs the same spec on a fleet's workers instead of in this
process, with the same records, report, resume and rescore: see `_fleet_runner`.

`options` are the loop's options for every run, except the capture sink: each run's
capture goes to the store (`tiller-captures`, under its run id), for replay. Each run's
directory is made under `workspace_root` (default: the system's temporary directory) and
removed after scoring; `keep_workspaces=False` keeps neither its snapshot nor its diff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..cancel import CancellationToken
from ..errors import UsageError
from ..fleet import Fleet
from ..loop import Agent, Budget, RunOptions, load_agent
from ..policy import Approver
from ..store import Bus, MemoryBus, open_bus
from ._case import Case
from ._case_run import AgentSource, ApproverFor, CaseRunner
from ._case_workspace import CaseWorkspaces
from ._eval_budget import EvalPurse
from ._eval_resume import case_changes, refuse_changed_scorers
from ._fleet_runner import FleetCaseRunner, fleet_agent_ref
from ._outcome import Scorer
from ._report import CaseResult, EvalReport
from ._results import EvalRecord, EvalResultStore

__all__ = ["MAX_EVAL_ID", "Eval", "EvalProgress", "check_eval_id"]

_logger = logging.getLogger(__name__)

#: The longest eval id: it is part of its runs' ids, with the case id.
MAX_EVAL_ID = 64
_EVAL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def check_eval_id(eval_id: object) -> str:
    """`eval_id` if it can name an eval, else `UsageError` saying what an eval id is."""
    if not isinstance(eval_id, str) or not eval_id:
        raise UsageError(f"an eval id must be a non-empty string, not {eval_id!r}")
    if len(eval_id) > MAX_EVAL_ID or _EVAL_ID.fullmatch(eval_id) is None:
        raise UsageError(
            f"eval id {eval_id[:40]!r}: use at most {MAX_EVAL_ID} letters, digits, '_', '.' "
            "and '-', starting with a letter or digit (it is part of its runs' ids)"
        )
    return eval_id


@dataclass(frozen=True, slots=True)
class EvalProgress:
    """Where a running eval is, after each case run ends (`on_progress`). `done` counts
    the runs with a result, `skipped` of them were scored by an earlier run of the eval
    (resumed); `passed` of the scored runs passed every scorer; `cost_usd` is what the
    runs with a result spent, their scoring (an LLM judge) included; `last` is the result
    that just came in."""

    total: int
    done: int
    skipped: int
    passed: int
    failed: int
    not_run: int
    cancelled: int
    cost_usd: float
    elapsed_s: float
    last: CaseResult


class Eval:
    """An eval (see the module docstring). Build it, then `await ev.run()`."""

    def __init__(  # noqa: PLR0913 (the public constructor: each keyword is API)
        self,
        agent: Agent | Callable[[], Agent] | str,
        cases: Iterable[Case],
        scorers: Sequence[Scorer],
        *,
        epochs: int = 1,
        concurrency: int = 4,
        budget: Budget | None = None,
        store: Bus | str | os.PathLike[str] | None = None,
        eval_id: str | None = None,
        approver: Approver | Callable[[Case], Approver | None] | None = None,
        cancel: CancellationToken | None = None,
        options: RunOptions | None = None,
        keep_workspaces: bool = True,
        workspace_root: str | os.PathLike[str] | None = None,
        fleet: Fleet | None = None,
    ) -> None:
        self.agent = agent
        self.cases = _checked_cases(cases)
        self.scorers = _checked_scorers(scorers)
        self.epochs = _positive("epochs", epochs)
        self.concurrency = _positive("concurrency", concurrency)
        if budget is not None and not isinstance(budget, Budget):
            raise UsageError(
                f"an eval's budget is a tiller.loop.Budget (its ceilings are the whole "
                f"eval's), not a {type(budget).__name__}"
            )
        self.budget = budget
        if store is not None and not isinstance(store, Bus | str | os.PathLike):
            raise UsageError(
                "an eval's store is a Bus, a store URL or a path to a SQLite file (None: "
                f"in memory, for this run only), not a {type(store).__name__}"
            )
        if options is not None and not isinstance(options, RunOptions):
            raise UsageError(
                f"an eval's options are a tiller.loop.RunOptions, not a {type(options).__name__}"
            )
        if cancel is not None and not isinstance(cancel, CancellationToken):
            raise UsageError(
                "an eval's cancel is a tiller.cancel.CancellationToken, not a "
                f"{type(cancel).__name__}"
            )
        if isinstance(store, str | os.PathLike) and not isinstance(store, Bus):
            text = os.fspath(store)
            # A path is a SQLite file, fixed now: a later chdir does not move the results.
            store = text if "://" in text else f"sqlite:///{os.path.abspath(text)}"
        self.store: Bus | str | None = store
        self.eval_id = check_eval_id(eval_id) if eval_id is not None else _new_eval_id()
        self.approver = approver
        self._approver_for()  # a bad approver is refused now, before the eval writes anything
        self.cancel = cancel if cancel is not None else CancellationToken()
        self.options = options if options is not None else RunOptions()
        self.keep_workspaces = keep_workspaces
        self.workspace_root = None if workspace_root is None else Path(workspace_root)
        self.fleet = fleet
        if fleet is not None:
            self._check_for_fleet(fleet, approver, options)

    @property
    def total(self) -> int:
        """How many runs the eval has: cases x epochs."""
        return len(self.cases) * self.epochs

    async def run(self, *, on_progress: Callable[[EvalProgress], None] | None = None) -> EvalReport:
        """Run every case run not yet scored; the report of the whole eval (the runs
        scored earlier included). `on_progress` is called after each case run ends (an
        exception it raises is logged; the eval goes on)."""
        if self.fleet is not None:
            return await self._run_on_fleet(self.fleet, on_progress)
        source = self._agent_source()
        async with self._opened_store() as bus:
            await self._describe(bus)
            purse = await self._purse(bus)
            runner = CaseRunner(
                eval_id=self.eval_id,
                bus=bus,
                agent=source,
                scorers=self.scorers,
                approver=self._approver_for(),
                options=self.options,
                cancel=self.cancel,
                workspaces=CaseWorkspaces(bus, root=self.workspace_root, keep=self.keep_workspaces),
                purse=purse,
                pricing=dict(self.budget.pricing) if self.budget is not None else {},
            )
            results = await _Progress(self, runner, on_progress).run()
        return EvalReport.build(
            self.eval_id, self.epochs, self.total, results, cancelled=self.cancel.is_cancelled
        )

    async def _run_on_fleet(
        self, fleet: Fleet, on_progress: Callable[[EvalProgress], None] | None
    ) -> EvalReport:
        async with self._opened_store(fleet.bus) as bus:
            await self._describe(bus)
            runner = FleetCaseRunner(
                fleet=fleet,
                agent_ref=fleet_agent_ref(self.agent),
                eval_id=self.eval_id,
                bus=bus,
                scorers=self.scorers,
                cancel=self.cancel,
                workspaces=CaseWorkspaces(bus, root=self.workspace_root, keep=self.keep_workspaces),
                budget=self.budget,
                pricing=dict(self.budget.pricing) if self.budget is not None else {},
                workspace_root=self.workspace_root,
            )
            progress = _Progress(self, runner, on_progress)
            async with runner.cancelling_the_batch():
                await runner.submit(progress.work())
                results = await progress.run()
        return EvalReport.build(
            self.eval_id, self.epochs, self.total, results, cancelled=self.cancel.is_cancelled
        )

    # ── setup ────────────────────────────────────────────────────────────────────

    def _check_for_fleet(self, fleet: object, approver: object, options: object) -> None:
        """What an eval on a fleet cannot do, refused before it writes anything."""
        if not isinstance(fleet, Fleet):
            raise UsageError(
                f"an eval's fleet is a tiller.fleet.Fleet, not a {type(fleet).__name__}"
            )
        fleet_agent_ref(self.agent)
        if approver is not None or options is not None:
            raise UsageError(
                "an eval on a fleet runs on its workers, which get neither an approver nor "
                "loop options from this process: drop approver= and options= (a worker "
                "holds or refuses calls that need approval)"
            )

    def _agent_source(self) -> AgentSource:
        agent = self.agent
        if isinstance(agent, Agent):
            return lambda: agent
        if isinstance(agent, str):
            load_agent(agent)  # a reference that cannot load is the eval's error, said now
            return lambda: load_agent(agent)
        if callable(agent):
            return agent
        raise UsageError(
            "an eval's agent is an Agent, a function returning one, or a reference "
            f"'module:attr', not a {type(agent).__name__}"
        )

    def _approver_for(self) -> ApproverFor:
        approver = self.approver
        if approver is None:
            return lambda case: None
        if callable(getattr(approver, "approve", None)):
            return lambda case: approver  # type: ignore[return-value]  # an Approver
        if callable(approver):
            return approver
        raise UsageError(
            "an eval's approver is an Approver, a function (case) -> Approver | None, or "
            f"None, not a {type(approver).__name__}"
        )

    @contextlib.asynccontextmanager
    async def _opened_store(self, default: Bus | None = None) -> AsyncIterator[Bus]:
        """The eval's store, for the length of the block; None: `default` (an eval on a
        fleet keeps its results in the fleet's store), else an in-memory one."""
        store = self.store if self.store is not None else default
        if store is None:
            async with MemoryBus() as bus:
                yield bus
            return
        if isinstance(store, str):
            # An eval's results can be made again (a lost record's case runs again on
            # resume), so a SQLite store it opens commits without a sync per write, unless
            # its runs are durable ones (a checkpoint bucket: their call records must be
            # synced, law 5). The caller's own Bus is used as it is.
            synced = self.options.checkpoint_bucket is not None
            async with await open_bus(store, synced=synced) as bus:
                yield bus
            return
        yield store

    async def _describe(self, bus: Bus) -> None:
        results = EvalResultStore(bus)
        now = time.time()
        existing = await results.get_eval(self.eval_id)
        refuse_changed_scorers(existing, self.scorers)  # before anything is written
        budget = self.budget
        await results.put_eval(
            EvalRecord(
                eval_id=self.eval_id,
                agent=_describe_agent(self.agent),
                epochs=self.epochs,
                scorers=tuple(scorer.name for scorer in self.scorers),
                cases=len(self.cases),
                budget=None
                if budget is None
                else {
                    "max_steps": budget.max_steps,
                    "max_output_tokens": budget.max_output_tokens,
                    "max_cost_usd": budget.max_cost_usd,
                },
                started_at=existing.started_at if existing is not None else now,
                last_run_at=now,
            )
        )

    async def _purse(self, bus: Bus) -> EvalPurse | None:
        budget = self.budget
        if budget is None or (
            budget.max_steps is None
            and budget.max_output_tokens is None
            and budget.max_cost_usd is None
        ):
            return None  # nothing to share: each run has only its case's own ceilings
        return await EvalPurse.open(
            bus,
            self.eval_id,
            budget,
            concurrency=self.concurrency,
            pricing=budget.pricing,
        )


class _Progress:
    """The eval's runs, `concurrency` at a time, and what `on_progress` is told."""

    def __init__(
        self,
        ev: Eval,
        runner: CaseRunner,
        on_progress: Callable[[EvalProgress], None] | None,
    ) -> None:
        self.ev = ev
        self.runner = runner
        self.on_progress = on_progress
        self.store = runner.results
        self.results: list[CaseResult] = []
        self.skipped = 0
        self.started = time.monotonic()
        self._warned_opaque = False

    async def run(self) -> list[CaseResult]:
        work = self.work()
        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(min(self.ev.concurrency, max(self.ev.total, 1))):
                    group.create_task(self._worker(work))
        except BaseExceptionGroup as group_error:
            _reraise_single(group_error)
        return self.results

    def work(self) -> Iterator[tuple[Case, int]]:
        # Epoch by epoch: every case's first run comes in before any case's second.
        for epoch in range(self.ev.epochs):
            for case in self.ev.cases:
                yield case, epoch

    async def _worker(self, work: Iterator[tuple[Case, int]]) -> None:
        cancel = self.ev.cancel
        for case, epoch in work:  # one shared iterator: each item goes to one worker
            if cancel.is_cancelled:
                return
            stored = await self.store.get(self.ev.eval_id, case.id, epoch)
            if stored is not None and stored.status == "scored":
                changed = case_changes(stored.case, case, on_opaque=self._warn_opaque)
                if not changed:
                    self.skipped += 1
                    self._add(CaseResult.of(stored, case))
                    continue
                _logger.info(
                    "eval %s: case %s changed (%s) since its run e%d was scored: run again",
                    self.ev.eval_id,
                    case.id,
                    ", ".join(changed),
                    epoch,
                )
            attempt = 0 if stored is None else stored.attempt + 1
            record = await self.runner.run(case, epoch, attempt)
            if record is not None:
                self._add(CaseResult.of(record, case))

    def _warn_opaque(self) -> None:
        """Once per eval: a case value kept only as its `repr` was taken as unchanged."""
        if self._warned_opaque:
            return
        self._warned_opaque = True
        _logger.warning(
            "eval %s: a case holds a value JSON cannot carry, stored only as its repr; it "
            "cannot be compared, so it is taken as unchanged on resume (give cases JSON "
            "values, or a new eval id when such a value changes)",
            self.ev.eval_id,
        )

    def _add(self, result: CaseResult) -> None:
        self.results.append(result)
        if self.on_progress is None:
            return
        results = self.results
        progress = EvalProgress(
            total=self.ev.total,
            done=len(results),
            skipped=self.skipped,
            passed=sum(1 for r in results if r.passed),
            failed=sum(1 for r in results if r.status == "scored" and not r.passed),
            not_run=sum(1 for r in results if r.status == "not_run"),
            cancelled=sum(1 for r in results if r.status == "cancelled"),
            cost_usd=sum(r.cost_usd for r in results),
            elapsed_s=time.monotonic() - self.started,
            last=result,
        )
        try:
            self.on_progress(progress)
        except Exception:
            _logger.exception("eval %s: on_progress raised; the eval goes on", self.ev.eval_id)


def _reraise_single(group_error: BaseExceptionGroup[BaseException]) -> None:
    """A worker's one error as itself, not wrapped in a group (the group if several)."""
    errors = group_error.exceptions
    if len(errors) == 1 and not isinstance(errors[0], BaseExceptionGroup):
        raise errors[0] from None
    raise group_error


def _checked_cases(cases: Iterable[Case]) -> tuple[Case, ...]:
    if isinstance(cases, str | bytes):
        raise UsageError("an eval's cases are an iterable of tiller.evals.Case, not a string")
    checked: list[Case] = []
    seen: set[str] = set()
    for index, case in enumerate(cases):
        if not isinstance(case, Case):
            raise UsageError(f"case {index} is a {type(case).__name__}, not a tiller.evals.Case")
        if case.id in seen:
            raise UsageError(
                f"two cases have the id {case.id!r}: a case id keys its results, give each "
                "case its own"
            )
        seen.add(case.id)
        checked.append(case)
    return tuple(checked)


def _checked_scorers(scorers: Sequence[Scorer]) -> tuple[Scorer, ...]:
    checked = tuple(scorers)
    names: set[str] = set()
    for scorer in checked:
        if not isinstance(scorer, Scorer):
            raise UsageError(
                f"{scorer!r} is not a scorer: a scorer has a `name` and an async "
                "`score(outcome)` returning a Score"
            )
        if scorer.name in names:
            raise UsageError(
                f"two scorers are named {scorer.name!r}: a name keys its scores, give "
                "each scorer its own"
            )
        names.add(scorer.name)
    return checked


def _positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"an eval's {name} must be a positive int, not {value!r}")
    return value


def _new_eval_id() -> str:
    return f"eval-{uuid.uuid4().hex[:12]}"


def _describe_agent(agent: object) -> str:
    if isinstance(agent, str):
        return agent
    if isinstance(agent, Agent):
        return agent.ref or f"Agent {agent.name!r}"
    module = getattr(agent, "__module__", None)
    name = getattr(agent, "__qualname__", None)
    return f"{module}:{name}" if module and name else repr(agent)
