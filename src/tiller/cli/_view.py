"""The terminal view of a run: streamed text, dimmed reasoning, tool calls and results,
steering, and a budget line after each turn.

It renders the run's AG-UI events, so it shows exactly what a web client would get. It
prints line by line (no full-screen redraw), which works on a terminal, in a pipe and in
CI logs alike.
"""

from __future__ import annotations

from typing import Any

import orjson
from rich.console import Console
from rich.status import Status
from rich.text import Text

from ..events import Event
from ..loop import Budget

__all__ = ["RunView"]

_RESULT_LINES = 6


class RunView:
    """Feed it every event (`view.on_event`); it prints as they arrive."""

    def __init__(self, console: Console, *, budget: Budget | None = None) -> None:
        self.console = console
        self.budget = budget
        # A spinner while the model has not answered yet; only on a terminal.
        self._waiting: Status | None = None
        self._calls: dict[str, tuple[str, list[str]]] = {}
        self._in_text = False

    def on_event(self, event: Event) -> None:
        wire = event.to_wire()
        kind = wire["type"]
        if self._waiting is not None and kind not in ("STEP_STARTED", "STATE_SNAPSHOT"):
            self._waiting.stop()
            self._waiting = None
        handler = getattr(self, f"_on_{kind.lower()}", None)
        if handler is not None:
            handler(wire)
        if kind == "STEP_STARTED" and self.console.is_terminal:
            self._waiting = self.console.status("waiting for the model…", spinner="dots")
            self._waiting.start()

    def close(self) -> None:
        """Stop the spinner, if one is turning."""
        if self._waiting is not None:
            self._waiting.stop()
            self._waiting = None

    # ── text and reasoning ───────────────────────────────────────────────────────

    def _on_text_message_start(self, wire: dict[str, Any]) -> None:
        self._in_text = True
        self.console.print(Text("assistant ", style="bold green"), end="")

    def _on_text_message_content(self, wire: dict[str, Any]) -> None:
        self.console.print(wire["delta"], end="", markup=False, highlight=False)

    def _on_text_message_end(self, wire: dict[str, Any]) -> None:
        if self._in_text:
            self.console.print()
        self._in_text = False

    def _on_reasoning_message_start(self, wire: dict[str, Any]) -> None:
        self.console.print(Text("thinking ", style="dim italic"), end="")

    def _on_reasoning_message_content(self, wire: dict[str, Any]) -> None:
        self.console.print(Text(wire["delta"], style="dim"), end="")

    def _on_reasoning_message_end(self, wire: dict[str, Any]) -> None:
        self.console.print()

    # ── tools ────────────────────────────────────────────────────────────────────

    def _on_tool_call_start(self, wire: dict[str, Any]) -> None:
        self._calls[wire["toolCallId"]] = (wire["toolCallName"], [])

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
        self.console.print(Text("→ ", style="yellow") + Text(f"{name}({shown})", style="yellow"))

    def _on_tool_call_result(self, wire: dict[str, Any]) -> None:
        name, _ = self._calls.get(wire["toolCallId"], ("?", []))
        lines = wire["content"].splitlines() or [""]
        more = len(lines) - _RESULT_LINES
        shown = lines[:_RESULT_LINES]
        style = (
            "red"
            if wire["content"].startswith(("Denied", "Blocked", "Refused", "Unknown"))
            else "cyan"
        )
        self.console.print(Text(f"← {name}: ", style=style) + Text(shown[0], style="dim"))
        for line in shown[1:]:
            self.console.print(Text("   " + line, style="dim"))
        if more > 0:
            self.console.print(Text(f"   … {more} more lines", style="dim"))

    # ── the run ──────────────────────────────────────────────────────────────────

    def _on_custom(self, wire: dict[str, Any]) -> None:
        if wire["name"] == "tiller.queued_input":
            self.console.print(Text("steer ", style="bold magenta") + Text(wire["value"]["text"]))
        elif wire["name"] == "tiller.tool_progress":
            value = wire.get("value") or {}
            self.console.print(Text(f"   … {value.get('message', '')}", style="dim"))

    def _on_step_finished(self, wire: dict[str, Any]) -> None:
        if self.budget is not None:
            self.console.print(Text(budget_line(self.budget), style="dim"))

    def _on_run_error(self, wire: dict[str, Any]) -> None:
        self.console.print(
            Text(f"error [{wire.get('code', '?')}]: {wire['message']}", style="bold red")
        )


def budget_line(budget: Budget) -> str:
    """`turns 3/20 · tokens 1,234 in / 567 out · $0.0123 of $1.00`."""
    turns = f"turns {budget.turns}" + (f"/{budget.max_turns}" if budget.max_turns else "")
    usage = budget.usage
    tokens = f"tokens {usage.input_tokens:,} in / {usage.output_tokens:,} out"
    if budget.max_output_tokens:
        tokens += f" (of {budget.max_output_tokens:,})"
    cost = f"${budget.cost_usd:.4f}"
    if budget.max_cost_usd is not None:
        cost += f" of ${budget.max_cost_usd:.2f}"
    return f"  ─ {turns} · {tokens} · {cost}"


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    text = text.replace("\n", "⏎")
    return (
        repr(text if len(text) <= limit else text[: limit - 1] + "…")
        if isinstance(value, str)
        else (text if len(text) <= limit else text[: limit - 1] + "…")
    )
