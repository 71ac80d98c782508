"""`agent`: the model hands a self-contained task to a subagent and gets its report back.

The tool only asks; the run does the work. `ctx.subagents` (the loop's `Subagents`) starts
a child run of the requested type — `general` (the agent's tools), `explore` (its read-only
tools), or a type the workspace defines in `tiller.toml` — in the same jail, on the same
budget, under a child of the run's cancel token, with its events inside the parent's
stream between `SUBAGENT_STARTED` and `SUBAGENT_FINISHED` / `SUBAGENT_ERROR`. What comes
back is the child's final answer and what it spent (`SubagentReport`). A person's detach
(the step's background token) sends a running child to the background, as it does a
command: the call returns at once, and the child's report comes later as a note.

A subagent never gets this tool (no recursion): in a child run `ctx.subagents` is `None`
and the call is refused. The tool is `read_only` because the call itself changes nothing:
every call the child makes passes the child's own gate, under a safety mode no looser
than the parent's.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .._exec import ExecContext
from .._tool import ToolError, ToolOutput, tool
from ._subagent_report import AGENT_TOOL, SubagentRunner, describe_report

__all__ = ["agent"]


@tool(name=AGENT_TOOL, read_only=True)
async def agent(
    description: Annotated[str, Field(min_length=1, max_length=80)],
    prompt: Annotated[str, Field(min_length=1)],
    *,
    subagent_type: Annotated[str, Field(min_length=1, max_length=64)] = "general",
    ctx: ExecContext,
) -> ToolOutput:
    """Hand a self-contained task to a subagent: it starts with a fresh context (only your
    prompt, none of this conversation), works with its own tools, and returns one final
    report. Use it for broad searches, reading many files, or independent pieces of work,
    so your own context stays small; call it several times in one step to run subagents in
    parallel. Types: `general` (your tools, except this one) for multi-step work;
    `explore` (read-only tools) to find files, read code and answer questions about it;
    the workspace may define more (an unknown type is answered with the list). The
    subagent cannot ask you or the person questions and cannot start subagents: write the
    prompt as a complete brief (the goal, what you already know, what to report back).
    Its report comes to you, not to the person: pass on what matters.

    Args:
        description: What the subagent does, in 3 to 6 words (shown to the person).
        prompt: The task, complete and self-contained.
        subagent_type: `general`, `explore`, or a type the workspace defines.
    """
    runner = ctx.subagents
    if not isinstance(runner, SubagentRunner):
        raise ToolError(
            "subagents cannot be started from here (a subagent cannot start subagents); "
            "do the work yourself"
        )
    report = await runner.run(
        call_id=ctx.call_id,
        subagent_type=subagent_type.strip(),
        prompt=prompt,
        description=description.strip(),
        background=ctx.background,  # a person's detach sends it on in the background
    )
    return ToolOutput(describe_report(report), is_error=report.failed, data=report)
