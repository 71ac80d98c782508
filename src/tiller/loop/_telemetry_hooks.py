"""What the loop hands `tiller.telemetry`: the run's recorder, and the gate's answer as
plain facts (telemetry sits below the loop and knows none of its types).

Every hook in the loop is one `if run.trace is not None:` line, so a run without
telemetry (the default) pays a `None` check per hook and nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..state import RunState
from ..telemetry import RunTrace
from ._gate_answer import ForClient, GateAnswer, Hold, Refuse, Run, Stage

if TYPE_CHECKING:
    from ._agent import Agent
    from ._options import RunOptions

__all__ = ["gate_facts", "run_trace_for"]


def run_trace_for(
    agent: Agent, options: RunOptions, state: RunState, subagent: bool
) -> RunTrace | None:
    """The run's recorder, or None when its options carry no telemetry."""
    telemetry = options.telemetry
    if telemetry is None:
        return None
    model = agent.model
    trace = RunTrace(
        telemetry,
        state,
        agent=agent.name or "agent",
        provider=model.provider,
        model=model.name,
        subagent=subagent,
    )
    trace.started()
    return trace


def gate_facts(answer: GateAnswer) -> tuple[str, str | None, str | None]:
    """`(decision, decided_by, risk_class)` for a span: decision is `run`, `refuse`,
    `hold`, `stage` or `client`; who decided is the refuser, or who allowed it."""
    match answer:
        case Run(risk=risk, by=by):
            return "run", by, risk.value if risk is not None else None
        case ForClient(risk=risk, by=by):
            return "client", by, risk.value if risk is not None else None
        case Refuse(by=by, risk=risk):
            return "refuse", by, risk.value if risk is not None else None
        case Hold(risk=risk):
            return "hold", None, risk.value if risk is not None else None
        case Stage():
            return "stage", "outbox", None
    return "unknown", None, None
