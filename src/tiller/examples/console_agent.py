"""An offline agent to try `tiller serve` and its web console with, no model needed.

Its model is scripted by what you type, so every feature of a served run can be tried
from the page (and is, by the server's tests):

- `write notes.txt: some text`: plans a task, writes the file (a write asks for approval:
  approve, approve always, deny, or edit the arguments), then ticks the task off;
- `ask`: asks you a question (the question interrupt);
- `slow 5`: works for five steps, a second each, saying what steering it heard (steer it
  from the box while it works, or cancel it);
- `client`: calls the first tool the page offered (a frontend tool), and goes on once the
  page sends the result;
- `think`: reasons before it answers (a collapsible block);
- `delegate`: hands a look around the workspace to a subagent (a nested segment);
- `build 5`: runs a five-line build, its output showing live as it comes;
- `compact`: works a few steps, then its history is compacted (a notice says so);
- anything else: echoed back.

```sh
tiller serve tiller.examples.console_agent:agent --no-auth
```

`make_agent(step_delay=...)` builds one with another pace (the load benchmark uses 20 ms).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

from tiller.conversation import AssistantMessage, UserMessage
from tiller.loop import Agent
from tiller.model.scripted import ScriptedModel, TurnInfo
from tiller.tools import ExecContext, Tool, tool
from tiller.tools.builtin import (
    agent as agent_tool,
)
from tiller.tools.builtin import (
    ask_user,
    list_dir,
    read_file,
    task_create,
    task_update,
    write_file,
)

__all__ = ["agent", "make_agent"]

_WRITE = re.compile(r"^\s*write\s+([^:]+):\s*(.*)$", re.IGNORECASE | re.DOTALL)
_SLOW = re.compile(r"^\s*slow(?:\s+(\d+))?\s*$", re.IGNORECASE)
_BUILD = re.compile(r"^\s*build(?:\s+(\d+))?\s*$", re.IGNORECASE)
#: The brief `delegate` gives its subagent; the subagent's turns are recognised by it.
_SUBAGENT_BRIEF = "Look around the workspace and say what is there."
#: Where the demo compacts (estimated prompt tokens): far above what any other script
#: reaches, so only `compact`, which reports a prompt over it, sets it off.
COMPACT_AT_TOKENS = 50_000

Conversation = Sequence[UserMessage | AssistantMessage]


def make_agent(*, step_delay: float = 1.0, first_delay: float = 0.0) -> Agent:
    """The console agent; `step_delay` paces `slow`, `first_delay` every first turn."""
    tools: list[Tool] = [
        read_file,
        list_dir,
        task_create,
        task_update,
        ask_user,
        write_file,
        agent_tool,
        _build_tool(step_delay),
    ]

    # The page's own tools are the ones offered beyond these (`client` calls the first).
    own = frozenset(each.name for each in tools)

    def turn(messages: Conversation, info: TurnInfo) -> Any:
        return _turn(messages, info, step_delay=step_delay, first_delay=first_delay, own=own)

    return Agent(
        ScriptedModel(turn, name="console-script"),
        tools,
        system_prompt="You are the tiller console's offline demo agent.",
        name="console-demo",
        ref="tiller.examples.console_agent:agent",
        config={"compact_at_tokens": COMPACT_AT_TOKENS},
    )


def _build_tool(pace: float) -> Tool:
    """`build`: a long command stand-in that reports its output line by line as it runs,
    as `execute_command` does (`tiller.progress` events of kind `output`), with no shell."""

    @tool(read_only=True)
    async def build(lines: int = 3, dry_run: bool = False, *, ctx: ExecContext) -> str:
        """Build the project, printing a line per stage; returns the whole log.

        Args:
            lines: How many stages to run.
            dry_run: Print the stages without waiting for them.
        """
        log = []
        for n in range(1, lines + 1):
            line = f"[{n}/{lines}] compiling module_{n}.py"
            log.append(line)
            ctx.progress.output(line + "\n")
            ctx.progress.status(f"stage {n} of {lines}", n / lines)
            if not dry_run:
                await asyncio.sleep(pace)
        return "\n".join([*log, f"build ok: {lines} stages"])

    return build


def _turn(
    messages: Conversation,
    info: TurnInfo,
    *,
    step_delay: float,
    first_delay: float,
    own: frozenset[str],
) -> Any:
    request, since = _request(messages)
    prefix = f"c{len(messages)}"
    delay = first_delay if since == 0 else 0.0
    text = request.text.strip() if request is not None else ""
    write = _WRITE.match(text)
    if write is not None:
        return _write_steps(write.group(1).strip(), write.group(2), since, prefix, delay)
    slow = _SLOW.match(text)
    if slow is not None:
        return _slow_steps(int(slow.group(1) or 3), messages, since, prefix, step_delay)
    if _SUBAGENT_BRIEF in text:
        return _subagent_steps(since, prefix)
    build = _BUILD.match(text)
    if build is not None:
        return _build_steps(int(build.group(1) or 3), since, prefix, delay)
    lowered = text.lower()
    if lowered == "delegate":
        return _delegate_steps(messages, since, prefix, delay)
    if lowered == "compact":
        return _compact_steps(since, prefix, delay)
    if lowered == "ask":
        return _ask_steps(messages, since, prefix, delay)
    if lowered == "client":
        return _client_steps(messages, info, since, prefix, delay, own=own)
    if lowered == "think":
        return {
            "reasoning": [{"text": "The person wants to see me think. I will, briefly."}],
            "text": "Thought about it: all is well.",
            "delay": delay,
        }
    return {
        "text": f"You said: {text}" if text else "Hello! Type `write a.txt: hi`.",
        "delay": delay,
    }


def _request(messages: Conversation) -> tuple[UserMessage | None, int]:
    """The person's latest request (the last user message with text of its own, not a
    steer folded into tool results) and how many model turns were taken since."""
    since = 0
    for message in reversed(messages):
        if isinstance(message, AssistantMessage):
            since += 1
        elif message.text and not message.tool_results:
            return message, since
    return None, since


def _write_steps(path: str, content: str, since: int, prefix: str, delay: float) -> Any:
    if since == 0:
        return {
            "tool_calls": [
                {
                    "id": f"{prefix}-0",
                    "name": "task_create",
                    "arguments": {"subject": f"Write {path}"},
                }
            ],
            "delay": delay,
        }
    if since == 1:
        return {
            "text": f"Writing {path}.",
            "tool_calls": [
                {
                    "id": f"{prefix}-0",
                    "name": "write_file",
                    "arguments": {"path": path, "content": content},
                }
            ],
        }
    if since == 2:
        return {
            "tool_calls": [
                {
                    "id": f"{prefix}-0",
                    "name": "task_update",
                    "arguments": {"id": "t1", "status": "completed"},
                }
            ]
        }
    return f"Done: {path} is written."


def _slow_steps(steps: int, messages: Conversation, since: int, prefix: str, pace: float) -> Any:
    heard = _steers(messages)
    if since < steps:
        said = f"Step {since + 1} of {steps}."
        if heard:
            said += f" Heard: {heard[-1]}."
        return {
            "text": said,
            "tool_calls": [{"id": f"{prefix}-0", "name": "list_dir", "arguments": {"path": "."}}],
            "delay": pace,
        }
    return "Finished all steps." + (f" Steering I heard: {'; '.join(heard)}." if heard else "")


def _delegate_steps(messages: Conversation, since: int, prefix: str, delay: float) -> Any:
    if since == 0:
        return {
            "text": "Asking a helper to look around.",
            "tool_calls": [
                {
                    "id": f"{prefix}-0",
                    "name": "agent",
                    "arguments": {
                        "description": "Look around the workspace",
                        "prompt": _SUBAGENT_BRIEF,
                        "subagent_type": "explore",
                    },
                }
            ],
            "delay": delay,
        }
    return "The helper has looked around; see its report above."


def _subagent_steps(since: int, prefix: str) -> Any:
    """The subagent `delegate` starts: lists the workspace, then reports."""
    if since == 0:
        return {
            "text": "Listing the workspace.",
            "tool_calls": [{"id": f"{prefix}-0", "name": "list_dir", "arguments": {"path": "."}}],
        }
    return "The workspace is listed: nothing surprising."


def _build_steps(lines: int, since: int, prefix: str, delay: float) -> Any:
    if since == 0:
        return {
            "text": "Building.",
            "tool_calls": [{"id": f"{prefix}-0", "name": "build", "arguments": {"lines": lines}}],
            "delay": delay,
        }
    return "The build passed."


def _compact_steps(since: int, prefix: str, delay: float) -> Any:
    """Three identical dry-run builds (the later logs supersede the earlier), the last reporting
    a prompt over the threshold, so the next step compacts first."""
    if since < 3:
        turn: dict[str, Any] = {
            "text": f"Looking, pass {since + 1}.",
            "tool_calls": [
                {
                    "id": f"{prefix}-0",
                    "name": "build",
                    "arguments": {"lines": 20, "dry_run": True},
                }
            ],
            "delay": delay if since == 0 else 0.0,
        }
        if since == 2:
            turn["usage"] = {"input_tokens": COMPACT_AT_TOKENS + 1, "output_tokens": 10}
        return turn
    return "Carried on after compacting."


def _ask_steps(messages: Conversation, since: int, prefix: str, delay: float) -> Any:
    if since == 0:
        question = {
            "header": "Color",
            "question": "Which color should the report use?",
            "options": [
                {"label": "red", "description": "warm", "recommended": True},
                {"label": "blue", "description": "calm"},
            ],
        }
        return {
            "tool_calls": [
                {"id": f"{prefix}-0", "name": "ask_user", "arguments": {"questions": [question]}}
            ],
            "delay": delay,
        }
    last = messages[-1]
    answer = (
        last.tool_results[0].content if isinstance(last, UserMessage) and last.tool_results else ""
    )
    return f"Thanks. {answer}"


def _client_steps(
    messages: Conversation,
    info: TurnInfo,
    since: int,
    prefix: str,
    delay: float,
    *,
    own: frozenset[str],
) -> Any:
    if since == 0:
        offered = [spec.name for spec in info.tools if spec.name not in own]
        if not offered:
            return {"text": "The page offered no tool of its own.", "delay": delay}
        return {
            "tool_calls": [
                {"id": f"{prefix}-0", "name": offered[0], "arguments": {"reason": "demo"}}
            ],
            "delay": delay,
        }
    last = messages[-1]
    result = (
        last.tool_results[0].content if isinstance(last, UserMessage) and last.tool_results else ""
    )
    return f"The page answered: {result}"


def _steers(messages: Conversation) -> list[str]:
    """Steering text folded into tool-result turns since the latest request."""
    heard: list[str] = []
    for message in reversed(messages):
        if isinstance(message, UserMessage):
            if message.text and not message.tool_results:
                break
            if message.text:
                heard.append(message.text)
    return list(reversed(heard))


#: The agent `tiller serve tiller.examples.console_agent:agent` serves.
agent = make_agent()
