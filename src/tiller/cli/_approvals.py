"""`tiller approvals list`, `tiller approve ID`, `tiller deny ID --reason TEXT`: a person
answers the calls a headless run held, from any process, and the run goes on.

A fleet run (one a worker ran: its held result record is in `tiller-run-results`) is
not resumed here: once its held calls are all decided, its continuation is enqueued on
the queue its worker took it from (`tiller.fleet.Fleet.continue_run`), and a worker
resumes it.

A headless durable run that needs approval suspends, and its gate holds each call in the
store (`tiller.store.ApprovalStore`). `approve` / `deny` record the person's decision
(once: a second decision is refused) and, when it was the last one the run waited for,
resume the run here with every decision (`tiller.loop.resume`): approved calls run —
with the person's edited arguments if `--args` gave them — and denied ones answer
"Denied by the user: <reason>". A run holding several calls waits until each is decided;
`approve` then says which are left. `tiller approvals resume RUN_ID` resumes a run whose
calls were all decided but whose resume did not happen (it failed, or was interrupted).

Everything that can be refused is checked before the decision is recorded: the record is
pending, the run is still suspended on that call, the agent loads, edited arguments fit
the tool's schema. Exit codes are `_held`'s: 0 done (or recorded and waiting), 1 the
resumed run stopped short, 2 a refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import typer

from ..errors import TillerError
from ._held import (
    EXIT_NOT_COMPLETED,
    EXIT_OK,
    age,
    allow_cwd_imports,
    finish,
    parse_arguments,
    print_table,
    short_json,
)
from ._options import agent_help, store_option
from ._runs import CHECKPOINTS_BUCKET, _resume_view, _with_store
from ._safe import echo

if TYPE_CHECKING:
    from rich.console import Console

    from ..loop import RunResult
    from ..store import Bus, HeldApproval

__all__ = ["APPROVALS_BUCKET", "approvals_app", "approve_command", "deny_command"]

#: `tiller.store._approvals.APPROVALS_BUCKET`, written out so that loading the CLI does
#: not import the store (a test checks they agree).
APPROVALS_BUCKET = "tiller-approvals"

approvals_app = typer.Typer(
    name="approvals",
    help="Calls held by headless runs, waiting for a person: list them, resume a run.",
    no_args_is_help=True,
    add_completion=False,
)

_BUCKET_HELP = "The held-approvals bucket."
_CHECKPOINTS_HELP = "The run checkpoints bucket."
_NAMESPACE_HELP = "The store namespace (buckets are prefixed with it)."
_AGENT_HELP = agent_help("Default: the one the run's checkpoint records.")


# ── list ─────────────────────────────────────────────────────────────────────────────


@approvals_app.command("list")
def list_approvals(
    all_records: bool = typer.Option(False, "--all", help="Decided ones too, not only pending."),
    store: str = store_option("The store", existing=True),
    bucket: str = typer.Option(APPROVALS_BUCKET, "--bucket", help=_BUCKET_HELP),
    namespace: str = typer.Option("", "--namespace", help=_NAMESPACE_HELP),
) -> None:
    """List held calls: ID, RUN, TOOL, ARGS, AGE, STATUS (by default the pending ones)."""
    from ..ops import Buckets, held_approvals

    async def work(bus: Bus) -> int:
        records = await held_approvals(
            bus, include_decided=all_records, buckets=Buckets(approvals=bucket)
        )
        if not records:
            echo("no pending approvals" if not all_records else "no held approvals")
            return EXIT_OK
        now = bus.clock()
        rows = [
            (r.id, r.run_id, r.tool, short_json(r.arguments), age(now - r.created_at), r.status)
            for r in records
        ]
        print_table(("ID", "RUN", "TOOL", "ARGS", "AGE", "STATUS"), rows)
        return EXIT_OK

    finish(lambda: _with_store(store, namespace, work))


# ── approve, deny ────────────────────────────────────────────────────────────────────


def approve_command(
    *,
    approval_id: str = typer.Argument(..., help="The held approval's id (ap-...)."),
    args: str | None = typer.Option(
        None, "--args", help="Run it with these arguments instead (a JSON object)."
    ),
    agent: str | None = typer.Option(None, "--agent", help=_AGENT_HELP),
    store: str = store_option("The store", existing=True),
    bucket: str = typer.Option(APPROVALS_BUCKET, "--bucket", help=_BUCKET_HELP),
    checkpoints_bucket: str = typer.Option(
        CHECKPOINTS_BUCKET, "--checkpoints-bucket", help=_CHECKPOINTS_HELP
    ),
    namespace: str = typer.Option("", "--namespace", help=_NAMESPACE_HELP),
) -> None:
    """Approve a held call; once the run's held calls are all decided, resume the run
    (a fleet run: queue its continuation for a worker).

    With --args the call runs with those arguments (checked against the tool's schema)."""
    allow_cwd_imports()

    def start() -> Coroutine[Any, Any, int]:
        edited = parse_arguments(args) if args is not None else None  # before the store

        async def work(bus: Bus) -> int:
            return await decide_and_resume(
                bus,
                approval_id,
                approve=True,
                edited_arguments=edited,
                agent=agent,
                bucket=bucket,
                checkpoints_bucket=checkpoints_bucket,
            )

        return _with_store(store, namespace, work)

    finish(start)


def deny_command(
    *,
    approval_id: str = typer.Argument(..., help="The held approval's id (ap-...)."),
    reason: str = typer.Option(..., "--reason", help="Why not (the model reads it)."),
    agent: str | None = typer.Option(None, "--agent", help=_AGENT_HELP),
    store: str = store_option("The store", existing=True),
    bucket: str = typer.Option(APPROVALS_BUCKET, "--bucket", help=_BUCKET_HELP),
    checkpoints_bucket: str = typer.Option(
        CHECKPOINTS_BUCKET, "--checkpoints-bucket", help=_CHECKPOINTS_HELP
    ),
    namespace: str = typer.Option("", "--namespace", help=_NAMESPACE_HELP),
) -> None:
    """Deny a held call; once the run's held calls are all decided, resume the run
    (a fleet run: queue its continuation for a worker).

    The model reads "Denied by the user: REASON"."""
    allow_cwd_imports()

    async def work(bus: Bus) -> int:
        return await decide_and_resume(
            bus,
            approval_id,
            approve=False,
            reason=reason,
            agent=agent,
            bucket=bucket,
            checkpoints_bucket=checkpoints_bucket,
        )

    finish(lambda: _with_store(store, namespace, work))


async def decide_and_resume(
    bus: Bus,
    approval_id: str,
    *,
    approve: bool,
    reason: str | None = None,
    edited_arguments: dict[str, Any] | None = None,
    agent: str | None = None,
    bucket: str = APPROVALS_BUCKET,
    checkpoints_bucket: str = CHECKPOINTS_BUCKET,
) -> int:
    """Record the decision on `approval_id`; if the run now has every held call decided,
    resume it in this process. Returns the exit code."""
    from .. import ops

    buckets = ops.Buckets(checkpoints=checkpoints_bucket, approvals=bucket)
    if approve:
        done = await ops.approve(
            bus, approval_id, arguments=edited_arguments, agent=agent, buckets=buckets
        )
    else:
        done = await ops.deny(bus, approval_id, reason or "", agent=agent, buckets=buckets)
    decided = done.record
    verdict = "approved" if approve else "denied"
    edited = f" with {short_json(edited_arguments, 200)}" if edited_arguments is not None else ""
    why = f": {reason}" if reason else ""
    echo(f"{verdict} {decided.id} ({decided.tool}{edited}, run {decided.run_id}){why}")
    if done.waiting:
        echo(f"waiting for: {', '.join(done.waiting)} (the run resumes once each is decided)")
        return EXIT_OK
    if await _continue_on_fleet(bus, decided.run_id):
        return EXIT_OK
    return await _resume(bus, done.records, agent, checkpoints_bucket)


@approvals_app.command("resume")
def resume_decided(
    *,
    run_id: str = typer.Argument(..., help="The run id."),
    agent: str | None = typer.Option(None, "--agent", help=_AGENT_HELP),
    store: str = store_option("The store", existing=True),
    bucket: str = typer.Option(APPROVALS_BUCKET, "--bucket", help=_BUCKET_HELP),
    checkpoints_bucket: str = typer.Option(
        CHECKPOINTS_BUCKET, "--checkpoints-bucket", help=_CHECKPOINTS_HELP
    ),
    namespace: str = typer.Option("", "--namespace", help=_NAMESPACE_HELP),
) -> None:
    """Resume a suspended run whose held calls are all decided (when the resume that
    `approve` or `deny` started did not happen: it failed, or was interrupted)."""
    allow_cwd_imports()
    from ..ops import Buckets, decided_records

    async def work(bus: Bus) -> int:
        buckets = Buckets(checkpoints=checkpoints_bucket, approvals=bucket)
        records = await decided_records(bus, run_id, buckets=buckets)
        if await _continue_on_fleet(bus, run_id):
            return EXIT_OK
        return await _resume(bus, records, agent, checkpoints_bucket)

    finish(lambda: _with_store(store, namespace, work))


# ── the pieces ───────────────────────────────────────────────────────────────────────


async def _continue_on_fleet(bus: Bus, run_id: str) -> bool:
    """A fleet run (a worker ran it: its result record says it is held for a person)
    is continued by the fleet, not in this process: enqueue its continuation on the
    queue its worker took it from (`Fleet.continue_run`) and say so. False for a run
    that is not a fleet run (resume it here)."""
    from ..fleet import RUN_QUEUE, Fleet, ResultStore

    record = await ResultStore(bus).get(run_id)
    if record is None or not record.held:
        return False
    queue = record.queue or RUN_QUEUE
    job_id = await Fleet(bus, queue).continue_run(run_id)  # the queue's lease, kept
    echo(
        f"run {run_id} is a fleet run: queued its continuation {job_id} on {queue}; "
        "a worker resumes it (not this process)"
    )
    return True


async def _resume(
    bus: Bus, records: dict[str, HeldApproval], agent: str | None, checkpoints_bucket: str
) -> int:
    """Resume the run with every decision, showing its stream; then say how it ended."""
    from ..cancel import CancellationToken
    from ..ops import resume_decided
    from ..state import StopCause
    from ..store import AlreadyResumed, ApprovalStore
    from ._render import terminal_console
    from ._run import _print_held, _sigint_handler

    run_id = next(iter(records.values())).run_id
    console = terminal_console()
    echo(f"resuming run {run_id}")
    view = _resume_view(console)
    # Ctrl+C cancels the resumed run as it does `tiller run`'s: it ends `cancelled`,
    # keeping what it did; a second Ctrl+C exits at once.
    cancel = CancellationToken()
    event_loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        event_loop.add_signal_handler(signal.SIGINT, _sigint_handler(console, cancel))
    try:
        # The policy the run was started with, from its checkpoint: never the
        # workspace's tiller.toml, which the model may have written (law 11).
        result = await resume_decided(
            bus,
            records,
            agent=agent,
            bucket=checkpoints_bucket,
            on_event=view.on_event,
            cancel=cancel,
        )
    except AlreadyResumed:
        raise  # someone else continued it: nothing to retry
    except TillerError:
        echo(
            f"tiller: the decisions are recorded; once this is fixed, resume the run with "
            f"them: tiller approvals resume {run_id}",
            err=True,
        )
        raise
    finally:
        view.close()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            event_loop.remove_signal_handler(signal.SIGINT)
    code = _summary(console, result, shown_error=view.error_shown)
    if result.stop_cause is StopCause.SUSPENDED:
        # The calls it holds now are new calls, with records of their own: name them.
        held = await ApprovalStore(bus).for_run(result.state.run_id)
        _print_held(console, held, result.state.run_id, None)
    return code


def _summary(console: Console, result: RunResult, *, shown_error: str | None = None) -> int:
    """How the resumed run ended; the error only if the view did not print it already."""
    from rich.text import Text

    from ..state import StopCause

    console.rule("[bold]summary")
    console.print(f"stop cause  {result.stop_cause.value}")
    if result.text:
        console.print(Text(f"final text  {result.text}"))
    if result.error and result.error != shown_error:
        console.print(Text(f"error: {result.error}", style="red"))
    if result.stop_cause is StopCause.SUSPENDED:
        waiting = len(result.state.interrupts)
        console.print(
            f"suspended again: {waiting} call(s) wait for a decision (tiller approvals list)"
        )
        return EXIT_OK
    return EXIT_OK if result.completed else EXIT_NOT_COMPLETED
