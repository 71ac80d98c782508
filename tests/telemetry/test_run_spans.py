"""A run's span tree and attributes, recorded with the real SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
from typing import Any

from opentelemetry.trace import SpanKind, StatusCode

from tiller.cancel import CancellationToken
from tiller.loop import Agent, RunContext, RunOptions
from tiller.model import ScriptedModel
from tiller.policy import Callback, Decision
from tiller.state import StopCause
from tiller.tools import tool

from ._tree import Recorded


@tool(read_only=True)
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@tool(risk="file_mutation")
def write_note(text: str) -> str:
    """Write a note."""
    return "written"


def calls(*names_args: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "arguments": a} for n, a in names_args]}


async def test_a_plain_run_is_one_invoke_agent_with_chat_and_execute_tool(
    recorded: Recorded, ctx: RunContext
) -> None:
    model = ScriptedModel([calls(("lookup", {"key": "a"})), "the answer"])
    agent = Agent(model, [lookup], name="helper")
    options = RunOptions().with_telemetry(recorded.telemetry)
    result = await agent.run_in(ctx, "find a", options=options)
    assert result.stop_cause is StopCause.COMPLETED

    assert recorded.tree() == [
        (
            "invoke_agent helper",
            [f"chat {model.name}", "execute_tool lookup", f"chat {model.name}"],
        )
    ]
    run = recorded.one("invoke_agent helper")
    assert run.kind is SpanKind.INTERNAL
    attrs = dict(run.attributes or {})
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["gen_ai.agent.name"] == "helper"
    assert attrs["gen_ai.provider.name"] == model.provider
    assert attrs["tiller.stop_cause"] == "completed"
    assert attrs["tiller.steps"] == 2
    assert attrs["tiller.suspended"] is False
    chat = recorded.named(f"chat {model.name}")[0]
    assert chat.kind is SpanKind.CLIENT
    chat_attrs = dict(chat.attributes or {})
    assert chat_attrs["gen_ai.operation.name"] == "chat"
    assert chat_attrs["gen_ai.request.model"] == model.name
    # A scripted model does not say which model answered: the attribute is left out,
    # never filled with the request's model (tests/telemetry/test_response_model.py).
    assert "gen_ai.response.model" not in chat_attrs
    assert chat_attrs["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert "gen_ai.usage.input_tokens" in chat_attrs
    assert "gen_ai.input.messages" not in chat_attrs  # content is off by default
    tool_span = recorded.one("execute_tool lookup")
    tool_attrs = dict(tool_span.attributes or {})
    assert tool_attrs["gen_ai.tool.name"] == "lookup"
    assert tool_attrs["gen_ai.tool.call.id"] == result.state.messages[1].tool_calls[0].id
    assert tool_attrs["tiller.gate.decision"] == "run"
    assert tool_attrs["tiller.gate.decided_by"] == "policy"
    assert tool_attrs["tiller.risk_class"] == "read_only"
    assert "gen_ai.tool.call.arguments" not in tool_attrs
    # One trace.
    assert len({s.context.trace_id for s in recorded.spans()}) == 1

    metrics = recorded.metrics()
    assert {a["gen_ai.token.type"] for a, _ in metrics["gen_ai.client.token.usage"]} == {
        "input",
        "output",
    }
    durations = metrics["gen_ai.client.operation.duration"]
    assert sum(count for _, (count, _) in durations) == 2
    assert [a["gen_ai.tool.name"] for a, _ in metrics["tiller.tool.duration"]] == ["lookup"]
    assert metrics["tiller.runs"] == [
        (
            {
                "tiller.stop_cause": "completed",
                "gen_ai.agent.name": "helper",
                "tiller.subagent": False,
            },
            1,
        )
    ]


async def test_parallel_tools_are_sibling_execute_tool_spans(
    recorded: Recorded, ctx: RunContext
) -> None:
    model = ScriptedModel(
        [calls(("lookup", {"key": "a"}), ("lookup", {"key": "b"}), ("lookup", {"key": "c"})), "ok"]
    )
    agent = Agent(model, [lookup], name="helper")
    await agent.run_in(ctx, "find", options=RunOptions().with_telemetry(recorded.telemetry))
    [(_, children)] = recorded.tree()
    assert children.count("execute_tool lookup") == 3
    ids = sorted(
        dict(s.attributes or {})["gen_ai.tool.call.id"]
        for s in recorded.named("execute_tool lookup")
    )
    assert len(set(ids)) == 3


async def test_a_refused_call_says_who_refused(recorded: Recorded, tmp_path: Any) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    ctx = RunContext.sandboxed(root, Callback(lambda call, tool: Decision.deny("not today")))
    model = ScriptedModel([calls(("write_note", {"text": "hi"})), "could not"])
    agent = Agent(model, [write_note], name="helper")
    await agent.run_in(ctx, "note", options=RunOptions().with_telemetry(recorded.telemetry))
    span = recorded.one("execute_tool write_note")
    attrs = dict(span.attributes or {})
    assert attrs["tiller.gate.decision"] == "refuse"
    assert attrs["tiller.gate.decided_by"] == "user"
    assert attrs["tiller.risk_class"] == "file_mutation"
    assert attrs["tiller.tool.is_error"] is True
    assert span.status.status_code is StatusCode.ERROR
    assert "tiller.tool.duration" not in recorded.metrics()  # it never ran


async def test_a_cancelled_run_ends_its_spans_cancelled(
    recorded: Recorded, ctx: RunContext
) -> None:
    started = asyncio.Event()

    @tool(read_only=True)
    async def wait_forever() -> str:
        """Wait."""
        started.set()
        await asyncio.sleep(3600)
        return "never"

    token = CancellationToken()
    model = ScriptedModel([calls(("wait_forever", {})), "never"])
    agent = Agent(model, [wait_forever], name="helper")
    options = RunOptions().with_telemetry(recorded.telemetry)
    run = asyncio.create_task(agent.run_in(ctx.with_cancel(token), "wait", options=options))
    async with asyncio.timeout(5):
        await started.wait()
        token.cancel()
        result = await run
    assert result.stop_cause is StopCause.CANCELLED
    run_span = recorded.one("invoke_agent helper")
    assert dict(run_span.attributes or {})["tiller.stop_cause"] == "cancelled"
    assert run_span.status.status_code is not StatusCode.ERROR
    tool_span = recorded.one("execute_tool wait_forever")
    assert tool_span.end_time is not None
    assert recorded.metrics()["tiller.runs"][0][0]["tiller.stop_cause"] == "cancelled"


async def test_no_telemetry_records_nothing(recorded: Recorded, ctx: RunContext) -> None:
    model = ScriptedModel([calls(("lookup", {"key": "a"})), "the answer"])
    await Agent(model, [lookup]).run_in(ctx, "find a")
    assert recorded.spans() == []


async def test_the_apis_no_op_providers_cost_a_run_nothing_and_record_no_trace(
    ctx: RunContext,
) -> None:
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.trace import NoOpTracerProvider

    from tiller.telemetry import Telemetry

    telemetry = Telemetry(NoOpTracerProvider(), NoOpMeterProvider())
    model = ScriptedModel([calls(("lookup", {"key": "a"})), "the answer"])
    options = RunOptions().with_telemetry(telemetry)
    result = await Agent(model, [lookup]).run_in(ctx, "find a", options=options)
    assert result.stop_cause is StopCause.COMPLETED
    assert result.state.trace_context is None  # nothing to continue


def test_from_global_reads_the_apis_providers() -> None:
    from opentelemetry import metrics, trace

    from tiller.telemetry import Telemetry

    telemetry = Telemetry.from_global()
    assert telemetry.tracer_provider is trace.get_tracer_provider()
    assert telemetry.meter_provider is metrics.get_meter_provider()
    assert telemetry.record_content is False
