"""`tiller demo`: the coding agent fixes a real bug in a bundled project, offline.

A scripted model plays the agent's part, so no network and no key are needed; everything
else is real: the run works on a private copy of `tiller/examples/invoice_project`. The
agent first plans a checklist (find the bug, fix it, verify), then reads the files, runs
the tests with a real shell (their output streams under the call), edits the code and
re-runs the tests, ticking the checklist off as it goes. Midway a steering message arrives
(as if typed by a person) and is folded into the next step. The run ends with a summary:
steps, tokens, stop cause, and the diff of what changed.
"""

from __future__ import annotations

import asyncio
import difflib
import re
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import orjson
from rich.console import Console
from rich.syntax import Syntax
from rich.text import Text

from ..conversation import AssistantMessage, ToolCall, UserMessage
from ..events import Event
from ..loop import Agent, Budget, Pricing, RunContext, RunControls
from ..model import ScriptedModel
from ..model.scripted import TurnInfo
from ..policy import Approver, Decision, PolicyEngine, PolicyRules
from ..tools import LiveSafetyMode, SafetyMode, Sandbox, Tool, coding_tools, private_copy
from ..tools.builtin import execute_command_tool, task_create, task_list, task_update
from ._run import LineRouter, TerminalApprover, with_tools
from ._view import RunView, budget_line

__all__ = [
    "CHECKLIST",
    "PROJECT",
    "SHELL_TOOL",
    "STEERING",
    "TASK",
    "demo_model",
    "demo_tools",
    "run_demo",
]

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


#: The shell tool the scripted agent calls.
SHELL_TOOL: Final = "execute_command"
#: The checklist the scripted agent plans first: find, fix, verify.
CHECKLIST: Final = (
    "Find why the invoice tests fail",
    "Fix the discount calculation",
    "Verify with the tests",
)
_TASK_LINE: Final = re.compile(r"^\[[ ~x]\] (t\d+) (.+)$")


def _steered(messages: Sequence[UserMessage | AssistantMessage]) -> bool:
    return any(isinstance(m, UserMessage) and STEERING in m.text for m in messages)


def _task_ids(messages: Sequence[UserMessage | AssistantMessage]) -> dict[str, str]:
    """The checklist's ids by subject, read from the latest task tool result. Empty when
    the run keeps no checklist: the agent then simply skips its updates."""
    for message in reversed(messages):
        if not isinstance(message, UserMessage):
            continue
        for result in reversed(message.tool_results):
            if result.name.startswith("task_") and not result.is_error:
                ids = {}
                for line in result.content.splitlines():
                    match = _TASK_LINE.match(line)
                    if match is not None:
                        ids[match.group(2)] = match.group(1)
                if ids:
                    return ids
    return {}


def _set_status(ids: dict[str, str], subject: str, status: str) -> list[dict[str, Any]]:
    """A `task_update` call, if the checklist has the task."""
    task_id = ids.get(subject)
    if task_id is None:
        return []
    return [{"name": "task_update", "arguments": {"id": task_id, "status": status}}]


def demo_model() -> ScriptedModel:
    """The scripted agent. Step 4 reads the conversation: it honours the steering message
    only if the loop really delivered it. Its checklist updates use the ids the task tools
    reported, so they follow whatever the checklist really holds."""
    test_command = f"{shlex.quote(sys.executable)} -m unittest -q"
    find, fix, verify = CHECKLIST

    def turn(messages: Sequence[UserMessage | AssistantMessage], info: TurnInfo) -> Any:
        ids = _task_ids(messages)
        if info.turn == 1:
            return {
                "reasoning": "Plan first: find the bug, fix it, verify the fix. Then look "
                "at what is in the project.",
                "text": "I'll plan the work as a checklist, then look at the project.",
                "tool_calls": [
                    *({"name": "task_create", "arguments": {"subject": s}} for s in CHECKLIST),
                    {"name": "list_dir", "arguments": {"path": "."}},
                ],
            }
        if info.turn == 2:
            return {
                "text": "Reading the code and its tests.",
                "tool_calls": [
                    *_set_status(ids, find, "in_progress"),
                    {"name": "read_file", "arguments": {"path": "invoice.py"}},
                    {"name": "read_file", "arguments": {"path": "test_invoice.py"}},
                ],
            }
        if info.turn == 3:
            return {
                "reasoning": "`total` subtracts the discount as an amount; the tests treat it "
                "as a percentage. Confirm with the tests before changing anything.",
                "text": "Running the tests to confirm.",
                "tool_calls": [{"name": SHELL_TOOL, "arguments": {"command": test_command}}],
            }
        if info.turn == 4:
            calls: list[dict[str, Any]] = [
                *_set_status(ids, find, "completed"),
                *_set_status(ids, fix, "in_progress"),
                {
                    "name": "edit_file",
                    "arguments": {"path": "invoice.py", "old": _BUG, "new": _FIX},
                },
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
                "tool_calls": [
                    *_set_status(ids, fix, "completed"),
                    *_set_status(ids, verify, "in_progress"),
                    {"name": SHELL_TOOL, "arguments": {"command": test_command}},
                ],
            }
        tests = _last_shell_output(messages)
        if info.turn == 6 and _tests_pass(tests) and verify in ids:
            return {
                "text": "All tests pass.",
                "tool_calls": _set_status(ids, verify, "completed"),
            }
        added = any(
            isinstance(m, AssistantMessage)
            and any(
                c.name == "edit_file" and "test_invoice.py" in c.arguments for c in m.tool_calls
            )
            for m in messages
        )
        steered = ", plus a new test that a 100% discount makes the invoice free" if added else ""
        if not _tests_pass(tests):
            last_line = (tests.strip().splitlines() or ["no output"])[-1]
            return f"I changed the discount, but the tests still do not pass ({last_line})."
        return (
            "Fixed: `total` now applies `discount_percent` as a percentage before tax, "
            f"and all tests pass{steered}."
        )

    return ScriptedModel(turn, name="demo-coder")


def demo_tools() -> list[Tool]:
    """The coding tools and the checklist tools. The shell's sandbox also shows this
    Python's installation, which it would otherwise hide, so the tests run with the same
    interpreter."""
    shell = execute_command_tool(Sandbox(ro_binds=Sandbox.python_paths()))
    tools = [tool for tool in coding_tools() if tool.name != SHELL_TOOL]
    return with_tools(tools, [shell, task_create, task_update, task_list])


#: The demo's policy: everything allowed (a private copy of a bundled project), except
#: that an edit of the project's code asks a person first — so the demo shows an approval.
DEMO_POLICY: Final = {
    "mode": "full_access",
    "rules": [{"action": "ask", "tool": "edit_file", "path": "invoice.py"}],
}


class ScriptedDemoApprover:
    """Away from a terminal the demo cannot ask anyone: it prints the held call, then
    approves it on the person's behalf, so the demo finishes."""

    def __init__(self, console: Console) -> None:
        self._console = console

    async def approve(self, call: ToolCall, tool: Any) -> Decision:
        self._console.print(Text("⏸ held for approval: ", style="bold yellow") + Text(_shown(call)))
        self._console.print(
            Text(
                "  (no terminal to ask you on: the demo's scripted approver approves it; "
                "`tiller run` without a terminal would hold it for `tiller approve`)",
                style="dim",
            )
        )
        return Decision.allow()


def _shown(call: ToolCall) -> str:
    try:
        arguments = orjson.loads(call.arguments)
    except orjson.JSONDecodeError:
        return f"{call.name}({call.arguments})"
    if not isinstance(arguments, dict):
        return f"{call.name}({call.arguments})"
    shown = ", ".join(f"{key}={value!r}" for key, value in arguments.items())
    return f"{call.name}({shown if len(shown) <= 160 else shown[:159] + '…'})"


async def run_demo(
    *,
    console: Console | None = None,
    steer: bool = True,
    keep: bool = False,
    interactive: bool | None = None,
) -> int:
    """Run the demo; returns a process exit code (0 when the fix landed and tests pass).

    On a terminal the edit of the project's code is asked of you (y / a / n); elsewhere
    the held call is printed and the demo's scripted approver approves it."""
    console = console or Console(highlight=False)
    interactive = sys.stdin.isatty() if interactive is None else interactive
    jail = private_copy(PROJECT)
    budget = Budget(
        max_steps=20,
        max_output_tokens=20_000,
        max_cost_usd=1.0,
        pricing={"scripted:demo-coder": Pricing(input=3.0, output=15.0)},
    )
    approver: Approver = ScriptedDemoApprover(console)
    # The run's live parts, passed on (law 13): the steering a person types reaches it
    # through every context derived below.
    controls = RunControls(budget=budget, safety=LiveSafetyMode(SafetyMode.FULL_ACCESS))
    run_ctx = (
        RunContext(jail=jail)
        .with_controls(controls)
        .with_policy(PolicyEngine(PolicyRules.from_config(DEMO_POLICY), workspace=jail.root))
    )
    if interactive:
        lines = LineRouter(asyncio.get_running_loop(), controls.steering)
        lines.start()
        approver = TerminalApprover(console, lines)
    run_ctx = run_ctx.with_approver(approver)
    agent = Agent(demo_model(), demo_tools(), system_prompt=SYSTEM_PROMPT, name="coder")
    view = RunView(console, budget=budget)
    steps = 0

    def on_event(event: Event) -> None:
        nonlocal steps
        view.on_event(event)
        if event.type == "STEP_FINISHED":
            steps += 1
            if steer and steps == 3:
                console.print(Text(f"(a person types) {STEERING}", style="magenta"))
                controls.steering.push(STEERING)

    console.rule("[bold]tiller demo: a coding agent on a private copy of a small project")
    console.print(Text(f"workspace {jail.root}", style="dim"))
    console.print(Text("task ", style="bold") + Text(TASK))
    try:
        result = await agent.run_in(run_ctx, TASK, on_event=on_event, run_id="demo")
        console.rule("[bold]summary")
        console.print(f"stop cause  {result.stop_cause.value}")
        console.print(f"steps       {result.steps}")
        console.print(
            f"tokens      {result.usage.input_tokens:,} in / {result.usage.output_tokens:,} out"
        )
        console.print(budget_line(budget).strip(" ─"))
        diff = _diff(PROJECT, jail.root)
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
            shutil.rmtree(jail.root, ignore_errors=True)


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
                if tool_result.name == SHELL_TOOL:
                    return tool_result.content
    return ""


def _tests_pass(output: str) -> bool:
    """unittest's verdict: `OK` on its own line, and exit code 0."""
    lines = [line.strip() for line in output.splitlines()]
    return (
        any(line == "OK" or line.startswith("OK (") for line in lines) and "[exit code 0]" in output
    )
