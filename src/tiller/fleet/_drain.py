"""Stopping a run at its next step boundary, for a worker that drains.

A drained run must be left where another worker can continue it without doubt: its
checkpoint `running` at a step boundary, its lease released, and no tool call cut off in
the middle (a call started and never completed is *uncertain* after the fact, and blocks
for a person, law 5). So the run is not cancelled at once: `StepBoundary` watches the
run's events (a synchronous listener, like the event log's writer) and fires the run's
cancel token when the run is between steps — at once if no step is open, else as its
`STEP_FINISHED` goes out, which is just before the loop checkpoints the step and checks
the token. A cancel at that point stops the run before its next model call; the loop then
releases the run's lease and leaves the checkpoint `running` (as a served run that its
server's shutdown stopped, serve/_runner.py).

A continued run (recovered, or resumed after a person's decisions) first runs the calls
of the step it stopped in, outside any AG-UI step: `resuming=True` treats that batch as
an open step, ended by the run's first `STEP_STARTED` (the token then fires at once if a
drain waits: the model call it cuts off costs tokens, never a side effect).
"""

from __future__ import annotations

from collections.abc import Callable

from ..cancel import CancellationToken
from ..events import Event, StepFinishedEvent, StepStartedEvent

__all__ = ["DRAIN_REASON", "StepBoundary"]

DRAIN_REASON = "the worker is draining; another worker continues the run"


class StepBoundary:
    """Fires `cancel` at the run's next step boundary once `drain()` is called."""

    def __init__(
        self,
        cancel: CancellationToken,
        *,
        resuming: bool = False,
        on_step: Callable[[], None] | None = None,
    ) -> None:
        self.cancel = cancel
        #: Told each time one of the run's own steps finishes (the worker's `ClaimRamp`).
        self._on_step = on_step
        self._open = 0
        self._resuming = resuming
        self._draining = False
        #: The drain (not someone's cancel) stopped the run.
        self.drained = False

    def __call__(self, event: Event) -> None:
        # A subagent's steps happen inside one of its parent's: only the run's own count.
        if isinstance(event, StepStartedEvent) and event.subagent_run_id is None:
            self._open += 1
            if self._resuming:  # the resumed batch is done: this is a step boundary
                self._resuming = False
                if self._draining:
                    self._fire()
        elif isinstance(event, StepFinishedEvent) and event.subagent_run_id is None:
            self._open = max(0, self._open - 1)
            if self._on_step is not None:
                self._on_step()
            if self._draining and self._open == 0:
                self._fire()

    def drain(self) -> None:
        self._draining = True
        if self._open == 0 and not self._resuming:
            self._fire()

    def _fire(self) -> None:
        if not self.cancel.is_cancelled:
            self.drained = True
            self.cancel.cancel(DRAIN_REASON)
