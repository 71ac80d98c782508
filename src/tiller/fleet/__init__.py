"""Fleets: runs queued on the Bus's job queue and run by worker processes, in batches that
share a budget and can be cancelled together (issue 16).

This package sits above `tiller.loop`, beside `tiller.ops`. So far it holds a batch's
shared budget (`BatchBudget`: reserve before a run starts, settle when it ends).
"""

from ._batch_budget import (
    BATCH_BUDGET_BUCKET,
    DEFAULT_CHUNK_RUNS,
    BatchAmounts,
    BatchBudget,
    BatchBudgetFromNewerTiller,
    BatchBudgetStatus,
    BatchLimitsDiffer,
    MalformedBatchBudget,
    UnknownBatch,
    UnknownReservation,
)

__all__ = [
    "BATCH_BUDGET_BUCKET",
    "DEFAULT_CHUNK_RUNS",
    "BatchAmounts",
    "BatchBudget",
    "BatchBudgetFromNewerTiller",
    "BatchBudgetStatus",
    "BatchLimitsDiffer",
    "MalformedBatchBudget",
    "UnknownBatch",
    "UnknownReservation",
]
