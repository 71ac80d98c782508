"""`tiller demo`: the coding agent fixes a real bug in a bundled project, offline.

A scripted model plays the agent's part, so no network and no key are needed; everything
else is real: the run works on a private copy of `tiller/examples/invoice_project`, reads
its files, runs its tests with a real shell, edits the code, and re-runs the tests. Midway
a steering message arrives (as if typed by a person) and is folded into the next turn.
The run ends with a summary: turns, tokens, stop cause, and the diff of what changed.
"""

from __future__ import annotations

import difflib
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.syntax import Syntax
from rich.text import Text

from ..conversation import AssistantMessage, UserMessage
from ..events import Event
from ..loop import Agent, Budget, Pricing, RunContext
from ..model import ScriptedModel
from ..model.scripted import TurnInfo
from ..policy import AllowAll
from ..tools import coding_tools, private_copy
from ._view import RunView, budget_line

__all__ = ["PROJECT", "STEERING", "TASK", "demo_model", "run_demo"]

PROJECT = Path(__file__).resolve().parents[1] / "examples" / "invoice_project"
TASK = "The invoice tests fail. Find out why and fix the code, then show me the tests pass."
STEERING = "Please also add a test that a 100% discount makes the invoice free."
SYSTEM_PROMPT = (
    "You are a careful coding agent working in a project directory. Read before you "
    "edit, run the tests to confirm a bug and its fix, and keep changes small."
)

_BUG = "    amount = amount - discount_percent\n"
_FIX = "    amount = amount * (1 - discount_percent / 100)\n"
_LAST_TEST = (
    '        self.assertEqual(total([Item("desk", 200.0)], discount_percent=10, '
    "tax_percent=25), 225.0)\n"
)
_NEW_TEST = (
    _LAST_TEST
    + "\n    def test_full_discount_is_free(self):\n"
    + '        self.assertEqual(total([Item("desk", 200.0)], discount_percent=100, '
    "tax_percent=25), 0.0)\n"
)


def _steered(messages: Sequence[UserMessage | AssistantMessage]) -> bool:
    return any(isinstance(m, UserMessage) and STEERING in m.text for m in messages)


def demo_model() -> ScriptedModel:
    """The scripted agent. Turn 4 reads the conversation: it honours the steering message
    only if the loop really delivered it."""
    test_command = f"{shlex.quote(sys.executable)} -m unittest -q"

    def turn(messages: Sequence[UserMessage | AssistantMessage], info: TurnInfo) -> Any:
        if info.turn == 1:
            return {
                "reasoning": "Start by looking at what is in the project.",
                "text": "I'll look at the project first.",
                "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}],
            }
        if info.turn == 2:
            return {
                "text": "Reading the code and its tests.",
                "tool_calls": [
                    {"name": "read_file", "arguments": {"path": "invoice.py"}},
                    {"name": "read_file", "arguments": {"path": "test_invoice.py"}},
                ],
            }
        if info.turn == 3:
            return {
                "reasoning": "`total` subtracts the discount as an amount; the tests treat it "
                "as a percentage. Confirm with the tests before changing anything.",
                "text": "Running the tests to confirm.",
                "tool_calls": [{"name": "run_shell", "arguments": {"command": test_command}}],
            }
        if info.turn == 4:
            calls: list[dict[str, Any]] = [
                {"name": "edit_file", "arguments": {"path": "invoice.py", "old": _BUG, "new": _FIX}}
            ]
            text = "Two tests fail: the discount is subtracted as an amount, not a percentage."
            if _steered(messages):
                text += " And as you asked, I'm adding a test for a 100% discount."
                calls.append(
                    {
                        "name": "edit_file",
                        "arguments": {
                            "path": "test_invoice.py",
                            "old": _LAST_TEST,
                            "new": _NEW_TEST,
                        },
                    }
                )
            return {"text": text, "tool_calls": calls}
        if info.turn == 5:
            return {
                "text": "Re-running the tests.",
                "tool_calls": [{"name": "run_shell", "arguments": {"command": test_command}}],
            }
        added = any(
            isinstance(m, AssistantMessage)
            and any(
                c.name == "edit_file" and "test_invoice.py" in c.arguments for c in m.tool_calls
            )
            for m in messages
        )
        steered = ", plus a new test that a 100% discount makes the invoice free" if added else ""
        tests = _last_shell_output(messages)
        if not _tests_pass(tests):
            last_line = (tests.strip().splitlines() or ["no output"])[-1]
            return f"I changed the discount, but the tests still do not pass ({last_line})."
        return (
            "Fixed: `total` now applies `discount_percent` as a percentage before tax, "
            f"and all tests pass{steered}."
        )

    return ScriptedModel(turn, name="demo-coder")


async def run_demo(
    *, console: Console | None = None, steer: bool = True, keep: bool = False
) -> int:
    """Run the demo; returns a process exit code (0 when the fix landed and tests pass)."""
    console = console or Console(highlight=False)
    tools = private_copy(PROJECT)
    budget = Budget(
        max_turns=20,
        max_output_tokens=20_000,
        max_cost_usd=1.0,
        pricing={"scripted:demo-coder": Pricing(input=3.0, output=15.0)},
    )
    run_ctx = RunContext(tools=tools, approver=AllowAll(), budget=budget)
    agent = Agent(demo_model(), coding_tools(), system_prompt=SYSTEM_PROMPT, name="coder")
    view = RunView(console, budget=budget)
    steps = 0

    def on_event(event: Event) -> None:
        nonlocal steps
        view.on_event(event)
        if event.type == "STEP_FINISHED":
            steps += 1
            if steer and steps == 3:
                console.print(Text(f"(a person types) {STEERING}", style="magenta"))
                run_ctx.queued_input.push(STEERING)

    console.rule("[bold]tiller demo: a coding agent on a private copy of a small project")
    console.print(Text(f"workspace {tools.root}", style="dim"))
    console.print(Text("task ", style="bold") + Text(TASK))
    try:
        result = await agent.run_in(run_ctx, TASK, on_event=on_event, run_id="demo")
        console.rule("[bold]summary")
        console.print(f"stop cause  {result.stop_cause.value}")
        console.print(f"turns       {result.turns}")
        console.print(
            f"tokens      {result.usage.input_tokens:,} in / {result.usage.output_tokens:,} out"
        )
        console.print(budget_line(budget).strip(" ─"))
        diff = _diff(PROJECT, tools.root)
        console.print("files changed:" if diff else "no files changed")
        if diff:
            console.print(
                Syntax(diff, "diff", theme="ansi_dark", background_color="default", word_wrap=True)
            )
        passed = (
            result.completed
            and diff != ""
            and _tests_pass(_last_shell_output(result.state.messages))
        )
        return 0 if passed else 1
    finally:
        if not keep:
            shutil.rmtree(tools.root, ignore_errors=True)


def _diff(before: Path, after: Path) -> str:
    chunks: list[str] = []
    for original in sorted(before.rglob("*")):
        if not original.is_file() or "__pycache__" in original.parts:
            continue
        relative = original.relative_to(before)
        changed = after / relative
        old = original.read_text().splitlines(keepends=True)
        new = changed.read_text().splitlines(keepends=True) if changed.exists() else []
        if old != new:
            chunks.extend(difflib.unified_diff(old, new, f"a/{relative}", f"b/{relative}"))
    return "".join(chunks)


def _last_shell_output(messages: Sequence[UserMessage | AssistantMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, UserMessage):
            for tool_result in message.tool_results:
                if tool_result.name == "run_shell":
                    return tool_result.content
    return ""


def _tests_pass(output: str) -> bool:
    """unittest's verdict: `OK` on its own line, and exit code 0."""
    lines = [line.strip() for line in output.splitlines()]
    return (
        any(line == "OK" or line.startswith("OK (") for line in lines) and "[exit code 0]" in output
    )
