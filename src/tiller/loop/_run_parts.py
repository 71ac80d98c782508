"""`RunParts`: one run's contexts, as each of its steps receives them."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..events import AgUiContext
from ..state import RunState

if TYPE_CHECKING:
    from ..telemetry import RunTrace
    from ._agent import Agent
    from ._context import RunContext
    from ._options import RunOptions

__all__ = ["RunParts", "weakly"]


@dataclass(frozen=True, slots=True)
class RunParts:
    """What every step of one run is a function of: the agent (model, tools, prompt), the
    run's policy (`run_ctx`), its tunables (`options`), its AG-UI side (`agui`) and its
    `RunState`, the only one of them the steps change; and its telemetry recorder."""

    agent: Agent
    run_ctx: RunContext
    options: RunOptions
    agui: AgUiContext[Any]
    state: RunState
    #: The run's spans and metrics, when its options carry a `Telemetry` (else None, and
    #: every hook is skipped).
    trace: RunTrace | None = None

    @classmethod
    def of(
        cls,
        agent: Agent,
        run_ctx: RunContext,
        options: RunOptions,
        agui: AgUiContext[Any],
        state: RunState,
        *,
        parent: object | None,
    ) -> RunParts:
        """The parts of a run (a subagent's when it has a `parent` loop), with its
        telemetry recorder when its options carry one."""
        from ._telemetry_hooks import run_trace_for

        return cls(
            agent,
            run_ctx,
            options,
            agui,
            state,
            run_trace_for(agent, options, state, parent is not None),
        )


def weakly(method: Callable[..., None]) -> Callable[..., None]:
    """`method` (bound), called through a weak reference: for a callback a run's part
    hands to a part of its own, so the two make no reference cycle. A run's parts then
    go when the run does, by reference counting, not at the next full collection (with
    a thousand runs in flight those collections were a third of the time). Once the
    owner is gone the callback does nothing."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> None:
        bound = ref()
        if bound is not None:
            bound(*args)

    return call
