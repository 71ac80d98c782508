"""The eval's budget: steps, output tokens and dollars that all its case runs spend
together, never more, and that stops new runs from starting once it is spent.

It is the fleet's batch budget (`tiller.fleet.BatchBudget`), reserve-then-settle, rather
than another: before a run starts it reserves its share (its case's own ceilings, capped
at what is left; a case with no ceiling of its own gets what is left divided by the
eval's concurrency, so every run slot can have a share), the run's `Budget` is exactly
that share (its own budget stops it there, law 7), and when it ends the share is settled
for what it really spent and the rest goes back. The records are in
`tiller-eval-budgets`, keyed by the eval id, so a resumed eval spends from the same purse.

A reservation refused while other runs are in flight is not final: their settles give
back what they did not spend. So a refused run waits for the next settle and asks again;
only when nothing is in flight and still nothing is left is the budget spent for good,
and that run and every later one are recorded as not run (budget), not as failures.

Each attempt of a run reserves under its own name (`<run_id>/a<attempt>/<purse>`): a run
made again after a cancel must not get back the share its cancelled attempt settled. The
name also carries this purse's own random id, new each time an eval run opens it: an
attempt whose process died holding a reservation left no record, so the resumed eval
makes it again under the same attempt number, and must not be handed the dead share as
if it were unspent (the dead process may have spent all of it). That share stays counted
(the eval can only give out less, never more).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping

from ..fleet import BatchBudget, BatchLimitsDiffer, BatchShare, reserve_from
from ..loop import Budget, Pricing
from ..store import Bus

__all__ = ["EvalPurse"]

_BUCKET = "tiller-eval-budgets"


class EvalPurse:
    """One eval's budget in a store (see the module docstring)."""

    def __init__(self, batch: BatchBudget, eval_id: str) -> None:
        self._batch = batch
        self._owner = f"the eval {eval_id!r}"
        #: Tells this opening's reservations from a killed process's (module docstring).
        self._opening = uuid.uuid4().hex[:12]
        self._in_flight = 0
        #: How many settles there have been: a refusal is final only if none came since.
        self._settles = 0
        self._settled = asyncio.Condition()
        self._spent: BatchShare | None = None

    @classmethod
    async def open(
        cls,
        bus: Bus,
        eval_id: str,
        limits: Budget,
        *,
        concurrency: int,
        pricing: Mapping[str, Pricing],
    ) -> EvalPurse:
        """The eval's purse, made with `limits`' ceilings if it is new. A resumed eval
        given other limits raises `BatchLimitsDiffer` saying so."""
        try:
            batch = await BatchBudget.create(
                bus,
                eval_id,
                max_steps=limits.max_steps,
                max_output_tokens=limits.max_output_tokens,
                max_cost_usd=limits.max_cost_usd,
                bucket=_BUCKET,
                chunk_runs=concurrency,
                pricing=pricing,
            )
        except BatchLimitsDiffer as exc:
            raise BatchLimitsDiffer(
                f"eval {eval_id!r} was started with another budget ({exc}); resume it with "
                "the budget it was started with, or give it a new eval id"
            ) from None
        return cls(batch, eval_id)

    async def reserve(self, run_id: str, attempt: int, want: Budget | None) -> BatchShare:
        """The attempt's share, waiting for the runs in flight to settle while there is
        none; a share without a budget once the purse is spent for good."""
        name = f"{run_id}/a{attempt}/{self._opening}"
        while True:
            if self._spent is not None:
                spent = self._spent
                return BatchShare(self._batch, name, None, spent.exhausted, spent.reason)
            settles = self._settles
            share = await reserve_from(self._batch, name, want, owner=self._owner)
            async with self._settled:
                if share.budget is not None:
                    self._in_flight += 1
                    return share
                if self._settles != settles:
                    continue  # something was given back meanwhile: ask again
                if self._in_flight == 0:
                    self._spent = share  # nothing held, nothing left: spent for good
                    continue
                await self._settled.wait()

    async def settle(self, share: BatchShare, spent: Budget) -> None:
        """The run has ended (or never started: `spent` is then an empty `Budget`)."""
        if share.budget is None:
            return
        try:
            await share.settle(spent)
        finally:
            async with self._settled:
                self._in_flight -= 1
                self._settles += 1
                self._settled.notify_all()
