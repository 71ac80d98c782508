"""A subagent's `invoke_agent` nests under its parent's `execute_tool agent` span."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tiller.conversation import AssistantMessage, UserMessage
from tiller.loop import Agent, RunContext, RunOptions
from tiller.model import ScriptedModel, TurnInfo
from tiller.tools import builtin

from ._tree import Recorded


async def test_a_subagent_nests_under_the_agent_call(recorded: Recorded, ctx: RunContext) -> None:
    (ctx.jail.root / "a.txt").write_text("alpha")

    def play(messages: Sequence[UserMessage | AssistantMessage], info: TurnInfo) -> Any:
        parent = any(spec.name == "agent" for spec in info.tools)
        if parent and len(messages) == 1:
            arguments = {"description": "look", "prompt": "read a.txt", "subagent_type": "explore"}
            return {"tool_calls": [{"name": "agent", "arguments": arguments}]}
        if not parent and len(messages) == 1:
            return {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]}
        return "done"

    model = ScriptedModel(play)
    agent = Agent(model, [builtin.read_file, builtin.agent], name="lead")
    await agent.run_in(ctx, "investigate", options=RunOptions().with_telemetry(recorded.telemetry))
    chat = f"chat {model.name}"
    assert recorded.tree() == [
        (
            "invoke_agent lead",
            [
                chat,
                (
                    "execute_tool agent",
                    [("invoke_agent explore", [chat, "execute_tool read_file", chat])],
                ),
                chat,
            ],
        )
    ]
    child = dict(recorded.one("invoke_agent explore").attributes or {})
    assert child["tiller.subagent"] is True
    assert child["tiller.stop_cause"] == "completed"
    assert child["tiller.run.id"].endswith("-sub-1")
    assert len({s.context.trace_id for s in recorded.spans()}) == 1
