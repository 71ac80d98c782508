"""`tiller runs …` and `tiller replay`: durable runs in a store, seen and continued by a person.

- `tiller runs list` — every checkpointed run: id, thread, status, step, stop cause;
- `tiller runs show RUN_ID` — the run's status, its transcript in short, and its pending
  calls with what the store knows of each (completed, *uncertain*, not started);
- `tiller runs reconcile RUN_ID` — the uncertain calls (started, never completed: the
  process died while they ran), and marks them `--done`, `--failed` or `--rerun`;
- `tiller runs resume RUN_ID` — recovers a run whose process died, or continues one
  suspended for review; refuses (exit 3) while a call is uncertain, so no side effect runs
  twice (law 5) without a person deciding it should;
- `tiller replay RUN_ID` — the run again from its capture, offline: the model's answers
  come from the recording and, by default, so do the tools' results.

Exit codes: 0 done; 1 the run did not complete (or was already resumed elsewhere); 2 a
usage error (unknown run, bad store URL or agent reference); 3 uncertain calls block.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ..errors import TillerError, UsageError
from ._safe import echo

# The CLI loads this module for every command (and for --help), so the store, the loop
# and the capture code are imported inside the commands that use them.
if TYPE_CHECKING:
    from rich.console import Console

    from ..capture import Capture
    from ..conversation import AssistantMessage, ToolCall, UserMessage
    from ..loop import Agent, RunResult
    from ..policy import Approver
    from ..state import RunState
    from ..store import Bus, CallLog
    from ._view import RunView

__all__ = ["DEFAULT_STORE", "replay_command", "runs_app"]

from ._options import DEFAULT_STORE, agent_help, store_option, workspace_option

#: `tiller.store._checkpoints.DEFAULT_BUCKET` and `tiller.capture.CAPTURE_BUCKET`, written
#: out so that loading the CLI does not import the store (a test checks they agree).
CHECKPOINTS_BUCKET = "tiller-run-checkpoints"
CAPTURES_BUCKET = "tiller-captures"

EXIT_OK = 0
EXIT_NOT_COMPLETED = 1
EXIT_USAGE = 2
EXIT_UNCERTAIN = 3

_SHOWN = 100

runs_app = typer.Typer(
    name="runs",
    help="Durable runs in a store: list, show, reconcile and resume them.",
    no_args_is_help=True,
    add_completion=False,
)

_BUCKET_HELP = "The checkpoints bucket."
_NAMESPACE_HELP = "The store namespace (buckets are prefixed with it)."
_AGENT_HELP = agent_help("Default: the one the checkpoint records.")


def _finish(work: Callable[[], Coroutine[Any, Any, int]]) -> None:
    """Run `work` and exit with its code; errors a person can fix become a message on
    stderr and exit code 2, never a traceback."""
    from ..store import AlreadyResumed, RunStillRunning

    try:
        code = asyncio.run(work())
    except (AlreadyResumed, RunStillRunning) as exc:
        echo(f"tiller: {exc}", err=True)
        code = EXIT_NOT_COMPLETED
    except TillerError as exc:
        echo(f"tiller: {exc}", err=True)
        code = EXIT_USAGE
    raise typer.Exit(code)


async def _with_store(url: str, namespace: str, work: Callable[[Bus], Awaitable[int]]) -> int:
    from ..store import open_bus

    bus = await open_bus(url, namespace=namespace)
    try:
        return await work(bus)
    finally:
        await bus.aclose()


def _allow_cwd_imports() -> None:
    """`--agent mymodule:agent` finds modules in the current directory, as `python -m`
    would; the `tiller` script's own directory is on the path instead."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


# ── list ─────────────────────────────────────────────────────────────────────────────


@runs_app.command("list")
def list_runs(
    store: str = store_option("The store", existing=True),
    bucket: str = typer.Option(CHECKPOINTS_BUCKET, "--bucket", help=_BUCKET_HELP),
    namespace: str = typer.Option("", "--namespace", help=_NAMESPACE_HELP),
) -> None:
    """List the checkpointed runs: id, thread, status, step, stop cause."""
    from ..ops import list_runs as stored_runs

    async def work(bus: Bus) -> int:
        rows: list[tuple[str, ...]] = []
        for checkpoint in await stored_runs(bus, bucket=bucket):
            state = checkpoint.state
            rows.append(
                (
                    state.run_id,
                    state.thread_id,
                    checkpoint.status,
                    str(state.step),
                    state.stop_cause.value if state.stop_cause is not None else "-",
                    state.agent_name,
                )
            )
        if not rows:
            echo(f"no runs in bucket {bucket!r} of {store}")
            return EXIT_OK
        header = ("RUN", "THREAD", "STATUS", "STEP", "STOP", "AGENT")
        widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
        for row in (header, *rows):
            cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            echo("  ".join(cells).rstrip())
        return EXIT_OK

    _finish(lambda: _with_store(store, namespace, work))


# ── show ─────────────────────────────────────────────────────────────────────────────


def _short(text: str, limit: int = _SHOWN) -> str:
    flat = text.replace("\n", "⏎ ")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _call_line(call: ToolCall) -> str:
    return f"{call.name}({_short(call.arguments, 80)}) [{call.id}]"


def _transcript(state: RunState) -> list[str]:
    """One line per message (and per tool result): enough to see where the run stands."""
    from ..conversation import AssistantMessage, UserMessage

    lines: list[str] = []
    for message in state.messages:
        if isinstance(message, UserMessage):
            if message.text:
                lines.append(f"user       {_short(message.text)}")
            for result in message.tool_results:
                mark = "error " if result.is_error else ""
                lines.append(f"  ← {result.name}: {mark}{_short(result.content, 80)}")
        elif isinstance(message, AssistantMessage):
            shown = message.text or ("(tool calls)" if message.tool_calls else "(reasoning only)")
            lines.append(f"assistant  {_short(shown)}")
            for call in message.tool_calls:
                lines.append(f"  → {_call_line(call)}")
    return lines


def _call_status(call: ToolCall, logs: dict[str, CallLog]) -> str:
    log = logs.get(call.id)
    if log is None:
        return "not started"
    if log.status == "started" and log.idempotent:
        return (
            "UNCERTAIN (started, never completed; its tool said idempotent: recover runs it again)"
        )
    if log.status == "started":
        return "UNCERTAIN (started, never completed)"
    if log.status == "rerun":
        return "to run again (its attempt was interrupted; its tool is idempotent)"
    return "failed (recorded)" if log.is_error else "completed (recorded)"


@runs_app.command("show")
def show_run(
    run_id: str = typer.Argument(..., help="The run id."),
    store: str = store_option("The store", existing=True),
    bucket: str = typer.Option(CHECKPOINTS_BUCKET, "--bucket", help=_BUCKET_HELP),
    namespace: str = typer.Option("", "--namespace", help=_NAMESPACE_HELP),
    events: bool = typer.Option(
        False, "--events", help="Render the run from its stored AG-UI event log instead."
    ),
) -> None:
    """Show a run: its status, its transcript in short, its pending and uncertain calls;
    with --events, the run as it streamed, from its event log."""
    from ..ops import uncertain_calls
    from ..store import CheckpointStore

    async def work(bus: Bus) -> int:
        checkpoints = CheckpointStore(bus, bucket)
        if events:
            return await _show_events(bus, run_id)
        checkpoint = await checkpoints.load(run_id)
        state = checkpoint.state
        logs = await checkpoints.calls(run_id)
        stop = state.stop_cause.value if state.stop_cause is not None else "-"
        echo(f"run        {state.run_id}")
        echo(f"thread     {state.thread_id}")
        echo(f"status     {checkpoint.status}")
        ref = f" ({state.agent_ref})" if state.agent_ref else ""
        echo(f"agent      {state.agent_name}{ref}")
        echo(f"step       {state.step}")
        echo(f"stop cause {stop}")
        usage = state.usage
        echo(
            f"usage      {usage.input_tokens:,} in / {usage.output_tokens:,} out"
            f" · ${state.cost_usd:.4f}" + ("" if state.usage_complete else " (partial)")
        )
        if state.policy is not None:
            echo(f"workspace  {state.policy.get('jail_root')}")
        if state.error:
            echo(f"error      {state.error}")
        echo("")
        echo("transcript")
        for line in _transcript(state) or ["(empty)"]:
            echo(f"  {line}")
        pending = state.unanswered_calls()
        if pending:
            echo("")
            echo("pending calls")
            for call in pending:
                child = state.children.get(call.id)
                status = (
                    f"its subagent {child.run_id} waits for a person"
                    if child is not None
                    else _call_status(call, logs)
                )
                echo(f"  {_call_line(call)}: {status}")
        uncertain = uncertain_calls(state, logs)
        if uncertain:
            echo("")
            echo(
                f"{len(uncertain)} uncertain call(s): reconcile them before resuming "
                f"(tiller runs reconcile {run_id})"
            )
        return EXIT_OK

    _finish(lambda: _with_store(store, namespace, work))


async def _show_events(bus: Bus, run_id: str) -> int:
    """Render the stored event log with the terminal view `tiller run` uses."""
    from ..events import event_from_wire
    from ..store import EventLog
    from ._render import terminal_console
    from ._view import RunView

    wire = await EventLog(bus).read(run_id)
    if not wire:
        echo(f"tiller: no event log for run {run_id!r} (was it durable?)", err=True)
        return EXIT_USAGE
    view = RunView(terminal_console())
    for event in wire:
        view.on_event(event_from_wire(event))
    echo(f"({len(wire)} events)")
    return EXIT_OK


# ── reconcile ────────────────────────────────────────────────────────────────────────


@runs_app.command("reconcile")
def reconcile_run(
    *,
    run_id: str = typer.Argument(..., help="The run id."),
    done: list[str] = typer.Option([], "--done", help="Mark CALL_ID done (it did happen)."),
    failed: list[str] = typer.Option([], "--failed", help="Mark CALL_ID failed."),
    rerun: list[str] = typer.Option([], "--rerun", help="Run CALL_ID again on resume."),
    result: str | None = typer.Option(
        None, "--result", help="The result the model reads for --done / --failed calls."
    ),
    store: str = store_option("The store", existing=True),
    bucket: str = typer.Option(CHECKPOINTS_BUCKET, "--bucket", help=_BUCKET_HELP),
    namespace: str = typer.Option("", "--namespace", help=_NAMESPACE_HELP),
) -> None:
    """Show a run's uncertain calls (started, never completed), and mark them.

    A call is uncertain when the process died while it ran: whether its side effect
    happened is unknown, so only a person can say. --done: it happened (the model reads
    --result); --failed: it did not, or went wrong (the model reads --result as an error);
    --rerun: run it again when the run resumes."""
    from ..ops import CallVerdict, reconcile

    async def work(bus: Bus) -> int:
        marks: list[tuple[str, CallVerdict]] = [
            *((c, "done") for c in done),
            *((c, "failed") for c in failed),
            *((c, "rerun") for c in rerun),
        ]
        settled = await reconcile(bus, run_id, marks, result=result, bucket=bucket)
        for call, verdict in settled.marked:
            echo(f"marked {_call_line(call)}: {verdict}")
        uncertain = settled.uncertain
        if not uncertain:
            echo(f"run {run_id} has no uncertain calls; it can be resumed")
            return EXIT_OK
        echo(f"uncertain calls of run {run_id} (started, never completed):")
        for call in uncertain:
            echo(f"  {_call_line(call)}")
        echo(
            "mark each: --done CALL_ID [--result TEXT] | --failed CALL_ID [--result TEXT] "
            "| --rerun CALL_ID"
        )
        return EXIT_OK

    _finish(lambda: _with_store(store, namespace, work))


# ── resume ───────────────────────────────────────────────────────────────────────────


def _resume_view(console: Console) -> RunView:
    """A `RunView` that learns the names of calls made before the suspension from the
    resumed run's `MESSAGES_SNAPSHOT`, so their results are labelled."""
    from ._view import RunView

    class ResumeView(RunView):
        def _on_messages_snapshot(self, wire: dict[str, Any]) -> None:
            for message in wire.get("messages", ()):
                for call in message.get("toolCalls") or ():
                    function = call.get("function") or {}
                    self._calls[call["id"]] = (function.get("name", "?"), [])

    return ResumeView(console)


@runs_app.command("resume")
def resume_run(
    *,
    run_id: str = typer.Argument(..., help="The run id."),
    agent: str | None = typer.Option(None, "--agent", help=_AGENT_HELP),
    yes: bool = typer.Option(False, "--yes", "-y", help="Allow every call that asks."),
    workspace: Path | None = workspace_option(None, "The jail, if not where the checkpoint says."),
    store: str = store_option("The store", existing=True),
    bucket: str = typer.Option(CHECKPOINTS_BUCKET, "--bucket", help=_BUCKET_HELP),
    namespace: str = typer.Option("", "--namespace", help=_NAMESPACE_HELP),
    force: bool = typer.Option(
        False, "--force", help="Break a live lease: you know the run's process is dead."
    ),
) -> None:
    """Continue a run whose process died (or one suspended for review).

    Calls recorded as completed are not run again. A call recorded as started but never
    completed is uncertain: the resume refuses (exit 3) until it is reconciled
    (tiller runs reconcile). Calls that need approval are asked at a terminal, allowed
    with --yes, and blocked otherwise."""
    from ..cancel import CancellationToken
    from ..loop import ResumeReplayBlocked
    from ..ops import recover_run
    from ..policy import AllowAll, NoOneToAsk
    from ..store import CheckpointStore
    from ._render import terminal_console
    from ._run import _sigint_handler

    if agent is not None:
        _allow_cwd_imports()
    interactive = sys.stdin.isatty()
    root = workspace.resolve() if workspace is not None else None

    async def work(bus: Bus) -> int:
        console = terminal_console()
        checkpoint = await CheckpointStore(bus, bucket).load(run_id)
        if checkpoint.status == "suspended" and not (yes or interactive):
            # Blocking every call would answer the review with refusals nobody gave.
            raise UsageError(
                f"run {run_id} is suspended for review; resume it at a terminal (each call "
                "is asked) or with --yes"
            )
        if agent is None and checkpoint.state.agent_ref is None:
            raise UsageError(f"run {run_id} does not record its agent; pass --agent module:attr")
        approver: Approver
        lines = None
        if yes:
            approver = AllowAll()
        elif interactive:
            from ..loop import SteeringQueue
            from ._run import LineRouter, TerminalApprover

            lines = LineRouter(asyncio.get_running_loop(), SteeringQueue())
            approver = TerminalApprover(console, lines)
        else:
            approver = NoOneToAsk("resume with --yes to allow it")
        view = _resume_view(console)
        if lines is not None:
            lines.start()
        # Ctrl+C cancels the continued run as it does `tiller run`'s: it ends
        # `cancelled`, keeping what it did; a second Ctrl+C exits at once.
        cancel = CancellationToken()
        event_loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            event_loop.add_signal_handler(signal.SIGINT, _sigint_handler(console, cancel))
        try:
            # Under the run's pinned policy, never the workspace's file (law 11).
            result = await recover_run(
                bus,
                run_id,
                agent=agent,
                approver=approver,
                workspace=root,
                force=force,
                bucket=bucket,
                on_event=view.on_event,
                cancel=cancel,
            )
        except ResumeReplayBlocked as exc:
            echo(f"tiller: run {run_id} cannot resume yet: calls are uncertain", err=True)
            for call in exc.calls:
                echo(f"  {_call_line(call)}: started, never completed", err=True)
            for call in exc.reruns:
                echo(
                    f"  {_call_line(call)}: of an idempotent tool, run again after the others",
                    err=True,
                )
            echo(
                f"reconcile them: tiller runs reconcile {run_id} --done CALL_ID "
                "[--result TEXT] | --failed CALL_ID | --rerun CALL_ID",
                err=True,
            )
            return EXIT_UNCERTAIN
        finally:
            view.close()
            with contextlib.suppress(NotImplementedError, RuntimeError):
                event_loop.remove_signal_handler(signal.SIGINT)
        return _summary(console, result, shown_error=view.error_shown)

    _finish(lambda: _with_store(store, namespace, work))


def _summary(console: Console, result: RunResult, *, shown_error: str | None = None) -> int:
    """How the run ended, and its exit code; the error only if the view did not print it
    already (each line once)."""
    from rich.text import Text

    console.rule("[bold]summary")
    console.print(f"stop cause  {result.stop_cause.value}")
    console.print(f"steps       {result.steps}")
    if result.pause_reason:
        console.print(f"paused      {result.pause_reason}")
    if result.error and result.error != shown_error:
        console.print(Text(f"error: {result.error}", style="red"))
    return EXIT_OK if result.completed else EXIT_NOT_COMPLETED


# ── replay ───────────────────────────────────────────────────────────────────────────


def _replay_agent(capture: Capture, base: Agent | None, *, live: bool) -> Agent:
    """`base` with the recording as its model (and, unless `live`, as its tools); with no
    `base`, a stand-in that knows the recorded tools by name only (enough: the model side
    is recorded, so tool schemas and the system prompt are never sent anywhere)."""
    import copy

    from ..loop import Agent
    from ..model.replay import ReplayModel
    from ..tools import BaseTool, ExecContext, ToolOutput

    results = {r.call_id: (r.content, r.is_error) for r in capture.tool_results}

    class RecordedTool(BaseTool):
        """Answers with the result the capture recorded for the call id, so a replay with
        recorded tools touches nothing. A call the recording lacks gets an error result,
        and the replay then diverges at the next model call, naming the step."""

        def __init__(self, name: str, like: Any) -> None:
            self.name = name
            self.description = getattr(like, "description", f"{name} (recorded)")
            self.input_schema = getattr(like, "input_schema", {"type": "object"})
            self.read_only = True  # nothing runs: no approval to ask for

        async def call(self, args: dict[str, Any], ctx: ExecContext) -> ToolOutput:
            recorded = results.get(ctx.call_id)
            if recorded is None:
                return ToolOutput(f"call {ctx.call_id} is not in the recording", is_error=True)
            return ToolOutput(recorded[0], is_error=recorded[1])

    # Recorded tools are stand-ins, not the agent's: compare the messages only, unless
    # the agent's own tools run (`--tools live`), when its shape is checked too.
    model = ReplayModel(capture, check_agent=live)
    if live:
        if base is None:
            raise UsageError("--tools live needs the agent: pass --agent module:attr")
        agent = copy.copy(base)
        agent.model = model
        return agent
    names = sorted({r.name for r in capture.tool_results} | _called_tools(capture))
    tools = [RecordedTool(n, base.registry.get(n) if base is not None else None) for n in names]
    if base is None:
        if _answered_by_output_tool(capture):
            # The run answered by the output tool (tool mode): the stand-in asks the same
            # way, taking any JSON object as the answer (the run's type is not known here).
            from pydantic import RootModel

            class RecordedAnswer(RootModel[dict[str, Any]]):
                """The recorded run's structured answer."""

            return Agent(
                model, tools, name="replay", output_type=RecordedAnswer, output_mode="tool"
            )
        return Agent(model, tools, name="replay")
    return Agent(
        model,
        tools,
        system_prompt=base.system_prompt,
        name=base.name,
        state_type=base.state_type,
        output_type=base.output_type,
        output_mode=base.output_mode,  # asked as the recorded run was (a tool, say)
        retry=base.retry,
        config=base.config,
    )


def _answered_by_output_tool(capture: Capture) -> bool:
    from ..model import OUTPUT_TOOL_NAME

    return any(
        event.get("kind") == "call_start" and event.get("name") == OUTPUT_TOOL_NAME
        for record in capture.model_calls
        for event in record.stream
    )


def _called_tools(capture: Capture) -> set[str]:
    names: set[str] = set()
    for record in capture.model_calls:
        for call in record.response.get("tool_calls") or ():
            names.add(call["name"])
    return names


def replay_command(  # noqa: PLR0913 — a typer command: each parameter is one of its options
    *,
    run_id: str = typer.Argument(..., help="The run id whose capture to replay."),
    agent: str | None = typer.Option(None, "--agent", help=_AGENT_HELP),
    tools: str = typer.Option(
        "recorded", "--tools", help="recorded: tools answer from the capture; live: they run."
    ),
    workspace: Path | None = workspace_option(
        None, "(--tools live) The jail; a temporary one by default."
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="(--tools live) Allow every call."),
    store: str = store_option("The store", existing=True),
    captures_bucket: str = typer.Option(
        CAPTURES_BUCKET, "--captures-bucket", help="The captures bucket."
    ),
    bucket: str = typer.Option(
        CHECKPOINTS_BUCKET, "--bucket", help="The checkpoints bucket (to find the agent)."
    ),
    namespace: str = typer.Option("", "--namespace", help=_NAMESPACE_HELP),
) -> None:
    """Replay a captured run offline, showing its stream.

    The model answers from the recording and, with --tools recorded (the default), so do
    the tools: nothing is touched. A run that now asks the model something else stops
    with a divergence naming the step (exit 1)."""
    import tempfile

    from ..capture import load_capture
    from ..loop import RunContext, RunOptions
    from ..policy import AllowAll, NoOneToAsk
    from ..store import CheckpointStore, NotFound
    from ..tools import remove_tree
    from ._render import terminal_console
    from ._view import RunView

    if tools not in ("recorded", "live"):
        raise typer.BadParameter("--tools is 'recorded' or 'live'")
    if agent is not None:
        _allow_cwd_imports()
    live_root = None
    if tools == "live" and workspace is not None:
        live_root = workspace.resolve()
        live_root.mkdir(parents=True, exist_ok=True)

    async def work(bus: Bus) -> int:
        from ..loop import jail_root_of, load_agent, refuse_code_inside

        capture = await load_capture(bus, run_id, bucket=captures_bucket)
        if not capture.model_calls:
            raise UsageError(f"the capture of run {run_id} has no model calls to replay")
        ref = agent
        model: str | None = None
        jail: Path | None = None
        try:
            recorded = (await CheckpointStore(bus, bucket).load(run_id)).state
            model = recorded.model_spec
            jail = jail_root_of(recorded)
            if ref is None:
                ref = recorded.agent_ref
        except NotFound:
            pass
        # Not code from the jail the run's model wrote (law 11), nor from the one a live
        # replay's tools write.
        if ref is not None and live_root is not None:
            refuse_code_inside(ref.partition(":")[0], live_root, ref=ref)
        base = load_agent(ref, model=model, outside=jail) if ref is not None else None
        replayer = _replay_agent(capture, base, live=tools == "live")
        conversation = [_message(m) for m in capture.model_calls[0].new_messages]
        scratch = None
        if live_root is not None:
            root = live_root
        else:
            scratch = root = Path(tempfile.mkdtemp(prefix="tiller-replay-"))
        approver = (
            AllowAll()
            if tools == "recorded" or yes
            else NoOneToAsk("resume with --yes to allow it")
        )
        console = terminal_console()
        view = RunView(console)
        try:
            result = await replayer.run_in(
                RunContext.sandboxed(root, approver),
                conversation,
                RunOptions(),
                on_event=view.on_event,
                run_id=capture.run_id,
            )
        finally:
            view.close()
            if scratch is not None:
                remove_tree(scratch)  # iterative: the model may have nested it deep
        return _summary(console, result, shown_error=view.error_shown)

    _finish(lambda: _with_store(store, namespace, work))


def _message(data: dict[str, Any]) -> UserMessage | AssistantMessage:
    from ..conversation import AssistantMessage, UserMessage

    if data.get("role") == "assistant":
        return AssistantMessage.model_validate(data)
    return UserMessage.model_validate(data)
