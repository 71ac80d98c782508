"""Telemetry that fails never breaks, cancels or changes a run (DESIGN §4, laws 2 and 8):
a span processor, a tracer, a meter or a redactor that raises leaves the run's result and
its event stream exactly as they are without telemetry."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.trace import NoOpTracerProvider

from tests.loop.test_compaction import PROMPT, TOOLS, Project
from tiller.cancel import CancellationToken
from tiller.capture import CaptureRecord
from tiller.events import Event
from tiller.loop import Agent, RunContext, RunOptions, RunResult
from tiller.model import ScriptedModel
from tiller.state import StopCause
from tiller.telemetry import Telemetry
from tiller.tools import tool


class Broken(Exception):
    """What the failing telemetry raises."""


class RaisingProcessor(SpanProcessor):
    """A span processor that raises when a span starts, ends, or both (only for spans
    whose name starts with one of `names`, when given)."""

    def __init__(self, *, on_start: bool, on_end: bool, names: tuple[str, ...] = ()) -> None:
        self.raise_on_start, self.raise_on_end, self.names = on_start, on_end, names
        self.started = 0
        self.raised = 0

    def _raise(self, span: ReadableSpan, where: str) -> None:
        if not self.names or span.name.startswith(self.names):
            self.raised += 1
            raise Broken(where)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.started += 1
        if self.raise_on_start:
            self._raise(span, "on_start")

    def on_end(self, span: ReadableSpan) -> None:
        if self.raise_on_end:
            self._raise(span, "on_end")


class _RaisingInstrument:
    def add(self, *args: Any, **kwargs: Any) -> None:
        raise Broken("add")

    def record(self, *args: Any, **kwargs: Any) -> None:
        raise Broken("record")


class _RaisingMeter:
    def __getattr__(self, name: str) -> Callable[..., _RaisingInstrument]:
        return lambda *args, **kwargs: _RaisingInstrument()


class RaisingMeterProvider(NoOpMeterProvider):
    """A meter provider whose instruments raise when used."""

    def get_meter(self, *args: Any, **kwargs: Any) -> Any:
        return _RaisingMeter()


class RaisingTracerProvider(NoOpTracerProvider):
    """A tracer provider whose tracer raises as a span starts."""

    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        class _Tracer:
            def start_span(self, *args: Any, **kwargs: Any) -> Any:
                raise Broken("start_span")

        return _Tracer()


@tool(read_only=True)
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def _script() -> ScriptedModel:
    return ScriptedModel(
        [
            {"tool_calls": [{"name": "lookup", "arguments": {"key": "a"}}]},
            {
                "tool_calls": [
                    {"name": "lookup", "arguments": {"key": "b"}},
                    {"name": "lookup", "arguments": {"key": "c"}},
                ]
            },
            "the answer",
        ]
    )


async def _run(
    ctx: RunContext, telemetry: Telemetry | None, model: ScriptedModel | None = None
) -> tuple[RunResult, list[Event]]:
    events: list[Event] = []
    options = RunOptions(max_steps=100).with_telemetry(telemetry)
    agent = Agent(model or _script(), [lookup], name="helper")
    result = await agent.run_in(ctx, "find", options, on_event=events.append, run_id="run-same")
    return result, events


def _same(traced: tuple[RunResult, list[Event]], plain: tuple[RunResult, list[Event]]) -> None:
    (result, events), (expected, expected_events) = traced, plain
    assert result.stop_cause is expected.stop_cause is StopCause.COMPLETED
    assert result.state.error is None
    assert result.state.messages == expected.state.messages
    assert result.state.usage == expected.state.usage
    assert events == expected_events


def _sdk(processor: SpanProcessor) -> Telemetry:
    provider = TracerProvider()
    provider.add_span_processor(processor)
    return Telemetry(provider, MeterProvider())


@pytest.mark.parametrize(
    ("on_start", "on_end"), [(True, False), (False, True), (True, True)], ids=str
)
async def test_a_span_processor_that_raises_changes_nothing(
    ctx: RunContext, on_start: bool, on_end: bool
) -> None:
    processor = RaisingProcessor(on_start=on_start, on_end=on_end)
    traced = await _run(ctx, _sdk(processor))
    assert processor.started > 0  # the telemetry was there, and failed
    _same(traced, await _run(ctx, None))


async def test_a_tracer_that_raises_changes_nothing(ctx: RunContext) -> None:
    telemetry = Telemetry(RaisingTracerProvider(), NoOpMeterProvider())
    _same(await _run(ctx, telemetry), await _run(ctx, None))


async def test_a_meter_that_raises_changes_nothing(ctx: RunContext) -> None:
    provider = TracerProvider()
    telemetry = Telemetry(provider, RaisingMeterProvider())
    _same(await _run(ctx, telemetry), await _run(ctx, None))


async def test_a_redactor_that_returns_what_no_message_is_changes_nothing(
    ctx: RunContext,
) -> None:
    """The redactor is the user's code: what it returns may not read back as messages."""

    def mangle(record: CaptureRecord) -> Any:
        if hasattr(record, "new_messages"):
            return type(record)(
                run_id=record.run_id,
                step=record.step,
                new_messages=[{"role": "user", "text": object()}],
                response={"role": "assistant", "tool_calls": "not a list"},
            )
        return record

    telemetry = _sdk(RaisingProcessor(on_start=False, on_end=False)).with_content(redact=mangle)
    _same(await _run(ctx, telemetry), await _run(ctx, None))


async def test_compaction_with_a_raising_processor_changes_nothing(ctx: RunContext) -> None:
    window = 4000

    async def run(telemetry: Telemetry | None) -> tuple[RunResult, list[Event]]:
        events: list[Event] = []
        model = ScriptedModel(Project(60, window), context_window=window)
        options = RunOptions(max_steps=100).with_telemetry(telemetry)
        agent = Agent(model, TOOLS, name="auditor")
        result = await agent.run_in(ctx, PROMPT, options, on_event=events.append, run_id="r-c")
        return result, events

    traced = await run(_sdk(RaisingProcessor(on_start=True, on_end=True)))
    plain = await run(None)
    assert traced[0].state.compaction.compactions >= 1
    _same(traced, plain)


async def test_a_run_cancelled_mid_tool_with_a_raising_processor_is_cancelled(
    ctx: RunContext,
) -> None:
    """The cancel is the run's, not replaced by the processor's error (law 8): the same
    result and stream as the untraced run cancelled at the same point."""

    async def cancelled(telemetry: Telemetry | None) -> tuple[RunResult, list[Event]]:
        started = asyncio.Event()

        @tool(read_only=True)
        async def wait_forever() -> str:
            """Wait."""
            started.set()
            await asyncio.sleep(3600)
            return "never"

        token = CancellationToken()
        model = ScriptedModel(
            [{"tool_calls": [{"name": "wait_forever", "arguments": {}}]}, "never"]
        )
        agent = Agent(model, [wait_forever], name="helper")
        events: list[Event] = []
        run = asyncio.create_task(
            agent.run_in(
                ctx.with_cancel(token),
                "wait",
                RunOptions().with_telemetry(telemetry),
                on_event=events.append,
                run_id="run-cancel",
            )
        )
        async with asyncio.timeout(5):
            await started.wait()
            token.cancel()
            return await run, events

    # The model call's span ends well, so the tool starts; the tool's and the run's fail.
    processor = RaisingProcessor(on_start=False, on_end=True, names=("execute_tool", "invoke"))
    result, events = await cancelled(_sdk(processor))
    expected, expected_events = await cancelled(None)
    assert processor.raised == 2
    assert result.stop_cause is expected.stop_cause is StopCause.CANCELLED
    assert result.state.error == expected.state.error
    assert result.state.messages == expected.state.messages
    assert events == expected_events


async def test_a_failing_processor_is_one_warning_a_run(
    ctx: RunContext, caplog: pytest.LogCaptureFixture
) -> None:
    """Said, not swallowed; but once: a broken exporter fails on every span."""
    processor = RaisingProcessor(on_start=True, on_end=True)
    with caplog.at_level(logging.DEBUG, logger="tiller.telemetry"):
        await _run(ctx, _sdk(processor))
    mine = [r for r in caplog.records if r.name == "tiller.telemetry"]
    warnings = [r for r in mine if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "run-same" in warnings[0].getMessage()
    assert warnings[0].exc_info is not None and isinstance(warnings[0].exc_info[1], Broken)
    assert len(mine) > 1  # the others at debug level
