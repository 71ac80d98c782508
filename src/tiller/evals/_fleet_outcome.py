"""A fleet run's `RunResult`, rebuilt in the eval's process from what the fleet stored: its
result record (`tiller.fleet.RunOutcomeRecord`: text, structured output as JSON, stop
cause, usage, cost, steps, error) and its checkpoint (`RunState`: the transcript, and the
call records the tool trace is read from), so the eval scores and records it exactly as
it does a run it made itself (`_case_run`).

The tool trace is not stored as such: a worker's run keeps it in memory. It is read back
from the checkpoint's call records (who refused a call, whether it failed, was malformed
or staged), in the order the model made the calls (step by step, in each step in the
order of its assistant message), with the arguments as the transcript holds them; a call
that never got an answer (a cancelled step's) is not in it, as it is not in a live run's.
One thing is not recorded: whether a call was dispatched again after a crash (`rerun`),
which only a recovered run's own process knows; it reads back as False.
"""

from __future__ import annotations

from ..conversation import AssistantMessage, Usage
from ..fleet import RunOutcomeRecord
from ..loop import RunResult, ToolTraceEntry
from ..state import RunState, StopCause

__all__ = ["result_of_fleet_run", "tool_trace_of"]

_EXHAUSTING = frozenset(
    {StopCause.MAX_STEPS, StopCause.STEP_BUDGET, StopCause.TOKEN_BUDGET, StopCause.COST_BUDGET}
)


def result_of_fleet_run(record: RunOutcomeRecord, state: RunState) -> RunResult:
    """The `RunResult` of the fleet run `record` ended, whose checkpoint is `state`."""
    cause = StopCause(record.stop_cause) if record.stop_cause else StopCause.ERROR
    return RunResult(
        text=record.text,
        stop_cause=cause,
        usage=Usage.model_validate(record.usage) if record.usage else state.usage,
        steps=record.steps,
        cost_usd=record.cost_usd,
        usage_complete=state.usage_complete,
        state=state,
        output=record.output,
        exhausted=cause in _EXHAUSTING,
        tool_trace=tool_trace_of(state),
        error=record.error,
    )


def tool_trace_of(state: RunState) -> tuple[ToolTraceEntry, ...]:
    """The run's tool trace, from its checkpoint (see the module docstring)."""
    arguments: dict[str, str] = {}
    order: dict[str, int] = {}
    for message in state.messages:
        if isinstance(message, AssistantMessage):
            for call in message.tool_calls:
                arguments.setdefault(call.id, call.arguments)
                order.setdefault(call.id, len(order))
    answered = [
        record for record in state.calls.values() if record.status in ("completed", "failed")
    ]
    answered.sort(key=lambda r: (r.step, order.get(r.call_id, len(order))))
    return tuple(
        ToolTraceEntry(
            call_id=record.call_id,
            name=record.name,
            arguments=arguments.get(record.call_id, "{}"),
            step=record.step,
            is_error=record.is_error,
            refused_by=record.refused_by,
            unknown=record.refused_by == "unknown",
            malformed_arguments=record.malformed_arguments,
            staged=record.staged,
        )
        for record in answered
    )
