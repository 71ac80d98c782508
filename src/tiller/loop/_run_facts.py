"""The run's spending, limits and staged drafts, in its AG-UI state (`tiller`).

Published once a step when `RunOptions.publish_run_state` is on: the web console and
any AG-UI client read the run's usage and what is left of its budget from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..state import CallRecord
from ._run_parts import RunParts

__all__ = ["publish_run_facts"]


def publish_run_facts(run: RunParts, staged: Sequence[CallRecord]) -> None:
    """Publish the run's facts: usage, budget, and the outbox drafts it `staged`."""
    state, budget = run.state, run.run_ctx.budget
    limits = {
        "maxSteps": budget.max_steps,
        "maxOutputTokens": budget.max_output_tokens,
        "maxCostUsd": budget.max_cost_usd,
    }
    facts: dict[str, Any] = {
        "usage": {
            "inputTokens": state.usage.input_tokens,
            "outputTokens": state.usage.output_tokens,
            "totalTokens": state.usage.total_tokens,
            "costUsd": round(state.cost_usd, 6),
            "steps": state.step,
        },
        "budget": {
            **{key: value for key, value in limits.items() if value is not None},
            "spentSteps": budget.steps,
            "spentOutputTokens": budget.usage.output_tokens,
            "spentCostUsd": round(budget.cost_usd, 6),
        },
    }
    if staged:
        facts["outbox"] = [
            {"toolCallId": record.call_id, "tool": record.name, "item": record.outbox_item}
            for record in staged
        ]
    run.agui.update_runtime_state(facts)
