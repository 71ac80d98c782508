"""Another process: resumes the suspended run at argv[1] (a RunState as JSON) in the
workspace argv[2], approving every held call, traced by its own in-memory exporter;
prints the finished spans as JSON lines."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import orjson
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tiller.loop import ResumeDecision, RunContext, RunOptions
from tiller.policy import AllowAll
from tiller.state import RunState
from tiller.telemetry import Telemetry

sys.path.insert(0, str(Path(__file__).parent))
from _resume_agent import agent


async def main(state: RunState) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(provider, MeterProvider())
    ctx = RunContext.sandboxed(Path(sys.argv[2]), AllowAll())
    decisions = {call.id: ResumeDecision(approve=True) for call in state.unanswered_calls()}
    result = await agent.resume(
        state, decisions, ctx=ctx, options=RunOptions().with_telemetry(telemetry)
    )
    for span in exporter.get_finished_spans():
        print(
            orjson.dumps(
                {
                    "name": span.name,
                    "trace_id": f"{span.context.trace_id:032x}",
                    "span_id": f"{span.context.span_id:016x}",
                    "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
                    "links": [
                        (f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}")
                        for link in span.links
                    ],
                    "attributes": dict(span.attributes or {}),
                }
            ).decode()
        )
    print(orjson.dumps({"stop_cause": result.stop_cause.value}).decode())


asyncio.run(main(RunState.from_json(Path(sys.argv[1]).read_bytes())))
