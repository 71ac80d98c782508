"""An eval run on a fleet: each case run is a fleet job, scored and recorded here exactly as
a run made in process is.

```python
async with await open_bus("nats://127.0.0.1:4222") as bus:
    report = await Eval(
        "myapp.agents:coder", dataset, [Includes("fixed")],
        budget=Budget(max_steps=5_000), store=bus, eval_id="coder-nightly",
        fleet=Fleet(bus),
    ).run()
# and, on any number of machines: tiller worker --store nats://127.0.0.1:4222
```

`Eval(..., fleet=Fleet(bus))` runs the same spec on the workers of `bus`'s run queue
(`tiller worker`, or `tiller.fleet.Worker`) instead of in this process; the report, the
records (`CaseResultRecord`, in the eval's store), resume and rescore are the same.

- **One batch**: every case run not yet scored is submitted up front (`Fleet.submit`) in
  the batch named by the eval id, its run id the case run's (`{eval_id}:{case_id}:e{epoch}`;
  a run made again after a cancel or a refusal by the budget, attempt `n`, gets `:a{n}`
  after it, since a fleet run id names one run for good). The agent must be a `"module:attr"`
  reference (a worker loads it), or a module-level factory function, which is named by
  its module and name: an `Agent` object, a lambda or a nested function is a
  `UsageError` saying so. An approver or loop options cannot travel to a worker either:
  `approver=` and `options=` are refused.
- **Its workspace**: the case's fixture snapshotted into the fleet's store
  (`SnapshotWorkspace`; a case with no fixture, an empty directory's snapshot), which the
  worker materializes privately. Its result comes back with the diff of what the run
  changed; here the fixture is materialized again, the diff applied (`_diff_apply`), and
  the scorers see that directory, which is kept as an in-process run's is. What a diff
  cannot carry (the content of a binary or very large file) is said in the record's
  `workspace_note`.
- **One budget, never overspent**: the eval's budget is the batch's
  (`Fleet.create_batch`): every worker reserves a run's share before it starts and
  settles it when it ends; a run the spent budget never started is recorded as not run.
  A scorer that calls a model (the judge) pays from its own reservation from the batch.
  A job carries the eval budget's prices (`JobBudget.pricing`): a worker knows none of its
  own, and counts a run's dollars with these.
- **One token stops it** (`cancel`): the batch is cancelled (`Fleet.cancel_batch`): the
  runs not started never start, the running ones stop and are recorded as cancelled with
  what they produced; a run the cancel kept from starting is recorded as cancelled too
  (its run id has its result for good). Resumed, the eval reopens its batch
  (`Fleet.reopen_batch`) and makes its cancelled runs again, each under its next
  attempt's run id.
- **Failures are the case's**: a missing fixture fails that case before anything is
  submitted; a job that fails on its worker (the agent does not load there, the job ran out
  of deliveries because its workers were killed) is recorded as that case's error.

What is rebuilt from the fleet's records (`_fleet_outcome`) is what the in-process runner
records: the same dataset and scorers give the same `CaseResultRecord`s field by field
(tests/evals/test_eval_on_fleet.py), but for

- the timings: `duration_s` is from submission to the result (queueing included), and
  `finished_at`;
- `capture`: None (a worker writes no capture of its run);
- a call that needs approval: in process it is refused (no approver) and the run goes
  on; a fleet run is durable, so it is held for a person, and the eval records the
  case's error (`stop_cause` suspended), leaving the held run to its approvals;
- a budget that runs out: the batch splits it as a fleet does (a run without ceilings
  of its own reserves a tenth of what is left, not what is left over `concurrency`), so
  other runs may be the ones not run, and the not-run reason names the batch;
- a fixture past a snapshot's caps (`FixtureTooLarge`) fails that case on a fleet
  (in process it is copied, with no cap);
- what the scorers are given, not what is recorded: the structured output is its JSON,
  not the output type's value.

`concurrency` is how many results are scored here at once; how many runs run at once is
the workers' concern. An eval on a fleet with no worker waits for one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import tempfile
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path

from ..cancel import CancellationToken
from ..errors import Cancelled, UsageError
from ..fleet import (
    BatchBudget,
    BatchLimitsDiffer,
    Fleet,
    JobBudget,
    RunHandle,
    RunOutcomeRecord,
    SnapshotWorkspace,
    WorkspaceError,
    load_diff,
    materialize,
    reserve_from,
    snapshot_workspace,
)
from ..loop import Agent, Budget, Pricing, RunOptions
from ..state import RunState, StopCause
from ..store import Bus, CheckpointStore, NotFound
from ._case import Case
from ._case_run import CaseRunner, _outcome, _Ran, _Scoring
from ._case_workspace import CaseWorkspaces, _fixture_of
from ._diff_apply import apply_diff
from ._fleet_outcome import result_of_fleet_run
from ._outcome import Scorer, scorer_calls_model
from ._results import CaseResultRecord, CaseStatus

__all__ = ["FleetCaseRunner", "fleet_agent_ref"]

#: How long a run still running when the eval's token fires may take to report that it
#: stopped (its worker applies the batch's cancel at its next check); after that the run
#: is left unrecorded, to be made again.
CANCEL_GRACE_S = 30.0
_NEVER_STARTED_BY_BUDGET = frozenset(
    {StopCause.STEP_BUDGET.value, StopCause.TOKEN_BUDGET.value, StopCause.COST_BUDGET.value}
)


def fleet_agent_ref(agent: object) -> str:
    """The `"module:attr"` reference a worker loads the eval's agent by (see the module
    docstring), or `UsageError` saying what to give instead."""
    if isinstance(agent, str):
        if ":" not in agent:
            raise UsageError(f"an eval's agent reference is 'module:attr', not {agent!r}")
        return agent
    module = getattr(agent, "__module__", None)
    name = getattr(agent, "__qualname__", None)
    if callable(agent) and isinstance(module, str) and isinstance(name, str):
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError:
            found = None
        if found is agent:
            return f"{module}:{name}"
    what = (
        "an Agent object"
        if isinstance(agent, Agent)
        else repr(getattr(agent, "__qualname__", None) or type(agent).__name__)
    )
    raise UsageError(
        f"an eval on a fleet needs its agent as a 'module:attr' reference that every worker "
        f"can import (or a module-level factory function), not {what}: a worker cannot "
        "receive an object from this process"
    )


@dataclasses.dataclass(slots=True)
class _Job:
    """One case run submitted to the fleet (or refused before it could be: `error`)."""

    run_id: str
    attempt: int
    handle: RunHandle | None = None
    spec: SnapshotWorkspace | None = None
    error: str | None = None
    submitted: float = 0.0


class FleetCaseRunner(CaseRunner):
    """Runs an eval's cases as jobs of one fleet batch (see the module docstring): what
    `CaseRunner` does in process, with the run itself made by a worker."""

    def __init__(  # noqa: PLR0913 (what every run of the eval shares, said once)
        self,
        *,
        fleet: Fleet,
        agent_ref: str,
        eval_id: str,
        bus: Bus,
        scorers: Sequence[Scorer],
        cancel: CancellationToken,
        workspaces: CaseWorkspaces,
        budget: Budget | None,
        pricing: dict[str, Pricing],
        workspace_root: Path | None,
    ) -> None:
        super().__init__(
            eval_id=eval_id,
            bus=bus,
            agent=_no_local_agent,
            scorers=scorers,
            approver=lambda case: None,
            options=RunOptions(),
            cancel=cancel,
            workspaces=workspaces,
            purse=None,
            pricing=pricing,
        )
        self.fleet = fleet
        self.agent_ref = agent_ref
        self.limits = budget
        self.workspace_root = workspace_root
        self._jobs: dict[tuple[str, int], _Job] = {}
        self._specs: dict[Path | None, SnapshotWorkspace | str] = {}
        self._batch: BatchBudget | None = None
        self._checkpoints = CheckpointStore(fleet.bus)

    def run_id(self, case: Case, epoch: int) -> str:
        job = self._jobs.get((case.id, epoch))
        return job.run_id if job is not None else super().run_id(case, epoch)

    # ── submission ───────────────────────────────────────────────────────────────

    async def submit(self, work: Iterable[tuple[Case, int]]) -> None:
        """Submit every case run of `work` not yet scored, as one batch."""
        await self._open_batch()
        reopened = False
        for case, epoch in work:
            if self.cancel.is_cancelled:
                return
            stored = await self.results.get(self.eval_id, case.id, epoch)
            if stored is not None and stored.status == "scored":
                continue  # `_Progress` skips it too
            if not reopened:
                await self._reopen_a_cancelled_batch()
                reopened = True
            attempt = 0 if stored is None else stored.attempt + 1
            base = super().run_id(case, epoch)
            while await self._cancelled_for_good(_attempt_id(base, attempt)):
                attempt += 1  # its cancel was never recorded (the eval's process died)
            job = _Job(_attempt_id(base, attempt), attempt)
            self._jobs[(case.id, epoch)] = job
            spec = await self._spec(case)
            if isinstance(spec, str):
                job.error = spec  # this case fails; the others are submitted
                continue
            job.spec = spec
            job.submitted = time.monotonic()
            job.handle = await self.fleet.submit(
                self.agent_ref,
                case.prompt(),
                workspace=spec,
                budget=_job_budget(self._want(case)),
                run_id=job.run_id,
                batch=self.eval_id,
            )

    async def _open_batch(self) -> None:
        limits = self.limits
        if limits is None or (
            limits.max_steps is None
            and limits.max_output_tokens is None
            and limits.max_cost_usd is None
        ):
            return
        try:
            self._batch = await BatchBudget.create(
                self.fleet.bus,
                self.eval_id,
                max_steps=limits.max_steps,
                max_output_tokens=limits.max_output_tokens,
                max_cost_usd=limits.max_cost_usd,
                pricing=self.pricing,
            )
        except BatchLimitsDiffer as exc:
            raise BatchLimitsDiffer(
                f"eval {self.eval_id!r} was started on the fleet with another budget ({exc}); "
                "resume it with the budget it was started with, or give it a new eval id"
            ) from None

    async def _reopen_a_cancelled_batch(self) -> None:
        """A resumed eval goes on with its batch: a cancel of an earlier run of it is
        lifted, so its runs start again (those the cancel reached are made again under
        their next attempt's run id)."""
        if await self.fleet.batches.cancelled(self.eval_id) is not None:
            await self.fleet.reopen_batch(self.eval_id)

    async def _spec(self, case: Case) -> SnapshotWorkspace | str:
        """The case's workspace as a job names it, or why it has none (its error)."""
        key = case.fixture
        if key not in self._specs:
            try:
                if key is None:
                    with tempfile.TemporaryDirectory(prefix="tiller-eval-empty-") as empty:
                        self._specs[key] = await snapshot_workspace(self.fleet.bus, empty)
                else:
                    await asyncio.to_thread(_fixture_of, case)
                    self._specs[key] = await snapshot_workspace(self.fleet.bus, key)
            except WorkspaceError as exc:
                return str(exc)  # not cached: the message names the case
        return self._specs[key]

    # ── one run's result ─────────────────────────────────────────────────────────

    async def run(self, case: Case, epoch: int, attempt: int) -> CaseResultRecord | None:
        """The run's record (written to the store), or None when it was never submitted
        (the token fired first) or its result did not come within `CANCEL_GRACE_S` of
        the token firing (nothing recorded: it is still to be made)."""
        job = self._jobs.get((case.id, epoch))
        if job is None:
            return None
        attempt = job.attempt  # the attempt submitted, past any whose cancel went unrecorded
        if job.handle is None or job.spec is None:
            ran = _Ran(None, job.error, 0.0)
            return await self._write_failed(
                case, epoch, attempt, ran, self._want(case), run_id=job.run_id
            )
        ended = await self._result_of(job.handle)
        if ended is None:
            return None
        duration = time.monotonic() - job.submitted
        state = await self._state_of(job.run_id)
        if state is None:  # the run never started
            if ended.status == "cancelled":
                # Recorded (unlike a run the token stopped in process before it began):
                # its run id has a result for good, so a resume makes it again under
                # the next attempt's.
                record = self._cancelled_before_it_began(case, epoch, attempt, ended)
                await self.results.put(record)
                return record
            if ended.status == "stopped" and ended.stop_cause in _NEVER_STARTED_BY_BUDGET:
                record = self._not_run(
                    case, epoch, attempt, StopCause(ended.stop_cause), ended.error
                )
                await self.results.put(record)
                return record
            error = ended.error or f"the fleet run ended {ended.status} without starting"
            ran = _Ran(None, f"the fleet run failed: {error}", duration)
        else:
            result = result_of_fleet_run(ended, state)
            if ended.held:
                # An eval cannot wait for a person: the run is the case's error.
                held = (
                    f"the run was held on the fleet ({ended.status}) for a person's "
                    f"decision: {ended.error or 'a call needs approval'}"
                )
                result = dataclasses.replace(result, error=held)
            ran = _Ran(result, result.error, duration)
        return await self._score_and_write(
            case=case, epoch=epoch, attempt=attempt, job=job, ended=ended, ran=ran
        )

    async def _score_and_write(
        self,
        *,
        case: Case,
        epoch: int,
        attempt: int,
        job: _Job,
        ended: RunOutcomeRecord,
        ran: _Ran,
    ) -> CaseResultRecord:
        assert job.spec is not None
        async with (
            self._rebuilt(job.run_id, job.spec, ended.diff_ref) as (workspace, notes),
            self._scoring_budget(case, job.run_id) as budget,
        ):
            outcome = _outcome(case, epoch, ran, workspace, budget, run_id=job.run_id)
            kept = await self.workspaces.keep(case, workspace)
            if notes:
                note = "; ".join(n for n in (kept.note, *notes) if n)
                kept = dataclasses.replace(kept, note=note)
            if outcome.stop_cause is StopCause.CANCELLED:
                scoring = _Scoring({}, cancelled=True)
            else:  # as in process: what a judge spends is counted apart (scoring_*)
                scoring = await self._score(outcome)
        status: CaseStatus = "cancelled" if scoring.cancelled else "scored"
        return await self._write(
            attempt=attempt,
            status=status,
            outcome=outcome,
            ran=ran,
            scoring=scoring,
            kept=kept,
            capture=None,
        )

    def _cancelled_before_it_began(
        self, case: Case, epoch: int, attempt: int, ended: RunOutcomeRecord
    ) -> CaseResultRecord:
        return self._not_run(case, epoch, attempt, StopCause.CANCELLED, ended.error).model_copy(
            update={"status": "cancelled"}
        )

    async def _result_of(self, handle: RunHandle) -> RunOutcomeRecord | None:
        """The run's result; once the eval's token fired, what it reports within the
        grace (None after it: the run is not recorded)."""
        try:
            return await self.cancel.race(handle.result())
        except Cancelled:
            pass
        try:
            async with asyncio.timeout(CANCEL_GRACE_S):
                return await handle.result()
        except TimeoutError:
            return None

    async def _cancelled_for_good(self, run_id: str) -> bool:
        """`run_id` has a `cancelled` result of a run that never began (its batch was
        cancelled first): a job under it would only get that result back."""
        ended = await self.fleet.handle(run_id).peek()
        return (
            ended is not None
            and ended.status == "cancelled"
            and await self._state_of(run_id) is None
        )

    async def _state_of(self, run_id: str) -> RunState | None:
        try:
            return (await self._checkpoints.load(run_id)).state
        except NotFound:
            return None

    @contextlib.asynccontextmanager
    async def _rebuilt(
        self, run_id: str, spec: SnapshotWorkspace, diff_ref: str | None
    ) -> AsyncIterator[tuple[Path, list[str]]]:
        """The run's directory as it left it: the fixture with its diff applied, and
        what could not be rebuilt (see `_diff_apply`)."""
        async with materialize(self.fleet.bus, spec, run_id, root=self.workspace_root) as path:
            notes: list[str] = []
            if diff_ref is not None:
                try:
                    diff = await load_diff(self.fleet.bus, diff_ref)
                except WorkspaceError as exc:
                    notes.append(f"the run's diff could not be read ({exc}): the fixture is shown")
                else:
                    notes.extend(await asyncio.to_thread(apply_diff, path, diff))
                    if not diff.complete:
                        notes.append(f"the run's diff is incomplete: {diff.note}")
            yield path, notes

    @contextlib.asynccontextmanager
    async def _scoring_budget(self, case: Case, run_id: str) -> AsyncIterator[Budget]:
        """What a scorer that calls a model pays from: a reservation from the eval's
        batch while it scores (the run's own was settled on its worker), else the case's
        own ceilings."""
        want = self._want(case)
        batch = self._batch
        if batch is None or not any(scorer_calls_model(s) for s in self.scorers):
            yield want
            return
        share = await reserve_from(
            batch, f"{run_id}/scoring", want, owner=f"the eval {self.eval_id!r}"
        )
        if share.budget is None:
            yield Budget(max_steps=0, pricing=self.pricing)  # spent: nothing to judge with
            return
        try:
            yield share.budget
        finally:
            await share.settle(share.budget)

    @contextlib.asynccontextmanager
    async def cancelling_the_batch(self) -> AsyncIterator[None]:
        """While the block runs, the eval's token cancels the batch."""

        async def watch() -> None:
            await self.cancel.cancelled()
            await self.fleet.cancel_batch(
                self.eval_id, self.cancel.reason or "the eval was cancelled"
            )

        watcher = asyncio.get_running_loop().create_task(watch(), name="tiller-eval-cancel")
        try:
            yield
        finally:
            if watcher.done():
                watcher.result()  # a cancel that could not reach the fleet is the eval's error
            else:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher


def _attempt_id(base: str, attempt: int) -> str:
    """The fleet run id of a case run's `attempt` (see the module docstring)."""
    return base if attempt == 0 else f"{base}:a{attempt}"


def _job_budget(want: Budget) -> JobBudget | None:
    """The run's own budget as its job carries it: its case's ceilings and the eval's
    prices (None when it has neither: nothing to carry)."""
    ceilings = (want.max_steps, want.max_output_tokens, want.max_cost_usd)
    if all(ceiling is None for ceiling in ceilings) and not want.pricing:
        return None
    return JobBudget.of(want)


def _no_local_agent() -> Agent:
    raise AssertionError("a fleet eval's agent runs on its workers, never here")
