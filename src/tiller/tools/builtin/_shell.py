"""`execute_command`: run a bash command in the workspace, inside the bwrap sandbox.

The command runs under `bwrap` (`tiller.tools._sandbox`, DESIGN §11): it sees the system
read-only, an empty `/tmp` and home directory, the network only if the run grants it, and
the jail read-write as its working directory. Where the sandbox cannot run (no `bwrap`,
no user namespaces) the tool refuses, saying how to install it, unless the run explicitly
accepted an unsandboxed shell (`Jail.with_unsandboxed_shell()`): then the command runs
as the current user with the current environment, its own session and process group.

Protected paths (`Jail.protected`: tiller's configuration and state, git's config and
hooks, configured hook scripts) are read-only inside the sandbox where they exist; one the
command creates where nothing was is removed when it ends (for a background job, when
the job ends), and the result says so (`ProtectedSnapshot`, law 11).

Either way the whole process tree is killed when the command ends, times out or is
cancelled (its group, and under bwrap the sandbox's pid namespace), so a runaway `sleep`,
a forgotten `server &` or a fork bomb's children do not outlive the call. Its output is
streamed live to the call's progress channel (the first `MAX_LIVE_OUTPUT_BYTES` of it)
and returned as the result, bounded: a head and a tail, the whole spilled to a file the
result names (`OutputCapture`).

A command can leave its step: started with `background=true`, or detached by a person
(the step's background token) while it runs. It then belongs to the run's
`BackgroundJobs` and `background_process` reaches it.

`execute_command` uses the process-wide default sandbox (probed once); build the tool
over another one with `execute_command_tool(Sandbox(...))`, for example to show a Python
installation the home directory's tmpfs would hide (`Sandbox.python_paths()`).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import enum
import os
from collections.abc import Mapping
from typing import Annotated, Any, Final

from pydantic import Field

from ...cancel import CancellationToken
from .._capture import OutputCapture
from .._exec import ExecContext
from .._file_snapshots import snapshot_before_command
from .._process import Command, describe_exit, spawn
from .._progress import Progress
from .._protected_snapshot import ProtectedSnapshot
from .._risk_class import RiskClass
from .._sandbox import DEFAULT_SANDBOX, Sandbox, SandboxUnavailable
from .._tool import Capability, FunctionTool, ToolError, ToolOutput, tool

__all__ = ["execute_command", "execute_command_tool"]

#: Output bytes a foreground command's process log keeps in memory (its newest): what a
#: person detaching it to the background finds. The result comes from `OutputCapture`.
MAX_SHELL_OUTPUT_BYTES: Final = 1024 * 1024
#: Characters of a command's output relayed live as progress; past them one note says
#: where the rest is, so the run's event log stays bounded however much it prints.
MAX_LIVE_OUTPUT_CHARS: Final = 256 * 1024
#: Pending output past this many characters is sent as a progress event at once; smaller
#: reads are coalesced until the event loop has handled everything that arrived.
PROGRESS_CHUNK_CHARS: Final = 4096

_NO_JOBS: Final = (
    "this run cannot keep commands in the background (it has no job registry); run the "
    "command in the foreground, with a timeout if it may take long"
)


class _Relay:
    """Streams a command's output to the call's progress channel.

    Decoded incrementally, so a UTF-8 character split between two reads stays whole, and
    coalesced: one event per ~4 KiB, or per burst of reads the loop handles together.
    `stop()` flushes what is pending and ends the relay (the call returned or the command
    was detached: the call's progress no longer speaks for it).
    """

    __slots__ = (
        "_capture",
        "_decoder",
        "_event_loop",
        "_pending",
        "_progress",
        "_scheduled",
        "_sent",
        "_size",
        "_stopped",
    )

    def __init__(
        self, progress: Progress, event_loop: asyncio.AbstractEventLoop, capture: OutputCapture
    ) -> None:
        self._progress = progress
        self._capture = capture
        self._sent = 0
        self._event_loop = event_loop
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending: list[str] = []
        self._size = 0
        self._scheduled = False
        self._stopped = False

    def __call__(self, chunk: bytes) -> None:
        self._capture(chunk)  # the result's copy: bounded, the rest spilled
        if self._stopped:
            return
        text = self._decoder.decode(chunk)
        room = MAX_LIVE_OUTPUT_CHARS - self._sent - self._size
        if len(text) > room:
            # Cut at the bound: a read can be a whole pipe's worth (64 KiB) under load,
            # and the live stream's bound is in characters, not in reads.
            if room > 0:
                self._pending.append(text[:room])
                self._size += room
            self._flush()
            self._stopped = True
            where = self._capture.spill
            self._progress.output(
                f"\n[live output stops after {MAX_LIVE_OUTPUT_CHARS} characters; the "
                "command goes on"
                + (f", its whole output is in {where.shown}]\n" if where else "]\n")
            )
            return
        if text:
            self._pending.append(text)
            self._size += len(text)
        if self._size >= PROGRESS_CHUNK_CHARS:
            self._flush()
        elif not self._scheduled:
            self._scheduled = True
            self._event_loop.call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._scheduled = False
        if not self._stopped:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            text = "".join(self._pending)
            self._pending.clear()
            self._sent += self._size
            self._size = 0
            self._progress.output(text)

    def stop(self, *, flush: bool = True) -> None:
        if self._stopped:
            return
        self._stopped = True
        if flush:
            tail = self._decoder.decode(b"", final=True)
            if tail:
                self._pending.append(tail)
            self._flush()


class _Ended(enum.Enum):
    EXITED = "exited"
    TIMED_OUT = "timed out"
    DETACHED = "detached"


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _on_loop(event_loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
    """Token callback (any thread): resolve `future` on its loop."""
    with contextlib.suppress(RuntimeError):  # the loop closed: no one waits any more
        event_loop.call_soon_threadsafe(_resolve, future)


async def _wait_foreground(
    process: Command, limit: float, background: CancellationToken | None
) -> _Ended:
    """Wait until the command exits, `limit` seconds pass, or `background` fires."""
    event_loop = asyncio.get_running_loop()
    detach: asyncio.Future[None] = event_loop.create_future()
    handle = (
        background.add_callback(_on_loop, event_loop, detach) if background is not None else None
    )
    try:
        async with asyncio.timeout(limit):
            await asyncio.wait([process.exited, detach], return_when=asyncio.FIRST_COMPLETED)
    except TimeoutError:
        return _Ended.TIMED_OUT
    finally:
        if handle is not None:
            handle.remove()
        detach.cancel()
    return _Ended.EXITED if process.exited.done() else _Ended.DETACHED


async def _command_line(
    sandbox: Sandbox, command: str, ctx: ExecContext, protect: ProtectedSnapshot
) -> tuple[list[str], dict[str, str], bool]:
    """The argv and environment to run `command` with, and whether it holds the network:
    in the sandbox, or (only where it is unavailable and the run accepted that) as a plain
    shell, which always holds it."""
    shell = ["bash", "-c", command]
    try:
        await sandbox.require()
    except SandboxUnavailable as exc:
        if not ctx.jail.unsandboxed_shell:
            raise ToolError(str(exc)) from exc
        return shell, {**os.environ, "PAGER": "cat", "GIT_PAGER": "cat"}, True
    try:
        # Off the loop: as root, building the command grants the workspace to the
        # sandbox's uid, a walk of the whole tree.
        argv = await asyncio.to_thread(
            sandbox.command, shell, jail=ctx.jail.root, network=ctx.jail.network, protect=protect
        )
    except SandboxUnavailable as exc:
        raise ToolError(str(exc)) from exc
    return argv, sandbox.environment(), ctx.jail.network


def _reverted_note(protect: ProtectedSnapshot) -> str:
    """Undo the command's writes to protected paths missing at its start; a line saying
    so for the model, or "" when there were none."""
    reverted = protect.undo()
    if not reverted:
        return ""
    return (
        f"[reverted: the command wrote {', '.join(reverted)}, which no command may write "
        "(tiller's configuration, its state and git's internals are protected)]"
    )


def _render(capture: OutputCapture, ending: str) -> str:
    """The command's output (bounded: head, marker, tail), then a bracketed line saying
    how it ended."""
    text = capture.render()
    return f"{_line_end(text) or _line_end('(no output)')}[{ending}]"


def _line_end(text: str) -> str:
    """`text` ending with a newline, unless it is empty."""
    return text if not text or text.endswith("\n") else text + "\n"


async def _execute(
    sandbox: Sandbox, command: str, limit: float, background: bool, ctx: ExecContext
) -> ToolOutput:
    jobs = ctx.jobs if ctx.jobs is not None and not ctx.jobs.closed else None
    if background and jobs is None:
        raise ToolError(_NO_JOBS)
    protect = ProtectedSnapshot.take(ctx.jail.root, ctx.jail.protected)
    try:
        # (The interlock stops jobs that hold the network once the conversation holds
        # private data and untrusted input.)
        argv, env, network = await _command_line(sandbox, command, ctx, protect)
        # Before it can change anything (a background one: before it starts), so
        # `tiller rewind` can undo its edits; a snapshot that fails stops the command.
        await snapshot_before_command(ctx, command, background=background)
        if jobs is not None and (background or ctx.background.is_cancelled):
            job_id = await jobs.start(
                argv,
                command=command,
                cwd=ctx.jail.root,
                env=env,
                network=network,
                on_end=lambda: _reverted_note(protect),
                pass_fds=protect.fds(),
            )
            return ToolOutput(
                f"[started in the background as {job_id}; use background_process to read "
                "its output, wait for it or stop it]"
            )
        capture = OutputCapture(ctx.jail, ctx.call_id)
        relay = _Relay(ctx.progress, asyncio.get_running_loop(), capture)
        process = await spawn(
            argv,
            cwd=ctx.jail.root,
            env=env,
            output_limit=MAX_SHELL_OUTPUT_BYTES,
            listener=relay,
            pass_fds=protect.fds(),
        )
    except BaseException:
        # Cancelled while starting, the command may have run a moment before it was
        # killed: what it wrote to protected paths goes all the same.
        protect.undo()
        raise
    finally:
        protect.release()  # bwrap holds its own copies of the descriptors
    adopted = False
    try:
        ended = await _wait_foreground(process, limit, ctx.background if jobs is not None else None)
        if ended is _Ended.DETACHED and jobs is not None:
            relay.stop()
            job_id = jobs.adopt(
                process, command=command, network=network, on_end=lambda: _reverted_note(protect)
            )
            adopted = True
            so_far = jobs.read(job_id)
            dropped = f"[... {so_far.skipped} earlier bytes]\n" if so_far.skipped else ""
            return ToolOutput(
                f"{dropped}{_line_end(so_far.text)}[moved to the background as {job_id} "
                f"after {process.runtime():.1f}s; it keeps running: use background_process "
                "to read its output, wait for it or stop it]"
            )
    except BaseException:
        relay.stop(flush=False)  # the call has no result: nothing more to report
        raise
    finally:
        if not adopted:
            # Also after a normal exit: whatever the command left running goes too, which
            # lets its pipe reach EOF. On a cancel this is the shielded, bounded cleanup.
            await process.aclose()
            # Once the whole tree is gone, so nothing writes after the check.
            reverted = _reverted_note(protect)
        capture.close()
    relay.stop()
    if ended is _Ended.TIMED_OUT:
        note = f"timed out after {limit:g}s; the command and its processes were killed"
        return ToolOutput(_with_note(_render(capture, note), reverted), is_error=True)
    returncode = process.returncode
    text = _with_note(_render(capture, describe_exit(returncode)), reverted)
    return ToolOutput(text, is_error=returncode != 0 or bool(reverted))


def _with_note(text: str, note: str) -> str:
    return f"{text}\n{note}" if note else text


def _command_of(arguments: Mapping[str, Any]) -> str | None:
    """The command a call runs: the policy engine rates it with the shell classifier."""
    command = arguments.get("command")
    return command if isinstance(command, str) else None


def _risk_of_command(arguments: Mapping[str, Any]) -> RiskClass | None:
    """What the call declares beyond its command's rating: a call without a command
    string is a shell mutation (nothing to rate), one in the background at least a
    process; otherwise nothing (the classifier rates the command)."""
    if not isinstance(arguments.get("command"), str):
        return RiskClass.SHELL_MUTATION
    if arguments.get("background") is True:
        return RiskClass.PROCESS
    return None


def execute_command_tool(sandbox: Sandbox = DEFAULT_SANDBOX) -> FunctionTool:
    """The `execute_command` tool, running commands in `sandbox`."""

    @tool(
        name="execute_command",
        capabilities=Capability.PRIVATE_DATA
        | Capability.UNTRUSTED_INPUT
        | Capability.EXTERNAL_SEND,
        risk_of=_risk_of_command,
        command_of=_command_of,
        sandboxed=True,
        denial_remedy="Inspect the workspace with read_file, list_dir, glob and grep instead, "
        "or say which command you would run and why.",
    )
    async def execute_command(
        command: str,
        # The model's own limit, part of the schema; cancellation comes from the token.
        timeout: Annotated[float, Field(gt=0)] | None = None,  # noqa: ASYNC109
        background: bool = False,
        *,
        ctx: ExecContext,
    ) -> ToolOutput:
        """Run a bash command in the workspace root and return its combined stdout and
        stderr and its exit code; a non-zero exit code is an error. The command runs in a
        sandbox: the workspace is writable, the rest of the system read-only, /tmp and the
        home directory are empty and temporary, and the network is off unless this run
        allows it. stdin is empty, so the command must not wait for input; processes it
        leaves running are killed when it ends. For a server or a long build, pass
        background=true and follow it with background_process.

        Args:
            command: The bash command line, e.g. `pytest -q tests/test_app.py`.
            timeout: Seconds before the command is killed (default and maximum: the run's
                shell timeout). Does not apply to background commands.
            background: Start the command in the background and return at once with its
                id (bg-1, ...); read, wait for or stop it with background_process.
        """
        ceiling = ctx.jail.shell_timeout
        limit = ceiling if timeout is None else min(timeout, ceiling)
        return await _execute(sandbox, command, limit, background, ctx)

    return execute_command


#: The shell tool, over the process-wide default sandbox.
execute_command: Final = execute_command_tool()
