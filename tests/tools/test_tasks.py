"""The task checklist: `TaskBroker` (the single writer) and the task tools over it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from tiller import UsageError
from tiller.conversation import ToolCall
from tiller.events import CustomEvent, Event
from tiller.state import RunState
from tiller.tools import (
    TASKS_EVENT,
    Capability,
    ChecklistError,
    ExecContext,
    Outcome,
    Registry,
    Task,
    TaskBroker,
    checklist_text,
)
from tiller.tools._tasks import MAX_TASKS
from tiller.tools.builtin import task_create, task_list, task_update
from tiller.tools.builtin._tasks import NO_CHECKLIST


class Recorder:
    """What a broker published: the snapshots given to `publish`, and the events."""

    def __init__(self) -> None:
        self.snapshots: list[list[dict[str, Any]]] = []
        self.events: list[Event] = []

    def broker(self) -> TaskBroker:
        return TaskBroker(publish=self.snapshots.append, emit=self.events.append)


def statuses(broker: TaskBroker) -> dict[str, str]:
    return {task.id: task.status for task in broker.list()}


# ── the broker ──────────────────────────────────────────────────────────────────────


def test_create_numbers_tasks_and_publishes_each_change() -> None:
    seen = Recorder()
    broker = seen.broker()
    first = broker.create("  Find   the bug ", "  in invoice.py ", turn=2)
    second = broker.create("Fix it", turn=3)
    assert first == Task(
        id="t1",
        subject="Find the bug",
        description="in invoice.py",
        status="pending",
        created_turn=2,
        updated_turn=2,
    )
    assert (second.id, second.created_turn) == ("t2", 3)
    after_first = [first.model_dump(mode="json")]
    after_second = [*after_first, second.model_dump(mode="json")]
    assert seen.snapshots == [after_first, after_second]
    assert seen.events == [
        CustomEvent(name=TASKS_EVENT, value={"tasks": after_first}),
        CustomEvent(name=TASKS_EVENT, value={"tasks": after_second}),
    ]
    assert broker.snapshot() == after_second


def test_update_changes_fields_and_stamps_the_turn() -> None:
    seen = Recorder()
    broker = seen.broker()
    broker.create("Find the bug", turn=1)
    task = broker.update(
        "t1", status="completed", subject="Found it", description="off by one", turn=4
    )
    assert task == Task(
        id="t1",
        subject="Found it",
        description="off by one",
        status="completed",
        created_turn=1,
        updated_turn=4,
    )
    assert broker.get("t1") == task
    assert seen.snapshots[-1] == [task.model_dump(mode="json")]
    reopened = broker.update("t1", status="pending")
    assert (reopened.status, reopened.subject) == ("pending", "Found it")
    assert len(seen.events) == 3


def test_refused_changes_say_what_to_do_and_publish_nothing() -> None:
    seen = Recorder()
    broker = seen.broker()
    with pytest.raises(ChecklistError, match="the checklist is empty; add tasks with task_create"):
        broker.update("t1", status="completed")
    broker.create("one")
    broker.create("two")
    published = len(seen.events)
    with pytest.raises(ChecklistError, match=r"no task t7; the tasks are t1, t2 \(see task_list\)"):
        broker.update("t7", status="completed")
    with pytest.raises(ChecklistError, match="nothing to change on t1"):
        broker.update("t1")
    with pytest.raises(ChecklistError, match="needs a subject"):
        broker.update("t1", subject="   ")
    with pytest.raises(ChecklistError, match="needs a subject"):
        broker.create("\n")
    with pytest.raises(ChecklistError, match="'done' is not a task status"):
        broker.update("t1", status="done")  # type: ignore[arg-type]
    assert len(seen.events) == published
    assert statuses(broker) == {"t1": "pending", "t2": "pending"}


def test_starting_a_task_puts_the_one_in_progress_back_to_pending() -> None:
    broker = TaskBroker()
    for subject in ("find", "fix", "verify"):
        broker.create(subject)
    broker.update("t1", status="in_progress", turn=1)
    broker.update("t1", status="in_progress", turn=2)  # again: still the one in progress
    assert broker.in_progress() == broker.get("t1")
    broker.update("t2", status="in_progress", turn=3)
    assert statuses(broker) == {"t1": "pending", "t2": "in_progress", "t3": "pending"}
    assert broker.get("t1").updated_turn == 3


@pytest.mark.parametrize("complete_first", [True, False])
def test_ending_one_task_and_starting_the_next_in_one_batch_is_order_free(
    complete_first: bool,
) -> None:
    broker = TaskBroker()
    broker.create("find")
    broker.create("fix")
    broker.update("t1", status="in_progress")
    changes = [("t1", "completed"), ("t2", "in_progress")]
    for task_id, status in changes if complete_first else reversed(changes):
        broker.update(task_id, status=status)  # type: ignore[arg-type]
    assert statuses(broker) == {"t1": "completed", "t2": "in_progress"}


def test_the_checklist_is_bounded() -> None:
    broker = TaskBroker()
    for n in range(MAX_TASKS):
        broker.create(f"task {n}")
    with pytest.raises(ChecklistError, match=f"already holds {MAX_TASKS} tasks"):
        broker.create("one more")
    assert len(broker) == MAX_TASKS


def test_seed_restores_a_run_state_checklist_without_publishing() -> None:
    first = TaskBroker()
    first.create("find", turn=1)
    first.create("fix", "carefully", turn=1)
    first.update("t1", status="completed", turn=2)
    state = RunState(run_id="r", thread_id="th", tasks=first.snapshot())
    loaded = RunState.from_json(state.to_json())
    assert loaded.tasks == first.snapshot()

    seen = Recorder()
    resumed = seen.broker()
    resumed.seed(loaded.tasks)
    assert resumed.list() == first.list()
    assert seen.snapshots == [] and seen.events == []
    assert resumed.create("verify").id == "t3"  # ids go on after the highest seeded
    resumed.seed([Task(id="t9", subject="later")])
    assert resumed.create("next").id == "t10"
    resumed.seed([])
    assert resumed.create("fresh").id == "t1"


def test_seed_refuses_what_is_not_a_checklist() -> None:
    broker = TaskBroker()
    with pytest.raises(UsageError, match="the id t1 appears twice"):
        broker.seed([Task(id="t1", subject="a"), Task(id="t1", subject="b")])
    with pytest.raises(UsageError, match="cannot seed the checklist"):
        broker.seed([{"id": "t1", "subject": "a", "status": "done"}])
    assert broker.list() == []


def test_a_run_state_without_tasks_loads_with_an_empty_checklist() -> None:
    data = orjson.loads(RunState(run_id="r", thread_id="t").to_json())
    del data["tasks"]
    assert RunState.from_json(orjson.dumps(data)).tasks == []


def test_changes_from_many_threads_are_serialized() -> None:
    seen = Recorder()
    broker = seen.broker()
    barrier = threading.Barrier(8)

    def work() -> None:
        barrier.wait()
        for _ in range(12):
            broker.create("step")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [task.id for task in broker.list()] == [f"t{n}" for n in range(1, 97)]
    # Published in the order of the changes: each snapshot one task longer than the last.
    assert [len(snapshot) for snapshot in seen.snapshots] == list(range(1, 97))


def test_checklist_text_marks_each_status() -> None:
    tasks = [
        Task(id="t1", subject="find", status="completed"),
        Task(id="t2", subject="fix", status="in_progress", description="line one\nline two"),
        Task(id="t3", subject="verify"),
    ]
    assert checklist_text(tasks) == "[x] t1 find\n[~] t2 fix\n[ ] t3 verify"
    assert checklist_text(tasks, descriptions=True) == (
        "[x] t1 find\n[~] t2 fix\n    line one\n    line two\n[ ] t3 verify"
    )


# ── the tools ───────────────────────────────────────────────────────────────────────


async def call(ctx: ExecContext, name: str, **args: Any) -> Any:
    registry = Registry([task_create, task_update, task_list])
    return await registry.execute(
        ToolCall(id="call-1", name=name, arguments=orjson.dumps(args).decode()), ctx
    )


def test_the_task_tools_are_read_only_with_no_capabilities() -> None:
    for tool in (task_create, task_update, task_list):
        assert tool.read_only
        assert tool.capabilities == Capability.NONE
        assert "never the workspace" in tool.description


async def test_the_tools_keep_the_checklist_and_show_it(tmp_path: Path) -> None:
    seen = Recorder()
    broker = seen.broker()
    ctx = ExecContext.for_test(tmp_path, step=3, tasks=broker)
    for subject in ("Find the bug", "Fix it", "Verify"):
        done = await call(ctx, "task_create", subject=subject)
    assert done.outcome is Outcome.OK
    assert done.result.content == (
        "Created t3: Verify\n"
        "Checklist (0/3 completed):\n[ ] t1 Find the bug\n[ ] t2 Fix it\n[ ] t3 Verify"
    )
    await call(ctx, "task_update", id="t1", status="completed")
    started = await call(ctx, "task_update", id="t2", status="in_progress")
    assert started.result.content == (
        "t2 is in progress: Fix it\n"
        "Checklist (1/3 completed):\n[x] t1 Find the bug\n[~] t2 Fix it\n[ ] t3 Verify"
    )
    assert broker.get("t2").updated_turn == 3
    assert len(seen.events) == 5


async def test_starting_a_task_tells_the_model_which_went_back(tmp_path: Path) -> None:
    broker = TaskBroker()
    broker.create("find")
    broker.create("fix")
    broker.update("t1", status="in_progress")
    ctx = ExecContext.for_test(tmp_path, tasks=broker)
    done = await call(ctx, "task_update", id="t2", status="in_progress")
    assert done.result.content.splitlines()[0] == (
        "t2 is in progress: fix (t1 went back to pending: only one task is in progress at a time)"
    )


async def test_task_list_shows_descriptions(tmp_path: Path) -> None:
    broker = TaskBroker()
    ctx = ExecContext.for_test(tmp_path, tasks=broker)
    empty = await call(ctx, "task_list")
    assert empty.result.content == "The checklist is empty; add tasks with task_create."
    await call(ctx, "task_create", subject="Fix it", description="the discount, in invoice.py")
    listed = await call(ctx, "task_list")
    assert listed.result.content == (
        "Checklist (0/1 completed):\n[ ] t1 Fix it\n    the discount, in invoice.py"
    )


async def test_refusals_are_error_results_the_model_can_act_on(tmp_path: Path) -> None:
    broker = TaskBroker()
    broker.create("find")
    ctx = ExecContext.for_test(tmp_path, tasks=broker)
    unknown = await call(ctx, "task_update", id="t5", status="completed")
    assert unknown.outcome is Outcome.ERROR
    assert unknown.result.content == "there is no task t5; the tasks are t1 (see task_list)"
    nothing = await call(ctx, "task_update", id="t1")
    assert nothing.outcome is Outcome.ERROR and "nothing to change" in nothing.result.content
    wrong = await call(ctx, "task_update", id="t1", status="done")
    assert wrong.outcome is Outcome.INVALID_ARGUMENTS
    assert "status" in wrong.result.content
    blank = await call(ctx, "task_create", subject="")
    assert blank.outcome is Outcome.INVALID_ARGUMENTS
    assert statuses(broker) == {"t1": "pending"}


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("task_create", {"subject": "find"}),
        ("task_update", {"id": "t1", "status": "completed"}),
        ("task_list", {}),
    ],
)
async def test_without_a_checklist_the_tools_say_so(
    tmp_path: Path, name: str, args: dict[str, Any]
) -> None:
    done = await call(ExecContext.for_test(tmp_path), name, **args)
    assert done.outcome is Outcome.OK
    assert done.result.content == NO_CHECKLIST
