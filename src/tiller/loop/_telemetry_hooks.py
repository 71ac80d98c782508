"""What the loop hands `tiller.telemetry`: the run's recorder, and the gate's answer as
plain facts (telemetry sits below the loop and knows none of its types).

Every hook in the loop is one `if run.trace is not None:` line, so a run without
telemetry (the default) pays a `None` check per hook and nothing else.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from ..state import RunState
from ._gate_answer import ForClient, GateAnswer, Hold, Refuse, Run, Stage

if TYPE_CHECKING:
    from ..conversation import ToolCall
    from ..model import ModelRequest
    from ..telemetry import RunTrace
    from ..tools import Tool
    from ._agent import Agent
    from ._model_turn import ModelAnswer
    from ._options import RunOptions

_Batch = TypeVar("_Batch")

__all__ = ["gate_facts", "run_trace_for", "traced_call", "traced_stream"]


def run_trace_for(
    agent: Agent, options: RunOptions, state: RunState, subagent: bool
) -> RunTrace | None:
    """The run's recorder, or None when its options carry no telemetry. Its span starts
    as the loop starts to run (`Loop.run`, whose `finally` ends it), not here: a loop
    that fails as it is built, or is never run, leaves no span open."""
    telemetry = options.telemetry
    if telemetry is None:
        return None
    from ..telemetry import RunTrace  # only a traced run imports OpenTelemetry

    model = agent.model
    return RunTrace(
        telemetry,
        state,
        agent=agent.name or "agent",
        provider=model.provider,
        model=model.name,
        subagent=subagent,
    )


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


def traced_stream(
    trace: RunTrace | None, stream: Callable[[ModelRequest], Awaitable[ModelAnswer]]
) -> Callable[[ModelRequest], Awaitable[ModelAnswer]]:
    """`stream` (one model call), inside the call's `chat` span; `stream` itself when
    the run is not traced (no wrapper, nothing per call)."""
    if trace is None:
        return stream

    async def call(request: ModelRequest) -> ModelAnswer:
        chat = trace.chat(request)
        try:
            answer = await stream(request)
        except BaseException as exc:
            chat.failed(exc)
            raise
        chat.done(answer.usage, answer.finish_reason, answer.message, answer.response_model)
        return answer

    return call


def traced_call(
    trace: RunTrace | None,
    run_call: Callable[[ToolCall, Tool, _Batch], Coroutine[Any, Any, None]],
) -> Callable[[ToolCall, Tool, _Batch], Coroutine[Any, Any, None]]:
    """`run_call` (one allowed tool call) with the call's `execute_tool` span current, so
    a subagent it starts, or the tool's own instrumentation, nests under it; `run_call`
    itself when the run is not traced."""
    if trace is None:
        return run_call

    async def call(tool_call: ToolCall, tool: Tool, batch: _Batch) -> None:
        token = trace.tool_running(tool_call.id)
        try:
            await run_call(tool_call, tool, batch)
        finally:
            trace.tool_stopped(token)

    return call
