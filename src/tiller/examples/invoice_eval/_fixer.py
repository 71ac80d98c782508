"""The invoice eval's agent: a scripted coding agent that fixes one seeded bug.

It is a stand-in for a model, and it cheats the way a stand-in may: it knows the pristine
`invoice.py` (`pristine_file`), so it can tell which lines were changed. What it knows
ends there: it is not told the case's bug, it sees the case's copy only through the real
tools (the sandboxed shell runs the tests, `read_file` reads the file, `edit_file` makes
the edit, each through the case's policy and approver), and the eval scores what those
tools left in the copy, so a pass is a real fix.

Turn by turn, from what the conversation holds: run the tests; if they fail, read
`invoice.py`; compare it with the pristine file and repair the *first* stretch of changed
lines with one `edit_file`; run the tests again; report what they say. Like a modest
model, it has limits, and the eval's scorecard shows them honestly:

- **It repairs only lines that were changed, not lines that went missing.** Where the
  file has fewer or more lines than it expects, it cannot tell which line is wrong, and
  it gives up without editing (case `clamp-removed`).
- **It makes one edit.** A bug in two places is half fixed; the second run of the tests
  still fails and it says so (case `bulk-both-tiers-off-by-one`).
- **Its edit quotes only the changed line.** Where that line occurs twice in the file,
  `edit_file` refuses the ambiguous edit, and it stops (case `bulk-tier-rate-duplicated`).
- **It needs its steps.** Running the tests, reading, editing and re-running are a step
  each, then it answers; a case whose budget allows fewer is stopped part way (case
  `page-count-floor`, held to 2 steps: stopped after reading, before any edit).
"""

from __future__ import annotations

import difflib
import re
import shlex
import sys
from collections.abc import Sequence
from typing import Any, Final

from ...conversation import AssistantMessage, ToolResult, UserMessage
from ...loop import Agent
from ...model import ScriptedModel, TurnInfo
from ...tools import Sandbox, Tool, coding_tools
from ...tools.builtin import execute_command_tool
from ._fixtures import pristine_file

__all__ = [
    "FIXER_SYSTEM_PROMPT",
    "SHELL_TOOL",
    "TARGET_FILE",
    "invoice_fixer_agent",
    "invoice_fixer_model",
    "invoice_fixer_tools",
    "test_command",
]

#: The shell tool the agent runs the tests with.
SHELL_TOOL: Final = "execute_command"
#: The file the agent reads and repairs.
TARGET_FILE: Final = "invoice.py"
FIXER_SYSTEM_PROMPT: Final = (
    "You are a careful coding agent working in a project directory. Run the tests to see "
    "the bug, read the code before you edit it, keep the change small, and run the tests "
    "again to show the fix."
)
_NUMBERED_LINE: Final = re.compile(r"^\s*(\d+)\t(.*)$")


def test_command() -> str:
    """The project's tests, with this interpreter (its installation is bound into the
    sandbox; see `invoice_fixer_tools`): unittest, so nothing beyond Python is needed;
    `-B`, so no bytecode is left in the copy and its diff shows only the agent's edit."""
    return f"{shlex.quote(sys.executable)} -B -m unittest -q"


def invoice_fixer_tools() -> list[Tool]:
    """The built-in coding tools, with a shell whose bubblewrap sandbox also shows this
    Python's installation read-only (it hides the host's otherwise), so the tests run."""
    shell = execute_command_tool(Sandbox(ro_binds=Sandbox.python_paths()))
    return [*(tool for tool in coding_tools() if tool.name != SHELL_TOOL), shell]


def invoice_fixer_agent() -> Agent:
    """A fresh agent for one case run (`tiller.examples.invoice_eval:invoice_fixer_agent`
    names it, for an eval spec or a fleet worker)."""
    return Agent(
        invoice_fixer_model(pristine_file(TARGET_FILE)),
        invoice_fixer_tools(),
        system_prompt=FIXER_SYSTEM_PROMPT,
        name="invoice-fixer",
    )


def invoice_fixer_model(pristine: str) -> ScriptedModel:
    """The scripted model (see the module docstring); `pristine` is the text of the
    `invoice.py` it expects."""
    command = test_command()
    expected = pristine.splitlines(keepends=True)

    def turn(messages: Sequence[UserMessage | AssistantMessage], info: TurnInfo) -> Any:
        results = [r for m in messages if isinstance(m, UserMessage) for r in m.tool_results]
        test_runs = [r for r in results if r.name == SHELL_TOOL]
        reads = [r for r in results if r.name == "read_file"]
        edits = [r for r in results if r.name == "edit_file"]
        if not test_runs:
            return _call("Running the tests first, to see what fails.", SHELL_TOOL, command=command)
        if not edits:
            if not reads:
                if _tests_pass(test_runs[-1]):
                    return "The tests already pass; I found nothing to fix."
                failing = _failing_tests(test_runs[-1].content)
                said = f"These tests fail: {', '.join(failing)}." if failing else "Tests fail."
                return _call(f"{said} Reading {TARGET_FILE}.", "read_file", path=TARGET_FILE)
            return _repair(expected, reads[-1])
        if edits[-1].is_error:
            reason = (edits[-1].content.strip().splitlines() or ["no reason given"])[0]
            return f"My edit of {TARGET_FILE} was refused ({reason}). I am stopping without a fix."
        if len(test_runs) < 2:
            return _call("Running the tests again.", SHELL_TOOL, command=command)
        if _tests_pass(test_runs[-1]):
            return f"Fixed the bug in {TARGET_FILE}; all tests pass."
        return (
            f"I changed {TARGET_FILE}, but the tests still fail ({_verdict(test_runs[-1])}). "
            "I am stopping here."
        )

    return ScriptedModel(turn, name="invoice-fixer")


def _repair(expected: list[str], read: ToolResult) -> Any:
    """The edit that repairs the first changed stretch of lines, or the text giving up."""
    if read.is_error:
        return f"I could not read {TARGET_FILE} ({read.content.strip()[:200]}); I am stopping."
    current = _file_lines(read.content)
    matcher = difflib.SequenceMatcher(None, current, expected, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag != "replace" or i2 - i1 != j2 - j1:
            return (
                f"Around line {i1 + 1} of {TARGET_FILE} something is missing or extra, and I "
                "cannot tell which line is wrong; I am not going to edit blindly."
            )
        old, new = "".join(current[i1:i2]), "".join(expected[j1:j2])
        return _call(
            f"Line {i1 + 1} looks wrong: `{old.strip()}` should be `{new.strip()}`.",
            "edit_file",
            path=TARGET_FILE,
            old=old,
            new=new,
        )
    return f"{TARGET_FILE} reads as I expect it to; I cannot find the bug."


def _file_lines(numbered: str) -> list[str]:
    """The file's lines (with their newlines) from `read_file`'s numbered listing."""
    return [m.group(2) + "\n" for m in map(_NUMBERED_LINE.match, numbered.splitlines()) if m]


def _call(text: str, name: str, **arguments: str) -> dict[str, Any]:
    return {"text": text, "tool_calls": [{"name": name, "arguments": arguments}]}


def _tests_pass(run: ToolResult) -> bool:
    """unittest's verdict: `OK` on its own line, and exit code 0."""
    lines = [line.strip() for line in run.content.splitlines()]
    ok = any(line == "OK" or line.startswith("OK (") for line in lines)
    return not run.is_error and ok and "[exit code 0]" in run.content


def _verdict(run: ToolResult) -> str:
    """unittest's summary line (`FAILED (failures=1)`), else the output's last line."""
    lines = [line.strip() for line in run.content.splitlines() if line.strip()]
    summary = [line for line in lines if line.startswith(("FAILED", "OK"))]
    return (summary or lines or ["no output"])[-1]


def _failing_tests(output: str) -> list[str]:
    """The names unittest gives the tests that failed or erred."""
    found = re.findall(r"^(?:FAIL|ERROR): (\w+)", output, flags=re.MULTILINE)
    return list(dict.fromkeys(found))
