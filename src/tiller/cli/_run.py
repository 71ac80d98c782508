"""`tiller run "task"`: the built-in coding agent on a workspace, with a live view.

On a terminal: approvals are asked inline (y / a(lways) / n with a reason); any other line
typed while the run works steers it; Ctrl+C cancels cleanly (what was produced is kept and
summarised), a second Ctrl+C exits at once. Without a terminal (a pipe, CI), nothing is
read from stdin and calls that need approval are blocked unless `--yes` is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.text import Text

from ..cancel import CancellationToken
from ..conversation import ToolCall
from ..events import Event
from ..loop import Agent, Budget, RunContext, SteeringQueue
from ..model import resolve_model
from ..policy import AllowAll, Approver, Decision, NoOneToAsk
from ..tools import ToolCtx, coding_tools
from ._view import RunView, budget_line

__all__ = ["CODING_PROMPT", "LineRouter", "TerminalApprover", "run_task"]

CODING_PROMPT = (
    "You are tiller's coding agent. You work inside one project directory through your "
    "tools: read files before editing them, make small exact edits, run the project's "
    "tests or commands to check your work, and say plainly what you changed and what you "
    "could not do."
)


class LineRouter:
    """Reads stdin lines on a thread: a line answers a pending question if there is one,
    else it steers the run."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: SteeringQueue) -> None:
        self._loop = loop
        self._queue = queue
        self._pending: asyncio.Future[str] | None = None
        self._thread = threading.Thread(target=self._read, name="tiller-stdin", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _read(self) -> None:
        for line in sys.stdin:
            self._loop.call_soon_threadsafe(self._route, line.rstrip("\n"))

    def _route(self, line: str) -> None:
        pending = self._pending
        if pending is not None and not pending.done():
            pending.set_result(line)
        else:
            self._queue.push(line)

    async def ask(self) -> str:
        """The next line typed (for an approval prompt)."""
        self._pending = self._loop.create_future()
        try:
            return await self._pending
        finally:
            self._pending = None


class TerminalApprover:
    """Asks the person at the terminal. "always" remembers a key as narrow as the danger:
    the full command for the shell, the tool name otherwise."""

    def __init__(self, console: Console, lines: LineRouter) -> None:
        self._console = console
        self._lines = lines
        self._always: set[str] = set()
        self._lock = asyncio.Lock()

    @staticmethod
    def _key(call: ToolCall) -> str:
        if call.name == "run_shell":
            return f"run_shell:{call.arguments}"
        return call.name

    async def approve(self, call: ToolCall, tool: Any) -> Decision:
        async with self._lock:  # one question at a time, even for a parallel batch
            if self._key(call) in self._always:
                return Decision.allow()
            try:
                shown = ", ".join(f"{k}={v!r}" for k, v in orjson.loads(call.arguments).items())
            except (orjson.JSONDecodeError, AttributeError):
                shown = call.arguments
            self._console.print(
                Text("? ", style="bold yellow")
                + Text(f"allow {call.name}({shown})? ")
                + Text("[y]es / [a]lways / [n]o ", style="bold")
            )
            answer = (await self._lines.ask()).strip().lower()
            if answer in ("y", "yes"):
                return Decision.allow()
            if answer in ("a", "always"):
                self._always.add(self._key(call))
                return Decision.allow()
            self._console.print(Text("reason (optional): ", style="bold"), end="")
            reason = (await self._lines.ask()).strip()
            return Decision.deny(reason or "no reason given")


async def run_task(
    task: str,
    *,
    model: str,
    workspace: Path,
    yes: bool = False,
    max_turns: int | None = None,
    max_cost: float | None = None,
    console: Console | None = None,
    interactive: bool | None = None,
) -> int:
    """Run the coding agent on `task` in `workspace`; returns a process exit code."""
    console = console or Console(highlight=False)
    interactive = sys.stdin.isatty() if interactive is None else interactive
    loop = asyncio.get_running_loop()
    queue = SteeringQueue()
    lines = LineRouter(loop, queue)
    approver: Approver | None
    if yes:
        approver = AllowAll()
    elif interactive:
        approver = TerminalApprover(console, lines)
    else:
        approver = NoOneToAsk("rerun with --yes to allow it")
    cancel = CancellationToken()
    budget = Budget(max_turns=max_turns, max_cost_usd=max_cost)
    run_ctx = RunContext(
        tools=ToolCtx(workspace),
        approver=approver,
        budget=budget,
        cancel=cancel,
        queued_input=queue,
    )
    agent = Agent(resolve_model(model), coding_tools(), system_prompt=CODING_PROMPT, name="coder")
    view = RunView(console, budget=budget)
    interrupts = 0

    def on_sigint() -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts == 1:
            console.print(Text("\ncancelling… (Ctrl+C again to exit now)", style="bold red"))
            cancel.cancel("Ctrl+C")
        else:
            os._exit(130)

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    if interactive:
        lines.start()
        console.print(Text("type a line at any time to steer the run; Ctrl+C cancels", style="dim"))

    def on_event(event: Event) -> None:
        view.on_event(event)

    try:
        result = await agent.run_in(run_ctx, task, on_event=on_event)
    finally:
        view.close()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
        await agent.model.aclose()
    console.rule("[bold]summary")
    console.print(
        f"stop cause  {result.stop_cause.value}" + (" (exhausted)" if result.exhausted else "")
    )
    console.print(f"turns       {result.turns}")
    console.print(budget_line(budget).strip(" ─"))
    if not result.usage_complete:
        console.print(Text("usage is partial: a model call was cut short", style="yellow"))
    if budget.unpriced_models:
        console.print(
            Text(f"no price known for {', '.join(sorted(budget.unpriced_models))}", style="dim")
        )
    if result.error:
        console.print(Text(f"error: {result.error}", style="red"))
    return 0 if result.completed else 1
