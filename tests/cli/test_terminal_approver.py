"""`TerminalApprover` behind the run's `ApprovalBroker`: "always" for the shell covers one
exact command (whitespace aside), not the tool; the web is never "always". The broker
reads both from the tool's declarations (`command_of`, `EXTERNAL_SEND`), so each call
is approved with its tool."""

from __future__ import annotations

import asyncio
import io

from rich.console import Console

from tiller.cli._run import TerminalApprover
from tiller.conversation import ToolCall
from tiller.policy import ApprovalBroker, AskReason, Callback, Decision, RiskClass
from tiller.tools.builtin import execute_command_tool, web_fetch

SHELL = execute_command_tool()


class ScriptedLines:
    def __init__(self, lines: list[str]) -> None:
        self.lines = list(lines)

    async def ask(self) -> str:
        await asyncio.sleep(0)
        return self.lines.pop(0)


def shell(call_id: str, command: str) -> ToolCall:
    return ToolCall(id=call_id, name="execute_command", arguments=f'{{"command": "{command}"}}')


async def test_always_for_a_command_does_not_allow_other_commands() -> None:
    lines = ScriptedLines(["a", "n", ""])
    broker = ApprovalBroker(TerminalApprover(Console(file=io.StringIO()), lines))
    assert (await broker.approve(shell("c1", "make test"), SHELL)).allowed
    assert (await broker.approve(shell("c2", "make   test"), SHELL)).allowed  # not asked
    assert not (await broker.approve(shell("c3", "rm -rf build"), SHELL)).allowed
    assert lines.lines == []


async def test_the_web_is_never_approved_always() -> None:
    out = io.StringIO()
    lines = ScriptedLines(["a", "", "y"])
    broker = ApprovalBroker(TerminalApprover(Console(file=out, width=200), lines))
    fetch = ToolCall(id="c1", name="web_fetch", arguments='{"url": "https://example.org"}')
    assert not (await broker.approve(fetch, web_fetch)).allowed  # "a" is not offered: a no
    assert "[a]lways" not in out.getvalue()
    assert (await broker.approve(fetch, web_fetch)).allowed  # asked again
    assert lines.lines == []


async def test_the_prompt_shows_why_and_the_risk_with_control_characters_escaped() -> None:
    """Pins the break where the terminal prompt never said why it asked. The reason may
    quote what the model wrote, so its control characters are shown escaped: a model
    cannot clear or redraw the person's terminal through it."""
    out = io.StringIO()
    lines = ScriptedLines(["y"])
    broker = ApprovalBroker(TerminalApprover(Console(file=out, width=200), lines))
    why = AskReason("the command `\x1b[2Jrm -rf build` deletes files", RiskClass.DESTRUCTIVE)
    assert (await broker.ask(shell("c1", "rm -rf build"), None, why=why)).allowed
    shown = out.getvalue()
    assert "? allow execute_command(command='rm -rf build')? " in shown
    assert "why: the command `\\x1b[2Jrm -rf build` deletes files  (risk: destructive)" in shown
    assert "\x1b" not in shown
    assert lines.lines == []


async def test_a_prompt_without_a_reason_shows_no_why_line() -> None:
    out = io.StringIO()
    broker = ApprovalBroker(TerminalApprover(Console(file=out, width=200), ScriptedLines(["y"])))
    assert (await broker.approve(shell("c1", "make"), None)).allowed
    assert "why:" not in out.getvalue()


async def test_an_approver_that_takes_no_reason_is_still_asked() -> None:
    """The reason is offered, never required: a plain `Approver` (a callback) is asked as
    before when the broker has one."""
    asked: list[str] = []

    def approve(call: ToolCall, tool: object) -> Decision:
        asked.append(call.id)
        return Decision.allow()

    broker = ApprovalBroker(Callback(approve))
    assert (await broker.ask(shell("c1", "make"), None, why=AskReason("why", None))).allowed
    assert asked == ["c1"]
