"""`RunParts`: one run's contexts, as each of its steps receives them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..events import AgUiContext
from ..state import RunState

if TYPE_CHECKING:
    from ._agent import Agent
    from ._context import RunContext
    from ._options import RunOptions

__all__ = ["RunParts"]


@dataclass(frozen=True, slots=True)
class RunParts:
    """What every step of one run is a function of: the agent (model, tools, prompt), the
    run's policy (`run_ctx`), its tunables (`options`), its AG-UI side (`agui`) and its
    `RunState`, the only one of them the steps change."""

    agent: Agent
    run_ctx: RunContext
    options: RunOptions
    agui: AgUiContext[Any]
    state: RunState
