"""`Agent.run` / `run_in` take `transformers=`, a factory called once per run: what the
run's observers (and clients) see passes through a fresh chain, never one shared by two
runs, since transformers keep per-run state."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest

from tiller import UsageError
from tiller.events import Event, FilterToolCalls, RunStartedEvent
from tiller.loop import Agent, RunContext
from tiller.model import ScriptedModel
from tiller.testing import assert_valid_stream
from tiller.tools import tool


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def script() -> list[Any]:
    return [
        {"text": "Adding", "tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]},
        {"text": "It is 3."},
    ]


class SeesOneRun:
    """Records the runs it was used in: a shared instance would see two."""

    def __init__(self) -> None:
        self.runs: list[str] = []

    def transform(self, event: Event) -> Iterable[Event]:
        if isinstance(event, RunStartedEvent):
            self.runs.append(event.run_id)
        return (event,)


async def test_a_transformer_factory_shapes_what_the_run_emits(ctx: RunContext) -> None:
    """Broke on main: `Agent.run_in` had no `transformers=`, so a library run could not
    hide a tool's calls from its observers the way `run_agent` can."""
    events: list[Event] = []
    result = await Agent(ScriptedModel(script()), [add]).run_in(
        ctx,
        "1 + 2?",
        on_event=events.append,
        run_id="r",
        transformers=lambda: [FilterToolCalls.deny(["add"])],
    )
    assert result.text == "It is 3."
    wire = assert_valid_stream(events)
    assert not [e for e in wire if e["type"].startswith("TOOL_CALL")]
    assert result.tool_trace  # the call ran: only its events were filtered


async def test_two_concurrent_runs_never_share_transformers() -> None:
    made: list[SeesOneRun] = []

    def factory() -> list[SeesOneRun]:
        made.append(SeesOneRun())
        return made[-1:]

    agent = Agent(ScriptedModel(script() + script()), [add])
    await asyncio.gather(
        agent.run("1 + 2?", run_id="r1", transformers=factory),
        agent.run("1 + 2?", run_id="r2", transformers=factory),
    )
    assert sorted(t.runs[0] for t in made) == ["r1", "r2"]
    assert all(len(t.runs) == 1 for t in made)


@pytest.mark.parametrize(
    "wrong", [[FilterToolCalls.deny(["add"])], FilterToolCalls.deny(["add"])], ids=["list", "one"]
)
async def test_a_list_where_the_factory_belongs_is_refused(ctx: RunContext, wrong: Any) -> None:
    with pytest.raises(UsageError, match="factory"):
        await Agent(ScriptedModel(script()), [add]).run_in(ctx, "1 + 2?", transformers=wrong)
