"""The terminal view and the commands that print stored text, fed what a hostile model,
tool or event log can produce (review of issue 18).

Before: a `tiller.model_retry` event whose values were not numbers crashed the view
(`int("soon")`), and terminal escape sequences in the model's text, a tool's result, a
tool's name, an error or an event value reached the terminal as they were: a model could
retitle the window, clear the screen, or hide what it asked to run.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import orjson
import pytest
from rich.console import Console
from rich.text import Text

from tiller.cli._safe import SafeConsole, printable
from tiller.cli._view import RunView
from tiller.events import (
    CustomEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    RunErrorEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from tiller.loop import MODEL_RETRY_EVENT
from tiller.tools import PROGRESS_EVENT, TASKS_EVENT

from ..cli_support import tiller

#: Retitles the window, clears the screen, and a bidi override.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\u202e"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _view(*, terminal: bool = False) -> tuple[RunView, io.StringIO]:
    out = io.StringIO()
    # No colours: what is left of an escape in the output is the input's.
    console = Console(file=out, width=200, highlight=False, color_system=None)
    return RunView(console), out


def test_odd_retry_values_are_shown_as_text() -> None:
    view, out = _view()
    view.on_event(CustomEvent(MODEL_RETRY_EVENT, {
        "attempt": "x", "maxAttempts": {"n": 4}, "delaySeconds": "soon", "error": HOSTILE,
    }))  # fmt: skip
    view.on_event(CustomEvent(MODEL_RETRY_EVENT, {"attempt": 1, "delaySeconds": float("nan")}))
    view.on_event(CustomEvent(MODEL_RETRY_EVENT, {"attempt": True, "delaySeconds": -3}))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("retrying in soon (attempt x of {'n': 4}): ")
    assert lines[1].startswith("retrying in nan (attempt 2 of ?)")
    assert lines[2].startswith("retrying in -3 (attempt True of ?)")
    assert not CONTROL.search(out.getvalue())


def test_control_characters_from_the_model_and_tools_never_reach_the_terminal() -> None:
    view, out = _view()
    view.on_event(ReasoningMessageStartEvent(message_id="r1"))
    view.on_event(ReasoningMessageContentEvent(message_id="r1", delta=f"think {HOSTILE}"))
    view.on_event(ReasoningMessageEndEvent(message_id="r1"))
    view.on_event(TextMessageStartEvent(message_id="m1"))
    view.on_event(TextMessageContentEvent(message_id="m1", delta=f"line one\n\tline two{HOSTILE}"))
    view.on_event(TextMessageEndEvent(message_id="m1"))
    view.on_event(ToolCallStartEvent(tool_call_id="c1", tool_call_name=f"evil{HOSTILE}"))
    args = orjson.dumps({"cmd": f"ls{HOSTILE}", "n": [HOSTILE]}).decode()
    view.on_event(ToolCallArgsEvent(tool_call_id="c1", delta=args))
    view.on_event(ToolCallEndEvent(tool_call_id="c1"))
    view.on_event(CustomEvent(PROGRESS_EVENT, {
        "toolCallId": "c1", "kind": "status", "message": HOSTILE, "fraction": "half",
    }))  # fmt: skip
    view.on_event(CustomEvent(PROGRESS_EVENT, {"toolCallId": "c1", "kind": "bytes",
                                               "done": "lots", "total": "many"}))  # fmt: skip
    view.on_event(CustomEvent(PROGRESS_EVENT, {"toolCallId": "c1", "kind": "subagent_tokens",
                                               "tokens": "a few"}))  # fmt: skip
    artifact = {"kind": "artifact", "caption": HOSTILE, "mime": HOSTILE, "data": 7}
    view.on_event(CustomEvent(PROGRESS_EVENT, {"toolCallId": "c1", **artifact}))
    view.on_event(ToolCallResultEvent(message_id="t1", tool_call_id="c1",
                                      content=f"out{HOSTILE}\nmore\x08\x08\x08"))  # fmt: skip
    view.on_event(CustomEvent(TASKS_EVENT, {"tasks": [
        {"id": 1, "subject": f"task{HOSTILE}", "status": "pending"}]}))  # fmt: skip
    view.on_event(CustomEvent("tiller.queued_input", {"text": f"steer{HOSTILE}"}))
    view.on_event(RunErrorEvent(message=f"boom{HOSTILE}", code=HOSTILE))
    view.close()
    shown = out.getvalue()
    assert not CONTROL.search(shown), repr(shown)
    # The newline kept; the tab too (rich expands it).
    assert re.search(r"assistant line one\n +line two␛\]0;pwned␇␛\[2J�", shown), shown
    assert "evil␛]0;pwned" in shown
    assert "out␛]0;pwned" in shown
    assert "(half)" in shown and "lots transferred" in shown  # (tokens: shown live only)
    assert "task␛]0;pwned" in shown and "steer␛" in shown and "boom␛" in shown


def test_printable_keeps_lengths_and_safe_console_keeps_styles() -> None:
    assert printable("a\x1b[1mb\tc\nd\x7f\x9b\u2066") == "a␛[1mb\tc\nd␡��"
    out = io.StringIO()
    console = SafeConsole(file=out, width=80, force_terminal=True, color_system="standard")
    console.print(Text("ok ", style="green") + Text(f"x{HOSTILE}", style="red"), "[/nope]x\x1b")
    printed = out.getvalue()
    assert "\x1b]0;" not in printed and "\x07" not in printed and "\u202e" not in printed
    assert "\x1b[32mok" in printed  # rich's own colours still work


FAKE_SHELL = '''
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.tools import tool

HOSTILE = "\\x1b]0;pwned\\x07\\x1b[2J"


@tool(read_only=True)
def look() -> str:
    """Look around."""
    return "found " + HOSTILE


def _next(messages, info):
    if getattr(messages[-1], "tool_results", ()):
        return "all done " + HOSTILE + " [/bogus] [red]x"
    return {"tool_calls": [{"name": "look", "arguments": {}}]}


def make(model=None):
    return Agent(ScriptedModel(_next), [look], name="mine")
'''


@pytest.mark.parametrize("durable", [True])
def test_run_runs_show_and_events_print_no_control_characters(
    tmp_path: Path, durable: bool
) -> None:
    (tmp_path / "hostile_agent.py").write_text(FAKE_SHELL)
    (tmp_path / "ws").mkdir()
    store = f"sqlite:///{tmp_path / 'store.db'}"
    ran = tiller("run", "go", "--agent", "hostile_agent:make", "-w", "ws", "--store", store,
                 cwd=tmp_path)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "all done ␛]0;pwned␇␛[2J [/bogus] [red]x" in ran.stdout
    (run_id,) = re.findall(r"^(run-[0-9a-f]+)\s", tiller(
        "runs", "list", "--store", store, cwd=tmp_path).stdout, re.M)  # fmt: skip
    for args in (["runs", "show", run_id], ["runs", "show", run_id, "--events"]):
        shown = tiller(*args, "--store", store, cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        assert "pwned" in shown.stdout, args
        assert not CONTROL.search(ran.stdout + shown.stdout + shown.stderr), args


def test_mail_list_shows_a_message_with_escapes_as_text(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'store.db'}"
    sent = tiller("mail", "send", f"hi{HOSTILE}", "--to", "ops", "--from", "lead",
                  "--store", store, cwd=tmp_path)  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    listed = tiller("mail", "list", "--to", "ops", "--store", store, cwd=tmp_path)
    assert "hi␛]0;pwned" in listed.stdout
    assert not CONTROL.search(listed.stdout)


def test_the_live_region_draws_odd_reports_as_text() -> None:
    from tiller.cli._progress_view import ProgressBoard

    board = ProgressBoard(live=True)
    board.report(f"tool{HOSTILE}", {"toolCallId": "c1", "kind": "output", "text": f"a{HOSTILE}\n"})
    board.report("t", {"toolCallId": "c1", "kind": "subagent_tokens", "tokens": "a few"})
    board.report("t", {"toolCallId": "c2", "kind": "subagent_tool_call", "toolName": HOSTILE})
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(board.render())
    assert "subagent: a few tokens" in out.getvalue()
    assert not CONTROL.search(out.getvalue()), repr(out.getvalue())


HOLDS_MARKUP = """
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.tools import builtin


def _next(messages, info):
    if getattr(messages[-1], "tool_results", ()):
        return "done"
    arguments = {"path": "a.txt", "content": "[/x] [red]hi"}
    return {"tool_calls": [{"name": "write_file", "arguments": arguments}]}


def make(model=None):
    return Agent(ScriptedModel(_next), [builtin.write_file], name="mk")
"""


def test_a_held_call_whose_arguments_look_like_markup_is_printed_as_text(tmp_path: Path) -> None:
    """Before: `[/x]` in the held call's arguments crashed `tiller run` (a rich
    MarkupError traceback) after the run had suspended."""
    (tmp_path / "mk_agent.py").write_text(HOLDS_MARKUP)
    (tmp_path / "ws").mkdir()
    store = f"sqlite:///{tmp_path / 'store.db'}"
    held = tiller("run", "go", "--agent", "mk_agent:make", "-w", "ws", "--store", store,
                  cwd=tmp_path)  # fmt: skip
    assert held.returncode == 0, held.stdout + held.stderr
    assert re.search(r"ap-[0-9a-f]+  write_file\(path='a.txt', content='\[/x\] \[red\]hi'\)",
                     held.stdout), held.stdout  # fmt: skip


CRASHING_TOOL = '''
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.tools import tool


@tool(read_only=True)
def open_page(url: str) -> str:
    """Open a page."""
    raise RuntimeError("cannot open " + url)


def _next(messages, info):
    if getattr(messages[-1], "tool_results", ()):
        return "gave up"
    return {"tool_calls": [
        {"name": "open_page", "arguments": {"url": "x\\x1b]0;pwned\\x07\\x1b[2J"}}
    ]}


def make(model=None):
    return Agent(ScriptedModel(_next), [open_page], name="mine")
'''


def test_a_logged_warning_quoting_the_model_prints_no_control_characters(tmp_path: Path) -> None:
    # A tool that raises is logged with its traceback (a warning on standard error, from
    # Python's last-resort handler): the exception's text is the model's arguments.
    (tmp_path / "crash_agent.py").write_text(CRASHING_TOOL)
    (tmp_path / "ws").mkdir()
    ran = tiller("run", "go", "--agent", "crash_agent:make", "-w", "ws", "--store", "memory://",
                 cwd=tmp_path)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "cannot open x" in ran.stdout + ran.stderr
    assert not CONTROL.search(ran.stdout + ran.stderr)
