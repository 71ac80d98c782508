"""`tiller run "task"`: the built-in coding agent on a workspace, with a live view.

On a terminal: approvals are asked inline (y / a(lways) / n with a reason), and so are the
agent's questions (`ask_user`: pick options by number, add a note, or answer in your own
words); any other line typed while the run works steers it; Ctrl+C cancels cleanly (what
was produced is kept and summarised), a second Ctrl+C exits at once. Without a terminal
(a pipe, CI), nothing is read from stdin: calls that need approval are blocked unless
`--yes` is given, and questions are answered at once with "no one is available to answer;
proceed on your best judgment" (also with `--yes`, DESIGN §3).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from rich.console import Console
from rich.text import Text

from ..cancel import CancellationToken
from ..conversation import ToolCall
from ..errors import Cancelled, UsageError
from ..loop import (
    Agent,
    Budget,
    DetachSwitch,
    MailboxRoute,
    RunContext,
    RunControls,
    RunOptions,
    RunResult,
    SteeringQueue,
    load_agent,
)
from ..pinned_policy import PinnedPolicy, with_store_protected
from ..policy import AllowAll, Approver, AskReason, Decision, NoOneToAsk, approval_key
from ..state import StopCause
from ..store import ApprovalStore, HeldApproval, check_mail_name, open_bus
from ..tools import (
    CANCELLED_REASON,
    Answer,
    Answered,
    Dismissed,
    Jail,
    NoOneToAskQuestions,
    Question,
    QuestionBroker,
    QuestionOutcome,
    SafetyMode,
    Tool,
)
from ..tools.builtin import message_send
from ..tools.mcp import open_mcp_tools
from ._coder import CODING_PROMPT, coding_agent, coding_agent_web
from ._render import terminal_console
from ._runs import CHECKPOINTS_BUCKET, DEFAULT_STORE
from ._view import RunView, budget_line

if TYPE_CHECKING:
    from ..telemetry import Telemetry

__all__ = [
    "CODING_PROMPT",
    "LineRouter",
    "LineSource",
    "TerminalApprover",
    "TerminalQuestions",
    "parse_answer",
    "RunTaskSettings",
    "run_task",
    "with_tools",
]


#: The line that sends the running step's long command to the background.
DETACH_LINE = "/bg"


class LineRouter:
    """Reads stdin lines on a thread: a line answers a pending question if there is one;
    `/bg` sends the running command to the background; any other line steers the run."""

    def __init__(
        self,
        event_loop: asyncio.AbstractEventLoop,
        queue: SteeringQueue,
        detach: DetachSwitch | None = None,
    ) -> None:
        self._event_loop = event_loop
        self._queue = queue
        self._detach = detach
        self._pending: asyncio.Future[str] | None = None
        self._thread = threading.Thread(target=self._read, name="tiller-stdin", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _read(self) -> None:
        for line in sys.stdin:
            self._event_loop.call_soon_threadsafe(self._route, line.rstrip("\n"))

    def _route(self, line: str) -> None:
        pending = self._pending
        if pending is not None and not pending.done():
            pending.set_result(line)
        elif self._detach is not None and line.strip() == DETACH_LINE:
            self._detach.detach()
        else:
            self._queue.push(line)

    async def ask(self) -> str:
        """The next line typed (for an approval prompt)."""
        self._pending = self._event_loop.create_future()
        try:
            return await self._pending
        finally:
            self._pending = None


class LineSource(Protocol):
    """Where typed lines come from: a `LineRouter`, or a test's script."""

    async def ask(self) -> str: ...


class TerminalApprover:
    """Asks the person at the terminal: `y`es, `a`lways (the run's approval broker keeps
    it, keyed as narrowly as the danger: the whole command for the shell), or `n`o with a
    reason."""

    def __init__(
        self, console: Console, lines: LineSource, *, lock: asyncio.Lock | None = None
    ) -> None:
        self._console = console
        self._lines = lines
        # Shared with the question broker: one prompt on the terminal at a time.
        self._lock = lock if lock is not None else asyncio.Lock()

    async def approve(self, call: ToolCall, tool: Any) -> Decision:
        return await self.approve_explained(call, tool, AskReason())

    async def approve_explained(self, call: ToolCall, tool: Any, why: AskReason) -> Decision:
        """Show the call, then why it is asked (the policy's or classifier's reason and
        the risk class), then the choices; read the answer."""
        async with self._lock:  # one question at a time, even for a parallel batch
            try:
                shown = ", ".join(f"{k}={v!r}" for k, v in orjson.loads(call.arguments).items())
            except (orjson.JSONDecodeError, AttributeError):
                shown = _printable(call.arguments)
            always = approval_key(call, tool) is not None
            choices = "[y]es / [a]lways / [n]o " if always else "[y]es / [n]o "
            self._console.print(
                Text("? ", style="bold yellow")
                + Text(f"allow {call.name}({shown})? ")
                + Text(choices, style="bold")
            )
            if why.reason or why.risk is not None:
                line = Text("  why: ", style="dim") + Text(_printable(why.reason or "—"))
                if why.risk is not None:
                    line += Text(f"  (risk: {why.risk.value})", style="bold")
                self._console.print(line)
            answer = (await self._lines.ask()).strip().lower()
            if answer in ("y", "yes"):
                return Decision.allow()
            if always and answer in ("a", "always"):
                return Decision.allow(always=True)
            self._console.print(Text("reason (optional): ", style="bold"), end="")
            reason = (await self._lines.ask()).strip()
            return Decision.deny(reason or "no reason given")


def _printable(text: str) -> str:
    """`text` with control characters escaped: what a model wrote (arguments, a reason
    quoting them) must not drive the person's terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


# Leading option numbers ("2", "1,3", "1 3"), then an optional note after a separator.
_PICKS = re.compile(r"^\s*(\d+(?:\s*,\s*\d+|\s+\d+)*)(?:\s*[:;,.-]?\s+|\s*[:;,.-]\s*|\s*$)(.*)$")


def parse_answer(question: Question, line: str) -> Answer | str:
    """One typed line as the answer to `question`, or what is wrong with it (to print
    before asking again).

    - option numbers, one or (if several may be picked) more: `2`, `1,3`; a note may
      follow: `2: keep it small`;
    - an option's label, as written;
    - an empty line: the recommended option(s), or no answer if none is recommended;
    - anything else: a free-text answer (the note), no option picked.
    """
    text = line.strip()
    labels = [option.label for option in question.options]
    if not text:
        picked = tuple(o.label for o in question.options if o.recommended)
        if picked and not question.multi_select:
            picked = picked[:1]
        return Answer(question.header, question.question, selected=picked)
    match = _PICKS.match(text) if labels else None
    if match is not None:
        numbers = [int(n) for n in re.split(r"[\s,]+", match.group(1).strip())]
        if any(not 1 <= n <= len(labels) for n in numbers):
            return f"pick options between 1 and {len(labels)}"
        chosen = tuple(dict.fromkeys(labels[n - 1] for n in numbers))
        if len(chosen) > 1 and not question.multi_select:
            return "pick one option"
        return Answer(question.header, question.question, selected=chosen, note=match.group(2))
    by_label = {label.casefold(): label for label in labels}
    if text.casefold() in by_label:
        return Answer(question.header, question.question, selected=(by_label[text.casefold()],))
    return Answer(question.header, question.question, note=text)


class TerminalQuestions:
    """Asks the agent's questions (`ask_user`) at the terminal, one after the other.

    Each question is printed with its numbered options; the answer is read from the
    line router (see `parse_answer` for what may be typed). If every question is left
    unanswered, the outcome is `Dismissed`. If the call is cancelled while waiting, the
    question is withdrawn (said on the terminal) and the cancellation goes on.
    """

    def __init__(
        self, console: Console, lines: LineSource, *, lock: asyncio.Lock | None = None
    ) -> None:
        self._console = console
        self._lines = lines
        self._lock = lock if lock is not None else asyncio.Lock()

    async def ask(
        self, questions: Sequence[Question], *, call_id: str, token: CancellationToken
    ) -> QuestionOutcome:
        async with self._lock:  # one prompt at a time, even for parallel calls
            answers: list[Answer] = []
            try:
                for question in questions:
                    answer = await self._ask_one(question, token)
                    if answer is None:
                        return Dismissed(CANCELLED_REASON)
                    answers.append(answer)
            except (asyncio.CancelledError, Cancelled):
                self._console.print(
                    Text("(question withdrawn: the run was cancelled)", style="dim")
                )
                raise
        if all(not a.selected and not a.note for a in answers):
            return Dismissed("the person skipped the questions")
        return Answered(tuple(answers))

    async def _ask_one(self, question: Question, token: CancellationToken) -> Answer | None:
        self._show(question)
        while True:
            line = await token.until_cancelled(self._lines.ask())
            if line is None:
                return None
            answer = parse_answer(question, line)
            if isinstance(answer, Answer):
                return answer
            self._console.print(Text(f"  {answer}: ", style="yellow"), end="")

    def _show(self, question: Question) -> None:
        self._console.print(
            Text("? ", style="bold yellow")
            + Text(f"[{question.header}] ", style="bold")
            + Text(question.question)
        )
        for number, option in enumerate(question.options, start=1):
            line = Text(f"  {number}. ") + Text(option.label, style="bold")
            if option.description:
                line += Text(f" — {option.description}", style="dim")
            if option.recommended:
                line += Text(" (recommended)", style="green")
            self._console.print(line)
        if not question.options:
            hint = "type your answer (Enter to skip): "
        elif question.multi_select:
            hint = "numbers, e.g. 1,3 (a note may follow), or your own answer: "
        else:
            hint = "a number (a note may follow), or your own answer: "
        if any(option.recommended for option in question.options):
            hint = hint.replace(": ", "; Enter takes the recommended: ", 1)
        self._console.print(Text(f"  {hint}", style="dim"), end="")


def with_tools(base: Iterable[Tool], extra: Iterable[Tool]) -> list[Tool]:
    """`base`, then each tool of `extra` whose name `base` does not have yet (so adding
    a tool that `coding_tools()` already offers does not clash)."""
    tools = list(base)
    names = {tool.name for tool in tools}
    tools.extend(tool for tool in extra if tool.name not in names)
    return tools


@dataclass(frozen=True, slots=True)
class RunTaskSettings:
    """How `tiller run` runs an agent (its command-line options)."""

    #: The model string: the built-in coding agent's model, or what `agent`'s factory is
    #: called with.
    model: str | None
    #: The directory the agent may touch (its jail).
    workspace: Path
    #: Allow every call that asks.
    yes: bool = False
    max_steps: int | None = None
    max_cost: float | None = None
    #: Ask at the terminal (None: when stdin is one).
    interactive: bool | None = None
    #: Let shell commands use the network.
    network: bool = False
    #: Accept a shell without the sandbox where `bwrap` cannot run.
    unsandboxed_shell: bool = False
    #: Give the agent `web_fetch`.
    web: bool = False
    #: The safety mode (None: the policy file's).
    mode: str | None = None
    #: The policy file (None: the workspace's `tiller.toml`, if it has one).
    config_path: Path | None = None
    #: A store URL: the run is durable (checkpointed, file changes snapshotted, calls
    #: held for `tiller approve` when headless).
    store: str | None = None
    #: The agent as "module:attr" (`tiller.loop.load_agent`); None: the coding agent.
    agent: str | None = None
    #: Attach the store's mailbox under this name (needs `store`).
    mailbox: str | None = None
    #: Where the run's spans and metrics go (`--otel`); None: not traced.
    telemetry: Telemetry | None = None


def build_agent(settings: RunTaskSettings) -> Agent:
    """The agent `settings` name: the caller's (`--agent`, its factory given the model
    string) or the built-in coding agent on `--model`; with a mailbox, able to send too.
    A `UsageError` says what is missing, before anything is opened or created."""
    if settings.agent is not None:
        if settings.web:
            raise UsageError(
                "--web gives the built-in coding agent web_fetch; with --agent, give your "
                "agent the tool (tiller.tools.builtin.web_fetch) itself"
            )
        _allow_cwd_imports()
        # Its code must not be where the model writes (law 11: see load_agent).
        agent = load_agent(settings.agent, model=settings.model, outside=settings.workspace)
    elif settings.model is None:
        raise UsageError(
            "give --model MODEL for the built-in coding agent (e.g. -m ollama:qwen2.5-coder), "
            "or --agent MODULE:ATTR for your own"
        )
    else:
        agent = coding_agent_web(settings.model) if settings.web else coding_agent(settings.model)
    if settings.mailbox is not None:
        if settings.store is None:
            raise UsageError("--mailbox needs a store (--store): the mailbox lives there")
        check_mail_name(settings.mailbox)
        if agent.registry.get(message_send.name) is None:
            agent.registry.add(message_send)
    return agent


def _allow_cwd_imports() -> None:
    """`--agent mymodule:agent` finds modules in the current directory, as `python -m`
    would."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


async def run_task(task: str, settings: RunTaskSettings, *, console: Console | None = None) -> int:
    """Run the coding agent on `task` in `settings.workspace`; returns a process exit code.

    `network` lets shell commands use the network; `unsandboxed_shell` accepts a shell
    without the sandbox where `bwrap` cannot run; `web` gives the agent `web_fetch`;
    `mode` sets the safety mode; the workspace's `tiller.toml` (or `config_path`) gives
    the policy, hooks, interlock, MCP servers and outbox routes. With a `store` the run is
    durable: checkpointed, its file changes snapshotted (`tiller rewind`) and, headless
    without `--yes`, the calls that need a person are held and the run suspends until
    `tiller approve` / `tiller deny` in any later process."""
    agent = build_agent(settings)
    console = console or terminal_console()
    interactive = sys.stdin.isatty() if settings.interactive is None else settings.interactive
    # Read once, here, by the person starting the run; pinned in its checkpoint, so
    # nothing the model writes later changes it (law 11).
    pinned = PinnedPolicy.read(settings.workspace, settings.config_path)
    # One line, never wrapped: a path split at the terminal width cannot be copied.
    console.print(Text(pinned.describe(), style="dim"), soft_wrap=True)
    event_loop = asyncio.get_running_loop()
    queue = SteeringQueue()
    detach = DetachSwitch()
    lines = LineRouter(event_loop, queue, detach)
    cancel = CancellationToken()
    budget = Budget(max_steps=settings.max_steps, max_cost_usd=settings.max_cost)
    # The run's live parts, passed on deliberately (law 13): what the terminal types,
    # detaches, cancels and shows the spending of is this run's.
    controls = RunControls(steering=queue, detach=detach, cancel=cancel, budget=budget)
    approver, questions = _askers(settings, console, lines, interactive=interactive)
    run_ctx = pinned.apply(
        RunContext(
            jail=Jail(
                settings.workspace,
                network=settings.network,
                unsandboxed_shell=settings.unsandboxed_shell,
            ),
            approver=approver,
            questions=questions,
        ).with_controls(controls)
    )
    if settings.mode is not None:
        # `--mode` wins over the file's: a new switch of this run's own, at that mode.
        run_ctx = run_ctx.with_safety_mode(SafetyMode.parse(settings.mode))
    view = RunView(console, budget=budget)
    on_sigint = _sigint_handler(console, cancel)
    with contextlib.suppress(NotImplementedError, RuntimeError):
        event_loop.add_signal_handler(signal.SIGINT, on_sigint)
    if interactive:
        lines.start()
        console.print(
            Text(
                f"type a line at any time to steer the run; {DETACH_LINE} sends a running "
                "command to the background; Ctrl+C cancels",
                style="dim",
            )
        )
    try:
        result, held = await _run(
            agent,
            run_ctx,
            task,
            pinned=pinned,
            store=settings.store,
            mailbox=settings.mailbox,
            view=view,
            telemetry=settings.telemetry,
        )
    finally:
        view.close()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            event_loop.remove_signal_handler(signal.SIGINT)
        await agent.model.aclose()
    return _summary(console, result, budget, held, settings.store, shown_error=view.error_shown)


def _askers(
    settings: RunTaskSettings, console: Console, lines: LineRouter, *, interactive: bool
) -> tuple[Approver | None, QuestionBroker]:
    """Who answers the run's approvals and questions: everyone allowed (`--yes`), the
    person at the terminal, the store (held for `tiller approve`), or no one."""
    if settings.yes:
        return AllowAll(), NoOneToAskQuestions()
    if interactive:
        prompt_lock = asyncio.Lock()
        return (
            TerminalApprover(console, lines, lock=prompt_lock),
            TerminalQuestions(console, lines, lock=prompt_lock),
        )
    if settings.store is not None:
        # Headless and durable: held for `tiller approve` (DESIGN §3).
        return None, NoOneToAskQuestions()
    return (
        NoOneToAsk("rerun with --yes to allow it, or with a store to approve later"),
        NoOneToAskQuestions(),
    )


def _sigint_handler(console: Console, cancel: CancellationToken) -> Callable[[], None]:
    """Ctrl+C cancels the run (it ends cleanly); a second Ctrl+C exits at once."""
    interrupts = 0

    def on_sigint() -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts == 1:
            console.print(Text("\ncancelling… (Ctrl+C again to exit now)", style="bold red"))
            cancel.cancel("Ctrl+C")
        else:
            os._exit(130)

    return on_sigint


async def _run(
    agent: Agent,
    run_ctx: RunContext,
    task: str,
    *,
    pinned: PinnedPolicy,
    store: str | None,
    mailbox: str | None,
    view: RunView,
    telemetry: Telemetry | None = None,
) -> tuple[RunResult, list[HeldApproval]]:
    """The run, with the store and the pinned policy's MCP servers open for as long as it
    goes; and the calls it holds for a person if it suspended."""
    held: list[HeldApproval] = []
    async with contextlib.AsyncExitStack() as stack:
        options = RunOptions()
        if store is not None:
            bus = await stack.enter_async_context(await open_bus(store))
            run_ctx = with_store_protected(run_ctx.with_store(bus))
            options = RunOptions(checkpoint_bucket=CHECKPOINTS_BUCKET)
            if mailbox is not None:
                run_ctx = run_ctx.with_mailbox(MailboxRoute(bus, name=mailbox, send_tool=True))
        if pinned.config.mcp:
            pinned.check_mcp_files()
            for each in await stack.enter_async_context(open_mcp_tools(pinned.config.mcp)):
                agent.registry.add(each)
        options = options.with_telemetry(telemetry)
        result = await agent.run_in(run_ctx, task, options, on_event=view.on_event)
        if result.stop_cause is StopCause.SUSPENDED and run_ctx.store is not None:
            held = await ApprovalStore(run_ctx.store).for_run(result.state.run_id)
    return result, held


def _summary(
    console: Console,
    result: RunResult,
    budget: Budget,
    held: Sequence[HeldApproval],
    store: str | None,
    *,
    shown_error: str | None = None,
) -> int:
    """How the run ended, and its exit code. The error is printed unless the view printed
    it already (`shown_error`): each line once."""
    console.rule("[bold]summary")
    console.print(
        f"stop cause  {result.stop_cause.value}" + (" (exhausted)" if result.exhausted else "")
    )
    console.print(f"steps       {result.steps}")
    console.print(budget_line(budget).strip(" ─"))
    if not result.usage_complete:
        console.print(Text("usage is partial: a model call was cut short", style="yellow"))
    if budget.unpriced_models:
        console.print(
            Text(f"no price known for {', '.join(sorted(budget.unpriced_models))}", style="dim")
        )
    if result.error and result.error != shown_error:
        console.print(Text(f"error: {result.error}", style="red"))
    if result.stop_cause is StopCause.SUSPENDED:
        _print_held(console, held, result.state.run_id, store)
        return 0
    return 0 if result.completed else 1


def _print_held(
    console: Console, held: Sequence[HeldApproval], run_id: str, store: str | None
) -> None:
    """Say which calls wait for a person, and how to answer them from any process."""
    where = f" --store {store}" if store is not None and store != DEFAULT_STORE else ""
    console.print(
        Text(f"run {run_id} is waiting for a person:", style="bold yellow"), soft_wrap=True
    )
    for approval in held:
        if approval.status != "pending":
            continue
        # Never wrapped, on a terminal too: an id or a command split in two cannot be
        # copied.
        console.print(
            f"  {approval.id}  {approval.tool}({_short(approval.arguments)})", soft_wrap=True
        )
        console.print(
            Text(
                f"    tiller approve {approval.id}{where}   |   "
                f"tiller deny {approval.id} --reason TEXT{where}",
                style="dim",
            ),
            soft_wrap=True,
        )


def _short(arguments: Any, limit: int = 120) -> str:
    text = (
        ", ".join(f"{k}={v!r}" for k, v in arguments.items())
        if isinstance(arguments, dict)
        else str(arguments)
    )
    return text if len(text) <= limit else text[: limit - 1] + "…"
