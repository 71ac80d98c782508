"""`background_process`: follow the commands this run sent to the background.

`execute_command` leaves a command running as a job of the run's `BackgroundJobs` (the
model asked with `background=true`, or a person detached it mid-run); this tool reads its
new output, waits for it (until it exits, prints something, or a timeout), stops it, or
lists the run's jobs.

It is not read-only (`stop` kills a process), but it needs no approval of its own: it
reaches only the jobs of this run, each started by a shell call that was itself gated,
and stopping one undoes nothing the person did not already allow. What it returns is
command output, hence its capabilities: private data, and untrusted input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

import regex as re
from pydantic import Field

from .._background import (
    DEFAULT_WAIT_SECONDS,
    MAX_WAIT_SECONDS,
    BackgroundJobs,
    PatternTooSlow,
    UnknownJob,
)
from .._exec import ExecContext
from .._risk_class import RiskClass
from .._tool import Capability, ToolError, ToolOutput, tool

__all__ = ["background_process"]

_NO_JOBS: Final = (
    "this run keeps no background jobs, so there is nothing to reach; run commands in the "
    "foreground with execute_command"
)


def _jobs(ctx: ExecContext) -> BackgroundJobs:
    if ctx.jobs is None:
        raise ToolError(_NO_JOBS)
    return ctx.jobs


def _listing(jobs: BackgroundJobs) -> str:
    rows = jobs.list()
    if not rows:
        return "(no background jobs in this run)"
    lines = []
    for row in rows:
        unread = f"; {row.unread} bytes unread" if row.unread else ""
        lines.append(f"{row.describe()}{unread}: {row.command}")
    return "\n".join(lines)


#: Actions that only watch a command the run was already allowed to start.
_WATCHING: Final = frozenset({"list", "read", "wait"})


def _risk_of_action(arguments: Mapping[str, Any]) -> RiskClass:
    """`list`, `read` and `wait` watch (read-only); `stop`, or anything else, is `process`."""
    return RiskClass.READ_ONLY if arguments.get("action") in _WATCHING else RiskClass.PROCESS


@tool(
    capabilities=Capability.PRIVATE_DATA | Capability.UNTRUSTED_INPUT,
    risk_of=_risk_of_action,
    sandboxed=True,
    denial_remedy="Leave the background command running and carry on without its output.",
)
async def background_process(
    action: Literal["read", "wait", "stop", "list"],
    id: str | None = None,
    pattern: str | None = None,
    timeout: Annotated[float, Field(gt=0, le=MAX_WAIT_SECONDS)] = DEFAULT_WAIT_SECONDS,  # noqa: ASYNC109
    *,
    ctx: ExecContext,
) -> ToolOutput:
    """Reach a command this run started in the background with execute_command
    (background=true, or detached while it ran): `read` its new output, `wait` for it,
    `stop` it, or `list` the run's background commands. Only this run's commands can be
    reached.

    Args:
        action: `read`: the output since the last read (the newest 32 KiB of it).
            `wait`: block until the command exits, `pattern` matches its new output, or
            `timeout` passes; then return the new output. `stop`: kill the command and
            everything it started. `list`: every background command and its state.
        id: The command's id, e.g. `bg-1` (not needed for `list`).
        pattern: For `wait`: a regular expression searched in each new line of output,
            e.g. `Listening on port \\d+`.
        timeout: For `wait`: the most seconds to wait (default 300, at most 3600).
    """
    jobs = _jobs(ctx)
    if action == "list":
        return ToolOutput(_listing(jobs))
    if id is None:
        raise ToolError(f"action {action!r} needs the job's id (e.g. 'bg-1'); 'list' shows them")
    if pattern is not None and action != "wait":
        raise ToolError("`pattern` applies only to action 'wait'")
    try:
        if action == "read":
            return ToolOutput(jobs.read(id).render())
        if action == "stop":
            return ToolOutput((await jobs.stop(id)).render())
        try:
            compiled = re.compile(pattern, re.MULTILINE) if pattern is not None else None
        except re.error as exc:
            raise ToolError(f"`pattern` is not a valid regular expression: {exc}") from None
        done = await jobs.wait(id, pattern=compiled, timeout=timeout, token=ctx.token)
        return ToolOutput(done.render())
    except (UnknownJob, PatternTooSlow) as exc:
        raise ToolError(str(exc)) from None
