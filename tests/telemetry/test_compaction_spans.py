"""Compaction shows on the run's span: an event per compaction, and each summary call
as a `chat` span of its own (`tiller.purpose = compaction`)."""

from __future__ import annotations

from tests.loop.test_compaction import PROMPT, TOOLS, Project
from tiller.loop import Agent, RunContext, RunOptions
from tiller.model import ScriptedModel
from tiller.state import StopCause

from ._tree import Recorded


async def test_compactions_and_summary_calls_are_recorded(
    recorded: Recorded, ctx: RunContext
) -> None:
    window = 4000
    project = Project(60, window)
    model = ScriptedModel(project, context_window=window)
    options = RunOptions(max_steps=100).with_telemetry(recorded.telemetry)
    result = await Agent(model, TOOLS, name="auditor").run_in(ctx, PROMPT, options)
    assert result.stop_cause is StopCause.COMPLETED
    compaction = result.state.compaction
    assert compaction.compactions >= 2 and project.summaries >= 1

    run = recorded.one("invoke_agent auditor")
    events = [e for e in run.events if e.name == "tiller.compaction"]
    assert len(events) == compaction.compactions
    assert all(e.attributes is not None for e in events)
    assert all(e.attributes["tiller.compaction.reason"] == "threshold" for e in events)  # type: ignore[index]
    assert dict(run.attributes or {})["tiller.compactions"] == compaction.compactions
    chats = recorded.named(f"chat {model.name}")
    summaries = [s for s in chats if dict(s.attributes or {}).get("tiller.purpose") == "compaction"]
    assert len(summaries) == project.summaries
    assert all(s.parent is not None and s.parent.span_id == run.context.span_id for s in summaries)
    assert len(chats) - len(summaries) == result.steps
