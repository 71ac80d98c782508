"""`TaskBroker`: the single writer of a run's task checklist.

A model working on something long keeps a short checklist ("find the bug", "fix it",
"verify"), so it, the person watching and a resumed run all know where the work stands.
The broker is the only thing that changes the checklist: the task tools
(`task_create`, `task_update`, `task_list`) go through it, and so will a person's
`/tasks` commands. Nothing waits on a person.

After each change it publishes the whole checklist twice over:

- through `publish(snapshot)`, given at construction. The loop passes one that stores the
  snapshot in `RunState.tasks`, so a suspended or crashed run resumes with its checklist
  (`seed()` puts it back without publishing, as on rewind and fork), and publishes it in
  the run's AG-UI state document under `tiller.tasks` (beside the agent's typed state), so
  a client that joins late sees it in the snapshot;
- as an AG-UI `CUSTOM` event named `tiller.tasks` with `{"tasks": [...]}`, through `emit`,
  which the terminal view draws.

Rules. Ids are `t1`, `t2`, ... in creation order and never reused. A task is `pending`,
`in_progress` or `completed`, and may move between any of them (a completed task can be
reopened). At most one task is in progress: starting one while another is in progress
puts that other one back to `pending`, so a model that ends one task and starts the next
in one batch of parallel calls gets the same checklist whichever call runs first.

Thread-safe: a short lock guards every change, and the two callbacks run under it, in the
order of the changes, in the thread that made the change (they must not call back into
the broker).

```
TillerError
└── ChecklistError      a change the checklist refuses (unknown id, empty subject, full)
```
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import TillerError, UsageError
from ..events import CustomEvent, Event

__all__ = [
    "MAX_TASKS",
    "TASKS_EVENT",
    "ChecklistError",
    "Task",
    "TaskBroker",
    "TaskSnapshot",
    "TaskStatus",
    "checklist_text",
]

#: The name of the `CUSTOM` event that carries the checklist after each change.
TASKS_EVENT: Final = "tiller.tasks"
#: The most tasks one checklist holds: a checklist longer than this is no longer a plan.
MAX_TASKS: Final = 100

TaskStatus = Literal["pending", "in_progress", "completed"]
#: The checklist as JSON-ready dicts, in creation order: what the broker publishes.
TaskSnapshot: TypeAlias = list[dict[str, Any]]

_MARKS: Final[Mapping[str, str]] = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}
_ID: Final = re.compile(r"^t([1-9][0-9]*)$")


class ChecklistError(TillerError):
    """The checklist refuses a change: an unknown id, an empty subject, a full list.

    The message is written for the model (the task tools hand it on as the call's error),
    so it says what to do instead.
    """


class Task(BaseModel):
    """One item of the checklist. Immutable: the broker replaces a task to change it.

    `created_turn` and `updated_turn` are the steps of its creation and last change
    (0 when a person or a program changed it outside a step).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    subject: str
    description: str = ""
    status: TaskStatus = "pending"
    created_turn: int = 0
    updated_turn: int = 0

    @property
    def mark(self) -> str:
        """`[ ]`, `[~]` or `[x]`."""
        return _MARKS[self.status]

    def line(self) -> str:
        """`[~] t2 Fix the discount`: the task as one line of the checklist."""
        return f"{self.mark} {self.id} {self.subject}"


def checklist_text(tasks: Sequence[Task], *, descriptions: bool = False) -> str:
    """The checklist as the model reads it, one task a line (`[x] t1 ...`), with each
    description indented under its task when `descriptions`."""
    lines: list[str] = []
    for task in tasks:
        lines.append(task.line())
        if descriptions and task.description:
            lines.extend(f"    {line}" for line in task.description.splitlines())
    return "\n".join(lines)


def _drop_snapshot(snapshot: TaskSnapshot) -> None:
    """No one stores the checklist (a broker built for a test)."""


def _drop_event(event: Event) -> None:
    """No one listens (a broker built for a test)."""


class TaskBroker:
    """A run's checklist, and the one place it changes. See the module docstring."""

    __slots__ = ("_emit", "_lock", "_next", "_publish", "_tasks")

    def __init__(
        self,
        *,
        publish: Callable[[TaskSnapshot], object] = _drop_snapshot,
        emit: Callable[[Event], object] = _drop_event,
    ) -> None:
        self._publish = publish
        self._emit = emit
        self._lock = threading.Lock()
        self._tasks: dict[str, Task] = {}
        self._next = 1

    # ── reading ──────────────────────────────────────────────────────────────────

    def list(self) -> list[Task]:
        """Every task, in creation order."""
        with self._lock:
            return list(self._tasks.values())

    def get(self, task_id: str) -> Task:
        """One task; raises `ChecklistError` naming the known ids if there is none."""
        with self._lock:
            return self._find(task_id)

    def in_progress(self) -> Task | None:
        """The task in progress, if one is."""
        with self._lock:
            return self._in_progress()

    def snapshot(self) -> TaskSnapshot:
        """The checklist as JSON-ready dicts, in creation order (what is published)."""
        with self._lock:
            return self._snapshot()

    def __len__(self) -> int:
        return len(self._tasks)

    # ── changing ─────────────────────────────────────────────────────────────────

    def create(self, subject: str, description: str = "", *, turn: int = 0) -> Task:
        """Add a pending task at the end of the checklist and publish; returns it."""
        subject = _subject(subject)
        with self._lock:
            if len(self._tasks) >= MAX_TASKS:
                raise ChecklistError(
                    f"the checklist already holds {MAX_TASKS} tasks; work through the ones "
                    "there (task_update) instead of adding more"
                )
            task = Task(
                id=f"t{self._next}",
                subject=subject,
                description=description.strip(),
                created_turn=turn,
                updated_turn=turn,
            )
            self._next += 1
            self._tasks[task.id] = task
            self._published()
            return task

    def update(
        self,
        task_id: str,
        *,
        status: TaskStatus | None = None,
        subject: str | None = None,
        description: str | None = None,
        turn: int = 0,
    ) -> Task:
        """Change a task's status, subject or description (at least one) and publish;
        returns the task as it now is.

        Starting a task (`status="in_progress"`) while another is in progress puts that
        other one back to `pending` (see the module docstring); `in_progress()` read
        before the call tells which one that was.
        """
        if status is None and subject is None and description is None:
            raise ChecklistError(
                f"nothing to change on {task_id}: give a status, a subject or a description"
            )
        if status is not None and status not in _MARKS:
            raise ChecklistError(
                f"{status!r} is not a task status; use pending, in_progress or completed"
            )
        changes: dict[str, Any] = {"updated_turn": turn}
        if status is not None:
            changes["status"] = status
        if subject is not None:
            changes["subject"] = _subject(subject)
        if description is not None:
            changes["description"] = description.strip()
        with self._lock:
            task = self._find(task_id)
            if status == "in_progress":
                current = self._in_progress()
                if current is not None and current.id != task.id:
                    self._tasks[current.id] = current.model_copy(
                        update={"status": "pending", "updated_turn": turn}
                    )
            task = task.model_copy(update=changes)
            self._tasks[task.id] = task
            self._published()
            return task

    def seed(self, tasks: Iterable[Task | Mapping[str, Any]]) -> None:
        """Replace the checklist without publishing: a resumed, rewound or forked run
        puts back the checklist it had (`RunState.tasks`). New ids continue after the
        highest one seeded."""
        seeded: dict[str, Task] = {}
        for item in tasks:
            try:
                task = item if isinstance(item, Task) else Task.model_validate(dict(item))
            except ValidationError as exc:
                raise UsageError(f"cannot seed the checklist: {exc}") from exc
            if task.id in seeded:
                raise UsageError(f"cannot seed the checklist: the id {task.id} appears twice")
            seeded[task.id] = task
        numbers = [int(m.group(1)) for m in map(_ID.match, seeded) if m is not None]
        with self._lock:
            self._tasks = seeded
            self._next = max(numbers, default=0) + 1

    # ── under the lock ───────────────────────────────────────────────────────────

    def _find(self, task_id: str) -> Task:
        task = self._tasks.get(task_id.strip())
        if task is not None:
            return task
        if not self._tasks:
            raise ChecklistError(
                f"there is no task {task_id}: the checklist is empty; add tasks with task_create"
            )
        known = ", ".join(self._tasks)
        raise ChecklistError(f"there is no task {task_id}; the tasks are {known} (see task_list)")

    def _in_progress(self) -> Task | None:
        return next((t for t in self._tasks.values() if t.status == "in_progress"), None)

    def _snapshot(self) -> TaskSnapshot:
        return [task.model_dump(mode="json") for task in self._tasks.values()]

    def _published(self) -> None:
        snapshot = self._snapshot()
        self._publish(snapshot)
        self._emit(CustomEvent(name=TASKS_EVENT, value={"tasks": self._snapshot()}))

    def __repr__(self) -> str:
        done = sum(task.status == "completed" for task in self._tasks.values())
        return f"<TaskBroker {done}/{len(self._tasks)} completed>"


def _subject(subject: str) -> str:
    cleaned = " ".join(subject.split())
    if not cleaned:
        raise ChecklistError("a task needs a subject: a few words saying what to do")
    return cleaned
