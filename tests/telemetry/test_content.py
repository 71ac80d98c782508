"""Message content is recorded only when asked, and then through the capture redactor."""

from __future__ import annotations

import dataclasses

import orjson
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from pydantic import BaseModel

from tiller.capture import CaptureRecord, ToolResultRecord
from tiller.loop import Agent, RunContext, RunOptions
from tiller.model import ScriptedModel
from tiller.state import StopCause
from tiller.tools import tool

from ._tree import Recorded

SECRET = "sk-live-123"


@tool(read_only=True)
def lookup(key: str) -> str:
    """Look a key up."""
    return f"the value is {SECRET}"


def scrub(record: CaptureRecord) -> CaptureRecord:
    """Replace the secret everywhere, as a capture redactor would."""
    if isinstance(record, ToolResultRecord):
        return dataclasses.replace(record, content=record.content.replace(SECRET, "[redacted]"))
    text = orjson.dumps([record.new_messages, record.response]).decode()
    messages, response = orjson.loads(text.replace(SECRET, "[redacted]"))
    return dataclasses.replace(record, new_messages=messages, response=response)


def model() -> ScriptedModel:
    return ScriptedModel(
        [
            {"tool_calls": [{"name": "lookup", "arguments": {"key": SECRET}}]},
            f"it is {SECRET}",
        ]
    )


async def test_content_is_recorded_through_the_redactor(
    recorded: Recorded, ctx: RunContext
) -> None:
    telemetry = recorded.telemetry.with_content(redact=scrub)
    agent = Agent(model(), [lookup], system_prompt="be brief", name="helper")
    await agent.run_in(ctx, f"find {SECRET}", options=RunOptions().with_telemetry(telemetry))
    for span in recorded.spans():
        for value in (span.attributes or {}).values():
            assert SECRET not in str(value), (span.name, value)
    first, second = recorded.named(f"chat {agent.model.name}")
    asked = orjson.loads(str((first.attributes or {})["gen_ai.input.messages"]))
    assert asked == [{"role": "user", "parts": [{"type": "text", "content": "find [redacted]"}]}]
    said = orjson.loads(str((second.attributes or {})["gen_ai.output.messages"]))
    assert said[0]["role"] == "assistant"
    assert said[0]["parts"] == [{"type": "text", "content": "it is [redacted]"}]
    assert said[0]["finish_reason"] == "stop"
    system = orjson.loads(str((first.attributes or {})["gen_ai.system_instructions"]))
    assert system == [{"type": "text", "content": "be brief"}]
    tool_attrs = recorded.one("execute_tool lookup").attributes or {}
    assert orjson.loads(str(tool_attrs["gen_ai.tool.call.arguments"])) == {"key": "[redacted]"}
    assert tool_attrs["gen_ai.tool.call.result"] == "the value is [redacted]"


async def test_a_failing_redactor_drops_the_content(recorded: Recorded, ctx: RunContext) -> None:
    def broken(record: CaptureRecord) -> CaptureRecord:
        raise RuntimeError("the redactor broke")

    telemetry = recorded.telemetry.with_content(redact=broken)
    agent = Agent(model(), [lookup], name="helper")
    await agent.run_in(ctx, f"find {SECRET}", options=RunOptions().with_telemetry(telemetry))
    for span in recorded.spans():
        attrs = span.attributes or {}
        assert not {"gen_ai.input.messages", "gen_ai.output.messages"} & set(attrs)
        assert "gen_ai.tool.call.arguments" not in attrs and "gen_ai.tool.call.result" not in attrs
        for value in attrs.values():
            assert SECRET not in str(value)


async def test_without_opting_in_no_content_is_recorded(
    recorded: Recorded, ctx: RunContext
) -> None:
    agent = Agent(model(), [lookup], name="helper")
    await agent.run_in(
        ctx, f"find {SECRET}", options=RunOptions().with_telemetry(recorded.telemetry)
    )
    for span in recorded.spans():
        for value in (span.attributes or {}).values():
            assert SECRET not in str(value), (span.name, value)


def _everything(span: ReadableSpan) -> list[str]:
    """All a span says: its name, attribute values, status text, events and links."""
    said = [span.name, str(span.status.description or "")]
    said += [str(v) for v in (span.attributes or {}).values()]
    for event in span.events:
        said += [event.name, *(str(v) for v in (event.attributes or {}).values())]
    for link in span.links:
        said += [str(v) for v in (link.attributes or {}).values()]
    return said


class Answer(BaseModel):
    count: int


async def test_an_error_quoting_the_models_answer_is_not_recorded_without_opting_in(
    recorded: Recorded, ctx: RunContext
) -> None:
    """A final answer that does not validate: the run's error quotes the model's text."""
    agent = Agent(ScriptedModel([f'{{"count": "{SECRET}"}}']), output_type=Answer, name="a")
    options = RunOptions(output_retries=0).with_telemetry(recorded.telemetry)
    result = await agent.run_in(ctx, "count", options)
    assert result.stop_cause is StopCause.ERROR
    assert SECRET in (result.state.error or "")  # the run's own error says it
    run = recorded.one("invoke_agent a")
    assert dict(run.attributes or {})["tiller.stop_cause"] == "error"
    assert run.status.status_code is StatusCode.ERROR
    for span in recorded.spans():
        for value in _everything(span):
            assert SECRET not in value, (span.name, value)


async def test_a_model_error_quoting_content_is_not_recorded_without_opting_in(
    recorded: Recorded, ctx: RunContext
) -> None:
    """A provider's error may echo the request: its text is content."""
    model = ScriptedModel([{"error": {"status": 400, "message": f"bad input: {SECRET}"}}])
    agent = Agent(model, name="a")
    result = await agent.run_in(ctx, "hi", RunOptions().with_telemetry(recorded.telemetry))
    assert result.stop_cause is StopCause.ERROR
    chat = recorded.one(f"chat {model.name}")
    assert chat.status.status_code is StatusCode.ERROR
    assert dict(chat.attributes or {})["error.type"] == "ModelHTTPError"
    for span in recorded.spans():
        for value in _everything(span):
            assert SECRET not in value, (span.name, value)


async def test_error_text_is_recorded_through_the_redactor_when_opted_in(
    recorded: Recorded, ctx: RunContext
) -> None:
    model = ScriptedModel([{"error": {"status": 400, "message": f"bad input: {SECRET}"}}])
    telemetry = recorded.telemetry.with_content(redact=scrub)
    await Agent(model, name="a").run_in(ctx, "hi", RunOptions().with_telemetry(telemetry))
    run = recorded.one("invoke_agent a")
    assert "bad input: [redacted]" in str(dict(run.attributes or {})["tiller.error"])
    assert "bad input: [redacted]" in str(recorded.one(f"chat {model.name}").status.description)
    for span in recorded.spans():
        for value in _everything(span):
            assert SECRET not in value, (span.name, value)


async def test_a_tool_name_the_agent_does_not_have_is_not_recorded(
    recorded: Recorded, ctx: RunContext
) -> None:
    """The model wrote it: free text (in the span's name too), not one of the agent's."""
    model = ScriptedModel([{"tool_calls": [{"name": SECRET, "arguments": {}}]}, "done"])
    agent = Agent(model, [lookup], name="a")
    await agent.run_in(ctx, "go", RunOptions().with_telemetry(recorded.telemetry))
    span = recorded.one("execute_tool")
    attrs = dict(span.attributes or {})
    assert "gen_ai.tool.name" not in attrs
    assert attrs["tiller.gate.decided_by"] == "unknown_tool"
    assert attrs["tiller.tool.is_error"] is True
    for span in recorded.spans():
        for value in _everything(span):
            assert SECRET not in value, (span.name, value)


async def test_the_system_instructions_go_through_the_redactor(
    recorded: Recorded, ctx: RunContext
) -> None:
    """As in a capture, where the redactor sees them in the record's `agent`."""

    def scrub_all(record: CaptureRecord) -> CaptureRecord:
        record = scrub(record)
        if not isinstance(record, ToolResultRecord) and record.agent is not None:
            text = orjson.dumps(record.agent).decode().replace(SECRET, "[redacted]")
            record = dataclasses.replace(record, agent=orjson.loads(text))
        return record

    telemetry = recorded.telemetry.with_content(redact=scrub_all)
    agent = Agent(ScriptedModel(["ok"]), system_prompt=f"the key is {SECRET}", name="a")
    await agent.run_in(ctx, "hi", RunOptions().with_telemetry(telemetry))
    chat = recorded.one(f"chat {agent.model.name}")
    system = orjson.loads(str((chat.attributes or {})["gen_ai.system_instructions"]))
    assert system == [{"type": "text", "content": "the key is [redacted]"}]
    for span in recorded.spans():
        for value in _everything(span):
            assert SECRET not in value, (span.name, value)


async def test_a_failing_redactor_drops_the_system_instructions(
    recorded: Recorded, ctx: RunContext
) -> None:
    def broken(record: CaptureRecord) -> CaptureRecord:
        raise RuntimeError("the redactor broke")

    telemetry = recorded.telemetry.with_content(redact=broken)
    agent = Agent(ScriptedModel(["ok"]), system_prompt=f"the key is {SECRET}", name="a")
    await agent.run_in(ctx, "hi", RunOptions().with_telemetry(telemetry))
    assert "gen_ai.system_instructions" not in (
        recorded.one(f"chat {agent.model.name}").attributes or {}
    )
