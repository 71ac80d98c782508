"""Background work through a whole run, under the real sandbox: a command sent to the
background reports its result at a later step, and cancelling the run kills it."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from tiller.cancel import CancellationToken
from tiller.conversation import UserMessage
from tiller.events import Event
from tiller.loop import Agent, RunContext
from tiller.model import ScriptedModel
from tiller.state import StopCause
from tiller.tools import ExecContext, ToolError, tool
from tiller.tools.builtin import background_process, execute_command

sys.path.insert(0, str(Path(__file__).parent.parent / "tools"))
from shell_support import (
    SANDBOX_MISSING,
    SANDBOX_REASON,
    gone,
    marked,
    new_mark,
    sleeper,
)

from ._support import drive

pytestmark = pytest.mark.skipif(SANDBOX_MISSING, reason=SANDBOX_REASON)


@tool(read_only=True)
async def release(ctx: ExecContext) -> str:
    """Let the background build finish, and wait until its note is posted."""
    await asyncio.to_thread((ctx.workdir / "go").touch)
    notify = ctx.notify
    if notify is None:
        raise ToolError("no notify channel")
    async with asyncio.timeout(30):  # a hang guard, not a timing check
        while not notify:  # noqa: ASYNC110 - the note comes from another task, by design
            await asyncio.sleep(0.01)
    return "released"


async def test_a_backgrounded_command_reports_at_a_later_turn(ctx: RunContext) -> None:
    build = "until [ -e go ]; do sleep 0.01; done; echo built-ok"
    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "execute_command", "arguments": {"command": build, "background": True}}
                ]
            },
            {"tool_calls": [{"name": "release"}]},
            "The build finished.",
        ]
    )
    agent = Agent(model, [execute_command, background_process, release])
    run = await drive(agent, "build it", ctx)
    assert run.result.stop_cause is StopCause.COMPLETED
    started = run.results()[0].content
    assert "bg-1" in started and "background" in started
    # Turn 2's request has no note yet: the command was still waiting.
    assert "[background work" not in str(model.requests[1].messages[-1])
    # Turn 3's request carries it, folded into the message with release's result.
    last = model.requests[2].messages[-1]
    assert isinstance(last, UserMessage) and last.tool_results[0].content == "released"
    assert "[background work: bg-1] exited with code 0" in last.text
    assert "built-ok" in last.text
    notes = run.custom("tiller.notice")
    assert [note["source"] for note in notes] == ["bg-1"]


async def test_cancelling_the_run_kills_its_background_commands(ctx: RunContext) -> None:
    mark = new_mark()
    token = CancellationToken()
    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {
                        "name": "execute_command",
                        "arguments": {
                            "command": sleeper(mark) + "echo sleeper-up; wait",
                            "background": True,
                        },
                    }
                ]
            },
            {
                "tool_calls": [
                    {
                        "name": "background_process",
                        "arguments": {"action": "wait", "id": "bg-1", "pattern": "sleeper-up"},
                    }
                ]
            },
            {"tool_calls": [{"name": "execute_command", "arguments": {"command": "sleep 1000"}}]},
            "never",
        ]
    )
    seen_pids: list[int] = []

    def on_event(event: Event) -> None:
        # Once the third call starts, the first command is certainly up: note it, cancel.
        if event.type == "TOOL_CALL_START" and len(model.requests) == 3:
            seen_pids.extend(marked(mark))
            token.cancel("the user pressed stop")

    agent = Agent(model, [execute_command, background_process])
    run = await drive(agent, "go", ctx.with_cancel(token), on_event=on_event)
    assert run.result.stop_cause is StopCause.CANCELLED
    assert seen_pids, "the background command was not running when the run was cancelled"
    async with asyncio.timeout(10):  # reaping the tree: a hang guard, not a timing check
        while not all(gone(pid) for pid in seen_pids):  # noqa: ASYNC110 - other processes
            await asyncio.sleep(0.01)
    assert marked(mark) == []
