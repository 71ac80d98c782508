"""`TerminalApprover`: "always" for the shell covers one exact command, not the tool."""

from __future__ import annotations

import asyncio
import io

from rich.console import Console

from tiller.cli._run import TerminalApprover
from tiller.conversation import ToolCall


class ScriptedLines:
    def __init__(self, lines: list[str]) -> None:
        self.lines = list(lines)

    async def ask(self) -> str:
        await asyncio.sleep(0)
        return self.lines.pop(0)


async def test_always_for_a_command_does_not_allow_other_commands() -> None:
    lines = ScriptedLines(["a", "n", ""])
    approver = TerminalApprover(Console(file=io.StringIO()), lines)

    def shell(call_id: str, command: str) -> ToolCall:
        return ToolCall(id=call_id, name="execute_command", arguments=f'{{"command": "{command}"}}')

    assert (await approver.approve(shell("c1", "make test"), None)).allowed
    assert (await approver.approve(shell("c2", "make test"), None)).allowed  # not asked
    assert not (await approver.approve(shell("c3", "rm -rf build"), None)).allowed
    assert lines.lines == []
