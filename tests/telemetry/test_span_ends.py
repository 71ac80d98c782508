"""Every span a run starts ends, however the run ends: no span is left open (a leaked
span is never exported, and its children hang off nothing)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

from tiller.cancel import CancellationToken
from tiller.conversation import AssistantMessage, UserMessage
from tiller.loop import Agent, RunContext, RunOptions
from tiller.model import ScriptedModel, TurnInfo
from tiller.state import StopCause
from tiller.telemetry import Telemetry
from tiller.tools import builtin, tool


class Ledger(SpanProcessor):
    """The names of the spans started and of those ended, by span id."""

    def __init__(self) -> None:
        self.started: dict[int, str] = {}
        self.ended: dict[int, str] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.started[span.context.span_id] = span.name

    def on_end(self, span: ReadableSpan) -> None:
        self.ended[span.context.span_id] = span.name

    def left_open(self) -> list[str]:
        return sorted(name for id_, name in self.started.items() if id_ not in self.ended)


def _traced(ledger: Ledger) -> RunOptions:
    provider = TracerProvider()
    provider.add_span_processor(ledger)
    return RunOptions().with_telemetry(Telemetry(provider, MeterProvider()))


def _lead(child_turn: Any) -> ScriptedModel:
    """The lead calls the `agent` tool once; its child answers with `child_turn`."""

    def play(messages: Sequence[UserMessage | AssistantMessage], info: TurnInfo) -> Any:
        parent = any(spec.name == "agent" for spec in info.tools)
        if parent and len(messages) == 1:
            arguments = {"description": "look", "prompt": "read", "subagent_type": "explore"}
            return {"tool_calls": [{"name": "agent", "arguments": arguments}]}
        if not parent:
            return child_turn()
        return "done"

    return ScriptedModel(play)


async def test_a_subagent_cancelled_with_its_parent_mid_stream_ends_its_spans(
    ctx: RunContext,
) -> None:
    streaming = asyncio.Event()

    def child_turn() -> Any:
        streaming.set()
        return {"text": "never", "delay": 3600}

    ledger = Ledger()
    token = CancellationToken()
    agent = Agent(_lead(child_turn), [builtin.read_file, builtin.agent], name="lead")
    run = asyncio.create_task(agent.run_in(ctx.with_cancel(token), "go", _traced(ledger)))
    async with asyncio.timeout(5):
        await streaming.wait()
        token.cancel()
        result = await run
    assert result.stop_cause is StopCause.CANCELLED
    assert "invoke_agent explore" in ledger.started.values()
    assert ledger.left_open() == []


async def test_a_parent_cancelled_as_its_subagent_starts_leaves_no_span_open(
    ctx: RunContext,
) -> None:
    """The cancel lands between the subagent's loop being built and its first event."""
    token = CancellationToken()

    @tool(read_only=True)
    async def stop_now() -> str:
        """Stop."""
        token.cancel()
        return "stopped"

    def play(messages: Sequence[UserMessage | AssistantMessage], info: TurnInfo) -> Any:
        if len(messages) == 1 and any(spec.name == "agent" for spec in info.tools):
            arguments = {"description": "look", "prompt": "read", "subagent_type": "explore"}
            return {
                "tool_calls": [
                    {"name": "stop_now", "arguments": {}},
                    {"name": "agent", "arguments": arguments},
                ]
            }
        return "done"

    ledger = Ledger()
    agent = Agent(ScriptedModel(play), [stop_now, builtin.agent], name="lead")
    async with asyncio.timeout(5):
        result = await agent.run_in(ctx.with_cancel(token), "go", _traced(ledger))
    assert result.stop_cause is StopCause.CANCELLED
    assert ledger.left_open() == []


async def test_a_run_that_fails_as_its_loop_is_built_leaves_no_span_open(
    ctx: RunContext,
) -> None:
    """The context's model wrapper (the caller's code) runs as the gate is built, for the
    classifier's model: when it raises, the run never starts, and neither does its span."""
    from tiller.policy import AutoClassifier

    class WrapperBroke(Exception):
        pass

    def wrapper(model: Any, model_string: str | None) -> Any:
        raise WrapperBroke

    model = ScriptedModel(["done"])
    broken = ctx.with_classifier(AutoClassifier(model)).with_model_wrapper(wrapper)
    ledger = Ledger()
    result = await Agent(model, name="lead").run_in(broken, "go", _traced(ledger))
    assert result.stop_cause is StopCause.ERROR
    assert ledger.left_open() == []
