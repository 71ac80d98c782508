"""Refusals made visible: which calls a run refused, who refused them, and why.

A refused call is not a failed run: the model reads the refusal as the call's result and
the run goes on, often to `completed`. So the result lists them (`RunResult.refusals`), and
the commonest surprise — a call that needs approval in a run with nobody to give it — is
also logged, once per run, with the two ways out.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..state import RunState
    from ._result import ToolTraceEntry

__all__ = ["RefusedCall", "refusals_of", "warn_unapprovable"]

logger = logging.getLogger(__name__)

#: What a refusal reads when its result is no longer in the history (compacted away).
_REASON_NOT_KEPT = "(the refusal's text was compacted out of the history)"


@dataclass(frozen=True, slots=True)
class RefusedCall:
    """One call the run refused: its id, its tool, who refused it (`user`, `policy`,
    `hook`, `phase`, `withheld`, `unknown`: law 4) and the reason the model read."""

    call_id: str
    tool: str
    by: str
    reason: str


def refusals_of(trace: Iterable[ToolTraceEntry], state: RunState) -> tuple[RefusedCall, ...]:
    """The refused calls of `trace`, in call order, each with the text the model read."""
    refused = [entry for entry in trace if entry.refused_by is not None]
    if not refused:
        return ()
    texts = _result_texts(state)
    return tuple(
        RefusedCall(
            call_id=entry.call_id,
            tool=entry.name,
            by=entry.refused_by or "",
            reason=texts.get(entry.call_id, _REASON_NOT_KEPT),
        )
        for entry in refused
    )


def _result_texts(state: RunState) -> dict[str, str]:
    # A step that paused keeps its results on the call records until the step ends.
    texts = {call_id: r.result for call_id, r in state.calls.items() if r.result is not None}
    for message in state.messages:
        for result in getattr(message, "tool_results", ()):
            texts[result.call_id] = result.content
    return texts


def warn_unapprovable(tool: str, risk: str | None) -> None:
    """Log that `tool` was refused because nothing can approve it. The gate calls this
    for the first such refusal of a run only, so a run logs it at most once."""
    declared = f" (its risk: {risk})" if risk else ""
    logger.warning(
        "tiller refused a call to %r%s: it needs approval and this run has no approver and "
        "no store to hold it for one. Declare the tool's risk if it is safe "
        "(`@tool(read_only=True)` or `@tool(risk=...)`), or pass an approver "
        "(`approver=AllowAll()`, or one that asks a person). The model was told the call "
        "was blocked; RunResult.refusals lists every refused call.",
        tool,
        declared,
    )
