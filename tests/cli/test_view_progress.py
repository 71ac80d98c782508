"""The terminal view of what running calls report (`tiller.progress`) and of the task
checklist (`tiller.tasks`), fed with the real producers (`Progress`, `TaskBroker`)."""

from __future__ import annotations

import io
import re

import orjson
from rich.console import Console

from tiller.cli._progress_view import ProgressBoard, human_bytes
from tiller.cli._view import RunView
from tiller.events import (
    CustomEvent,
    StepStartedEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from tiller.tools import Progress, TaskBroker

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def piped() -> tuple[RunView, Console]:
    """A view printing to a pipe (not a terminal), recorded."""
    console = Console(record=True, width=100, file=io.StringIO(), highlight=False)
    return RunView(console), console


def start(view: RunView, call_id: str, name: str, **args: object) -> Progress:
    view.on_event(ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name))
    view.on_event(ToolCallArgsEvent(tool_call_id=call_id, delta=orjson.dumps(args).decode()))
    view.on_event(ToolCallEndEvent(tool_call_id=call_id))
    return Progress(call_id, view.on_event)


def result(view: RunView, call_id: str, content: str) -> None:
    view.on_event(
        ToolCallResultEvent(message_id=f"m-{call_id}", tool_call_id=call_id, content=content)
    )


def text(console: Console) -> str:
    return console.export_text()


# ── streamed (a pipe) ───────────────────────────────────────────────────────────────


def test_output_streams_its_first_lines_then_the_last_ones_with_a_count() -> None:
    view, console = piped()
    progress = start(view, "c1", "execute_command", command="make test")
    body = "".join(f"line {n}\n" for n in range(1, 16))
    for cut in range(0, len(body), 7):  # chunks that split lines anywhere
        progress.output(body[cut : cut + 7])
    progress.output("warning: slow\n", stream="stderr")
    progress.output("\x1b[32mall done\x1b[0m")  # no newline yet: kept until the call ends
    result(view, "c1", "…the whole output…\n[exit code 0]")
    assert text(console) == (
        "→ execute_command(command='make test')\n"
        "   │ line 1\n"
        "   │ line 2\n"
        "   │ line 3\n"
        "   │ line 4\n"
        "   │ line 5\n"
        "   … 9 more lines of output\n"
        "   │ line 15\n"
        "   │ warning: slow\n"
        "   │ all done\n"
        "← execute_command: [exit code 0]  (17 lines of output)\n"
    )


def test_a_short_output_is_shown_whole_and_long_lines_are_cut() -> None:
    view, console = piped()
    progress = start(view, "c1", "execute_command", command="pytest")
    progress.output("downloading 10%\rdownloading 100%\r\n")
    progress.output("x" * 300 + "\n")
    result(view, "c1", "[exit code 0]")
    lines = text(console).splitlines()
    assert lines[1] == "   │ downloading 100%"
    assert lines[2].startswith("   │ xxxx") and lines[2].endswith("…") and len(lines[2]) == 100
    assert lines[3] == "← execute_command: [exit code 0]  (2 lines of output)"


def test_statuses_print_when_they_change_or_pass_a_quarter() -> None:
    view, console = piped()
    progress = start(view, "c1", "web_fetch", url="https://example.org/big.iso")
    progress("resolving")
    progress("resolving")  # a repeat: nothing new
    for done in (0, 100, 300, 600, 1024, 2048, 4096):
        progress.transferred(done * 1024, 4096 * 1024)
    progress("indexing", 0.1)
    progress("indexing", 0.2)  # same quarter
    progress("indexing", 0.6)
    progress.transferred(10)  # no total: printed when the count doubles
    progress.transferred(12)
    progress.transferred(40)
    progress.artifact("image/png", b"\x89PNG" + bytes(2044), caption="the chart")
    result(view, "c1", "fetched")
    assert text(console) == (
        "→ web_fetch(url='https://example.org/big.iso')\n"
        "   … resolving\n"
        "   … 0 B / 4.0 MiB (0%)\n"  # 2%, 7% and 15% are in the same quarter
        "   … 1.0 MiB / 4.0 MiB (25%)\n"
        "   … 2.0 MiB / 4.0 MiB (50%)\n"
        "   … 4.0 MiB / 4.0 MiB (100%)\n"
        "   … indexing (10%)\n"
        "   … indexing (60%)\n"
        "   … 10 B transferred\n"
        "   … 40 B transferred\n"
        "   ▣ the chart (image/png, 2.0 KiB)\n"
        "← web_fetch: fetched\n"
    )


def test_subagent_reports_are_one_line_each() -> None:
    view, console = piped()
    progress = start(view, "c1", "agent", task="explore")
    progress.subagent_activity("reading the code")
    progress.subagent_tool_call("c1.1", "read_file", "started")
    progress.subagent_tool_call("c1.1", "read_file", "finished")  # only live
    progress.subagent_tokens(1234, force=True)  # only live
    progress.subagent_tool_call("c1.2", "grep", "errored")
    result(view, "c1", "found it")
    assert text(console) == (
        "→ agent(task='explore')\n"
        "   … subagent: reading the code\n"
        "   … subagent: read_file started\n"
        "   … subagent: grep errored\n"
        "← agent: found it\n"
    )


def test_concurrent_calls_label_their_lines() -> None:
    view, console = piped()
    first = start(view, "c1", "execute_command", command="a")
    second = start(view, "c2", "execute_command", command="b")
    first.output("a1\n")
    second.output("b1\n")
    first.output("a2\n")
    result(view, "c1", "a1\na2\n[exit code 0]")
    result(view, "c2", "b1\n[exit code 0]")
    assert text(console).splitlines()[2:] == [
        "   │ a1",
        "   ⋯ execute_command",
        "   │ b1",
        "   ⋯ execute_command",
        "   │ a2",
        "← execute_command: [exit code 0]  (2 lines of output)",
        "← execute_command: [exit code 0]  (1 line of output)",
    ]


def test_the_old_progress_event_still_shows() -> None:
    view, console = piped()
    start(view, "c1", "slow")
    view.on_event(
        CustomEvent(name="tiller.tool_progress", value={"toolCallId": "c1", "message": "halfway"})
    )
    result(view, "c1", "done")
    assert "   … halfway\n← slow: done\n" in text(console)


# ── live (a terminal) ───────────────────────────────────────────────────────────────


def test_live_region_shows_the_last_lines_and_the_status() -> None:
    board = ProgressBoard(live=True, max_lines=3)
    assert (
        board.report(
            "execute_command",
            {"toolCallId": "c1", "kind": "status", "message": "building", "fraction": 0.5},
        )
        == []
    )
    for n in range(1, 6):
        out = board.report(
            "execute_command",
            {"toolCallId": "c1", "kind": "output", "text": f"step {n}\n", "stream": "stdout"},
        )
        assert out == []  # nothing printed while live
    assert board.active
    region = Console(record=True, width=80, file=io.StringIO())
    region.print(board.render())
    assert region.export_text() == (
        "   … 2 earlier lines\n   │ step 3\n   │ step 4\n   │ step 5\n   ⋯ building (50%)\n"
    )
    final = Console(record=True, width=80, file=io.StringIO())
    for line in board.finish("c1"):
        final.print(line)
    assert final.export_text() == (
        "   … 2 earlier lines of output\n   │ step 3\n   │ step 4\n   │ step 5\n"
    )
    assert not board.active


def test_on_a_terminal_the_last_lines_stay_after_the_call() -> None:
    out = io.StringIO()
    console = Console(file=out, width=100, force_terminal=True, color_system=None)
    view = RunView(console)
    progress = start(view, "c1", "execute_command", command="make")
    for n in range(1, 13):
        progress.output(f"step {n}\n")
    progress("linking", 0.9)
    result(view, "c1", "...\n[exit code 0]")
    view.close()
    shown = ANSI.sub("", out.getvalue())
    tail = shown[shown.index("4 earlier lines of output") :]
    assert [line.strip() for line in tail.splitlines()[:10]] == [
        "4 earlier lines of output",
        *(f"│ step {n}" for n in range(5, 13)),
        "← execute_command: [exit code 0]  (12 lines of output)",
    ]
    assert "⋯ linking (90%)" in shown  # it was in the live region while the call ran


def test_a_new_step_closes_the_live_region() -> None:
    console = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None)
    view = RunView(console)
    progress = start(view, "c1", "execute_command", command="serve")
    progress.output("listening\n")
    view.on_event(StepStartedEvent(step_name="step 2"))  # a call cut off: no result came
    view.close()  # no live display is left running (rich would refuse a second one)
    second = RunView(console)
    start(second, "c2", "execute_command", command="again").output("ok\n")
    second.close()


# ── the checklist ───────────────────────────────────────────────────────────────────


def test_the_checklist_prints_once_per_burst_of_changes() -> None:
    view, console = piped()
    broker = TaskBroker(emit=view.on_event)
    for call_id, subject in (("c1", "Find the bug"), ("c2", "Fix it"), ("c3", "Verify")):
        start(view, call_id, "task_create", subject=subject)
    for subject in ("Find the bug", "Fix it", "Verify"):
        broker.create(subject)
    for call_id in ("c1", "c2", "c3"):
        result(view, call_id, f"Created {call_id}\nChecklist (0/3 completed):\n[ ] t1 Find the bug")
    start(view, "c4", "task_update", id="t1", status="in_progress")
    broker.update("t1", status="in_progress")
    result(view, "c4", "t1 is in progress: Find the bug\nChecklist ...")
    start(view, "c5", "task_update", id="t1", subject="Find the bug")
    broker.update("t1", subject="Find the bug")  # changes nothing the view shows
    result(view, "c5", "t1 is in progress: Find the bug\nChecklist ...")
    broker.update("t1", status="completed")
    broker.update("t2", status="in_progress")
    view.close()  # a change not followed by any event is printed at the end
    assert text(console).splitlines()[3:] == [
        "  tasks 0/3 done",
        "    [ ] t1 Find the bug",
        "    [ ] t2 Fix it",
        "    [ ] t3 Verify",
        "← task_create: Created c1",
        "← task_create: Created c2",
        "← task_create: Created c3",
        "→ task_update(id='t1', status='in_progress')",
        "  tasks 0/3 done",
        "    [~] t1 Find the bug",
        "    [ ] t2 Fix it",
        "    [ ] t3 Verify",
        "← task_update: t1 is in progress: Find the bug",
        "→ task_update(id='t1', subject='Find the bug')",
        "← task_update: t1 is in progress: Find the bug",
        "  tasks 1/3 done",
        "    [x] t1 Find the bug",
        "    [~] t2 Fix it",
        "    [ ] t3 Verify",
    ]


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (0, 1023, 1024, 1536, 5 * 1024**3)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 KiB",
        "5.0 GiB",
    ]
