"""What one run of a case produced, as scorers see it.

A `CaseOutcome` is the same whether the run just ended or is read back from its stored
record (`tiller eval rescore` scores stored outcomes and calls no model), so a scorer sees
only data: the final text and structured output, the tool trace, the transcript, why the
run stopped, what it spent, and the case's workspace as the run left it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..conversation import AssistantMessage, Usage, UserMessage
from ..loop import Budget, ToolTraceEntry
from ..state import StopCause
from ._case import Case
from ._score import Score

__all__ = ["CaseOutcome", "Scorer", "scorer_calls_model"]


@dataclass(frozen=True, slots=True)
class CaseOutcome:
    """One run of `case` in `epoch` (0-based). `error` is set when the run could not run
    or ended in error (a missing fixture, an agent that raised): scorers still see it,
    most fail it. `workspace` is the case's private copy after the run (None: the case
    has no workspace to look at, e.g. a stored outcome whose files were not kept).

    `budget` is the run's own budget, in an eval its share of the eval's: a scorer that
    spends (the LLM judge) pays from it, so the eval's budget counts the scoring as it
    counts the agent's calls and is never overspent (law 7). None on a stored outcome (a
    rescore spends nothing) or one built by hand.

    `run_id` is the id of the case run that produced it (`{eval_id}:{case_id}:e{epoch}`,
    unique in a store): what a scorer that records something of its own (the judge's
    capture) keys it under. None on an outcome built by hand."""

    case: Case
    epoch: int
    text: str
    stop_cause: StopCause
    output: Any = None
    tool_trace: tuple[ToolTraceEntry, ...] = ()
    messages: Sequence[UserMessage | AssistantMessage] = field(default_factory=tuple)
    workspace: Path | None = None
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    duration_s: float = 0.0
    error: str | None = None
    budget: Budget | None = None
    run_id: str | None = None


@runtime_checkable
class Scorer(Protocol):
    """Scores one outcome. `name` keys the score in results and reports (two scorers of
    an eval have different names). A scorer that raises scores that case as an error
    (`Score.failed_with`) and the eval goes on.

    A scorer that calls a model declares it with a `calls_model` attribute that is True
    (the LLM judge does): a rescore calls no model, so it refuses such a scorer
    (`scorer_calls_model`). The capability is declared, never guessed from a name."""

    @property
    def name(self) -> str: ...

    async def score(self, outcome: CaseOutcome) -> Score: ...


def scorer_calls_model(scorer: Scorer) -> bool:
    """Whether `scorer` declares that it calls a model (see `Scorer`)."""
    return getattr(scorer, "calls_model", False) is True
