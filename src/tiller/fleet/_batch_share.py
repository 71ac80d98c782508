"""A run's share of its batch's budget, on the worker that runs it.

A batch made with a budget (`Fleet.create_batch(id, max_steps=, ...)`) has its runs
reserve before they start and settle when they end (`BatchBudget`). The worker:

- before a run of a budgeted batch starts, reserves for it (`want` is the job's own
  budget, if any: the reservation is capped at it). Nothing left: the run never starts,
  its result is `stopped` with the budget stop cause of the dimension that ran out, and
  its job is acked;
- runs it with the reservation as its `Budget` (so its own budget stops it there);
- a run recovered on another worker, or continued after a person decided its held calls,
  reserves again under its run id: the same reservation comes back and nothing more is
  taken, while its checkpoint carries the run's budget (those ceilings, with what it has
  spent so far) into the continued run;
- settles with what the run spent when it ends (not when it suspends: the continuation
  spends from the same reservation); a run that a previous worker finished without
  writing its result is settled from its checkpoint's budget (`settle_from_state`);
- gives back the reservation of a start job's run whose job was dead-lettered (out of
  deliveries: nobody will go on with it), counting what its checkpoint says it spent
  (`reclaim_share`).

A batch with no budget (or a run with no batch) costs one store read per run and changes
nothing.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

from ..errors import UsageError
from ..loop import Budget, run_context_from
from ..state import RunState, StopCause
from ..store import Bus
from ._batch_budget import BatchBudget, UnknownBatch, UnknownReservation
from ._job import RunJob

__all__ = ["BatchShare", "reclaim_share", "reserve_from", "reserve_share", "settle_from_state"]

_CAUSES = (
    ("steps", StopCause.STEP_BUDGET),
    ("output_tokens", StopCause.TOKEN_BUDGET),
    ("cost_usd", StopCause.COST_BUDGET),
)


@dataclass(frozen=True, slots=True)
class BatchShare:
    """What a run of a budgeted batch got: its reservation (`budget`), or, when the batch
    had nothing left for it, why (`exhausted`, `reason`)."""

    batch: BatchBudget
    run_id: str
    budget: Budget | None
    exhausted: StopCause | None = None
    reason: str | None = None

    async def settle(self, spent: Budget) -> None:
        """The run has ended: count what it spent instead of its reservation."""
        if self.budget is not None:
            await self.batch.settle(self.run_id, spent)


async def reserve_share(bus: Bus, run_job: RunJob, want: Budget | None) -> BatchShare | None:
    """The run's share of its batch's budget; None when its batch has no budget."""
    if run_job.batch is None:
        return None
    try:
        return await reserve_from(
            BatchBudget(bus, run_job.batch),
            run_job.run_id,
            want,
            owner=f"its batch {run_job.batch!r}",
        )
    except UnknownBatch:
        return None


async def reserve_from(
    batch: BatchBudget, run_id: str, want: Budget | None, *, owner: str
) -> BatchShare:
    """Run `run_id`'s share of `batch` (`BatchBudget.reserve`), or, when it has nothing
    left for the run, which dimension ran out, in words naming the budget's `owner`
    ("its batch 'b1'", "the eval 'e1'"). `UnknownBatch` if the budget was never made."""
    budget = await batch.reserve(run_id, want)
    if budget is not None:
        return BatchShare(batch, run_id, budget)
    left = (await batch.status()).left
    for name, cause in _CAUSES:
        room = getattr(left, name)
        if room is not None and room <= 0:
            return BatchShare(
                batch,
                run_id,
                None,
                cause,
                f"{owner} has no {name.replace('_', ' ')} left (the budget is spent)",
            )
    return BatchShare(
        batch,
        run_id,
        None,
        StopCause.STEP_BUDGET,
        f"its reservation from {owner} was reclaimed (the run was taken for dead); its "
        "share may be another run's now",
    )


async def settle_from_state(bus: Bus, run_job: RunJob, state: RunState) -> None:
    """Settle a run of a budgeted batch from what its checkpoint says it spent (its
    worker ended it and died before settling). Nothing to settle, or a checkpoint without
    its budget: the reservation stays counted (the batch gives out less, never more)."""
    if run_job.batch is None:
        return
    try:
        await BatchBudget(bus, run_job.batch).settle(run_job.run_id, _spent(state))
    except (UnknownBatch, UnknownReservation, UsageError):
        return


async def reclaim_share(bus: Bus, run_job: RunJob, state: RunState | None) -> None:
    """Give back the reservation of a run that nobody will go on with (its job was
    dead-lettered: out of deliveries), counting what its checkpoint says it spent (no
    checkpoint: nothing). Else it would count for ever, and the batch would start fewer
    runs than its budget allows. (If the run was alive after all, its settle counts what
    it really spent.) Nothing reserved, or a checkpoint without its budget: nothing to do
    (the batch gives out less, never more)."""
    if run_job.batch is None:
        return
    try:
        spent = None if state is None else _spent(state)
        await BatchBudget(bus, run_job.batch).reclaim(run_job.run_id, spent)
    except (UnknownBatch, UnknownReservation, UsageError):
        return


def _spent(state: RunState) -> Budget:
    """The run's budget as its checkpoint recorded it (`UsageError` if it holds none)."""
    # The jail's root is not used: only the budget is read from the rebuilt context.
    return run_context_from(state, store=None, workspace=tempfile.gettempdir()).budget
