"""The seam around each fleet run for what else limits it (`Worker(guard=...)`); a
batch's shared budget and the fleet's limits (`Worker(limits=...)`) are the worker's own.

A guard is entered before the run starts (fresh, recovered or continued) and left after
it ends; what it yields is applied to the run's context (a batch budget in place of the
run's own, say). Raising `Deferred` says "not now": the worker naks the job with that
delay, and another attempt comes later.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from ..errors import TillerError
from ..loop import RunContext
from ._job import RunJob

__all__ = ["Deferred", "RunGuard"]

#: What a guard adds to the run's context.
Configure = Callable[[RunContext], RunContext]


class Deferred(TillerError):
    """The run cannot start now (a fleet limit is reached): try again after `delay`."""

    def __init__(self, reason: str, delay: float) -> None:
        super().__init__(f"{reason}; retrying in {delay:g}s")
        self.reason = reason
        self.delay = delay


class RunGuard(Protocol):
    """Admits one run, for as long as it goes (see the module docstring)."""

    def admit(self, job: RunJob) -> AbstractAsyncContextManager[Configure]: ...
