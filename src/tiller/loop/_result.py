"""`RunResult`: what `agent.run()` returns — the answer and an honest account of the run."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

from .. import _public
from ..conversation import Usage
from ..state import RunState, StopCause
from ._refusals import RefusedCall, refusals_of

__all__ = ["RunResult", "ToolTraceEntry"]


@dataclass(slots=True, frozen=True)
class ToolTraceEntry:
    """One tool call as it happened: refused (and by whom), failed, or run."""

    call_id: str
    name: str
    arguments: str
    step: int
    is_error: bool = False
    refused_by: str | None = None
    unknown: bool = False
    malformed_arguments: bool = False
    staged: bool = False
    #: An earlier attempt of the call was interrupted (its process died before it
    #: completed) and recovery dispatched it again, its tool being idempotent.
    rerun: bool = False

    @property
    def denied(self) -> bool:
        return self.refused_by is not None

    @property
    def turn(self) -> int:
        """Deprecated: `step` (the step number the call was made in)."""
        _renamed("ToolTraceEntry.turn", "ToolTraceEntry.step")
        return self.step


@dataclass(slots=True, frozen=True)
class RunResult:
    """The final text (or validated `output`), usage, cost, why the run stopped, and more.

    `exhausted` is true when a ceiling stopped the run (steps, tokens, cost); `steps` is
    how many steps (model turns) it made;
    `usage_complete` is false when a model call was cut short (its usage is partial).
    `state` is the whole `RunState`, to inspect, store, or continue from.
    `store_failed`: the `ERROR` is the store's (see the field), not the run's end.
    """

    text: str
    stop_cause: StopCause
    usage: Usage
    steps: int
    cost_usd: float
    usage_complete: bool
    state: RunState
    output: Any = None
    exhausted: bool = False
    tool_trace: tuple[ToolTraceEntry, ...] = field(default_factory=tuple)
    error: str | None = None
    handoff: str | None = None
    #: When suspended: the `RunState` to resume from (also in the store, in durable mode).
    checkpoint: RunState | None = None
    pause_reason: str | None = None
    #: The store refused the run (`LeaseLost`: another process took it over;
    #: `RunStillRunning`: another holds its lease) or could not take a durable write
    #: (`StoreUnavailable`): the run did not end, it stopped where its checkpoint is, for
    #: its holder or a recovery. A fleet worker records no result for it.
    store_failed: bool = False

    @property
    def malformed_arguments(self) -> int:
        return sum(1 for entry in self.tool_trace if entry.malformed_arguments)

    @property
    def refusals(self) -> tuple[RefusedCall, ...]:
        """The calls this run refused, in call order: who refused each (law 4) and the
        reason the model read. A run can refuse calls and still end `completed`."""
        return refusals_of(self.tool_trace, self.state)

    @property
    def turns(self) -> int:
        """Deprecated: `steps`."""
        _renamed("RunResult.turns", "RunResult.steps")
        return self.steps

    @property
    def completed(self) -> bool:
        return self.stop_cause is StopCause.COMPLETED


def _renamed(old: str, new: str) -> None:
    warnings.warn(
        f"{old} is now {new}; {old} goes in the next release", DeprecationWarning, stacklevel=3
    )


# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())
