"""`tiller rewind RUN_ID --to INDEX`: put a run back to an earlier point of its conversation.

Two things go back together, or the model would read about changes the workspace no
longer has: the files (from the file checkpoints of the run's session — its thread — taken
before each tool wrote, `tiller.store.FileCheckpoints.restore_to`), and the conversation
(truncated to its first INDEX messages, saved back as the run's checkpoint, so
`tiller runs show` shows it and `tiller runs resume` continues from it).

INDEX must leave a legal transcript that the model answers next (law 1): the last message
kept is a user message (the prompt, or one carrying tool results), so no call is left
without its result. A run still running (its lease is held) is refused, and the rewind
holds the lease itself meanwhile, so no resume starts halfway through. What the run spent
(usage, cost, budget) and its taint stay: a rewind is not a fresh purse (law 7) and not a
security boundary (law 6). The task checklist goes back too, to how it stood at message
INDEX (`RunState.tasks_history`), and so does the count of the run's model calls
(`RunState.model_calls`, which a `ScriptedModel` plays its script by): the resumed run's
next call is numbered as the one that answered at INDEX, so a scripted run replays its
script from there. Its typed state is not rewound (it is not snapshotted).

Order, so that a failure can be retried: the truncated conversation is saved first
(compare-and-set on the checkpoint's revision: a run that moved on meanwhile is refused),
then the files are restored; the file checkpoints are dropped only once every file is
back. If some file cannot be restored, running the same rewind again finishes the job.

Exit codes: 0 done; 1 not done: declined at the prompt (nothing changed), or files could
not all be restored (the conversation was rewound: fix the cause and run it again); 2 a
usage error or a refusal (unknown run, bad index, run still running, no --yes away from a
terminal).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..errors import TillerError, UsageError
from ._options import store_option, workspace_option
from ._runs import CHECKPOINTS_BUCKET
from ._safe import echo

if TYPE_CHECKING:
    from ..state import RunState
    from ..store import Bus, CheckpointStore, FileCheckpoints, RestoreReport

__all__ = ["rewind_command"]

EXIT_OK = 0
EXIT_NOT_DONE = 1
EXIT_USAGE = 2

#: How long the rewind holds the run's lease (seconds); it is released when done.
LEASE_TTL = 300.0


def rewind_command(
    *,
    run_id: str = typer.Argument(..., help="The run id."),
    to: int = typer.Option(
        ...,
        "--to",
        help="Keep the first INDEX messages (the last kept must be a user message); the "
        "files go back to how they were then.",
    ),
    store: str = store_option("The store", existing=True),
    bucket: str = typer.Option(CHECKPOINTS_BUCKET, "--bucket", help="The checkpoints bucket."),
    namespace: str = typer.Option(
        "", "--namespace", help="The store namespace (buckets are prefixed with it)."
    ),
    workspace: Path | None = workspace_option(None, "The jail, if not where the checkpoint says."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do it without asking."),
) -> None:
    """Rewind a run: restore its workspace files and cut its conversation to INDEX messages.

    Without --yes, shows what would change and asks (at a terminal; elsewhere it refuses).
    Continue the rewound run with `tiller runs resume RUN_ID`."""
    root = workspace.resolve() if workspace is not None else None
    interactive = sys.stdin.isatty()

    async def work() -> int:
        from ..store import open_bus

        bus = await open_bus(store, namespace=namespace)
        try:
            return await _rewind(bus, bucket, run_id, to, root, yes=yes, interactive=interactive)
        finally:
            await bus.aclose()

    try:
        code = asyncio.run(work())
    except TillerError as exc:
        echo(f"tiller: {exc}", err=True)
        code = EXIT_USAGE
    raise typer.Exit(code)


def valid_indexes(state: RunState) -> list[int]:
    """The lengths the conversation may be cut to: those whose last message is a user
    message (the model answers next) and whose prefix is a legal transcript."""
    from ..conversation import TranscriptError, UserMessage, check_transcript

    indexes: list[int] = []
    for length in range(1, len(state.messages) + 1):
        if not isinstance(state.messages[length - 1], UserMessage):
            continue
        try:
            check_transcript(state.messages[:length])
        except TranscriptError:
            break  # a broken prefix stays broken in every longer one
        indexes.append(length)
    return indexes


def _check_index(state: RunState, to: int) -> None:
    count = len(state.messages)
    valid = valid_indexes(state)
    listed = ", ".join(map(str, valid)) or "none"
    if not 0 <= to <= count:
        raise UsageError(
            f"--to {to} is out of range: run {state.run_id} has {count} message(s); "
            f"valid indexes: {listed}"
        )
    if to not in valid:
        raise UsageError(
            f"--to {to} would not leave a conversation the model can continue (the last "
            f"message kept must be a user message, with every call answered); valid "
            f"indexes: {listed}"
        )


def _jail(state: RunState, root: Path | None) -> Path:
    if root is not None:
        return root
    recorded = (state.policy or {}).get("jail_root")
    if not isinstance(recorded, str) or not recorded:
        raise UsageError(
            f"the checkpoint of run {state.run_id} does not record its workspace; pass --workspace"
        )
    return Path(recorded)


def _truncated(state: RunState, to: int) -> RunState:
    """`state` with its first `to` messages, and nothing that refers to those cut off."""
    from ..state import StopCause

    rewound = state.model_copy(deep=True)
    rewound.messages = rewound.messages[:to]
    kept = _call_ids(rewound)
    rewound.calls = {
        call_id: record for call_id, record in rewound.calls.items() if call_id in kept
    }
    # The checklist goes back with the conversation: as it stood at message `to`.
    rewound.tasks = rewound.checklist_at(to)
    rewound.tasks_history = [e for e in rewound.tasks_history if e.messages <= to]
    # The model-call count too: the rewound run's next call is numbered as the one that
    # answered at the cut, so a scripted model replays its script from there.
    rewound.model_calls = rewound.model_calls_at(to)
    rewound.model_calls_history = [e for e in rewound.model_calls_history if e.messages <= to]
    rewound.interrupts = []
    rewound.pending_input = []  # steering given after the point: part of the cut future
    rewound.stop_cause = StopCause.SUSPENDED
    rewound.error = None
    return rewound


async def _rewind(
    bus: Bus,
    bucket: str,
    run_id: str,
    to: int,
    root: Path | None,
    *,
    yes: bool,
    interactive: bool,
) -> int:
    from ..store import CheckpointStore, FileCheckpoints, RevisionConflict, RunStillRunning

    checkpoints = CheckpointStore(bus, bucket)
    checkpoint = await checkpoints.load(run_id)
    state = checkpoint.state
    latest = await checkpoints.for_thread(state.thread_id)
    if latest is not None and latest.state.run_id != run_id:
        raise UsageError(
            f"run {run_id} is not the latest run of thread {state.thread_id!r}: "
            f"{latest.state.run_id} continued it; rewind that one"
        )
    _check_index(state, to)
    jail = _jail(state, root)
    try:
        lease = await checkpoints.hold(run_id, _owner(), LEASE_TTL)
    except RunStillRunning as exc:
        raise UsageError(
            f"run {run_id} is still running ({exc.owner} holds it for "
            f"{exc.seconds_left:.0f} more seconds); cancel it or let it stop, then rewind"
        ) from None
    try:
        files = FileCheckpoints(bus)
        if not yes:
            preview = await files.restore_to(state.thread_id, to, jail, dry_run=True)
            if not _confirm(state, to, preview, interactive=interactive):
                echo("nothing was changed")
                return EXIT_NOT_DONE
        rewound = _truncated(state, to)
        try:
            await checkpoints.save(rewound, "suspended", expected=checkpoint.revision)
        except RevisionConflict:
            raise UsageError(
                f"run {run_id} changed while it was being rewound; look again "
                f"(tiller runs show {run_id}) and retry"
            ) from None
        await _forget_cut_calls(checkpoints, rewound)
        return await _restore_files(files, state, to, jail)
    finally:
        await checkpoints.release_hold(lease)


async def _restore_files(files: FileCheckpoints, state: RunState, to: int, jail: Path) -> int:
    from ..store import FileRestoreFailed

    before = len(state.messages)
    try:
        report = await files.restore_to(state.thread_id, to, jail)
    except FileRestoreFailed as exc:
        _print_files(exc.report, done=True)
        for path, why in exc.report.failed:
            echo(f"failed    {path}: {why}", err=True)
        echo(
            f"tiller: the conversation of run {state.run_id} was cut to {to} message(s), but "
            f"{len(exc.report.failed)} file(s) could not be restored; fix that and run "
            f"`tiller rewind {state.run_id} --to {to}` again",
            err=True,
        )
        return EXIT_NOT_DONE
    _print_files(report, done=True)
    echo(
        f"rewound run {state.run_id} to message {to}: {len(report.restored)} file(s) "
        f"restored, {len(report.deleted)} deleted, {len(report.unchanged)} unchanged"
        f"{_not_restored(report)}; the conversation has {to} message(s) (was {before})"
    )
    echo(f"continue it: tiller runs resume {state.run_id} (at a terminal, or with --yes)")
    return EXIT_OK


def _print_files(report: RestoreReport, *, done: bool) -> None:
    restore, delete = ("restored", "deleted") if done else ("restore", "delete")
    for path in report.restored:
        echo(f"{restore:<9} {path}")
    for path in report.deleted:
        echo(f"{delete:<9} {path}")
    if done:
        for path in report.removed_dirs:
            echo(f"{'rmdir':<9} {path}/")
    _print_shell(report)


def _print_shell(report: RestoreReport) -> None:
    """Which shell commands' edits are undone, and what could not be put back: files too
    large to have been saved, and snapshots a cap left partial."""
    for command in report.commands:
        shown = command if len(command) <= 200 else command[:200] + "..."
        echo(f"{'undo':<9} shell: {shown}")
    for path, why in report.unsaved:
        echo(f"{'unsaved':<9} {path}: {why}", err=True)
    for note in report.partial:
        echo(f"{'partial':<9} {note}", err=True)


def _not_restored(report: RestoreReport) -> str:
    """The summary's warning, when something could not be put back."""
    parts = []
    if report.unsaved:
        parts.append(f"{len(report.unsaved)} could not be restored (never saved)")
    if report.partial:
        parts.append(f"{len(report.partial)} shell snapshot(s) were partial")
    return ", " + ", ".join(parts) if parts else ""


def _confirm(state: RunState, to: int, preview: RestoreReport, *, interactive: bool) -> bool:
    """Show what the rewind would change and ask; refuse away from a terminal."""
    echo(
        f"rewind run {state.run_id} to message {to} of {len(state.messages)}: "
        f"{len(preview.restored)} file(s) to restore, {len(preview.deleted)} to delete"
    )
    _print_files(preview, done=False)
    for path, why in preview.failed:
        echo(f"{'cannot':<9} {path}: {why}")
    if not interactive:
        raise UsageError(
            "a rewind overwrites files in the workspace; pass --yes to do it without a terminal"
        )
    return typer.confirm("rewind?", default=False)


async def _forget_cut_calls(checkpoints: CheckpointStore, state: RunState) -> None:
    """Drop the store's records of calls the rewind cut off, so `runs show` and a resume
    see only calls the conversation still has."""
    kept = _call_ids(state)
    for call_id in await checkpoints.calls(state.run_id):
        if call_id not in kept:
            await checkpoints.forget_call(state.run_id, call_id)


def _call_ids(state: RunState) -> set[str]:
    from ..conversation import AssistantMessage

    return {
        call.id
        for message in state.messages
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls
    }


def _owner() -> str:
    return f"tiller rewind on {socket.gethostname()} (pid {os.getpid()})"
