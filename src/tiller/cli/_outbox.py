"""`tiller outbox list | show | edit | send | reject`: staged calls, released by a person.

A run's gate stages the calls of tools routed to the outbox instead of running them
(`tiller.store.OutboxStore`); nothing has been sent. Here a person reads a staged item,
edits its arguments, and sends it — the tool runs once, in the run's workspace, with the
edited arguments — or rejects it.

`send_outbox_item` is the release itself, for any front end: it loads the run's agent
(the checkpoint's `agent_ref`, or one given), finds the tool, validates the arguments
against its schema, asks the person to confirm, calls the release hook (which re-checks
the interlock, the hooks and the policy with the person's approval in place of the
approver), claims the item (`staged → sending`, so it is never sent twice) and runs the
tool, recording what it returned (`sent`) or that it crashed (`failed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ..errors import UsageError
from ._held import (
    EXIT_NOT_COMPLETED,
    EXIT_OK,
    age,
    allow_cwd_imports,
    finish,
    parse_arguments,
    print_table,
    short_json,
    timestamp,
)
from ._options import agent_help, store_option, workspace_option
from ._runs import CHECKPOINTS_BUCKET, _with_store

if TYPE_CHECKING:
    from ..store import Bus, OutboxItem

__all__ = ["OUTBOX_BUCKET", "Confirm", "ReleaseCheck", "outbox_app", "send_outbox_item"]

#: `tiller.store._outbox.OUTBOX_BUCKET`, written out so that loading the CLI does not
#: import the store (a test checks they agree).
OUTBOX_BUCKET = "tiller-outbox"

#: The release hook: `(item, tool, arguments)` → a refusal the person reads, or None to
#: let the send go ahead. It re-checks what the gate skipped when it staged the call.
ReleaseCheck = Callable[["OutboxItem", Any, dict[str, Any]], Awaitable[str | None]]
#: Asks the person: send `item` with these arguments? (True: yes.)
Confirm = Callable[["OutboxItem", dict[str, Any]], Awaitable[bool]]

outbox_app = typer.Typer(
    name="outbox",
    help="Staged tool calls waiting for a person: list, show, edit, send, reject.",
    no_args_is_help=True,
    add_completion=False,
)

_BUCKET_HELP = "The outbox bucket."
_NAMESPACE_HELP = "The store namespace (buckets are prefixed with it)."


def _interactive() -> bool:
    """Whether a person is at the terminal to confirm a send."""
    return sys.stdin.isatty()


# ── the release ──────────────────────────────────────────────────────────────────────


async def _pinned_record(
    bus: Bus, item_id: str, bucket: str, checkpoints_bucket: str
) -> dict[str, Any] | None:
    """The pinned policy of the run that staged `item_id` (None: its checkpoint is gone
    or pinned nothing: the release is checked with the defaults)."""
    from ..store import CheckpointStore, NotFound, OutboxStore

    try:
        item = await OutboxStore(bus, bucket).get(item_id)
        state = (await CheckpointStore(bus, checkpoints_bucket).load(item.run_id)).state
    except NotFound:
        return None
    pinned = (state.policy or {}).get("pinned")
    return dict(pinned) if pinned is not None else None


async def send_outbox_item(
    bus: Bus,
    item_id: str,
    *,
    agent: str | None = None,
    workspace: Path | None = None,
    confirm: Confirm | None = None,
    release_check: ReleaseCheck | None = None,
    bucket: str = OUTBOX_BUCKET,
    checkpoints_bucket: str = CHECKPOINTS_BUCKET,
) -> OutboxItem:
    """Send a staged item: run its tool once, with the edited (else the drafted)
    arguments, in the run's workspace (or `workspace`), and record the result.

    Everything that can refuse — the item is not staged, the agent or the tool cannot be
    found, the arguments do not fit the tool, the person declines (`confirm` returns
    False: the item is returned unchanged, still staged), the release hook refuses — does
    so before the item is claimed, so it can be fixed and sent later. Once claimed
    (`sending`), the item is never sent again: the tool's result marks it `sent` (an
    error result too: the tool ran), a crash or an interruption marks it `failed`."""
    from ..cancel import CancellationToken
    from ..conversation import ToolCall
    from ..loop import load_agent
    from ..ops import check_arguments
    from ..store import CheckpointStore, NotFound, OutboxStatusError, OutboxStore, StoreError
    from ..tools import ExecContext, Jail, Outcome

    outbox = OutboxStore(bus, bucket)
    item = await outbox.get(item_id)
    if item.status != "staged":
        raise OutboxStatusError(
            item, f"{item.id} is {item.describe_status()}: an item is sent at most once"
        )
    ref = agent
    model: str | None = None
    try:
        state = (await CheckpointStore(bus, checkpoints_bucket).load(item.run_id)).state
        model = state.model_spec
        if ref is None:
            ref = state.agent_ref
    except NotFound:
        pass
    if ref is None:
        raise UsageError(
            f"run {item.run_id} does not record its agent, so the tool {item.tool!r} "
            "cannot be found; pass --agent module:attr"
        )
    registry = load_agent(ref, model=model).registry
    tool = registry.get(item.tool)
    if tool is None:
        raise UsageError(f"the agent {ref!r} has no tool {item.tool!r}; pass the right --agent")
    arguments = item.arguments
    check_arguments(tool, arguments)
    root = workspace if workspace is not None else item.workspace
    if root is None:
        raise UsageError(f"{item.id} records no workspace; pass --workspace DIR")
    jail = Jail(root)
    if confirm is not None and not await confirm(item, arguments):
        return item
    if release_check is not None:
        # Checked against the workspace it will run in (`--workspace` may move it).
        here = item.model_copy(update={"workspace": str(root)})
        refusal = await release_check(here, tool, arguments)
        if refusal is not None:
            raise UsageError(f"{item.id} was not sent: {refusal}")
    item = await outbox.start_sending(item.id)
    call = ToolCall(id=item.call_id, name=item.tool, arguments=_encode(arguments))
    # Step 0: the call runs outside any step of its run, released by a person.
    ctx = ExecContext(
        token=CancellationToken(), call_id=item.call_id, step=0, workdir=jail.root, jail=jail
    )
    try:
        execution = await registry.execute(call, ctx)
    except BaseException as exc:
        # Interrupted while the tool ran: whether it acted is unknown, so the item is
        # never sent again; `failed` says so (if the store fails too, it stays `sending`:
        # still never sent twice).
        with contextlib.suppress(StoreError):
            await outbox.mark_failed(item.id, f"interrupted while sending ({type(exc).__name__})")
        raise
    finally:
        ctx.progress.close()
    result = execution.result
    if execution.outcome is Outcome.CRASHED:
        return await outbox.mark_failed(item.id, result.content)
    return await outbox.mark_sent(item.id, result.content, is_error=result.is_error)


def _encode(arguments: dict[str, Any]) -> str:
    import orjson

    return orjson.dumps(arguments).decode()


async def _ask_at_terminal(item: OutboxItem, arguments: dict[str, Any]) -> bool:
    """Show what would be sent and ask; the prompt blocks, so it runs in a thread."""
    from ..conversation import Taint  # pydantic loads with the command, not with the CLI

    typer.echo(f"send {item.id}: {item.tool}({_encode(arguments)})")
    typer.echo(f"  in {item.workspace}, taint: {_taint(item)}")
    if item.taint & Taint.PRIVATE_DATA and item.taint & Taint.UNTRUSTED_INPUT:
        typer.echo(
            "  warning: this was drafted after the conversation read private data and "
            "untrusted input; check that nothing private leaves by mistake"
        )
    return await asyncio.to_thread(typer.confirm, "Send it?", default=False)


def _taint(item: OutboxItem) -> str:
    from ..conversation import Taint

    names = [flag.name.lower() for flag in Taint if flag.value and flag in item.taint and flag.name]
    return ", ".join(names) or "none"


# ── commands ─────────────────────────────────────────────────────────────────────────


@outbox_app.command("list")
def list_items(
    all_items: bool = typer.Option(
        False, "--all", help="Every item, not only those waiting (staged or being sent)."
    ),
    store: str = store_option("The store", existing=True),
    bucket: str = typer.Option(OUTBOX_BUCKET, "--bucket", help=_BUCKET_HELP),
    namespace: str = typer.Option("", "--namespace", help=_NAMESPACE_HELP),
) -> None:
    """List the outbox: ID, RUN, TOOL, ARGS, AGE, STATUS (by default the items waiting)."""
    from ..store import OutboxStore

    async def work(bus: Bus) -> int:
        items = await OutboxStore(bus, bucket).list()
        if not all_items:
            items = [item for item in items if item.status in ("staged", "sending")]
        if not items:
            typer.echo("no staged items" if not all_items else "the outbox is empty")
            return EXIT_OK
        now = bus.clock()
        rows = [
            (i.id, i.run_id, i.tool, short_json(i.arguments), age(now - i.created_at), i.status)
            for i in items
        ]
        print_table(("ID", "RUN", "TOOL", "ARGS", "AGE", "STATUS"), rows)
        return EXIT_OK

    finish(lambda: _with_store(store, namespace, work))


@outbox_app.command("show")
def show_item(
    item_id: str = typer.Argument(..., help="The item id (ob-...)."),
    store: str = store_option("The store", existing=True),
    bucket: str = typer.Option(OUTBOX_BUCKET, "--bucket", help=_BUCKET_HELP),
    namespace: str = typer.Option("", "--namespace", help=_NAMESPACE_HELP),
) -> None:
    """Show an item: its arguments as drafted and as edited, taint, status, result."""
    import orjson

    from ..store import OutboxStore

    def pretty(value: Any) -> str:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode().replace("\n", "\n  ")

    async def work(bus: Bus) -> int:
        item = await OutboxStore(bus, bucket).get(item_id)
        typer.echo(f"item       {item.id}")
        typer.echo(f"status     {item.status}")
        typer.echo(f"run        {item.run_id} (thread {item.thread_id})")
        typer.echo(f"call       {item.tool} [{item.call_id}]")
        typer.echo(f"taint      {_taint(item)}")
        typer.echo(f"workspace  {item.workspace or '-'}")
        typer.echo(f"staged     {timestamp(item.created_at)}")
        typer.echo(f"updated    {timestamp(item.updated_at)}")
        typer.echo("drafted arguments")
        typer.echo(f"  {pretty(item.drafted_arguments)}")
        if item.edited_arguments is None:
            typer.echo("edited arguments: none (a send uses the draft)")
        else:
            typer.echo("edited arguments (a send uses these)")
            typer.echo(f"  {pretty(item.edited_arguments)}")
        if item.result is not None:
            label = "result (an error)" if item.result.is_error else "result"
            typer.echo(label)
            typer.echo(f"  {item.result.content}")
        if item.reject_reason is not None:
            typer.echo(f"rejected   {item.reject_reason}")
        if item.failure is not None:
            typer.echo(f"failure    {item.failure}")
        if item.status == "sending":
            typer.echo(
                "being sent; if its sender died, whether it went out is unknown, and it is "
                "not sent again"
            )
        return EXIT_OK

    finish(lambda: _with_store(store, namespace, work))


@outbox_app.command("edit")
def edit_item(
    item_id: str = typer.Argument(..., help="The item id (ob-...)."),
    args: str = typer.Option(..., "--args", help="The new arguments, a JSON object."),
    store: str = store_option("The store", existing=True),
    bucket: str = typer.Option(OUTBOX_BUCKET, "--bucket", help=_BUCKET_HELP),
    namespace: str = typer.Option("", "--namespace", help=_NAMESPACE_HELP),
) -> None:
    """Replace a staged item's arguments (checked against the tool when it is sent)."""
    from ..store import OutboxStore

    def start() -> Coroutine[Any, Any, int]:
        arguments = parse_arguments(args)  # before the store: a usage error, exit 2

        async def work(bus: Bus) -> int:
            edited = await OutboxStore(bus, bucket).edit(item_id, arguments)
            typer.echo(f"edited {edited.id}: {edited.tool}({short_json(edited.arguments, 200)})")
            typer.echo(f"send it with: tiller outbox send {edited.id}")
            return EXIT_OK

        return _with_store(store, namespace, work)

    finish(start)


@outbox_app.command("send")
def send_item(
    *,
    item_id: str = typer.Argument(..., help="The item id (ob-...)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Send without asking."),
    agent: str | None = typer.Option(None, "--agent", help=agent_help("Default: the run's.")),
    workspace: Path | None = workspace_option(
        None, "Where the tool runs, if not the run's workspace."
    ),
    store: str = store_option("The store", existing=True),
    bucket: str = typer.Option(OUTBOX_BUCKET, "--bucket", help=_BUCKET_HELP),
    checkpoints_bucket: str = typer.Option(
        CHECKPOINTS_BUCKET, "--checkpoints-bucket", help="The run checkpoints bucket."
    ),
    namespace: str = typer.Option("", "--namespace", help=_NAMESPACE_HELP),
) -> None:
    """Send a staged item: its tool runs once, with the edited arguments if any.

    Asks first at a terminal; without one, pass --yes. The arguments are checked against
    the tool's schema before anything runs."""
    allow_cwd_imports()
    interactive = _interactive()
    root = workspace.resolve() if workspace is not None else None

    async def work(bus: Bus) -> int:
        if not (yes or interactive):
            raise UsageError(
                f"no one is at a terminal to confirm sending {item_id}; "
                "send it at a terminal, or with --yes"
            )
        from ._release import release_check

        pinned = await _pinned_record(bus, item_id, bucket, checkpoints_bucket)

        async def check(item: OutboxItem, tool: Any, arguments: dict[str, Any]) -> str | None:
            return await release_check(item, tool, arguments, pinned=pinned)

        item = await send_outbox_item(
            bus,
            item_id,
            agent=agent,
            workspace=root,
            confirm=None if yes else _ask_at_terminal,
            release_check=check,
            bucket=bucket,
            checkpoints_bucket=checkpoints_bucket,
        )
        if item.status == "staged":
            typer.echo(f"not sent: {item.id} stays staged")
            return EXIT_NOT_COMPLETED
        if item.status == "failed":
            typer.echo(f"{item.id} failed while sending: {item.failure}", err=True)
            return EXIT_NOT_COMPLETED
        assert item.result is not None
        if item.result.is_error:
            typer.echo(f"sent {item.id}; {item.tool} reported an error: {item.result.content}")
            return EXIT_NOT_COMPLETED
        typer.echo(f"sent {item.id}: {item.tool} → {item.result.content}")
        return EXIT_OK

    finish(lambda: _with_store(store, namespace, work))


@outbox_app.command("reject")
def reject_item(
    item_id: str = typer.Argument(..., help="The item id (ob-...)."),
    reason: str = typer.Option(..., "--reason", help="Why it is not sent."),
    store: str = store_option("The store", existing=True),
    bucket: str = typer.Option(OUTBOX_BUCKET, "--bucket", help=_BUCKET_HELP),
    namespace: str = typer.Option("", "--namespace", help=_NAMESPACE_HELP),
) -> None:
    """Reject a staged item: it is never sent."""
    from ..store import OutboxStore

    async def work(bus: Bus) -> int:
        rejected = await OutboxStore(bus, bucket).reject(item_id, reason)
        typer.echo(f"rejected {rejected.id} ({rejected.tool}): {reason}")
        return EXIT_OK

    finish(lambda: _with_store(store, namespace, work))
