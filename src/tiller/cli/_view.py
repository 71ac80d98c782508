"""The terminal view of a run: streamed text, dimmed reasoning, tool calls and results,
what running calls report, the task checklist, steering, and a budget line after each
step.

It renders the run's AG-UI events, so it shows exactly what a web client would get. It
prints line by line (no full-screen redraw), which works on a terminal, in a pipe and in
CI logs alike. The one exception is on a terminal while tools run: a small live region
under the calls shows their last output lines and status (`ProgressBoard`), and goes away
when they return.

The checklist (`tiller.tasks`) is printed as a compact block when it has changed, once
the burst of changes is over (three `task_create`s in one step print one block).

Everything an event carries is the model's, a tool's or a stored log's: each text is
shown `printable` (a control sequence is drawn, never obeyed; newlines and tabs kept),
whatever console the view is given, and a value of an unexpected type is shown as text,
never converted (an event log is data, not a promise).
"""

from __future__ import annotations

import math
from typing import Any

import orjson
from rich.console import Console
from rich.live import Live
from rich.status import Status
from rich.text import Text

from ..events import Event
from ..loop import MODEL_RETRY_EVENT, Budget
from ..tools import PROGRESS_EVENT, TASKS_EVENT
from ._progress_view import ProgressBoard, checklist_lines
from ._safe import printable

__all__ = ["RunView"]

_RESULT_LINES = 6
#: Tools whose result repeats the checklist the view already printed: only their first
#: line is shown.
_CHECKLIST_TOOLS = frozenset({"task_create", "task_update"})
#: The name the progress event had before `tiller.progress` (old event logs).
_LEGACY_PROGRESS = "tiller.tool_progress"


class RunView:
    """Feed it every event (`view.on_event`); it prints as they arrive."""

    def __init__(self, console: Console, *, budget: Budget | None = None) -> None:
        self.console = console
        self.budget = budget
        # A spinner while the model has not answered yet; only on a terminal.
        self._waiting: Status | None = None
        self._calls: dict[str, tuple[str, list[str]]] = {}
        self._in_text = False
        self._progress = ProgressBoard(live=console.is_terminal)
        # The live region of running calls' progress, while there is one (a terminal).
        self._live: Live | None = None
        # The checklist received but not printed yet, and the one printed last.
        self._tasks: list[dict[str, Any]] | None = None
        self._tasks_shown: list[tuple[str, str, str]] = []
        #: The message of the `RUN_ERROR` printed, if one was (a summary need not repeat it).
        self.error_shown: str | None = None

    def on_event(self, event: Event) -> None:
        wire = event.to_wire()
        kind = wire["type"]
        if self._waiting is not None and kind not in ("STEP_STARTED", "STATE_SNAPSHOT"):
            self._waiting.stop()
            self._waiting = None
        if not (kind == "CUSTOM" and wire.get("name") == TASKS_EVENT):
            self._print_checklist()
        handler = getattr(self, f"_on_{kind.lower()}", None)
        if handler is not None:
            handler(wire)
        if kind == "STEP_STARTED" and self.console.is_terminal:
            self._stop_live()  # one live display at a time: the spinner's turn
            self._waiting = self.console.status("waiting for the model…", spinner="dots")
            self._waiting.start()

    def close(self) -> None:
        """Print a checklist change not yet shown; stop the spinner and the live region."""
        self._print_checklist()
        self._stop_live()
        if self._waiting is not None:
            self._waiting.stop()
            self._waiting = None

    # ── text and reasoning ───────────────────────────────────────────────────────

    def _on_text_message_start(self, wire: dict[str, Any]) -> None:
        self._in_text = True
        self.console.print(Text("assistant ", style="bold green"), end="")

    def _on_text_message_content(self, wire: dict[str, Any]) -> None:
        self.console.print(printable(wire["delta"]), end="", markup=False, highlight=False)

    def _on_text_message_end(self, wire: dict[str, Any]) -> None:
        if self._in_text:
            self.console.print()
        self._in_text = False

    def _on_reasoning_message_start(self, wire: dict[str, Any]) -> None:
        self.console.print(Text("thinking ", style="dim italic"), end="")

    def _on_reasoning_message_content(self, wire: dict[str, Any]) -> None:
        self.console.print(Text(printable(wire["delta"]), style="dim"), end="")

    def _on_reasoning_message_end(self, wire: dict[str, Any]) -> None:
        self.console.print()

    # ── tools ────────────────────────────────────────────────────────────────────

    def _on_tool_call_start(self, wire: dict[str, Any]) -> None:
        self._calls[wire["toolCallId"]] = (printable(wire["toolCallName"]), [])

    def _on_tool_call_args(self, wire: dict[str, Any]) -> None:
        call = self._calls.get(wire["toolCallId"])
        if call is not None:
            call[1].append(wire["delta"])

    def _on_tool_call_end(self, wire: dict[str, Any]) -> None:
        name, parts = self._calls.get(wire["toolCallId"], ("?", []))
        args = "".join(parts)
        try:
            shown = ", ".join(f"{k}={_short(v)}" for k, v in orjson.loads(args or "{}").items())
        except (orjson.JSONDecodeError, AttributeError):
            shown = _short(args)
        if self._in_text:
            self.console.print()
            self._in_text = False
        self.console.print(
            Text("→ ", style="yellow") + Text(printable(f"{name}({shown})"), style="yellow")
        )

    def _on_tool_call_result(self, wire: dict[str, Any]) -> None:
        call_id = wire["toolCallId"]
        name, _ = self._calls.get(call_id, ("?", []))
        streamed = self._progress.output_lines(call_id)
        progress = self._progress.finish(call_id)
        self._refresh_live()  # first, so the region is gone before its lines are printed
        self._print_lines(progress)
        content = printable(wire["content"])
        lines = content.splitlines() or [""]
        note = ""
        if name in _CHECKLIST_TOOLS:
            lines = lines[:1]  # the rest is the checklist, printed as its own block
        elif streamed:
            # The output was shown as it came: its last line (the exit status) is enough.
            lines = lines[-1:]
            note = f"  ({streamed} line{'s' * (streamed != 1)} of output)"
        more = len(lines) - _RESULT_LINES
        shown = lines[:_RESULT_LINES]
        style = "red" if content.startswith(("Denied", "Blocked", "Refused", "Unknown")) else "cyan"
        self.console.print(
            Text(f"← {name}: ", style=style) + Text(shown[0], style="dim") + Text(note, style="dim")
        )
        for line in shown[1:]:
            self.console.print(Text("   " + line, style="dim"))
        if more > 0:
            self.console.print(Text(f"   … {more} more lines", style="dim"))

    # ── the run ──────────────────────────────────────────────────────────────────

    def _on_custom(self, wire: dict[str, Any]) -> None:
        name = wire["name"]
        value: Any = wire.get("value")
        if name == "tiller.queued_input" and isinstance(value, dict):
            self.console.print(
                Text("steer ", style="bold magenta") + Text(printable(value.get("text", "")))
            )
        elif name in (PROGRESS_EVENT, _LEGACY_PROGRESS) and isinstance(value, dict):
            call_name, _ = self._calls.get(str(value.get("toolCallId")), ("?", []))
            self._print_lines(self._progress.report(call_name, value))
            self._refresh_live()
        elif name == MODEL_RETRY_EVENT and isinstance(value, dict):
            self._print_retry(value)
        elif name == TASKS_EVENT and isinstance(value, dict):
            tasks = value.get("tasks")
            if isinstance(tasks, list):
                self._tasks = [task for task in tasks if isinstance(task, dict)]

    def _print_retry(self, value: dict[str, Any]) -> None:
        """`retrying in 2 s (attempt 2 of 4): openai: HTTP 500 …`: a pause explained."""
        if self._waiting is not None:
            self._waiting.stop()
            self._waiting = None
        attempt, most = value.get("attempt"), value.get("maxAttempts")
        # The attempt that failed is counted from 1; the next one is shown.
        shown_attempt = attempt + 1 if _number(attempt) and isinstance(attempt, int) else attempt
        self.console.print(
            Text(
                printable(
                    f"retrying in {_seconds(value.get('delaySeconds'))} (attempt "
                    f"{shown_attempt if shown_attempt is not None else '?'} of "
                    f"{most if most is not None else '?'}): "
                ),
                style="yellow",
            )
            + Text(printable(value.get("error", "")), style="dim")
        )

    # ── progress and the checklist ───────────────────────────────────────────────

    def _print_lines(self, lines: list[Text]) -> None:
        if lines and self._in_text:
            self.console.print()
            self._in_text = False
        for line in lines:
            # One line each, cut at the console's width rather than wrapped.
            self.console.print(line, no_wrap=True, overflow="ellipsis")

    def _refresh_live(self) -> None:
        """Show the running calls' progress in the live region, or close it when there
        is nothing left to show."""
        if not self._progress.live:
            return
        if not self._progress.active:
            self._stop_live()
            return
        if self._live is None:
            self._live = Live(
                console=self.console,
                auto_refresh=False,  # redrawn on each report, not on a timer
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
        self._live.update(self._progress.render(), refresh=True)

    def _stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _print_checklist(self) -> None:
        """Print the checklist if it changed since it was last printed."""
        tasks, self._tasks = self._tasks, None
        if tasks is None:
            return
        shown = [(str(t.get("id")), str(t.get("subject")), str(t.get("status"))) for t in tasks]
        if shown == self._tasks_shown:
            return
        self._tasks_shown = shown
        self._print_lines(checklist_lines(tasks))

    def _on_step_finished(self, wire: dict[str, Any]) -> None:
        if self.budget is not None:
            self.console.print(Text(budget_line(self.budget), style="dim"))

    def _on_run_finished(self, wire: dict[str, Any]) -> None:
        self._stop_live()

    def _on_run_error(self, wire: dict[str, Any]) -> None:
        self._stop_live()
        self.error_shown = str(wire["message"])
        self.console.print(
            Text(printable(f"error [{wire.get('code', '?')}]: {wire['message']}"), style="bold red")
        )


def budget_line(budget: Budget) -> str:
    """`steps 3/20 · tokens 1,234 in / 567 out · $0.0123 of $1.00`."""
    steps = f"steps {budget.steps}" + (f"/{budget.max_steps}" if budget.max_steps else "")
    usage = budget.usage
    tokens = f"tokens {usage.input_tokens:,} in / {usage.output_tokens:,} out"
    if budget.max_output_tokens:
        tokens += f" (of {budget.max_output_tokens:,})"
    cost = f"${budget.cost_usd:.4f}"
    if budget.max_cost_usd is not None:
        cost += f" of ${budget.max_cost_usd:.2f}"
    return f"  ─ {steps} · {tokens} · {cost}"


def _number(value: Any) -> bool:
    """A real number (not a bool, which Python counts as one), finite or not."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _seconds(value: Any) -> str:
    """A delay as the view says it: `2 s`, `0.5 s`; anything but a finite number of
    seconds as it is (`soon`, `nan`)."""
    if value is None:
        return "0.0 s"
    if not _number(value) or not math.isfinite(value) or value < 0:
        return str(value)
    return f"{value:.0f} s" if value >= 1 else f"{value:.1f} s"


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    text = text.replace("\n", "⏎")
    return (
        repr(text if len(text) <= limit else text[: limit - 1] + "…")
        if isinstance(value, str)
        else (text if len(text) <= limit else text[: limit - 1] + "…")
    )
