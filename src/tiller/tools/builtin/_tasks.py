"""`task_create`, `task_update`, `task_list`: the model's checklist for the run.

They change only the run's own checklist (`ctx.tasks`, a `TaskBroker`), never the
workspace or anything outside the run, so they are `read_only` in the registry's sense:
shown in every phase and safety mode, never sent to an approver, with no capabilities.
Each returns the whole checklist in a few characters a task (`[x] t1 ...`, `[~] t2 ...`,
`[ ] t3 ...`), so the model sees where it stands after every change.

They are async on purpose: they never block, and running on the event loop (rather than
in a worker thread) means the broker's publish lands in the run's state on the loop.
A run without a checklist (`ctx.tasks is None`, as in a bare test context) gets a plain
message saying so, not an error.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import Field

from .._exec import ExecContext
from .._tasks import ChecklistError, TaskBroker, TaskStatus, checklist_text
from .._tool import ToolError, tool

__all__ = ["NO_CHECKLIST", "task_create", "task_list", "task_update"]

#: What the task tools say when the run keeps no checklist.
NO_CHECKLIST: Final = (
    "This run keeps no task checklist, so nothing was recorded. Keep track of your steps "
    "in your replies instead."
)

_Subject = Annotated[str, Field(min_length=1, max_length=200)]
_Description = Annotated[str, Field(max_length=4000)]


def _checklist(tasks: TaskBroker) -> str:
    listed = tasks.list()
    done = sum(task.status == "completed" for task in listed)
    return f"Checklist ({done}/{len(listed)} completed):\n{checklist_text(listed)}"


@tool(read_only=True)
async def task_create(
    subject: _Subject, description: _Description = "", *, ctx: ExecContext
) -> str:
    """Add a task to your checklist for this run, as pending. Plan work of several steps
    as a short checklist first, then mark each task in_progress when you start it and
    completed when it is done (task_update). Touches only the run's checklist, never the
    workspace. Returns the checklist.

    Args:
        subject: What to do, in a few words, e.g. `Fix the discount calculation`.
        description: Details worth keeping: where, how, what done means.
    """
    tasks = ctx.tasks
    if tasks is None:
        return NO_CHECKLIST
    try:
        task = tasks.create(subject, description, turn=ctx.step)
    except ChecklistError as exc:
        raise ToolError(str(exc)) from None
    return f"Created {task.id}: {task.subject}\n{_checklist(tasks)}"


@tool(read_only=True)
async def task_update(
    id: str,
    status: TaskStatus | None = None,
    subject: _Subject | None = None,
    description: _Description | None = None,
    *,
    ctx: ExecContext,
) -> str:
    """Change a task of your checklist: its status, subject or description. One task is
    in progress at a time: starting one puts the task that was in progress back to
    pending, so complete a task before starting the next. Touches only the run's
    checklist, never the workspace. Returns the checklist.

    Args:
        id: The task's id, e.g. `t2`.
        status: `pending`, `in_progress` or `completed`.
        subject: A new subject, in a few words.
        description: A new description.
    """
    tasks = ctx.tasks
    if tasks is None:
        return NO_CHECKLIST
    try:
        before = tasks.in_progress()
        task = tasks.update(
            id, status=status, subject=subject, description=description, turn=ctx.step
        )
    except ChecklistError as exc:
        raise ToolError(str(exc)) from None
    summary = f"{task.id} is {task.status.replace('_', ' ')}: {task.subject}"
    if status == "in_progress" and before is not None and before.id != task.id:
        summary += f" ({before.id} went back to pending: only one task is in progress at a time)"
    return f"{summary}\n{_checklist(tasks)}"


@tool(read_only=True)
async def task_list(ctx: ExecContext) -> str:
    """Show your checklist for this run, with each task's description. Touches only the
    run's checklist, never the workspace."""
    tasks = ctx.tasks
    if tasks is None:
        return NO_CHECKLIST
    listed = tasks.list()
    if not listed:
        return "The checklist is empty; add tasks with task_create."
    done = sum(task.status == "completed" for task in listed)
    return (
        f"Checklist ({done}/{len(listed)} completed):\n{checklist_text(listed, descriptions=True)}"
    )
